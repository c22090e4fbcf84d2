// The adventures page: import a file, confirm deletes (no inline script: the CSP allows none).
// An import answers with a job: done already for a small file, otherwise a worker imports it while
// this page polls the job and shows how far it is.
const STAGES = {checking: "Checking the file", story: "Writing the story", memories: "Writing the memories",
                summary: "Keeping your summary"};

function jobText(job) {
  if (job.status === "queued") return `"${job.title}": waiting for a worker…`;
  if (job.status === "retrying") return `"${job.title}": ${job.note}…`;
  const p = job.progress;
  if (!p) return `"${job.title}": importing…`;
  const counts = p.total ? ` (${p.done.toLocaleString()} of ${p.total.toLocaleString()})` : "";
  return `"${job.title}": ${STAGES[p.stage] || "Importing"}${counts}…`;
}

async function followImport(job, out, stay = false) {
  while (["queued", "running", "retrying"].includes(job.status)) {
    out.textContent = jobText(job);
    await new Promise((done) => setTimeout(done, 1000));
    const r = await apiFetch(`/api/imports/${job.id}/`);
    if (!r.ok) { out.textContent = errorText(r); return; }
    job = r.data;
  }
  if (job.status === "done" && stay) {  // the report stays on the page; the story is a link away
    out.replaceChildren("Made ", el("a", {href: `/play/${job.adventure_id}/`}, job.title), ".");
    return;
  }
  if (job.status === "done") { location.href = `/play/${job.adventure_id}/`; return; }
  out.textContent = `The import failed, nothing was stored: ${job.error ? job.error.detail : "unknown error"}`;
}

document.getElementById("import-file").addEventListener("change", async (e) => {
  const out = document.getElementById("import-result");
  let data;
  try {
    data = JSON.parse(await e.target.files[0].text());
  } catch (err) { out.textContent = "That file is not JSON."; return; }
  out.textContent = "Sending the file…";
  if (data && data.format === "everlore.adventure") {  // an export of this site
    const r = await apiFetch("/api/adventures/import/", {method: "POST", body: JSON.stringify(data)});
    if (!r.ok) { out.textContent = errorText(r); return; }
    await followImport(r.data, out);
    return;
  }
  // another site's story (NovelAI, KoboldAI): the report says what came in, and what did not
  const r = await apiUpload("/api/adventures/import/story/", e.target.files[0]);
  if (!r.ok) { out.textContent = errorText(r); return; }
  const done = el("p", {});
  out.replaceChildren(done, el("p", {}, "What came in, and what did not:"), reportList(r.data.report));
  await followImport(r.data.job, done, true);
});
document.querySelectorAll("form.confirm-delete").forEach((form) => {
  form.addEventListener("submit", (e) => { if (!confirm("Delete this adventure?")) e.preventDefault(); });
});
async function importCard(file, personaName) {
  const out = document.getElementById("card-result");
  out.textContent = "Reading the card…";
  const query = personaName ? `?persona_name=${encodeURIComponent(personaName)}` : "";
  const r = await apiUpload(`/api/adventures/import/character/${query}`, file);
  if (!r.ok && r.data && r.data.error === "persona_needed") {  // the card calls the player {{user}}: ask a name
    const name = el("input", {type: "text", id: "card-persona", maxlength: "100", required: "", autocomplete: "nickname"});
    const form = el("form", {class: "inline-form"},
      el("label", {for: "card-persona"}, "This card calls you by name. Your name in this story: "), name,
      el("button", {type: "submit"}, "Start the adventure"),
      el("p", {class: "hint"}, "Or set your persona once in ", el("a", {href: "/settings/#persona"}, "Settings"), "."));
    form.addEventListener("submit", (ev) => { ev.preventDefault(); if (name.value.trim()) importCard(file, name.value.trim()); });
    out.replaceChildren(form);
    name.focus();
    return;
  }
  if (!r.ok) { out.textContent = errorText(r); return; }
  out.replaceChildren(
    el("p", {}, "Made ", el("a", {href: `/play/${r.data.adventure.id}/`}, r.data.adventure.title), ". What came in, and what did not:"),
    reportList(r.data.report));
}
document.getElementById("card-file").addEventListener("change", (e) => importCard(e.target.files[0]));

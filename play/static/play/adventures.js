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
async function importCard(file, personaName, greeting) {
  const out = document.getElementById("card-result");
  out.textContent = "Reading the card…";
  const params = new URLSearchParams();
  if (personaName) params.set("persona_name", personaName);
  if (greeting === undefined) {  // first a look: its greetings to choose from, whether it needs your name
    params.set("preview", "true");
    const look = await apiUpload(`/api/adventures/import/character/?${params}`, file);
    if (!look.ok) { out.textContent = errorText(look); return; }
    if (look.data.greetings.length > 1 || look.data.persona_needed) { chooseForCard(file, look.data, personaName); return; }
    params.delete("preview");
    greeting = 0;
  }
  params.set("greeting", String(greeting));
  const r = await apiUpload(`/api/adventures/import/character/?${params}`, file);
  if (!r.ok) { out.textContent = errorText(r); return; }
  out.replaceChildren(
    el("p", {}, "Made ", el("a", {href: `/play/${r.data.adventure.id}/`}, r.data.adventure.title), ". What came in, and what did not:"),
    reportList(r.data.report));
}
// A card with several greetings, or one that calls the player by name: the choice before anything is made.
function chooseForCard(file, look, personaName) {
  const out = document.getElementById("card-result");
  const form = el("form", {class: "inline-form card-choice"});
  let name = null;
  if (look.persona_needed) {
    name = el("input", {type: "text", id: "card-persona", maxlength: "100", required: "", autocomplete: "nickname"});
    form.append(el("label", {for: "card-persona"}, `${look.name} calls you by name. Your name in this story: `), name,
      el("p", {class: "hint"}, "Or set your persona once in ", el("a", {href: "/settings/#persona"}, "Settings"), "."));
  }
  if (look.greetings.length > 1) {
    const list = el("fieldset", {class: "greetings"}, el("legend", {}, `${look.name} has ${look.greetings.length} greetings: open the story with`));
    const labels = look.greetings.map((text, n) => {
      const id = `greeting-${n}`;
      const label = el("label", {for: id});
      list.append(el("div", {class: "greeting"},
        el("input", {type: "radio", name: "greeting", id, value: String(n), ...(n === 0 ? {checked: ""} : {})}), label));
      return [label, text.length > 220 ? text.slice(0, 220) + "…" : text];
    });
    // each greeting as it will read: {{user}} becomes the name typed
    const fill = () => labels.forEach(([label, text]) => label.replaceChildren(
      ...styled(name && name.value.trim() ? text.replaceAll("{{user}}", name.value.trim()) : text)));
    fill();
    if (name) name.addEventListener("input", fill);
    form.append(list);
  }
  form.append(el("button", {type: "submit"}, "Start the adventure"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const chosen = form.querySelector('input[name="greeting"]:checked');
    const given = name ? name.value.trim() : personaName;
    if (name && !given) return;
    importCard(file, given, chosen ? Number(chosen.value) : 0);
  });
  out.replaceChildren(form);
  (name || form.querySelector("input")).focus();
}
document.getElementById("card-file").addEventListener("change", (e) => importCard(e.target.files[0]));

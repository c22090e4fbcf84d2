// The library's pages: covers, the start dialog, the share link, and the scenario editor (which
// reads and saves through /api/scenarios/). Text from players is only ever set as textContent or value.
document.querySelectorAll("[data-color]").forEach((node) => {
  if (/^#[0-9a-fA-F]{6}$/.test(node.dataset.color)) node.style.backgroundColor = node.dataset.color;
});
document.querySelectorAll("form.confirm-delete").forEach((form) => {
  form.addEventListener("submit", (e) => { if (!confirm("Delete this scenario? Stories started from it keep their copy.")) e.preventDefault(); });
});

const startDialog = document.getElementById("start-dialog");
if (startDialog) {
  const opener = document.getElementById("play-open");
  opener.addEventListener("click", () => {
    // nothing to ask: one click starts the story
    if (opener.dataset.questions === "0") document.getElementById("start-form").requestSubmit();
    else startDialog.showModal();
  });
  document.getElementById("start-cancel").addEventListener("click", () => startDialog.close());
  if (startDialog.dataset.open) startDialog.showModal();
}
const shareLink = document.getElementById("share-link");
if (shareLink) shareLink.textContent = location.origin + shareLink.dataset.path;

const scenarioForm = document.getElementById("scenario-form");
const TEXT = ["title", "description", "opening", "plot_essentials", "ai_instructions", "authors_note", "rating", "cover_emoji", "cover_color"];

function cardRowAdd(card = {}) {
  const row = document.getElementById("card-row").content.firstElementChild.cloneNode(true);
  for (const input of row.querySelectorAll("[data-card]")) {
    const name = input.dataset.card;
    if (name === "in_cast") input.checked = card.in_cast ?? true;
    else if (name === "keys") input.value = (card.keys || []).join(", ");
    else if (card[name] !== undefined) input.value = card[name];
  }
  row.querySelector(".remove-card").addEventListener("click", () => row.remove());
  document.getElementById("card-rows").append(row);
  return row;
}

function scenarioBody() {
  const body = {};
  for (const name of TEXT) body[name] = scenarioForm.elements[name].value;
  body.tags = scenarioForm.elements.tags.value.split(",").map((t) => t.trim()).filter(Boolean);
  body.cards = [...document.querySelectorAll("#card-rows .card-row")].map((row) => {
    const card = {};
    for (const input of row.querySelectorAll("[data-card]")) {
      const name = input.dataset.card;
      if (name === "in_cast") card.in_cast = input.checked;
      else if (name === "keys") card.keys = input.value.split(",").map((k) => k.trim()).filter(Boolean);
      else card[name] = input.value;
    }
    return card;
  });
  return body;
}

function scenarioErrorText(r) {
  if (!r.data || r.data.detail) return errorText(r);
  // a field's errors, and a card's by its number in the list
  const lines = [];
  for (const [field, errors] of Object.entries(r.data)) {
    if (field === "cards" && Array.isArray(errors)) {
      errors.forEach((e, i) => { if (e && Object.keys(e).length) lines.push(`card ${i + 1}: ${Object.entries(e).map(([k, v]) => `${k} ${[].concat(v).join(" ")}`).join("; ")}`); });
    } else if (field === "tags" && !Array.isArray(errors)) {
      lines.push(`tags: ${Object.values(errors).flat().join(" ")}`);
    } else lines.push(`${field}: ${[].concat(errors).map((x) => typeof x === "string" ? x : JSON.stringify(x)).join(" ")}`);
  }
  return lines.join("; ");
}

async function scenarioLoad(key) {
  const r = await apiFetch(`/api/scenarios/${encodeURIComponent(key)}/`);
  if (!r.ok) { document.getElementById("scenario-result").textContent = errorText(r); return; }
  for (const name of TEXT) if (r.data[name] !== undefined && r.data[name] !== "") scenarioForm.elements[name].value = r.data[name];
  scenarioForm.elements.tags.value = r.data.tags.join(", ");
  r.data.cards.forEach((card) => cardRowAdd(card));
  scenarioForm.querySelector("fieldset").disabled = false;
  scenarioForm.dataset.loaded = "1";
}

if (scenarioForm) {
  const key = scenarioForm.dataset.key;
  document.getElementById("add-card").addEventListener("click", () => cardRowAdd().querySelector("input").focus());
  scenarioForm.addEventListener("submit", async (e) => {
    e.preventDefault();
    const result = document.getElementById("scenario-result");
    result.textContent = "Saving…";
    const r = key
      ? await apiFetch(`/api/scenarios/${encodeURIComponent(key)}/`, {method: "PATCH", body: JSON.stringify(scenarioBody())})
      : await apiFetch("/api/scenarios/", {method: "POST", body: JSON.stringify(scenarioBody())});
    if (!r.ok) { result.textContent = scenarioErrorText(r); result.className = "error"; return; }
    location.assign(`/library/s/${encodeURIComponent(r.data.key)}/`);
  });
  if (key) scenarioLoad(key);
  else scenarioForm.dataset.loaded = "1";
}

const scenarioFile = document.getElementById("scenario-file");
if (scenarioFile) {
  scenarioFile.addEventListener("change", async () => {
    const out = document.getElementById("scenario-import-result");
    let doc;
    try { doc = JSON.parse(await scenarioFile.files[0].text()); } catch (e) { out.textContent = "That file is not JSON: export a scenario from its page."; out.className = "error"; return; }
    out.textContent = "Importing…";
    const r = await apiFetch("/api/scenarios/import/", {method: "POST", body: JSON.stringify(doc)});
    if (!r.ok) { out.textContent = scenarioErrorText(r); out.className = "error"; return; }
    location.assign(`/library/s/${encodeURIComponent(r.data.key)}/`);
  });
}

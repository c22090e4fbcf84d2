const form = document.getElementById("settings");
const result = document.getElementById("settings-result");
const numeric = ["context_tokens", "max_output_tokens", "reasoning_max_tokens", "memory_top_k", "memory_bank_capacity", "temperature"];
const optional = ["top_p", "top_k", "min_p", "repetition_penalty", "frequency_penalty", "presence_penalty"];  // blank: not sent

async function load() {
  const r = await apiFetch("/api/settings/");
  for (const [k, v] of Object.entries(r.data)) {
    if (!form.elements[k] || k === "api_key") continue;
    form.elements[k].value = k === "stop" ? (v || []).join("\n") : v ?? "";
  }
  if (presets.length) activePreset();
  document.getElementById("key-state").textContent = r.data.has_api_key ? `Key set, ends in ${r.data.api_key_last4}` : "No key set";
  form.querySelector("fieldset").disabled = false;  // editable only once the stored values are in
  form.dataset.loaded = "1";
}
form.addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = {};
  for (const input of form.elements) {
    if (!input.name || (input.name === "api_key" && !input.value) || (input.name === "preset" && !input.value)) continue;
    if (input.name === "stop") body.stop = input.value.split("\n").filter((line) => line.length);
    else if (optional.includes(input.name)) body[input.name] = input.value === "" ? null : Number(input.value);
    else body[input.name] = numeric.includes(input.name) ? Number(input.value) : input.value;
  }
  delete body.preset;  // the boxes hold the preset's values (or the player's changes to them)
  const r = await apiFetch("/api/settings/", {method: "PATCH", body: JSON.stringify(body)});
  result.textContent = !r.ok ? errorText(r) : r.data.api_key_cleared
    ? "Saved. The endpoint moved to another host, so the key entered for the old one was removed: enter the key for this endpoint."
    : "Saved.";
  result.className = r.ok ? "ok" : "error";
  if (r.ok) { form.elements.api_key.value = ""; load(); }
});
// Load models and Test connection use what the form holds now, saved or not; each answers beside its button
function typed() {
  const body = {endpoint_url: form.elements.endpoint_url.value.trim(), model: form.elements.model.value.trim()};
  if (form.elements.api_key.value) body.api_key = form.elements.api_key.value;
  return JSON.stringify(body);
}
document.getElementById("test").addEventListener("click", async () => {
  const out = document.getElementById("test-result");
  out.textContent = "Testing…"; out.className = "";
  const r = await apiFetch("/api/settings/test/", {method: "POST", body: typed()});
  out.textContent = r.ok ? `Connected: ${r.data.model} answered in ${r.data.latency_ms} ms.` : errorText(r);
  out.className = r.ok ? "ok" : "error";
});
document.getElementById("list-models").addEventListener("click", async () => {
  const out = document.getElementById("models-result");
  out.textContent = "Asking the endpoint…"; out.className = "";
  const r = await apiFetch("/api/settings/models/", {method: "POST", body: typed()});
  if (!r.ok) { out.textContent = errorText(r); out.className = "error"; return; }
  document.getElementById("model-list").replaceChildren(...r.data.models.map((id) => el("option", {value: id})));
  out.textContent = `${r.data.models.length} models listed: pick one in the Model box.`;
  out.className = "ok";
});
// A preset fills the sampling boxes at once; the preset whose values the boxes hold shows as active
let presets = [];
const sampled = ["temperature", ...optional];
function activePreset() {
  const same = (p) => sampled.every((k) => {
    const box = form.elements[k].value, want = p.values[k];
    return want === undefined || want === null ? box === "" : box !== "" && Math.abs(Number(box) - want) < 1e-9;
  });
  const found = presets.find(same);
  form.elements.preset.value = found ? found.name : "";
  document.getElementById("preset-active").textContent = found ? `Active: ${found.name}` : "Your own values";
}
form.elements.preset.addEventListener("change", () => {
  const p = presets.find((x) => x.name === form.elements.preset.value);
  if (p) for (const k of sampled) form.elements[k].value = p.values[k] ?? "";
  activePreset();
});
for (const k of sampled) form.elements[k].addEventListener("input", activePreset);
apiFetch("/api/settings/presets/").then((r) => {
  if (!r.ok) return;
  presets = r.data.presets;
  form.elements.preset.append(...presets.map((p) => el("option", {value: p.name}, `${p.name}: ${p.note}`)));
  if (form.dataset.loaded) activePreset();
});
load();

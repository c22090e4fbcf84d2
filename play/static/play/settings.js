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
  form.elements.preset.value = "";
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
  if (body.preset) {  // the preset sets the sampling: its values, not the boxes'
    for (const name of [...optional, "temperature"]) delete body[name];
  }
  const r = await apiFetch("/api/settings/", {method: "PATCH", body: JSON.stringify(body)});
  result.textContent = !r.ok ? errorText(r) : r.data.api_key_cleared
    ? "Saved. The endpoint moved to another host, so the key entered for the old one was removed: enter the key for this endpoint."
    : "Saved.";
  result.className = r.ok ? "ok" : "error";
  if (r.ok) { form.elements.api_key.value = ""; load(); }
});
document.getElementById("test").addEventListener("click", async () => {
  result.textContent = "Testing…";
  const r = await apiFetch("/api/settings/test/", {method: "POST"});
  result.textContent = r.ok ? `Connected: ${r.data.model} answered in ${r.data.latency_ms} ms.` : errorText(r);
  result.className = r.ok ? "ok" : "error";
});
document.getElementById("list-models").addEventListener("click", async () => {
  result.textContent = "Asking the endpoint…";
  const r = await apiFetch("/api/settings/models/");
  if (!r.ok) { result.textContent = errorText(r); result.className = "error"; return; }
  document.getElementById("model-list").replaceChildren(...r.data.models.map((id) => el("option", {value: id})));
  result.textContent = `${r.data.models.length} models listed: pick one in the Model box.`;
  result.className = "ok";
});
apiFetch("/api/settings/presets/").then((r) => {
  if (r.ok) document.getElementById("preset").append(...r.data.presets.map((p) => el("option", {value: p.name}, `${p.name}: ${p.note}`)));
});
load();

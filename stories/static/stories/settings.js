const form = document.getElementById("settings");
const result = document.getElementById("settings-result");
const numeric = ["context_tokens", "max_output_tokens", "reasoning_max_tokens", "memory_top_k", "memory_bank_capacity"];

async function load() {
  const r = await apiFetch("/api/settings/");
  for (const [k, v] of Object.entries(r.data)) { if (form.elements[k] && k !== "api_key") form.elements[k].value = v ?? ""; }
  document.getElementById("key-state").textContent = r.data.has_api_key ? `Key set, ends in ${r.data.api_key_last4}` : "No key set";
  form.querySelector("fieldset").disabled = false;  // editable only once the stored values are in
  form.dataset.loaded = "1";
}
form.addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = {};
  for (const input of form.elements) {
    if (!input.name || (input.name === "api_key" && !input.value)) continue;
    body[input.name] = numeric.includes(input.name) ? Number(input.value) : input.name === "temperature" ? Number(input.value) : input.value;
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
load();

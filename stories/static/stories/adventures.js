// The adventures page: import a file, confirm deletes (no inline script: the CSP allows none).
document.getElementById("import-file").addEventListener("change", async (e) => {
  const out = document.getElementById("import-result");
  try {
    const data = JSON.parse(await e.target.files[0].text());
    const r = await apiFetch("/api/adventures/import/", {method: "POST", body: JSON.stringify(data)});
    if (r.ok) { location.href = `/play/${r.data.id}/`; } else { out.textContent = errorText(r); }
  } catch (err) { out.textContent = "That file is not JSON."; }
});
document.querySelectorAll("form.confirm-delete").forEach((form) => {
  form.addEventListener("submit", (e) => { if (!confirm("Delete this adventure?")) e.preventDefault(); });
});

// Joining a story by its link: the character chosen (one of the story's, or someone new), then the story.
(function join() {
  const postTo = document.body.dataset.postTo;
  const form = document.getElementById("join-form");
  const line = document.getElementById("status");
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const picked = form.elements.card ? form.elements.card.value : null;
    let body = {};
    if (picked === "new") body = {character: {name: form.elements.name.value.trim(), description: form.elements.description.value.trim()}};
    else if (picked) body = {character: {card: Number(picked)}};
    const r = await apiFetch(postTo, {method: "POST", body: JSON.stringify(body)});
    if (r.ok) { window.location.href = `/play/${r.data.adventure.id}/`; return; }
    line.textContent = errorText(r);
    line.className = "status error";
  });
})();

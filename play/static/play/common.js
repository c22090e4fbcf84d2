// Shared helpers: JSON calls to the site's own API with the session and CSRF token.
function csrfToken() {
  const m = document.cookie.match(/(?:^|; )csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}
async function apiFetch(url, options = {}) {
  const response = await fetch(url, {
    credentials: "same-origin",
    ...options,
    headers: Object.fromEntries(Object.entries(
      {"Content-Type": "application/json", "X-CSRFToken": csrfToken(), ...(options.headers || {})}).filter(([, v]) => v !== undefined)),
  });
  let data = null;
  if (response.status !== 204) { try { data = await response.json(); } catch (e) { data = null; } }
  const total = response.headers.get("X-Total-Count");
  return {ok: response.ok, status: response.status, data, total: total === null ? null : Number(total)};
}
// A file sent as multipart form data (a PNG card, a lorebook): the browser sets the boundary.
async function apiUpload(url, file) {
  const form = new FormData();
  form.append("file", file);
  return apiFetch(url, {method: "POST", body: form, headers: {"Content-Type": undefined}});
}
function reportList(report) {
  return el("ul", {class: "report"}, ...report.map((line) => el("li", {}, `${line.place}: ${line.what}`)));
}
function errorText(r) {
  if (!r.data) return `Error ${r.status}`;
  if (r.data.detail) return r.data.detail;
  return Object.entries(r.data).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; ");
}
// A passage's *actions* (the roleplay field's asterisks) in italics: text nodes and <em>, never markup
function styled(text) {
  const nodes = [];
  let at = 0;
  for (const m of text.matchAll(/\*([^*\n]+)\*/g)) {
    if (m.index > at) nodes.push(text.slice(at, m.index));
    nodes.push(el("em", {}, m[1]));
    at = m.index + m[0].length;
  }
  if (at < text.length) nodes.push(text.slice(at));
  return nodes;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}
// Secrets in a story played together: the "To" choice of a turn box (everyone, the narrator alone, or
// a whisper to a character) as the turn's fields, the choice filled from the story's characters, and
// the mark a secret carries on the pages of those it was told to.
function audienceOf(select) {
  if (!select || select.hidden || !select.value) return {};
  return select.value === "!private" ? {private: true} : {to: [select.value]};
}
function audienceFill(select, names, own) {
  if (!select) return;
  const kept = select.value;
  select.replaceChildren(el("option", {value: ""}, "To everyone"), el("option", {value: "!private"}, "Privately, to the narrator"),
    ...names.filter((n) => n !== own).map((n) => el("option", {value: n}, `Whisper to ${n}`)));
  select.value = [...select.options].some((o) => o.value === kept) ? kept : "";
  select.hidden = false;
}
function secretMark(a) {
  return a.told_to ? el("span", {class: "secret", title: "only those it was told to see this"}, `🔒 ${a.told_to}`) : "";
}
// The local demo model getting ready (its first run builds it): the notice asks every 10 s and says
// when it has joined, so a player waiting on the page knows when their turns play.
(function watchDemoModel() {
  const notice = document.querySelector(".demo-waiting");
  if (!notice) return;
  const timer = setInterval(async () => {
    const r = await apiFetch("/api/settings/demo/").catch(() => null);
    if (!r || !r.ok || !r.data) return;
    if (r.data.state === "ready") {
      clearInterval(timer);
      notice.classList.remove("demo-waiting");
      notice.classList.add("demo-ready");
      notice.textContent = "The site's demo model is ready: your turns play now.";
    } else {
      if (r.data.state === "failed") clearInterval(timer);
      notice.querySelector(".demo-message").textContent = r.data.message;
    }
  }, 10000);
})();

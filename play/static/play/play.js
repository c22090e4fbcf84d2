// The play page: the story on the current branch, turns, takes, undo, edit, fork,
// branches, the memory drawer and Insights, all through the JSON API.
const A = document.body.dataset.adventure;
const base = `/api/adventures/${A}`;
const $ = (id) => document.getElementById(id);
const statusLine = $("status");

function say(text, kind = "") { statusLine.textContent = text; statusLine.className = `status ${kind}`; }

// The story loads a page at a time: the newest 200 actions, older ones as the player scrolls up.
const PAGE = 200;
let olderBefore = null;  // the ?before= of the next older page, null once the opening is loaded
// Loads of the story overlap (a turn's end, undo, the live stream's news); only the newest one asked
// for is drawn, so an answer that was on its way while the story changed never draws it back.
let storyAsked = 0;
$("story").addEventListener("scroll", () => { if ($("story").scrollTop < 150) loadEarlier(); }, {passive: true});

function earlierButton() {
  const li = el("li", {class: "more", id: "load-earlier"},
    el("button", {type: "button", class: "link", onclick: () => loadEarlier()}, "Load earlier actions"));
  return li;
}

let loadingEarlier = null;
function loadEarlier() {
  if (olderBefore === null) return Promise.resolve();
  if (!loadingEarlier) loadingEarlier = (async () => {
    const asked = storyAsked;
    const r = await apiFetch(`${base}/story/?limit=${PAGE}&before=${olderBefore}`);
    if (asked !== storyAsked) return;  // the story was drawn again meanwhile: its pages start afresh
    if (!r.ok) return say(errorText(r), "error");
    const list = $("story"), keep = list.scrollHeight - list.scrollTop;
    $("load-earlier")?.remove();
    olderBefore = r.data.next_before;
    list.prepend(...(olderBefore === null ? [] : [earlierButton()]), ...r.data.actions.map((a) => renderAction(a, false)));
    list.scrollTop = list.scrollHeight - keep;  // the passage being read stays where it was
  })().finally(() => { loadingEarlier = null; });
  return loadingEarlier;
}

async function loadStory() {
  const asked = ++storyAsked;
  const r = await apiFetch(`${base}/story/?limit=${PAGE}`);
  if (asked !== storyAsked) return;  // a newer load is on its way: it draws the story as it stands
  if (!r.ok) return say(errorText(r), "error");
  const list = $("story");
  list.replaceChildren();
  const actions = r.data.actions;
  olderBefore = r.data.next_before;
  $("redo").disabled = !r.data.can_redo;  // enabled only while an undone turn waits at the tip
  if (olderBefore !== null) list.append(earlierButton());
  actions.forEach((a, i) => list.append(renderAction(a, i === actions.length - 1)));
  list.scrollTop = list.scrollHeight;  // the story's own scroll: the page (and the turn box) stays put
}

function renderAction(a, last) {
  const item = el("li", {class: `action kind-${a.kind}`, "data-id": a.id, "data-depth": a.depth});
  const who = a.actor ? `${a.actor}: ` : "> ";  // a member's turn in a story played together: their character
  const text = el("p", {class: "text"}, ...styled(a.kind === "do" ? `${who}${a.text}` : a.kind === "say" ? `${who}"${a.text}"` : a.text));
  // the passage's tools wait in a small menu: one "⋯" a passage, not three links under each
  const menu = el("div", {class: "tools"},
    el("button", {type: "button", class: "link", onclick: () => startEdit(item, a)}, "Edit"),
    el("button", {type: "button", class: "link", onclick: () => fork(a)}, "Fork here"));
  if (a.kind !== "start") menu.append(el("button", {type: "button", class: "link danger", onclick: () => removeAction(a)}, "Delete"));
  const tools = el("div", {class: "action-tools"},
    el("details", {class: "action-menu"}, el("summary", {"aria-label": `Edit, fork or delete action ${a.depth}`, title: "Edit, fork or delete"}, "⋯"), menu));
  if (last && a.take_count > 1 || last && (a.kind === "ai" || a.kind === "continue")) tools.prepend(takesControl(a));
  item.append(secretMark(a), text, tools);
  return item;
}

function takesControl(a) {
  const box = el("span", {class: "takes"});
  apiFetch(`${base}/actions/${a.id}/takes/`).then((r) => {
    const takes = r.data.takes;
    if (takes.length < 2) return;
    const at = takes.findIndex((t) => t.live);
    const pick = (i) => async () => {
      const s = await apiFetch(`${base}/actions/${a.id}/takes/`, {method: "POST", body: JSON.stringify({take_id: takes[i].id})});
      if (!s.ok) say(errorText(s), "error");
      loadStory();
    };
    box.append(
      el("button", {type: "button", class: "link", "aria-label": "Previous take", onclick: pick((at - 1 + takes.length) % takes.length)}, "◀"),
      el("span", {class: "take-count"}, `${at + 1} of ${takes.length}`),
      el("button", {type: "button", class: "link", "aria-label": "Next take", onclick: pick((at + 1) % takes.length)}, "▶"));
  });
  return box;
}

function startEdit(item, a) {
  const area = el("textarea", {rows: 3, "aria-label": "Edit action"});
  area.value = a.text;
  const save = el("button", {type: "button", onclick: async () => {
    const r = await apiFetch(`${base}/actions/${a.id}/`, {method: "PATCH", body: JSON.stringify({text: area.value})});
    if (!r.ok) return say(errorText(r), "error");
    loadStory();
  }}, "Save");
  item.replaceChildren(area, el("div", {class: "tools"}, save, el("button", {type: "button", onclick: loadStory}, "Cancel")));
  area.focus();
}

async function fork(a) {
  const r = await apiFetch(`${base}/actions/${a.id}/fork/`, {method: "POST", body: JSON.stringify({checkout: true})});
  if (!r.ok) return say(errorText(r), "error");
  say(`Forked: now playing "${r.data.name}".`);
  await loadBranches(); loadStory();
}

async function removeAction(a) {
  if (!confirm("Delete this action?")) return;
  const r = await apiFetch(`${base}/actions/${a.id}/`, {method: "DELETE"});
  if (!r.ok) say(errorText(r), "error");
  loadStory();
}

async function loadBranches() {
  const r = await apiFetch(`${base}/branches/`);
  const select = $("branches");
  select.replaceChildren(...r.data.map((b) => { const o = el("option", {value: b.id}, `${b.name || "branch " + b.id} (${b.tip_depth})`); o.selected = b.is_head; return o; }));
  branchTree(r.data);
}

// The branches as a tree (each under the one it forked from), to rename, switch to or delete.
function branchTree(branches) {
  const children = (parent) => branches.filter((b) => b.parent === parent || (parent === null && !branches.some((p) => p.id === b.parent)));
  const node = (b) => el("li", {class: b.is_head ? "head" : "", "data-branch": b.id},
    el("span", {class: "branch-name"}, `${b.name || "branch " + b.id}`),
    el("span", {class: "muted"}, ` · ${b.tip_depth} actions${b.parent ? `, forked at ${b.fork_depth}` : ""}${b.is_head ? " · playing" : ""} `),
    ...(b.is_head ? [] : [el("button", {type: "button", class: "link", onclick: () => switchTo(b.id)}, "Play this")]),
    el("button", {type: "button", class: "link", onclick: () => renameBranch(b)}, "Rename"),
    ...(b.is_head ? [] : [el("button", {type: "button", class: "link danger", onclick: () => deleteBranch(b)}, "Delete")]),
    ...(children(b.id).length ? [el("ul", {}, ...children(b.id).map(node))] : []));
  $("branch-tree").replaceChildren(...children(null).map(node));
}
async function switchTo(id) {
  const r = await apiFetch(`${base}/branches/${id}/checkout/`, {method: "POST"});
  if (!r.ok) say(errorText(r), "error");
  loadStory(); loadBranches(); loadBank();
}
async function renameBranch(b) {
  const name = prompt("New name for this branch", b.name || "");
  if (name === null) return;
  const r = await apiFetch(`${base}/branches/${b.id}/`, {method: "PATCH", body: JSON.stringify({name})});
  if (!r.ok) say(errorText(r), "error");
  loadBranches();
}
async function deleteBranch(b) {
  if (!confirm(`Delete the branch "${b.name || "branch " + b.id}" and its story? This cannot be undone.`)) return;
  const r = await apiFetch(`${base}/branches/${b.id}/`, {method: "DELETE"});
  if (!r.ok) say(errorText(r), "error");
  loadBranches();
}
$("branches").addEventListener("change", async (e) => {
  const r = await apiFetch(`${base}/branches/${e.target.value}/checkout/`, {method: "POST"});
  if (!r.ok) say(errorText(r), "error");
  loadStory(); loadBank();
});

// A turn streams its reply (server-sent events): the text appears as the model
// writes it, and Stop cancels the model call; the text written so far is kept.
let writing = null;  // the AbortController of the reply being written

function parseEvent(block) {
  let name = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data += line.slice(6);
  }
  return data ? {name, data: JSON.parse(data)} : null;
}

async function readEvents(response, onToken) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "", last = null;
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return last;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const event = parseEvent(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (!event) continue;
      if (event.name === "token") onToken(event.data.text); else last = event;
    }
  }
}

// Resolves true when the reply was written (or stopped), false when it failed; ``failed(stored)``
// runs first, before the error is shown (``stored``: the player's action was kept all the same).
const BUSY_RETRIES = 5;  // times a turn the busy site refused is sent again by itself
const KEPT = "Your action is kept in the story: press Retry for its reply.";
// an error's sentence, capitalised and ended, then what happened to the player's action
function withKept(text, stored) {
  const sentence = text.charAt(0).toUpperCase() + text.slice(1);
  return stored ? `${/[.!?]$/.test(sentence) ? sentence : sentence + "."} ${KEPT}` : sentence;
}

async function play(path, body, failed = () => {}, key = "") {
  const buttons = document.querySelectorAll(".turn button:not(#stop)");
  buttons.forEach((b) => (b.disabled = true));
  writing = new AbortController();
  storyAsked++;  // a load still on its way must not wipe the reply being written: the turn's end draws the story
  $("stop").hidden = false;
  say("The story is being written…", "busy");
  // shown while it is written; the stored story replaces it when the reply is done or stopped
  const live = el("li", {class: "pending kind-ai reply"}, el("p", {class: "text"}, ""));
  try {
    let response;
    for (let attempt = 1; ; attempt++) {
      response = await fetch(`${base}${path}`, {
        method: "POST", credentials: "same-origin", signal: writing.signal, body: body ? JSON.stringify(body) : undefined,
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken(), "Accept": "text/event-stream",
                  ...(key ? {"Idempotency-Key": key} : {})},
      });
      // The site refused to start the turn (it is busy; nothing was stored): wait as told, then try again.
      if (response.status !== 503 || attempt > BUSY_RETRIES) break;
      const refusal = await response.clone().json().catch(() => null);
      if (!refusal || refusal.error !== "busy") break;
      const seconds = Number(response.headers.get("Retry-After")) || 3;
      say(`The site is busy; your turn was not started. Trying again in ${seconds} s…`, "busy");
      await new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, seconds * 1000);
        writing.signal.addEventListener("abort", () => { clearTimeout(timer); reject(new DOMException("stopped", "AbortError")); });
      });
      say("The story is being written…", "busy");
    }
    if (response.status === 202) {  // gathered turns: the action is kept; the round's narration comes for all
      say("Your action is in: the narration answers the round when everyone has written or it closes.");
      loadStory();
      return true;
    }
    if (!(response.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
      let data = null;
      try { data = await response.json(); } catch (e) { data = null; }
      const stored = Boolean(data && data.stored_actions && data.stored_actions.length);
      failed(stored);
      say(withKept(errorText({status: response.status, data}), stored), "error");
      return false;
    }
    if (body && body.mode && body.mode !== "continue") {  // the player's action is stored: show it at once
      const shown = body.mode === "do" ? `> ${body.text}` : body.mode === "say" ? `> "${body.text}"` : body.text;
      $("story").append(el("li", {class: `pending kind-${body.mode}`}, el("p", {class: "text"}, shown)));
    }
    $("story").append(live);
    const last = await readEvents(response, (text) => {
      live.firstChild.textContent += text;
      $("story").scrollTop = $("story").scrollHeight;  // the story scrolls, never the page
    });
    if (!last) { say("The connection closed before the reply was finished; what was written is kept.", "error"); return true; }
    if (last.name === "error") {  // the reply failed once it had begun: the action is stored
      const stored = Boolean(body && body.mode && body.mode !== "continue");
      failed(stored);
      say(withKept(errorText({status: last.data.status, data: last.data}), stored), "error");
      return false;
    }
    // A recall that could not embed its query says so (it used pinned memories only), as does a
    // convenience the site could not give this turn (its Idempotency-Key not kept).
    const told = [...(last.data.notices || []), ...(last.data.recall_note ? [`Memory: ${last.data.recall_note}`] : [])];
    say(told.join(" "), told.length ? "warn" : undefined);
    showUsed(last.data.memories || []);
    return true;
  } catch (e) {
    if (e.name !== "AbortError") { failed(); say(`The site could not be reached: ${e.message}`, "error"); return false; }
    say("Stopped. The text written so far is kept.");
    await storedAfterStop();
    return true;
  } finally {
    writing = null;
    $("stop").hidden = true;
    buttons.forEach((b) => (b.disabled = false));
    await Promise.all([loadStory(), loadBranches()]);
  }
}

async function storedAfterStop() {
  // The server keeps the stopped reply as soon as it sees the connection close; wait until the story is free again.
  for (let i = 0; i < 20; i++) {
    const r = await apiFetch(`${base}/`);
    if (r.ok && !r.data.generating) return;
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
}
$("stop").addEventListener("click", () => { if (writing) writing.abort(); });
let sending = null;  // the action being sent: its text, mode and idempotency key
function newKey() {
  return (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random().toString(36).slice(2)}`).replaceAll(".", "");
}
$("turn").addEventListener("submit", async (e) => {
  e.preventDefault();
  if (writing) return say("A reply is being written: wait for it, or press Stop.", "error");
  const text = $("text").value.trim();
  if (!text) return say("Write something first, or press Continue.", "error");
  const mode = $("mode").value;
  // one key per action the player writes: sent again (the same text after a failure), the stored
  // action is used again instead of being stored twice
  if (!sending || sending.text !== text || sending.mode !== mode) sending = {text, mode, key: newKey()};
  $("text").value = "";  // sent; given back when nothing was stored, as the error says what to fix
  const done = await play("/turns/", {mode, text, ...audienceOf($("to"))}, (stored) => {
    if (!stored && !$("text").value) $("text").value = text;
    if (stored) $("retry").focus();
  }, sending.key);
  if (done) sending = null;
});
$("text").addEventListener("keydown", (e) => { if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("turn").requestSubmit(); } });
$("save-scenario").addEventListener("click", async () => {
  const r = await apiFetch(`${base}/scenario/`, {method: "POST"});
  if (r.ok) location.assign(`/library/s/${encodeURIComponent(r.data.key)}/edit/`);
  else say(errorText(r), "error");
});
$("continue").addEventListener("click", () => play("/turns/", {mode: "continue", text: ""}));
$("retry").addEventListener("click", () => play("/retry/"));
$("undo").addEventListener("click", async () => {
  const r = await apiFetch(`${base}/undo/`, {method: "POST"});
  if (!r.ok) say(errorText(r), "error");
  else say(r.data.removed > 1 ? "Undone: your action and its reply. Redo brings them back." : "Undone. Redo brings it back.");
  loadStory(); loadBranches();
});
$("redo").addEventListener("click", async () => {
  const r = await apiFetch(`${base}/redo/`, {method: "POST"});
  if (!r.ok) say(errorText(r), "error"); else say("");
  loadStory(); loadBranches();
});

function showUsed(memories) {
  const list = $("used");
  list.replaceChildren(...(memories.length ? memories.map((m) => el("li", {class: m.pinned ? "pinned" : ""},
    m.text, el("span", {class: "sim"}, m.similarity == null ? "pinned" : `similarity ${m.similarity.toFixed(2)}`)))
    : [el("li", {class: "muted"}, "No memories were recalled for this turn.")]));
}

function memoryItem(m) {
  const flags = [m.pinned && "pinned", m.edited && "your words", m.stale && (m.edited ? "stale: its story was edited" : "stale: being rewritten"),
    m.forgotten && "forgotten", m.offline && "offline"].filter(Boolean);
  const item = el("li", {class: `memory ${flags.join(" ")}`, "data-id": m.id},
    el("p", {}, m.text), el("span", {class: "flags"}, flags.join(" · ")));
  const act = (body) => async () => { await apiFetch(`${base}/memories/${m.id}/`, {method: "PATCH", body: JSON.stringify(body)}); loadBank(); };
  item.append(el("div", {class: "tools"},
    el("button", {type: "button", class: "link", onclick: act({pinned: !m.pinned})}, m.pinned ? "Unpin" : "Pin"),
    el("button", {type: "button", class: "link", onclick: act({forgotten: !m.forgotten})}, m.forgotten ? "Restore" : "Forget"),
    el("button", {type: "button", class: "link", onclick: () => editMemory(item, m, act)}, "Edit"),
    el("button", {type: "button", class: "link danger", onclick: async () => {
      if (!confirm(`Delete this memory for good? (Forget keeps it, out of the prompt.)\n\n${m.text}`)) return;
      await apiFetch(`${base}/memories/${m.id}/`, {method: "DELETE"}); loadBank(); }}, "Delete")));
  return item;
}

function editMemory(item, m, act) {
  // in place, as a passage is edited: the text in a box, Save or Cancel
  const box = el("textarea", {rows: 3, maxlength: 1000, "aria-label": "Memory text"});
  box.value = m.text;
  const form = el("form", {class: "edit-memory"}, box, el("div", {class: "buttons"},
    el("button", {type: "submit"}, "Save"), el("button", {type: "button", class: "link", onclick: () => loadBank()}, "Cancel")));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (box.value.trim() && box.value !== m.text) await act({text: box.value})(); else loadBank();
  });
  item.replaceChildren(form);
  box.focus();
}

// Whose bank the drawer shows: "" for the story's own (the protagonist's), else a character card's id.
const whose = () => $("whose").value;
const bankUrl = (extra = "") => `${base}/memories/?${new URLSearchParams({...(whose() ? {character: whose()} : {}), ...extra})}`;

function moreButton(list, shown, total) {
  // The bank is paged (newest first): older memories come a page at a time.
  const more = el("li", {class: "muted"}, `Showing the newest ${shown} of ${total} memories. `,
    el("button", {type: "button", class: "link", onclick: async () => {
      const page = await apiFetch(bankUrl({offset: shown}));
      if (!page.ok) return say(errorText(page), "error");
      more.remove();
      list.append(...page.data.map(memoryItem));
      if (page.total > shown + page.data.length) list.append(moreButton(list, shown + page.data.length, page.total));
    }}, "Show older"));
  return more;
}

async function loadCast() {
  // The cast: the protagonist's memory is the story's own bank; each character card keeps its own.
  const cast = await apiFetch(`${base}/cast/`);
  if (!cast.ok) return;
  const chosen = whose();
  $("whose").replaceChildren(...cast.data.map((m) => el("option", {value: m.character ?? ""},
    m.protagonist ? `${m.name} (the story's own, ${m.memories})` : `${m.name} (${m.memories}${m.in_cast ? "" : ", not in the cast"})`)));
  $("whose").value = cast.data.some((m) => String(m.character ?? "") === chosen) ? chosen : "";
}

async function loadBank() {
  await loadCast();
  const [bank, summary] = await Promise.all([apiFetch(bankUrl()), apiFetch(`${base}/summary/`)]);
  $("summary").value = summary.data.story_summary;
  $("catching-up").hidden = !summary.data.catching_up;
  const list = $("bank");
  if (!bank.ok) return say(errorText(bank), "error");
  list.replaceChildren(...bank.data.map(memoryItem));
  if (!bank.data.length) list.append(el("li", {class: "muted"}, whose()
    ? "No memories yet: a character remembers the scenes it is in, from the memories written every 6 actions."
    : "No memories yet: they form every 6 actions once the story has 12."));
  if (bank.total > bank.data.length) list.append(moreButton(list, bank.data.length, bank.total));
}
$("refresh-bank").addEventListener("click", loadBank);
$("whose").addEventListener("change", loadBank);
$("new-memory").addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = {text: $("memory-text").value, ...(whose() ? {character: Number(whose())} : {})};
  const r = await apiFetch(`${base}/memories/`, {method: "POST", body: JSON.stringify(body)});
  if (!r.ok) return say(errorText(r), "error");
  $("memory-text").value = ""; loadBank();
});
$("save-summary").addEventListener("click", async () => {
  const r = await apiFetch(`${base}/summary/`, {method: "PUT", body: JSON.stringify({story_summary: $("summary").value})});
  say(r.ok ? "Summary saved." : errorText(r), r.ok ? "" : "error");
});
$("regen-summary").addEventListener("click", async () => {
  say("Rewriting the summary…", "busy");
  const r = await apiFetch(`${base}/summary/regenerate/`, {method: "POST"});
  say(r.ok ? "" : errorText(r), r.ok ? "" : "error");
  loadBank();
});

const PHONE = window.matchMedia("(max-width: 700px)");
function toggle(buttonId, panelId, onOpen) {
  $(buttonId).addEventListener("click", () => {
    const panel = $(panelId);
    if (PHONE.matches && panel.hidden) {  // on a phone one panel at a time, over the story, never below it
      for (const other of document.querySelectorAll(".drawer:not([hidden])")) {
        other.hidden = true;
        document.querySelector(`[aria-controls="${other.id}"]`)?.setAttribute("aria-expanded", "false");
      }
    }
    panel.hidden = !panel.hidden;
    if (PHONE.matches && !panel.hidden) {  // exactly over the story: the toolbar and the turn box stay
      const top = document.querySelector(".toolbar").getBoundingClientRect().bottom;
      panel.style.top = `${Math.round(top)}px`;
      panel.style.maxHeight = `${Math.round($("turn").getBoundingClientRect().top - top)}px`;
    }
    $(buttonId).setAttribute("aria-expanded", String(!panel.hidden));
    if (!panel.hidden) onOpen();
  });
}
toggle("toggle-drawer", "drawer", loadBank);
// Insights: the prompt the model reads, part by part in its order, each part's exact text a click away.
const PART_NAMES = {instructions: "Instructions", plot_essentials: "Plot essentials", summary: "Story so far",
  story: "Recent story", memories: "Memories recalled", knows: "What a character knows", cards: "Story cards",
  cards_before: "Story cards (before the story)", cards_at_depth: "Story cards (inside the story)",
  authors_note: "Author's note"};

function partItems(p) {
  if (p.name === "memories" || p.name === "knows") {
    return el("ul", {class: "items"}, ...p.items.map((m) => {
      const score = m.pinned ? "pinned" : m.similarity === null ? "no score" : `similarity ${m.similarity.toFixed(2)}`;
      const from = m.source_start === null ? "written by hand" : `from actions ${m.source_start}–${m.source_end}`;
      const link = m.source_start === null ? from : el("a", {href: "#", onclick: (e) => { e.preventDefault(); showPassage(m.source_start); }}, from);
      return el("li", {}, `#${m.id} · ${score} · ${m.tokens} tokens · `, link);
    }));
  }
  if (p.name.startsWith("cards")) {
    return el("ul", {class: "items"}, ...p.items.map((c) => el("li", {class: c.included ? "" : "muted"},
      `${c.name} (key "${c.key}"${c.via ? `, named in ${c.via}'s entry` : ""}${c.depth !== undefined ? `, ${c.depth} actions from the newest` : ""})`
      + (c.since === undefined ? "" : c.since === 0 ? " · as it was before the story" : ` · as changed at passage ${c.since}`)
      + (c.claims ? ` · with what the story changed: ${c.claims.map((k) => `${k.value} (passage ${k.since})`).join(", ")}` : "")
      + ` · ${c.tokens} tokens${c.included ? "" : " · left out: over the cards' share"}`)));
  }
  return null;
}

async function showPassage(depth) {
  while (!document.querySelector(`#story li[data-depth="${depth}"]`) && olderBefore !== null && depth < olderBefore) {
    await loadEarlier();
  }
  const item = document.querySelector(`#story li[data-depth="${depth}"]`);
  if (item) { item.scrollIntoView({block: "center", inline: "nearest"}); item.classList.add("flash"); setTimeout(() => item.classList.remove("flash"), 1500); }
  else say(`Action ${depth} is further back than the story loaded here.`, "warn");
}

async function loadInsights(which) {
  $("insights-next").setAttribute("aria-pressed", String(which === "next"));
  $("insights-last").setAttribute("aria-pressed", String(which === "last"));
  const r = await apiFetch(`${base}/insights/?turn=${which}`);
  if (!r.ok) { $("parts").replaceChildren(el("li", {class: "muted"}, errorText(r))); return; }
  const cache = [];
  if (r.data.prefix_reused !== null) cache.push(`starts with ${Math.round(r.data.prefix_reused * 100)}% of the last prompt sent`);
  const cached = which === "last" ? r.data.cached_tokens : r.data.last_cached_tokens;
  if (cached) cache.push(`the model served ${cached} tokens of ${which === "last" ? "this" : "the last turn's"} prompt from its cache`);
  const when = r.data.sent_at ? ` · sent ${new Date(r.data.sent_at).toLocaleTimeString()}` : "";
  $("parts").replaceChildren(el("li", {class: "muted"}, `${r.data.total_tokens} of ${r.data.budget} tokens (${r.data.encoding})${when}`),
    ...(cache.length ? [el("li", {class: "muted", id: "prefix-reused"}, `Prompt cache: ${cache.join("; ")}.`)] : []),
    ...(r.data.recall_note ? [el("li", {class: "warn", role: "alert"}, `Memory: ${r.data.recall_note}`)] : []),
    ...r.data.parts.map((p) => {
      const items = partItems(p);
      return el("li", {class: `part part-${p.name}`},
        el("details", {},
          el("summary", {}, el("strong", {}, `${PART_NAMES[p.name] || p.name} · ${p.tokens} tokens`), el("span", {class: "muted"}, ` — ${p.reason}`)),
          el("pre", {class: "part-text"}, p.text),
          ...(items ? [items] : [])));
    }),
    ...(r.data.untold && r.data.untold.length ? [el("li", {class: "part part-untold"},
      el("details", {open: ""},
        el("summary", {}, el("strong", {}, "Not told this turn"), el("span", {class: "muted"}, " — and why")),
        el("ul", {class: "untold"}, ...r.data.untold.map((u) => el("li", {},
          el("strong", {}, u.part === "card" ? `Card “${u.name}”` : PART_NAMES[u.part] || u.part), `: ${u.why}`,
          ...(u.when ? [el("span", {class: "muted"}, ` · ${u.when}`)] : []))))))] : []));
}
toggle("toggle-insights", "insights", () => loadInsights("next"));
$("insights-next").addEventListener("click", () => loadInsights("next"));
$("insights-last").addEventListener("click", () => loadInsights("last"));

const adventureForm = $("adventure-form");
async function loadWorld() {
  const [adv, cards] = await Promise.all([apiFetch(`${base}/`), apiFetch(`${base}/cards/?every=true`)]);
  for (const input of adventureForm.elements) {
    if (!input.name) continue;
    if (input.type === "checkbox") input.checked = adv.data[input.name]; else input.value = adv.data[input.name] ?? "";
  }
  $("cards").replaceChildren(...cards.data.map((c) => el("li", {class: c.present ? "memory" : "memory absent", "data-id": c.id},
    el("p", {}, el("strong", {}, `${c.name} `), el("span", {class: "flags"},
      [c.type, c.type === "character" && (c.in_cast ? "in the cast" : "not in the cast"), c.keys.join(", "), ...cardRules(c)].filter(Boolean).join(" · "))),
    el("p", {class: "muted"}, c.present ? c.entry : "Not on this branch (made on another, or deleted here): its history can bring it back."),
    ...(c.present && c.claims.length ? [cardClaims(c)] : []),
    el("div", {class: "tools"},
      ...(c.present ? [el("button", {type: "button", class: "link", onclick: () => editCard(c)}, "Edit")] : []),
      el("button", {type: "button", class: "link", onclick: (e) => showCardHistory(c, e.target.closest("li"))}, "History"),
      ...(c.type === "character" ? [el("a", {class: "card-export", href: `${base}/cards/${c.id}/character/?file=png`,
        download: "", title: "A SillyTavern character card (PNG, V2 and V3)"}, "Export as a card")] : []),
      ...(c.present ? [el("button", {type: "button", class: "link danger", onclick: async () => {
        if (!confirm(`Delete the card "${c.name}" from this point of this branch on?`)) return;
        await apiFetch(`${base}/cards/${c.id}/`, {method: "DELETE"}); loadWorld(); }}, "Delete")] : [])))));
  if (!cards.data.length) $("cards").append(el("li", {class: "muted"}, "No cards yet."));
  loadChanges();
}
// What the story changed on a card, under the player's text: each with its passage, and accept (into the
// text), reject (never again from that passage) or edit (in your words).
const SLOT_NAMES = {status: "status", whereabouts: "where", role: "title", allegiance: "allegiance", holdings: "holds",
  relations: "relations", alias: "also called"};
function cardClaims(c) {
  return el("ul", {class: "card-claims items", "aria-label": `What the story changed on ${c.name}`},
    ...c.claims.slice().reverse().map((k) => claimItem(k, c.name, false)));
}
function claimItem(k, name, named) {
  const state = k.state === "proposed" ? " · waiting for you" : k.state === "rejected" ? " · rejected" :
    k.state === "accepted" ? " · in your text" : k.standing ? "" : " · since superseded";
  const act = (verb, label, done) => el("button", {type: "button", class: "link", onclick: async () => {
    const r = await apiFetch(`${base}/claims/${k.id}/${verb}`, {method: "POST"});
    say(r.ok ? `${name}: ${done}.` : errorText(r), r.ok ? "" : "error"); loadWorld(); }}, label);
  return el("li", {class: k.standing && k.state !== "rejected" ? "" : "muted", "data-claim": k.id},
    el("a", {href: "#", onclick: (e) => { e.preventDefault(); showPassage(k.since); }}, `since passage ${k.since}`),
    `: ${named ? `${name}, ` : ""}${SLOT_NAMES[k.slot] || k.slot} — ${k.value}${state} `,
    ...(k.state === "applied" || k.state === "proposed" ? [act("accept/", "Accept into the text", "merged into the card's text"), " ",
      act("reject/", "Reject", "rejected; not told, and never read again from that passage"), " ",
      el("button", {type: "button", class: "link", onclick: async () => {
        const value = prompt(`In your words: ${SLOT_NAMES[k.slot] || k.slot} of ${name}`, k.value);
        if (!value) return;
        const r = await apiFetch(`${base}/claims/${k.id}/`, {method: "PATCH", body: JSON.stringify({value})});
        say(r.ok ? `${name}: kept in your words.` : errorText(r), r.ok ? "" : "error"); loadWorld(); }}, "Edit")] : []));
}
// What the story changed lately on this branch, every card together (newest first), and the new cards
// it asks for: GET .../changes/.
async function loadChanges() {
  const r = await apiFetch(`${base}/changes/`);
  const recent = r.ok ? r.data.claims.filter((k) => k.standing || k.state === "proposed").slice(0, 8) : [];
  $("story-changes").hidden = !recent.length;
  $("story-changes").querySelector("ul").replaceChildren(...recent.map((k) => claimItem(k, k.card_name, true)));
  const proposed = r.ok ? r.data.proposed_cards : [];
  const box = $("proposed-cards");
  box.hidden = !proposed.length;
  if (box.hidden) return;
  box.querySelector("ul").replaceChildren(...proposed.map((p) => el("li", {class: "memory", "data-proposal": p.id},
    el("p", {}, el("strong", {}, `${p.name} `), el("span", {class: "flags"}, `${p.type} · keys: ${p.keys.join(", ")} · named in `),
      ...p.evidence.slice(0, 5).flatMap((id, i) => [i ? ", " : "", el("a", {href: "#", onclick: async (e) => {
        e.preventDefault(); const a = await apiFetch(`${base}/actions/${id}/`); if (a.ok) showPassage(a.data.depth); }}, `passage ${i + 1}`)])),
    el("div", {class: "tools"},
      el("button", {type: "button", class: "link", onclick: async () => {
        const made = await apiFetch(`${base}/cards/proposed/${p.id}/accept/`, {method: "POST", body: "{}"});
        say(made.ok ? `"${p.name}" is a card now.` : errorText(made), made.ok ? "" : "error"); loadWorld(); }}, "Make a card"),
      el("button", {type: "button", class: "link", onclick: async () => {
        const no = await apiFetch(`${base}/cards/proposed/${p.id}/reject/`, {method: "POST"});
        say(no.ok ? `"${p.name}" will not be proposed again.` : errorText(no), no.ok ? "" : "error"); loadWorld(); }}, "Not a card")))));
}
// A card's versions on every branch: where each was made, which one stands here, and a way back.
async function showCardHistory(c, item) {
  const old = item.querySelector(".card-history");
  if (old) { old.remove(); return; }
  const r = await apiFetch(`${base}/cards/${c.id}/history/`);
  const list = el("ul", {class: "card-history items"});
  if (!r.ok) list.append(el("li", {class: "error"}, errorText(r)));
  else if (!r.data.length) list.append(el("li", {class: "muted"}, "Never changed since the story began: the same on every branch."));
  for (const v of r.data || []) {
    const where = v.depth === null ? "on a passage undone since" : v.depth === 0 ? "before the story" : `at passage ${v.depth}`;
    const what = v.deleted ? "deleted" : (v.fields.entry || "").slice(0, 120);
    const state = v.told ? " · stands here" : v.on_path ? "" : " · on another branch";
    list.append(el("li", {}, `${where}${state}: ${what} `, ...(!v.deleted && !v.told ? [el("button", {type: "button", class: "link",
      onclick: async () => {
        const back = await apiFetch(`${base}/cards/${c.id}/restore/`, {method: "POST", body: JSON.stringify({version: v.id})});
        say(back.ok ? `"${c.name}" is back as it was ${where}.` : errorText(back), back.ok ? "" : "error");
        loadWorld();
      }}, "Bring back")] : [])));
  }
  item.append(list);
}
// A card's World Info rules, said in a few words where they differ from the defaults.
function cardRules(c) {
  const logic = {and_any: "and any of", not_all: "and not all of", not_any: "and none of", and_all: "and all of"};
  return [
    c.secondary_keys && c.secondary_keys.length ? `${logic[c.selective_logic]}: ${c.secondary_keys.join(", ")}` : "",
    c.position === "before_story" ? "told before the story" : c.position === "at_depth" ? `told ${c.depth} actions from the newest` : "",
    c.probability < 100 ? `${c.probability} % of turns` : "",
    c.prevent_recursion ? "" : "its entry triggers others",
    c.examples ? "with example dialogue" : "",
  ];
}
adventureForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  const body = {};
  for (const input of adventureForm.elements) {
    if (input.name) body[input.name] = input.type === "checkbox" ? input.checked : input.value;
  }
  const r = await apiFetch(`${base}/`, {method: "PATCH", body: JSON.stringify(body)});
  say(r.ok ? "Story saved." : errorText(r), r.ok ? "" : "error");
  if (r.ok) document.querySelector(".toolbar h1").textContent = r.data.title;
});
const cardForm = $("card-form");
function editCard(c) {
  cardForm.elements.id.value = c.id; cardForm.elements.type.value = c.type; cardForm.elements.name.value = c.name;
  cardForm.elements.keys.value = c.keys.join(", "); cardForm.elements.entry.value = c.entry;
  cardForm.elements.in_cast.checked = c.in_cast;
  const f = cardForm.elements;
  f.secondary_keys.value = (c.secondary_keys || []).join(", "); f.selective_logic.value = c.selective_logic;
  f.position.value = c.position; f.depth.value = c.depth; f.probability.value = c.probability;
  f.prevent_recursion.checked = c.prevent_recursion; f.exclude_recursion.checked = c.exclude_recursion;
  f.examples.value = c.examples || "";
  cardForm.querySelector(".card-rules").open = Boolean(cardRules(c).filter(Boolean).length);
  cardForm.elements.name.focus();
}
cardForm.addEventListener("submit", async (e) => {
  e.preventDefault();
  const f = cardForm.elements;
  const list = (text) => text.split(",").map((k) => k.trim()).filter(Boolean);
  const body = {type: f.type.value, name: f.name.value, entry: f.entry.value, in_cast: f.in_cast.checked,
                keys: list(f.keys.value), secondary_keys: list(f.secondary_keys.value),
                selective_logic: f.selective_logic.value, position: f.position.value,
                depth: Number(f.depth.value || 0), probability: Number(f.probability.value || 0),
                prevent_recursion: f.prevent_recursion.checked, exclude_recursion: f.exclude_recursion.checked,
                examples: f.examples.value};
  const r = f.id.value
    ? await apiFetch(`${base}/cards/${f.id.value}/`, {method: "PATCH", body: JSON.stringify(body)})
    : await apiFetch(`${base}/cards/`, {method: "POST", body: JSON.stringify(body)});
  if (!r.ok) return say(errorText(r), "error");
  cardForm.reset(); f.id.value = ""; say(""); loadWorld();
});
toggle("toggle-world", "world", loadWorld);
toggle("toggle-together", "together", () => {});

loadBranches();
loadStory();

// Search the story (Postgres full text over the branch played): a result jumps to its passage.
$("search").addEventListener("submit", async (e) => {
  e.preventDefault();
  const q = $("search-text").value.trim();
  const box = $("search-results");
  if (!q) { box.hidden = true; return; }
  const r = await apiFetch(`${base}/story/search/?q=${encodeURIComponent(q)}`);
  box.hidden = false;
  if (!r.ok) { box.replaceChildren(el("li", {class: "error"}, errorText(r))); return; }
  if (!r.data.results.length) { box.replaceChildren(el("li", {class: "muted"}, `Nothing in this story matches “${q}”.`)); return; }
  box.replaceChildren(...r.data.results.map((hit) => {
    const parts = hit.snippet.split(/[«»]/).map((piece, i) => (i % 2 ? el("mark", {}, piece) : piece));
    return el("li", {}, el("button", {type: "button", class: "link", onclick: () => { box.hidden = true; showPassage(hit.depth); }},
      `Action ${hit.depth}: `, ...parts));
  }));
  if (r.data.more) box.append(el("li", {class: "muted"}, `The best ${r.data.results.length} matches: more passages match “${q}”; add words to narrow it.`));
});

$("book-file").addEventListener("change", async (e) => {
  const out = $("book-result");
  out.textContent = "Reading the file…";
  const r = await apiUpload(`${base}/cards/import/book/`, e.target.files[0]);
  e.target.value = "";
  if (!r.ok) { out.textContent = errorText(r); return; }
  out.replaceChildren(el("p", {}, `${r.data.cards.length} cards came in.`), reportList(r.data.report));
  loadWorld();
});

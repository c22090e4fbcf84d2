// A story played together: the members panel (who plays, who is here, whose turn; the owner's
// invitations, links, turn mode and removals), the live stream that shows the others' turns and the
// reply as it is written, and, on a member's page, the story and the turn box.
(function together() {
  const T = document.body.dataset.adventure;
  const ROLE = document.body.dataset.role || "owner";  // owner, player or watcher
  const api = `/api/adventures/${T}`;
  const byId = (id) => document.getElementById(id);
  const panel = byId("together");
  if (!T || !panel) return;
  const line = byId("status");
  const tell = (text, kind = "") => { if (line) { line.textContent = text; line.className = `status ${kind}`; } };
  let refused = null;  // the code of the last turn the site refused (its line is cleared once it no longer holds)
  let live = null;
  let members = null;

  function memberItem(m) {
    const name = m.character ? `${m.character.name} (${m.username})` : m.username;
    const item = el("li", {class: "member", "data-user": m.user_id},
      el("span", {class: m.here ? "here" : "away", title: m.here ? "on the page now" : "away"}, m.here ? "●" : "○"), ` ${name}`,
      el("span", {class: "muted"}, ` ${m.role}`));
    if (ROLE === "owner" && m.role !== "owner") {
      item.append(" ", el("button", {type: "button", class: "link danger", onclick: async () => {
        const r = await apiFetch(`${api}/members/${m.user_id}/`, {method: "DELETE"});
        tell(r.ok ? `${m.username} no longer plays in this story.` : errorText(r), r.ok ? "" : "error");
        loadMembers();
      }}, "Remove"));
    }
    return item;
  }

  async function loadMembers() {
    const r = await apiFetch(`${api}/members/`);
    if (!r.ok) return;
    members = r.data;
    byId("member-list").replaceChildren(...members.members.map(memberItem));
    const up = members.up;
    byId("whose-turn").textContent = members.turn_mode === "round_robin" && up
      ? (up.user_id === members.you.user_id ? "It is your turn." : `It is ${up.name}'s turn.`)
      : members.turn_mode === "gather" ? gatherText(members.gather)
      : "Anyone may play: a turn sent while a reply is written waits its turn.";
    gatherClose(members.gather);
    if (refused === "not_your_turn" && up && up.user_id === members.you.user_id) { tell(""); refused = null; }  // the refusal is stale now
    const mode = byId("turn-mode");
    if (mode) mode.value = members.turn_mode;
    const own = members.you.character ? members.you.character.name : null;
    if (members.members.length > 1) audienceFill(byId("to"), members.characters, own);
    if (members.members.length > 1 || ROLE !== "owner") follow();
  }

  // ---- gathered turns: everyone writes once a round; the round is narrated when all have written or
  // when it closes (then the first page to see it asks for the narration; the others' asks are refused)
  let closing = null;
  function gatherText(round) {
    if (!round || !round.written) return "Gathered turns: everyone writes an action, then one narration answers them all.";
    const left = round.closes_at ? Math.max(0, Math.round((new Date(round.closes_at) - Date.now()) / 1000)) : 0;
    return `Gathering: waiting for ${round.waiting.join(", ")}; narrated in ${left} s or when everyone has written.`;
  }
  function gatherClose(round) {
    clearTimeout(closing);
    if (!round || !round.written || !round.closes_at || ROLE === "watcher") return;
    const wait = Math.max(0, new Date(round.closes_at) - Date.now()) + 500 + Math.random() * 1500;
    closing = setTimeout(async () => {
      const r = await apiFetch(`${api}/turns/`, {method: "POST", body: JSON.stringify({mode: "continue", text: ""})});
      if (r.ok && !memberPage) window.loadStory?.();
      loadMembers();
    }, wait);
  }

  // ---- the owner's invitations and turn mode
  const inviteForm = byId("invite-form");
  if (inviteForm) {
    inviteForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const username = inviteForm.elements.username.value.trim();
      const body = {role: inviteForm.elements.role.value, ...(username ? {username} : {})};
      const r = await apiFetch(`${api}/invites/`, {method: "POST", body: JSON.stringify(body)});
      if (!r.ok) { tell(errorText(r), "error"); return; }
      if (r.data.url) {
        byId("invite-link").value = r.data.url;
        byId("invite-link").hidden = false;
        tell("A link: anyone signed in who has it can join until you revoke it.");
      } else {
        tell(`${r.data.username} is invited: the invitation waits on their Stories page.`);
      }
      inviteForm.elements.username.value = "";
    });
    byId("turn-mode").addEventListener("change", async (event) => {
      const r = await apiFetch(`${api}/members/`, {method: "PATCH", body: JSON.stringify({turn_mode: event.target.value})});
      tell(r.ok ? "" : errorText(r), r.ok ? "" : "error");
      loadMembers();
    });
  }
  const toggle = byId("toggle-members");  // a member's page on a phone: the panel opens over the story
  toggle?.addEventListener("click", () => {
    const open = panel.classList.toggle("open");
    toggle.setAttribute("aria-expanded", String(open));
  });
  const leave = byId("leave");
  if (leave) {
    leave.addEventListener("click", async () => {
      const r = await apiFetch(`${api}/members/${members.you.user_id}/`, {method: "DELETE"});
      if (r.ok) window.location.href = "/play/";
      else tell(errorText(r), "error");
    });
  }

  // ---- a member's page: the story and the turn box
  const story = byId("story");
  function told(a) {
    if (a.kind === "do") return a.actor ? `${a.actor}: ${a.text}` : `> ${a.text}`;
    if (a.kind === "say") return a.actor ? `${a.actor}: "${a.text}"` : `> "${a.text}"`;
    return a.text;
  }
  function actionItem(a) {
    return el("li", {class: `action kind-${a.kind}`, "data-id": a.id}, secretMark(a), el("p", {class: "text"}, ...styled(told(a))),
      reportMenu(a));
  }
  // a member reports a node to the moderators (they decide; the owner is not told who reported it)
  const REASONS = [["harassment", "harassment or hate"], ["minors", "sexual content involving minors"],
    ["illegal", "illegal content"], ["spam", "spam or advertising"], ["other", "something else"]];
  function reportMenu(a) {
    const reason = el("select", {"aria-label": "Why"}, ...REASONS.map(([v, t]) => el("option", {value: v}, t)));
    const why = el("input", {maxlength: "2000", placeholder: "What is wrong (optional)", "aria-label": "What is wrong"});
    const menu = el("details", {class: "action-menu report"}, el("summary", {title: "Report to the moderators"}, "⚑"),
      el("div", {class: "tools"}, reason, why, el("button", {type: "button", class: "link danger", onclick: async () => {
        const r = await apiFetch(`${api}/reports/`, {method: "POST", body: JSON.stringify({reason: reason.value, text: why.value, action: a.id})});
        tell(r.ok ? "Reported: the moderators will look at it." : errorText(r), r.ok ? "" : "error");
        menu.open = false;
      }}, "Report")));
    return menu;
  }
  let storyAsked = 0;  // only the newest load asked for is drawn (an older answer may come after it)
  async function loadStory() {
    const asked = ++storyAsked;
    const r = await apiFetch(`${api}/story/?limit=200`);
    if (asked !== storyAsked) return;
    if (r.ok) story.replaceChildren(...r.data.actions.map(actionItem));
    story.lastElementChild?.scrollIntoView({block: "end"});
  }
  const memberPage = ROLE !== "owner";
  // the owner's page (play.js) shows the others' turns once stored, unless its own reply is being written
  const reloadOwnersStory = () => { if (typeof writing === "undefined" || writing === null) window.loadStory?.(); };

  let pending = null;  // the reply being written, as the live stream brings it
  function onEvent(name, data) {
    if (name === "members" || name === "presence" || name === "secret") { loadMembers(); return; }
    if (name === "gathered") {
      if (memberPage) for (const a of data.actions) story.append(actionItem(a)); else reloadOwnersStory();
      loadMembers();
      return;
    }
    if (name === "gone") { tell("You are no longer a member of this story.", "error"); live?.close(); live = null; byId("turn")?.setAttribute("hidden", ""); return; }
    if (!memberPage) { if (name === "done" || name === "story" || name === "reset") reloadOwnersStory(); if (name === "done") loadMembers(); return; }
    if (name === "turn") {
      storyAsked++;  // a load on its way must not wipe the reply about to stream: its end draws the story
      for (const a of data.actions) story.append(actionItem(a));
      pending = el("li", {class: "action kind-ai pending reply"}, el("p", {class: "text"}, ""));
      story.append(pending);
    } else if (name === "token" && pending) {
      pending.querySelector("p").textContent += data.text;
    } else if (name === "done" || name === "failed" || name === "story" || name === "reset") {
      pending = null;
      loadStory();
      loadMembers();
    }
    story.lastElementChild?.scrollIntoView({block: "end"});
  }
  function follow() {
    if (live) return;
    live = new EventSource(`${api}/live/`);
    // a refused stream (the site busy: a 503, or the account's streams all open) is closed for good by
    // the browser: follow again after a few seconds, from the story as it stands
    live.addEventListener("error", () => {
      if (live && live.readyState === EventSource.CLOSED) {
        live = null;
        setTimeout(() => { follow(); if (memberPage) loadStory(); }, 3000 + Math.random() * 2000);
      }
    });
    for (const name of ["turn", "token", "done", "failed", "secret", "gathered", "members", "story", "presence", "reset", "gone"]) {
      live.addEventListener(name, (event) => onEvent(name, JSON.parse(event.data)));
    }
  }

  const turn = byId("turn");
  if (memberPage && turn) {
    turn.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = byId("text").value.trim();
      if (!text) return;
      byId("send").disabled = true;
      tell("Sent. The reply shows here as it is written.");
      const body = {mode: byId("mode").value, text, ...audienceOf(byId("to"))};
      const r = await apiFetch(`${api}/turns/`, {method: "POST", body: JSON.stringify(body)});
      byId("send").disabled = false;
      refused = r.ok ? null : r.data?.error;
      if (r.ok) { byId("text").value = ""; tell(r.status === 202 ? "Your action is in: the narration answers the round." : ""); }
      else { tell(errorText(r), "error"); }
    });
    // retry and undo belong to a turn's author (and the owner): the site says so to anyone else
    for (const [id, path, done] of [["retry", "/retry/", "A new take is being written."], ["undo", "/undo/", "Your last turn was taken back."]]) {
      byId(id).addEventListener("click", async () => {
        tell(id === "retry" ? "Writing another take…" : "");
        const r = await apiFetch(`${api}${path}`, {method: "POST"});
        tell(r.ok ? done : errorText(r), r.ok ? "" : "error");
        if (r.ok) loadStory();
      });
    }
    byId("text").addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); turn.requestSubmit(); }
    });
  }
  if (memberPage) loadStory();
  loadMembers();
})();

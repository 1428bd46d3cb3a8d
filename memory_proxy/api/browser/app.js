// The memory browser: plain JavaScript over the management API (/api/v1, docs/MANAGEMENT.md).
// The key stays in sessionStorage (gone when the tab closes). User text is only ever set with
// textContent, never as HTML.
"use strict";

const API = "/api/v1";
const $ = (selector) => document.querySelector(selector);
let cursor = null;

function credentials() {
  return { key: sessionStorage.getItem("mp-key") || "", user: sessionStorage.getItem("mp-user") || "" };
}

function status(text, isError = false) {
  $("#status").textContent = text;
  $("#status").className = isError ? "error" : "";
}

// Whose memories the page shows: the user's own (""), or a team's (its id), from the scope menu.
function scope() {
  return $("#scope").value ? `/teams/${encodeURIComponent($("#scope").value)}` : "";
}

// One API call for the user of this session, on the chosen scope's memories for a /memories path; throws
// with the API's error message.
async function call(method, path, params = {}, body = undefined) {
  const { key, user } = credentials();
  const query = new URLSearchParams(params);
  if (user) query.set("user", user);
  const scoped = path.startsWith("/memories") ? scope() + path : path;
  const response = await fetch(`${API}${scoped}?${query}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const payload = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(payload.error ? payload.error.message : `HTTP ${response.status}`);
  return payload;
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "—";
}

function el(tag, props = {}, ...children) {
  const node = Object.assign(document.createElement(tag), props);
  node.append(...children);
  return node;
}

function button(label, className, onClick) {
  return el("button", { type: "button", className, textContent: label, onclick: onClick });
}

function renderMemory(memory) {
  const item = el("li", { className: "memory" + (memory.pinned ? " pinned" : "") });
  item.dataset.id = memory.id;
  const content = el("div", { className: "content", textContent: memory.content });
  const score = memory.score !== undefined ? ` · score ${memory.score.toFixed(3)}` : "";
  const meta = el("div", { className: "meta" },
    el("span", { className: "badge type", textContent: memory.memory_type }),
    memory.pinned ? el("span", { className: "badge", textContent: "pinned" }) : "",
    `stated ${when(memory.stated_at)}` + (memory.created_at ? ` · saved ${when(memory.created_at)}` : "") + score);
  const actions = el("div", { className: "actions" },
    button("Edit", "edit", () => startEdit(item, memory)),
    button(memory.pinned ? "Unpin" : "Pin", "pin", () => act(() =>
      call("POST", `/memories/${encodeURIComponent(memory.id)}/${memory.pinned ? "unpin" : "pin"}`),
      memory.pinned ? "Unpinned." : "Pinned.")),
    button("History", "history", () => showHistory(memory.id)),
    button("Delete", "delete", () => {
      if (confirm(`Delete this memory?\n\n${memory.content}`)) {
        act(() => call("DELETE", `/memories/${encodeURIComponent(memory.id)}`), "Deleted.");
      }
    }));
  item.append(content, meta, actions);
  return item;
}

function startEdit(item, memory) {
  const text = el("textarea", { className: "edit-text", value: memory.content, rows: 2 });
  const save = button("Save", "save", () => act(() =>
    call("PATCH", `/memories/${encodeURIComponent(memory.id)}`, {}, { content: text.value }), "Saved."));
  const cancel = button("Cancel", "cancel", () => load());
  item.querySelector(".content").replaceWith(el("div", { className: "editing" }, text, save, cancel));
  text.focus();
}

// Run a change, then reload the list; errors go to the status line. True when the change was made.
async function act(change, done) {
  try {
    await change();
  } catch (error) {
    status(error.message, true);
    return false;
  }
  await load();
  status(done);
  return true;
}

async function load(more = false) {
  const q = $("#q").value.trim();
  try {
    if ($("#ranked").checked && q) {
      const found = await call("GET", "/memories/search", { q });
      $("#list").replaceChildren(...found.data.map(renderMemory));
      $("#more").hidden = true;
      status(`${found.data.length} ranked result(s).`);
      return;
    }
    const params = { limit: 50 };
    if (q) params.q = q;
    if ($("#type").value) params.type = $("#type").value;
    if ($("#pinned").value) params.pinned = $("#pinned").value;
    if (more && cursor) params.cursor = cursor;
    const page = await call("GET", "/memories", params);
    const items = page.data.map(renderMemory);
    if (more) $("#list").append(...items); else $("#list").replaceChildren(...items);
    cursor = page.next_cursor;
    $("#more").hidden = !cursor;
    const whose = page.user.startsWith("team:") ? `team ${$("#scope").selectedOptions[0].textContent}` : page.user;
    status(`${$("#list").children.length} memories of ${whose}.`);
    if (!more) await loadProposals();
  } catch (error) {
    status(error.message, true);
  }
}

// The chosen team's pending facts (TEAM_FACTS=review), for its editors (and operators) to accept into the team's
// memories or reject; the API refuses them to a member who is not an editor, who then sees no section.
async function loadProposals() {
  const team = $("#scope").value;
  const base = `/teams/${encodeURIComponent(team)}/proposals`;
  let found = { data: [] };
  if (team) {
    try {
      found = await call("GET", base);
    } catch (error) {
      found = { data: [] };
    }
  }
  $("#proposal-list").replaceChildren(...found.data.map((p) => el("li", { className: "proposal" },
    el("div", { className: "content", textContent: p.content }),
    el("div", { className: "meta", textContent: `${p.action} · proposed by ${p.proposed_by} · ${when(p.created_at)}` }),
    el("div", { className: "actions" },
      button("Accept", "accept", () => act(() => call("POST", `${base}/${p.id}/accept`), "Accepted.")),
      button("Reject", "reject", () => act(() => call("POST", `${base}/${p.id}/reject`), "Rejected."))))));
  $("#proposals").hidden = found.data.length === 0;
}

async function showHistory(id) {
  try {
    const history = await call("GET", `/memories/${encodeURIComponent(id)}/history`);
    const versions = history.versions.map((v) => {
      const row = el("tr", { className: v.active ? "active" : "" },
        el("td", { textContent: v.content }), el("td", { textContent: v.memory_type }),
        el("td", { textContent: when(v.created_at) }), el("td", { textContent: when(v.superseded_at) }),
        el("td", {}, v.active ? "active" : button("Restore", "restore", () =>
          act(() => call("POST", `/memories/${encodeURIComponent(v.id)}/restore`), "Restored.")
            .then(() => showHistory(v.id)))));
      row.dataset.id = v.id;
      return row;
    });
    const updates = history.updates.map((u) => el("tr", { className: "update" },
      el("td", { textContent: when(u.created_at) }), el("td", { className: "action", textContent: u.action }),
      el("td", { className: "reason", textContent: u.reason })));
    $("#versions tbody").replaceChildren(...versions);
    $("#updates tbody").replaceChildren(...updates);
    $("#history").hidden = false;
  } catch (error) {
    status(error.message, true);
  }
}

// The scope menu: the user's own memories, then each team the key may read (a user's teams; every team for an
// operator's key).
async function loadTeams() {
  const mine = el("option", { value: "", textContent: "my memories" });
  try {
    const { teams } = await call("GET", "/teams/");
    $("#scope").replaceChildren(mine, ...teams.map((t) => el("option", { value: t.id, textContent: t.name })));
  } catch (error) {
    $("#scope").replaceChildren(mine);
  }
}

// Fair use (docs/LIMITS.md): everyone's use for an operator's key, busiest first; a user's own for a user's.
async function loadUsage() {
  let found = { usage: [] };
  try {
    found = await call("GET", "/usage");
  } catch (error) {
    found = { usage: [] };
  }
  $("#usage tbody").replaceChildren(...found.usage.map((u) => el("tr", { className: "use" },
    el("td", { textContent: `${u.kind} ${u.subject}` }), el("td", { textContent: String(u.requests_today) }),
    el("td", { textContent: String(u.tokens_today) }), el("td", { textContent: u.requests_minute.toFixed(0) }),
    el("td", { textContent: u.tokens_minute.toFixed(0) }), el("td", { textContent: String(u.in_flight) }))));
}

async function connect() {
  $("#app").hidden = false;
  await loadTeams();
  await load();
  await loadUsage();
}

$("#login").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem("mp-key", $("#key").value.trim());
  sessionStorage.setItem("mp-user", $("#user").value.trim());
  connect();
});
$("#scope").addEventListener("change", () => load());
$("#logout").addEventListener("click", () => {
  sessionStorage.clear();
  $("#key").value = $("#user").value = "";
  $("#app").hidden = true;
});
$("#filters").addEventListener("submit", (event) => { event.preventDefault(); load(); });
$("#more").addEventListener("click", () => load(true));
$("#refresh-use").addEventListener("click", () => loadUsage());
$("#close-history").addEventListener("click", () => { $("#history").hidden = true; });
$("#add").addEventListener("submit", (event) => {
  event.preventDefault();
  const content = $("#new-content").value;
  act(() => call("POST", "/memories", {}, { content, memory_type: $("#new-type").value }), "Added.")
    .then((made) => { if (made) $("#new-content").value = ""; });
});

if (credentials().key) {  // a reload keeps the session
  $("#key").value = credentials().key;
  $("#user").value = credentials().user;
  connect();
}

// The approval page: live state over a WebSocket, decisions over the JSON API.
"use strict";

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const $ = (id) => document.getElementById(id);
let state = null;
let socket = null;
let retry = 500;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

async function api(method, path, body) {
  const res = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  if (res.status === 204) return null;
  const data = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(data.error || res.statusText);
  return data;
}

function toast(text) {
  const t = $("toast");
  t.textContent = text;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 3500);
}

async function copy(text, what) {
  try {
    await navigator.clipboard.writeText(text);
    toast(`${what} copied`);
  } catch (e) {
    window.prompt(`Copy the ${what}:`, text);
  }
}

function ago(seconds) {
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min`;
  return `${Math.round(seconds / 3600)} h`;
}

// What a human must see in full: the command, the file and what goes into it.
function details(p) {
  const a = p.arguments || {};
  const parts = [];
  if (p.tool === "bash" && typeof a.command === "string") {
    parts.push(el("p", { class: "label" }, "command" + (a.cwd ? ` (in ${a.cwd})` : "")));
    parts.push(el("pre", { class: "command" }, a.command));
  }
  if (typeof a.path === "string") parts.push(el("p", { class: "label" }, "path: ", el("code", {}, a.path)));
  if (p.tool === "write" && typeof a.content === "string") {
    parts.push(el("p", { class: "label" }, `content (${a.content.length} characters)`));
    parts.push(el("pre", { class: "content" }, a.content));
  }
  if (p.tool === "edit") {
    parts.push(el("p", { class: "label" }, "replace" + (a.replace_all ? " (every occurrence)" : "")));
    parts.push(el("pre", { class: "old" }, String(a.old_string ?? "")));
    parts.push(el("p", { class: "label" }, "with"));
    parts.push(el("pre", { class: "new" }, String(a.new_string ?? "")));
  }
  parts.push(el("p", { class: "label" }, "all arguments"));
  parts.push(el("pre", { class: "args" }, JSON.stringify(a, null, 2)));
  return parts;
}

async function decide(id, decision, reason, rule) {
  try {
    const body = { decision };
    if (reason) body.reason = reason;
    if (rule) body.rule = rule;
    await api("POST", `/api/pending/${encodeURIComponent(id)}`, body);
    toast(decision === "deny" ? "Denied" : "Approved");
  } catch (e) {
    toast(e.message);
  }
}

function pendingCard(p) {
  const reason = el("input", { type: "text", "aria-label": `Reason for denying ${p.tool}`, placeholder: "reason for the agent (optional)" });
  const card = el("li", { class: "card", "data-id": p.id },
    el("h3", {}, `${p.tool} — ${p.summary.replace(/^[^:]*:\s*/, "")}`),
    el("p", { class: "meta" }, `${p.client} · session ${p.sid.slice(0, 8)} · waiting ${ago(p.waiting_s)}`),
  );
  if (p.escalation) card.append(el("p", { class: "why" }, `Needs a human because ${p.escalation}.`));
  card.append(...details(p));
  card.append(el("div", { class: "actions" },
    el("button", { type: "button", class: "approve", onclick: () => decide(p.id, "approve") }, "Approve"),
    el("button", { type: "button", onclick: () => decide(p.id, "allow_session") }, "Allow for this session"),
    ...alwaysAllow(p),
    reason,
    el("button", { type: "button", class: "deny", onclick: () => decide(p.id, "deny", reason.value.trim()) }, "Deny"),
  ));
  return card;
}

// -- Rules: "Always allow calls like this", the rule lists, session grants, a rule tester --------

// The proposed rule, editable before saving; nothing when no rule could ever apply to the call.
function alwaysAllow(p) {
  if (!p.proposed_rule) return [];
  const lines = p.proposed_rule.split("\n").length;
  const rule = el("textarea", { class: "rule-edit", rows: String(lines), spellcheck: "false", "aria-label": `Rule to save for ${p.tool}` });
  rule.value = p.proposed_rule;
  return [
    el("button", { type: "button", class: "always", onclick: () => decide(p.id, "allow_always", "", rule.value.trim()) }, "Always allow calls like this"),
    rule,
  ];
}

function renderRules(s) {
  if (!s.rules) return;
  const key = JSON.stringify([s.rules, s.grants]);
  if (key === renderRules.key) return;  // keep focus and scroll when nothing changed
  renderRules.key = key;
  const items = [];
  for (const list of ["deny", "ask", "allow"]) {
    (s.rules[list] || []).forEach((text, i) => items.push(el("li", { class: `rule rule-${list}`, "data-list": list, "data-rule": text },
      el("span", { class: "rule-list" }, list), " ", el("code", {}, text), " ",
      el("button", { type: "button", onclick: () => removeRule(list, text) }, "Remove"),
    )));
  }
  $("rule-count").textContent = items.length;
  $("rules").replaceChildren(...items);
  $("no-rules").hidden = items.length > 0;
  const grants = (s.grants || []).map((g) => el("li", { class: "grant" },
    el("code", {}, g.tool), ` for ${g.client} (session ${g.sid.slice(0, 8)}) `,
    el("button", { type: "button", onclick: () => revokeGrant(g) }, "Revoke"),
  ));
  $("grants").replaceChildren(...grants);
  $("no-grants").hidden = grants.length > 0;
}

async function removeRule(list, text) {
  try {
    await api("DELETE", `/api/rules/${list}/${encodeURIComponent(text)}`);
    toast(`Removed ${text}`);
  } catch (e) { toast(e.message); }
}

async function revokeGrant(g) {
  try {
    await api("DELETE", `/api/grants/${encodeURIComponent(g.sid)}/${encodeURIComponent(g.tool)}`);
    toast(`Revoked ${g.tool} for ${g.client}`);
  } catch (e) { toast(e.message); }
}

function setupRules() {
  $("rule-add").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const rule = $("rule-text").value.trim();
    if (!rule) return;
    try {
      await api("POST", "/api/rules", { list: $("rule-list").value, rule });
      $("rule-text").value = "";
      toast(`Added ${rule}`);
    } catch (e) { toast(e.message); }
  });
  $("rule-test").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const command = $("rule-test-command").value;
    try {
      const r = await api("POST", "/api/rules/test", { command });
      const what = { allow: "runs unattended", ask: "asks a human", deny: "is refused" }[r.outcome];
      let text = `${what} (no rule matches; the ${r.decided_by} decides)`;
      if (r.rule) text = `${what}: rules.${r.list}[${r.index}] ${r.rule}`;
      else if (r.unsafe) text = `${what}: no allow rule can cover it: ${r.unsafe}`;
      $("rule-test-result").textContent = text;
    } catch (e) { $("rule-test-result").textContent = e.message; }
  });
}

function render() {
  if (!state) return;
  const s = state;
  $("status").textContent = `${s.paused ? "Paused" : "Running"} · ${s.counts.sessions} session(s) · ${s.counts.pending} waiting · ${s.calls_total} call(s)` + (s.warnings.length ? ` · ⚠ ${s.warnings.join("; ")}` : "");
  $("pause").textContent = s.paused ? "Resume bridge" : "Pause bridge";
  $("pause").setAttribute("aria-pressed", String(s.paused));
  $("mcp-url").textContent = s.mcp_url;
  const port = (s.mcp_url.match(/:(\d+)\/$/) || [])[1] || "PORT";
  $("ssh-hint").textContent = `ssh -N -L ${port}:127.0.0.1:${port} you@this-machine`;
  const count = $("pending-count");
  count.textContent = s.pending.length;
  count.classList.toggle("hot", s.pending.length > 0);
  $("no-pending").hidden = s.pending.length > 0;

  // Keep cards (and a half-typed reason) that are still pending; add new ones in order.
  const list = $("pending");
  const ids = new Set(s.pending.map((p) => p.id));
  for (const card of [...list.children]) if (!ids.has(card.dataset.id)) card.remove();
  const shown = new Set([...list.children].map((c) => c.dataset.id));
  for (const p of s.pending) {
    if (!shown.has(p.id)) list.append(pendingCard(p));
    else list.querySelector(`[data-id="${CSS.escape(p.id)}"] .meta`).textContent = `${p.client} · session ${p.sid.slice(0, 8)} · waiting ${ago(p.waiting_s)}`;
  }

  if (s.calls_total !== render.calls || s.pending.length !== render.pending) {
    render.calls = s.calls_total;  // the audit trail only changes when calls do
    render.pending = s.pending.length;
    loadAudit();
  }
  renderRules(s);
  $("session-count").textContent = s.sessions.length;
  const tbody = $("sessions").tBodies[0];
  tbody.replaceChildren(...s.sessions.map((x) => el("tr", {},
    el("td", {}, `${x.client} ${x.version}`),
    el("td", {}, x.calls),
    el("td", {}, x.pending),
    el("td", {}, `${ago(Date.now() / 1000 - x.last_seen)} ago`),
    el("td", {}, el("button", { type: "button", onclick: () => endSession(x) }, "End session")),
  )));
}

async function endSession(x) {
  try {
    await api("DELETE", `/api/sessions/${encodeURIComponent(x.sid)}`);
    toast(`Ended ${x.client}'s session`);
  } catch (e) { toast(e.message); }
}

async function loadAudit() {
  clearTimeout(loadAudit.timer);
  loadAudit.timer = setTimeout(async () => {
    try {
      const data = await api("GET", "/api/audit?limit=30");
      const rows = data.calls.reverse().map((c) => {
        const outcome = c.pending ? "pending" : c.outcome;
        return el("tr", {},
          el("td", {}, (c.ts || "").replace("T", " ").replace(/\.\d+Z$/, "Z")),
          el("td", {}, c.tool),
          el("td", {}, c.client || ""),
          el("td", { class: `outcome-${outcome}` }, outcome),
          el("td", {}, c.duration_ms == null ? "" : `${c.duration_ms} ms`),
          el("td", { class: "args" }, c.args || ""),
        );
      });
      $("audit").tBodies[0].replaceChildren(...rows);
    } catch (e) { /* the next change retries */ }
  }, 150);
}

function connect() {
  const url = `ws://${location.host}/api/events?as=approval%20page`;
  socket = new WebSocket(url);
  socket.onopen = () => { retry = 500; };
  socket.onmessage = (ev) => { state = JSON.parse(ev.data); render(); };
  socket.onclose = () => {
    $("status").textContent = "disconnected — reconnecting…";
    setTimeout(connect, retry);
    retry = Math.min(retry * 2, 10000);
  };
}

$("pause").addEventListener("click", () => api("POST", "/api/pause", { paused: !(state && state.paused) }).catch((e) => toast(e.message)));
$("copy-url").addEventListener("click", () => state && copy(state.mcp_url, "URL"));
$("copy-config").addEventListener("click", async () => {
  try { copy(JSON.stringify(await api("GET", "/api/client-config"), null, 2), "client config"); }
  catch (e) { toast(e.message); }
});
setupRules();
setInterval(() => { if (state) render(); }, 5000);  // keep "waiting N s" fresh
connect();

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

// Every agent string on this page was rendered safe by the server (server/present/textsafe.py):
// controls, bidi and invisible characters arrive as visible escapes and `hidden` flags them.
// This page never shows raw arguments, and no box hides its overflow: long text shows its
// head, an explicit "more" marker and its tail, with a button to show everything.
const CLIP_CHARS = 2400;
const CLIP_LINES = 40;

// Cut points never split a visible escape such as \u2800 (the server's escapes are atomic).
const ESCAPE = /\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})/y;

function escapeAt(text, i) {
  ESCAPE.lastIndex = i;
  const m = ESCAPE.exec(text);
  return m ? m[0].length : 0;
}

function cutHead(text, n) {
  for (let k = 1; k < 10 && n - k >= 0; k++) {
    const len = text[n - k] === "\\" ? escapeAt(text, n - k) : 0;
    if (len > k) return text.slice(0, n - k);
  }
  return text.slice(0, n);
}

function cutTail(text, n) {
  let start = Math.max(text.length - n, 0);
  for (let k = 1; k < 10 && start - k >= 0; k++) {
    const len = text[start - k] === "\\" ? escapeAt(text, start - k) : 0;
    if (len > k) { start -= k; break; }
  }
  return text.slice(start);
}

function clipped(text, cls) {
  const lines = text.split("\n");
  if (text.length <= CLIP_CHARS && lines.length <= CLIP_LINES) return el("pre", { class: cls }, text);
  let head, tail, what;
  if (lines.length > CLIP_LINES) {
    head = cutHead(lines.slice(0, 20).join("\n"), 1500);
    tail = cutTail(lines.slice(-10).join("\n"), 1000);
    what = `${(lines.length - 30).toLocaleString()} more lines`;
  } else {
    head = cutHead(text, 480);
    tail = cutTail(text, 480);
    what = `${(text.length - head.length - tail.length).toLocaleString()} more characters`;
  }
  const box = el("div", { class: `clip ${cls}` });
  const more = el("button", { type: "button", class: "more", "aria-expanded": "false" }, `… ${what} — show all …`);
  more.addEventListener("click", () => box.replaceWith(el("pre", { class: cls }, text)));
  box.append(el("pre", { class: "head" }, head), more, el("pre", { class: "tail" }, tail));
  return box;
}

function hiddenBadge(text) {
  return el("p", { class: "hidden-warning", role: "note" }, `⚠ ${text || "contains hidden characters"} (shown escaped, e.g. \\u202e)`);
}

function escalationBox(e) {
  if (!e) return null;
  const box = el("div", { class: "why", role: "note" });
  if (e.category) {
    box.append(el("strong", {}, `Needs a human: ${e.category}`), el("br"), el("code", {}, e.path || ""));
  } else {
    box.append(el("strong", {}, "Needs a human"));
  }
  if (e.text) box.append(el("p", { class: "why-text" }, e.text));
  return box;
}

function size(n) {
  return n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${(n / 1024).toFixed(1)} KB` : `${n} bytes`;
}

// -- Context and batches: risk cues, the diff of a write/edit, Approve/Deny all N ---------------
// (server/present/risk.py, diffview.py, batch.py compute them; every text arrives rendered safe.)

// Risk cues: hints shown first on the card, never a decision (the judge decided it asks).
function riskCues(p) {
  const risks = (p.preview || {}).risks || [];
  return risks.map((r) => el("p", { class: `risk risk-${r.risk}`, role: "note" }, `⚠ ${r.text}`));
}

// What a write/edit will change, from the file as it was when the call started waiting.
function diffView(change) {
  if (!change) return [];
  if (change.kind === "new") return [el("p", { class: "label change new-file" }, `new file (${change.lines.toLocaleString()} lines)`)];
  if (change.kind === "same") return [el("p", { class: "label change" }, "no change: the file already has this content")];
  if (change.kind !== "diff") return [el("p", { class: "label change" }, `no diff: ${change.why}`)];
  const eol = change.eol === "crlf" ? " · CRLF line endings" : "";
  const head = el("p", { class: "label change" }, `diff: +${change.added} −${change.removed} lines${eol}` + (change.occurrences > 1 ? ` · ${change.occurrences} occurrences` : ""));
  const rows = change.lines.map(([op, text]) => el("span", { class: `d d-${{ "+": "add", "-": "del", "@": "hunk", " ": "same" }[op] || "note"}` }, op === "\\" ? `\\ ${text}` : op === "@" ? text : `${op}${text}`));
  const pre = el("pre", { class: "diff", "aria-label": "diff of the change" });
  pre.append(...rows);
  return [head, pre];
}

// No "Always allow": the bridge's reason for this very call.
function noAlwaysText(p) {
  const why = (p.preview || {}).no_rule;
  return `No “Always allow” for this call: ${why || "no rule can name exactly this call"}`;
}

async function decideBatch(ids, decision) {
  try {
    const out = await api("POST", "/api/batch", { ids, decision });
    const gone = out.gone.length ? ` (${out.gone.length} no longer waiting)` : "";
    toast(`${decision === "deny" ? "Denied" : "Approved"} ${out.decided.length}${gone}`);
  } catch (e) { toast(e.message); }
}

// Approve/Deny all N of one kind: lists exactly the calls the buttons decide (by id).
function renderBatches(s) {
  const batches = s.batches || [];
  const key = JSON.stringify(batches.map((b) => b.ids));
  if (key === renderBatches.key) return;
  renderBatches.key = key;
  $("batches").replaceChildren(...batches.map((b) => el("div", { class: "batch", "data-key": b.key },
    el("p", { class: "label" }, `${b.count} waiting calls of one kind: ${b.tool} ${b.scope} from ${b.client}`),
    el("ul", {}, ...b.ids.map((id, i) => el("li", {}, el("code", {}, id), ` ${b.summaries[i] || ""}`))),
    el("div", { class: "actions" },
      el("button", { type: "button", class: "approve", onclick: () => decideBatch(b.ids, "approve") }, `Approve all ${b.count}`),
      el("button", { type: "button", class: "deny", onclick: () => decideBatch(b.ids, "deny") }, `Deny all ${b.count}`)),
  )));
}
// -- end of context and batches ---------------------------------------------------------------

// The bounded context from the snapshot: working directory, size, a short diff preview.
function context(p) {
  const v = p.preview || {};
  const parts = [];
  if ("command" in v) {
    parts.push(el("p", { class: "label" }, "working directory: ", el("code", {}, v.cwd || "(first root)")));
  }
  if (v.size && typeof v.size.chars === "number") {
    parts.push(el("p", { class: "label size" }, `writes ${v.size.chars.toLocaleString()} characters, ${v.size.lines.toLocaleString()} lines (${size(v.size.bytes)})`));
  }
  parts.push(...diffView(v.change));
  if (v.size && v.size.old && !(v.change && v.change.kind === "diff")) {
    parts.push(el("p", { class: "label size" }, `replaces ${v.size.old.chars.toLocaleString()} characters with ${v.size.new.chars.toLocaleString()}` + (v.replace_all ? " (every occurrence)" : "")));
  }
  return parts;
}

// The full call, fetched once per card: every argument rendered safe by the server.
async function loadFull(p, holder) {
  try {
    const full = await api("GET", `/api/pending/${encodeURIComponent(p.id)}`);
    const parts = [];
    for (const f of full.display) {
      const note = f.hidden ? " ⚠ hidden characters" : "";
      parts.push(el("p", { class: "label" }, `${f.name} (${f.chars.toLocaleString()} characters${f.lines > 1 ? `, ${f.lines.toLocaleString()} lines` : ""})${note}`));
      const cls = { command: "command", content: "content", old_string: "old", new_string: "new" }[f.name] || "arg";
      parts.push(clipped(f.text, cls));
    }
    holder.replaceChildren(...parts);
  } catch (e) {
    holder.replaceChildren(el("p", { class: "muted" }, `full call not available: ${e.message}`));
  }
}

function heading(p) {
  const body = p.summary.startsWith(`${p.tool}: `) ? p.summary.slice(p.tool.length + 2) : "";
  return body ? `${p.tool} — ${body}` : p.tool;
}

function countdown(p) {
  if (p.deadline == null) return "";
  const left = Math.max(p.deadline - Date.now() / 1000, 0);
  return ` · auto-deny in ${ago(left)}`;
}

function metaText(p) {
  const waited = Math.max(Date.now() / 1000 - p.arrived, 0);
  const where = p.machine ? ` on ${p.machine}` : "";  // from the token; the client is its claim
  return `${p.client}${where} · session ${p.session} · waiting ${ago(waited)}`;
}

async function decide(id, decision, reason, rule) {
  try {
    const body = { decision };
    if (reason) body.reason = reason;
    if (rule) body.rule = rule;
    await api("POST", `/api/pending/${encodeURIComponent(id)}`, body);
    toast(decision === "deny" ? "Denied" : decision === "run_outside_box" ? "Approved to run outside the box" : "Approved");
  } catch (e) {
    toast(e.message);
  }
}

// Where a bash call runs: in the box, or outside it (warning colour, with the agent's reason).
function boxLine(b) {
  if (!b) return null;
  if (b.inside) return el("p", { class: "box inside" }, "Runs in the box");
  return el("p", { class: "box outside", role: "note" }, `⚠ Runs ${b.text}`);
}

function runOutside(p) {
  if (!p.box || !p.box.can_run_outside) return [];
  return [el("button", { type: "button", class: "outside", title: "Approve this one call to run without the sandbox", onclick: () => decide(p.id, "run_outside_box") }, "Run outside the box")];
}

function pendingCard(p) {
  const reason = el("input", { type: "text", "aria-label": `Reason for denying ${p.tool}`, placeholder: "reason for the agent (optional)" });
  const card = el("li", { class: "card" + (p.hidden ? " spoof" : "") + (p.escalation ? " escalated" : ""), "data-id": p.id, id: `call-${p.id}` },
    el("h3", {}, heading(p)),
    el("p", { class: "meta" }, el("span", { class: "who" }, metaText(p)), el("span", { class: "countdown" }, countdown(p))),
  );
  if (p.hidden) card.append(hiddenBadge());
  card.append(...riskCues(p));
  const box = boxLine(p.box);
  if (box) card.append(box);
  const why = escalationBox(p.escalation);
  if (why) card.append(why);
  card.append(...context(p));
  if (p.upstream) card.append(...upstreamDetails(p.upstream));
  const full = el("div", { class: "full" }, el("p", { class: "muted" }, "loading the full call…"));
  card.append(full);
  loadFull(p, full);
  card.append(el("div", { class: "actions" },
    el("button", { type: "button", class: "approve", onclick: () => decide(p.id, "approve") }, "Approve"),
    ...allowSession(p),
    ...alwaysAllow(p),
    ...runOutside(p),
    reason,
    el("button", { type: "button", class: "deny", onclick: () => decide(p.id, "deny", reason.value.trim()) }, "Deny"),
  ));
  return card;
}

// The tray's "Show full call…" opens the page at #call-<id>: scroll there and highlight it.
function focusHash() {
  const m = location.hash.match(/^#call-([A-Za-z0-9_-]+)$/);
  if (!m || focusHash.done === m[1]) return;
  const card = document.getElementById(`call-${m[1]}`);
  if (!card) return;
  focusHash.done = m[1];
  card.classList.add("highlight");
  card.scrollIntoView({ block: "start" });
}
window.addEventListener("hashchange", () => { focusHash.done = null; focusHash(); });

function tick() {
  if (!state) return;
  for (const p of state.pending) {
    const card = document.getElementById(`call-${p.id}`);
    if (!card) continue;
    card.querySelector(".meta .who").textContent = metaText(p);
    card.querySelector(".meta .countdown").textContent = countdown(p);
  }
}

// An upstream server's tool: whose it is, what it says it does (its words, not ours).
function upstreamDetails(u) {
  const parts = [el("p", { class: "label" }, "upstream server ", el("code", {}, u.server), " · tool ", el("code", {}, u.tool))];
  if (u.changed) parts.push(el("p", { class: "why changed" }, "This tool's definition changed since it was approved — check its description before approving."));
  parts.push(el("p", { class: "label" }, "description (from the server, untrusted)"));
  parts.push(el("pre", { class: "description" }, u.description || "(none)"));
  if (u.annotations && Object.keys(u.annotations).length) {
    parts.push(el("p", { class: "label" }, "annotations (from the server, untrusted)"));
    parts.push(el("pre", { class: "annotations" }, u.annotations_text));
  }
  return parts;
}

async function restartServer(name) {
  try {
    await api("POST", `/api/servers/${encodeURIComponent(name)}/restart`);
    toast(`Restarting ${name}`);
  } catch (e) { toast(e.message); }
}

// Upstream MCP servers: state, tool count, last error, stderr tail, Restart.
function renderServers(s) {
  const servers = s.servers || [];
  const key = JSON.stringify(servers);
  if (key === renderServers.last) return;  // unchanged: keep the rows (and a button mid-click)
  renderServers.last = key;
  $("servers-section").hidden = servers.length === 0;
  $("server-count").textContent = servers.length;
  $("servers").tBodies[0].replaceChildren(...servers.map((x) => el("tr", { "data-server": x.name },
    el("td", {}, el("code", {}, x.name), el("br"), el("small", {}, `${x.kind}: ${x.target}`)),
    el("td", { class: `state-${x.state}` }, x.state),
    el("td", {}, x.state === "ready" ? x.tools : ""),
    el("td", {},
      x.last_error && x.state !== "ready" ? el("p", {}, x.last_error) : "",
      x.changed.length ? el("p", { class: "why" }, `changed since approved: ${x.changed.join(", ")}`) : "",
      x.stderr.length && x.state !== "ready" ? el("pre", { class: "stderr" }, x.stderr.join("\n")) : ""),
    el("td", {}, el("button", { type: "button", onclick: () => restartServer(x.name) }, "Restart")),
  )));
}

// -- Rules: "Always allow calls like this", the rule lists, session grants, a rule tester --------

// The proposed rule, editable before saving; nothing when no rule could ever apply to the call.
// "Allow `git commit …` for this session": the bridge names the grant's scope (rendered text);
// where no grant as narrow as the call applies, a note instead of the button.
function allowSession(p) {
  if (!p.session_grant) return [el("span", { class: "muted no-session" }, "No “Allow for this session” for this call: no grant as narrow as the call applies")];
  return [el("button", { type: "button", class: "session", onclick: () => decide(p.id, "allow_session") }, p.session_grant)];
}

function alwaysAllow(p) {
  if (!p.proposed_rule) return [el("span", { class: "muted no-always" }, noAlwaysText(p))];
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
    // A rule may hold a path or a value an agent wrote: shown as the server rendered it
    // (rules_display), the raw text kept only to remove it.
    const shown = (s.rules_display || {})[list] || [];
    (s.rules[list] || []).forEach((text, i) => items.push(el("li", { class: `rule rule-${list}`, "data-list": list, "data-rule": text },
      el("span", { class: "rule-list" }, list), " ", el("code", {}, shown[i] ? shown[i].text : "(not shown)"), " ",
      ...(shown[i] && shown[i].hidden ? [el("span", { class: "hidden-warning" }, "⚠ contains hidden characters"), " "] : []),
      el("button", { type: "button", onclick: () => removeRule(list, text, shown[i] ? shown[i].text : "the rule") }, "Remove"),
    )));
  }
  $("rule-count").textContent = items.length;
  $("rules").replaceChildren(...items);
  $("no-rules").hidden = items.length > 0;
  const grants = (s.grants || []).map((g) => el("li", { class: "grant" },
    el("code", {}, g.tool), ` ${g.scope || ""} for ${g.client} (session ${g.session}) `,
    el("button", { type: "button", onclick: () => revokeGrant(g) }, "Revoke"),
  ));
  $("grants").replaceChildren(...grants);
  $("no-grants").hidden = grants.length > 0;
}

async function removeRule(list, text, label) {
  try {
    await api("DELETE", `/api/rules/${list}/${encodeURIComponent(text)}`);
    toast(`Removed ${label}`);
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
    const list = $("rule-list").value;
    const key = JSON.stringify([list, rule]);
    const shown = $("rule-examples");
    try {
      if (setupRules.shown !== key) {
        // First what the rule means: two calls it matches, one it does not; Add again saves.
        const ex = await api("POST", "/api/rules/examples", { list, rule });
        const lines = ex.every ? [`matches every call of the tool`] :
          [...ex.matches.map((m) => `matches: ${m}`), ...ex.misses.map((m) => `does not match: ${m}`)];
        shown.replaceChildren(...lines.map((l) => el("li", {}, l)), el("li", { class: "muted" }, "Press Add again to save it."));
        setupRules.shown = key;
        return;
      }
      await api("POST", "/api/rules", { list, rule });
      $("rule-text").value = "";
      shown.replaceChildren();
      setupRules.shown = null;
      toast(`Added ${rule}`);
    } catch (e) { toast(e.message); }
  });
  $("rule-test").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const command = $("rule-test-command").value;
    try {
      const r = await api("POST", "/api/rules/test", { command });
      const what = { allow: "runs unattended", ask: "asks a human", deny: "is refused" }[r.outcome];
      let text = `${what} (no rule matches; ${r.why || `the ${r.decided_by} decides`})`;
      if (r.rule) text = `${what}: rules.${r.list}[${r.index}] ${r.rule_display || ""}`;
      else if (r.unsafe) text = `${what}: no allow rule can cover it: ${r.unsafe}`;
      $("rule-test-result").textContent = text;
    } catch (e) { $("rule-test-result").textContent = e.message; }
  });
}

function render() {
  if (!state) return;
  const s = state;
  $("status").textContent = `${s.paused ? "Paused" : "Running"} · ${s.counts.sessions} session(s) · ${s.counts.pending} waiting · ${s.calls_total} call(s)` + (s.warnings.length ? ` · ⚠ ${s.warnings.join("; ")}` : "");
  if (s.box) {
    $("box").textContent = s.box.text;
    $("box").className = s.box.available ? "" : "nobox";
  }
  renderExposed(s);
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
  for (const p of s.pending) if (!shown.has(p.id)) list.append(pendingCard(p));
  renderBatches(s);
  tick();
  focusHash();

  if (s.calls_total !== render.calls || s.pending.length !== render.pending) {
    render.calls = s.calls_total;  // the audit trail only changes when calls do
    render.pending = s.pending.length;
    loadAudit();
  }
  renderServers(s);
  renderRules(s);
  renderMachines(s);
  $("session-count").textContent = s.sessions.length;
  const tbody = $("sessions").tBodies[0];
  tbody.replaceChildren(...s.sessions.map((x) => el("tr", {},
    el("td", {}, x.machine || ""),
    el("td", {}, `${x.client} ${x.version}` + (x.hidden ? " ⚠ hidden characters" : "")),
    el("td", {}, x.calls),
    el("td", {}, x.pending),
    el("td", {}, `${ago(Date.now() / 1000 - x.last_seen)} ago`),
    el("td", {}, el("button", { type: "button", onclick: () => endSession(x) }, "End session")),
  )));
}

// Machines (server/machines): names come from tokens. "Revoke…" asks first, in the row
// itself, and says what it cuts; a snapshot arriving meanwhile keeps the question open.
let confirmingMachine = null;

function since(t) {
  return t == null ? "—" : `${ago(Date.now() / 1000 - t)} ago`;
}

function machineActions(m) {
  if (m.name === "default") return el("span", { class: "muted" }, "the bridge's own token");
  if (confirmingMachine !== m.name) {
    return el("button", { type: "button", onclick: () => { confirmingMachine = m.name; render(); } }, "Revoke…");
  }
  return el("span", { class: "confirm", role: "group", "aria-label": `Revoke ${m.name}?` },
    `Revoke ${m.name}? Its ${m.sessions} session(s) end and its token stops working for good. `,
    el("button", { type: "button", class: "danger", onclick: () => revokeMachine(m.name) }, "Revoke"),
    " ",
    el("button", { type: "button", onclick: () => { confirmingMachine = null; render(); } }, "Cancel"),
  );
}

function renderMachines(s) {
  const machines = s.machines || [];
  $("machine-count").textContent = machines.length;
  if (confirmingMachine && !machines.some((m) => m.name === confirmingMachine)) confirmingMachine = null;
  // Rebuilt only when what it shows changed: a button is not swapped under a pointer by a
  // snapshot that only moved another counter.
  const key = JSON.stringify([confirmingMachine, machines.map((m) =>
    [m.name, since(m.created), since(m.last_seen), m.calls, m.sessions, m.tunnel])]);
  if (key === renderMachines.key) return;
  renderMachines.key = key;
  $("machines").tBodies[0].replaceChildren(...machines.map((m) => el("tr", { "data-machine": m.name },
    el("td", {}, m.name),
    el("td", {}, m.created == null ? "—" : since(m.created)),
    el("td", {}, since(m.last_seen)),
    el("td", {}, m.calls),
    el("td", {}, m.sessions),
    el("td", {}, m.tunnel || "—"),
    el("td", {}, machineActions(m)),
  )));
}

async function revokeMachine(name) {
  confirmingMachine = null;
  try {
    await api("DELETE", `/api/machines/${encodeURIComponent(name)}`);
    toast(`Revoked ${name}: its token no longer works`);
  } catch (e) { toast(e.message); }
  render();
}

async function endSession(x) {
  try {
    await api("DELETE", `/api/sessions/${encodeURIComponent(x.sid)}`);
    toast(`Ended ${x.client}'s session`);
  } catch (e) { toast(e.message); }
}

const OUTCOMES = { no_approver: "no approver attached", timeout: "timed out", cancelled: "cancelled", paused: "paused" };

// Who decided and why, from the audit (the reason is agent-visible text the user typed).
function outcomeText(c) {
  if (c.pending) return "pending";
  const via = c.approver ? ` via ${c.approver}` : "";
  const why = c.reason ? ` (${c.reason})` : "";
  if (c.decided_by === "user" && c.outcome === "denied") return `denied by the user${via}${why}`;
  if (c.decided_by === "user") return `${c.outcome} — approved by the user${via}`;
  if (OUTCOMES[c.outcome]) return OUTCOMES[c.outcome];
  return c.outcome;
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
          el("td", {}, c.machine ? `${c.client || ""} on ${c.machine}` : (c.client || "")),
          el("td", { class: `outcome-${outcome}` }, outcomeText(c)),
          el("td", {}, c.duration_ms == null ? "" : `${c.duration_ms} ms`),
          el("td", { class: "args" }, (c.hidden ? "⚠ hidden characters · " : "") + (c.args || "")),
        );
      });
      $("audit").tBodies[0].replaceChildren(...rows);
    } catch (e) { /* the next change retries */ }
  }, 150);
}

// --- header: exposed, logs ------------------------------------------------------------------
// What the bridge exposes (roots, tiers changed from the defaults, withheld tools) in one line,
// and "Show logs": the log file's last lines through the control API, shown as text only.
function renderExposed(s) {
  $("exposed").textContent = s.exposed || "";
  $("log-path").textContent = s.log_path || "";
}

async function loadLogs() {
  try {
    const data = await api("GET", "/api/logs?limit=200");
    $("log-path").textContent = data.path;
    $("log-lines").textContent = data.lines.length ? data.lines.join("\n") : "(the log is empty)";
  } catch (e) { $("log-lines").textContent = e.message; }
}

$("show-logs").addEventListener("click", () => {
  const section = $("logs-section");
  section.hidden = !section.hidden;
  $("show-logs").textContent = section.hidden ? "Show logs" : "Hide logs";
  $("show-logs").setAttribute("aria-expanded", String(!section.hidden));
  if (!section.hidden) loadLogs();
});
$("logs-refresh").addEventListener("click", loadLogs);
// --- end of header: exposed, logs -------------------------------------------------------------

// -- The events socket's diffs (issue 26; the format: server/present/delta.py) --------------
// One full snapshot, then only what changed; a diff that does not follow our version asks for
// the whole state again.
function applyList(old, part) {
  const items = new Map(old.map((x) => [x[part.key], x]));
  for (const k of part.remove || []) items.delete(k);
  for (const x of part.upsert || []) items.set(x[part.key], x);  // in place, or at the end
  for (const k of part.last || []) { const x = items.get(k); items.delete(k); items.set(k, x); }
  return [...items.values()];
}

function applyEvent(old, msg) {
  if (!("diff" in msg)) return msg;
  if (!old || msg.base !== old.version) return null;
  const next = { ...old, ...(msg.diff.set || {}), version: msg.version };
  for (const k of msg.diff.unset || []) delete next[k];
  for (const [k, part] of Object.entries(msg.diff.lists || {})) next[k] = applyList(old[k] || [], part);
  return next;
}

function connect() {
  const url = `ws://${location.host}/api/events?as=approval%20page&diff=1`;
  socket = new WebSocket(url);
  socket.onopen = () => { retry = 500; };
  socket.onmessage = (ev) => {
    const next = applyEvent(state, JSON.parse(ev.data));
    if (next === null) { socket.send("full"); return; }
    state = next;
    render();
  };
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
setInterval(tick, 1000);  // live "waiting" and "auto-deny in" on every card
connect();

"""JSON views of bridge state for the control API, the page and the CLI (pure functions)."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

from ..policy.judge import Judgement
from ..policy.paths import Escalation, EscalationKind
from ..policy.proposals import savable
from ..policy.rules import RuleList, RuleSet, Verdict
from ..types import (
    GrantView,
    MachineView,
    PendingCall,
    ServerView,
    SessionView,
    Snapshot,
    TunnelView,
)
from ..vocab import Ground, Ruling, Tier
from .batch import batch_key, batches
from .boxview import placement_json, status_json
from .exposure import exposure_json
from .ids import sid_hash
from .preview import call_hidden, escalation_json, full_display
from .textsafe import render, safe, shorten


def pending_json(p: PendingCall, now: float | None = None) -> dict[str, Any]:
    """A bounded, safe summary of one pending call (snapshots, lists): never its arguments.

    Every string is rendered by :mod:`server.present.textsafe`; ``hidden`` is the "contains hidden
    characters" warning; ``deadline`` (wall clock, null when calls wait forever) lets each UI
    count down to the auto-deny. The full call is ``GET /api/pending/<id>``
    (:func:`pending_full_json`).
    """
    out = pending_state(p)
    out.update(pending_clock(p.arrived, p.deadline, time.time() if now is None else now))
    return out


def pending_clock(arrived: float, deadline: float | None, now: float) -> dict[str, Any]:
    """How long a call has waited and has left: the only part of its summary that changes
    while it waits (so the events socket's diffs leave it out; each UI counts itself)."""
    return {
        "waiting_s": round(max(now - arrived, 0.0), 1),
        "remaining_s": None if deadline is None else round(max(deadline - now, 0.0), 1),
    }


def pending_state(p: PendingCall) -> dict[str, Any]:
    """:func:`pending_json` without the clock (``waiting_s``, ``remaining_s``): the same for
    as long as the call waits."""
    client = shorten(p.client, 80)
    tool = shorten(p.tool, 80)
    escalation = escalation_json(p.escalation)
    upstream = _upstream_json(p)
    hidden = call_hidden(p)  # the one decision every UI shows (the reason is an argument)
    return {
        "id": p.id,
        "sid": p.sid,  # the authenticated control API only; UIs show the hash
        "session": sid_hash(p.sid),
        "sid_hash": sid_hash(p.sid),
        "client": client.text,
        "machine": p.machine,  # from the token: a checked name, no agent text
        "tool": tool.text,
        "summary": p.summary,
        "hidden": hidden,
        "escalation": escalation,
        "preview": p.preview,
        "upstream": upstream,
        "proposed_rule": _proposal_json(p.proposed_rule),
        # "Allow … for this session", naming its scope; null: not offered for this call.
        "session_grant": _grant_label(p),
        "box": placement_json(p.box),  # bash: in the box or outside it (and the agent's why)
        # The batch kind (server/present/batch.py) or null: never batched with another call.
        "batch": None if (key := batch_key(p)) is None else key.id,
        "arrived": p.arrived,
        "deadline": p.deadline,
    }


def _upstream_json(p: PendingCall) -> dict[str, Any] | None:
    """An upstream tool's own words (description, annotations) are untrusted text: rendered
    safe and bounded like agent text, and a hidden character raises the call's warning."""
    if p.upstream is None:
        return None
    out = p.upstream.to_json()
    description = shorten(out["description"], 4000, multiline=True)
    annotations = shorten(json.dumps(out["annotations"], ensure_ascii=False), 1000)
    out["server"] = shorten(out["server"], 80).text
    out["tool"] = shorten(out["tool"], 120).text
    out["description"] = description.text
    out["annotations_text"] = annotations.text
    out["hidden"] = description.hidden or annotations.hidden
    return out


def _grant_label(p: PendingCall) -> str | None:
    """The scoped grant's button text; its scope holds the agent's words, so rendered."""
    label = p.grant_label
    return None if label is None else shorten(label, 300).text


def _proposal_json(rule: str | None) -> str | None:
    """The rule "Always allow calls like this" would save, exactly as it would be saved (the
    page lets the human edit it), or None when :func:`server.policy.proposals.savable` refuses it
    (hidden characters, too long): such a call is approved once, never made a standing rule."""
    return rule if rule is not None and savable(rule) is None else None


def rules_display(rules: RuleSet) -> dict[str, list[dict[str, Any]]]:
    """Each list's rules as a UI shows them: ``text`` rendered safe (a rule may hold a path or
    a value an agent wrote), ``hidden`` for the warning. Same order as ``rules`` (whose raw
    texts stay for removing one through the API)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for which, texts in rules.to_json().items():
        shown = [render(t, multiline=True) for t in texts]
        out[which] = [{"text": r.text, "hidden": r.hidden} for r in shown]
    return out


def pending_full_json(p: PendingCall, now: float | None = None) -> dict[str, Any]:
    """One call in full: the summary plus the raw ``arguments`` (for API clients) and
    ``display``, every argument rendered safe in full (what the page and ``watch`` show)."""
    out = pending_json(p, now)
    out["arguments"] = p.arguments
    out["display"] = full_display(p.tool, p.arguments)
    return out


def session_json(s: SessionView) -> dict[str, Any]:
    """Client name and version are agent text: rendered safe and capped."""
    client, version = shorten(s.client, 80), shorten(s.version, 40)
    return {
        "sid": s.sid,
        "session": sid_hash(s.sid),
        "sid_hash": sid_hash(s.sid),
        "client": client.text,
        "machine": s.machine,  # from the token: a checked name, no agent text
        "version": version.text,
        "hidden": client.hidden or version.hidden,
        "created": s.created,
        "last_seen": s.last_seen,
        "calls": s.calls,
        "pending": s.pending,
        "protocol": s.protocol,
    }


def snapshot_json(snap: Snapshot, now: float | None = None) -> dict[str, Any]:
    return with_clock(snapshot_state(snap), time.time() if now is None else now)


def with_clock(state: dict[str, Any], now: float) -> dict[str, Any]:
    """A :func:`snapshot_state` as :func:`snapshot_json` gives it: each waiting call with its
    clock as of ``now``."""
    pending = [{**p, **pending_clock(p["arrived"], p["deadline"], now)} for p in state["pending"]]
    return {**state, "pending": pending}


class ViewMemo:
    """The JSON of each session, waiting call, server, the rules and the grants, kept from one
    snapshot to the next while it is unchanged.

    Why: the events socket publishes a snapshot many times a second under traffic, and with
    64 sessions and 32 waiting calls rendering each item safe again was most of the cost. An
    unchanged item keeps its very dict, so :func:`server.present.delta.diff` skips it by
    identity. Only the current items are kept (the memo never grows past one snapshot).
    """

    def __init__(self) -> None:
        self.sessions: dict[SessionView, dict[str, Any]] = {}
        # by sid: the session with its counts and clock zeroed, and that rendered
        self._session_fixed: dict[str, tuple[SessionView, dict[str, Any]]] = {}
        self.pending: dict[str, tuple[PendingCall, dict[str, Any]]] = {}
        self.servers: dict[ServerView, dict[str, Any]] = {}
        self.rules: tuple[RuleSet, dict[str, Any], dict[str, Any]] | None = None
        self.grants: tuple[tuple[GrantView, ...], list[dict[str, Any]]] | None = None

    def session(self, views: tuple[SessionView, ...]) -> list[dict[str, Any]]:
        """A session used since the last snapshot changes only its counts and clock: those
        are patched into the rest, which is rendered once per session (client names are
        agent text: rendering them safe is the expensive part)."""
        old, fixed = self.sessions, self._session_fixed
        self.sessions, self._session_fixed = {}, {}
        for v in views:
            json_ = old.get(v)
            if json_ is None:
                key = replace(v, last_seen=0.0, calls=0, pending=0)
                known = fixed.get(v.sid)
                rest = known[1] if known is not None and known[0] == key else session_json(key)
                fixed[v.sid] = (key, rest)
                json_ = {**rest, "last_seen": v.last_seen, "calls": v.calls, "pending": v.pending}
            self.sessions[v] = json_
            if v.sid in fixed:
                self._session_fixed[v.sid] = fixed[v.sid]
        return list(self.sessions.values())

    def pending_calls(self, calls: tuple[PendingCall, ...]) -> list[dict[str, Any]]:
        old, new = self.pending, {}
        for p in calls:
            known = old.get(p.id)
            new[p.id] = known if known is not None and known[0] is p else (p, pending_state(p))
        self.pending = new
        return [j for _, j in new.values()]

    def server(self, views: tuple[ServerView, ...]) -> list[dict[str, Any]]:
        old = self.servers
        self.servers = {v: old.get(v) or server_json(v, stderr_lines=5) for v in views}
        return list(self.servers.values())

    def rule_set(self, rules: RuleSet) -> tuple[dict[str, Any], dict[str, Any]]:
        if self.rules is None or self.rules[0] is not rules:
            self.rules = (rules, rules.to_json(), rules_display(rules))
        return self.rules[1], self.rules[2]

    def grant_list(self, grants: tuple[GrantView, ...]) -> list[dict[str, Any]]:
        if self.grants is None or self.grants[0] != grants:
            self.grants = (grants, [grant_json(g) for g in grants])
        return self.grants[1]


def snapshot_state(snap: Snapshot, memo: ViewMemo | None = None) -> dict[str, Any]:
    """The snapshot's JSON without the waiting calls' clocks: what the events socket diffs.
    With a ``memo``, unchanged items are the same dicts as in the previous state."""
    m = ViewMemo() if memo is None else memo
    rules, display = m.rule_set(snap.rules)
    return {
        "mcp_url": snap.url,
        "paused": snap.paused,
        "running": snap.running,
        "approvers": list(snap.approvers),
        "token_source": snap.token_source,
        "warnings": list(snap.warnings),
        "calls_total": snap.calls_total,
        "counts": {"sessions": len(snap.sessions), "pending": len(snap.pending)},
        "sessions": m.session(snap.sessions),
        "pending": m.pending_calls(snap.pending),
        # Approve/Deny all N: groups of waiting calls of one kind, each naming its ids.
        "batches": [b.to_json() for b in batches(snap.pending)],
        "servers": m.server(snap.servers),
        "rules": rules,
        "rules_display": display,
        "grants": m.grant_list(snap.grants),
        "box": status_json(snap.box),
        "tunnels": [tunnel_json(t) for t in snap.tunnels],
        "machines": [machine_json(m) for m in snap.machines],
        # What is exposed (roots, tiers changed from the defaults, withheld tools) and the log.
        **_exposure_keys(snap),
    }


def _exposure_keys(snap: Snapshot) -> dict[str, Any]:
    exposed = exposure_json(snap.exposure)
    return {
        "roots": exposed["roots"],
        "roots_display": exposed["roots_display"],
        "tiers": exposed["tiers"],
        "denied": exposed["denied"],
        "exposed": exposed["text"],
        "log_path": safe(snap.log_path),
    }


def tunnel_json(t: TunnelView) -> dict[str, Any]:
    """A tunnel the app keeps up; ``last_error`` is ssh's words, rendered safe."""
    return {
        "name": t.name,
        "target": safe(t.target),
        "remote_port": t.remote_port,
        "remote_url": t.remote_url,
        "local_port": t.local_port,
        "client": t.client,
        "state": t.state.value,
        "last_error": None if t.last_error is None else safe(t.last_error),
        "since": t.since,
        "attempts": t.attempts,
        "retry_in": None if t.retry_in is None else round(t.retry_in, 1),
    }


def machine_json(m: MachineView) -> dict[str, Any]:
    """A machine as the UIs list it; never its token (the bridge holds only a digest)."""
    return {
        "name": m.name,
        "created": m.created,
        "last_seen": m.last_seen,
        "calls": m.calls,
        "sessions": m.sessions,
        "tunnel": m.tunnel,
    }


def grant_json(g: GrantView) -> dict[str, Any]:
    """An "Allow for this session" grant. The client name is agent text (rendered like
    everywhere else); ``sid`` is for revoking through the API only, ``session`` is what a UI
    shows."""
    return {
        "sid": g.sid,
        "session": sid_hash(g.sid),
        "client": shorten(g.client, 80).text,
        "machine": g.machine,
        "tool": g.tool,
        "scope": shorten(g.scope, 200).text,  # holds the agent's words: rendered
        "label": shorten(g.label, 300).text,
    }


def rules_json(rules: RuleSet, grants: tuple[GrantView, ...]) -> dict[str, Any]:
    """The three lists as saved, and the live "Allow for this session" grants."""
    data: dict[str, Any] = rules.to_json()
    data["display"] = rules_display(rules)
    data["grants"] = [grant_json(g) for g in grants]
    return data


def server_json(s: ServerView, stderr_lines: int | None = None) -> dict[str, Any]:
    """An upstream MCP server; the snapshot carries only the last few stderr lines."""
    # The server's stderr, its exit reason and its skipped tools' names are its own words:
    # rendered safe like agent text (a terminal or the tray never gets a raw escape).
    stderr = [safe(x) for x in (s.stderr if stderr_lines is None else s.stderr[-stderr_lines:])]
    return {
        "name": s.name,
        "kind": s.kind,
        "target": safe(s.target),
        "state": s.state,
        "last_error": None if s.last_error is None else safe(s.last_error),
        "tools": s.tools,
        "restarts": s.restarts,
        "changed": list(s.changed),
        "skipped": [safe(x) for x in s.skipped],
        "stderr": stderr,
        "box": s.box,
    }


def audit_call_json(call: dict[str, Any]) -> dict[str, Any]:
    """One paired call from the audit log (start and done joined by id), agent text made safe."""
    start = call.get("start") or {}
    done = call.get("done") or {}
    rec = start or done
    texts = {
        key: shorten(value, limit) if value is not None else None
        for key, value, limit in (
            ("client", rec.get("client"), 80),
            ("tool", rec.get("tool"), 80),
            ("args", rec.get("args"), 600),
            ("reason", done.get("reason"), 300),
        )
    }
    return {
        "id": call["id"],
        "ts": rec.get("ts"),
        "sid": rec.get("sid"),
        "client": texts["client"] and texts["client"].text,
        # a checked name from the bridge's own record; older records have none
        "machine": shorten(rec["machine"], 40).text
        if isinstance(rec.get("machine"), str)
        else None,
        "tool": texts["tool"] and texts["tool"].text,
        "args": texts["args"] and texts["args"].text,
        "hidden": any(t.hidden for t in texts.values() if t is not None),
        "pending": not done,
        "outcome": done.get("outcome"),
        "isError": done.get("isError"),
        "decided_by": done.get("decided_by"),
        "approver": done.get("approver"),
        "reason": texts["reason"] and texts["reason"].text,
        "wait_ms": done.get("wait_ms"),
        "duration_ms": done.get("duration_ms"),
    }


SID_LISTS = ("sessions", "pending", "grants")


def without_session_ids(data: Any) -> Any:
    """The API's JSON as a UI prints it (``--json`` of the CLI): every ``sid`` becomes its
    12-hex hash, as in the audit log, the tray and the page. The full id is a secret (a grant
    rides on it) that only the authenticated control API carries; ``end-session`` takes the
    hash. Only the bridge's own objects are touched (a call's, a session's, a grant's), never
    an agent's ``arguments``."""

    def one(obj: Any) -> Any:
        if isinstance(obj, dict) and isinstance(obj.get("sid"), str):
            return {**obj, "sid": sid_hash(obj["sid"])}
        return obj

    if not isinstance(data, dict):
        return data
    out = one(data)
    for key in SID_LISTS:
        if isinstance(out.get(key), list):
            out = {**out, key: [one(x) for x in out[key]]}
    return out


_OUTCOME = {
    Ruling.RUN: "allow",
    Ruling.RUN_IN_BOX: "allow",
    Ruling.ASK: "ask",
    Ruling.REFUSE: "deny",
    Ruling.NOT_EXPOSED: "deny",
}


def judgement_json(j: Judgement) -> dict[str, Any]:
    """``POST /api/rules/test``: the judge's answer, in the field names the UIs always read
    (``outcome`` allow/ask/deny, ``decided_by`` the ground), plus ``verdict`` and ``why``."""
    m = j.match
    return {
        "tool": j.tool,
        "outcome": _OUTCOME[j.ruling],
        "verdict": j.ruling.value,
        "decided_by": j.ground.value,
        "why": j.text,
        "list": m.decision.value if m.decision else None,
        "rule": m.rule,
        # The matching rule may hold an agent's path or value: for display, rendered.
        "rule_display": None if m.rule is None else render(m.rule).text,
        "index": m.index,
        "tier": j.tier.value if j.tier is not None else None,
        "unsafe": m.unsafe,
        "escalation": escalation_json(j.escalation),
        "deciding_rule": j.rule,
        "invalid": None if j.invalid is None else safe(j.invalid),
    }


def judgement_from_json(data: dict[str, Any]) -> Judgement:
    """The typed answer back from :func:`judgement_json` (the control client's ``test_rule``)."""
    esc = data.get("escalation")
    escalation = None
    if isinstance(esc, dict) and esc.get("kind"):
        escalation = Escalation(EscalationKind(esc["kind"]), esc["category"], esc["path"])
    listed = data.get("list")
    which = RuleList(listed) if listed else None
    match = Verdict(which, data.get("rule"), data.get("index"), data.get("unsafe"))
    tier = data.get("tier")
    return Judgement(
        Ruling(data["verdict"]),
        Ground(data["decided_by"]),
        data["tool"],
        Tier(tier) if tier else None,
        match,
        data.get("deciding_rule"),
        escalation,
        data.get("invalid"),
    )

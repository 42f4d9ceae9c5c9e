"""The CLI verbs that talk to the running bridge: ``status``, ``sessions``, ``pending``,
``show``, ``servers``, ``approve``, ``deny``, ``end-session``, ``pause``, ``resume``, ``open``,
``watch``.

Each goes through :class:`~server.control.client.ControlClient`, the
:class:`~server.api.BridgeControl` over HTTP: the same ``decide``, ``pause``, ``end_session``
the tray calls in process. With no bridge running they raise
:class:`~server.errors.NotRunning`, which ``main`` prints in one line (exit 1).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from ..control.client import ControlClient
from ..core.approvals import Decision
from ..errors import BridgeError, ControlError
from ..present.exposure import machines_text
from ..present.textsafe import safe
from ..present.timefmt import ago
from ..present.views import without_session_ids
from ..present.watchtext import describe, describe_full


def print_json(data: object) -> None:
    # ASCII only: C1 controls (U+009B is an 8-bit CSI) and bidi marks come out as \uXXXX.
    # Session ids only as their hash: the CLI is a UI, not the authenticated API.
    print(json.dumps(without_session_ids(data), indent=2, ensure_ascii=True))


def cmd_status(args: argparse.Namespace) -> int:
    s = ControlClient.connect().status()
    if args.json:
        print_json(s)
        return 0
    state = "paused" if s["paused"] else "running"
    print(f"a2a-bridge {state} on {s['mcp_url']}")
    print(
        f"  {s['counts']['sessions']} session(s), {s['counts']['pending']} waiting for "
        f"approval, {s['calls_total']} call(s) since start"
    )
    approvers = ", ".join(safe(a) for a in s["approvers"])
    print(f"  approvers: {approvers or 'none (prompt-tier calls are refused)'}")
    print(f"  token stored in: {s['token_source']}")
    if s.get("exposed"):  # roots, tiers changed from the defaults, tools withheld
        print(f"  {safe(s['exposed'])}")
    box = s.get("box")
    if isinstance(box, dict):
        print(f"  {safe(box.get('text', ''))}")
    if s.get("log_path"):
        print(f"  log: {safe(s['log_path'])} ('a2a-bridge logs')")
    machines = s.get("machines") or []
    if machines:  # names from tokens; each with its sessions and its tunnel's state
        rows = [(str(m["name"]), int(m["sessions"]), m.get("tunnel")) for m in machines]
        print(f"  {machines_text(rows)}")
    servers = s.get("servers") or []
    if servers:
        ready = sum(1 for x in servers if x["state"] == "ready")
        print(f"  upstream MCP servers: {ready} of {len(servers)} ready ('a2a-bridge servers')")
    tunnels = s.get("tunnels") or []
    if tunnels:
        up = sum(1 for t in tunnels if t["state"] == "up")
        print(f"  tunnels: {up} of {len(tunnels)} up ('a2a-bridge tunnels')")
        for t in tunnels:
            if t["state"] != "up":
                why = f": {safe(t['last_error'])}" if t.get("last_error") else ""
                print(f"    {safe(t['name'])} {t['state']}{why}")
    for w in s["warnings"]:
        print(f"  warning: {safe(w)}")
    return 0


def _listing(
    args: argparse.Namespace, key: str, empty: str, line: Callable[[dict[str, Any]], str]
) -> int:
    """GET /api/<key>: the API's JSON with --json, else one entry per line (or ``empty``)."""
    data = ControlClient.connect().listing(key)
    if args.json:
        print_json(data)
    elif not data[key]:
        print(empty)
    for entry in [] if args.json else data[key]:
        print(line(entry))
    return 0


def cmd_sessions(args: argparse.Namespace) -> int:
    return _listing(
        args,
        "sessions",
        "no live sessions",
        lambda x: (
            f"{safe(x['sid_hash'])}  {safe(x.get('machine', ''))}  "
            f"{safe(x['client'])} {safe(x['version'])}  "
            f"{x['calls']} call(s)  "
            f"{x['pending']} waiting  last seen {ago(time.time() - x['last_seen'])} ago"
            + ("  ⚠ contains hidden characters" if x.get("hidden") else "")
        ),
    )


def cmd_pending(args: argparse.Namespace) -> int:
    return _listing(args, "pending", "nothing is waiting for approval", describe)


def cmd_show(args: argparse.Namespace) -> int:
    """One pending call in full, every argument rendered safe."""
    call = ControlClient.connect().pending_call(args.id)
    if args.json:
        print_json(call)
        return 0
    print(describe(call))
    print(describe_full(call))
    return 0


def _server_line(x: dict[str, Any]) -> str:
    line = f"{x['name']}  {x['state']}  {x['tools']} tool(s)  {x['kind']}: {x['target']}"
    if x.get("box"):
        line += f"\n    {x['box']}"
    if x["last_error"]:
        line += f"\n    last error: {x['last_error']}"
    for name in x["changed"]:
        line += f"\n    changed since approved: {name}"
    for text in x["skipped"]:
        line += f"\n    skipped: {text}"
    if x["stderr"] and x["state"] != "ready":
        line += "\n    stderr: " + "\n            ".join(x["stderr"][-5:])
    return line


def cmd_servers(args: argparse.Namespace) -> int:
    if getattr(args, "restart", None):
        if not ControlClient.connect().restart_server(args.restart):
            raise ControlError(404, f"no upstream server named {args.restart}")
        print(f"upstream server {args.restart} restarting")
        return 0
    return _listing(args, "servers", "no upstream MCP servers configured", _server_line)


def _decide(call_id: str, decision: Decision, reason: str | None = None, rule: str | None = None):
    if not ControlClient.connect().decide(call_id, decision, reason, rule=rule):
        raise ControlError(404, f"call {call_id} is no longer pending")


def cmd_approve(args: argparse.Namespace) -> int:
    decision = (
        Decision.RUN_OUTSIDE_BOX
        if getattr(args, "outside_box", False)
        else Decision.ALLOW_ALWAYS
        if args.always or args.rule
        else Decision.ALLOW_SESSION
        if args.session
        else Decision.APPROVE
    )
    _decide(args.id, decision, rule=args.rule or None)
    done = "approved to run outside the box" if decision is Decision.RUN_OUTSIDE_BOX else None
    print(f"{args.id}: {done or decision.replace('_', ' ')}")
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    _decide(args.id, Decision.DENY, reason=args.reason or None)
    print(f"{args.id}: denied")
    return 0


def cmd_end_session(args: argparse.Namespace) -> int:
    """End a session named by the 12-hex hash every UI shows (or its full id, from the API).

    The full id is a secret (it is what a client sends), so no listing prints it; the hash
    is resolved to it through the authenticated control API.
    """
    client = ControlClient.connect()
    sessions = client.listing("sessions")["sessions"]
    match = [x for x in sessions if args.sid in (x["sid"], x["sid_hash"])]
    if not match or not client.end_session(match[0]["sid"]):
        raise BridgeError(f"no live session {safe(args.sid)} (see 'a2a-bridge sessions')")
    print(f"session {match[0]['sid_hash']} ended")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    paused = args.command == "pause"
    ControlClient.connect().pause(paused)
    print("bridge paused" if paused else "bridge resumed")
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    import webbrowser  # finds a browser at import: only for this verb

    client = ControlClient.connect()
    if getattr(args, "link", False):
        print(f"open this address in a browser on this machine within 60 s: {client.login_url()}")
        return 0
    # The browser gets the path of a 0600 login page, never the code: a command line is
    # visible to every local user (ps) while the code is still fresh.
    if not webbrowser.open(client.login_page()):
        url = client.login_url()
        print(f"open this address in a browser on this machine within 60 s: {url}")
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    from .watch import run_watch

    return run_watch(ControlClient.connect)


def add_remote_parsers(sub: argparse._SubParsersAction) -> None:
    for name, func, text in (
        ("status", cmd_status, "state of the running bridge"),
        ("sessions", cmd_sessions, "live MCP sessions"),
        ("pending", cmd_pending, "calls waiting for approval (bounded previews)"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("--json", action="store_true", help="print the API's JSON")
        c.set_defaults(func=func)
    sh = sub.add_parser("show", help="one pending call in full (every argument, safe-rendered)")
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true", help="print the API's JSON")
    sh.set_defaults(func=cmd_show)
    sv = sub.add_parser("servers", help="upstream MCP servers: state, tools, last error")
    sv.add_argument("--json", action="store_true", help="print the API's JSON")
    sv.add_argument("--restart", metavar="NAME", help="restart that server now")
    sv.set_defaults(func=cmd_servers)
    ap = sub.add_parser("approve", help="approve a pending call")
    ap.add_argument("id")
    g = ap.add_mutually_exclusive_group()
    g.add_argument("--session", action="store_true", help="and allow the tool for that session")
    g.add_argument(
        "--always", action="store_true", help="and always allow calls like this (saves a rule)"
    )
    g.add_argument("--rule", help="and always allow: save this rule instead of the proposal")
    g.add_argument(
        "--outside-box",
        action="store_true",
        help="bash: run this one call outside the box (no sandbox)",
    )
    ap.set_defaults(func=cmd_approve)
    dn = sub.add_parser("deny", help="deny a pending call")
    dn.add_argument("id")
    dn.add_argument("--reason", help="told to the agent")
    dn.set_defaults(func=cmd_deny)
    es = sub.add_parser("end-session", help="end a live session (like the client's DELETE)")
    es.add_argument("sid", help="the session's 12-hex hash, as 'a2a-bridge sessions' shows it")
    es.set_defaults(func=cmd_end_session)
    sub.add_parser("pause", help="refuse every new call until resumed").set_defaults(func=cmd_pause)
    sub.add_parser("resume", help="accept calls again").set_defaults(func=cmd_pause)
    op = sub.add_parser("open", help="open the approval page in the browser")
    op.add_argument(
        "--link",
        action="store_true",
        help="print a one-time link to paste instead (for a browser that cannot read the "
        "runtime directory, e.g. a confined snap or flatpak)",
    )
    op.set_defaults(func=cmd_open)
    sub.add_parser("watch", help="approve calls from this terminal").set_defaults(func=cmd_watch)

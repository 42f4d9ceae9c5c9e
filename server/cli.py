"""``a2a-bridge``: serve headless, run the tray, and inspect token, URL, config and audit."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from . import clientconfig
from .audit import pair_calls, read_records
from .childenv import hide_own_environment
from .config import ConfigError, audit_path, load_config
from .control_client import ControlClient, ControlError, NotRunning
from .controlfile import AlreadyRunning, read_control
from .logsetup import setup_logging
from .rules_cli import add_rules_parser
from .runner import BridgeRunner, RunnerOptions, StartupError, url_for
from .textsafe import safe, shorten
from .tokens import TokenStore
from .watch import describe


def client_config(url: str, token: str, name: str = "omp-host") -> dict:
    """The snippet a remote agent's MCP config needs (protocol.md §7)."""
    return {
        "mcpServers": {
            name: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}
        }
    }


def fail(message: str, code: int = 1) -> int:
    print(f"a2a-bridge: {message}", file=sys.stderr)
    return code


class StopRequested(BaseException):
    """SIGTERM/SIGINT while the bridge is still starting (e.g. stuck on a locked keyring)."""


def cmd_serve(args: argparse.Namespace) -> int:
    """Headless bridge. A requested stop (SIGTERM/SIGINT) exits 0 within ~2 s in every state,
    a failure exits 1 with one line on stderr; nothing prints a traceback."""
    hide_own_environment()  # /proc/<pid>/environ unreadable to the agent's processes
    runner = BridgeRunner(RunnerOptions(host=args.host, port=args.port, control=True))
    stop = threading.Event()
    starting = [True]

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        if starting[0]:
            starting[0] = False  # raise once; the start's cleanup must not be interrupted
            raise StopRequested

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        try:
            runner.start()
        finally:
            starting[0] = False
    except StopRequested:
        return 0
    except AlreadyRunning as e:
        print(f"a2a-bridge: {e}", file=sys.stderr)
        return 0
    except StartupError as e:
        return fail(f"failed to start: {e}")
    except Exception as e:  # never a traceback for the user; the detail goes to the log
        logging.getLogger("a2a-bridge").debug("start failed", exc_info=True)
        return fail(f"failed to start: {type(e).__name__}: {e}")
    if stop.is_set():  # asked to stop while the start finished
        runner.stop()
        return 0
    with contextlib.suppress(OSError):  # stdout closed: keep serving, the log still works
        print(f"a2a-bridge listening on {runner.url}", flush=True)
    while not stop.wait(0.1):
        if not runner.running:
            return fail("the bridge stopped unexpectedly (see the log above)")
    runner.stop()
    return 0


# -- commands that talk to the running bridge ---------------------------------------------------


def _print_json(data: object) -> None:
    # ASCII only: C1 controls (U+009B is an 8-bit CSI) and bidi marks come out as \uXXXX.
    print(json.dumps(data, indent=2, ensure_ascii=True))


def _ago(ts: float) -> str:
    s = max(time.time() - ts, 0)
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.0f} h"


def cmd_status(args: argparse.Namespace) -> int:
    s = ControlClient.connect().request("GET", "/api/status")
    if args.json:
        _print_json(s)
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
    servers = s.get("servers") or []
    if servers:
        ready = sum(1 for x in servers if x["state"] == "ready")
        print(f"  upstream MCP servers: {ready} of {len(servers)} ready ('a2a-bridge servers')")
    for w in s["warnings"]:
        print(f"  warning: {safe(w)}")
    return 0


def _listing(args: argparse.Namespace, key: str, empty: str, line: Callable[[dict], str]) -> int:
    """GET /api/<key>: the API's JSON with --json, else one entry per line (or ``empty``)."""
    data = ControlClient.connect().request("GET", f"/api/{key}")
    if args.json:
        _print_json(data)
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
            f"{safe(x['sid_hash'])}  {safe(x['client'])} {safe(x['version'])}  "
            f"{x['calls']} call(s)  "
            f"{x['pending']} waiting  last seen {_ago(x['last_seen'])} ago"
            + ("  ⚠ contains hidden characters" if x.get("hidden") else "")
        ),
    )


def cmd_pending(args: argparse.Namespace) -> int:
    return _listing(args, "pending", "nothing is waiting for approval", describe)


def cmd_show(args: argparse.Namespace) -> int:
    """One pending call in full, every argument rendered safe."""
    from .watch import describe_full

    call = ControlClient.connect().request("GET", f"/api/pending/{args.id}")
    if args.json:
        _print_json(call)
        return 0
    print(describe(call))
    print(describe_full(call))
    return 0


def _server_line(x: dict) -> str:
    line = f"{x['name']}  {x['state']}  {x['tools']} tool(s)  {x['kind']}: {x['target']}"
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
        ControlClient.connect().request("POST", f"/api/servers/{args.restart}/restart")
        print(f"upstream server {args.restart} restarting")
        return 0
    return _listing(args, "servers", "no upstream MCP servers configured", _server_line)


def cmd_approve(args: argparse.Namespace) -> int:
    decision = (
        "allow_always"
        if args.always or args.rule
        else "allow_session"
        if args.session
        else "approve"
    )
    body = {"decision": decision}
    if args.rule:
        body["rule"] = args.rule
    ControlClient.connect().request("POST", f"/api/pending/{args.id}", body)
    print(f"{args.id}: {decision.replace('_', ' ')}")
    return 0


def cmd_deny(args: argparse.Namespace) -> int:
    body: dict[str, object] = {"decision": "deny"}
    if args.reason:
        body["reason"] = args.reason
    ControlClient.connect().request("POST", f"/api/pending/{args.id}", body)
    print(f"{args.id}: denied")
    return 0


def cmd_end_session(args: argparse.Namespace) -> int:
    """End a session named by the 12-hex hash every UI shows (or its full id, from the API).

    The full id is a secret (it is what a client sends), so no listing prints it; the hash
    is resolved to it through the authenticated control API.
    """
    client = ControlClient.connect()
    sessions = client.request("GET", "/api/sessions")["sessions"]
    match = [x for x in sessions if args.sid in (x["sid"], x["sid_hash"])]
    if not match:
        return fail(f"no live session {safe(args.sid)} (see 'a2a-bridge sessions')")
    client.request("DELETE", f"/api/sessions/{match[0]['sid']}")
    print(f"session {match[0]['sid_hash']} ended")
    return 0


def cmd_pause(args: argparse.Namespace) -> int:
    paused = args.command == "pause"
    ControlClient.connect().request("POST", "/api/pause", {"paused": paused})
    print("bridge paused" if paused else "bridge resumed")
    return 0


def cmd_open(args: argparse.Namespace) -> int:
    import webbrowser

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


def _configured_url() -> str:
    cfg = load_config()
    if cfg.port == 0:
        raise ConfigError("no port chosen yet: start the bridge once ('a2a-bridge serve')")
    return url_for(cfg.host, cfg.port)


def cmd_url(args: argparse.Namespace) -> int:
    print(_configured_url())
    return 0


def cmd_client_config(args: argparse.Namespace) -> int:
    url = _configured_url()
    store = TokenStore(load_config())
    token = store.resolve().token
    kind = getattr(args, "for_client", None)
    ssh = getattr(args, "ssh", None)
    if kind is not None:
        print(clientconfig.render(clientconfig.ClientKind(kind), url, token, ssh))
        return 0
    if ssh is not None:
        tunnel, remote_url = clientconfig.ssh_tunnel(url, ssh)
        print("# 1. on this machine: keep this tunnel open (Ctrl-C ends it)")
        print(tunnel)
        print(f"# 2. on {ssh}: the MCP client config")
        url = remote_url
    print(json.dumps(client_config(url, token), indent=2))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    if args.action == "rotate" and read_control() is not None:
        # A bridge is running: rotate it live, so the old token stops working at once.
        ControlClient.connect().request("POST", "/api/token/rotate")
        print("token rotated in the running bridge; update remote client configs", file=sys.stderr)
        return 0
    store = TokenStore(load_config())
    state = store.resolve()
    if args.action == "show":
        print(state.token)
        return 0
    store.rotate()
    print(
        f"token rotated (stored in the {state.source}); update remote client configs",
        file=sys.stderr,
    )
    return 0


OUTCOME_WORDS = {
    "denied": "denied",
    "not_exposed": "not exposed",
    "no_approver": "no approver attached",
    "timeout": "timed out",
    "cancelled": "cancelled",
    "paused": "paused",
}


def _describe(call: dict) -> str:
    """One audit line; every field from the log is agent-influenced, so all of it is safe-rendered.

    Says who decided and why: ``denied by the user via approval page (wrong folder)``,
    ``no approver attached``, ``timed out``, ``cancelled``, ``paused``.
    """
    start, done = call["start"] or {}, call["done"] or {}
    rec = start or done
    ts = safe(rec.get("ts", "?"))
    status = safe(done.get("outcome", "?")) if done else "PENDING"
    took = f"{safe(done['duration_ms'])}ms" if "duration_ms" in done else "-"
    who = shorten(rec.get("client") or "?", 40).text
    tool = shorten(rec.get("tool", "?"), 60).text
    args = shorten(rec.get("args", ""), 300).text
    line = f"{ts}  {status:<11} {took:>8}  {tool}  ({who})  {args}"
    if done:
        line += "  — " + _decided(done)
    return line


def _decided(done: dict) -> str:
    """Who decided and why, in words."""
    outcome, by = done.get("outcome"), done.get("decided_by") or "policy"
    approver = f" via {shorten(done['approver'], 40).text}" if done.get("approver") else ""
    reason = f" ({shorten(done['reason'], 200).text})" if done.get("reason") else ""
    if by == "user" and outcome == "denied":
        return f"denied by the user{approver}{reason}"
    if by == "user":
        then = f", then {OUTCOME_WORDS[outcome]}" if outcome in OUTCOME_WORDS else ""
        return f"approved by the user{approver}{then}"
    if outcome == "no_approver":
        return "no approver attached"
    if outcome in OUTCOME_WORDS:
        return f"{OUTCOME_WORDS[outcome]} ({safe(by)}){reason}"
    if outcome in ("ok", "error"):
        return f"allowed by {safe(by).replace('_', ' ')}"
    return f"{safe(outcome)} ({safe(by)})"


def cmd_audit(args: argparse.Namespace) -> int:
    path = audit_path()
    cfg = load_config()
    calls = pair_calls(read_records(path, cfg.audit_keep))
    for call in calls[-args.limit :] if args.limit else calls:
        print(_describe(call))
    if not args.follow:
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        _follow(path)
    return 0


def _follow(path: str) -> None:
    starts: dict[str, dict] = {}
    pos = os.path.getsize(path) if os.path.exists(path) else 0
    inode = os.stat(path).st_ino if os.path.exists(path) else None
    print(f"following {path} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    while True:
        time.sleep(0.5)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_ino != inode or st.st_size < pos:  # rotated
            inode, pos = st.st_ino, 0
        if st.st_size == pos:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(pos)
            chunk = f.read()
            pos = f.tell()
        for line in chunk.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("phase") == "start":
                starts[rec.get("id")] = rec
                print(_describe({"start": rec, "done": None}), flush=True)
            elif rec.get("phase") == "done":
                start = starts.pop(rec.get("id"), None)
                print(_describe({"start": start, "done": rec}), flush=True)


def build_parser(
    extend: Callable[[argparse._SubParsersAction], None] | None = None,
) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="a2a-bridge",
        description="Expose this machine's tools to remote agents over MCP, with approvals.",
    )
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="run the bridge headless (no tray)")
    s.add_argument("--host", help="listen address for this run (default: config, 127.0.0.1)")
    s.add_argument("--port", type=int, help="port for this run (default: config)")
    s.set_defaults(func=cmd_serve)
    t = sub.add_parser("token", help="show or rotate the bearer token")
    t.add_argument("action", choices=["show", "rotate"])
    t.set_defaults(func=cmd_token)
    sub.add_parser("url", help="print the connection URL").set_defaults(func=cmd_url)
    cc = sub.add_parser(
        "client-config",
        help="print the MCP client config snippet, or one client's setup (includes the token)",
    )
    cc.add_argument(
        "--for",
        dest="for_client",
        choices=[k.value for k in clientconfig.ClientKind],
        help="print the exact command or config for this client",
    )
    cc.add_argument(
        "--ssh",
        metavar="USER@HOST",
        help="the agent runs on USER@HOST: print the tunnel command and the config to use there",
    )
    cc.set_defaults(func=cmd_client_config)
    a = sub.add_parser("audit", help="show recent tool calls (start and done paired)")
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new calls")
    a.add_argument("--limit", "-n", type=int, default=50, help="how many calls (0 = all)")
    a.set_defaults(func=cmd_audit)
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
    add_rules_parser(sub)
    if extend is not None:
        extend(sub)
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    extend: Callable[[argparse._SubParsersAction], None] | None = None,
    default: Callable[[argparse.Namespace], int] | None = None,
) -> int:
    """Run the CLI; the tray package adds its commands through ``extend`` and ``default``.

    ``server`` never imports ``tray``: the installed ``a2a-bridge`` script is
    :func:`tray.cli.main`, which calls this with the tray commands added.
    """
    setup_logging()
    parser = build_parser(extend)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        args.host = args.port = None
        func = default or cmd_serve
    try:
        code = func(args)
        sys.stdout.flush()  # inside the try: a closed pipe is noticed here, not at exit
        return code
    except (ConfigError, NotRunning) as e:
        return fail(str(e))
    except ControlError as e:
        return fail(f"{safe(e)} (HTTP {e.status})")
    except BrokenPipeError:
        # `a2a-bridge pending | head`: the reader left; stop quietly (no traceback, no
        # second error when Python flushes stdout at exit).
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

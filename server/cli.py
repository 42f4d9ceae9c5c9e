"""``a2a-bridge``: serve headless, run the tray, and inspect token, URL, config and audit."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence

from .audit import pair_calls, read_records
from .config import ConfigError, audit_path, load_config
from .logsetup import setup_logging
from .runner import BridgeRunner, RunnerOptions, StartupError, url_for
from .tokens import TokenStore


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


def cmd_serve(args: argparse.Namespace) -> int:
    runner = BridgeRunner(RunnerOptions(host=args.host, port=args.port))
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        runner.start()
    except StartupError as e:
        return fail(f"failed to start: {e}")
    print(f"a2a-bridge listening on {runner.url}", flush=True)
    while not stop.wait(0.5):
        pass
    runner.stop()
    return 0


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
    print(json.dumps(client_config(url, token), indent=2))
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    store = TokenStore(load_config())
    state = store.resolve()
    if args.action == "show":
        print(state.token)
        return 0
    store.rotate()
    print(
        f"token rotated (stored in the {state.source}); update remote "
        "client configs. A bridge that is already running keeps the old token until restarted.",
        file=sys.stderr,
    )
    return 0


def _describe(call: dict) -> str:
    start, done = call["start"] or {}, call["done"] or {}
    rec = start or done
    ts = rec.get("ts", "?")
    status = done.get("outcome", "?") if done else "PENDING"
    took = f"{done['duration_ms']}ms" if "duration_ms" in done else "-"
    who = rec.get("client") or "?"
    return f"{ts}  {status:<11} {took:>8}  {rec.get('tool', '?')}  ({who})  {rec.get('args', '')}"


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
    sub.add_parser(
        "client-config", help="print the MCP client config snippet (includes the token)"
    ).set_defaults(func=cmd_client_config)
    a = sub.add_parser("audit", help="show recent tool calls (start and done paired)")
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new calls")
    a.add_argument("--limit", "-n", type=int, default=50, help="how many calls (0 = all)")
    a.set_defaults(func=cmd_audit)
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
        return func(args)
    except ConfigError as e:
        return fail(str(e))


if __name__ == "__main__":
    sys.exit(main())

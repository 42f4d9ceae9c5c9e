"""The installed ``a2a-bridge`` command: the server's CLI plus the tray commands."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from omp_a2a_bridge.server import cli as quick_cli

from . import tray_available


def _stop_before_start() -> None:
    """Until the tray installs its own stop handling, a stop request simply ends the process:
    nothing has been claimed or started yet (the backend probe can take a moment)."""
    from .stopping import exit_now

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: exit_now(0))


def cmd_tray(args: argparse.Namespace) -> int:
    from omp_a2a_bridge.server.cli import main as server_cli

    _stop_before_start()
    ok, why = tray_available()
    if not ok:
        return server_cli.fail(f"cannot show a tray: {why}")
    server_cli.hide_own_environment()  # /proc/<pid>/environ unreadable to the agent's processes
    from .app import run_tray
    from .stopping import exit_now

    exit_now(run_tray())  # no stray UI thread may keep the process alive
    return 0  # not reached


def cmd_default(args: argparse.Namespace) -> int:
    """Plain ``a2a-bridge``: the tray where one can be shown, else headless, saying which."""
    from omp_a2a_bridge.server.cli import main as server_cli

    _stop_before_start()
    ok, why = tray_available()
    if ok:
        print("a2a-bridge: starting the tray", file=sys.stderr)
        server_cli.hide_own_environment()
        from .app import run_tray
        from .stopping import exit_now

        exit_now(run_tray(headless_fallback=True))
    print(f"a2a-bridge: no tray ({why}); running headless", file=sys.stderr)
    return server_cli.cmd_serve(args)


def cmd_autostart(args: argparse.Namespace) -> int:
    from .autostart import Autostart

    auto = Autostart()
    if args.action == "on":
        auto.enable()
    elif args.action == "off":
        auto.disable()
    enabled, how = auto.status()
    print(f"start at login: {'on' if enabled else 'off'} ({how})")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("tray", help="run the bridge with the system-tray icon").set_defaults(
        func=cmd_tray,
        log_file=True,  # what it prints on stderr also goes to the log file
    )
    a = sub.add_parser("autostart", help="start the tray at login: on, off or status")
    a.add_argument("action", choices=["on", "off", "status"])
    a.set_defaults(func=cmd_autostart)


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    code = quick_cli.quick(args)  # `audit`: answered without importing the bridge
    if code is not None:
        return code
    from omp_a2a_bridge.server.cli import main as server_cli

    return server_cli.main(args, extend=add_commands, default=cmd_default)

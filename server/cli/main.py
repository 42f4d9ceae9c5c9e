"""``a2a-bridge``: serve headless, run the tray, and inspect token, URL, config and audit."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence

from ..control.client import ControlClient
from ..control.controlfile import read_control
from ..core.runner import BridgeRunner, RunnerOptions, url_for
from ..errors import BridgeError, ConfigError, StartupError, exit_line
from ..infra import logfile
from ..infra.childenv import hide_own_environment
from ..infra.config import load_config, log_path
from ..infra.logs import setup_logging, stderr_handlers
from ..infra.tokens import TokenStore
from ..present import clientconfig
from ..present.exposure import start_lines
from ..types import Exposure
from .audit import add_audit_parser
from .files import add_files_parsers
from .machines import add_machines_parser
from .remote import add_remote_parsers
from .rules import add_rules_parser
from .tunnels import add_tunnel_parsers


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
    # Made before the start: once the listener runs, a flood of connections may hold every
    # descriptor, and the main thread's wake-up must not need one then.
    pair = socket.socketpair()
    try:
        return _serve(runner, stop, starting, pair)
    finally:
        for sock in pair:
            sock.close()


def _serve(
    runner: BridgeRunner,
    stop: threading.Event,
    starting: list[bool],
    pair: tuple[socket.socket, socket.socket],
) -> int:
    """Start, say so, sleep until a stop (see :func:`cmd_serve`)."""
    try:
        try:
            runner.start()
        finally:
            starting[0] = False
    except StopRequested:
        return 0
    except BridgeError:
        raise  # main prints it: already running (exit 0), failed to start (exit 1)
    except Exception as e:  # never a traceback for the user; the detail goes to the log
        logging.getLogger(__name__).debug("start failed", exc_info=True)
        raise StartupError(f"{type(e).__name__}: {e}") from None
    if stop.is_set():  # asked to stop while the start finished
        runner.stop()
        return 0
    with contextlib.suppress(OSError):  # stdout closed: keep serving, the log still works
        print(f"a2a-bridge listening on {runner.url}", flush=True)
    print_start_text(runner)
    if not _sleep_until(stop, runner, pair):
        return fail("the bridge stopped unexpectedly (see the log above)")
    runner.stop()
    return 0


def print_start_text(runner: BridgeRunner) -> None:
    """After the URL (stdout keeps that one line for scripts): what is exposed, how to
    approve, where the log is, on stderr (so the log file has them too)."""
    snap = runner.snapshot()
    current = logfile.current()
    exposure = snap.exposure or Exposure(())
    lines = start_lines(exposure, snap.box, current.path if current else None)
    if current is not None:  # stdout's line, for the file: under autostart it is the only trace
        current.line(f"a2a-bridge listening on {runner.url}")
    with contextlib.suppress(OSError):
        print("\n".join(f"  {line}" for line in lines), file=sys.stderr, flush=True)


def _sleep_until(
    stop: threading.Event, runner: BridgeRunner, pair: tuple[socket.socket, socket.socket]
) -> bool:
    """Sleep until a stop is asked for (True) or the bridge stops by itself (False), without
    waking up in between (issue 26: a 0.1 s poll woke the idle bridge ten times a second).

    A signal may land on any thread, and only the main thread runs Python's handler: so the
    signal module writes a byte to a socket (``set_wakeup_fd``, from whichever thread got
    it), and the bridge thread writes one when it stops; the main thread blocks reading it.
    """
    wake, waker = pair
    waker.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(waker.fileno(), warn_on_full_buffer=False)
    except ValueError:  # not the main thread (tests calling cmd_serve): signals are not ours
        previous = None

    def poke() -> None:
        with contextlib.suppress(OSError):
            waker.send(b"\0")

    runner.when_stopped(poke)
    try:
        while not stop.is_set() and runner.running:
            wake.recv(64)  # the handler has run by the time this returns (PEP 475)
        return stop.is_set()
    finally:
        if previous is not None:
            signal.set_wakeup_fd(previous)


def _configured_url() -> str:
    cfg = load_config()
    if cfg.port == 0:
        raise ConfigError("no port chosen yet: start the bridge once ('a2a-bridge serve')")
    return url_for(cfg.host, cfg.port)


def _not_running_note() -> None:
    print(
        "a2a-bridge: no bridge is running - this is the configured URL "
        "(a port the bridge picked moves if it is busy at the next start)",
        file=sys.stderr,
    )


def _live_url_and_token() -> tuple[str, str] | None:
    """The running bridge's URL and token, from its control API; None when none runs.

    The live URL is what clients must use: a busy port the bridge picked, or ``serve --port``,
    made it listen elsewhere, and a token from ``A2A_BRIDGE_TOKEN`` is not in the store.
    """
    info = read_control()
    if info is None:
        return None
    server = ControlClient(info).client_config()["mcpServers"][clientconfig.SERVER_NAME]
    return server["url"], server["headers"]["Authorization"].split(" ", 1)[1]


def cmd_url(args: argparse.Namespace) -> int:
    info = read_control()
    if info is not None:
        print(info.mcp_url)
        return 0
    url = _configured_url()
    _not_running_note()
    print(url)
    return 0


def cmd_client_config(args: argparse.Namespace) -> int:
    live = _live_url_and_token()
    if live is not None:
        url, token = live
    else:
        url = _configured_url()
        token = TokenStore(load_config()).resolve().token
        _not_running_note()
    kind = getattr(args, "for_client", None)
    ssh = getattr(args, "ssh", None)
    if getattr(args, "install", False):
        return _install_client_config(kind, ssh, url, token, getattr(args, "file", None))
    if kind is not None:
        print(clientconfig.render(clientconfig.ClientKind(kind), url, token, ssh))
        return 0
    if ssh is not None:
        tunnel, remote_url = clientconfig.ssh_tunnel(url, ssh)
        print("# 1. on this machine: keep this tunnel open (Ctrl-C ends it)")
        print(tunnel)
        print(f"# 2. on {ssh}: the MCP client config")
        url = remote_url
    print(json.dumps(clientconfig.snippet(url, token), indent=2))
    return 0


def _install_client_config(
    kind: str | None, ssh: str | None, url: str, token: str, path: str | None
) -> int:
    """``client-config --for X --install``: merge the bridge's entry into X's config file."""
    from ..tunnels.install import install_local  # only for this verb

    if kind is None:
        raise BridgeError("--install needs --for <client>")
    if ssh is not None:
        raise BridgeError(
            "--install writes this machine's file; for USER@HOST use "
            "'a2a-bridge connect --client X --install USER@HOST'"
        )
    print(install_local(clientconfig.ClientKind(kind), url, token, path).describe())
    if kind == clientconfig.ClientKind.VSCODE.value:  # its project file holds no token
        print("VS Code asks for the token when it first starts the server: paste what")
        print("'a2a-bridge token show' prints (VS Code keeps it in its secret storage)")
    return 0


def cmd_token(args: argparse.Namespace) -> int:
    if args.action == "rotate" and read_control() is not None:
        # A bridge is running: rotate it live, so the old token stops working at once.
        ControlClient.connect().rotate_token()
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
    s.set_defaults(func=cmd_serve, log_file=True)
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
    cc.add_argument(
        "--install",
        action="store_true",
        help="write it into the client's config file (merged with what is there, 0600)",
    )
    cc.add_argument("--file", help="with --install: this file instead of the client's own")
    cc.set_defaults(func=cmd_client_config)
    add_audit_parser(sub)
    add_remote_parsers(sub)
    add_rules_parser(sub)
    add_tunnel_parsers(sub)
    add_files_parsers(sub)
    add_machines_parser(sub)
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
        args.log_file = True
        func = default or cmd_serve
    if not getattr(args, "log_file", False):
        return _run(func, args)
    # A process that runs the bridge keeps what it prints on stderr in the log file, the
    # exit line included (under autostart nobody reads stderr).
    with logfile.copying_stderr(log_path(), stderr_handlers()):
        return _run(func, args)


def _run(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    try:
        code = func(args)
        sys.stdout.flush()  # inside the try: a closed pipe is noticed here, not at exit
        return code
    except BridgeError as e:  # the one exit path for every error a user is told about
        print(exit_line(e), file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # `a2a-bridge pending | head`: the reader left; stop quietly (no traceback, no
        # second error when Python flushes stdout at exit).
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())

"""The bridge on its own thread, and the small thread-safe handle the tray and the CLI use.

Start-up that can fail or block (config, keyring, binding) happens in :meth:`BridgeRunner.start`
on the caller's thread before the loop runs, so errors surface as exceptions with clear texts.
After that, other threads reach the bridge only through the methods below, each of which hops
onto the loop with ``call_soon_threadsafe`` / ``run_coroutine_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import pathlib
import secrets
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeVar

from tornado.netutil import bind_sockets

from .approvals import Decision
from .audit import AuditLog
from .bridge import Bridge, BridgeOptions
from .config import Config, ConfigError, audit_path, edit_config, load_config, update_config
from .control import ControlState, control_app
from .controlfile import (
    AlreadyRunning,
    ControlInfo,
    RuntimeDirError,
    claim,
    control_path,
    prepare_runtime_dir,
    read_control,
    release,
)
from .http import BODY_TIMEOUT_S, IDLE_CONNECTION_TIMEOUT_S, McpServer
from .netlimits import LimitedHTTPServer, connection_caps, raise_nofile
from .protocol import is_loopback_name
from .rules import RuleList, RuleSet, edit_raw_rules
from .sessions import SessionTable
from .snapshot import Snapshot
from .tokens import KeyringStore, TokenStore
from .tools.base import Tool

log = logging.getLogger("a2a-bridge")

T = TypeVar("T")

SHUTDOWN_GRACE_S = 1.0
LISTEN_BACKLOG = (
    1024  # a burst of clients connecting at once waits in the kernel, not on SYN retries
)
CALL_TIMEOUT_S = 10.0


class StartupError(Exception):
    """The bridge could not start; the message says why."""


@dataclass
class RunnerOptions:
    config_path: str | None = None
    host: str | None = None  # --host: overrides the config for this run, never saved
    port: int | None = None  # --port: likewise
    tools: list[Tool] | None = None  # None: the built-in tools
    discover_tools: bool = True
    keyring_store: KeyringStore | None = None
    audit_path: str | None = None
    session_table: SessionTable | None = None  # tests inject one with a fake clock
    control: bool = False  # the local control API + control file (serve and tray turn it on)
    idle_timeout_s: float = IDLE_CONNECTION_TIMEOUT_S  # close idle keep-alive connections
    body_timeout_s: float = BODY_TIMEOUT_S  # close connections whose body trickles in


def url_for(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def bind(host: str, port: int) -> tuple[list[socket.socket], int, bool]:
    """Bind ``host:port``; a busy explicit port falls back to a free one (other errors raise)."""
    try:
        socks = bind_sockets(port, host, backlog=LISTEN_BACKLOG)
        fell_back = False
    except OSError as e:
        if e.errno != errno.EADDRINUSE or port == 0:
            raise
        socks = bind_sockets(0, host, backlog=LISTEN_BACKLOG)
        fell_back = True
    return socks, socks[0].getsockname()[1], fell_back


class BridgeRunner:
    def __init__(self, opts: RunnerOptions | None = None) -> None:
        self.opts = opts or RunnerOptions()
        self.bridge: Bridge | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._stop_event: asyncio.Event | None = None
        self._sockets: list[socket.socket] = []
        self._control_sockets: list[socket.socket] = []
        self._startup_error: BaseException | None = None
        self.control: ControlInfo | None = None
        self.nofile: int | None = None
        self._control_state: ControlState | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 15.0) -> Snapshot:
        """Load config and token, bind, start the loop thread; raise StartupError on failure.

        With ``control`` on, a live instance found through the control file raises
        :class:`AlreadyRunning` before anything is bound. Whatever interrupts the start (an
        error, or a signal handler raising to stop a start stuck on a keyring) leaves nothing
        behind: sockets closed, control file released, the thread stopped.
        """
        try:
            return self._start(timeout)
        except BaseException:
            self._abort_start()
            raise

    def _abort_start(self) -> None:
        if self.loop is not None and self._stop_event is not None:
            with contextlib.suppress(Exception):
                self.stop(timeout=2.0)
        for s in self._sockets + self._control_sockets:
            with contextlib.suppress(OSError):
                s.close()
        if self.control is not None:
            release(self.control)
        if self.bridge is not None and not self.running:
            with contextlib.suppress(Exception):
                self.bridge.audit.close(0.5)

    def _start(self, timeout: float) -> Snapshot:
        self.nofile = raise_nofile()
        try:
            config = load_config(self.opts.config_path)
        except ConfigError as e:
            raise StartupError(str(e)) from None
        if self.opts.control:
            try:
                prepare_runtime_dir()
            except RuntimeDirError as e:
                raise StartupError(str(e)) from None
            live = read_control()
            if live is not None and live.pid != os.getpid():
                raise AlreadyRunning(live)
        tokens = TokenStore(config, self.opts.keyring_store)
        try:
            tokens.resolve()
        except ConfigError as e:
            raise StartupError(str(e)) from None
        except OSError as e:
            raise StartupError(
                f"cannot store the token in {config.path}: {e.strerror or e} "
                "(make its folder writable, or fix the keyring)"
            ) from None

        host = self.opts.host or config.host
        port = self.opts.port if self.opts.port is not None else config.port
        warnings: list[str] = []
        if tokens.state and tokens.state.warning:
            warnings.append(tokens.state.warning)
        try:
            self._sockets, bound, fell_back = bind(host, port)
        except OSError as e:
            raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        if fell_back:
            w = (
                f"configured port {port} is busy - bound {bound} instead; "
                "update the URL in remote client configs"
            )
            log.warning(w)
            warnings.append(w)
        if port == 0 and self.opts.port is None and config.port == 0:
            # First start: keep the picked port so the URL in remote configs stays valid.
            try:
                update_config(config.path, {"port": bound})
            except (OSError, ConfigError) as e:
                log.warning("could not save the port to %s: %s", config.path, e)
        loopback = is_loopback_name(host.strip("[]").lower())
        if not loopback:
            w = (
                f"bound to {host}, which is not a loopback address - anyone who can reach "
                "it can try the token"
            )
            log.warning(w)
            warnings.append(w)

        audit = AuditLog(
            self.opts.audit_path or audit_path(),
            config.audit_max_bytes,
            config.audit_keep,
            secret=lambda: tokens.token if tokens.state else None,
        )
        if self.opts.tools is None:
            from .tools.builtin import builtin_tools

            tools = builtin_tools()
        else:
            tools = self.opts.tools
        bridge = Bridge(
            BridgeOptions(
                config,
                tokens,
                audit,
                tools,
                discover_tools=self.opts.discover_tools,
                session_table=self.opts.session_table,
            )
        )
        bridge.host, bridge.port = host, bound
        bridge.url = self.url = url_for(host, bound)
        bridge.warnings = warnings
        self.bridge = bridge
        if self.opts.control:
            self._control_sockets = bind_sockets(0, "127.0.0.1")
            port = self._control_sockets[0].getsockname()[1]
            info = ControlInfo(
                os.getpid(), url_for("127.0.0.1", port), secrets.token_urlsafe(32), self.url
            )
            try:
                claim(info)
            except RuntimeDirError as e:
                raise StartupError(str(e)) from None
            except OSError as e:
                raise StartupError(
                    f"cannot create the control file {control_path()}: {e.strerror or e}"
                ) from None
            self.control = info
            bridge.control_url = info.url
        self._thread = threading.Thread(
            target=self._thread_main, args=(loopback,), name="a2a-bridge", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout):
            raise StartupError("the bridge thread did not start in time")
        if self._startup_error is not None:
            raise StartupError(str(self._startup_error))
        return self.snapshot()

    def _thread_main(self, loopback: bool) -> None:
        try:
            asyncio.run(self._main(loopback))
        except BaseException as e:  # surface to start() instead of dying silently
            self._startup_error = e
            log.exception("bridge thread failed")
            self._ready.set()
        finally:
            if self.control is not None:
                release(self.control)
            self._stopped.set()

    async def _main(self, loopback: bool) -> None:
        bridge = self.bridge
        assert bridge is not None
        self.loop = bridge.loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        mcp = McpServer(bridge, loopback, self.opts.idle_timeout_s, self.opts.body_timeout_s)
        mcp_cap, control_cap = connection_caps(bridge.config.limits.max_connections, self.nofile)
        server = mcp.http_server(mcp_cap)
        server.add_sockets(self._sockets)
        control_server = None
        if self.control is not None:
            state = ControlState(bridge, self.control.secret, self.rotate_token)
            state.port = self._control_sockets[0].getsockname()[1]
            self._control_state = state
            control_server = LimitedHTTPServer(
                control_app(state), max_body_size=64 * 1024, idle_connection_timeout=120
            )
            control_server.configure_limits(
                control_cap, b'{"error": "too many connections"}', "control API"
            )
            control_server.add_sockets(self._control_sockets)
        bridge.start_upstreams()
        self._ready.set()
        await self._stop_event.wait()

        # Graceful stop: no new connections, pending approvals denied, running calls get a
        # moment to finish (their results and audit records still land), then the rest close.
        server.stop()
        mcp.stop()
        bridge.begin_shutdown()
        deadline = self.loop.time() + SHUTDOWN_GRACE_S
        while mcp.active and self.loop.time() < deadline:
            await asyncio.sleep(0.02)
        bridge.cancel_running()
        upstreams = asyncio.ensure_future(bridge.stop_upstreams(0.6))
        if mcp.active:
            await asyncio.wait(set(mcp.active), timeout=0.5)
        await upstreams
        await server.close_all_connections()
        if control_server is not None:
            control_server.stop()
            await control_server.close_all_connections()
        if self._control_state is not None:
            self._control_state.close()  # login page files
        await self.loop.run_in_executor(None, bridge.audit.flush, 2.0)
        bridge.audit.close(1.0)
        # Done serving. Say so now rather than after asyncio.run() returns: that waits for the
        # default executor, where a keyring call may hang for its whole timeout.
        if self.control is not None:
            release(self.control)
        self._stopped.set()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop gracefully (under 2 s with calls in flight); safe to call more than once."""
        if self.loop is None or self._stop_event is None or self._stopped.is_set():
            return
        self.loop.call_soon_threadsafe(self._stop_event.set)
        self._stopped.wait(timeout)
        if self._thread is not None:
            # Normally at once; only a worker stuck in a keyring call could hold asyncio.run()
            # (and the bridge is already stopped then).
            self._thread.join(min(timeout, 1.0))

    @property
    def running(self) -> bool:
        return self._ready.is_set() and not self._stopped.is_set()

    # -- the handle: thread-safe calls into the bridge -------------------------------------------

    def call(self, fn: Callable[[], T], timeout: float = CALL_TIMEOUT_S) -> T:
        """Run ``fn`` on the bridge thread and return its result."""
        assert self.loop is not None
        if threading.current_thread() is self._thread:
            return fn()
        fut: Future[T] = Future()

        def run() -> None:
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

        self.loop.call_soon_threadsafe(run)
        return fut.result(timeout)

    def snapshot(self) -> Snapshot:
        assert self.bridge is not None
        return self.call(self.bridge.snapshot)

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        """``callback(snapshot)`` on the bridge thread after every change; returns unsubscribe.

        Callbacks must be quick and must not touch UI toolkits: hand the snapshot to the UI's
        own dispatcher.
        """
        assert self.bridge is not None
        bridge = self.bridge
        unsubscribe = self.call(lambda: bridge.subscribe(callback))
        return lambda: self.call(unsubscribe) if self.running else None

    def decide(
        self,
        call_id: str,
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = "tray",
        rule: str | None = None,
    ) -> bool:
        assert self.bridge is not None
        bridge = self.bridge
        d = Decision(decision)
        return self.call(lambda: bridge.decide(call_id, d, reason, approver, rule))

    def edit_rules(
        self, which: RuleList | str, add: list[str] | None = None, remove: list[str] | None = None
    ) -> RuleSet:
        """Change a rule list in the config (on this thread: a file write), effective at once."""
        assert self.bridge is not None
        bridge = self.bridge
        lst = RuleList(which)
        cfg = edit_config(
            bridge.config.path, lambda raw: edit_raw_rules(raw, lst, add or [], remove or [])
        )
        self.call(lambda: bridge.set_rules(cfg.rules))
        return cfg.rules

    def revoke_grant(self, sid: str, tool: str) -> bool:
        assert self.bridge is not None
        bridge = self.bridge
        return self.call(lambda: bridge.revoke_grant(sid, tool))

    def pause(self, paused: bool) -> None:
        assert self.bridge is not None
        bridge = self.bridge
        self.call(lambda: bridge.set_paused(paused))

    def end_session(self, sid: str) -> bool:
        assert self.bridge is not None
        bridge = self.bridge
        return self.call(lambda: bridge.end_session(sid))

    def restart_server(self, name: str) -> bool:
        """Restart an upstream MCP server now (its back-off starts afresh)."""
        assert self.bridge is not None
        bridge = self.bridge
        return self.call(lambda: bridge.restart_upstream(name))

    def attach_approver(self, name: str) -> int:
        assert self.bridge is not None
        bridge = self.bridge
        handle = bridge.broker.attach(name)
        if self.running:
            self.call(lambda: bridge._changed(now=True))
        return handle

    def detach_approver(self, handle: int) -> None:
        assert self.bridge is not None
        bridge = self.bridge
        bridge.broker.detach(handle)
        if self.running:
            self.call(lambda: bridge._changed(now=True))

    def rotate_token(self) -> str:
        """Store a new token first, then switch; runs the keyring call on this thread."""
        assert self.bridge is not None
        bridge = self.bridge
        new = bridge.tokens.rotate()
        log.info("token rotated - update remote client configs")
        if self.running:
            self.call(lambda: bridge._changed(now=True))
        return new

    def login_url(self) -> str:
        """A one-time link to the approval page (valid 60 s, first use) for the browser."""
        state, control = self._control_state, self.control
        if state is None or control is None:
            raise RuntimeError("the control API is not running")
        return self.call(lambda: state.login_url(control.url))

    def login_page(self, anchor: str = "") -> str:
        """A ``file://`` URL of a one-time login page (0600, in the runtime directory) that
        opens the approval page at ``anchor``: what a browser is started with, so the code
        is never on its command line (see :meth:`ControlState.login_file`)."""
        state = self._control_state
        if state is None or self.control is None:
            raise RuntimeError("the control API is not running")
        return pathlib.Path(self.call(lambda: state.login_file(anchor))).as_uri()

    @property
    def token(self) -> str:
        assert self.bridge is not None
        return self.bridge.tokens.token

    @property
    def config(self) -> Config:
        assert self.bridge is not None
        return self.bridge.config

"""The bridge on its own thread, and :class:`BridgeRunner`: the in-process :class:`BridgeApi`.

Start-up that can fail or block (config, keyring, binding) happens in :meth:`BridgeRunner.start`
on the caller's thread before the loop runs (:mod:`server.core.startup`), so errors surface as
exceptions with clear texts. After that, other threads reach the bridge only through the
methods below (the :class:`~server.api.BridgeApi` Protocol), each of which hops onto the loop
with ``call_soon_threadsafe``; called on the loop itself (the control API's handlers), they run
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pathlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from ..control.controlfile import ControlInfo, release
from ..control.server import ControlState, control_app
from ..errors import BridgeError, StartupError
from ..infra import logfile
from ..infra.auditread import recent_calls
from ..infra.config import Config, edit_config, log_path
from ..infra.tokens import TokenSource
from ..machines.identity import DEFAULT, MachineError, MachineNotFound, check_name
from ..machines.store import add_machine, remove_machine, save_last_seen
from ..mcp.http import McpServer
from ..mcp.netlimits import LimitedHTTPServer, cap_clamped, connection_caps
from ..policy.judge import Judgement
from ..policy.rules import RuleError, RuleList, RuleSet, edit_raw_rules
from ..present import clientconfig
from ..present.textsafe import safe
from ..present.views import audit_call_json
from ..tools.shell import settle as settle_shells
from ..tunnels.identity import machine_token
from ..tunnels.install import install_remote
from ..tunnels.plan import TunnelError, check_spec
from ..tunnels.saved import forget_tunnel, save_tunnel
from ..tunnels.supervisor import TunnelManager, ssh_config, ssh_env
from ..types import (
    BatchOutcome,
    GrantView,
    HumanDecision,
    MachineView,
    NewMachine,
    PendingCall,
    ServerView,
    Snapshot,
    TunnelView,
)
from .approvals import ApproverKind, Decision
from .bridge import Bridge
from .startup import Prepared, RunnerOptions, bind, prepare, url_for

if TYPE_CHECKING:
    from ..api import BridgeApi

__all__ = ["BridgeRunner", "RunnerOptions", "StartupError", "bind", "url_for"]

log = logging.getLogger(__name__)

T = TypeVar("T")

SHUTDOWN_GRACE_S = 1.0
AUDIT_TAIL_FLUSH_S = 15.0  # see BridgeRunner.audit_tail
# A cancelled boxed call's clean-up: its start's answer, its supervisor's exit (bounded by
# SUPERVISOR_EXIT_S), the sweep. Only waited for when there is one.
SETTLE_S = 6.0
CALL_TIMEOUT_S = 10.0


class BridgeRunner:
    """The bridge running in a background thread, and the thread-safe :class:`~server.api.BridgeApi`
    in front of it.

    Why: the bridge owns its state on its own loop; the tray, the control API and the tests call
    from other threads, so every method here hops onto the loop (or does its blocking work on
    the caller's thread) and answers with immutable data.
    """

    def __init__(self, opts: RunnerOptions | None = None) -> None:
        self.opts = opts or RunnerOptions()
        self.bridge: Bridge | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.url = ""
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._stopped = threading.Event()
        self._on_stopped: list[Callable[[], None]] = []
        self._stop_event: asyncio.Event | None = None
        self._prepared = Prepared()
        self._startup_error: BaseException | None = None
        self.control: ControlInfo | None = None
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
        for s in self._prepared.sockets + self._prepared.control_sockets:
            with contextlib.suppress(OSError):
                s.close()
        control = self._prepared.control
        if control is not None:
            release(control)
        bridge = self._prepared.bridge
        if bridge is not None and not self.running:
            with contextlib.suppress(Exception):
                bridge.audit.close(0.5)

    def _start(self, timeout: float) -> Snapshot:
        prepared = self._prepared
        prepare(self.opts, prepared)
        self.bridge, self.url, self.control = prepared.bridge, prepared.url, prepared.control
        self._thread = threading.Thread(target=self._thread_main, name="a2a-bridge", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise StartupError("the bridge thread did not start in time")
        if self._startup_error is not None:
            raise StartupError(str(self._startup_error))
        return self.snapshot()

    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # surface to start() instead of dying silently
            self._startup_error = e
            log.exception("bridge thread failed")
            self._ready.set()
        finally:
            if self.control is not None:
                release(self.control)
            self._mark_stopped()

    async def _main(self) -> None:
        bridge, prepared = self.bridge, self._prepared
        assert bridge is not None
        self.loop = bridge.loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        mcp = McpServer(
            bridge, prepared.loopback, self.opts.idle_timeout_s, self.opts.body_timeout_s
        )
        configured = bridge.config.limits.max_connections
        mcp_cap, control_cap = connection_caps(configured, prepared.nofile)
        if (clamped := cap_clamped(configured, prepared.nofile)) is not None:
            log.warning("%s", clamped)
        server = mcp.http_server(mcp_cap)
        server.add_sockets(prepared.sockets)
        control_server = None
        if self.control is not None:
            state = ControlState(self, self.control.secret)
            state.port = prepared.control_sockets[0].getsockname()[1]
            self._control_state = state
            control_server = LimitedHTTPServer(
                control_app(state), max_body_size=64 * 1024, idle_connection_timeout=120
            )
            control_server.configure_limits(
                control_cap, b'{"error": "too many connections"}', "control API"
            )
            control_server.add_sockets(prepared.control_sockets)
        bridge.start_upstreams()
        bridge.tunnels = TunnelManager(
            bridge.config.tunnels, lambda: bridge.port, bridge.publish_now
        )
        bridge.tunnels.start()
        bridge.probe_box()
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
        tunnels = asyncio.ensure_future(bridge.tunnels.stop())  # no ssh outlives the app
        if mcp.active:
            await asyncio.wait(set(mcp.active), timeout=0.5)
        await settle_shells(SETTLE_S)  # cancelled calls' shells end, what they planted is swept
        await upstreams
        await tunnels
        await server.close_all_connections()
        if control_server is not None:
            control_server.stop()
            await control_server.close_all_connections()
        if self._control_state is not None:
            self._control_state.close()  # login page files
        await self.loop.run_in_executor(None, bridge.audit.flush, 2.0)
        bridge.audit.close(1.0)
        seen = bridge.machines_seen()
        if seen:  # "last seen" survives a restart (one config write, in a worker)
            try:
                await self.loop.run_in_executor(None, save_last_seen, bridge.config.path, seen)
            except Exception as e:
                log.warning("could not save when machines were last seen: %s", e)
        # Done serving. Say so now rather than after asyncio.run() returns: that waits for the
        # default executor, where a keyring call may hang for its whole timeout.
        if self.control is not None:
            release(self.control)
        self._mark_stopped()

    def when_stopped(self, callback: Callable[[], None]) -> None:
        """``callback()`` once the bridge has stopped serving (asked to, or failed), from the
        bridge thread; at once when it already has. Why: ``serve``'s main thread sleeps until
        a signal or this, instead of waking ten times a second to look."""
        self._on_stopped.append(callback)
        if self._stopped.is_set():
            self._notify_stopped()

    def _mark_stopped(self) -> None:
        self._stopped.set()
        self._notify_stopped()

    def _notify_stopped(self) -> None:
        callbacks, self._on_stopped = self._on_stopped, []
        for callback in callbacks:
            try:
                callback()
            except Exception:
                log.exception("stop listener failed")

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

    def release_control_file(self) -> None:
        """The watchdog's last resort (tray.stopping): the control file must not outlive us."""
        if self.control is not None:
            release(self.control)

    @property
    def running(self) -> bool:
        return self._ready.is_set() and not self._stopped.is_set()

    # -- the handle: thread-safe calls into the bridge -------------------------------------------

    def call(self, fn: Callable[[], T], timeout: float = CALL_TIMEOUT_S) -> T:
        """Run ``fn`` on the bridge thread and return its result (at once when on it)."""
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

    def _bridge(self) -> Bridge:
        if self.bridge is None:
            raise BridgeError("the bridge has not started")
        return self.bridge

    def snapshot(self) -> Snapshot:
        return self.call(self._bridge().snapshot)

    def subscribe(self, callback: Callable[[Snapshot], None]) -> Callable[[], None]:
        """``callback(snapshot)`` on the bridge thread after changes (coalesced, see
        :meth:`Bridge._changed <server.core.bridge.Bridge>`); returns unsubscribe.

        Callbacks must be quick and must not touch UI toolkits: hand the snapshot to the UI's
        own dispatcher.
        """
        bridge = self._bridge()
        unsubscribe = self.call(lambda: bridge.subscribe(callback))
        return lambda: self.call(unsubscribe) if self.running else None

    def decide(
        self,
        call_id: str,
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = ApproverKind.TRAY,
        rule: str | None = None,
    ) -> bool:
        bridge = self._bridge()
        d = HumanDecision(call_id, Decision(decision), reason, approver, rule)
        return self.call(lambda: bridge.decide(d))

    def decide_batch(
        self,
        ids: list[str],
        decision: Decision | str,
        reason: str | None = None,
        approver: str | None = ApproverKind.TRAY,
    ) -> BatchOutcome:
        bridge = self._bridge()
        d = Decision(decision)
        return self.call(lambda: bridge.decide_batch(list(ids), d, reason, approver))

    def pending_call(self, call_id: str) -> PendingCall | None:
        bridge = self._bridge()
        return self.call(lambda: bridge.pending_call(call_id))

    def pause(self, paused: bool) -> None:
        bridge = self._bridge()
        self.call(lambda: bridge.set_paused(paused))

    def end_session(self, sid: str) -> bool:
        bridge = self._bridge()
        return self.call(lambda: bridge.end_session(sid))

    # rules and grants

    def rules(self) -> RuleSet:
        bridge = self._bridge()
        return self.call(lambda: bridge.rules)

    def grants(self) -> tuple[GrantView, ...]:
        return self.call(self._bridge().grants)

    def _edit_rules(self, which: RuleList, add: list[str], remove: list[str]) -> None:
        """Change a rule list in the config (on this thread: a file write), effective at once."""
        bridge = self._bridge()
        cfg = edit_config(
            bridge.config.path, lambda raw: edit_raw_rules(raw, which, add=add, remove=remove)
        )
        self.call(lambda: bridge.set_rules(cfg.rules))

    def add_rules(self, which: RuleList, texts: list[str]) -> None:
        self._edit_rules(RuleList(which), texts, [])

    def remove_rule(self, which: RuleList, key: str) -> None:
        """By text, or by index in the live list (raises :class:`RuleError` when absent)."""
        lst = RuleList(which)
        if key.isdigit():
            current = [r.text for r in self.rules().get(lst)]
            if int(key) >= len(current):
                raise RuleError(f"rules.{lst.value} has no entry {key}")
            key = current[int(key)]
        self._edit_rules(lst, [], [key])

    def test_rule(
        self, tool: str, arguments: dict[str, Any], machine: str | None = None
    ) -> Judgement:
        bridge = self._bridge()
        return self.call(lambda: bridge.explain(tool, arguments, machine))

    def revoke_grant(self, sid: str, tool: str) -> bool:
        bridge = self._bridge()
        return self.call(lambda: bridge.revoke_grant(sid, tool))

    # machines (server/machines): the file and keyring work on this thread, then the loop

    def machines(self) -> tuple[MachineView, ...]:
        return self.call(self._bridge().machine_views)

    def add_machine(self, name: str) -> NewMachine:
        """Mint a token for ``name`` (saved first), then let it in; blocks on the keyring."""
        bridge = self._bridge()
        minted = add_machine(bridge.config.path, name, self.opts.keyring_store)
        self.call(lambda: bridge.add_machine(minted.record))
        if minted.warning is not None:
            warning = minted.warning
            self.call(lambda: bridge.warn(warning))
        return NewMachine(
            name, minted.token, clientconfig.snippet(self.url, minted.token), minted.warning
        )

    def remove_machine(self, name: str) -> bool:
        """Revoke ``name``: removed from the config first (never works again, also after a
        restart), then its sessions end and its next request is a 401. False: no such one."""
        bridge = self._bridge()
        if name == DEFAULT:
            raise MachineError(
                "the default machine cannot be removed; rotate its token with "
                "'a2a-bridge token rotate' (other machines keep working)"
            )
        check_name(name)
        try:
            remove_machine(bridge.config.path, name, self.opts.keyring_store)
        except MachineNotFound:
            # Gone from the file (edited by hand) but maybe still let in: revoke it anyway.
            if name not in self.call(lambda: tuple(bridge.machine_records)):
                return False
        self.call(lambda: bridge.revoke_machine(name))
        log.info("machine %s removed: its token no longer works", name)
        return True

    # upstream servers

    def servers(self) -> tuple[ServerView, ...]:
        bridge = self._bridge()
        return self.call(lambda: bridge.upstreams.views() if bridge.upstreams is not None else ())

    def restart_server(self, name: str) -> bool:
        """Restart an upstream MCP server now (its back-off starts afresh)."""
        bridge = self._bridge()
        return self.call(lambda: bridge.restart_upstream(name))

    # approvers

    def attach_approver(self, name: str) -> int:
        bridge = self._bridge()
        handle = bridge.attach_approver(name)
        if self.running:
            self.call(bridge.publish_now)
        return handle

    def detach_approver(self, handle: int) -> None:
        bridge = self._bridge()
        bridge.detach_approver(handle)
        if self.running:
            self.call(bridge.publish_now)

    # the token, the client config, the audit, the page

    def rotate_token(self) -> TokenSource:
        """Store a new token first, then switch; runs the keyring call on this thread."""
        bridge = self._bridge()
        bridge.tokens.rotate()
        log.info("token rotated - update remote client configs")
        if self.running:
            # Every call of machine default still waiting was made with the old token (a
            # leaked one, maybe): none may be approved now, its answer would go to that token.
            self.call(lambda: bridge.end_waiting_calls_of(DEFAULT))
            self.call(bridge.publish_now)
        state = bridge.tokens.state
        assert state is not None  # rotated, so resolved
        return state.source

    @property
    def token(self) -> str:
        return self._bridge().tokens.token

    @property
    def config_path(self) -> str:
        return self._bridge().config.path

    @property
    def audit_path(self) -> str:
        return self._bridge().audit.path

    @property
    def config(self) -> Config:
        """The config the bridge started with (tests read its roots)."""
        return self._bridge().config

    def client_config(self) -> dict[str, Any]:
        return clientconfig.snippet(self.url, self.token)

    def audit_tail(self, limit: int) -> list[dict[str, Any]]:
        """Flush, then read the files backwards only as far as ``limit`` calls need."""
        audit = self._bridge().audit
        # Every call already answered is in the list: its record was queued before its answer
        # went out. The bound only guards against a writer stuck on a dead disk (this runs in
        # a worker); 2 s was less than a loaded machine took, and the list missed the last call.
        audit.flush(AUDIT_TAIL_FLUSH_S)
        calls = recent_calls(audit.path, self._bridge().config.audit_keep, limit)
        return [audit_call_json(c) for c in calls]

    @property
    def log_path(self) -> str:
        return log_path()

    def log_tail(self, limit: int) -> dict[str, Any]:
        """The log file's last lines, rendered safe (on this thread: a file read)."""
        current = logfile.current()
        if current is not None:
            current.flush()
        path = log_path()
        lines = logfile.tail_lines(path, max(1, min(limit, 5000)))
        return {"path": safe(path), "lines": [safe(x) for x in lines]}

    def login_url(self) -> str:
        """A one-time link to the approval page (valid 60 s, first use) for the browser."""
        state, control = self._control_state, self.control
        if state is None or control is None:
            raise BridgeError("the control API is not running")
        return self.call(lambda: state.login_url(control.url))

    def login_page(self, anchor: str = "") -> str:
        """A ``file://`` URL of a one-time login page (0600, in the runtime directory) that
        opens the approval page at ``anchor``: what a browser is started with, so the code
        is never on its command line (see :meth:`ControlState.login_file`)."""
        state = self._control_state
        if state is None or self.control is None:
            raise BridgeError("the control API is not running")
        return pathlib.Path(self.call(lambda: state.login_file(anchor))).as_uri()

    # tunnels (server/tunnels): ssh -N -R to each saved machine, kept up by the bridge loop

    def _tunnel_manager(self) -> TunnelManager:
        manager = self._bridge().tunnels
        if not isinstance(manager, TunnelManager):
            raise BridgeError("the bridge has not started")
        return manager

    def _await(self, make: Callable[[], Any], timeout: float = CALL_TIMEOUT_S) -> Any:
        """Run the coroutine ``make()`` on the bridge loop and wait for it (never on the loop:
        the control API calls these from a worker)."""
        assert self.loop is not None
        if threading.current_thread() is self._thread:
            raise BridgeError("a tunnel change cannot wait on the bridge loop")
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(timeout)

    def tunnels(self) -> tuple[TunnelView, ...]:
        manager = self._tunnel_manager()
        return self.call(manager.views)

    def add_tunnel(
        self, name: str, target: str, remote_port: int | None = None, client: str | None = None
    ) -> None:
        """Validate, save to the config (this thread: a file write), then start it."""
        manager = self._tunnel_manager()
        spec = check_spec(
            name, target, self._bridge().port if remote_port is None else remote_port, client
        )
        save_tunnel(self.config_path, spec)
        self._await(lambda: manager.put(spec))

    def remove_tunnel(self, name: str) -> bool:
        manager = self._tunnel_manager()
        saved = forget_tunnel(self.config_path, name)
        running: bool = self._await(lambda: manager.remove(name))
        return saved or running

    def reconnect_tunnel(self, name: str) -> bool:
        manager = self._tunnel_manager()
        return self.call(lambda: manager.reconnect(name))

    def install_client(self, name: str) -> str:
        """The tunnel's client config on its remote machine, with machine ``name``'s token."""
        manager = self._tunnel_manager()
        spec = self.call(lambda: manager.spec(name))
        if spec is None:
            raise TunnelError(f"no tunnel named {name} ('a2a-bridge tunnels' lists them)")
        if spec.client is None:
            raise TunnelError(
                f"tunnel {name} names no client: connect again with --client claude-code|codex|"
                "gemini|generic"
            )
        token = machine_token(self._bridge().tokens, name, lambda n: self.add_machine(n).token)
        url = f"http://127.0.0.1:{spec.remote_port}/"
        done = install_remote(spec.client, spec.target, url, token, ssh_config(), env=ssh_env())
        return done.describe()


if TYPE_CHECKING:

    def _conforms(runner: BridgeRunner) -> BridgeApi:
        """Never called: mypy checks here that the runner implements the API's Protocol."""
        return runner

"""The tunnels the app keeps up: one OpenSSH client per saved tunnel, supervised on the bridge's
event loop.

Each :class:`Tunnel` runs ``ssh -N -v -R ...`` (:func:`.plan.ssh_argv`) as an asyncio
subprocess (nothing blocks the loop), reads its stderr to hear that the remote forward listens
(then it is *up*), notices when it exits (*down*, with ssh's last line), and starts it again
after a back-off (:func:`.plan.backoff`). The bridge's live port is read at every start, and
:meth:`TunnelManager.follow_port` restarts a forward whose port moved. :meth:`TunnelManager.stop`
ends every ssh (SIGTERM, then SIGKILL): no ssh outlives the app; on Linux each ssh also gets
SIGTERM from the kernel if the app dies without stopping (``PR_SET_PDEATHSIG``).

ssh gets the app's environment without ``A2A_BRIDGE_*`` variables (the token never reaches a
child), so the user's agent (``SSH_AUTH_SOCK``) and ssh config work as in a terminal; the config
is read through a private copy without the forwards and switches that would widen the tunnel
(:mod:`.sshconfig`), and before each start ``ssh -G`` says what ssh would do: anything beyond
the one forward stops the start, with what it was.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable

from ..infra import orphans
from ..types import TunnelView
from ..vocab import TunnelState
from .plan import FORWARD_OK, Status, TunnelSpec, check_argv, clip, error_line, ssh_argv
from .sshconfig import Confined, SshConfigError, confine, known_options, parse_effective, widened

log = logging.getLogger(__name__)

SSH_CONFIG_ENV = "A2A_BRIDGE_SSH_CONFIG"  # an ssh_config file used instead of ~/.ssh/config
STOP_GRACE_S = 2.0
STDERR_LINES = 20
CHECK_TIMEOUT_S = 60.0  # ssh -G (a config's ``Match exec`` runs a command of the user's)


def ssh_config() -> str | None:
    """``-F`` for every ssh the app runs: ``$A2A_BRIDGE_SSH_CONFIG`` when set."""
    return os.environ.get(SSH_CONFIG_ENV) or None


def ssh_env() -> dict[str, str]:
    """The app's environment for ssh, less the bridge's own variables (the token among them)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("A2A_BRIDGE_")}


def _death_signal_hook() -> Callable[[], None] | None:
    """Linux: a function for ``preexec_fn`` that asks the kernel to SIGTERM the child when the
    thread that started it (the bridge loop's) dies. Resolved here, in the parent: between fork
    and exec the child only calls it (no import, no lock of a thread that is not there)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    sigterm = int(signal.SIGTERM)

    def hook() -> None:  # pragma: no cover - runs in the child
        prctl(1, sigterm, 0, 0, 0)  # PR_SET_PDEATHSIG

    return hook


_DIE_WITH_PARENT = _death_signal_hook()


class ConfigFolder:
    """The private folder (0700, made on first use, in a worker) where each tunnel's copy of the
    ssh config is written (:func:`.sshconfig.confine`); removed when the app stops."""

    def __init__(self) -> None:
        self._path: str | None = None
        self._lock = threading.Lock()

    def for_tunnel(self, name: str) -> str:
        with self._lock:
            if self._path is None:
                self._path = tempfile.mkdtemp(prefix="a2a-bridge-ssh-")
            return os.path.join(self._path, name)

    def remove(self) -> None:
        with self._lock:
            path, self._path = self._path, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def prepare(spec: TunnelSpec, local_port: int, folder: str) -> tuple[list[str], Confined]:
    """The tunnel's ssh command line, reading the config's private copy (blocking: files, and
    ``ssh -G`` once per ssh program): :class:`SshConfigError` or :class:`OSError` when not."""
    known = known_options("ssh", ssh_env())
    confined = confine(folder, ssh_config())
    return ssh_argv(spec, local_port, confined.path, known=known), confined


class Tunnel:
    """One saved tunnel and its ssh: started, watched, restarted, stopped (on the loop)."""

    def __init__(
        self,
        spec: TunnelSpec,
        port: Callable[[], int],
        on_change: Callable[[], None],
        folder: ConfigFolder | None = None,
    ) -> None:
        self.spec = spec
        self._port = port
        self._on_change = on_change
        self._folder = folder or ConfigFolder()
        self.status = Status(since=time.time())
        self.local_port = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._restart_why: str | None = None
        self._stopping = False

    # -- control (on the loop) -----------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    def restart(self, why: str | None = None) -> None:
        """Start ssh again now (Reconnect, a new port): ends the running one, skips the wait."""
        self._restart_why = why
        self._wake.set()
        self._terminate()

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        self._terminate()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), STOP_GRACE_S + 1)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
            await self._kill()

    def view(self) -> TunnelView:
        s, spec = self.status, self.spec
        retry = None if s.retry_at is None else max(0.0, s.retry_at - time.time())
        return TunnelView(
            spec.name,
            spec.target,
            spec.remote_port,
            self.local_port,
            spec.client.value if spec.client is not None else None,
            s.state,
            s.last_error,
            s.since,
            s.attempts,
            retry,
        )

    # -- the loop ------------------------------------------------------------------------------

    def _set(self, status: Status) -> None:
        if status.state is not self.status.state:
            log.info("tunnel %s: %s", self.spec.name, status.state.value)
        self.status = status
        self._on_change()

    async def _run(self) -> None:
        while not self._stopping:
            self._wake.clear()
            error = await self._one_run()
            if self._stopping:
                return
            if self._restart_why is not None or self._wake.is_set():
                why, self._restart_why = self._restart_why, None
                self._set(self.status.restarted(time.time(), why))
                continue
            status, delay = self.status.ended(time.time(), error)
            # Each failure of a short run, then every tenth: a machine that stays away for a day
            # (its back-off at 60 s) is not a warning a minute.
            level = (
                logging.WARNING
                if status.failures <= 3 or status.failures % 10 == 0
                else logging.DEBUG
            )
            log.log(level, "tunnel %s down: %s (next try in %.0f s)", self.spec.name, error, delay)
            self._set(status)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            if self._restart_why is not None:
                self._set(self.status.restarted(time.time(), self._restart_why))
                self._restart_why = None

    async def _one_run(self) -> str:
        """Run ssh once; returns why it ended (one safe line)."""
        self.local_port = self._port()
        self._set(self.status.started(time.time()))
        loop = asyncio.get_running_loop()
        folder = self._folder.for_tunnel(self.spec.name)
        try:
            argv, confined = await loop.run_in_executor(
                None, prepare, self.spec, self.local_port, folder
            )
        except SshConfigError as e:
            return clip(str(e))
        except OSError as e:
            return f"cannot run ssh: {e.strerror or e}"
        except subprocess.TimeoutExpired:
            return "ssh -G did not answer"
        refused = await self._check(argv, confined)
        if refused is not None:
            return refused
        if self._stopping:
            return "stopped"
        try:
            with orphans.starting() as own:  # a session of its own, reaped here (wait)
                self._proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=ssh_env(),
                    start_new_session=True,  # a Ctrl-C in the app's terminal is ours to pass on
                    preexec_fn=_DIE_WITH_PARENT,
                )
                own(self._proc.pid)
        except OSError as e:
            return f"cannot run ssh: {e.strerror or e}"
        except NotImplementedError:  # an event loop without subprocesses (Windows' selector loop)
            return "cannot run ssh from this event loop"
        if self._stopping or self._wake.is_set():
            self._terminate()  # stopped or restarted while ssh was being started
        lines: deque[str] = deque(maxlen=STDERR_LINES)
        assert self._proc.stderr is not None
        async for raw in self._proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            lines.append(line)
            if FORWARD_OK in line and self.status.state is not TunnelState.UP:
                self._set(self.status.forwarded(time.time()))
        code = await self._proc.wait()
        self._proc = None
        return error_line([confined.explain(x) for x in lines], code)

    async def _check(self, argv: list[str], confined: Confined) -> str | None:
        """Ask ``ssh -G`` what this command line does: None when it is the one forward and
        nothing more; else why the tunnel is not started (ssh's own words for a config it
        cannot read, e.g. ``Bad configuration option``)."""
        try:
            with orphans.starting() as own:  # a session of its own, reaped here (communicate)
                proc = await asyncio.create_subprocess_exec(
                    *check_argv(argv),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    env=ssh_env(),
                    start_new_session=True,
                )
                own(proc.pid)
        except OSError as e:
            return f"cannot run ssh: {e.strerror or e}"
        except NotImplementedError:
            return "cannot run ssh from this event loop"
        try:
            out, err = await asyncio.wait_for(proc.communicate(), CHECK_TIMEOUT_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return f"ssh -G did not answer in {CHECK_TIMEOUT_S:g} s"
        if proc.returncode != 0:
            # its first line is the cause ("<file>: line 7: Bad configuration option: x"),
            # the last only "terminating, 1 bad configuration options"
            lines = err.decode("utf-8", "replace").splitlines()[::-1]
            return error_line([confined.explain(x) for x in lines], proc.returncode)
        problems = widened(parse_effective(out.decode("utf-8", "replace")))
        if problems:
            return clip(
                f"not started: ssh would also apply {', '.join(problems)} "
                f"(the app's tunnel carries only its own forward)"
            )
        return None

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    async def _kill(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        self._terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)


class TunnelManager:
    """Every saved tunnel of this app: started with the bridge, stopped with it.

    Runs on the bridge loop; ``port`` gives the bridge's live port, ``on_change`` republishes
    the snapshot (the UIs show :meth:`views`).
    """

    def __init__(
        self,
        specs: tuple[TunnelSpec, ...],
        port: Callable[[], int],
        on_change: Callable[[], None],
    ) -> None:
        self._specs = list(specs)
        self._port = port
        self._on_change = on_change
        self._tunnels: dict[str, Tunnel] = {}
        self._started = False
        self._folder = ConfigFolder()

    def start(self) -> None:
        self._started = True
        for spec in self._specs:
            self._launch(spec)

    def _launch(self, spec: TunnelSpec) -> None:
        tunnel = Tunnel(spec, self._port, self._on_change, self._folder)
        self._tunnels[spec.name] = tunnel
        tunnel.start()

    async def put(self, spec: TunnelSpec) -> None:
        """Add a tunnel, or replace the one of that name (its ssh restarts with the new spec).
        The same spec again leaves an *up* tunnel alone and tries a down one at once: running
        ``connect`` twice must not drop a working forward (sshd frees the remote port of a
        stopped ssh a moment later, so a restart could fail once on its own port)."""
        same = self._tunnels.get(spec.name)
        if same is not None and same.spec == spec:
            if same.status.state is not TunnelState.UP:
                same.restart("reconnecting (connect asked again)")
            return
        old = self._tunnels.pop(spec.name, None)
        if old is not None:
            await old.stop()
        self._specs = [s for s in self._specs if s.name != spec.name] + [spec]
        if self._started:
            self._launch(spec)
        self._on_change()

    async def remove(self, name: str) -> bool:
        tunnel = self._tunnels.pop(name, None)
        self._specs = [s for s in self._specs if s.name != name]
        if tunnel is None:
            return False
        await tunnel.stop()
        self._on_change()
        return True

    def reconnect(self, name: str) -> bool:
        tunnel = self._tunnels.get(name)
        if tunnel is None:
            return False
        tunnel.restart("reconnecting (asked by the user)")
        return True

    def follow_port(self, port: int) -> None:
        """The bridge listens on ``port`` now: every forward to another port starts again."""
        for tunnel in self._tunnels.values():
            if tunnel.local_port and tunnel.local_port != port:
                tunnel.restart(f"following the bridge to port {port}")

    def views(self) -> tuple[TunnelView, ...]:
        return tuple(t.view() for t in self._tunnels.values())

    def spec(self, name: str) -> TunnelSpec | None:
        tunnel = self._tunnels.get(name)
        return None if tunnel is None else tunnel.spec

    def get(self, name: str) -> TunnelView | None:
        tunnel = self._tunnels.get(name)
        return None if tunnel is None else tunnel.view()

    async def stop(self) -> None:
        tunnels = list(self._tunnels.values())
        if tunnels:
            await asyncio.gather(*(t.stop() for t in tunnels), return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(None, self._folder.remove)

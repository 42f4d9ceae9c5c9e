"""``bash``: run a shell command under a supervisor, with a timeout and output limits.

Every process the call starts is ended on timeout, on ``notifications/cancelled``, at bridge
shutdown, when its output passes ``limits.output_kill_bytes`` and when the shell exits — on
Linux including ``setsid`` and double-forked ones, through a child-subreaper supervisor forked
per call by one resident helper (:mod:`server.tools.reaper`, :mod:`server.tools.supervisor`).
The call returns when the shell exits, whatever its background children do with the pipe.
Output is stdout and stderr merged in order; when it is too long the head and tail are kept and
the middle is elided. The shell and its supervisor get a scrubbed environment
(:mod:`server.infra.childenv`): a safe allow-list plus the config's ``bash.env``, never a
secret-looking variable the user did not name, never ``A2A_BRIDGE_*``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from ..box.bwrap import STATUS_FD, render_outside
from ..box.run import (
    BoxRequest,
    NoBox,
    Prepared,
    outside_host,
    prepare,
    refused_note,
    sweep,
)
from ..infra.childenv import EnvSpec, build_env
from ..policy.bash.paths import command_escalation
from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import io_error

if TYPE_CHECKING:
    from ..infra.config import Limits
    from ..policy.paths import CallPaths, Escalation, PathPolicy
    from .supervisor import Started

log = logging.getLogger(__name__)

DRAIN_AFTER_EXIT_S = 0.2
# A boxed call whose box could not be set up (bubblewrap failed before the command started: a
# path the plan masks was removed between the plan and the mount) is planned again, this many
# times in all; then the call fails with the box's own error, never the command's.
BOX_SETUP_TRIES = 3
MIN_RETRY_TIMEOUT_S = 1.0
SUPERVISOR_EXIT_S = 2.0  # the supervisor ends everything in ~0.3 s; this only bounds a bug
_CLOSING: set[asyncio.Future[None]] = set()  # supervisors finishing after their call answered


class CappedOutput:
    """Keeps the first and last ``cap/2`` bytes of a stream and counts the rest."""

    def __init__(self, cap: int) -> None:
        self.half = max(cap // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        elided = self.total - len(self.head) - len(self.tail)
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if elided > 0:
            return f"{head}\n… [{elided} bytes of output elided] …\n{tail}"
        return head + tail


_shells: dict[str, str] = {}  # PATH -> the shell found on it


def shell_argv(command: str) -> list[str]:
    if sys.platform == "win32":
        return [os.environ.get("COMSPEC", "cmd.exe"), "/c", command]
    path = os.environ.get("PATH", os.defpath)
    shell = _shells.get(path)
    if shell is None or not os.access(shell, os.X_OK):  # one stat, not a walk of PATH
        shell = _shells[path] = shutil.which("bash") or shutil.which("sh") or "/bin/sh"
    return [shell, "-c", command]


def kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        if sys.platform == "win32":
            argv = ["taskkill", "/F", "/T", "/PID", str(pid)]
            subprocess.run(argv, capture_output=True, check=False)
        else:
            os.killpg(pid, sig)


class Ending(enum.Enum):
    """How a shell run ended (cancellation raises instead)."""

    EXITED = "exited"
    TIMEOUT = "timeout"
    OUTPUT_LIMIT = "output_limit"


def check_timeout(value: Any, limits: Limits) -> float:
    """A finite number of seconds in (0, bash_max_timeout_s]; NaN and infinities are refused."""
    most = limits.bash_max_timeout_s
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
        or value > most
    ):
        raise ToolError(f"timeout_s must be a finite number of seconds above 0, at most {most:g}")
    return float(value)


def child_env() -> dict[str, str]:
    """The safe allow-list alone (a call whose context carries no configured environment)."""
    return build_env(EnvSpec()).env


def _abandon(work: asyncio.Future[Started | None]) -> None:
    """A start the call no longer waits for: close its ends (EOF on the kill pipe ends it)."""
    if not work.cancelled() and work.exception() is None:
        started = work.result()
        if started is not None:
            started.close()


def _end_started(started: Started) -> None:
    """Blocking: end a shell whose start was abandoned and wait until its supervisor has
    exited (EOF on the status pipe, which only it holds), then close every end."""
    if sys.platform == "win32":  # no supervisor there
        return
    try:
        os.close(started.kill)  # EOF on the kill pipe: the supervisor ends the whole group
        deadline = time.monotonic() + SUPERVISOR_EXIT_S
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([started.status], [], [], left)
            if ready and not os.read(started.status, 4096):
                return
        kill_group(started.pid, signal.SIGKILL)  # never expected: the supervisor is stuck
    except OSError:
        return
    finally:
        for fd in (started.output, started.status):
            with contextlib.suppress(OSError):
                os.close(fd)


class ShellRun:
    """One shell under its supervisor (POSIX) or in a new process group (Windows).

    The call ends when the *shell* exits (reported by the supervisor on a status pipe), not when
    the output pipe closes, so ``sleep 300 & echo started`` returns at once; whatever the shell
    left behind is then ended by the supervisor.
    """

    def __init__(
        self,
        argv: list[str],
        cwd: str,
        limits: Limits,
        env: dict[str, str] | None = None,
        box: BoxRequest | None = None,
    ) -> None:
        self.argv = argv
        self.box = box  # POSIX: planned in the same worker that starts it (one hop, not two)
        self.boxed: Prepared | None = None
        self.cwd = cwd
        self.limits = limits
        self.env = child_env() if env is None else env
        self.output = CappedOutput(limits.output_max_bytes)
        self.proc: asyncio.subprocess.Process | None = None  # Windows: the shell itself
        self.started: Started | None = None  # POSIX: the pipes to the call's supervisor
        self.code: int | None = None
        # The box's setup failed (bubblewrap said so on its status pipe): the command never
        # ran, and the output is bubblewrap's.
        self.unstarted = False
        self.over_limit = asyncio.Event()
        self._out: asyncio.StreamReader | None = None
        self._status: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []
        self._reader: asyncio.Future[None] | None = None
        self._owned: list[int] = []  # descriptors no transport has taken over
        self._abandoned: asyncio.Future[Started | None] | None = None  # a cancelled start
        self._ending_abandoned = False

    async def start(self) -> None:
        """Start the shell. OSError when it cannot start; ValueError for an argument no
        program can receive (a NUL byte, a lone surrogate); NoBox when its box cannot be
        made."""
        if sys.platform == "win32":
            if self.box is not None:
                raise NoBox("no box on Windows")
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.cwd,
                env=self.env,
                creationflags=subprocess.CREATE_NEW_PROCESS_GROUP,
            )
            self._out = self.proc.stdout
        else:
            await self._start_supervised()
        self._reader = asyncio.ensure_future(self._pump())

    def _plan_and_start(self, abandoned: threading.Event) -> Started | None:
        """In a worker: plan the box (it looks at the disk), then hand the shell to the
        supervisor helper (a socket round trip)."""
        if sys.platform == "win32":  # never called there (no supervisor, no box)
            raise NoBox("no box on Windows")
        else:
            from .supervisor import start_shell

            argv, env = self.argv, self.env
            box_fd = None
            if self.box is not None:
                self.boxed = prepare(self.box, self.cwd, argv, STATUS_FD)
                argv, env = list(self.boxed.argv), {**env, "TMPDIR": self.boxed.plan.tmpdir}
                box_fd = STATUS_FD
            elif (host := outside_host()) is not None:
                argv = render_outside(host, self.cwd, argv)  # its own PID namespace
            return start_shell(argv, self.cwd, env, abandoned, box_fd)

    async def _start_supervised(self) -> None:
        abandoned = threading.Event()
        work = asyncio.ensure_future(pools.run(pools.Pool.PROCESS, self._plan_and_start, abandoned))
        try:
            started = await asyncio.shield(work)
        except asyncio.CancelledError:
            abandoned.set()  # not sent yet: never sent; sent: its kill pipe closes
            self._abandoned = work
            work.add_done_callback(lambda w: None if self._ending_abandoned else _abandon(w))
            raise
        assert started is not None
        self.started = started
        self._owned = [started.output, started.status, started.kill]
        loop = asyncio.get_running_loop()
        try:
            for fd in (started.output, started.status):
                reader = asyncio.StreamReader()
                self._owned.remove(fd)  # the pipe file (then its transport) closes it
                transport, _ = await loop.connect_read_pipe(
                    functools.partial(asyncio.StreamReaderProtocol, reader),
                    os.fdopen(fd, "rb", 0),
                )
                self._transports.append(transport)
                if fd == started.output:
                    self._out = reader
                else:
                    self._status = reader
        except BaseException:
            self._close_now()
            raise

    def _close_now(self) -> None:
        """Every descriptor of this run, at once (closing the kill pipe ends the call)."""
        for transport in self._transports:
            transport.close()  # closes its pipe end
        owned, self._owned = self._owned, []
        for fd in owned:
            with contextlib.suppress(OSError):
                os.close(fd)

    async def _pump(self) -> None:
        assert self._out is not None
        kill_at = self.limits.output_kill_bytes
        while True:
            chunk = await self._out.read(65536)
            if not chunk:
                return
            if self.over_limit.is_set():
                continue  # drain (and drop) what is left until the pipe closes
            self.output.feed(chunk)
            if self.output.total > kill_at:
                self.over_limit.set()

    async def _shell_exit(self) -> None:
        """Until the shell itself exits; sets ``code`` (negative: killed by that signal).

        Raises OSError when the supervisor could not start the shell."""
        if sys.platform == "win32" or self._status is None:  # Windows: no supervisor
            assert self.proc is not None
            self.code = await self.proc.wait()
            return
        line = (await self._status.readline()).decode("ascii", "replace").split(" ", 2)
        if len(line) == 2 and line[0] == "exit" and line[1].strip().isdigit():
            self.code = int(line[1])
        elif len(line) == 2 and line[0] == "unstarted" and line[1].strip().isdigit():
            self.code, self.unstarted = int(line[1]), True
        elif len(line) == 2 and line[0] == "signal" and line[1].strip().isdigit():
            self.code = -int(line[1])
        elif len(line) == 3 and line[0] == "error" and line[1].isdigit():
            raise OSError(int(line[1]) or None, line[2].strip())
        else:  # the supervisor died or was told to stop: report like a kill
            self.code = -signal.SIGKILL

    async def wait(self, timeout: float) -> Ending:
        exited = asyncio.ensure_future(self._shell_exit())
        limit = asyncio.ensure_future(self.over_limit.wait())
        try:
            done, _ = await asyncio.wait(
                {exited, limit}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            limit.cancel()
            if not exited.done():
                exited.cancel()
        if exited in done:
            if exited.exception() is not None:
                await self.kill()
                exited.result()  # raises: the shell did not start
            await self._finish()
            return Ending.EXITED
        await self.kill()
        return Ending.OUTPUT_LIMIT if limit in done else Ending.TIMEOUT

    async def _finish(self) -> None:
        """The shell exited: take what output is still buffered (briefly), then clean up.

        The supervisor ends what the shell left behind on its own; waiting for that (and for
        its exit) happens after the answer, in the background.
        """
        assert self._reader is not None
        with contextlib.suppress(TimeoutError):  # a cancel of the call still propagates
            await asyncio.wait_for(asyncio.shield(self._reader), DRAIN_AFTER_EXIT_S)
        if sys.platform == "win32":
            await self._close(ask=True)
            return
        task = asyncio.ensure_future(self._close(ask=False))
        _CLOSING.add(task)
        task.add_done_callback(_CLOSING.discard)

    def end_abandoned(self) -> Awaitable[None]:
        """After a cancelled :meth:`start`: the shell it may have started ends, and what it
        planted is all on the disk when this returns (a sweep may follow). Called at once in
        the ``except`` (the flag is set before the start's worker can finish)."""
        work, self._abandoned = self._abandoned, None
        if work is None:
            return asyncio.sleep(0)
        self._ending_abandoned = True
        return self._end_abandoned(work)

    async def _end_abandoned(self, work: asyncio.Future[Started | None]) -> None:
        try:
            started = await work  # bounded: the box's plan and a socket round trip
        except asyncio.CancelledError:  # the loop's end: at least close its ends when it lands
            work.add_done_callback(_abandon)
            raise
        except Exception:
            return
        if started is not None:
            await pools.run(pools.Pool.PROCESS, _end_started, started)

    async def kill(self) -> None:
        """End every process of this run (timeout, cancel, output limit, shutdown)."""
        await self._close(ask=True)

    async def _close(self, ask: bool) -> None:
        if sys.platform == "win32":
            proc = self.proc
            if proc is None:
                return
            if ask:
                kill_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), SUPERVISOR_EXIT_S)
            except TimeoutError:
                kill_group(proc.pid, signal.SIGTERM)
        else:
            started = self.started
            if started is None or started.kill not in self._owned:
                return
            if ask:
                with contextlib.suppress(OSError):
                    os.write(started.kill, b"k")
            try:
                await asyncio.wait_for(asyncio.shield(self._supervisor_exit()), SUPERVISOR_EXIT_S)
            except TimeoutError:
                # Never expected: the supervisor itself is stuck. Take its session down by force.
                kill_group(started.pid, signal.SIGKILL)
            finally:
                self._close_now()
        # Every writer of the output pipe is gone now, so the reader sees EOF at once and
        # asyncio closes the transport on this loop instead of at garbage collection.
        if self._reader is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._reader), DRAIN_AFTER_EXIT_S)
            self._reader.cancel()

    async def _supervisor_exit(self) -> None:
        """Until the supervisor has exited: EOF on the status pipe (only it holds the write end)."""
        assert self._status is not None
        while await self._status.read(4096):
            pass


async def _sweep_cancelled(boxed: Prepared | None) -> None:
    """What a cancelled boxed call planted is swept all the same (its shell has ended)."""
    if boxed is None:
        return
    try:
        await pools.run(pools.Pool.PROCESS, sweep, boxed.missing, boxed.watch)
    except Exception:
        log.exception("the box's sweep after a cancelled call failed")


async def _end_then_sweep(ending: Awaitable[None], run: ShellRun) -> None:
    await ending
    await _sweep_cancelled(run.boxed)


async def _clean_up_cancelled(ending: Awaitable[None], run: ShellRun) -> None:
    """A cancelled call's shell ends, then what it planted is swept: one task of its own
    (kept in ``_CLOSING``), so a second cancel of the call (the bridge's stop cancels every
    running tool, this one again) ends only the wait for it, never the sweep; the bridge's
    stop waits for it (:func:`settle`)."""
    task = asyncio.ensure_future(_end_then_sweep(ending, run))
    _CLOSING.add(task)
    task.add_done_callback(_CLOSING.discard)
    await asyncio.shield(task)


async def settle(timeout: float) -> None:
    """The bridge's stop: wait (at most ``timeout``) for the shells of answered or cancelled
    calls to end and for what a cancelled call planted to be swept. Without it the loop's
    end cancelled them half-way: a shell outlived the stop, ``.vscode/settings.json`` stayed."""
    loop = asyncio.get_running_loop()
    mine = {t for t in _CLOSING if t.get_loop() is loop}  # one per bridge in a process
    if mine:
        await asyncio.wait(mine, timeout=timeout)


async def _run_once(run: ShellRun, timeout: float) -> Ending:
    """Start ``run`` and wait for its end (cancels end its processes and sweep what it
    planted); tool errors for a shell that cannot start."""
    try:
        await run.start()
    except asyncio.CancelledError:  # a start cancelled on its way may have planted too
        await _clean_up_cancelled(run.end_abandoned(), run)
        raise
    except NoBox as e:
        raise ToolError(f"no box is available here: {e}") from None
    except OSError as e:
        raise io_error(e, "cannot start the shell") from None
    except ValueError as e:  # a NUL byte, a lone surrogate: no program can receive it
        raise ToolError(f"cannot start the shell: {e}") from None
    try:
        return await run.wait(timeout)
    except asyncio.CancelledError:  # a second cancel must not leave processes or plants
        await _clean_up_cancelled(run.kill(), run)
        raise
    except OSError as e:  # the supervisor could not start it (the cwd went away...)
        raise io_error(e, "cannot start the shell") from None


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a shell command on the bridge machine (bash -c, or sh -c where bash is missing) "
        "and return its combined stdout and stderr. Non-zero exit codes are reported as errors "
        "with the output. The call returns when the shell exits; every process it started "
        "(background ones included) is ended then, and on timeout or cancellation. Long "
        "output keeps its beginning and end. Commands run in a sandbox (the box) without "
        "asking: they read the machine except private places (the home's hidden files, "
        "credentials), write only the project (git top-level of cwd) and TMPDIR, and have no "
        "network. When a command needs the network or writes outside the project, set "
        '"box": false and give a "reason": a human then decides whether it runs outside.'
    )
    input_schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "The command line."},
            "cwd": {
                "type": "string",
                "minLength": 1,
                "description": "Working directory (default: the bridge's first root).",
            },
            "box": {
                "type": "boolean",
                "description": (
                    "true (default): run in the box, unasked. false: ask a human to run this "
                    "one call outside the box (network, writes outside the project)."
                ),
            },
            "reason": {
                "type": "string",
                "maxLength": 500,
                "description": 'Why the command needs "box": false (shown to the human).',
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "description": (
                    "Seconds before the command is killed (default 120; a finite number up to "
                    "the bridge's maximum, 3600 by default)."
                ),
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    annotations = {
        "title": "Run shell command",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": True,
    }
    default_tier = Tier.BOX
    boxable = True
    path_args = ("cwd",)
    default_paths = {"cwd": ""}

    def __init__(self, env: dict[str, str] | None = None) -> None:
        # The environment bash runs with (server/infra/childenv.py): the command check expands
        # ``$VAR`` from it, not from the bridge's own (which holds more).
        self.env = child_env() if env is None else env

    def escalation(self, args: dict[str, Any], policy: PathPolicy | CallPaths) -> Escalation | None:
        """The working directory, then every protected or persistence path the command names
        (:mod:`server.policy.bash.paths`): no rule, grant or tier runs ``cat ~/.ssh/id_rsa``."""
        esc = super().escalation(args, policy)
        command = args.get("command")
        if (esc is not None and esc.always_asks) or not isinstance(command, str):
            return esc
        cwd = args.get("cwd")
        named = command_escalation(
            command, policy.resolve(cwd if isinstance(cwd, str) else None), policy, self.env
        )
        return named or esc

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        limits = ctx.limits
        timeout = check_timeout(args.get("timeout_s", limits.bash_timeout_s), limits)
        shown_cwd = args.get("cwd") or ctx.policy.roots[0]
        cwd = ctx.resolve(args.get("cwd"))
        if not os.path.isdir(cwd):
            raise ToolError(f"cwd {shown_cwd}: not a directory")
        box = None
        if not ctx.outside_box:
            if ctx.box is None:
                raise ToolError("bash runs only in the box, and this call has none")
            box = ctx.box
        env = dict(ctx.env or child_env())
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for _ in range(BOX_SETUP_TRIES if box is not None else 1):
            run = ShellRun(shell_argv(args["command"]), cwd, limits, env, box)
            ending = await _run_once(run, max(deadline - loop.time(), MIN_RETRY_TIMEOUT_S))
            if not run.unstarted:
                break
            # The box's own setup failed before the command started (bubblewrap said so): plan
            # it again, the disk as it is now. Never for a command that started.
            log.info("a boxed call's box could not be set up; planning it again")
        if run.unstarted:
            said = run.output.text().strip()[:500] or f"bubblewrap exited with {run.code}"
            raise ToolError(
                f"the box could not be set up (tried {BOX_SETUP_TRIES} times), so the command "
                f"did not run: {said}. This is the box's setup, not the command: something "
                "it hides or shows changed on the disk while it was being made; call again."
            )
        boxed = run.boxed
        text = run.output.text().rstrip("\n")
        refused = None
        if boxed is not None:  # the box's own words end the result (what it refused, how to ask)
            removed = await pools.run(pools.Pool.PROCESS, sweep, boxed.missing, boxed.watch)
            refused = refused_note(text, boxed.plan, removed) if run.code or removed else None
        if ending is Ending.TIMEOUT:
            note = f"[timed out after {timeout:g} s; the process group was killed]"
        elif ending is Ending.OUTPUT_LIMIT:
            note = f"[output passed {limits.output_kill_bytes} bytes; the process group was killed]"
        elif run.code == 0:
            done = "\n".join(p for p in (text or "(no output)", refused) if p)
            return ToolResult.text(done)
        elif run.code is not None and run.code >= 0:
            note = f"[exit code {run.code}]"
        else:
            note = f"[killed by signal {-(run.code or 0)}]"
        return ToolResult.text("\n".join(p for p in (text, note, refused) if p), True)

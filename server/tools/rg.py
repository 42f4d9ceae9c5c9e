"""Running ``rg`` (ripgrep) for ``grep`` and ``find``: locate it, start it killable, parse it.

Why ripgrep: linear-time regex (no catastrophic backtracking, so no pattern can freeze the
bridge), every core, correct line numbers, BOM-aware decoding, binary detection and
``.gitignore`` support, at the speed agents expect. The ``ripgrep`` wheel ships the binary into
the environment's scripts directory; a system ``rg`` is used only when that one is missing.

Each run is its own process group so a cancel, a timeout or the bridge's shutdown
kills it at once with everything it started. Output is read in a pool thread, never on the
event loop, and parsing stops (and ``rg`` is killed) as soon as the caller has enough.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..box.bwrap import with_status_fd
from .base import ToolError

EXE = "rg.exe" if sys.platform == "win32" else "rg"


@functools.cache
def rg_path() -> str | None:
    """The ``rg`` from the ``ripgrep`` wheel in this environment, else one on ``PATH``."""
    candidates = [sysconfig.get_path("scripts"), os.path.dirname(sys.executable)]
    for d in candidates:
        if d:
            p = os.path.join(d, EXE)
            if os.path.isfile(p) and os.access(p, os.X_OK):
                return p
    return shutil.which("rg")


def require_rg() -> str:
    path = rg_path()
    if path is None:
        raise ToolError(
            "ripgrep (rg) is not installed: reinstall the bridge (the 'ripgrep' package ships it)"
        )
    return path


# rg runs at a lower CPU priority than the bridge, in the bridge's session (so in its
# scheduler group): when the machine is busy the event loop (ping, approvals, ls, the tray)
# goes first; when the bridge is idle rg still gets the group's whole share. Not by exec'ing
# ``nice``: that was a second exec per search, ~1 ms of every ``find`` and ``grep`` (2.3 vs
# 1.5 ms to run ``rg --version``). On Linux the search-pool thread that spawns rg is niced
# once (rg inherits it from birth); elsewhere rg's process group is reniced right after the
# spawn (``setpriority(PRIO_PGRP)`` reaches every thread of it). Renicing only after the spawn
# left rg at full priority for its first moments: ping p99 under four greps, each run
# against the previous code (nice exec) in the same script, was 5.9–18.9 ms vs 7.5–13.4 ms
# renicing after the spawn (6 runs, load 2.0–4.3) and 13.4–17.6 ms vs 17.2–27.8 ms with the
# thread niced (4 runs, load 3.1–3.7).
NICE = 10

# Reading rg's output (see RgRun.chunks). Blocks stay at 64 KiB: the parsers run C-level
# operations (findall, decode, split) over a whole block while holding the GIL.
READ_SIZE = 1 << 16
EAGER_READS = 16
READ_PAUSE = 0.001

BASE_ARGS = ("--no-config", "--color", "never", "--no-messages")

_niced = threading.local()


def _nice_this_thread() -> bool:
    """Linux: put the calling thread (a search-pool worker) at ``NICE`` once, so every rg it
    spawns inherits the priority from its first instruction (nice is per thread on Linux and
    a child takes its forking thread's). The worker's own parsing then also yields to the
    bridge loop, which is the point. True when the thread is niced."""
    if sys.platform == "win32":
        return False
    if getattr(_niced, "done", False):
        return True
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
    except OSError:
        return False
    _niced.done = True
    return True


# Linux: the child's ``chdir("/proc/self/fd/N")`` follows the magic link to the directory
# the descriptor holds, whatever its path names by then (a directory swapped for a symlink to
# ~/.ssh after the bridge opened it is not entered). macOS's /dev/fd cannot be a working
# directory and Windows has no such path; there ``cwd`` is checked after the start instead.
# A boxed walk (``RgRun.boxed``) starts by path too: a descriptor from outside the box's mount
# namespace would walk the host's mounts, around the box's masks.
FD_CWD = sys.platform == "linux" and os.path.isdir("/proc/self/fd")

_live: set[RgRun] = set()
_live_lock = threading.Lock()


@dataclass(eq=False)
class RgRun:
    """One ``rg`` process: started in its own process group, killable from any thread."""

    argv: list[str | bytes]
    cwd: str
    # A descriptor rg reads as its stdin (``grep`` on one file: the file the bridge opened and
    # judged, searched as ``-``); None: the null device.
    stdin: int | None = None
    # The directory rg runs in, opened by the bridge (no symlink at any component). Where a
    # descriptor can be a working directory (``FD_CWD``) rg starts in that very directory;
    # elsewhere it starts in ``cwd`` and the caller checks that it still names ``dir_fd``.
    dir_fd: int | None = None
    # ``argv`` runs ``rg`` inside a read-only box (server/box/edges.py), which starts it in
    # ``cwd`` by path: a descriptor opened outside the box would see the host's mounts, not
    # the box's masks. The caller then checks that ``cwd`` still names ``dir_fd``.
    boxed: bool = False
    # What bubblewrap said when it could not make the box (the walk then found nothing).
    box_error: str | None = None
    proc: subprocess.Popen[bytes] | None = None
    killed: bool = False
    timed_out: bool = False
    # The bridge stopped the walk (a timeout, a cancel): it is not started again.
    stopped: bool = False
    # A boxed walk: the read end of bubblewrap's status pipe (``--json-status-fd``), which
    # says whether rg started (server/box/bwrap.py STATUS_FD); -1 when there is none.
    box_status: int = -1
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPGREP_")}
        creationflags = 0  # Popen's defaults, unless set below
        process_group: int | None = None
        argv = self.argv
        if sys.platform == "win32":
            creationflags = (
                subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.BELOW_NORMAL_PRIORITY_CLASS
            )
        else:
            # Its own process group, but not a new session: on Linux a new session is a new
            # scheduler autogroup, which measurably slowed rg down on a busy machine.
            process_group = 0
        cwd, pass_fds = self.cwd, ()  # type: tuple[str, tuple[int, ...]]
        status_w = -1
        if self.boxed:
            cwd = "/"  # bubblewrap enters the walk's base by path, inside the box
            self._close_status()
            self.box_status, status_w = os.pipe()
            pass_fds, argv = (status_w,), with_status_fd(argv, status_w)
        elif self.dir_fd is not None and FD_CWD:
            cwd, pass_fds = f"/proc/self/fd/{self.dir_fd}", (self.dir_fd,)
        niced_at_birth = sys.platform == "linux" and _nice_this_thread()
        try:
            self._spawn(argv, cwd, pass_fds, creationflags, process_group, env, niced_at_birth)
        finally:
            if status_w >= 0:
                os.close(status_w)  # bubblewrap holds it now: EOF once it has exited
        with _live_lock:
            _live.add(self)

    def _spawn(
        self,
        argv: list[str | bytes],
        cwd: str,
        pass_fds: tuple[int, ...],
        creationflags: int,
        process_group: int | None,
        env: dict[str, str],
        niced_at_birth: bool,
    ) -> None:
        with self._lock:
            if self.killed:
                return
            self.proc = subprocess.Popen(
                argv,
                cwd=cwd,
                pass_fds=pass_fds,
                stdin=subprocess.DEVNULL if self.stdin is None else self.stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,  # small: --no-messages leaves only fatal errors
                env=env,
                creationflags=creationflags,
                process_group=process_group,
            )
            if sys.platform != "win32" and not niced_at_birth:
                with contextlib.suppress(OSError):  # rg may be gone already
                    os.setpriority(os.PRIO_PGRP, self.proc.pid, NICE)

    def _close_status(self) -> None:
        if self.box_status >= 0:
            with contextlib.suppress(OSError):
                os.close(self.box_status)
            self.box_status = -1

    def _box_started(self) -> bool:
        """Whether bubblewrap said it started rg (it has exited: all it wrote is there)."""
        data = b""
        if sys.platform != "win32":  # (boxed walks are POSIX only)
            with contextlib.suppress(OSError):
                os.set_blocking(self.box_status, False)
                while len(data) < 65536 and (chunk := os.read(self.box_status, 4096)):
                    data += chunk
        self._close_status()
        return b'"exit-code"' in data

    def stop(self) -> None:
        """The bridge is done with this walk (a timeout, a cancel): kill it, never restart it."""
        self.stopped = True
        self.kill()

    def restart(self) -> bool:
        """Ready to start again after a walk whose box could not be set up (``box_error``: rg
        never ran); False when the bridge stopped the walk meanwhile."""
        with self._lock:
            if self.stopped:
                return False
            self.proc, self.killed, self.box_error = None, False, None
            self._close_status()
            return True

    def kill(self) -> None:
        """Stop ``rg`` now (SIGKILL to its process group); safe to call twice or before start."""
        with self._lock:
            self.killed = True
            proc = self.proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(OSError):
            if sys.platform == "win32":
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)

    def chunks(self) -> Iterator[bytes]:
        """Raw stdout blocks until EOF (or until killed).

        rg writes each file's output as it finishes it, so a search with thousands of matching
        files reaches the pipe in thousands of small writes; waking up for each cost the reading
        thread ~5 µs (≈6 ms of CPU for 2,400 matches in 2,200 files, on a 2-core machine where
        that CPU is taken from rg). Once a run has shown itself to be long (``EAGER_READS``
        reads), a short read is followed by a ``READ_PAUSE`` nap so the next read takes what
        accumulated meanwhile (at most one nap of delay at EOF). A full block never naps, so
        fast output is read as fast as before. The pipe keeps its default size, so rg is
        still held back by a slow reader as before (a 1 MiB pipe was tried: no gain that the
        noise of this machine could show).
        """
        proc = self.proc
        if proc is None or proc.stdout is None:
            return
        fd = proc.stdout.fileno()
        reads = 0
        while True:
            try:
                block = os.read(fd, READ_SIZE)
            except OSError:  # closed by a concurrent finish()
                return
            if not block:
                return
            yield block
            reads += 1
            if reads > EAGER_READS and len(block) < READ_SIZE // 4:
                time.sleep(READ_PAUSE)

    def finish(self) -> tuple[int, str]:
        """Reap the process; its exit code and the first lines of its error output."""
        proc = self.proc
        code = -1
        err = ""
        try:
            if proc is not None:
                if proc.stdout is not None:
                    proc.stdout.close()
                if proc.stderr is not None:
                    err = proc.stderr.read(65536).decode("utf-8", "replace")
                    proc.stderr.close()
                code = proc.wait()
        finally:
            # bubblewrap exited by itself without saying rg started: its setup failed, rg
            # never ran (its error is bubblewrap's). Not a walk killed by a signal (a stop, or
            # the collector's end).
            if self.box_status >= 0:
                if code >= 0 and not self._box_started() and not self.stopped:
                    self.box_error = err.strip()[:300] or f"bubblewrap exited with {code}"
                self._close_status()
            with _live_lock:
                _live.discard(self)
        return code, err

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None


def kill_all() -> None:
    """Kill every ``rg`` still running (bridge shutdown, interpreter exit)."""
    with _live_lock:
        runs = list(_live)
    for run in runs:
        run.kill()


atexit.register(kill_all)


def rg_error(stderr: str) -> str:
    """rg's own complaint, shortened to what the agent needs (no "rg:" prefixes)."""
    lines = [ln.removeprefix("rg: ").rstrip() for ln in stderr.splitlines() if ln.strip()]
    return " ".join(lines)[:500] or "ripgrep failed"


def glob_escape(name: str) -> str:
    """A literal path for an rg ``--glob`` (escape the glob metacharacters)."""
    out = []
    for ch in name:
        if ch in "\\*?[]{}!":
            out.append("\\" + ch)
        else:
            out.append(ch)
    return "".join(out)

"""The bridge keeps every orphan of its process tree (Linux): a child subreaper that reaps them.

Why: the control API tells a tool's process from the human's by walking the peer's parents up to
the bridge (:mod:`server.control.peer`). A process that kills every ancestor between itself and
the bridge (its call's supervisor, then the supervisors' helper: all processes of the same
user) used to be re-parented to init, off that chain, and was then free to approve calls. With
``PR_SET_CHILD_SUBREAPER`` on the bridge such an orphan is re-parented to the bridge itself, so
its chain still ends at the bridge, through a child the bridge did not start in its own session:
the peer check counts that as a tool (:func:`server.control.peer.tool_on_chain`).

A subreaper must reap what it adopts, or every adopted orphan that exits stays a zombie of the
bridge. It must also never reap a child some ``Popen`` or asyncio watcher of the bridge waits
for (that owner would lose the exit status). What is reaped here, every :data:`REAP_EVERY_S`
by one thread per process, and only by ``waitpid`` of that one pid:

- a *zombie* direct child (``/proc/self/task/*/children``, state ``Z``),
- in a session other than the bridge's own (everything the bridge starts without a session of
  its own - ``git``, ``rg``, the box probe, what the tray opens - stays in the bridge's session,
  and its owner reaps it),
- and not one of the few children the bridge starts in a session of their own and waits for
  itself: stdio upstream servers, ssh tunnels (their exit codes are shown). Those are started
  inside :func:`starting`, which records their pid; while any such start is under way no
  zombie is reaped at all, so a child that died before its pid was recorded is never taken.
  The supervisors' helper is not recorded: nothing reads its exit status, and a helper the
  agent killed is reaped here at once instead of at the next ``bash`` call.

Zombies are therefore bounded: an adopted orphan that exits is reaped within one period.
Other systems have no subreaper: nothing here runs there.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator

PR_SET_CHILD_SUBREAPER = 36
REAP_EVERY_S = 2.0

_lock = threading.Lock()
_owned: set[int] = set()  # children in a session of their own that their starter reaps
_starting = 0  # starts of such children under way (no reaping meanwhile)
_thread: threading.Thread | None = None
_subreaper = False


def become_subreaper() -> bool:
    """Linux: this process adopts the orphans of its descendants (not inherited by children)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def enable() -> bool:
    """Make this process a subreaper and start its reaping thread, once per process (a test
    process runs several bridges). Returns whether this process is a subreaper."""
    global _thread, _subreaper
    with _lock:
        if _thread is None and sys.platform.startswith("linux"):
            _subreaper = become_subreaper()
            if _subreaper:
                _thread = threading.Thread(target=_loop, name="orphan-reaper", daemon=True)
                _thread.start()
        return _subreaper


@contextlib.contextmanager
def starting() -> Iterator[Callable[[int], None]]:
    """Around the start of a child that gets a session of its own and is reaped by its starter:
    yields ``own(pid)``, to call with its pid once it is known. Nothing is reaped until the
    start is over (a child that exits at once is its starter's to reap)."""
    global _starting
    with _lock:
        _starting += 1
    try:
        yield own
    finally:
        with _lock:
            _starting -= 1


def own(pid: int) -> None:
    """Record a child its starter reaps (see :func:`starting`)."""
    with _lock:
        _owned.add(pid)


def children(pid: int | None = None) -> list[int]:
    """The direct children of ``pid`` (this process by default), adopted orphans included."""
    me = os.getpid() if pid is None else pid
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{me}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{me}/task/{tid}/children", "rb") as f:
                out += [int(p) for p in f.read().split()]
        except FileNotFoundError:
            return _scan_children(me)  # CONFIG_PROC_CHILDREN off
        except (OSError, ValueError):
            continue
    return out


def _scan_children(me: int) -> list[int]:
    out: list[int] = []
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return out
    for name in names:
        found = stat_of(int(name))
        if found is not None and found[1] == me:
            out.append(int(name))
    return out


def stat_of(pid: int) -> tuple[str, int, int] | None:
    """``(state, parent, session)`` from ``/proc/PID/stat``; None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses.
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[3])
    except (IndexError, ValueError):
        return None


def reap_orphans() -> int:
    """Reap the zombies among this process's children that no owner waits for (see the module
    docstring); how many were reaped."""
    if sys.platform == "win32":  # no subreaper there (enable() never starts the thread)
        return 0
    reaped = 0
    with _lock:
        if _starting:
            return 0
        mine = children()
        _forget_reaped()
        session = os.getsid(0)
        for pid in mine:
            if pid in _owned:
                continue
            found = stat_of(pid)
            if found is None or found[0] != "Z" or found[2] == session:
                continue
            with contextlib.suppress(ChildProcessError, OSError):
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    reaped += 1
    return reaped


def _forget_reaped() -> None:
    """Owned children their owners have reaped since (their pids may come back as orphans)."""
    me = os.getpid()
    for pid in list(_owned):
        found = stat_of(pid)
        gone = not os.path.exists(f"/proc/{pid}") if found is None else found[1] != me
        if gone:
            _owned.discard(pid)


def _loop() -> None:
    wake = threading.Event()
    while not wake.wait(REAP_EVERY_S):
        with contextlib.suppress(Exception):  # a bug here must not end the reaping for good
            reap_orphans()

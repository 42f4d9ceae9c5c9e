"""The bridge's side of bash's supervisor (POSIX): one resident helper, asked to start each shell.

:mod:`server.tools.reaper` runs as one long-lived helper process per bridge process, started on
the first ``bash`` call. Each call sends it a request over a Unix socket (``cwd``, ``argv``, the
environment, and three pipe ends as ``SCM_RIGHTS``); the helper hands it to an idle supervisor
(a child subreaper forked from it earlier), or forks one. Why: starting ``python -I -S
reaper.py`` per call cost ~10–20 ms of CPU, more than the shell and its box together; a fork
per call still cost ~3 ms (page tables, copy-on-write faults); a waiting supervisor costs two
socket messages.

What the bridge keeps per call (:class:`Started`): the read ends of the output and status pipes
and the *only* write end of the kill pipe. Writing a byte to it, closing it, or the bridge dying
(the kernel closes it) ends every process of the call. Every descriptor here is close-on-exec,
so no other child of the bridge holds one. The helper's own environment is the safe allow-list
(:mod:`server.infra.childenv`) as it stood in the first call's environment: a call's
supervisor shows no more in ``/proc/$PPID/environ`` than the call itself got.

Blocking (a socket round trip): call :func:`start_shell` in a worker thread. Thread-safe: one
request at a time per process, however many bridges run in it (the tests run several).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..infra.childenv import TOOL_MARKER, EnvSpec, build_env

REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reaper.py")
MAGIC = b"A2AS"
REPLY_TIMEOUT_S = 60.0  # the helper answers after one fork; this only bounds a stuck helper


class HelperError(OSError):
    """The helper did not take the request (it is restarted for the next call)."""


@dataclass(frozen=True, slots=True)
class Started:
    """One call's ends of its pipes, and its supervisor's pid."""

    pid: int  # the call's supervisor; it leads its own session (killpg: the last resort)
    output: int  # read end: the shell's stdout and stderr, merged
    status: int  # read end: ``exit N`` / ``signal N`` / ``killed`` / ``error ERRNO TEXT``
    kill: int  # write end, held only here: a byte, or EOF, ends every process of the call

    def close(self) -> None:
        for fd in (self.output, self.status, self.kill):
            with contextlib.suppress(OSError):
                os.close(fd)


def encode_request(
    cwd: str, argv: Sequence[str], env: Mapping[str, str], box_fd: int | None = None
) -> bytes:
    """The request's payload: ``argc[:FD] NUL cwd NUL argv... NUL NAME=VALUE...``; ``FD``
    (``box_fd``): the descriptor ``argv``'s bubblewrap reports its status on
    (:data:`server.box.bwrap.STATUS_FD`): the supervisor puts a pipe there and reports
    ``unstarted N`` when bubblewrap's own setup failed.

    Raises ValueError (as ``subprocess`` does) for a NUL inside any of them, a name holding
    ``=``, or text the file system encoding cannot carry (a lone surrogate)."""
    fields = [os.fsencode(cwd), *(os.fsencode(a) for a in argv)]
    for name, value in env.items():
        key = os.fsencode(name)
        if not key or b"=" in key:
            raise ValueError(f"illegal environment variable name: {name!r}")
        fields.append(key + b"=" + os.fsencode(value))
    if not argv or any(b"\0" in f for f in fields):
        raise ValueError("embedded null byte")
    head = str(len(argv)) if box_fd is None else f"{len(argv)}:{box_fd}"
    return head.encode() + b"\0" + b"\0".join(fields)


def helper_env(call_env: Mapping[str, str]) -> dict[str, str]:
    """The helper's own environment: the safe list, only where the call's environment agrees
    (so a value the bridge withheld from the call is withheld here too), and the tool marker."""
    safe = build_env(EnvSpec()).env
    env = {k: v for k, v in safe.items() if call_env.get(k) == v}
    env[TOOL_MARKER] = "1"
    return env


# The rest is POSIX only (shell.py starts shells through it there); this also tells mypy to
# check it as POSIX code.
assert sys.platform != "win32"


class _Helper:
    """The resident helper process and the bridge's end of its socket."""

    def __init__(self, env: Mapping[str, str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            # A session of its own, and not recorded as owned (server/infra/orphans.py):
            # killed, it is reaped by the bridge's orphan reaper; nothing reads its status.
            self.proc = subprocess.Popen(
                [sys.executable, "-I", "-S", REAPER],
                stdin=theirs.fileno(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                env=dict(env),
                start_new_session=True,
            )
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock = mine
        self.sock.settimeout(REPLY_TIMEOUT_S)
        self.buffered = b""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, payload: bytes, fds: Sequence[int]) -> None:
        """Raises HelperError when nothing reached the helper (safe to try another)."""
        data = MAGIC + len(payload).to_bytes(4, "big") + payload
        try:
            sent = self.sock.sendmsg(
                [data[:65536]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(_fd_array(fds)))]
            )
        except OSError as e:
            raise HelperError(e.errno, f"the supervisor helper is gone ({e})") from None
        if sent < len(data):  # the rest, once the helper has the descriptors
            self.sock.sendall(data[sent:])

    def reply(self) -> int:
        """The call's supervisor pid; OSError when the helper did not answer."""
        while b"\n" not in self.buffered:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise OSError("the supervisor helper stopped before it answered")
            self.buffered += chunk
        line, _, self.buffered = self.buffered.partition(b"\n")
        word, _, rest = line.decode("ascii", "replace").partition(" ")
        if word != "ok" or not rest.isdigit():
            raise OSError(f"the supervisor helper refused: {rest[:200]}")
        return int(rest)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(0.5)


def _fd_array(fds: Sequence[int]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)


_lock = threading.Lock()
_helper: _Helper | None = None


def _current(env: Mapping[str, str]) -> _Helper:
    global _helper
    if _helper is not None and not _helper.alive():
        _helper.close()
        _helper = None
    if _helper is None:
        _helper = _Helper(helper_env(env))
    return _helper


def _forget() -> None:
    """Stop using the helper (dead, or out of step after a failed request): killed at once;
    the calls it already forked do not depend on it."""
    global _helper
    if _helper is not None:
        with contextlib.suppress(OSError):
            _helper.proc.kill()
        _helper.close()
        _helper = None


def helper_pid() -> int | None:
    """The helper's pid (the bench adds its CPU to the bridge's), or None before the first call."""
    helper = _helper
    return None if helper is None or not helper.alive() else helper.proc.pid


def start_shell(
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    abandoned: threading.Event | None = None,
    box_fd: int | None = None,
) -> Started | None:
    """Blocking: start ``argv`` in ``cwd`` under a supervisor forked by the helper (``box_fd``:
    see :func:`encode_request`).

    None when ``abandoned`` was set before anything was sent (the call was cancelled while
    this waited for a worker). Raises ValueError for an argument no program can receive, and
    OSError when the helper cannot be started or does not answer; in that case every
    descriptor is closed, so a supervisor that did start sees EOF on its kill pipe and ends
    whatever it started."""
    payload = encode_request(cwd, argv, env, box_fd)
    out_r, out_w = os.pipe()
    status_r, status_w = os.pipe()
    kill_r, kill_w = os.pipe()
    theirs = (out_w, status_w, kill_r)
    started = Started(0, out_r, status_r, kill_w)
    try:
        with _lock:
            if abandoned is not None and abandoned.is_set():
                started.close()
                return None
            helper = _current(env)
            try:
                try:
                    helper.send(payload, theirs)
                except HelperError:  # it died since the last call: nothing was taken
                    _forget()
                    helper = _current(env)
                    helper.send(payload, theirs)
                pid = helper.reply()
            except BaseException:
                _forget()
                raise
    except BaseException:
        started.close()
        raise
    finally:
        for fd in theirs:
            os.close(fd)
    return Started(pid, out_r, status_r, kill_w)

"""Is a box possible here? Found once per process by running bubblewrap, cached.

Blocking (it starts ``bwrap`` once, ~20 ms): the bridge calls :func:`probe` while it starts,
before its event loop runs; the pipeline then reads :func:`status` (never blocks).

A probe that failed because ``bwrap`` did not answer in time (a loaded machine at login) is not
an answer about this machine: it is tried again, after 30 s, 1, 2, 5 and 10 minutes
(:data:`RETRY_AFTER_S`), in a thread :func:`status` starts when one is due (or in the next
:func:`probe`), and only then does the failure stand. Why: cached for the bridge's whole life,
one slow start left every call boxless, and an approved call outside the box without the PID
namespace bubblewrap gives it (``server/box/bwrap.py``). Any other failure (no ``bwrap``, user
namespaces off) is an answer and stays.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from .bwrap import BwrapHost
from .plan import BoxStatus, Mechanism
from .scope import SCOPE_ABI, SCRIPT, abi

BWRAP_PATHS = ("/usr/bin/bwrap", "/bin/bwrap")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
PROBE_TIMEOUT_S = 10.0
RETRY_AFTER_S = (30.0, 60.0, 120.0, 300.0, 600.0)  # after a probe that timed out; then it stands
_lock = threading.Lock()
_result: tuple[BoxStatus, BwrapHost | None] | None = None
_retry: tuple[int, float] | None = None  # (retries made, monotonic time the next is due)
_kick = threading.Lock()  # held while a retry started by status() runs
_clock = time.monotonic


class TimedOut:
    """``bwrap`` did not answer within :data:`PROBE_TIMEOUT_S`: no answer, try again later."""


def _empty_file() -> str:
    """A private, read-only empty file: what a private file looks like inside the box."""
    folder = tempfile.mkdtemp(prefix="a2a-box-")
    path = os.path.join(folder, "empty")
    with open(path, "wb"):
        pass
    os.chmod(path, 0o444)
    return path


def _try(
    bwrap: str, disable_userns: bool, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[bytes] | TimedOut | None:
    argv = [
        *prefix,
        bwrap,
        "--unshare-all",
        "--unshare-user",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
    ]
    if disable_userns:
        argv.append("--disable-userns")
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]  # noqa: S108
    argv += ["--", "/bin/sh", "-c", "exit 0"]
    try:
        return subprocess.run(argv, capture_output=True, timeout=PROBE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return TimedOut()
    except OSError:
        return None


def _scope(bwrap: str, disable_userns: bool) -> tuple[str, ...]:
    """The prefix that runs bwrap scoped away from outside abstract unix sockets
    (:mod:`server.box.scope`), when Landlock has scopes and a box starts under it; else none
    (the docs say what a box with network then reaches). A frozen app has no interpreter to
    run the script with."""
    if getattr(sys, "frozen", False) or abi() < SCOPE_ABI:
        return ()
    prefix = (sys.executable, "-I", "-S", SCRIPT)
    done = _try(bwrap, disable_userns, prefix)
    ok = isinstance(done, subprocess.CompletedProcess) and done.returncode == 0
    return prefix if ok else ()


def _version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "bwrap"
    return out.stdout.decode("ascii", "replace").strip() or "bwrap"


def find_out() -> tuple[BoxStatus, BwrapHost | None]:
    """Probe now, uncached (blocking): what :func:`probe` caches."""
    status, host, _ = _find_out()
    return status, host


def _find_out() -> tuple[BoxStatus, BwrapHost | None, bool]:
    """The probe, and whether it failed only because ``bwrap`` did not answer in time."""
    if not sys.platform.startswith("linux"):
        why = "no box on this system (macOS and Windows have no proven box yet)"
        return BoxStatus(False, Mechanism.NONE, why), None, False
    bwrap = next((p for p in BWRAP_PATHS if os.access(p, os.X_OK)), None)
    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        text = f"bubblewrap is missing: {INSTALL_HINT}"
        return BoxStatus(False, Mechanism.NONE, text), None, False
    timed_out = False
    done: subprocess.CompletedProcess[bytes] | None = None
    for disable_userns in (True, False):
        tried = _try(bwrap, disable_userns)
        if isinstance(tried, TimedOut):
            timed_out = True
            continue
        done = tried
        if done is not None and done.returncode == 0:
            found = _scope(bwrap, disable_userns)
            host = BwrapHost(bwrap, _empty_file(), disable_userns, found)
            detail = f"{_version(bwrap)}, user namespaces, no network"
            return BoxStatus(True, Mechanism.BWRAP, detail), host, False
    if timed_out and done is None:
        text = (
            f"bubblewrap ({bwrap}) did not answer within {PROBE_TIMEOUT_S:g} s (a loaded "
            "machine?): the bridge tries again in a while"
        )
        return BoxStatus(False, Mechanism.NONE, text), None, True
    why = (done.stderr.decode("utf-8", "replace").strip() if done else "") or "did not start"
    text = f"bubblewrap ({bwrap}) cannot make a box here ({why[:200]}): are user namespaces off?"
    return BoxStatus(False, Mechanism.NONE, text), None, timed_out


def _next_retry(timed_out: bool) -> tuple[int, float] | None:
    """When to probe again after this answer: only after a timeout, and a bounded number of
    times (:data:`RETRY_AFTER_S`)."""
    made = 0 if _retry is None else _retry[0]
    if not timed_out or made >= len(RETRY_AFTER_S):
        return None
    return made + 1, _clock() + RETRY_AFTER_S[made]


def _due() -> bool:
    retry = _retry
    return retry is not None and _clock() >= retry[1]


def probe() -> BoxStatus:
    """Find out once (blocking); later calls return the cached answer, unless the cached one
    was a timeout whose retry is due (then this probes again)."""
    global _result, _retry
    with _lock:
        if _result is None or _due():
            status, host, timed_out = _find_out()
            _result = (status, host)
            _retry = _next_retry(timed_out)
        elif _result[1] is not None and not os.path.exists(_result[1].empty_file):
            host = _result[1]  # a /tmp cleaner took the mask file: make another
            fresh = BwrapHost(host.bwrap, _empty_file(), host.disable_userns, host.scope)
            _result = (_result[0], fresh)
        return _result[0]


def status() -> BoxStatus:
    """The cached answer, without blocking: "not checked yet" counts as no box. When a retry
    of a probe that timed out is due, it starts in a thread (the next status has its answer)."""
    if _due():
        retry_in_background()
    result = _result
    if result is None:
        return BoxStatus(False, Mechanism.NONE, "the box was not checked yet")
    return result[0]


def known() -> BoxStatus | None:
    """The cached answer, or None before the probe ran (snapshots built on the event loop
    carry it; the first one after the probe says it)."""
    result = _result
    return None if result is None else result[0]


def host() -> BwrapHost | None:
    """bubblewrap's facts for :func:`server.box.bwrap.render`, or None without a box."""
    result = _result
    return None if result is None else result[1]


def retry_in_background() -> bool:
    """Start the due retry in a thread, unless one runs already; whether one was started."""
    if not _kick.acquire(blocking=False):
        return False

    def run() -> None:
        try:
            probe()
        finally:
            _kick.release()

    try:
        threading.Thread(target=run, name="box-probe-retry", daemon=True).start()
    except RuntimeError:  # no thread at interpreter exit
        _kick.release()
        return False
    return True

"""Is a box possible here? Found once per process by running bubblewrap, cached.

Blocking (it starts ``bwrap`` once, ~20 ms): the bridge calls :func:`probe` while it starts,
before its event loop runs; the pipeline then reads :func:`status` (never blocks).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading

from .bwrap import BwrapHost
from .plan import BoxStatus, Mechanism
from .scope import SCOPE_ABI, SCRIPT, abi

BWRAP_PATHS = ("/usr/bin/bwrap", "/bin/bwrap")
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap)"
_lock = threading.Lock()
_result: tuple[BoxStatus, BwrapHost | None] | None = None


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
) -> subprocess.CompletedProcess[bytes] | None:
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
        return subprocess.run(argv, capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
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
    return prefix if done is not None and done.returncode == 0 else ()


def _version(bwrap: str) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return "bwrap"
    return out.stdout.decode("ascii", "replace").strip() or "bwrap"


def find_out() -> tuple[BoxStatus, BwrapHost | None]:
    """Probe now, uncached (blocking): what :func:`probe` caches."""
    if not sys.platform.startswith("linux"):
        why = "no box on this system (macOS and Windows have no proven box yet)"
        return BoxStatus(False, Mechanism.NONE, why), None
    bwrap = next((p for p in BWRAP_PATHS if os.access(p, os.X_OK)), None)
    bwrap = bwrap or shutil.which("bwrap")
    if bwrap is None:
        return BoxStatus(False, Mechanism.NONE, f"bubblewrap is missing: {INSTALL_HINT}"), None
    for disable_userns in (True, False):
        done = _try(bwrap, disable_userns)
        if done is not None and done.returncode == 0:
            found = _scope(bwrap, disable_userns)
            host = BwrapHost(bwrap, _empty_file(), disable_userns, found)
            detail = f"{_version(bwrap)}, user namespaces, no network"
            return BoxStatus(True, Mechanism.BWRAP, detail), host
    why = (done.stderr.decode("utf-8", "replace").strip() if done else "") or "did not start"
    text = f"bubblewrap ({bwrap}) cannot make a box here ({why[:200]}): are user namespaces off?"
    return BoxStatus(False, Mechanism.NONE, text), None


def probe() -> BoxStatus:
    """Find out once (blocking); later calls return the cached answer."""
    global _result
    with _lock:
        if _result is None:
            _result = find_out()
        elif _result[1] is not None and not os.path.exists(_result[1].empty_file):
            host = _result[1]  # a /tmp cleaner took the mask file: make another
            fresh = BwrapHost(host.bwrap, _empty_file(), host.disable_userns, host.scope)
            _result = (_result[0], fresh)
        return _result[0]


def status() -> BoxStatus:
    """The cached answer, without blocking: "not checked yet" counts as no box."""
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

"""Can this machine box? Found once per process (it starts ``bwrap``), then cached.

Why a probe and not a version check: distributions ship ``bwrap`` without the user namespaces
it needs (a kernel setting, an AppArmor rule), and a container may forbid them; only starting
one tells. ``status()`` blocks (call it in a worker); ``known()`` never does and is ``None``
until a probe has run, so snapshots built on the event loop can carry the answer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading

from .plan import BoxStatus, Mechanism

BWRAP_PATHS = ("/usr/bin/bwrap",)  # the distribution's first, then PATH
PROBE_TIMEOUT_S = 10.0

_lock = threading.Lock()
_status: BoxStatus | None = None


def find_bwrap() -> str | None:
    for path in BWRAP_PATHS:
        if os.access(path, os.X_OK):
            return path
    return shutil.which("bwrap")


def _first_line(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return text.splitlines()[0][:200] if text else ""


def probe() -> BoxStatus:
    """Start ``bwrap --ro-bind / / true`` once and say what happened (blocking)."""
    if sys.platform == "darwin":
        return BoxStatus(
            False,
            Mechanism.NONE,
            "macOS: the Seatbelt profile is generated but not yet proven, so bash asks",
        )
    if not sys.platform.startswith("linux"):
        return BoxStatus(False, Mechanism.NONE, f"{sys.platform} has no box, so bash asks")
    bwrap = find_bwrap()
    if bwrap is None:
        return BoxStatus(
            False, Mechanism.NONE, "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
        )
    try:
        version = subprocess.run(
            [bwrap, "--version"], capture_output=True, timeout=PROBE_TIMEOUT_S, check=False
        )
        ran = subprocess.run(
            [bwrap, "--ro-bind", "/", "/", "--unshare-net", "true"],
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return BoxStatus(False, Mechanism.NONE, f"{bwrap} could not start: {e}")
    name = _first_line(version.stdout).removeprefix("bubblewrap ") or "version unknown"
    if ran.returncode != 0:
        why = _first_line(ran.stderr) or f"exit {ran.returncode}"
        return BoxStatus(False, Mechanism.NONE, f"bubblewrap {name} ({bwrap}) fails here: {why}")
    return BoxStatus(True, Mechanism.BWRAP, f"{name} ({bwrap}), user and network namespaces")


def status() -> BoxStatus:
    """The cached probe (the first call probes, in the caller's thread: not the loop's)."""
    global _status
    with _lock:
        if _status is None:
            _status = probe()
        return _status


def known() -> BoxStatus | None:
    """The probe's answer if it has run; never blocks."""
    return _status

"""Who holds a TCP port, where the OS says: named in the one line a busy chosen port stops at.

Why: "port 8080 is busy" sends the user hunting; "held by nginx (pid 812)" ends the hunt. Linux
only, best effort: the port's socket is found in ``/proc/net/tcp`` and ``tcp6`` (its inode),
the process holding that inode in ``/proc/*/fd`` (the scan :mod:`server.control.peer` uses), its
name in ``/proc/PID/comm``. Another user's process cannot be read: it is then said to be another
user's. Other systems: nothing (the line says how to look). The scan runs in a worker thread
with a timeout, so a slow ``/proc`` never holds up the start's failure line.
"""

from __future__ import annotations

import concurrent.futures
import sys

from ..control.peer import PROC, pids_holding
from ..present.textsafe import shorten

LOOKUP_TIMEOUT_S = 3.0
LISTEN = "0A"


def socket_inodes(table: str, port: int) -> list[int]:
    """Inodes of sockets bound to local ``port`` in one ``/proc/net/tcp*`` text, listening
    ones first (a bound socket that does not listen holds the port too). Pure."""
    listening: list[int] = []
    other: list[int] = []
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        try:
            local = int(fields[1].rsplit(":", 1)[1], 16)
            inode = int(fields[9])
        except ValueError:
            continue
        if local == port and inode:
            (listening if fields[3] == LISTEN else other).append(inode)
    return listening + other


def _comm(pid: int) -> str:
    try:
        with open(f"{PROC}/{pid}/comm", encoding="utf-8", errors="replace") as f:
            name = f.read().strip()
    except OSError:
        return ""
    return shorten(name, 40).text  # a process names itself: rendered like agent text


def _find(port: int) -> str | None:
    inodes: list[int] = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{PROC}/net/{table}", encoding="ascii", errors="replace") as f:
                inodes += socket_inodes(f.read(), port)
        except OSError:
            continue
    if not inodes:
        return None
    for inode in inodes:
        try:
            pids, _ = pids_holding(inode, 0)
        except OSError:  # out of descriptors: the OS does not say now
            return None
        if pids:
            name = _comm(pids[0])
            return f"{name} (pid {pids[0]})" if name else f"pid {pids[0]}"
    return "a process of another user"


def port_holder(port: int) -> str | None:
    """``nginx (pid 812)``, ``a process of another user``, or None when the OS does not say."""
    if not sys.platform.startswith("linux"):
        return None
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="port-owner")
    try:
        return pool.submit(_find, port).result(LOOKUP_TIMEOUT_S)
    except (concurrent.futures.TimeoutError, OSError):
        return None
    finally:
        pool.shutdown(wait=False)

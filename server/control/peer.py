"""Which process is asking: the control API never answers a tool the bridge started.

Why: the control secret is a file in the runtime directory; a ``bash`` call that runs outside the
box (or an upstream server, or a bug in the box) can read it and approve its own waiting calls,
rotate the token or save an allow rule, and the audit would say ``decided_by: user``. So every
control request's peer is found and refused when it descends from a tool child.

Linux: the loopback connection's client socket is found in ``/proc/net/tcp`` and ``tcp6``
(its local port is the peer's port, its remote port the control API's), its inode in
``/proc/*/fd`` gives the process, and ``/proc/PID/stat`` gives the parents up to the bridge. A
process on that chain carrying :data:`~server.infra.childenv.TOOL_MARKER` in its
``/proc/PID/environ`` (the environment it was started with: ``bash``'s supervisor and every
stdio upstream server get it, and the supervisor, a child subreaper, keeps every descendant of
the shell below it) is a tool. The tray runs the bridge in process, so processes the tray starts
(a browser) are the bridge's children too: the marker, not "any child", is what tells them apart.

A tool's process may kill its ancestors (its supervisor, the supervisors' helper: the same user)
to get off that chain. Every process between a shell and the bridge is a child subreaper (the
supervisor, the helper, and the bridge itself: :mod:`server.infra.orphans`), so such an orphan
is re-parented to the nearest one still alive, never to init: to the helper (it carries the
marker), or at worst to the bridge. So the bridge's child on a chain is also checked: in a
session other than the bridge's own, it is a tool. Why the session: the kernel lets a process
keep its session or start one of its own (``setsid``), never join another, and a session's id
(its first process's pid) is not given to a new process while any process is in it. The helper
and the upstream servers start in sessions of their own, so nothing that descends from a tool
can be in the bridge's session, while what the bridge starts for itself stays there (``git``,
the box probe, the browser or editor the tray opens: :func:`tray.app.open_url`).
A peer whose process cannot be read (another user's, a parent user namespace's, or one that made
itself non-dumpable) is refused when any unreadable process descends from a tool (fail closed
where it matters); a connection missing from the TCP tables is refused. **Open** (attack9,
``tests/security/test_attack9_peer_in_flight.py``): a socket that *no* process holds - its
descriptor in flight in an ``SCM_RIGHTS`` message, the request corked until then - is not
refused either (nobody is found, and unreadable processes that are not a tool's are allowed).
Other systems have no
``/proc``: there the peer is not checked (fail open), which the README states.

Cost: one sock_diag lookup (or, without it, a read of the TCP tables) and a scan of the
readable ``/proc/*/fd`` until the socket is found: under 1 ms for the bridge's own process (the
tray, tests), ~25 ms for another process on a 120-process machine; in a worker, once per
connection (the verdict is kept for keep-alive requests and the events socket).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
import sys
import time
from dataclasses import dataclass

from ..infra.childenv import TOOL_MARKER

PROC = "/proc"
ESTABLISHED = "01"
MAX_DEPTH = 256
NO_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


class OutOfDescriptors(OSError):
    """This process (or the system) cannot open a file right now, so ``/proc`` says nothing.

    Why an error of its own: read as "unreadable" or "not a tool", an exhausted descriptor
    table would let a peer through unexamined (fail open); it is no answer at all, and the
    lookup is tried again, then refused."""


def _check_descriptors(e: OSError) -> None:
    if e.errno in NO_DESCRIPTORS:
        raise OutOfDescriptors(e.errno, "out of file descriptors") from e


@dataclass(frozen=True, slots=True)
class Peer:
    """What the control API knows of the process at the other end of a request."""

    checked: bool  # False: this system cannot tell (no /proc)
    pid: int | None  # the client socket's process, when found
    tool_pid: int | None = None  # the process on its chain the bridge started for a tool
    hidden_tool: bool = False  # not found, and a tool's descendant hides from /proc

    @property
    def refused(self) -> bool:
        """A tool's descendant; or (Linux) a peer not found while a tool's process hides."""
        return self.checked and (
            self.tool_pid is not None or (self.pid is None and self.hidden_tool)
        )

    def why(self) -> str:
        if self.pid is None:
            return "the control API could not tell which process is asking, so it refuses"
        return (
            f"process {self.pid} descends from a process the bridge started for a tool, or "
            f"from one it adopted ({self.tool_pid}); a tool cannot approve calls or change "
            "the bridge"
        )


# sock_diag (netlink): one exact lookup by the connection's four-tuple, instead of reading the
# whole TCP table (/proc/net/tcp lists every socket, TIME_WAIT included: ~60 ms on a busy host).
NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 1
NLMSG_ERROR = 2
INET_DIAG_NOCOOKIE = 0xFFFFFFFF
_REQ = struct.Struct("=IHHII BBBxI HH16s16sIII")  # nlmsghdr + inet_diag_req_v2 (exact id)
_MSG_INODE = 16 + 68  # nlmsghdr, then inet_diag_msg's idiag_inode


def diag_inode(peer: tuple[str, int], server: tuple[str, int]) -> int | None:
    """The inode of the client socket ``peer`` -> ``server`` from the kernel (sock_diag), 0
    when the kernel says there is none; None when it cannot say (no netlink, no inet_diag):
    the caller reads /proc."""
    if sys.platform != "linux":  # netlink is Linux's (and mypy checks the other platforms)
        return None
    try:
        src, dst = ipaddress.ip_address(peer[0]), ipaddress.ip_address(server[0])
    except ValueError:
        return None
    if isinstance(src, ipaddress.IPv6Address) and src.ipv4_mapped is not None:
        src = src.ipv4_mapped
    family = socket.AF_INET if src.version == 4 else socket.AF_INET6
    if dst.version != src.version:
        return None
    body = _REQ.pack(
        _REQ.size, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, 1, 0,
        family, socket.IPPROTO_TCP, 0, 1 << 1,  # TCP_ESTABLISHED
        socket.htons(peer[1]), socket.htons(server[1]),
        src.packed.ljust(16, b"\0"), dst.packed.ljust(16, b"\0"),
        0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE,
    )  # fmt: skip
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1.0)
            nl.send(body)
            reply = nl.recv(8192)
    except (OSError, AttributeError):
        return None
    if len(reply) >= 20 and struct.unpack_from("=H", reply, 4)[0] == NLMSG_ERROR:
        return 0 if struct.unpack_from("=i", reply, 16)[0] == -errno.ENOENT else None
    if len(reply) < _MSG_INODE + 4:
        return None
    return struct.unpack_from("=I", reply, _MSG_INODE)[0]


def client_socket_inode(peer_port: int, server_port: int) -> int | None:
    """The inode of the client end of an established loopback connection peer -> server, from
    /proc/net/tcp{,6} (the fallback when sock_diag cannot answer)."""
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{PROC}/net/{table}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != ESTABLISHED:
                continue
            local, remote = fields[1].rsplit(":", 1)[1], fields[2].rsplit(":", 1)[1]
            if int(local, 16) == peer_port and int(remote, 16) == server_port:
                return int(fields[9]) or None
    return None


def pids_holding(inode: int, first: int) -> tuple[list[int], list[int]]:
    """The processes with the socket open, and those whose ``/proc/PID/fd`` could not be read
    (another user's, a parent user namespace's, or one that made itself non-dumpable). ``first``
    is checked first: the in-process clients (the tray, tests) answer without scanning the
    machine; then the newest processes first (a CLI just started). Raises
    :class:`OutOfDescriptors` when this process cannot open ``/proc`` entries at all."""
    target = f"socket:[{inode}]"
    try:
        others = sorted((int(n) for n in os.listdir(PROC) if n.isdigit()), reverse=True)
    except OSError:
        return [], []
    found: list[int] = []
    unreadable: list[int] = []
    for pid in [first, *(p for p in others if p != first)]:
        try:
            fds = os.listdir(f"{PROC}/{pid}/fd")
        except FileNotFoundError:
            continue  # gone
        except OSError as e:
            _check_descriptors(e)
            unreadable.append(pid)
            continue
        for fd in fds:
            try:
                link = os.readlink(f"{PROC}/{pid}/fd/{fd}")
            except FileNotFoundError:
                continue
            except OSError as e:
                _check_descriptors(e)
                unreadable.append(pid)
                break
            if link == target:
                found.append(pid)
                break
        if found and pid == first:
            break
    return found, unreadable


def parent_and_session(pid: int) -> tuple[int, int] | None:
    """``(parent, session)`` from ``/proc/PID/stat``; None when it cannot be read."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError as e:
        _check_descriptors(e)
        return None
    # "pid (comm) state ppid pgrp session ...": comm may hold spaces and parentheses; the last
    # ")" ends it.
    try:
        fields = stat[stat.rindex(b")") + 2 :].split()
        return int(fields[1]), int(fields[3])
    except (ValueError, IndexError):
        return None


def parent_of(pid: int) -> int | None:
    found = parent_and_session(pid)
    return None if found is None else found[0]


def session_of(pid: int) -> int | None:
    if sys.platform == "win32":  # no sessions there (and no /proc: never asked)
        return None
    try:
        return os.getsid(pid)
    except OSError:
        return None


def is_tool(pid: int) -> bool:
    """The process was started with the tool marker (unreadable: not known to be one)."""
    try:
        with open(f"{PROC}/{pid}/environ", "rb") as f:
            environ = f.read()
    except OSError as e:
        _check_descriptors(e)
        return False
    return any(v.split(b"=", 1)[0] == TOOL_MARKER.encode() for v in environ.split(b"\0"))


def tool_on_chain(pid: int, bridge_pid: int, gone_is_tool: bool = False) -> int | None:
    """The first process from ``pid`` up to (not including) the bridge that is a tool: one
    started with the tool marker, or the bridge's child on the chain when that child is in a
    session other than the bridge's (an orphan the bridge adopted; see the module docstring).

    ``gone_is_tool``: a process on the chain that is gone by the time it is read counts as a
    tool's (fail closed), for the chain of a process found holding the socket. Why: a tool's
    process could exit (and be reaped) between the scan that found it and this walk, or an
    ancestor of it between two steps, and the walk then ended as if at init (attack9)."""
    bridge_session = session_of(bridge_pid)
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1 or current == bridge_pid:
            return None
        if is_tool(current):
            return current
        found = parent_and_session(current)
        if found is None:
            return current if gone_is_tool else None
        parent, session = found
        if parent == bridge_pid and bridge_session is not None and session != bridge_session:
            return current  # not the bridge's own: a tool's orphan it adopted
        current = parent
    return pid  # a chain this deep is not a desktop's: refuse


# Out of descriptors (a flood of idle connections the listeners are still evicting), the lookup
# cannot open /proc or its netlink socket and finds nobody. That is no answer: an inconclusive
# lookup is tried again for a while, and only then refused (fail closed). The kernel's own "no
# such socket" is an answer at once. About 5 s in all: on a loaded machine the listeners take
# seconds to evict the flood (1.55 s was too short once under CI load).
LOOKUP_RETRY_S = (0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.5)


def find_peer(
    peer_port: int,
    server_port: int,
    bridge_pid: int | None = None,
    peer_ip: str = "127.0.0.1",
    server_ip: str = "127.0.0.1",
) -> Peer:
    """Who is at the other end of the control connection from ``peer_ip:peer_port``.
    Blocking: call it in a worker."""
    peer, sure = _find_peer_once(peer_port, server_port, bridge_pid, peer_ip, server_ip)
    for pause in LOOKUP_RETRY_S:
        if sure:
            break
        time.sleep(pause)
        peer, sure = _find_peer_once(peer_port, server_port, bridge_pid, peer_ip, server_ip)
    return peer


def _find_peer_once(
    peer_port: int,
    server_port: int,
    bridge_pid: int | None,
    peer_ip: str,
    server_ip: str,
) -> tuple[Peer, bool]:
    """One lookup, and whether it is an answer (False: nothing could be read, try again)."""
    if not sys.platform.startswith("linux"):
        return Peer(checked=False, pid=None), True
    me = os.getpid() if bridge_pid is None else bridge_pid
    inode = diag_inode((peer_ip, peer_port), (server_ip, server_port))
    if inode == 0:
        return Peer(checked=True, pid=None, hidden_tool=True), True  # the kernel: no such socket
    if inode is None:
        inode = client_socket_inode(peer_port, server_port)
    if not inode:
        return Peer(checked=True, pid=None, hidden_tool=True), False
    try:
        pids, unreadable = pids_holding(inode, me)
        if not pids:
            # Someone we may not inspect: another user, a parent user namespace, or a process
            # that hid itself (non-dumpable). Only a tool's descendant is refused, and that
            # chain is ours.
            hidden = any(tool_on_chain(pid, me) is not None for pid in unreadable)
            return Peer(checked=True, pid=None, hidden_tool=hidden), bool(unreadable)
        for pid in pids:
            tool = tool_on_chain(pid, me, gone_is_tool=True)
            if tool is not None:
                return Peer(checked=True, pid=pid, tool_pid=tool), True
    except OutOfDescriptors:
        return Peer(checked=True, pid=None, hidden_tool=True), False  # no answer: again
    return Peer(checked=True, pid=pids[0]), True

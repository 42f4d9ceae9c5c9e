"""The in-memory session table: 64 entries at most, 24 h idle TTL, least-recently-seen eviction.

Sessions are not credentials (every request is authenticated on its own); they attribute calls
to a client and carry what the tray shows as "live sessions". When the table is full, the
session evicted is the least recently seen one *of the machine holding the most*: one machine
opening sessions in a loop evicts its own, never another machine's (machines are isolated from
each other: a revoke, a rotation or a flood on one never cuts the others).
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..present.ids import sid_hash

if TYPE_CHECKING:
    from ..policy.grants import Grant

MAX_SESSIONS = 64
SESSION_TTL_S = 24 * 3600.0


@dataclass(slots=True)
class Session:
    """One MCP session: its client, its clocks, its counts, its "Allow for this session" tools."""

    sid: str
    client_name: str
    client_version: str
    created: float  # wall clock, for display
    last_seen: float  # table clock, for TTL and LRU
    last_seen_wall: float
    calls: int = 0
    pending: int = 0
    # "Allow … for this session" grants, each scoped (server.policy.grants.Grant).
    grants: list[Grant] = field(default_factory=list)
    protocol_version: str = "2025-11-25"  # negotiated in initialize, shown with the client
    sid_hash: str = ""
    one_call: bool = False  # a 2026-07-28 request: no session, so nothing "for this session"
    # The machine whose token opened it (server/machines), never what clientInfo claims; only
    # that machine's requests may use the session (and so its grants).
    machine: str = "default"

    def __post_init__(self) -> None:
        self.sid_hash = sid_hash(self.sid)

    @property
    def client(self) -> str:
        return self.client_name


class SessionTable:
    """Owned by the bridge thread; not thread-safe by design (no locks on the hot path)."""

    def __init__(
        self,
        max_sessions: int = MAX_SESSIONS,
        ttl_s: float = SESSION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self.clock = clock
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def create(
        self, client_info: object, protocol_version: str = "2025-11-25", machine: str = "default"
    ) -> tuple[Session, Session | None]:
        """A new session; returns it and the one evicted to make room, if any."""
        evicted = None
        if len(self._sessions) >= self.max_sessions:
            evicted = self._sessions.pop(self._evictable(machine))
        name, version = _client_info(client_info)
        now = self.clock()
        s = Session(secrets.token_hex(16), name, version, time.time(), now, time.time())
        s.protocol_version = protocol_version
        s.machine = machine
        self._sessions[s.sid] = s
        return s, evicted

    def _evictable(self, machine: str) -> str:
        """The session to drop for a new one of ``machine``: the least recently seen of the
        machine with the most sessions (the new one counted; ties: the newcomer's machine)."""
        counts: dict[str, int] = {machine: 1}
        for s in self._sessions.values():
            counts[s.machine] = counts.get(s.machine, 0) + 1
        most = max(counts.values())
        heaviest = machine if counts[machine] == most else max(counts, key=counts.__getitem__)
        for sid, s in self._sessions.items():  # least recently seen first
            if s.machine == heaviest:
                return sid
        return next(iter(self._sessions))  # the newcomer's machine had none: the oldest overall

    def one_call(
        self, name: str, version: str, protocol_version: str, machine: str = "default"
    ) -> Session:
        """A session for one 2026-07-28 request: attributed like any other, never stored (that
        era has no sessions), so no grant "for this session" can ride on it."""
        now = self.clock()
        s = Session(secrets.token_hex(16), name, version, time.time(), now, time.time())
        s.protocol_version = protocol_version
        s.one_call = True
        s.machine = machine
        return s

    def touch(self, sid: str, machine: str | None = None) -> Session | None:
        """The live session with its idle timer refreshed, or None (an expired one is dropped;
        one another machine opened is None too: a session id never crosses machines)."""
        s = self._sessions.get(sid)
        if s is None or (machine is not None and s.machine != machine):
            return None
        now = self.clock()
        if now - s.last_seen > self.ttl_s:
            del self._sessions[sid]
            return None
        s.last_seen = now
        s.last_seen_wall = time.time()
        self._sessions.move_to_end(sid)
        return s

    def get(self, sid: str) -> Session | None:
        return self._sessions.get(sid)

    def remove(self, sid: str) -> Session | None:
        return self._sessions.pop(sid, None)

    def all(self) -> list[Session]:
        return list(self._sessions.values())


def _client_info(info: object) -> tuple[str, str]:
    if not isinstance(info, dict):
        return "unknown", ""
    name = info.get("name")
    version = info.get("version")
    name = name[:64] if isinstance(name, str) and name.strip() else "unknown"
    version = version[:32] if isinstance(version, str) else ""
    return name, version

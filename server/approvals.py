"""Pending approvals: a prompt-tier call waits here until a human decides or something ends it.

Every wait ends with a :class:`Verdict` — approved, denied, timed out, cancelled, session ended,
paused, shutting down, or "no approver" when nobody could ever answer. Approvers (tray, control
API, terminal ``watch``, tests) attach through :meth:`ApprovalBroker.attach`, which is thread-safe;
everything else runs on the bridge thread.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Decision(enum.StrEnum):
    APPROVE = "approve"
    ALLOW_SESSION = "allow_session"
    ALLOW_ALWAYS = "allow_always"
    DENY = "deny"


class Ending(enum.StrEnum):
    """Why a wait ended; ``APPROVED`` is the only one after which the tool runs."""

    APPROVED = "approved"
    DENIED = "denied"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    DISCONNECTED = "disconnected"
    SESSION_ENDED = "session_ended"
    PAUSED = "paused"
    SHUTDOWN = "shutdown"
    NO_APPROVER = "no_approver"


@dataclass(frozen=True, slots=True)
class Verdict:
    ending: Ending
    decision: Decision | None = None
    reason: str | None = None
    rule: str | None = None  # ALLOW_ALWAYS: the rule(s) to save, one per line


@dataclass(frozen=True, slots=True)
class PendingCall:
    """What an approver sees: immutable, safe to hand to another thread."""

    id: str
    sid: str
    client: str
    tool: str
    arguments: dict[str, Any]
    summary: str
    arrived: float  # wall clock
    escalation: str | None = None  # why an allow-tier call needs a human
    proposed_rule: str | None = None  # "Always allow calls like this": one rule per line


def summarize(tool: str, args: dict[str, Any], limit: int = 80) -> str:
    """One line a human can judge at a glance, e.g. ``bash: git push origin main``."""
    main = None
    for key in ("command", "path", "pattern"):
        v = args.get(key)
        if isinstance(v, str) and v.strip():
            main = v
            break
    if main is None:
        main = json.dumps(args, ensure_ascii=False, separators=(",", ":")) if args else ""
    line = " ".join(main.split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return f"{tool}: {line}" if line else tool


class ApprovalBroker:
    def __init__(self, on_change: Callable[[], None] = lambda: None) -> None:
        self._on_change = on_change
        self._pending: dict[str, tuple[PendingCall, asyncio.Future[Verdict]]] = {}
        self._ids = itertools.count(1)
        self._approvers: dict[int, str] = {}
        self._approver_ids = itertools.count(1)
        self._lock = threading.Lock()

    # -- approvers (thread-safe) -----------------------------------------------------------

    def attach(self, name: str) -> int:
        """Register an approver; prompt-tier calls wait only while at least one is attached."""
        with self._lock:
            handle = next(self._approver_ids)
            self._approvers[handle] = name
        return handle

    def detach(self, handle: int) -> None:
        with self._lock:
            self._approvers.pop(handle, None)

    @property
    def approvers(self) -> list[str]:
        with self._lock:
            return list(self._approvers.values())

    @property
    def has_approver(self) -> bool:
        return bool(self._approvers)

    # -- bridge thread ----------------------------------------------------------------------

    def pending(self) -> list[PendingCall]:
        return [p for p, _ in self._pending.values()]

    def get(self, call_id: str) -> PendingCall | None:
        entry = self._pending.get(call_id)
        return entry[0] if entry else None

    async def wait(
        self,
        *,
        sid: str,
        client: str,
        tool: str,
        arguments: dict[str, Any],
        timeout_s: float,
        escalation: str | None = None,
        proposed_rule: str | None = None,
        on_created: Callable[[PendingCall], None] = lambda p: None,
    ) -> Verdict:
        """Hold the call until a verdict; ``timeout_s`` 0 waits forever."""
        if not self.has_approver:
            return Verdict(Ending.NO_APPROVER)
        call = PendingCall(
            id=f"a{next(self._ids)}",
            sid=sid,
            client=client,
            tool=tool,
            arguments=arguments,
            summary=summarize(tool, arguments),
            arrived=time.time(),
            escalation=escalation,
            proposed_rule=proposed_rule,
        )
        fut: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        self._pending[call.id] = (call, fut)
        on_created(call)
        self._on_change()
        try:
            if timeout_s > 0:
                return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            return await fut
        except TimeoutError:
            return Verdict(Ending.TIMEOUT)
        finally:
            if self._pending.pop(call.id, None) is not None:
                self._on_change()

    def decide(
        self, call_id: str, decision: Decision, reason: str | None = None, rule: str | None = None
    ) -> bool:
        """Apply a human decision; False when the call is no longer pending."""
        entry = self._pending.get(call_id)
        if entry is None or entry[1].done():
            return False
        ending = Ending.DENIED if decision is Decision.DENY else Ending.APPROVED
        reason = reason.strip() if isinstance(reason, str) and reason.strip() else None
        entry[1].set_result(Verdict(ending, decision, reason, rule))
        return True

    def end(self, call_id: str, ending: Ending) -> bool:
        entry = self._pending.get(call_id)
        if entry is None or entry[1].done():
            return False
        entry[1].set_result(Verdict(ending))
        return True

    def end_where(self, ending: Ending, sid: str | None = None) -> int:
        """End every pending call (of one session, when ``sid`` is given)."""
        n = 0
        for call, _ in list(self._pending.values()):
            if sid is None or call.sid == sid:
                n += self.end(call.id, ending)
        return n

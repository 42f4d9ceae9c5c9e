"""Pending approvals: a prompt-tier call waits here until a human decides or something ends it.

Every wait ends with a :class:`WaitResult` — approved, denied, timed out, cancelled, session
ended, paused, shutting down, or "no approver" when nobody could ever answer. Approvers (tray,
control API, terminal ``watch``, tests) attach through :meth:`ApprovalBroker.attach`, which is
thread-safe; everything else runs on the bridge thread.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..policy.grants import Grant
    from ..policy.paths import Escalation

from ..box.plan import BoxStatus
from ..policy.proposals import savable
from ..present.boxview import placement
from ..present.preview import build_preview, summary_of
from ..present.textsafe import hidden_in
from ..types import HumanDecision, PendingCall, UpstreamInfo

# Defined with the other vocabularies; re-exported here, where the core always imported them.
from ..vocab import ApproverKind as ApproverKind
from ..vocab import Decision as Decision

# Why a waiting call was given up for another machine's (the agent reads it as the error).
DISPLACED_TEXT = (
    "too many calls waiting for approval from this machine: "
    "another machine's call took this one's place"
)


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
    TOO_MANY = "too_many"  # the pending caps (approval.max_pending*) were reached


@dataclass(frozen=True, slots=True)
class WaitResult:
    """How one wait for a human ended: the :class:`Ending`, and for a decision its details.

    (Not :class:`server.policy.rules.Verdict`, which is what the rules say about a call.)
    """

    ending: Ending
    decision: Decision | None = None
    reason: str | None = None
    approver: str | None = None  # which UI decided ("approval page", "tray", ...)
    rule: str | None = None  # ALLOW_ALWAYS: the rule(s) to save, one per line


class ApprovalBroker:
    """The calls waiting for a human, the approvers attached, and every way a wait ends.

    Why one broker: the tray, the approval page, ``watch`` and the control API all decide the
    same pending calls; the first decision (or timeout, cancel, pause, shutdown) wins, once.
    """

    def __init__(
        self,
        on_change: Callable[[], None] = lambda: None,
        max_pending: int = 32,
        max_pending_per_session: int = 8,
        box_status: Callable[[], BoxStatus | None] = lambda: None,
        machine_known: Callable[[str], bool] = lambda name: True,
    ) -> None:
        self._on_change = on_change
        # Whether a machine still exists: a call of one revoked while the call was on its way
        # here (e.g. its diff computed in a worker) never starts waiting for a human.
        self._machine_known = machine_known
        self._box_status = box_status  # where a bash call will run (never blocks)
        # Bounds on what one agent (or all of them) can make the bridge hold in memory and
        # republish to every approver; past them a call is refused at once.
        self.max_pending = max_pending
        self.max_pending_per_session = max_pending_per_session
        self._pending: dict[str, tuple[PendingCall, asyncio.Future[WaitResult]]] = {}
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
        escalation: Escalation | None = None,
        cwd: str | None = None,
        upstream: UpstreamInfo | None = None,
        proposed_rule: str | None = None,
        grant: Grant | None = None,
        on_created: Callable[[PendingCall], None] = lambda p: None,
        machine: str = "default",
        context: dict[str, Any] | None = None,
    ) -> WaitResult:
        """Hold the call until the wait ends; ``timeout_s`` 0 waits forever.

        ``context``: safe, bounded fields the pipeline computed for the human (``change``:
        the diff of a write/edit; ``risks``: risk cues; ``no_rule``: why no "Always allow"),
        added to the call's preview."""
        if not self.has_approver:
            return WaitResult(Ending.NO_APPROVER)
        if not self._machine_known(machine):
            return WaitResult(Ending.SESSION_ENDED)  # revoked since its request was checked
        live = [p for p, f in self._pending.values() if not f.done()]
        if sum(1 for p in live if p.sid == sid) >= self.max_pending_per_session:
            return WaitResult(Ending.TOO_MANY)
        if len(live) >= self.max_pending:
            displaced = self._displaceable(live, machine)
            if displaced is None:
                return WaitResult(Ending.TOO_MANY)
            self._end(displaced.id, WaitResult(Ending.TOO_MANY, reason=DISPLACED_TEXT))
        now = time.time()
        summary = summary_of(tool, arguments)
        preview = build_preview(tool, arguments, cwd)
        preview.update(context or {})
        unsavable = None if not proposed_rule else savable(proposed_rule)
        if unsavable is not None:
            preview["no_rule"] = f"the rule would not be saved: {unsavable}"
        call = PendingCall(
            id=f"a{next(self._ids)}",
            sid=sid,
            client=client,
            tool=tool,
            arguments=arguments,
            summary=summary.text,
            arrived=now,
            escalation=escalation,
            deadline=now + timeout_s if timeout_s > 0 else None,
            preview=preview,
            # Every argument, keys and values at any depth: a U+202E in an argument no preview
            # shows still warns (the client, escalation and upstream text: preview.call_hidden).
            hidden=summary.hidden or bool(preview.get("hidden")) or hidden_in(arguments),
            upstream=upstream,
            box=placement(tool, arguments, self._box_status()),
            # Whatever proposed it, a rule that may not be saved is never offered to any UI.
            proposed_rule=proposed_rule if proposed_rule and unsavable is None else None,
            grant=grant,
            machine=machine,
        )
        fut: asyncio.Future[WaitResult] = asyncio.get_running_loop().create_future()
        self._pending[call.id] = (call, fut)
        on_created(call)
        self._on_change()
        try:
            if timeout_s > 0:
                return await asyncio.wait_for(asyncio.shield(fut), timeout_s)
            return await fut
        except TimeoutError:
            return WaitResult(Ending.TIMEOUT)
        finally:
            if self._pending.pop(call.id, None) is not None:
                self._on_change()

    @staticmethod
    def _displaceable(live: list[PendingCall], machine: str) -> PendingCall | None:
        """The queue is full: the waiting call a call of ``machine`` takes the place of, or
        None when it is refused itself.

        The sessions table's fairness, for the queue: the call given up is the newest of the
        machine holding the most waiting calls (the new one counted; ties: the newcomer's
        machine, so it is refused). One machine's agent may fill the whole queue while it is
        alone, but never keeps another machine's call from reaching the human: each one that
        arrives takes a place from the flood, down to an even share. The newest is given up
        (not the oldest), as the human is least likely to be reading it yet.
        """
        counts: dict[str, int] = {machine: 1}
        for p in live:
            counts[p.machine] = counts.get(p.machine, 0) + 1
        most = max(counts.values())
        if counts[machine] == most:
            return None
        heaviest = max(counts, key=counts.__getitem__)
        return next(p for p in reversed(live) if p.machine == heaviest)

    def _end(self, call_id: str, result: WaitResult) -> bool:
        entry = self._pending.get(call_id)
        if entry is None or entry[1].done():
            return False
        entry[1].set_result(result)
        return True

    def decide(self, d: HumanDecision) -> bool:
        """Apply a human decision; False when the call is no longer pending."""
        entry = self._pending.get(d.call_id)
        if entry is None or entry[1].done():
            return False
        ending = Ending.DENIED if d.decision is Decision.DENY else Ending.APPROVED
        reason = d.reason.strip() if isinstance(d.reason, str) and d.reason.strip() else None
        result = WaitResult(ending, d.decision, reason, approver=d.approver, rule=d.rule)
        entry[1].set_result(result)
        return True

    def end(self, call_id: str, ending: Ending) -> bool:
        return self._end(call_id, WaitResult(ending))

    def end_where(self, ending: Ending, sid: str | None = None, machine: str | None = None) -> int:
        """End every pending call (of one session, when ``sid`` is given; of one machine,
        when ``machine`` is: whatever carries its calls, a session, a sessionless 2026-07-28
        call or a task, a revoked machine's calls never wait on for a human's approval)."""
        n = 0
        for call, _ in list(self._pending.values()):
            if (sid is None or call.sid == sid) and (machine is None or call.machine == machine):
                n += self.end(call.id, ending)
        return n

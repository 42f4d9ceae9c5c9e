"""server/core/approvals.py: the broker and PendingCall on a private event loop (no bridge, no
HTTP).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from omp_a2a_bridge.server.core.approvals import (
    DISPLACED_TEXT,
    ApprovalBroker,
    Decision,
    Ending,
    PendingCall,
    WaitResult,
)
from omp_a2a_bridge.server.types import HumanDecision


class JumpLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock can be moved forward: every timer due by then fires."""

    def __init__(self) -> None:
        super().__init__()
        self.offset = 0.0

    def time(self) -> float:
        return super().time() + self.offset


class Broker(ApprovalBroker):
    """The broker, recording how many calls were pending at each change it announced."""

    def __init__(self, **kw: Any) -> None:
        self.changes: list[int] = []
        super().__init__(on_change=lambda: self.changes.append(len(self.pending())), **kw)


def run(body: Callable[[Broker, JumpLoop], Awaitable[Any]], **broker: Any) -> Any:
    loop = JumpLoop()
    try:
        return loop.run_until_complete(body(Broker(**broker), loop))
    finally:
        loop.close()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def wait(b: ApprovalBroker, sid: str = "s1", timeout_s: float = 30, **kw: Any) -> asyncio.Task:
    args = kw.pop("arguments", {"command": "echo hi"})
    return asyncio.ensure_future(
        b.wait(sid=sid, client="c", tool="bash", arguments=args, timeout_s=timeout_s, **kw)
    )


def test_no_approver_answers_at_once_and_holds_nothing():
    async def body(b, loop):
        verdict = await wait(b)
        assert verdict == WaitResult(Ending.NO_APPROVER)
        assert b.pending() == [] and b.changes == []

    run(body)


def test_a_pending_call_carries_what_the_approver_sees_and_approve_ends_it():
    async def body(b, loop):
        b.attach("tray")
        seen: list[PendingCall] = []
        t = wait(b, on_created=seen.append, proposed_rule="bash(echo *)")
        await settle()
        [p] = b.pending()
        assert seen == [p] and b.get(p.id) is p
        assert (p.sid, p.client, p.tool, p.arguments) == ("s1", "c", "bash", {"command": "echo hi"})
        assert p.summary == "bash: echo hi"
        assert p.deadline is not None and p.deadline - p.arrived == pytest.approx(30)
        assert p.proposed_rule == "bash(echo *)" and p.hidden is False
        assert b.decide(HumanDecision(p.id, Decision.APPROVE, approver="tray")) is True
        verdict = await t
        assert verdict == WaitResult(Ending.APPROVED, Decision.APPROVE, approver="tray")
        assert b.pending() == [] and b.get(p.id) is None
        assert b.changes == [1, 0]  # one change when it arrived, one when it left
        assert b.decide(HumanDecision(p.id, Decision.DENY)) is False  # no longer pending

    run(body)


@pytest.mark.parametrize(
    ("reason", "kept"), [("  not now \n", "not now"), ("   ", None), (None, None), (5, None)]
)
def test_deny_keeps_a_stripped_reason_only(reason, kept):
    async def body(b, loop):
        b.attach("x")
        t = wait(b)
        await settle()
        [p] = b.pending()
        assert b.decide(HumanDecision(p.id, Decision.DENY, reason=reason)) is True
        v = await t
        assert (v.ending, v.decision, v.reason) == (Ending.DENIED, Decision.DENY, kept)

    run(body)


def test_every_approving_decision_runs_and_carries_its_rule():
    async def body(b, loop):
        b.attach("x")
        for decision in (Decision.APPROVE, Decision.ALLOW_SESSION, Decision.ALLOW_ALWAYS):
            t = wait(b)
            await settle()
            [p] = b.pending()
            b.decide(HumanDecision(p.id, decision, rule="bash(echo *)"))
            v = await t
            assert (v.ending, v.decision, v.rule) == (Ending.APPROVED, decision, "bash(echo *)")

    run(body)


def test_timeout_fires_when_the_clock_passes_the_deadline():
    async def body(b, loop):
        b.attach("x")
        t = wait(b, timeout_s=30)
        await settle()
        assert not t.done()
        loop.offset += 31
        assert await asyncio.wait_for(t, 5) == WaitResult(Ending.TIMEOUT)
        assert b.pending() == []

    run(body)


def test_timeout_zero_arms_no_timer_at_all():
    """0 means "until decided": a clock a year ahead fires nothing."""

    async def body(b, loop):
        b.attach("x")
        t = wait(b, timeout_s=0)
        await settle()
        [p] = b.pending()
        assert p.deadline is None
        loop.offset += 365 * 24 * 3600
        await asyncio.sleep(0.01)  # the loop runs every timer due by its (jumped) clock
        await settle()
        assert not t.done() and b.pending() == [p]
        b.decide(HumanDecision(p.id, Decision.APPROVE))
        assert (await t).ending is Ending.APPROVED

    run(body)


def test_end_and_end_where_end_only_what_they_name():
    async def body(b, loop):
        b.attach("x")
        t1, t2, t3 = wait(b, "s1"), wait(b, "s1"), wait(b, "s2")
        await settle()
        p1, _p2, p3 = b.pending()
        assert b.end(p1.id, Ending.CANCELLED) is True
        assert b.end(p1.id, Ending.DISCONNECTED) is False  # the first ending wins
        assert (await t1).ending is Ending.CANCELLED
        assert b.end_where(Ending.SESSION_ENDED, "s1") == 1
        assert (await t2).ending is Ending.SESSION_ENDED
        assert not t3.done() and b.pending() == [p3]
        assert b.end_where(Ending.SHUTDOWN) == 1
        assert (await t3).ending is Ending.SHUTDOWN
        assert b.end("a999", Ending.CANCELLED) is False

    run(body)


def test_end_where_a_machine_ends_its_calls_whatever_session_carries_them():
    async def body(b, loop):
        b.attach("x")
        t1, t2 = wait(b, "s1", machine="laptop"), wait(b, "one-call", machine="laptop")
        t3 = wait(b, "s2", machine="desk")
        await settle()
        assert b.end_where(Ending.SESSION_ENDED, machine="laptop") == 2
        assert (await t1).ending is (await t2).ending is Ending.SESSION_ENDED
        assert not t3.done() and [p.machine for p in b.pending()] == ["desk"]
        b.end_where(Ending.SHUTDOWN)
        await t3

    run(body)


def test_a_call_of_a_machine_revoked_on_its_way_never_waits():
    known = {"default", "desk"}

    async def body(b, loop):
        b.attach("x")
        assert await wait(b, machine="laptop") == WaitResult(Ending.SESSION_ENDED)
        assert b.pending() == [] and b.changes == []

    run(body, machine_known=lambda name: name in known)


def test_decide_after_an_ending_is_refused():
    async def body(b, loop):
        b.attach("x")
        t = wait(b)
        await settle()
        [p] = b.pending()
        b.end(p.id, Ending.PAUSED)
        assert b.decide(HumanDecision(p.id, Decision.APPROVE)) is False  # ended before it left
        assert (await t).ending is Ending.PAUSED

    run(body)


def test_pending_caps_refuse_at_once():
    async def body(b, loop):
        b.attach("x")
        held = [wait(b, "s1") for _ in range(2)] + [wait(b, "s2")]
        await settle()
        assert len(b.pending()) == 3
        assert await wait(b, "s1") == WaitResult(Ending.TOO_MANY)  # 2 per session
        assert await wait(b, "s3") == WaitResult(Ending.TOO_MANY)  # 3 in all
        b.end_where(Ending.SHUTDOWN)
        await asyncio.gather(*held)

    run(body, max_pending=3, max_pending_per_session=2)


def test_a_full_queue_gives_the_flooding_machines_newest_call_up_for_another_machines():
    async def body(b, loop):
        b.attach("x")
        flood = [wait(b, f"f{i}", machine="default") for i in range(4)]
        await settle()
        assert len(b.pending()) == 4  # alone, one machine may fill the whole queue
        newest = b.pending()[-1]
        assert await wait(b, "f9", machine="default") == WaitResult(Ending.TOO_MANY)
        laptop = [wait(b, "l1", machine="laptop")]
        await settle()
        given_up = await flood[-1]  # the flood's newest call, not the one the human may read
        assert given_up == WaitResult(Ending.TOO_MANY, reason=DISPLACED_TEXT)
        assert newest.id not in [p.id for p in b.pending()]
        assert [p.machine for p in b.pending()] == ["default"] * 3 + ["laptop"]
        laptop.append(wait(b, "l2", machine="laptop"))  # down to an even share
        await settle()
        assert (await flood[-2]).reason == DISPLACED_TEXT
        assert [p.machine for p in b.pending()].count("laptop") == 2
        # An even share reached: the newcomer's machine holds as many as any: refused itself.
        assert await wait(b, "l3", machine="laptop") == WaitResult(Ending.TOO_MANY)
        assert await wait(b, "f8", machine="default") == WaitResult(Ending.TOO_MANY)
        assert len(b.pending()) == 4
        b.end_where(Ending.SHUTDOWN)
        await asyncio.gather(*flood, *laptop)

    run(body, max_pending=4, max_pending_per_session=2)


def test_a_cancelled_waiter_leaves_no_pending_call_behind():
    async def body(b, loop):
        b.attach("x")
        t = wait(b)
        await settle()
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        assert b.pending() == [] and b.changes == [1, 0]

    run(body)


def test_approvers_attach_and_detach():
    b = ApprovalBroker()
    assert not b.has_approver and b.approvers == []
    h1, h2 = b.attach("tray"), b.attach("approval page")
    assert h1 != h2 and b.approvers == ["tray", "approval page"] and b.has_approver
    b.detach(h1)
    b.detach(h1)  # twice is harmless
    assert b.approvers == ["approval page"]
    b.detach(h2)
    assert not b.has_approver


def test_hidden_characters_are_flagged_and_the_summary_is_escaped():
    async def body(b, loop):
        b.attach("x")
        t = wait(b, arguments={"command": "ls \u202e; rm -rf ~"})
        await settle()
        [p] = b.pending()
        assert p.hidden is True and "\u202e" not in p.summary and "\\u202e" in p.summary
        b.end_where(Ending.SHUTDOWN)
        await t

    run(body)

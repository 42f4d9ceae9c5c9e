"""server/core/inflight.py: the four ways a held call ends early, on a private event loop with
the real :class:`ApprovalBroker` (no bridge, no HTTP).

Why: each path must end the right thing (the pending approval, or the running task, or nothing)
and answer the held POST at most once, with a bare 202; the end-to-end cancel tests
(``tests/integration/test_approval_endings.py``,
``tests/integration/test_protocol_versions_and_bodies.py``) show the wire side.
"""

from __future__ import annotations

import asyncio
from typing import Any

from omp_a2a_bridge.server.core.approvals import ApprovalBroker, Ending
from omp_a2a_bridge.server.core.inflight import CallHandle, InFlight
from omp_a2a_bridge.server.mcp.protocol import Reply


def held(inflight: InFlight, broker: ApprovalBroker, sid: str, req_id: Any):
    """A call waiting for approval, registered as the pipeline does; returns (handle, task,
    answers)."""
    handle = CallHandle()
    answers: list[Reply] = []
    handle.answer = answers.append

    async def call() -> Ending:
        with inflight.holding(sid, req_id, handle):
            v = await broker.wait(
                sid=sid,
                client="c",
                tool="bash",
                arguments={"command": "ls"},
                timeout_s=0,
                on_created=lambda p: setattr(handle, "pending_id", p.id),
            )
        return v.ending

    return handle, asyncio.ensure_future(call()), answers


def run(coro_fn) -> Any:
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro_fn())
    finally:
        loop.close()


def setup() -> tuple[ApprovalBroker, InFlight]:
    broker = ApprovalBroker()
    broker.attach("test")
    return broker, InFlight(broker)


def test_cancel_ends_the_pending_approval_and_answers_once():
    async def go():
        broker, inflight = setup()
        handle, task, answers = held(inflight, broker, "s1", 7)
        await asyncio.sleep(0)
        assert len(inflight) == 1 and handle.pending_id is not None
        assert not inflight.cancel("s2", {"requestId": 7})  # another session's id: nothing
        assert not inflight.cancel("s1", {"requestId": [7]})  # unhashable: names nothing
        assert not inflight.cancel("s1", "junk")
        assert inflight.cancel("s1", {"requestId": 7})
        assert not inflight.cancel("s1", {"requestId": 7})  # once
        assert await task is Ending.CANCELLED
        assert [a.status for a in answers] == [202]
        assert len(inflight) == 0  # unregistered when the call ended

    run(go)


def test_cancel_of_a_running_tool_cancels_its_task():
    async def go():
        _, inflight = setup()
        handle = CallHandle()
        task = asyncio.ensure_future(asyncio.sleep(30))
        handle.task = task
        with inflight.holding("s", 1, handle):
            assert inflight.cancel("s", {"requestId": 1})
        await asyncio.sleep(0)
        assert task.cancelled() and handle.cancelled

    run(go)


def test_delete_ends_only_that_sessions_waiting_calls():
    async def go():
        broker, inflight = setup()
        _, t1, a1 = held(inflight, broker, "s1", 1)
        h2, t2, a2 = held(inflight, broker, "s2", 1)
        await asyncio.sleep(0)
        inflight.end_held("s1")
        assert await t1 is Ending.CANCELLED and [a.status for a in a1] == [202]
        assert not t2.done() and a2 == [] and not h2.cancelled
        broker.end(h2.pending_id or "", Ending.SHUTDOWN)
        assert await t2 is Ending.SHUTDOWN

    run(go)


def test_a_hang_up_withdraws_a_wait_but_lets_a_tool_finish_unless_upstream():
    async def go():
        broker, inflight = setup()
        handle, task, answers = held(inflight, broker, "s", 1)
        await asyncio.sleep(0)
        inflight.disconnected(handle)
        assert await task is Ending.DISCONNECTED and answers == []
        running = CallHandle(task=asyncio.ensure_future(asyncio.sleep(30)))
        inflight.disconnected(running)  # a built-in tool keeps running
        await asyncio.sleep(0)
        assert running.task is not None and not running.task.cancelled()
        upstream = CallHandle(task=running.task, cancel_on_disconnect=True)
        inflight.disconnected(upstream)
        await asyncio.sleep(0)
        assert running.task.cancelled() and upstream.cancelled
        assert len(inflight) == 0

    run(go)


def test_shutdown_cancels_every_running_tool_and_a_reused_id_is_not_registered():
    async def go():
        _, inflight = setup()
        a = CallHandle(task=asyncio.ensure_future(asyncio.sleep(30)))
        b = CallHandle(task=asyncio.ensure_future(asyncio.sleep(30)))
        c = CallHandle(task=asyncio.ensure_future(asyncio.sleep(30)))
        with (
            inflight.holding("s", 1, a),
            inflight.holding("s", 1, b),
            inflight.holding("s", None, c),
        ):
            assert len(inflight) == 1  # the second use of id 1 and the id-less call: not held
            # A cancel naming id 1 finds the call that holds it, and only that one.
            assert inflight.cancel("s", {"requestId": 1}) and a.cancelled and not b.cancelled
            inflight.cancel_running()
        await asyncio.sleep(0)
        # The shutdown cancels every running tool, held under a request id or not.
        for h in (a, b, c):
            assert h.task is not None and h.task.cancelled()
        assert len(inflight) == 0

    run(go)

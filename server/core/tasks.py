"""Tasks for long approvals (the 2026-07-28 Tasks extension, ``io.modelcontextprotocol/tasks``).

A modern client that declares the extension does not have to hold an HTTP request open while a
human decides: a ``tools/call`` that must wait for a human answers at once with a task
(``resultType: "task"``), which the client polls with ``tasks/get`` (or waits on with
``tasks/result``) and may withdraw with ``tasks/cancel``. Everything else about the call is the
same pipeline: the approval, the rules, the audit. A call that needs no human answers as usual.

Why a table of its own: a task outlives its request, so something must own it, bound how many
exist, and forget them; none of that belongs to the pipeline. A task never outlives the
approval's timeout by more than :data:`KEEP_DONE_S`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..mcp.modern import INVALID_PARAMS, decorate_body, error_reply, server_meta
from ..mcp.protocol import Reply, result_body
from ..mcp.sessions import Session
from .inflight import CallHandle

MAX_TASKS = 64  # past this, a call waits in its request as in the 2025 era
KEEP_DONE_S = 60.0  # how long a finished task's result can still be fetched
POLL_INTERVAL_MS = 1000

_STATUS_TEXT = {
    "working": "waiting for a human to approve the call",
    "completed": "the call ran",
    "failed": "the call failed",
    "cancelled": "the call was cancelled",
}


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


ToolsCall = Callable[[Session, Any, Any, CallHandle | None], Reply | Coroutine[Any, Any, Reply]]


class TaskHandle(CallHandle):
    """A call handle that says when the call starts waiting for a human."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        super().__init__()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if name == "pending_id" and value is not None:
            self.waiting.set()


@dataclass(slots=True)
class Task:
    id: str
    handle: TaskHandle
    job: asyncio.Future[Reply]
    created: float
    created_wall: float = field(default_factory=time.time)
    updated_wall: float = field(default_factory=time.time)
    done_at: float | None = None
    status: str = "working"  # working, completed, cancelled, failed
    result: Any = None  # the call's result object (or error) once done
    waiters: list[asyncio.Future[None]] = field(default_factory=list)
    machine: str = "default"  # whose token started it: no other machine may read or cancel it


class TaskTable:
    """The live tasks of the bridge (on the bridge loop; no locks)."""

    def __init__(self, version: str, end_early: Callable[[CallHandle], None]) -> None:
        self.version = version
        self.end_early = end_early  # InFlight.end_early: the one client-side cancel
        self.tasks: dict[str, Task] = {}

    def __len__(self) -> int:
        return len(self.tasks)

    async def call(
        self, tools_call: ToolsCall, session: Session, req_id: Any, params: Any
    ) -> Reply:
        """Run a tools/call; if it comes to wait for a human, answer with a task instead."""
        self._forget_old()
        handle = TaskHandle()
        started = tools_call(session, req_id, params, handle)
        if isinstance(started, Reply):
            return started
        job = asyncio.ensure_future(started)
        if len(self.tasks) >= MAX_TASKS:
            return await job
        waiting = asyncio.ensure_future(handle.waiting.wait())
        await asyncio.wait({job, waiting}, return_when=asyncio.FIRST_COMPLETED)
        if job.done():
            waiting.cancel()
            return job.result()
        waiting.cancel()
        task = Task(secrets.token_hex(16), handle, job, time.monotonic())
        task.machine = session.machine
        self.tasks[task.id] = task
        job.add_done_callback(lambda _: self._finished(task))
        return Reply(200, result_body(req_id, self._view(task, "task")))

    def request(
        self, method: str, req_id: Any, params: Any, machine: str | None = None
    ) -> Reply | Coroutine[Any, Any, Reply]:
        """``tasks/get``, ``tasks/result`` and ``tasks/cancel``; with ``machine``, only a task
        that machine started (another's is as unknown as an expired one)."""
        self._forget_old()
        task_id = params.get("taskId") if isinstance(params, dict) else None
        task = self.tasks.get(task_id) if isinstance(task_id, str) else None
        if task is None or (machine is not None and task.machine != machine):
            return error_reply(req_id, INVALID_PARAMS, "unknown or expired taskId")
        if method == "tasks/get":
            return Reply(200, result_body(req_id, self._view(task, "complete")))
        if method == "tasks/cancel":
            self._cancel(task)
            return Reply(200, result_body(req_id, self._view(task, "complete")))
        return self._result(task, req_id)

    async def _result(self, task: Task, req_id: Any) -> Reply:
        """``tasks/result``: the call's own answer once it is final (held until then)."""
        if task.status == "working":
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            task.waiters.append(waiter)
            await waiter
        if isinstance(task.result, dict) and "error" in task.result:
            err = task.result["error"]
            return error_reply(req_id, err.get("code", -32603), err.get("message", ""))
        result = task.result.get("result") if isinstance(task.result, dict) else None
        if result is None:
            return error_reply(req_id, -32800, "task cancelled")
        return Reply(200, decorate_body(result_body(req_id, result), self.version))

    def _cancel(self, task: Task) -> None:
        """Withdraw the approval (audited as cancelled) or stop the running tool."""
        if task.status == "working":
            self.end_early(task.handle)

    def _finished(self, task: Task) -> None:
        task.done_at = time.monotonic()
        task.updated_wall = time.time()
        reply = None if task.job.cancelled() else task.job.result()
        if reply is None or reply.status == 202 or not reply.body:
            task.status, task.result = "cancelled", None
        else:
            task.result = json.loads(reply.body)
            task.status = "failed" if "error" in task.result else "completed"
            if task.handle.cancelled and task.status == "failed":
                task.status = "cancelled"
        for waiter in task.waiters:
            if not waiter.done():
                waiter.set_result(None)
        task.waiters.clear()

    def _view(self, task: Task, result_type: str) -> dict[str, Any]:
        view: dict[str, Any] = {
            "resultType": result_type,
            "taskId": task.id,
            "status": task.status,
            "statusMessage": _STATUS_TEXT[task.status],
            "createdAt": _iso(task.created_wall),
            "lastUpdatedAt": _iso(task.updated_wall),
            "ttlMs": int(KEEP_DONE_S * 1000),
            "pollIntervalMs": POLL_INTERVAL_MS,
            "_meta": server_meta(self.version),
        }
        if task.status == "completed" and isinstance(task.result, dict):
            view["result"] = task.result.get("result")
        return view

    def _forget_old(self) -> None:
        now = time.monotonic()
        for task_id, task in list(self.tasks.items()):
            if task.done_at is not None and now - task.done_at > KEEP_DONE_S:
                del self.tasks[task_id]

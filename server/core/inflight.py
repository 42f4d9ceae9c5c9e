"""The calls in flight and every way one ends early: :class:`InFlight`.

Why one table: a held ``tools/call`` can end before its tool does in four ways — the client's
``notifications/cancelled``, the client's ``DELETE`` of its session, the client hanging up,
and the bridge's shutdown. Each must find the call's :class:`CallHandle`, end a pending
approval or cancel the running task, and answer the held POST at most once. These used to be
spread over the HTTP layer, the pipeline and the bridge; here they sit side by side, so the
rules they share (a cancelled call is answered with a bare ``202``; disconnection is not
cancellation, except for upstream calls) are read in one place.

Everything here runs on the bridge's event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..mcp.protocol import Reply
from .approvals import ApprovalBroker, Ending


@dataclass(slots=True)
class CallHandle:
    """A tools/call in flight, so a cancel or a disconnect can find and end it."""

    pending_id: str | None = None
    task: asyncio.Task[Any] | None = None  # set while the tool runs
    cancelled: bool = False
    cancel_on_disconnect: bool = False  # set while a tool runs that wants it (upstream calls)
    answer: Callable[[Reply], None] | None = None  # the HTTP layer's writer for this call
    machine: str | None = None  # whose token made the call (a revoke cancels its tools)


class InFlight:
    """The held calls by ``(session id, request id)``, and the four ways one ends early."""

    def __init__(self, broker: ApprovalBroker) -> None:
        self.broker = broker
        self._calls: dict[tuple[str, Any], CallHandle] = {}
        # Every call in flight, registered under its request id or not (no id, a reused id):
        # the one list of "everything running", so a revoke and the shutdown cancel every
        # tool whatever ids its client chose.
        self._live: dict[int, CallHandle] = {}

    def __len__(self) -> int:
        return len(self._calls)

    @contextmanager
    def holding(self, sid: str, req_id: Any, handle: CallHandle) -> Iterator[None]:
        """While a call waits or runs, a cancel naming its request id finds it. A call with
        no id, or whose id is already held (a client reusing ids), is not registered."""
        key = (sid, req_id)
        registered = req_id is not None and key not in self._calls
        if registered:
            self._calls[key] = handle
        self._live[id(handle)] = handle
        try:
            yield
        finally:
            self._live.pop(id(handle), None)
            if registered:
                self._calls.pop(key, None)

    def cancel(self, sid: str, params: Any) -> bool:
        """``notifications/cancelled``: end the named call of this session; True when there
        was one to end."""
        if not isinstance(params, dict) or "requestId" not in params:
            return False
        try:
            handle = self._calls.get((sid, params["requestId"]))
        except TypeError:  # an unhashable requestId names nothing
            return False
        if handle is None or handle.cancelled:
            return False
        self.end_early(handle)
        if handle.answer is not None:
            # The held POST ends now, before the notification's own 202: a client that tears
            # down right after its timeout (the official SDKs do) finds nothing still open.
            handle.answer(Reply(202))
        return True

    def end_early(self, handle: CallHandle) -> None:
        """The client gave the call up: withdraw its approval (audited as cancelled) or
        cancel its running tool. The one step every client-side cancel shares."""
        handle.cancelled = True
        if handle.pending_id is not None:
            self.broker.end(handle.pending_id, Ending.CANCELLED)
        elif handle.task is not None:
            handle.task.cancel()

    def end_held(self, sid: str) -> None:
        """A ``DELETE`` of the session: its calls still waiting for approval end with a bare
        ``202`` each (see :meth:`server.core.bridge.Bridge.end_held_calls` for why)."""
        for (owner, _), handle in list(self._calls.items()):
            if owner == sid and handle.pending_id is not None and not handle.cancelled:
                handle.cancelled = True
                self.broker.end(handle.pending_id, Ending.CANCELLED)
                if handle.answer is not None:
                    handle.answer(Reply(202))

    def disconnected(self, handle: CallHandle) -> None:
        """The client hung up while its call was held: withdraw a pending approval.

        A tool that is already running is left to finish (disconnection is not cancellation in
        MCP); its result and audit record still land. An upstream call is the exception: the
        upstream is told it was cancelled.
        """
        if handle.pending_id is not None:
            self.broker.end(handle.pending_id, Ending.DISCONNECTED)
        elif handle.cancel_on_disconnect and handle.task is not None and not handle.cancelled:
            handle.cancelled = True
            handle.task.cancel()

    def cancel_machine(self, machine: str) -> int:
        """The machine was revoked: cancel every tool it still has running (its waiting calls
        are ended by the broker). Returns how many were cancelled."""
        n = 0
        for handle in list(self._live.values()):
            if handle.machine == machine and handle.task is not None and not handle.cancelled:
                handle.cancelled = True
                handle.task.cancel()
                n += 1
        return n

    def cancel_running(self) -> None:
        """The shutdown's grace period is over: cancel every tool still running.

        From ``_live``, not ``_calls``: a call with no request id, or whose client reused an id
        still held, is only in ``_live``; left out, its tool outlived the stop (and its done
        record came after the audit had closed)."""
        for handle in list(self._live.values()):
            if handle.task is not None:
                handle.task.cancel()

"""How a tools/call ends: the :class:`Outcome` record, and the words the agent gets for every
refusal.

Every text here is what an agent reads instead of a result, so each one says what it can do
next; the :class:`Outcome` carries the same ending to the audit log (``outcome``,
``decided_by``, ``reason``, ``approver``, ``rule``). :func:`safe_body` turns a result into a
reply body that always encodes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..mcp.protocol import INTERNAL_ERROR, REQUEST_CANCELLED, error_body, result_body
from ..policy.paths import Escalation, EscalationKind
from ..tools.base import ToolResult
from ..vocab import CallOutcome, DecidedBy
from .approvals import Ending, WaitResult

log = logging.getLogger(__name__)

PAUSED_TEXT = "bridge paused by the user"
NO_APPROVER_TEXT = (
    "approval required but no approver is available: the user must open the tray, "
    "the approval page or `a2a-bridge watch`"
)
SHUTDOWN_TEXT = "bridge shutting down"
SESSION_ENDED_TEXT = "session ended before the call was approved"
TOO_MANY_TEXT = "too many calls waiting for approval"
DISCONNECTED_TEXT = "client disconnected before the call was approved"


@dataclass(slots=True)
class Outcome:
    """How one tools/call ended: its result (None: cancelled), the audit outcome, who decided.

    Why one record: the pipeline's every exit (refused, denied, ran, cancelled) becomes the same
    shape, so the reply and the audit's done record are written in one place.
    """

    result: ToolResult | None  # None: cancelled (202 if by the client, else a -32800 error)
    outcome: CallOutcome
    decided_by: DecidedBy
    wait_ms: int = 0
    queue_ms: int = 0  # time the tool's work waited for a pool worker (tools/pools.py)
    reason: str | None = None  # the user's words on a deny, or why the bridge refused
    approver: str | None = None  # which UI decided
    rule: str | None = None  # the rule that decided (or asked), for the audit record


def refused(
    text: str,
    outcome: CallOutcome,
    decided_by: DecidedBy = DecidedBy.POLICY,
    *,
    wait_ms: int = 0,
    reason: str | None = None,
    approver: str | None = None,
    rule: str | None = None,
) -> Outcome:
    """A call that ends without running, with ``text`` as the agent's error result."""
    result = ToolResult.text(text, True)
    return Outcome(
        result, outcome, decided_by, wait_ms, reason=reason, approver=approver, rule=rule
    )


def safe_body(req_id: Any, result: dict[str, Any] | None) -> bytes:
    """A JSON-RPC result (or ``-32800`` when ``result`` is None) that always serialises.

    Client text can carry lone surrogates (a path, an id) that UTF-8 cannot encode: those are
    written as ``\\uXXXX`` escapes instead of failing the reply (and, once, auditing the call
    twice).
    """
    try:
        if result is None:
            return error_body(req_id, REQUEST_CANCELLED, "request cancelled")
        return result_body(req_id, result)
    except (UnicodeEncodeError, ValueError, TypeError, RecursionError):
        pass
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id}
    if result is None:
        msg["error"] = {"code": REQUEST_CANCELLED, "message": "request cancelled"}
    else:
        msg["result"] = result
    try:
        return json.dumps(msg, separators=(",", ":")).encode()  # ASCII: surrogates escaped
    except (ValueError, TypeError, RecursionError):
        log.error("reply to a tools/call could not be serialised; answered with an error")
        return error_body(None, INTERNAL_ERROR, "internal error")


def ok_or_error(result: ToolResult) -> CallOutcome:
    return CallOutcome.ERROR if result.is_error else CallOutcome.OK


def bad_input(
    name: str, e: Exception, decided_by: DecidedBy = DecidedBy.POLICY, wait_ms: int = 0
) -> Outcome:
    """Arguments the OS cannot take (lone surrogates, NUL bytes): one line, no traceback."""
    if isinstance(e, UnicodeError):
        why = "a string is not valid Unicode (lone surrogate?)"
    else:
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
    log.info("tools/call %r refused: %s", name[:64], why)
    text = f"invalid arguments for '{name[:64]}': {why}"
    return refused(text, CallOutcome.ERROR, decided_by, wait_ms=wait_ms)


def internal(name: str) -> Outcome:
    return refused(f"tool '{name}' failed: internal error", CallOutcome.ERROR)


def refusal_for(
    v: WaitResult, escalation: Escalation | None, timeout_s: float, roots: Sequence[str]
) -> Outcome | None:
    """The agent's text and the audit outcome for a wait that did not end in approval.

    Each text says what the agent can do next; the audit tells "denied by the user"
    (with the reason and which UI), "no_approver", "timeout", "cancelled" and "paused" apart.
    """
    e = v.ending
    if e is Ending.APPROVED:
        return None
    if e is Ending.DENIED:
        text = f"denied by the user: {v.reason}" if v.reason else "denied by the user"
        return refused(
            text,
            CallOutcome.DENIED,
            DecidedBy.USER,
            reason=v.reason,
            approver=v.approver,
        )
    if e is Ending.TIMEOUT:
        text = f"approval timed out after {timeout_s:g} s"
        return refused(text, CallOutcome.TIMEOUT)
    if e is Ending.CANCELLED:
        return Outcome(None, CallOutcome.CANCELLED, DecidedBy.POLICY)
    if e is Ending.NO_APPROVER:
        text = no_approver_text(escalation, roots)
        return refused(text, CallOutcome.NO_APPROVER, reason=text)
    texts = {
        Ending.PAUSED: (PAUSED_TEXT, CallOutcome.PAUSED),
        Ending.SHUTDOWN: (SHUTDOWN_TEXT, CallOutcome.DENIED),
        Ending.SESSION_ENDED: (SESSION_ENDED_TEXT, CallOutcome.CANCELLED),
        Ending.DISCONNECTED: (DISCONNECTED_TEXT, CallOutcome.CANCELLED),
        Ending.TOO_MANY: (TOO_MANY_TEXT, CallOutcome.LIMIT),
    }
    text, outcome = texts[e]
    if e is Ending.TOO_MANY and v.reason:  # given up for another machine's call: says so
        text = v.reason
    return refused(text, outcome)


def no_approver_text(escalation: Escalation | None, roots: Sequence[str]) -> str:
    """Why a human was needed and what the agent can do, when no human can answer.

    Only "outside the roots" names the real path: for a protected location the agent
    learns neither the category nor where a symlink or hard link it used really points
    (the human sees both).
    """
    if escalation is None:
        return NO_APPROVER_TEXT
    head = "approval required but no approver is available"
    if escalation.kind == EscalationKind.OUTSIDE_ROOTS:
        under = ", ".join(roots[:3])
        return (
            f"{head}: {escalation.text}; outside the allowed roots: ask the user to add the "
            f"folder to roots, or use a path under {under}"
        )
    if escalation.kind == EscalationKind.UNCHECKED:
        return (
            f"{head}: the call is too large to check for protected paths ({escalation.category}); "
            "the user must open the tray, the approval page or `a2a-bridge watch`"
        )
    where = {
        EscalationKind.PERSISTENCE: "is a persistence location (startup files, hooks)",
        EscalationKind.OWN_FILE: "is one of the bridge's own files",
    }.get(escalation.kind, "is in a protected location")
    return (
        f"{head}: the path {where}; "
        "the user must open the tray, the approval page or `a2a-bridge watch`"
    )

"""The box as every UI says it: where a waiting bash call will run, and what the box is.

Why one module: the page, ``watch``, the tray and ``status`` must say the same words, and
"outside the box" must never be shown as "in the box" anywhere (what the human is shown is what
runs). :func:`placement` is the one answer to "will this bash call run in the box?", pure, so the
pipeline can ask it too. The agent's ``reason`` is agent text: it leaves here only rendered by
:mod:`server.present.textsafe`.
"""

from __future__ import annotations

from typing import Any

from ..box.plan import BoxStatus
from ..types import BoxPlacement
from .textsafe import shorten

REASON_MAX = 300
# What the box allows, in one line (server/box/plan.py's defaults; README "The box").
ALLOWS = (
    "reads everything but private places; writes the call's project (not its persistence "
    "files) and a private TMPDIR; no network"
)
IN_BOX = "runs in the box"
OUTSIDE = "outside the box"


def placement(
    tool: str, arguments: dict[str, Any], status: BoxStatus | None
) -> BoxPlacement | None:
    """Where a ``bash`` call runs once approved (None for every other tool)."""
    if tool != "bash":
        return None
    if arguments.get("box") is False:
        reason = arguments.get("reason")
        why = reason.strip() if isinstance(reason, str) else ""
        return BoxPlacement(False, why, by_agent=True)
    if status is None:
        return BoxPlacement(False, "the box is still being checked")
    if not status.available:
        return BoxPlacement(False, f"no box on this machine: {status.detail}")
    return BoxPlacement(True)


def placement_json(box: BoxPlacement | None) -> dict[str, Any] | None:
    """``inside``, ``text`` (one safe line every UI shows), ``reason`` (safe), ``hidden``
    (the reason carried hidden characters), ``by_agent``, ``can_run_outside``."""
    if box is None:
        return None
    reason = shorten(box.why, REASON_MAX)
    if box.inside:
        text = IN_BOX
    elif box.by_agent:
        text = f"{OUTSIDE}: the agent asks" + (f" because {reason.text}" if reason.text else "")
    else:
        text = f"{OUTSIDE}: {reason.text}"
    return {
        "inside": box.inside,
        "text": text,
        "reason": reason.text,
        "hidden": reason.hidden,
        "by_agent": box.by_agent,
        "can_run_outside": box.can_run_outside,
    }


def status_json(status: BoxStatus | None) -> dict[str, Any]:
    """The box for ``status --json``, the page header and the tray tooltip."""
    if status is None:
        return {
            "available": False,
            "mechanism": "none",
            "detail": "being checked",
            "allows": "",
            "text": "box: being checked",
        }
    return {
        "available": status.available,
        "mechanism": status.mechanism.value,
        "detail": status.detail,
        "allows": ALLOWS if status.available else "",
        "text": status_text(status),
    }


def status_text(status: BoxStatus | None) -> str:
    """One line: ``box: bubblewrap (…) — reads …`` or ``box: none — why (bash asks)``."""
    if status is None:
        return "box: being checked"
    if status.available:
        return f"box: {status.mechanism.value}, {status.detail}; {ALLOWS}"
    return f"box: none ({status.detail}); bash asks before every call"

"""JSON views of bridge state for the control API, the page and the CLI (pure functions)."""

from __future__ import annotations

import time
from typing import Any

from .approvals import PendingCall
from .bridge import SessionView, Snapshot


def pending_json(p: PendingCall, now: float | None = None) -> dict[str, Any]:
    now = time.time() if now is None else now
    return {
        "id": p.id,
        "sid": p.sid,
        "client": p.client,
        "tool": p.tool,
        "arguments": p.arguments,
        "summary": p.summary,
        "escalation": p.escalation,
        "arrived": p.arrived,
        "waiting_s": round(max(now - p.arrived, 0.0), 1),
    }


def session_json(s: SessionView) -> dict[str, Any]:
    return {
        "sid": s.sid,
        "client": s.client,
        "version": s.version,
        "created": s.created,
        "last_seen": s.last_seen,
        "calls": s.calls,
        "pending": s.pending,
        "protocol": s.protocol,
    }


def snapshot_json(snap: Snapshot, now: float | None = None) -> dict[str, Any]:
    return {
        "mcp_url": snap.url,
        "paused": snap.paused,
        "running": snap.running,
        "approvers": list(snap.approvers),
        "token_source": snap.token_source,
        "warnings": list(snap.warnings),
        "calls_total": snap.calls_total,
        "counts": {"sessions": len(snap.sessions), "pending": len(snap.pending)},
        "sessions": [session_json(s) for s in snap.sessions],
        "pending": [pending_json(p, now) for p in snap.pending],
    }


def audit_call_json(call: dict[str, Any]) -> dict[str, Any]:
    """One paired call from the audit log (start and done joined by id)."""
    start = call.get("start") or {}
    done = call.get("done") or {}
    rec = start or done
    return {
        "id": call["id"],
        "ts": rec.get("ts"),
        "sid": rec.get("sid"),
        "client": rec.get("client"),
        "tool": rec.get("tool"),
        "args": rec.get("args"),
        "pending": not done,
        "outcome": done.get("outcome"),
        "isError": done.get("isError"),
        "decided_by": done.get("decided_by"),
        "wait_ms": done.get("wait_ms"),
        "duration_ms": done.get("duration_ms"),
    }

"""``a2a-bridge audit [-n N] [--follow]``: the audit log as lines a human reads.

Why its own module: it reads the log files directly (it works with no bridge running), and
saying who decided and why in words (``denied by the user via approval page (wrong folder)``,
``timed out (policy)``) is its own job. Every field from the log is agent-influenced, so all of
it is rendered safe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time

from .audit import pair_calls, read_records
from .config import audit_path, load_config
from .textsafe import safe, shorten

OUTCOME_WORDS = {
    "denied": "denied",
    "not_exposed": "not exposed",
    "no_approver": "no approver attached",
    "timeout": "timed out",
    "cancelled": "cancelled",
    "paused": "paused",
}


def _describe(call: dict) -> str:
    """One audit line; every field from the log is agent-influenced, so all of it is safe-rendered.

    Says who decided and why: ``denied by the user via approval page (wrong folder)``,
    ``no approver attached``, ``timed out``, ``cancelled``, ``paused``.
    """
    start, done = call["start"] or {}, call["done"] or {}
    rec = start or done
    ts = safe(rec.get("ts", "?"))
    status = safe(done.get("outcome", "?")) if done else "PENDING"
    took = f"{safe(done['duration_ms'])}ms" if "duration_ms" in done else "-"
    who = shorten(rec.get("client") or "?", 40).text
    tool = shorten(rec.get("tool", "?"), 60).text
    args = shorten(rec.get("args", ""), 300).text
    line = f"{ts}  {status:<11} {took:>8}  {tool}  ({who})  {args}"
    if done:
        line += "  — " + _decided(done)
    return line


def _decided(done: dict) -> str:
    """Who decided and why, in words."""
    outcome, by = done.get("outcome"), done.get("decided_by") or "policy"
    approver = f" via {shorten(done['approver'], 40).text}" if done.get("approver") else ""
    reason = f" ({shorten(done['reason'], 200).text})" if done.get("reason") else ""
    if by == "user" and outcome == "denied":
        return f"denied by the user{approver}{reason}"
    if by == "user":
        then = f", then {OUTCOME_WORDS[outcome]}" if outcome in OUTCOME_WORDS else ""
        return f"approved by the user{approver}{then}"
    if outcome == "no_approver":
        return "no approver attached"
    if outcome in OUTCOME_WORDS:
        return f"{OUTCOME_WORDS[outcome]} ({safe(by)}){reason}"
    if outcome in ("ok", "error"):
        return f"allowed by {safe(by).replace('_', ' ')}"
    return f"{safe(outcome)} ({safe(by)})"


def cmd_audit(args: argparse.Namespace) -> int:
    path = audit_path()
    cfg = load_config()
    calls = pair_calls(read_records(path, cfg.audit_keep))
    for call in calls[-args.limit :] if args.limit else calls:
        print(_describe(call))
    if not args.follow:
        return 0
    with contextlib.suppress(KeyboardInterrupt):
        _follow(path)
    return 0


def _follow(path: str) -> None:
    starts: dict[str, dict] = {}
    pos = os.path.getsize(path) if os.path.exists(path) else 0
    inode = os.stat(path).st_ino if os.path.exists(path) else None
    print(f"following {path} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    while True:
        time.sleep(0.5)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if st.st_ino != inode or st.st_size < pos:  # rotated
            inode, pos = st.st_ino, 0
        if st.st_size == pos:
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            f.seek(pos)
            chunk = f.read()
            pos = f.tell()
        for line in chunk.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("phase") == "start":
                starts[rec.get("id")] = rec
                print(_describe({"start": rec, "done": None}), flush=True)
            elif rec.get("phase") == "done":
                start = starts.pop(rec.get("id"), None)
                print(_describe({"start": start, "done": rec}), flush=True)


def add_audit_parser(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("audit", help="show recent tool calls (start and done paired)")
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new calls")
    a.add_argument("--limit", "-n", type=int, default=50, help="how many calls (0 = all)")
    a.set_defaults(func=cmd_audit)

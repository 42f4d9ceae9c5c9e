"""A waiting call as a terminal shows it: ``watch``, ``a2a-bridge pending`` and ``show``.

Pure functions over the control API's JSON (the bounded preview, or the full call), kept apart
from the ``watch`` loop (:mod:`server.cli.watch`) because three verbs print them. Every agent
string goes through :mod:`server.present.textsafe` again before it is printed (the server rendered
it
already; rendering safe text again changes nothing), so no escape sequence from an agent
reaches the terminal.
"""

from __future__ import annotations

import json
import time
from typing import Any

from .diffview import diff_summary, diff_text_lines
from .risk import cues_text
from .textsafe import HIDDEN_WARNING, render, safe

DIFF_SHOWN = 60  # diff lines a terminal shows before "[f] full call"


def safe_line(value: Any) -> str:
    """One line of agent text for the terminal (idempotent on already-safe text)."""
    return safe("" if value is None else value)


def _block(value: Any, indent: str = "     ") -> list[str]:
    text = render("" if value is None else str(value), multiline=True).text
    return [indent + line for line in text.split("\n")]


def remaining(p: dict[str, Any], now: float | None = None) -> float | None:
    deadline = p.get("deadline")
    if not isinstance(deadline, int | float):
        return None
    return max(deadline - (time.time() if now is None else now), 0.0)


def countdown_text(p: dict[str, Any], now: float | None = None) -> str:
    left = remaining(p, now)
    return "" if left is None else f"auto-deny in {left:.0f} s"


def describe(p: dict[str, Any], now: float | None = None) -> str:
    """One pending call as the terminal shows it, from the bounded summary (never raw args)."""
    now = time.time() if now is None else now
    waited = max(now - float(p.get("arrived") or now), 0.0)
    session = safe_line(p.get("session") or str(p.get("sid", ""))[:8])
    machine = p.get("machine")  # from the token (server/machines); the client is its claim
    where = f" on {safe_line(machine)}" if isinstance(machine, str) and machine else ""
    head = (
        f"── {safe_line(p.get('id'))}: {safe_line(p.get('tool'))} from "
        f"{safe_line(p.get('client'))}{where} (session {session}), waiting {waited:.0f} s"
    )
    left = countdown_text(p, now)
    lines = [head + (f", {left}" if left else "")]
    if p.get("hidden"):
        lines.append(f"   ⚠ {HIDDEN_WARNING} (shown escaped, e.g. \\u202e)")
    pv = p.get("preview") or {}
    lines += [f"   {safe_line(t)}" for t in cues_text(pv.get("risks"))]
    lines += box_lines(p.get("box"))
    esc = p.get("escalation")
    if isinstance(esc, dict):
        if esc.get("category"):
            lines.append(
                f"   needs a human: {safe_line(esc['category'])} — {safe_line(esc.get('path'))}"
            )
            lines.append(f"   because {safe_line(esc.get('text'))}")
        else:
            lines.append(f"   needs a human because {safe_line(esc.get('text'))}")
    elif esc:
        lines.append(f"   needs a human because {safe_line(esc)}")
    lines += _upstream_lines(p.get("upstream"))
    if p.get("session_grant"):
        lines.append(f"   [s] {safe_line(p['session_grant'])}")
    else:
        lines.append(f"   {NO_SESSION}")
    if p.get("proposed_rule"):
        lines.append(
            "   [A]lways would save: " + safe_line(" + ".join(p["proposed_rule"].splitlines()))
        )
    else:
        lines.append(f"   {no_always_text(pv)}")
    tool = p.get("tool")
    lines += _argument_lines(pv)
    if "command" in pv:
        lines.append(f"   in: {safe_line(pv.get('cwd') or '(first root)')}")
        lines.append("   command:")
        lines.extend(_block(pv["command"]))
    if "path" in pv:
        lines.append(f"   path: {safe_line(pv['path'])}")
    size = pv.get("size")
    shown_as_diff = (pv.get("change") or {}).get("kind") == "diff"
    if "content" in pv and isinstance(size, dict) and not shown_as_diff:
        lines.append(
            f"   {tool} {size.get('chars')} characters, {size.get('lines')} lines "
            f"({size.get('bytes')} bytes):"
        )
        lines.extend(_block(pv["content"]))
    change = pv.get("change")
    if isinstance(change, dict):
        lines.append(f"   change: {safe_line(diff_summary(change))}")
        lines += [f"     {safe_line(x)}" for x in diff_text_lines(change, DIFF_SHOWN)]
    if "old" in pv and isinstance(size, dict) and (change or {}).get("kind") != "diff":
        every = " (every occurrence)" if pv.get("replace_all") else ""
        lines.append(f"   replace{every} ({size['old']['chars']} characters):")
        lines.extend(_block(pv["old"]))
        lines.append(f"   with ({size['new']['chars']} characters):")
        lines.extend(_block(pv["new"]))
    for key in ("pattern", "glob"):
        if key in pv:
            lines.append(f"   {key}: {safe_line(pv[key])}")
    if not pv or set(pv) <= {"hidden"}:  # an older bridge's preview: the summary, at least
        lines.append(f"   {safe_line(p.get('summary'))}")
    return "\n".join(lines)


NO_SESSION = '(no "Allow for this session" for this call: no grant as narrow as the call applies)'
RUN_OUTSIDE_KEY = "o"


def box_lines(box: Any) -> list[str]:
    """Where a bash call runs: in the box (and the key that runs it outside instead), or a
    warning line when it would run outside the box, with the agent's reason."""
    if not isinstance(box, dict):
        return []
    if box.get("inside"):
        return [f"   runs in the box ([{RUN_OUTSIDE_KEY}] runs it outside the box instead)"]
    return [f"   ⚠ runs {safe_line(box.get('text') or 'outside the box')}"]


NO_ALWAYS = '(no "Always allow" for this call: no rule can name exactly this call)'


def no_always_text(pv: dict[str, Any]) -> str:
    """Why no "Always allow" is offered, with the bridge's reason for this call."""
    why = pv.get("no_rule")
    if not why:
        return NO_ALWAYS
    return f'(no "Always allow" for this call: {safe_line(why)})'


def waiting_line(position: int, total: int, same_kind: int) -> str:
    """``2 more waiting · [n]ext/[p]revious · 3 of this kind: [aa] approve all / [dd] deny all``."""
    others = total - 1
    if others <= 0:
        return ""
    parts = [f"{others} more waiting (this is {position} of {total}) · [n]ext / [p]revious"]
    if same_kind > 1:
        parts.append(f"{same_kind} of this kind: [aa] approve all {same_kind} / [dd] deny all")
    return "   " + " · ".join(parts)


def batch_lines(batch: dict[str, Any]) -> list[str]:
    """What *approve/deny all N* covers: each call's summary (safe), by id."""
    lines = [f"   all {batch.get('count')} of this kind: {safe_line(batch.get('label'))}"]
    for cid, summary in zip(batch.get("ids") or [], batch.get("summaries") or [], strict=False):
        lines.append(f"     {safe_line(cid)}: {safe_line(summary)}")
    return lines


def _argument_lines(pv: dict[str, Any]) -> list[str]:
    """An upstream call's arguments from the bounded preview, and how many more there are."""
    listed = pv.get("arguments")
    if not isinstance(listed, list):
        return []
    if not listed:
        return ["   arguments: none"]
    lines = ["   arguments:"]
    for a in listed:
        if isinstance(a, dict):
            lines.append(f"     {safe_line(a.get('name'))} = {safe_line(a.get('value'))}")
    more = pv.get("more_arguments")
    if isinstance(more, int) and more > 0:
        lines.append(f"     … +{more} more argument{'s' if more != 1 else ''} ([f] full call)")
    return lines


def _upstream_lines(u: dict[str, Any] | None) -> list[str]:
    """An upstream server's tool: whose it is and what it says it does (its words, untrusted
    and rendered safe like any agent text)."""
    if not u:
        return []
    lines = [f"   upstream server {safe_line(u.get('server'))}, tool {safe_line(u.get('tool'))}"]
    if u.get("changed"):
        lines.append("   ! its definition CHANGED since it was approved - read it again")
    lines.append("   description (from the server, untrusted):")
    lines += _block(u.get("description") or "(none)")
    if u.get("annotations"):
        lines.append(f"   annotations (untrusted): {safe_line(json.dumps(u['annotations']))}")
    return lines


def describe_full(call: dict[str, Any]) -> str:
    """Every argument of one call, each rendered safe in full (``GET /api/pending/<id>``)."""
    lines = [f"── {safe_line(call.get('id'))}: {safe_line(call.get('tool'))}, in full:"]
    for f in call.get("display") or []:
        note = " ⚠ hidden characters" if f.get("hidden") else ""
        lines.append(f"   {safe_line(f.get('name'))} ({f.get('chars')} characters){note}:")
        lines.extend(_block(f.get("text")))
    return "\n".join(lines)

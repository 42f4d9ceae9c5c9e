"""Bounded, safe previews of pending calls: what snapshots and lists carry instead of arguments.

A pending ``write`` of 900 KB used to travel in full in every snapshot (the events socket, the
tray, ``/api/status``); now each entry carries a preview of a few KB at most, built once when
the call starts waiting, and ``GET /api/pending/<id>`` returns the full call. Every string here
went through :mod:`server.present.textsafe`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..policy.rules import PATH_TOOLS
from .ids import sid_hash
from .textsafe import Safe, hidden_in, lines_preview, render, shorten

if TYPE_CHECKING:
    from ..types import PendingCall

SUMMARY_MAX = 160
FIELD_MAX = 120
PATH_MAX = 200
ARGS_LISTED = 24  # arguments a preview lists one by one; the rest are counted, never dropped
SUMMARY_VALUE_MAX = 48  # one argument's value in the one-line summary (head…tail and length)
# Tools whose arguments the bridge knows (their schema refuses any other argument), so their
# previews pick the fields that matter. Every other tool (an upstream ``mcp__`` tool, whose
# arguments mean whatever its server makes of them) shows every argument.
KNOWN_TOOLS = PATH_TOOLS | {"bash"}


def shows_arguments(tool: str) -> bool:
    """True when a call's summary and preview list its arguments one by one (not a built-in)."""
    return tool not in KNOWN_TOOLS


def arg_text(value: Any) -> str:
    """One argument's value as the UIs show it: JSON (a string quoted), so ``42`` and ``"42"``
    differ and a nested object shows every key. (Arguments come from JSON; ``default`` only
    keeps an odd in-process caller from breaking the wait.)"""
    return json.dumps(value, ensure_ascii=False, default=repr)


def more_arguments(n: int) -> str:
    """The marker a shortened list of arguments ends with: nothing is cut silently."""
    return f"… +{n} more argument{'s' if n != 1 else ''}"


def call_hidden(p: PendingCall) -> bool:
    """The one answer to "does this pending call carry hidden characters": its arguments (keys
    and values, nested), the client's name, the tool's name, the escalation's path and words,
    the upstream tool's description and annotations. Every UI's warning comes from here."""
    if p.hidden or hidden_in(p.client) or hidden_in(p.tool):
        return True
    esc = escalation_json(p.escalation)
    if esc is not None and esc["hidden"]:
        return True
    if p.upstream is not None:
        u = p.upstream
        return hidden_in([u.server, u.tool, u.description, u.annotations])
    return False


def short_session(sid: str) -> str:
    """A short, stable handle for a session in UIs (not the session id itself)."""
    return sid_hash(sid)


def escalation_json(escalation: Any) -> dict[str, Any] | None:
    """``Escalation.to_json()`` made safe; a plain reason string (older callers) also works."""
    if escalation is None:
        return None
    if hasattr(escalation, "to_json"):
        raw = dict(escalation.to_json())
    else:
        raw = {"kind": None, "category": None, "path": None, "text": str(escalation)}
    out: dict[str, Any] = {"kind": raw.get("kind")}
    hidden = False
    for key, limit in (("category", FIELD_MAX), ("path", PATH_MAX), ("text", PATH_MAX + 80)):
        value = raw.get(key)
        if value is None:
            out[key] = None
            continue
        s = shorten(value, limit)
        hidden |= s.hidden
        out[key] = s.text
    out["hidden"] = hidden
    return out


def _size(text: str) -> dict[str, int]:
    return {
        "chars": len(text),
        "bytes": len(text.encode("utf-8", "surrogatepass")),
        "lines": text.count("\n") + (1 if text and not text.endswith("\n") else 0),
    }


def build_preview(tool: str, args: dict[str, Any], cwd: str | None = None) -> dict[str, Any]:
    """The bounded context a human needs to judge the call at a glance, all safe text.

    ``cwd`` is the real working directory the bridge resolved (``bash``), shown instead of
    what the agent wrote.
    """
    hidden = False

    def take(s: Safe) -> str:
        nonlocal hidden
        hidden |= s.hidden
        return s.text

    out: dict[str, Any] = {}
    if shows_arguments(tool):
        return _arguments_preview(args)
    path = args.get("path")
    if isinstance(path, str):
        out["path"] = take(shorten(path, PATH_MAX))
    command = args.get("command")
    if tool == "bash" and isinstance(command, str):
        out["command"] = take(shorten(command, 400))
        if cwd is None and isinstance(args.get("cwd"), str) and args["cwd"]:
            cwd = args["cwd"]
        out["cwd"] = take(shorten(cwd, PATH_MAX)) if cwd else None
    content = args.get("content")
    if isinstance(content, str):
        out["size"] = _size(content)
        out["content"] = take(lines_preview(content, 5, 3, 120))
    old, new = args.get("old_string"), args.get("new_string")
    if isinstance(old, str) or isinstance(new, str):
        old = old if isinstance(old, str) else ""
        new = new if isinstance(new, str) else ""
        out["size"] = {"old": _size(old), "new": _size(new)}
        out["old"] = take(lines_preview(old, 3, 2, 120))
        out["new"] = take(lines_preview(new, 3, 2, 120))
        out["replace_all"] = bool(args.get("replace_all"))
    for key in ("pattern", "glob"):
        value = args.get(key)
        if isinstance(value, str):
            out[key] = take(shorten(value, FIELD_MAX))
    out["hidden"] = hidden
    return out


def _arguments_preview(args: dict[str, Any]) -> dict[str, Any]:
    """Every argument, in the agent's order: the first :data:`ARGS_LISTED` with their values
    (head…tail and length when long), then how many more there are."""
    listed: list[dict[str, Any]] = []
    for key, value in list(args.items())[:ARGS_LISTED]:
        v = shorten(arg_text(value), FIELD_MAX)
        listed.append(
            {
                "name": shorten(key, 64).text,
                "value": v.text,
                "chars": v.length,
                "truncated": v.truncated,
            }
        )
    return {
        "arguments": listed,
        "more_arguments": max(len(args) - ARGS_LISTED, 0),
        "hidden": hidden_in(args),
    }


def _arguments_summary(tool: str, args: dict[str, Any]) -> Safe:
    """``mcp__sh__exec: command="ls", env={"LD_PRELOAD": "/tmp/x.so"}, cwd="/"``: every
    argument, each value head…tail when long, and ``… +N more arguments`` past the line's
    budget."""
    tool_s = render(tool)
    if not args:
        return Safe(f"{tool_s.text}: (no arguments)", tool_s.hidden, 0)
    parts: list[str] = []
    used = 0
    items = list(args.items())
    more = 0
    truncated = False
    for i, (key, value) in enumerate(items):
        v = shorten(arg_text(value), SUMMARY_VALUE_MAX)
        piece = f"{shorten(key, 32).text}={v.text}"
        if parts and used + len(piece) > SUMMARY_MAX:
            more = len(items) - i
            break
        parts.append(piece)
        used += len(piece) + 2
        truncated |= v.truncated
    body = ", ".join(parts) + (f" {more_arguments(more)}" if more else "")
    hidden = tool_s.hidden or hidden_in(args)
    return Safe(f"{tool_s.text}: {body}", hidden, len(body), truncated or bool(more))


def summary_of(tool: str, args: dict[str, Any]) -> Safe:
    """``bash: git push origin main`` — one safe line, head…tail when long.

    A tool whose arguments the bridge does not know (upstream) lists every argument."""
    if shows_arguments(tool):
        return _arguments_summary(tool, args)
    main: object = None
    for key in ("command", "path", "pattern"):
        v = args.get(key)
        if isinstance(v, str) and v.strip():
            main = v
            break
    if main is None and args:
        main = " ".join(f"{k}={v!r}" for k, v in list(args.items())[:4])
    tool_s = render(tool)
    if main is None:
        return shorten(tool, SUMMARY_MAX)
    body = shorten(main, SUMMARY_MAX)
    return Safe(
        f"{tool_s.text}: {body.text}", tool_s.hidden or body.hidden, body.length, body.truncated
    )


def full_display(tool: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """Every argument rendered in full for the one-call view (page, ``watch``'s "show all")."""
    fields: list[dict[str, Any]] = []
    order = ["command", "cwd", "path", "content", "old_string", "new_string"]
    keys = [k for k in order if k in args] + sorted(k for k in args if k not in order)
    for key in keys:
        value = args[key]
        text = value if isinstance(value, str) else _json(value)
        r = render(text, multiline=True)
        fields.append(
            {
                "name": render(key).text,
                "text": r.text,
                "hidden": r.hidden,
                "chars": r.length,
                "lines": text.count("\n") + 1,
            }
        )
    return fields


def _json(value: Any) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, indent=2)

"""What an ``edit`` or ``write`` will change, as a bounded unified diff every approval UI shows.

Why here, pure: the page, ``watch`` and the tray show the same lines, so they are computed once
(when the call starts waiting) from the file's real contents, which the pipeline reads in a
file worker (:func:`server.tools.files.read_before`), and from the very arguments the call
will apply. :func:`apply_edit` is the one definition of what ``edit`` does to a text; the tool
calls it too, so the diff a human approves is what runs (the tool still refuses a file that
changed identity after the approval).

Bounds: the diff of a huge file is never computed in full. Common leading and trailing lines
are trimmed first (linear); a middle longer than :data:`DIFF_LINES_MAX` on either side is shown
as "removed N lines / added M lines" with heads instead of a line-by-line match; the output is
at most :data:`SHOWN_LINES_MAX` lines of at most :data:`LINE_MAX` characters each, and says what
it left out. Every line went through :mod:`server.present.textsafe`.
"""

from __future__ import annotations

import difflib
import enum
import hashlib
from dataclasses import dataclass
from typing import Any

from .textsafe import shorten

CONTEXT = 3  # unchanged lines around each change
DIFF_LINES_MAX = 1000  # a middle larger than this (either side) is not matched line by line
SHOWN_LINES_MAX = 120  # diff lines carried in a preview
LINE_MAX = 200  # characters per shown line (head…tail and length beyond)
BLOCK_HEAD = 40  # lines shown of a block too large to match
DIFF_READ_MAX = 1 << 20  # bytes of the current file read for a diff (larger: "too large")


class BeforeState(enum.StrEnum):
    """What the bridge found at the path when the call started waiting."""

    TEXT = "text"  # a UTF-8 text file: the diff is shown
    MISSING = "missing"  # no file: a write creates it
    BINARY = "binary"
    NOT_UTF8 = "not_utf8"
    TOO_BIG = "too_big"
    UNREADABLE = "unreadable"  # not a regular file, permission denied, a symlink...


@dataclass(frozen=True, slots=True)
class Before:
    """The file as it was when the call started waiting (``text`` only for ``TEXT``)."""

    state: BeforeState
    text: str | None = None
    size: int | None = None
    why: str | None = None  # UNREADABLE: the OS's words
    digest: str | None = None  # TEXT: sha256 of the bytes read; MISSING: "missing"


MISSING_DIGEST = "missing"


def digest_of(raw: bytes) -> str:
    """What an approved change checks the file against (server/tools/files.py)."""
    return hashlib.sha256(raw).hexdigest()


class EditProblem(ValueError):
    """The edit cannot apply to this text; the message is the tool's own error text."""


def apply_edit(text: str, old: str, new: str, replace_all: bool, shown: str) -> tuple[str, int]:
    """What ``edit`` does to ``text``: the new text and how many occurrences it replaced.

    Raises :class:`EditProblem` with the tool's error text when it cannot apply.
    """
    if old == new:
        raise EditProblem("old_string and new_string are the same; nothing to change")
    count = text.count(old)
    if count == 0:
        raise EditProblem(f"old_string not found in {shown}")
    if count > 1 and not replace_all:
        raise EditProblem(
            f"old_string occurs {count} times in {shown}; add surrounding context to make "
            "it unique, or set replace_all to replace every occurrence"
        )
    return text.replace(old, new), count


class Op(enum.StrEnum):
    """One diff line's kind (the page colours by it; terminals print it as the first column)."""

    HUNK = "@"
    SAME = " "
    REMOVED = "-"
    ADDED = "+"
    NOTE = "\\"  # "\ No newline at end of file", "… 40 more lines"


def _line(op: Op, raw: str, eol_mark: str = "") -> list[str]:
    """``[op, safe text]``: the line's ending is dropped (a ``\\r`` before it too, since the
    header names the file's endings); agent text is rendered and bounded."""
    body = raw[:-1] if raw.endswith("\n") else raw
    body = body[:-1] if body.endswith("\r") else body
    return [op.value, shorten(body, LINE_MAX).text + eol_mark]


def _eol(lines: list[str]) -> str:
    """The dominant line ending: ``crlf`` or ``lf`` (``lf`` when there is none)."""
    crlf = sum(1 for x in lines if x.endswith("\r\n"))
    lf = sum(1 for x in lines if x.endswith("\n")) - crlf
    return "crlf" if crlf > lf else "lf"


def _mark(raw: str, dominant: str) -> str:
    """A marker where a line's ending differs from its file's: a change of endings shows."""
    if raw.endswith("\r\n"):
        return "" if dominant == "crlf" else " ⏎CRLF"
    if raw.endswith("\n"):
        return "" if dominant == "lf" else " ⏎LF"
    return ""


def _trim(a: list[str], b: list[str]) -> tuple[int, int]:
    """Common leading and trailing lines (linear): the middle is what changed."""
    n = min(len(a), len(b))
    head = 0
    while head < n and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < n - head and a[len(a) - 1 - tail] == b[len(b) - 1 - tail]:
        tail += 1
    return head, tail


def _no_newline(raw: str, at_end: bool) -> list[list[str]]:
    return (
        [[Op.NOTE.value, "No newline at end of file"]]
        if at_end and raw and not raw.endswith("\n")
        else []
    )


def diff_lines(before: str, after: str) -> dict[str, Any]:
    """A unified diff of ``before`` → ``after``, bounded: ``lines`` (``[op, text]`` pairs),
    ``added``/``removed`` line counts, ``truncated``, and ``eol`` (``lf``/``crlf``)."""
    a = before.splitlines(keepends=True)
    b = after.splitlines(keepends=True)
    ea, eb = _eol(a), _eol(b)
    head, tail = _trim(a, b)
    mid_a, mid_b = a[head : len(a) - tail], b[head : len(b) - tail]
    out: list[list[str]] = []
    added = removed = 0
    if len(mid_a) > DIFF_LINES_MAX or len(mid_b) > DIFF_LINES_MAX:
        # Too large to match line by line: what goes and what comes, each with its head.
        out.append([Op.HUNK.value, f"@@ -{head + 1},{len(mid_a)} +{head + 1},{len(mid_b)} @@"])
        for op, block in ((Op.REMOVED, mid_a), (Op.ADDED, mid_b)):
            out += [_line(op, x) for x in block[:BLOCK_HEAD]]
            if len(block) > BLOCK_HEAD:
                out.append(
                    [Op.NOTE.value, f"… {len(block) - BLOCK_HEAD} more {op.name.lower()} lines"]
                )
        removed, added = len(mid_a), len(mid_b)
    else:
        lo = max(head - CONTEXT, 0)
        a_win = a[lo : len(a) - max(tail - CONTEXT, 0)]
        b_win = b[lo : len(b) - max(tail - CONTEXT, 0)]
        matcher = difflib.SequenceMatcher(None, a_win, b_win)  # autojunk: bounded time
        for group in matcher.get_grouped_opcodes(CONTEXT):
            i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
            out.append([Op.HUNK.value, f"@@ -{lo + i1 + 1},{i2 - i1} +{lo + j1 + 1},{j2 - j1} @@"])
            for tag, x1, x2, y1, y2 in group:
                if tag == "equal":
                    out += [_line(Op.SAME, x) for x in a_win[x1:x2]]
                    continue
                for k in range(x1, x2):
                    out.append(_line(Op.REMOVED, a_win[k], _mark(a_win[k], ea)))
                    out += _no_newline(a_win[k], lo + k == len(a) - 1)
                    removed += 1
                for k in range(y1, y2):
                    out.append(_line(Op.ADDED, b_win[k], _mark(b_win[k], eb)))
                    out += _no_newline(b_win[k], lo + k == len(b) - 1)
                    added += 1
    truncated = len(out) > SHOWN_LINES_MAX
    if truncated:
        left = len(out) - SHOWN_LINES_MAX
        out = [*out[:SHOWN_LINES_MAX], [Op.NOTE.value, f"… {left} more diff lines"]]
    return {"lines": out, "added": added, "removed": removed, "truncated": truncated, "eol": ea}


def change_view(tool: str, args: dict[str, Any], before: Before) -> dict[str, Any] | None:
    """What ``write``/``edit`` with ``args`` will do to the file found (``before``).

    ``kind``: ``diff`` (with :func:`diff_lines`' fields), ``new`` (a write creates the file:
    its size), ``none`` (an edit that will fail, with the tool's words: nothing changes), or
    ``unknown`` (binary, too big, unreadable: ``why``). None for any other tool.
    """
    if tool not in ("write", "edit"):
        return None
    path = args.get("path")
    shown: str = path if isinstance(path, str) else "the file"
    if before.state is BeforeState.MISSING:
        if tool == "write":
            raw = args.get("content")
            content: str = raw if isinstance(raw, str) else ""
            return {
                "kind": "new",
                "lines": content.count("\n") + int(not content.endswith("\n") and bool(content)),
            }
        return {
            "kind": "none",
            "why": f"{shorten(shown, 200).text}: no such file; the edit will fail",
        }
    if before.state is not BeforeState.TEXT or before.text is None:
        why = {
            BeforeState.BINARY: "a binary file",
            BeforeState.NOT_UTF8: "not UTF-8 text",
            BeforeState.TOO_BIG: f"a file of {before.size} bytes, too large to compare",
            BeforeState.UNREADABLE: f"could not be read ({before.why or 'not a regular file'})",
        }.get(before.state, "not comparable")
        return {"kind": "unknown", "why": why}
    if tool == "write":
        new_text = args.get("content")
        if not isinstance(new_text, str):
            return None
        if new_text == before.text:
            return {"kind": "same"}
        return {"kind": "diff", **diff_lines(before.text, new_text)}
    old, new = args.get("old_string"), args.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str):
        return None
    try:
        after, count = apply_edit(before.text, old, new, bool(args.get("replace_all")), shown)
    except EditProblem as e:
        return {"kind": "none", "why": shorten(str(e), 300).text}
    return {"kind": "diff", "occurrences": count, **diff_lines(before.text, after)}


def diff_text_lines(change: dict[str, Any] | None, limit: int | None = None) -> list[str]:
    """The change as plain lines for a terminal or a menu (``-old``/``+new``), from the
    preview's ``change`` (already safe). ``limit``: at most this many diff lines, then a note."""
    if not change:
        return []
    kind = change.get("kind")
    if kind == "new":
        return [f"new file ({change.get('lines', 0)} lines)"]
    if kind == "same":
        return ["no change: the file already has this content"]
    if kind in ("none", "unknown"):
        return [f"no diff: {change.get('why')}"]
    lead = {Op.NOTE.value: "\\ ", Op.HUNK.value: ""}
    lines = [f"{lead.get(op, op)}{text}" for op, text in change.get("lines", [])]
    if limit is not None and len(lines) > limit:
        lines = [*lines[:limit], f"… {len(lines) - limit} more diff lines"]
    return lines


def diff_summary(change: dict[str, Any] | None) -> str | None:
    """``+3 −1 lines`` / ``new file, 12 lines``: one line for a menu label or a notification."""
    if not change:
        return None
    kind = change.get("kind")
    if kind == "new":
        return f"new file, {change.get('lines', 0)} lines"
    if kind == "diff":
        crlf = ", CRLF" if change.get("eol") == "crlf" else ""
        return f"+{change.get('added', 0)} −{change.get('removed', 0)} lines{crlf}"
    if kind == "same":
        return "no change"
    return f"no diff: {change.get('why')}"

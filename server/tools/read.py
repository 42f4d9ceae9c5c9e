"""``read``: text by line (with offset and limit), images as image blocks, never a binary dump.

Reading is bounded in every direction: bytes read, lines returned, characters per line and the
time spent skipping to an offset. Small files are read on the bridge loop (one syscall or two);
anything bigger, or slower, moves to a worker thread so the loop keeps answering ``ping``.
"""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult, image_block, text_block
from .fileio import SNIFF_BYTES, image_type, io_error, is_binary, read_upto
from .files import PATH_FIELD, READ_ONLY, judge_opened, open_read, prestat


class ReadTool(Tool):
    name = "read"
    description = (
        "Read a text file from the bridge machine. Returns numbered lines "
        "('   12\\tcontent'); use offset/limit to page through long files (the result says "
        "which offset to continue from). A negative offset counts from the end: offset=-10 "
        "returns the last 10 lines, numbered -10 to -1, without reading the rest of the file "
        "(a file with no more lines than that is read from line 1). Images (PNG, JPEG, GIF, "
        "WebP) come back as an image. Binary files are refused."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_FIELD,
            "offset": {
                "type": "integer",
                "description": "1-based number of the first line to return (default 1); "
                "negative counts from the end: -1 is the last line, -10 starts 10 lines "
                "before the end (the tail of a log). 0 is refused.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "description": "Maximum number of lines to return (default 2000).",
            },
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    annotations = {"title": "Read file", **READ_ONLY}
    default_tier = Tier.ALLOW
    path_args = ("path",)

    def run_now(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult | None:
        _check_offset(args)
        path = ctx.resolve(args["path"])
        st = prestat(ctx, path, args["path"])
        # Small regular files are read on the loop, and so is the tail of a large one when
        # its last block holds the lines asked for; a hard-linked one goes to a thread, where
        # the protected-file identities may be refreshed.
        inline = ctx.limits.inline_read_max_bytes
        if (
            stat.S_ISREG(st.st_mode)
            and (st.st_size <= inline or (inline > 0 and args.get("offset", 1) < 0))
            and st.st_nlink == 1
        ):
            try:
                return self._read(args, ctx, path, on_loop=True)
            except _Offload:
                pass  # what was opened is not a small single-linked file after all
        return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        _check_offset(args)
        path = ctx.resolve(args["path"])
        st = prestat(ctx, path, args["path"])
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{args['path']}: is a directory (use ls)")
        return await pools.run(pools.Pool.FILE, self._read, args, ctx, path)

    def _read(
        self, args: dict[str, Any], ctx: ToolContext, path: str, on_loop: bool = False
    ) -> ToolResult:
        shown = args["path"]
        limits = ctx.limits
        offset = args.get("offset", 1)
        limit = args.get("limit", limits.read_max_lines)
        fd, st = open_read(path, shown)
        try:
            big = st.st_size > limits.inline_read_max_bytes
            if on_loop and (st.st_nlink > 1 or (big and offset > 0)):
                raise _Offload  # swapped since the check: judge and read it in a thread
            judge_opened(ctx, path, st, shown, refresh=not on_loop)
            if st.st_size <= limits.inline_read_max_bytes:
                data = read_upto(fd, limits.inline_read_max_bytes + 1)
                if len(data) <= limits.inline_read_max_bytes:  # one read, one decode
                    return self._small(data, st, shown, offset, limit, limits)
                if on_loop:
                    raise _Offload
                os.lseek(fd, 0, os.SEEK_SET)  # it grew since fstat: stream it
            with open(fd, "rb", buffering=BLOCK, closefd=False) as f:
                return self._stream(f, st, shown, offset, limit, limits, on_loop)
        except OSError as e:
            raise io_error(e, shown) from None
        finally:
            os.close(fd)

    def _small(
        self, data: bytes, st: os.stat_result, shown: str, offset: int, limit: int, limits: Any
    ) -> ToolResult:
        head = data[:SNIFF_BYTES]
        mime = image_type(head)
        if mime is not None:
            return self._image(data, shown, mime, limits)
        if is_binary(head):
            raise ToolError(
                f"{shown}: binary file ({len(data)} bytes); read returns only text and images"
            )
        lines: Any = data.decode("utf-8", "replace").split("\n")
        if lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        numbered: Any = enumerate(lines, 1)
        if offset < 0:  # counted from the end; a file with no more lines is read from line 1
            if -offset >= len(lines):
                offset = 1
            else:
                numbered = enumerate(lines[len(lines) + offset :], offset)
        plain: tuple[int, list[str], bool | str] | None = None
        if offset > 0:
            plain = _take_plain(lines, offset, limit, limits, b"\r" in data)
        if plain is not None:
            number, out, more = plain
        else:
            number, out, more = self._take(numbered, offset, limit, limits)
        return ToolResult([text_block(self._format(out, number, more, shown, offset))])

    @staticmethod
    def _image(data: bytes, shown: str, mime: str, limits: Any) -> ToolResult:
        if len(data) > limits.image_max_bytes:
            raise ToolError(
                f"{shown}: image of {len(data)} bytes is over the "
                f"{limits.image_max_bytes}-byte limit"
            )
        return ToolResult([image_block(base64.b64encode(data).decode(), mime)])

    def _stream(
        self,
        f: Any,
        st: os.stat_result,
        shown: str,
        offset: int,
        limit: int,
        limits: Any,
        on_loop: bool = False,
    ) -> ToolResult:
        """A large file in constant memory: the head is sniffed, lines before ``offset`` are
        skipped by counting newlines in binary blocks, and a line is read only up to what can
        be shown (a 1 GB one-line file costs one block, not 1 GB). On the loop (a tail read)
        it raises :class:`_Offload` as soon as more than ``inline_read_max_bytes`` from the end
        would be needed."""
        head = f.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        mime = image_type(head)
        if mime is not None and on_loop:
            raise _Offload  # an image is read whole: not on the loop
        if mime is not None:
            if st.st_size > limits.image_max_bytes:
                raise ToolError(
                    f"{shown}: image of {st.st_size} bytes is over the "
                    f"{limits.image_max_bytes}-byte limit"
                )
            return self._image(f.read(limits.image_max_bytes + 1), shown, mime, limits)
        if is_binary(head):
            raise ToolError(
                f"{shown}: binary file ({st.st_size} bytes); read returns only text and images"
            )
        if offset < 0:  # from the end: only the bytes after that line are read
            bound = limits.inline_read_max_bytes if on_loop else None
            start, whole = _line_start_from_end(f, -offset, bound)
            f.seek(start)
            if whole:
                offset = 1  # no more lines than asked for: from line 1, numbered as usual
        else:
            skipped = _skip_lines(f, offset - 1)
            if skipped < offset - 1 or (offset > 1 and not f.peek(1)):
                if skipped == 0:
                    return ToolResult([text_block(f"{shown}: (empty file)")])
                raise ToolError(f"{shown}: has {skipped} lines; offset {offset} is past the end")
        # Enough bytes for the longest line that can be shown (4 bytes per character at most).
        budget = limits.read_line_max_chars * 4 + 2
        number, out, more = self._take(_bounded_lines(f, offset, budget), offset, limit, limits)
        return ToolResult([text_block(self._format(out, number, more, shown, offset))])

    @staticmethod
    def _take(
        numbered: Any, offset: int, limit: int, limits: Any
    ) -> tuple[int, list[str], bool | str]:
        """Numbered lines from ``offset`` up to the line and byte caps."""
        out: list[str] = []
        size = 0
        number = 0
        more: bool | str = False
        max_chars = limits.read_line_max_chars
        for number, raw in numbered:
            if number < offset:
                continue
            if raw is STOP or len(out) >= limit or size >= limits.read_max_bytes:
                more = "unread" if raw is STOP else True
                number -= 1
                break
            if isinstance(raw, _Cut):
                line = f"{raw.text[:max_chars]}… [line cut: over {raw.text_len} characters]"
            else:
                line = raw.rstrip("\r\n")
                if len(line) > max_chars:
                    line = f"{line[:max_chars]}… [line cut: {len(line)} characters]"
            text = f"{number:5d}\t{line}"
            out.append(text)
            size += len(text) + 1
        return number, out, more

    @staticmethod
    def _format(out: list[str], number: int, more: bool | str, shown: str, offset: int) -> str:
        if not out:
            if number == 0:
                return f"{shown}: (empty file)"
            raise ToolError(f"{shown}: has {number} lines; offset {offset} is past the end")
        body = "\n".join(out)
        nxt = offset + len(out)
        if nxt == 0:  # counted from the end, and the last line was shown: nothing follows
            if more == "unread":
                body += "\n… the rest of line -1 (the last line) was not read"
        elif more == "unread":
            body += f"\n… the rest of line {nxt - 1} was not read; continue with offset={nxt}"
        elif more:
            body += f"\n… more lines follow; continue with offset={nxt}"
        return body


def _take_plain(
    lines: list[str], offset: int, limit: int, limits: Any, returns: bool = True
) -> tuple[int, list[str], bool | str] | None:
    """:meth:`ReadTool._take`'s answer for a small file read from a positive offset when no line
    is cut and the byte cap is not reached before the last line; else None.

    Why: the lines to show are one slice, numbered in one comprehension, instead of a
    loop testing every cap for every line (the read of a small file spent more time
    there than anywhere else in the tool). ``returns``: the text holds a carriage return
    (only then can a line end with one to strip).
    """
    start = offset - 1
    taken = lines[start : start + limit]
    if not taken or limit < 1 or max(map(len, taken)) > limits.read_line_max_chars:
        return None
    if returns:
        ends = "\r\n"
        out = [f"{n:5d}\t{line.rstrip(ends)}" for n, line in enumerate(taken, offset)]
    else:
        out = [f"{n:5d}\t{line}" for n, line in enumerate(taken, offset)]
    size = sum(map(len, out)) + len(out)
    if size - len(out[-1]) - 1 >= limits.read_max_bytes:
        return None  # the byte cap stops it before the last line: the loop knows where
    return offset + len(out) - 1, out, start + len(out) < len(lines)


BLOCK = 1 << 16


def _check_offset(args: dict[str, Any]) -> None:
    """The schema allows any integer (a ``not`` would cost every call the slow validator);
    0 is the one that names no line."""
    if args.get("offset") == 0:
        raise ToolError(
            "invalid arguments for 'read': field 'offset': 0 is not a line number "
            "(1 is the first line, -1 the last)"
        )


class _Offload(Exception):
    """The file opened on the loop turned out large or hard-linked: read it in a thread."""


class _Cut:
    """A line longer than can be shown: its head, and how many characters that head has."""

    __slots__ = ("text", "text_len")

    def __init__(self, text: str) -> None:
        self.text = text
        self.text_len = len(text)


SKIP_BLOCK = 1 << 20


def _skip_lines(f: Any, n: int) -> int:
    """Move ``f`` past ``n`` newlines by counting them in binary blocks; returns how many
    lines were passed (fewer at end of file, a last line without newline included). Memory:
    one block."""
    passed = 0
    partial = False
    while passed < n:
        block = f.read(SKIP_BLOCK)
        if not block:
            return passed + partial
        count = block.count(b"\n")
        if passed + count < n:
            passed += count
            partial = not block.endswith(b"\n")
            continue
        pos = -1
        for _ in range(n - passed):
            pos = block.index(b"\n", pos + 1)
        f.seek(pos + 1 - len(block), os.SEEK_CUR)
        passed = n
    return passed


def _line_start_from_end(f: Any, k: int, bound: int | None = None) -> tuple[int, bool]:
    """Where line ``-k`` starts (``-1``: the last line), found by counting newlines backwards
    from the end in :data:`BLOCK`-sized reads: the cost is the bytes between that line and the
    end, never the file's size. The newline that ends the last line does not start a line.
    Returns ``(0, True)`` when the file has no more than ``k`` lines. Memory: one block.
    ``bound``: raise :class:`_Offload` rather than look further back than that many bytes."""
    end = f.seek(0, os.SEEK_END)
    floor = 0 if bound is None else end - bound
    if end:
        f.seek(end - 1)
        if f.read(1) == b"\n":
            end -= 1
    need = k  # newlines still to pass, going backwards
    pos = end
    while pos > 0:
        if pos <= floor:
            raise _Offload
        step = min(BLOCK, pos)
        pos -= step
        f.seek(pos)
        block = f.read(step)
        count = block.count(b"\n")
        if count >= need:
            i = len(block)
            for _ in range(need):
                i = block.rindex(b"\n", 0, i)
            return pos + i + 1, False
        need -= count
    return 0, True


# How far past a cut line the read looks for the next line before it stops and lets the next
# call skip there by offset (so a 1 GB one-line file costs one block, not a 1 GB scan).
SKIP_BUDGET = 1 << 20


def _skip_rest_of_line(f: Any) -> bool | None:
    """Advance past the next newline: True, False at end of file, None when it is further
    than :data:`SKIP_BUDGET` away."""
    budget = SKIP_BUDGET
    while budget > 0:
        block = f.peek(BLOCK)
        if not block:
            return False
        i = block.find(b"\n")
        if i >= 0:
            f.read(i + 1)
            return True
        f.read(len(block))
        budget -= len(block)
    return None


STOP = object()  # more lines follow, but the next call should skip to them by offset


def _bounded_lines(f: Any, first: int, budget: int) -> Any:
    """Yield (number, line) from the current position; a line over ``budget`` bytes becomes a
    :class:`_Cut` of its head, and its rest is skipped only if another line is asked for."""
    number = first
    while True:
        raw = f.readline(budget)
        if not raw:
            return
        if raw.endswith(b"\n") or len(raw) < budget:
            yield number, raw.decode("utf-8", "replace")
        else:
            yield number, _Cut(raw.decode("utf-8", "replace"))
            found = _skip_rest_of_line(f)
            if found is None:
                yield number + 1, STOP
            if not found:
                return
        number += 1

"""``read``, ``write``, ``edit`` and ``ls``: the file tools a remote coding agent expects.

Blocking file work runs in a worker thread so the bridge loop keeps answering ``ping``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from typing import Any

from .. import safeopen
from ..paths import CallPaths, PathPolicy
from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult, image_block, text_block
from .fileio import SNIFF_BYTES, atomic_write, image_type, io_error, is_binary
from .walkpolicy import EntryGate, shown_name

READ_ONLY = {
    "readOnlyHint": True,
    "destructiveHint": False,
    "idempotentHint": True,
    "openWorldHint": False,
}

PATH_FIELD = {
    "type": "string",
    "minLength": 1,
    "description": "File path: absolute, ~-relative, or relative to the bridge's first root.",
}


class ReadTool(Tool):
    name = "read"
    description = (
        "Read a text file from the bridge machine. Returns numbered lines "
        "('   12\\tcontent'); use offset/limit to page through long files (the result says "
        "which offset to continue from). Images (PNG, JPEG, GIF, WebP) come back as an image. "
        "Binary files are refused."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_FIELD,
            "offset": {
                "type": "integer",
                "minimum": 1,
                "description": "1-based number of the first line to return (default 1).",
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
        path = ctx.resolve(args["path"])
        st = _prestat(ctx, path, args["path"])
        # Small regular files are read on the loop; a hard-linked one goes to a thread, where
        # the protected-file identities may be refreshed.
        if (
            stat.S_ISREG(st.st_mode)
            and st.st_size <= ctx.limits.inline_read_max_bytes
            and st.st_nlink == 1
        ):
            try:
                return self._read(args, ctx, path, on_loop=True)
            except _Offload:
                pass  # what was opened is not a small single-linked file after all
        return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args["path"])
        st = _prestat(ctx, path, args["path"])
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{args['path']}: is a directory (use ls)")
        return await asyncio.to_thread(self._read, args, ctx, path)

    def _read(
        self, args: dict[str, Any], ctx: ToolContext, path: str, on_loop: bool = False
    ) -> ToolResult:
        shown = args["path"]
        limits = ctx.limits
        offset = args.get("offset", 1)
        limit = args.get("limit", limits.read_max_lines)
        fd, st = _open_read(path, shown)
        try:
            if on_loop and (st.st_nlink > 1 or st.st_size > limits.inline_read_max_bytes):
                raise _Offload  # swapped since the check: judge and read it in a thread
            judge_opened(ctx, path, st, shown, refresh=not on_loop)
            if st.st_size <= limits.inline_read_max_bytes:
                data = _read_upto(fd, limits.inline_read_max_bytes + 1)
                if len(data) <= limits.inline_read_max_bytes:  # one read, one decode
                    return self._small(data, st, shown, offset, limit, limits)
                if on_loop:
                    raise _Offload
                os.lseek(fd, 0, os.SEEK_SET)  # it grew since fstat: stream it
            with open(fd, "rb", buffering=BLOCK, closefd=False) as f:
                return self._stream(f, st, shown, offset, limit, limits)
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
        number, out, more = self._take(enumerate(lines, 1), offset, limit, limits)
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
        self, f: Any, st: os.stat_result, shown: str, offset: int, limit: int, limits: Any
    ) -> ToolResult:
        """A large file in constant memory: the head is sniffed, lines before ``offset`` are
        skipped by counting newlines in binary blocks, and a line is read only up to what can
        be shown (a 1 GB one-line file costs one block, not 1 GB)."""
        head = f.peek(SNIFF_BYTES)[:SNIFF_BYTES]
        mime = image_type(head)
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
        if more == "unread":
            body += f"\n… the rest of line {nxt - 1} was not read; continue with offset={nxt}"
        elif more:
            body += f"\n… more lines follow; continue with offset={nxt}"
        return body


BLOCK = 1 << 16


class _Offload(Exception):
    """The file opened on the loop turned out large or hard-linked: read it in a thread."""


class _Cut:
    """A line longer than can be shown: its head, and how many characters that head has."""

    __slots__ = ("text", "text_len")

    def __init__(self, text: str) -> None:
        self.text = text
        self.text_len = len(text)


def _read_upto(fd: int, n: int) -> bytes:
    chunks = []
    while n > 0:
        chunk = os.read(fd, n)
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


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


def _prestat(ctx: ToolContext, path: str, shown: str) -> os.stat_result:
    """The stat the bridge took when it judged the call (one syscall per call), or a fresh one."""
    st = ctx.policy.stat(path) if isinstance(ctx.policy, CallPaths) else None
    if st is None:
        try:
            st = os.stat(path)
        except OSError as e:
            raise io_error(e, shown) from None
    return st


def _open_read(path: str, shown: str) -> tuple[int, os.stat_result]:
    try:
        return safeopen.open_read(path)
    except safeopen.NotRegular as e:
        if e.what == "is a directory":
            raise ToolError(f"{shown}: is a directory (use ls)") from None
        raise ToolError(f"{shown}: not a regular file") from None
    except safeopen.PathChanged:
        raise ToolError(f"{shown}: {CHANGED}; nothing was read") from None
    except IsADirectoryError:
        raise ToolError(f"{shown}: is a directory (use ls)") from None
    except OSError as e:
        raise io_error(e, shown) from None


CHANGED = "the path changed after it was checked (a symbolic link appeared)"


def judge_opened(
    ctx: ToolContext,
    real: str,
    st: os.stat_result,
    shown: str,
    *,
    write: bool = False,
    refresh: bool = True,
) -> None:
    """What was opened must be what was judged (and, for an approved call, what the human saw).

    The open followed no symlink, so the path is ``real``; its identity (device+inode) may
    still reveal a hard link to a protected file, or a file swapped in since the check.
    """
    paths = ctx.policy
    policy: PathPolicy = paths.policy if isinstance(paths, CallPaths) else paths
    pre = paths.stat(real) if isinstance(paths, CallPaths) else None
    same = pre is not None and (pre.st_dev, pre.st_ino) == (st.st_dev, st.st_ino)
    if ctx.approved and pre is not None and not same:
        raise ToolError(f"{shown}: changed after it was approved; nothing was done (call again)")
    if same and (st.st_nlink == 1 or not refresh):
        return  # the very file the bridge judged (path and identity) before the call ran
    esc = policy.judge_opened(real, st, write=write, refresh=refresh)
    if esc is not None and esc != ctx.escalation:
        raise ToolError(
            f"{shown}: {esc.text}; it needs a human decision (call again to ask for one)"
        )


class WriteTool(Tool):
    name = "write"
    description = (
        "Create or overwrite a file with the given text. The write is atomic (a reader sees "
        "the old or the new file, never half), parent directories are created, and an "
        "existing file keeps its permissions."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_FIELD,
            "content": {"type": "string", "description": "The complete new file content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    annotations = {
        "title": "Write file",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    }
    default_tier = Tier.PROMPT
    path_args = ("path",)
    writes = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._write, args, ctx)

    def _write(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        data = args["content"].encode("utf-8", "surrogatepass")
        if len(data) > ctx.limits.write_max_bytes:
            raise ToolError(
                f"{shown}: content of {len(data)} bytes is over the "
                f"{ctx.limits.write_max_bytes}-byte limit"
            )
        path = ctx.resolve(shown)
        existed = safe_write(path, data, shown)
        what = "replaced" if existed else "created"
        return ToolResult.text(f"wrote {len(data)} bytes to {shown} ({what})")


class EditTool(Tool):
    name = "edit"
    description = (
        "Replace an exact string in a text file. old_string must match exactly (whitespace "
        "included) and be unique in the file unless replace_all is true; include enough "
        "surrounding lines to make it unique. The file is rewritten atomically."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_FIELD,
            "old_string": {
                "type": "string",
                "minLength": 1,
                "description": "The exact text to replace.",
            },
            "new_string": {"type": "string", "description": "The replacement text."},
            "replace_all": {
                "type": "boolean",
                "description": "Replace every occurrence instead of requiring exactly one.",
            },
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    annotations = {
        "title": "Edit file",
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": False,
        "openWorldHint": False,
    }
    default_tier = Tier.PROMPT
    path_args = ("path",)
    writes = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._edit, args, ctx)

    def _edit(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        old, new = args["old_string"], args["new_string"]
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        path = ctx.resolve(shown)
        fd, st = _open_read(path, shown)
        try:
            judge_opened(ctx, path, st, shown, write=True)
            if st.st_size > ctx.limits.write_max_bytes:
                raise ToolError(
                    f"{shown}: file of {st.st_size} bytes is over the "
                    f"{ctx.limits.write_max_bytes}-byte limit"
                )
            raw = _read_upto(fd, ctx.limits.write_max_bytes + 1)
        except OSError as e:
            raise io_error(e, shown) from None
        finally:
            os.close(fd)
        if is_binary(raw[:SNIFF_BYTES]):
            raise ToolError(f"{shown}: binary file; edit works on text files only")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{shown}: not valid UTF-8; edit works on UTF-8 text only") from None
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string not found in {shown}")
        if count > 1 and not args.get("replace_all", False):
            raise ToolError(
                f"old_string occurs {count} times in {shown}; add surrounding context to make "
                "it unique, or set replace_all to replace every occurrence"
            )
        updated = text.replace(old, new)
        safe_write(path, updated.encode("utf-8"), shown)
        return ToolResult.text(f"replaced {count} occurrence{'s' if count > 1 else ''} in {shown}")


def safe_write(path: str, data: bytes, shown: str) -> bool:
    """Atomically replace the file at the real ``path``: its parent is opened (and missing
    parents made) without following any symlink, and the temp file is renamed inside it."""
    if not safeopen.WRITE_AT_SUPPORTED:  # Windows: no dir_fd; verify the parent instead
        parent = os.path.dirname(path)
        if os.path.realpath(parent) != parent and os.path.exists(parent):
            raise ToolError(f"{shown}: {CHANGED}; nothing was written")
        try:
            return atomic_write(path, data)
        except OSError as e:
            raise io_error(e, shown) from None
    parent, name = os.path.split(path)
    try:
        dfd = safeopen.open_dir(parent, create=True)
    except safeopen.PathChanged:
        raise ToolError(f"{shown}: {CHANGED}; nothing was written") from None
    except NotADirectoryError:
        raise ToolError(f"{shown}: a parent is not a directory") from None
    except OSError as e:
        raise io_error(e, shown) from None
    try:
        return safeopen.replace_in(dfd, name, data, path)
    except safeopen.PathChanged:
        raise ToolError(f"{shown}: {CHANGED}; nothing was written") from None
    except safeopen.NotRegular:
        raise ToolError(f"{shown}: not a regular file") from None
    except OSError as e:
        raise io_error(e, shown) from None
    finally:
        os.close(dfd)


class LsTool(Tool):
    name = "ls"
    description = (
        "List a directory: one entry per line with its kind (dir, file, link), size in "
        "bytes and name; directories end with '/', links show their target. Sorted by name."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": {
                **PATH_FIELD,
                "description": "Directory to list (default: the bridge's first root).",
            }
        },
        "additionalProperties": False,
    }
    annotations = {"title": "List directory", **READ_ONLY}
    default_tier = Tier.ALLOW
    path_args = ("path",)
    default_paths = {"path": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await pools.run(pools.Pool.FILE, self._ls, args, ctx)

    def _ls(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        """Each entry is judged by the path policy (a link also by where it points); links
        are listed as links, never followed."""
        shown = args.get("path") or ctx.policy.roots[0]
        path = ctx.resolve(args.get("path"))
        cap = ctx.limits.list_max_entries
        try:
            with os.scandir(path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except NotADirectoryError:
            raise ToolError(f"{shown}: not a directory (use read)") from None
        except OSError as e:
            raise io_error(e, shown) from None
        gate = EntryGate.for_base(ctx.policy, path)
        lines = []
        listed = 0
        for entry in entries:
            name = shown_name(entry.name)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                st = None
            if gate.refuses(entry.path, st):
                continue
            try:
                if st is not None and stat.S_ISLNK(st.st_mode):
                    target = os.readlink(entry.path)
                    if gate.refuses(os.path.realpath(entry.path)):
                        continue
                    line = f"link  {'-':>10}  {name} -> {shown_name(target)}"
                elif st is not None and stat.S_ISDIR(st.st_mode):
                    line = f"dir   {'-':>10}  {name}/"
                elif st is not None:
                    line = f"file  {st.st_size:>10}  {name}"
                else:
                    line = f"?     {'-':>10}  {name}"
            except OSError:
                line = f"?     {'-':>10}  {name}"
            listed += 1
            if listed <= cap:
                lines.append(line)
        note = gate.note()
        if not listed:
            text = f"{shown}: (empty directory)"
            return ToolResult.text(f"{text}\n{note}" if note else text)
        if listed > cap:
            lines.append(f"… {listed - cap} more entries not shown")
        if note:
            lines.append(note)
        return ToolResult.text("\n".join(lines))

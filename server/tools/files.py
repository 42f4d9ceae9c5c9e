"""``read``, ``write``, ``edit`` and ``ls``: the file tools a remote coding agent expects.

Blocking file work runs in a worker thread so the bridge loop keeps answering ``ping``.
"""

from __future__ import annotations

import asyncio
import base64
import os
import stat
from typing import Any

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
    default_tier = "allow"
    path_args = ("path",)

    def run_now(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult | None:
        path = ctx.resolve(args["path"])
        try:
            st = os.stat(path)
        except OSError as e:
            raise io_error(e, args["path"]) from None
        if stat.S_ISREG(st.st_mode) and st.st_size <= ctx.limits.inline_read_max_bytes:
            return self._read(args, ctx, path, st)
        return None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        path = ctx.resolve(args["path"])
        try:
            st = os.stat(path)
        except OSError as e:
            raise io_error(e, args["path"]) from None
        return await asyncio.to_thread(self._read, args, ctx, path, st)

    def _read(
        self, args: dict[str, Any], ctx: ToolContext, path: str, st: os.stat_result
    ) -> ToolResult:
        shown = args["path"]
        limits = ctx.limits
        offset = args.get("offset", 1)
        limit = args.get("limit", limits.read_max_lines)
        try:
            if stat.S_ISDIR(st.st_mode):
                raise ToolError(f"{shown}: is a directory (use ls)")
            if not stat.S_ISREG(st.st_mode):
                # A FIFO or device would block the read forever.
                raise ToolError(f"{shown}: not a regular file")
            with open(path, "rb") as f:
                small = st.st_size <= limits.inline_read_max_bytes
                data = f.read() if small else b""  # small files: one read, one decode
                head = data[:SNIFF_BYTES] if small else f.read(SNIFF_BYTES)
                mime = image_type(head)
                if mime is not None:
                    if st.st_size > limits.image_max_bytes:
                        raise ToolError(
                            f"{shown}: image of {st.st_size} bytes is over the "
                            f"{limits.image_max_bytes}-byte limit"
                        )
                    data = data if small else head + f.read()
                    return ToolResult([image_block(base64.b64encode(data).decode(), mime)])
                if is_binary(head):
                    raise ToolError(
                        f"{shown}: binary file ({st.st_size} bytes); read returns only text "
                        "and images"
                    )
                if small:
                    lines: Any = data.decode("utf-8", "replace").split("\n")
                    if lines[-1] == "":
                        lines.pop()  # the newline that ends the last line
                else:
                    f.seek(0)
                    lines = (raw.decode("utf-8", "replace") for raw in f)
                text = self._lines(lines, shown, offset, limit, limits)
                return ToolResult([text_block(text)])
        except IsADirectoryError:
            raise ToolError(f"{shown}: is a directory (use ls)") from None
        except OSError as e:
            raise io_error(e, shown) from None

    @staticmethod
    def _lines(lines: Any, shown: str, offset: int, limit: int, limits: Any) -> str:
        out: list[str] = []
        size = 0
        number = 0
        more = False
        max_chars = limits.read_line_max_chars
        for raw in lines:
            number += 1
            if number < offset:
                continue
            if len(out) >= limit or size >= limits.read_max_bytes:
                more = True
                break
            line = raw.rstrip("\r\n")
            if len(line) > max_chars:
                line = f"{line[:max_chars]}… [line cut: {len(line)} characters]"
            text = f"{number:5d}\t{line}"
            out.append(text)
            size += len(text) + 1
        if not out:
            if number == 0:
                return f"{shown}: (empty file)"
            raise ToolError(f"{shown}: has {number} lines; offset {offset} is past the end")
        body = "\n".join(out)
        if more:
            nxt = offset + len(out)
            body += f"\n… more lines follow; continue with offset={nxt}"
        return body


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
    default_tier = "prompt"
    path_args = ("path",)

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
        try:
            existed = atomic_write(path, data)
        except OSError as e:
            raise io_error(e, shown) from None
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
    default_tier = "prompt"
    path_args = ("path",)

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._edit, args, ctx)

    def _edit(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        old, new = args["old_string"], args["new_string"]
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        path = ctx.resolve(shown)
        try:
            if os.path.exists(path) and not os.path.isfile(path):
                raise ToolError(f"{shown}: not a regular file")
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise io_error(e, shown) from None
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
        try:
            atomic_write(path, updated.encode("utf-8"))
        except OSError as e:
            raise io_error(e, shown) from None
        return ToolResult.text(f"replaced {count} occurrence{'s' if count > 1 else ''} in {shown}")


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
    default_tier = "allow"
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

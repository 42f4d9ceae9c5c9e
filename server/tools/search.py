"""``find`` (glob for paths) and ``grep`` (regex in files), both skipping noise directories."""

from __future__ import annotations

import asyncio
import os
import re
import stat
from typing import Any

from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import SNIFF_BYTES, glob_regex, io_error, is_binary, walk_files
from .files import READ_ONLY

WALK_LIMIT = 200_000
MATCH_TEXT_MAX = 300

DIR_FIELD = {
    "type": "string",
    "minLength": 1,
    "description": "Directory to search (default: the bridge's first root).",
}


def _base_dir(args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
    shown = args.get("path") or ctx.policy.roots[0]
    base = ctx.resolve(args.get("path"))
    if not os.path.exists(base):
        raise ToolError(f"{shown}: not found")
    return base, shown


class FindTool(Tool):
    name = "find"
    description = (
        "Find files and directories by glob pattern under a directory. '**' matches any "
        "depth, '*' and '?' match within one name; a pattern without '/' matches names at "
        "any depth (e.g. '*.py', 'src/**/test_*.py'). Skips .git, node_modules, __pycache__ "
        "and .venv. Paths are relative to the searched directory; directories end with '/'."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern."},
            "path": DIR_FIELD,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    annotations = {"title": "Find files", **READ_ONLY}
    default_tier = "allow"
    path_args = ("path",)
    default_paths = {"path": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return await asyncio.to_thread(self._find, args, ctx)

    def _find(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        base, shown = _base_dir(args, ctx)
        if not os.path.isdir(base):
            raise ToolError(f"{shown}: not a directory")
        rx = glob_regex(args["pattern"])
        cap = ctx.limits.find_max_results
        found: list[str] = []
        total = 0
        cut = False
        for item in walk_files(base, WALK_LIMIT):
            if item is None:
                cut = True
                break
            rel, _abs, is_dir = item
            if rx.match(rel):
                total += 1
                if len(found) < cap:
                    found.append(rel + "/" if is_dir else rel)
        if not found:
            text = f"no paths under {shown} match {args['pattern']!r}"
        else:
            text = "\n".join(sorted(found))
            if total > cap:
                text += f"\n… {total - cap} more matches not shown; narrow the pattern"
        if cut:
            text += f"\n… stopped after {WALK_LIMIT} entries; search a smaller directory"
        return ToolResult.text(text)


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents with a Python regular expression. Returns 'file:line:text' "
        "lines, paths relative to the searched directory. 'path' may be a directory or one "
        "file; 'glob' filters file names (e.g. '*.py'). Skips binary files, very large files, "
        ".git, node_modules, __pycache__ and .venv."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Python regular expression (re module syntax).",
            },
            "path": {**DIR_FIELD, "description": "Directory or file to search (default: root)."},
            "glob": {
                "type": "string",
                "minLength": 1,
                "description": "Only search files whose path matches this glob.",
            },
            "ignore_case": {"type": "boolean", "description": "Case-insensitive matching."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    annotations = {"title": "Search file contents", **READ_ONLY}
    default_tier = "allow"
    path_args = ("path",)
    default_paths = {"path": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        try:
            rx = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as e:
            raise ToolError(f"invalid regex {args['pattern']!r}: {e}") from None
        return await asyncio.to_thread(self._grep, rx, args, ctx)

    def _grep(self, rx: re.Pattern[str], args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        base, shown = _base_dir(args, ctx)
        file_glob = glob_regex(args["glob"]) if args.get("glob") else None
        limits = ctx.limits
        cap = limits.grep_max_matches
        if os.path.isfile(base):
            files: Any = [(os.path.basename(base), base, False)]
        else:
            files = walk_files(base, WALK_LIMIT)
        out: list[str] = []
        total = 0
        skipped = 0
        cut = False
        for item in files:
            if item is None:
                cut = True
                break
            rel, path, is_dir = item
            if is_dir or (file_glob is not None and not file_glob.match(rel)):
                continue
            try:
                st = os.stat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue  # FIFOs and devices would block
                if st.st_size > limits.grep_max_file_bytes:
                    skipped += 1
                    continue
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:
                if os.path.isfile(base):
                    raise io_error(e, shown) from None
                continue
            if is_binary(data[:SNIFF_BYTES]):
                continue
            text = data.decode("utf-8", "replace")
            for number, line in enumerate(text.splitlines(), 1):
                if rx.search(line):
                    total += 1
                    if len(out) < cap:
                        if len(line) > MATCH_TEXT_MAX:
                            line = line[:MATCH_TEXT_MAX] + "…"
                        out.append(f"{rel}:{number}:{line}")
        result = "\n".join(out) if out else f"no matches for {args['pattern']!r} in {shown}"
        if total > cap:
            result += f"\n… {total - cap} more matches not shown; narrow the pattern or path"
        if skipped:
            result += f"\n({skipped} file(s) over {limits.grep_max_file_bytes} bytes skipped)"
        if cut:
            result += f"\n… stopped after {WALK_LIMIT} entries; search a smaller directory"
        return ToolResult.text(result)

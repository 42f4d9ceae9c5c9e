"""``grep``: a regex in files, on ripgrep, with every file that yields output judged first.

``rg`` runs in the search pool as its own process group (killed on cancel, timeout and
shutdown) with the same walk switches as ``find`` (:mod:`server.tools.search`); its
``path NUL line`` records are parsed as they stream, the first matches shown and the rest only
counted, so a huge result never sits in memory.
"""

from __future__ import annotations

import collections
import functools
import itertools
import os
import re
import stat
from dataclasses import dataclass, field
from typing import Any

from ..vocab import Tier
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import io_error
from .files import READ_ONLY
from .rg import BASE_ARGS, RgRun, require_rg, rg_error
from .search import DIR_FIELD, WALK_SWITCHES, base_dir, run_rg, start_rg, walk_args
from .walkpolicy import EntryGate, shown_bytes

MATCH_TEXT_MAX = 300
# Past the shown cap, matches are still counted (cheaply) up to this many, then rg is stopped.
COUNT_LIMIT = 100_000
# rg cuts longer lines itself (in bytes), so one huge line never crosses the pipe whole.
RG_MAX_COLUMNS = 4 * MATCH_TEXT_MAX


def _rg_failure(code: int, err: str, args: dict[str, Any]) -> ToolError:
    text = rg_error(err)
    if "regex" in text:
        return ToolError(f"invalid regex {args.get('pattern')!r}: {text}")
    if "glob" in text:
        return ToolError(f"invalid glob {args.get('glob')!r}: {text}")
    return ToolError(f"search failed: {text}")


class GrepTool(Tool):
    name = "grep"
    description = (
        "Search file contents with a regular expression (ripgrep; Rust regex syntax: no "
        "look-around or backreferences, linear time). Returns 'file:line:text' lines, paths "
        "relative to the searched directory. 'path' may be a directory or one file; 'glob' "
        "filters file names (e.g. '*.py', 'src/**/*.ts'). Like ripgrep it skips binary files, "
        "hidden files, files ignored by .gitignore, node_modules, __pycache__ and .venv (switch "
        "'hidden' and 'no_ignore' to include them); .git is always skipped and symlinks are "
        "not followed. UTF-16 files with a BOM are searched as text."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {
                "type": "string",
                "minLength": 1,
                "description": "Regular expression in Rust regex syntax (as ripgrep).",
            },
            "path": {**DIR_FIELD, "description": "Directory or file to search (default: root)."},
            "glob": {
                "type": "string",
                "minLength": 1,
                "description": "Only search files whose path matches this glob.",
            },
            "ignore_case": {"type": "boolean", "description": "Case-insensitive matching."},
            **WALK_SWITCHES,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    annotations = {"title": "Search file contents", **READ_ONLY}
    default_tier = Tier.ALLOW
    path_args = ("path",)
    default_paths = {"path": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        run = RgRun([], "")
        got: _GrepMatches = await run_rg(run, functools.partial(self._grep, args, ctx), ctx)
        if got.code == 2 and not got.out and got.err.strip():
            raise _rg_failure(got.code, got.err, args)
        return ToolResult.text(got.text(args["pattern"], got.shown, run.timed_out, ctx))

    def _grep(self, args: dict[str, Any], ctx: ToolContext, run: RgRun) -> _GrepMatches:
        """In a search-pool thread: build the rg command, run it, parse its output."""
        base, shown = base_dir(args, ctx)
        try:
            mode = os.stat(base).st_mode
        except OSError as e:
            raise io_error(e, shown) from None
        single = not stat.S_ISDIR(mode)
        if single and not stat.S_ISREG(mode):
            raise ToolError(f"{shown}: not a regular file")  # a FIFO or device would block rg
        gate = EntryGate.for_base(ctx.policy, base)
        if single:
            cwd, target = os.path.dirname(base), "./" + os.path.basename(base)
        else:
            cwd, target = base, "."
        argv: list[str | bytes] = [require_rg(), *BASE_ARGS, "--null", "--line-number"]
        argv += ["--with-filename", "--no-heading", "--max-columns", str(RG_MAX_COLUMNS)]
        argv += ["--max-columns-preview"]
        if args.get("ignore_case"):
            argv.append("--ignore-case")
        if not single:
            if args.get("glob"):
                # The caller's glob first: rg gives later globs precedence, so the exclusions
                # that follow cannot be overridden by it.
                argv += ["--glob", args["glob"]]
            argv += walk_args(args, gate)
        argv += ["--regexp", args["pattern"], "--", target]
        run.argv, run.cwd = argv, cwd
        start_rg(run)
        matches = _GrepMatches(gate, cwd, single, ctx.limits.grep_max_matches, shown)
        return matches.collect(run)


_RECORD_PATH = re.compile(rb"(?m)^([^\0\n]*)\0")  # the path of each ``path NUL line`` record


@dataclass(slots=True)
class _GrepMatches:
    """Parses ``rg --null --line-number`` output: ``path NUL line:text LF`` per match."""

    gate: EntryGate
    cwd: str
    single: bool
    cap: int
    shown: str
    out: list[tuple[str, int, str]] = field(default_factory=list)
    total: int = 0
    stopped: bool = False  # we stopped counting at COUNT_LIMIT and killed rg
    binary: bool = False  # a file named directly is binary
    code: int = 0
    err: str = ""

    def collect(self, run: RgRun) -> _GrepMatches:
        """Parse until ``cap`` matches are kept, then only count (each record has exactly one
        NUL, so a block's ``count(b"\\0")`` is its number of records: no Python loop per
        match holds the GIL while the event loop wants it)."""
        buf = b""
        cur_path: bytes | None = None
        cur_ok = False
        cur_shown = ""
        chunks = run.chunks()
        try:
            for block in chunks:
                buf = buf + block if buf else block
                pos = 0
                n = len(buf)
                while pos < n and len(self.out) < self.cap:
                    z = buf.find(b"\0", pos)
                    if self.single:
                        nl = buf.find(b"\n", pos)
                        if nl != -1 and (z == -1 or nl < z):
                            # "path: binary file matches (...)": rg's note for a named file
                            self.binary = True
                            pos = nl + 1
                            continue
                    if z == -1:
                        break
                    nl = buf.find(b"\n", z)
                    if nl == -1:
                        break
                    path = buf[pos:z]
                    if path != cur_path:
                        cur_path = path
                        cur_ok, cur_shown = self._judge(path)
                    if cur_ok:
                        self.total += 1
                        self._keep(cur_shown, buf[z + 1 : nl])
                    pos = nl + 1
                buf = buf[pos:]
                if len(self.out) >= self.cap:
                    self._count_rest(buf, chunks, run)
                    break
        finally:
            run.kill()
            self.code, self.err = run.finish()
        return self

    def _count_rest(self, buf: bytes, chunks: Any, run: RgRun) -> None:
        """Past the cap: count the remaining records up to COUNT_LIMIT, then stop rg. Their
        names and lines are never shown, but each *file* is still judged (once): a left-out
        file must not count, or the total would tell whether a secret matched the regex.
        The records' paths are found and tallied in C (``findall`` + ``Counter``)."""
        limit = self.cap + COUNT_LIMIT
        verdicts: dict[bytes, bool] = {}
        carry = b""
        for block in itertools.chain((buf,), chunks):
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            whole, carry = data[:cut], data[cut:]
            for path, n in collections.Counter(_RECORD_PATH.findall(whole)).items():
                ok = verdicts.get(path)
                if ok is None:
                    ok = verdicts[path] = self._judge(path)[0]
                if ok:
                    self.total += n
            if self.total >= limit:
                self.stopped = True
                run.kill()
                return

    def _judge(self, raw: bytes) -> tuple[bool, str]:
        rel = raw[2:] if raw.startswith(b"./") else raw
        real = os.path.join(self.cwd, os.fsdecode(rel))
        try:
            st: os.stat_result | None = os.lstat(real)
        except OSError:
            st = None
        # Not counted in the closing note: whether a left-out file *matched* is its content.
        if self.gate.refuses(real, st, count=False):
            return False, ""
        return True, shown_bytes(rel)

    def _keep(self, shown: str, rec: bytes) -> None:
        number, _, text = rec.partition(b":")
        line = text.decode("utf-8", "replace").rstrip("\r")
        if len(line) > MATCH_TEXT_MAX:
            line = line[:MATCH_TEXT_MAX] + "…"
        try:
            lineno = int(number)
        except ValueError:
            return
        self.out.append((shown, lineno, line))

    def text(self, pattern: str, shown: str, timed_out: bool, ctx: ToolContext) -> str:
        self.out.sort(key=lambda m: (m[0], m[1]))
        lines = [f"{p}:{n}:{t}" for p, n, t in self.out]
        if lines:
            result = "\n".join(lines)
        elif self.binary:
            result = f"{shown}: binary file matches; grep shows text files only"
        else:
            result = f"no matches for {pattern!r} in {shown}"
        more = self.total - len(self.out)
        if more > 0:
            at_least = "at least " if self.stopped else ""
            result += f"\n… {at_least}{more} more matches not shown; narrow the pattern or path"
        if timed_out:
            result += (
                f"\n… search stopped after {ctx.limits.search_timeout_s:g} s; results are partial"
            )
        note = self.gate.note()
        return f"{result}\n{note}" if note else result

"""``find`` (glob for paths) and ``grep`` (regex in files), both on ripgrep.

``grep`` runs ``rg`` itself; ``find`` lists files with ``rg --files`` (the same walker, so the
same ``.gitignore``/hidden rules and switches) and matches the glob here. Both run in the
search pool; ``rg`` is its own process group and is killed on cancel, timeout and shutdown.
Every file that yields output is judged by the path policy (see ``walkpolicy``); protected
directories are excluded up front with ``--glob`` so ``rg`` never even opens them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from typing import Any

from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import glob_regex, io_error
from .files import READ_ONLY
from .rg import BASE_ARGS, RgRun, glob_escape, require_rg, rg_error
from .walkpolicy import EntryGate, shown_bytes, shown_name

WALK_LIMIT = 200_000
# find derives directories from file paths without stat'ing them; the policy only needs to
# know they are directories (a secret-looking *name* judges files, not directories).
DIR_STAT = os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 0, 0, 0, 0, 0, 0, 0))
FS_DECODE = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
MATCH_TEXT_MAX = 300
# Past the shown cap, matches are still counted (cheaply) up to this many, then rg is stopped.
COUNT_LIMIT = 100_000
# rg cuts longer lines itself (in bytes), so one huge line never crosses the pipe whole.
RG_MAX_COLUMNS = 4 * MATCH_TEXT_MAX
# Noise directories skipped unless the caller asks for ignored files (VCS internals always).
NOISE_GLOBS = ("!node_modules", "!__pycache__", "!.venv", "!.tox")
VCS_GLOBS = ("!.git", "!.hg", "!.svn")

DIR_FIELD = {
    "type": "string",
    "minLength": 1,
    "description": "Directory to search (default: the bridge's first root).",
}
WALK_SWITCHES = {
    "hidden": {
        "type": "boolean",
        "description": "Also search hidden files and directories (names starting with '.').",
    },
    "no_ignore": {
        "type": "boolean",
        "description": "Also search files excluded by .gitignore/.ignore, and node_modules, "
        "__pycache__, .venv.",
    },
}


def _base_dir(args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
    shown = args.get("path") or ctx.policy.roots[0]
    base = ctx.resolve(args.get("path"))
    if not os.path.exists(base):
        raise ToolError(f"{shown}: not found")
    return base, shown


def _walk_args(args: dict[str, Any], gate: EntryGate) -> list[str]:
    """rg switches shared by grep and find: ignore rules, hidden files, pruned directories."""
    hidden = bool(args.get("hidden"))
    no_ignore = bool(args.get("no_ignore"))
    argv = ["--no-require-git"]  # a .gitignore counts even outside a git checkout
    if hidden:
        argv.append("--hidden")
    if no_ignore:
        argv.append("--no-ignore")
    # Hidden names (.git, .venv, ...) are skipped by rg already unless ``hidden``: every
    # extra glob costs rg a match per path, so only pass the ones that can matter.
    vcs = list(VCS_GLOBS) if hidden else []
    noise = [] if no_ignore else [g for g in NOISE_GLOBS if hidden or not g.startswith("!.")]
    globs: list[str] = vcs + noise
    pruned = gate.pruned()
    gate.count_pruned(pruned, hidden=hidden)
    for d in pruned:
        rel = os.path.relpath(d, gate.base).replace(os.sep, "/")
        globs.append("!/" + glob_escape(rel))
    for g in globs:
        argv += ["--glob", g]
    return argv


def _rg_failure(code: int, err: str, args: dict[str, Any]) -> ToolError:
    text = rg_error(err)
    if "regex" in text:
        return ToolError(f"invalid regex {args.get('pattern')!r}: {text}")
    if "glob" in text:
        return ToolError(f"invalid glob {args.get('glob')!r}: {text}")
    return ToolError(f"search failed: {text}")


def _start(run: RgRun) -> None:
    try:
        run.start()
    except ValueError:  # an embedded NUL in an argument
        raise ToolError("pattern, glob and path must not contain NUL characters") from None
    except OSError as e:
        raise ToolError(f"cannot start ripgrep: {e.strerror or e}") from None


async def _run_rg(run: RgRun, collect: Any, ctx: ToolContext) -> Any:
    """Run ``collect(run)`` (which starts ``rg``) in the search pool; kill ``rg`` on cancel or
    timeout (a run killed before it starts never starts).

    On timeout the collector sees EOF once ``rg`` is dead and returns what it has; the result
    then says the search was stopped.
    """
    job = asyncio.ensure_future(pools.run(pools.Pool.SEARCH, collect, run))
    try:
        done, _ = await asyncio.wait({job}, timeout=ctx.limits.search_timeout_s)
        if not done:
            run.timed_out = True
            run.kill()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(job), 10)
            if not job.done():
                raise ToolError("search timed out")
        return job.result()
    except asyncio.CancelledError:
        run.kill()
        job.cancel()
        raise


class FindTool(Tool):
    name = "find"
    description = (
        "Find files and directories by glob pattern under a directory. '**' matches any "
        "depth, '*' and '?' match within one name; a pattern without '/' matches names at "
        "any depth (e.g. '*.py', 'src/**/test_*.py'). Like fd/ripgrep it skips hidden files, "
        "files ignored by .gitignore, node_modules, __pycache__ and .venv (switch 'hidden' and "
        "'no_ignore' to include them); .git is always skipped and symlinks are not followed. "
        "Paths are relative to the searched directory; directories end with '/'."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern."},
            "path": DIR_FIELD,
            **WALK_SWITCHES,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    annotations = {"title": "Find files", **READ_ONLY}
    default_tier = Tier.ALLOW
    path_args = ("path",)
    default_paths = {"path": ""}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if "\0" in args["pattern"]:
            raise ToolError("pattern must not contain NUL characters")
        run = RgRun([], "")
        text: str = await _run_rg(run, functools.partial(self._find, args, ctx), ctx)
        if run.timed_out:
            text += f"\n… search stopped after {ctx.limits.search_timeout_s:g} s; partial list"
        return ToolResult.text(text)

    def _find(self, args: dict[str, Any], ctx: ToolContext, run: RgRun) -> str:
        rx = glob_regex(args["pattern"])
        base, shown = _base_dir(args, ctx)
        if not os.path.isdir(base):
            raise ToolError(f"{shown}: not a directory")
        gate = EntryGate.for_base(ctx.policy, base)
        argv: list[str | bytes] = [require_rg(), *BASE_ARGS, "--files", "--null"]
        argv += _walk_args(args, gate)
        argv += ["--", "."]
        run.argv, run.cwd = argv, base
        _start(run)
        walk = _FindWalk(rx, gate).collect(run)
        return walk.text(args["pattern"], shown, ctx.limits.find_max_results)


@dataclass(slots=True)
class _FindWalk:
    rx: Any
    gate: EntryGate
    files: list[str] = field(default_factory=list)
    dirs: set[str] = field(default_factory=set)
    cut: bool = False

    def collect(self, run: RgRun) -> _FindWalk:
        """Gather rg's NUL-separated list, then split and decode it in one go (a Python loop
        per path costs more than rg's whole walk)."""
        parts: list[bytes] = []
        seen = 0
        try:
            for block in run.chunks():
                parts.append(block)
                seen += block.count(b"\0")
                if seen > WALK_LIMIT:
                    self.cut = True
                    break
        finally:
            run.kill()
            run.finish()
        text = (b"\0" + b"".join(parts)).decode(*FS_DECODE).replace("\0./", "\0")
        files = text.split("\0")[1:]
        if files and files[-1] == "":
            files.pop()
        if self.cut:
            del files[WALK_LIMIT:]
        self.files = files
        # Every ancestor directory of a listed file is an entry too (find matches directories).
        dirs = {f.rpartition("/")[0] for f in files}
        dirs.discard("")
        for d in list(dirs):
            d = d.rpartition("/")[0]
            while d and d not in dirs:
                dirs.add(d)
                d = d.rpartition("/")[0]
        self.dirs = dirs
        return self

    def text(self, pattern: str, shown: str, cap: int) -> str:
        """Sorted matches; the path policy judges them in order until ``cap`` are shown.

        Entries past the cap are counted, not judged (judging costs a few µs per entry, more
        than the walk itself): their names are never shown, so the only effect is that the
        "more matches" count may include some protected entries.
        """
        match = self.rx.match
        gate = self.gate
        matched = [f for f in self.files if match(f)]
        matched += [d + "/" for d in self.dirs if match(d)]
        matched.sort()
        prefix = gate.base.rstrip(os.sep) + os.sep
        found: list[str] = []
        used = 0
        for rel in matched:
            if len(found) >= cap:
                break
            used += 1
            real = prefix + rel.rstrip("/")
            if rel.endswith("/"):
                st: os.stat_result | None = DIR_STAT
            else:
                try:  # the identity too: a hard link to a protected file is that file
                    st = os.lstat(real)
                except OSError:
                    st = None
            if gate.refuses(real, st):
                continue
            found.append(shown_name(rel))
        if not found:
            text = f"no paths under {shown} match {pattern!r}"
        else:
            text = "\n".join(found)
            more = len(matched) - used
            if more > 0:
                text += f"\n… {more} more matches not shown; narrow the pattern"
        if self.cut:
            text += f"\n… stopped after {WALK_LIMIT} entries; search a smaller directory"
        note = gate.note()
        return f"{text}\n{note}" if note else text


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
        got: _GrepMatches = await _run_rg(run, functools.partial(self._grep, args, ctx), ctx)
        if got.code == 2 and not got.out and got.err.strip():
            raise _rg_failure(got.code, got.err, args)
        return ToolResult.text(got.text(args["pattern"], got.shown, run.timed_out, ctx))

    def _grep(self, args: dict[str, Any], ctx: ToolContext, run: RgRun) -> _GrepMatches:
        """In a search-pool thread: build the rg command, run it, parse its output."""
        base, shown = _base_dir(args, ctx)
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
            argv += _walk_args(args, gate)
        argv += ["--regexp", args["pattern"], "--", target]
        run.argv, run.cwd = argv, cwd
        _start(run)
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

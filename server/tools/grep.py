"""``grep``: a regex in files, on ripgrep, with every file that yields output judged first.

``rg`` runs in the search pool as its own process group (killed on cancel, timeout and
shutdown) with the same walk switches as ``find`` (:mod:`server.tools.search`); its
``path NUL line`` records are parsed as they stream, the first matches shown and the rest only
counted, so a huge result never sits in memory (the parser is :mod:`server.tools.searchout`).
"""

from __future__ import annotations

import functools
import os
import stat
from typing import Any

from ..policy.walk import EntryGate
from ..vocab import Tier
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import io_error
from .files import READ_ONLY, judge_opened, open_read
from .rg import BASE_ARGS, RgRun, require_rg, rg_error
from .search import (
    DIR_FIELD,
    WALK_SETUP_TRIES,
    WALK_SWITCHES,
    base_dir,
    box_failed,
    boxed_walk,
    open_base,
    run_rg,
    start_rg,
    walk_again,
    walk_args,
)
from .searchout import MATCH_TEXT_MAX, GrepMatches

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
        got: GrepMatches = await run_rg(run, functools.partial(self._grep, args, ctx), ctx)
        box_failed(run)
        if got.code == 2 and not got.out and got.err.strip():
            raise _rg_failure(got.code, got.err, args)
        timeout_s = ctx.limits.search_timeout_s
        return ToolResult.text(got.text(args["pattern"], run.timed_out, timeout_s))

    def _grep(self, args: dict[str, Any], ctx: ToolContext, run: RgRun) -> GrepMatches:
        """In a search-pool thread: build the rg command, run it, parse its output."""
        base, shown = base_dir(args, ctx)
        try:
            mode = os.stat(base).st_mode
        except OSError as e:
            raise io_error(e, shown) from None
        single = not stat.S_ISDIR(mode)
        gate = EntryGate.for_base(ctx.policy, base)
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
        run.cwd = base
        if single:
            # rg must read the file that was judged, not whatever the name points to when rg
            # gets to it: the bridge opens it (no symlink at any component, never blocking on
            # a FIFO, regular files only), judges what it opened (real path and device+inode:
            # a hard link to a protected file is that file) and hands rg the descriptor as
            # its stdin, searched as "-" (rg names it "<stdin>"; the parser maps it back).
            fd, st = open_read(base, shown)
            if ctx.approved:  # the human saw this file: another one at that path is refused
                try:
                    judge_opened(ctx, base, st, shown)
                except ToolError:
                    os.close(fd)
                    raise
            # (a git config file holding a credential is withheld unless a human approved it)
            if gate.refuses(base, st, count=False) or (
                not ctx.approved and gate.withholds(base, st)
            ):
                os.close(fd)  # left out like a protected file met in a walk: no matches
                return GrepMatches(gate, "", True, 0, shown, label=os.path.basename(base))
            run.stdin, run.cwd = fd, os.path.dirname(base)
        else:
            # rg walks the directory the bridge opened (see ``open_base``).
            fd = run.dir_fd = open_base(base, shown)
        argv = run.argv = [*argv, "--regexp", args["pattern"], "--", "-" if single else "."]
        label = os.path.basename(base) if single else ""
        cap = ctx.limits.grep_max_matches
        try:
            for tries_left in reversed(range(WALK_SETUP_TRIES if not single else 1)):
                if not single:  # a walk runs in the box; one file is the descriptor judged
                    boxed_walk(run, ctx, argv, shown)
                start_rg(run, shown)
                matches = GrepMatches(gate, run.cwd, single, cap, shown, label=label)
                matches.collect(run)
                if not (tries_left and walk_again(run, ctx)):
                    break
        finally:
            os.close(fd)  # rg has its own copy (or never started)
        return matches

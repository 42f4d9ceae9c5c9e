"""``find`` (glob for paths) and what it shares with ``grep`` (:mod:`server.tools.grep`), both
on ripgrep.

``grep`` runs ``rg`` itself; ``find`` lists files with ``rg --files`` (the same walker, so the
same ``.gitignore``/hidden rules and switches) and matches the glob in Python; ``searchout``
parses the output of both under the path policy. Both run in the
search pool; ``rg`` is its own process group and is killed on cancel, timeout and shutdown.
Every file that yields output is judged by the path policy (see ``walkpolicy``); protected
directories are excluded up front with ``--glob`` so ``rg`` never even opens them.

Where a box can be made, a walk's ``rg`` runs in a read-only, offline box with bash's private
masks (:mod:`server.box.edges`), started by the judged path: a folder swapped in mid-walk then
meets the masks. ``grep`` on one file reads the descriptor the bridge judged and is not boxed.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from typing import Any

from ..box.edges import BaseMoved, forget_plan, walk_argv
from ..policy import safeopen
from ..policy.walk import EntryGate
from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import glob_regex, io_error
from .files import READ_ONLY
from .rg import BASE_ARGS, FD_CWD, RgRun, glob_escape, require_rg
from .searchout import FindWalk

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


def base_dir(args: dict[str, Any], ctx: ToolContext) -> tuple[str, str]:
    shown = args.get("path") or ctx.policy.roots[0]
    base = ctx.resolve(args.get("path"))
    if not os.path.exists(base):
        raise ToolError(f"{shown}: not found")
    return base, shown


def walk_args(args: dict[str, Any], gate: EntryGate) -> list[str]:
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


CHANGED = "the path changed after it was checked (a symbolic link appeared); nothing was searched"


def open_base(base: str, shown: str) -> int:
    """The directory a walk starts in, opened with no symlink at any component: ``rg`` runs
    in it (see ``RgRun.dir_fd``), so a directory swapped for a symlink after the call was
    judged is not walked."""
    try:
        return safeopen.open_dir(base)
    except safeopen.PathChanged:
        raise ToolError(f"{shown}: {CHANGED}") from None
    except NotADirectoryError:
        raise ToolError(f"{shown}: not a directory") from None
    except OSError as e:
        raise io_error(e, shown) from None


def start_rg(run: RgRun, shown: str = "") -> None:
    """Start ``rg``; with ``run.dir_fd`` where ``FD_CWD`` is unavailable or ``rg`` is boxed
    (it walks by path), check once it runs that ``run.cwd`` still names that directory (a swap
    and back in between stays possible; in the box the private masks hold whatever is swapped
    in: docs/security/model.md)."""
    try:
        run.start()
    except ValueError:  # an embedded NUL in an argument
        raise ToolError("pattern, glob and path must not contain NUL characters") from None
    except OSError as e:
        raise ToolError(f"cannot start ripgrep: {e.strerror or e}") from None
    if run.dir_fd is None or (FD_CWD and not run.boxed):
        return
    try:
        now = safeopen.open_dir(run.cwd)
        try:
            a, b = os.fstat(now), os.fstat(run.dir_fd)
        finally:
            os.close(now)
        same = (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    except OSError:
        same = False
    if not same:
        run.kill()
        run.finish()
        raise ToolError(f"{shown}: {CHANGED}")


def boxed_walk(run: RgRun, ctx: ToolContext, argv: list[str | bytes], shown: str) -> None:
    """Set ``run.argv`` to ``argv``, run in a read-only, offline box started in ``run.cwd``
    (the path the bridge judged) where one can be made; elsewhere as before the box (rg in
    the descriptor ``run.dir_fd``). Blocking: the search-pool thread plans the box."""
    words = [a if isinstance(a, str) else os.fsdecode(a) for a in argv]
    try:
        boxed = walk_argv(ctx.box, run.cwd, words)
    except BaseMoved:
        raise ToolError(f"{shown}: {CHANGED}") from None
    run.argv, run.boxed = argv, boxed is not None
    if boxed is not None:
        run.argv = [*boxed]


# A walk whose box could not be set up (bubblewrap failed before rg started: a path its plan
# masks went away since) is planned again, this many times in all (rg only reads: a walk run
# again changes nothing); then the walk fails with the box's own error.
WALK_SETUP_TRIES = 3


def walk_again(run: RgRun, ctx: ToolContext) -> bool:
    """After a walk: True when its box could not be set up and it may be tried again (its
    cached plan is dropped, ``run`` reset); False to keep the result as it is."""
    if run.box_error is None or not run.restart():
        return False
    forget_plan(ctx.box, run.cwd)
    return True


def box_failed(run: RgRun) -> None:
    """A box that did not start is an error, not an empty result."""
    if run.box_error is not None:
        raise ToolError(
            f"the box could not be set up (tried {WALK_SETUP_TRIES} times), so ripgrep did "
            f"not run: {run.box_error}. This is the box's setup, not the search: something it "
            "hides changed on the disk while it was being made; call again."
        )


async def run_rg(run: RgRun, collect: Any, ctx: ToolContext) -> Any:
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
            run.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(job), 10)
            if not job.done():
                raise ToolError("search timed out")
        return job.result()
    except asyncio.CancelledError:
        run.stop()
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
        text: str = await run_rg(run, functools.partial(self._find, args, ctx), ctx)
        box_failed(run)
        if run.timed_out:
            text += f"\n… search stopped after {ctx.limits.search_timeout_s:g} s; partial list"
        return ToolResult.text(text)

    def _find(self, args: dict[str, Any], ctx: ToolContext, run: RgRun) -> str:
        glob_regex(args["pattern"])  # a bad pattern fails before rg starts
        base, shown = base_dir(args, ctx)
        if not os.path.isdir(base):
            raise ToolError(f"{shown}: not a directory")
        gate = EntryGate.for_base(ctx.policy, base)
        argv: list[str | bytes] = [require_rg(), *BASE_ARGS, "--files", "--null"]
        argv += walk_args(args, gate)  # no path: rg lists the cwd, names without "./"
        run.cwd, run.dir_fd = base, open_base(base, shown)
        try:
            for tries_left in reversed(range(WALK_SETUP_TRIES)):
                boxed_walk(run, ctx, argv, shown)
                start_rg(run, shown)
                walk = FindWalk(args["pattern"], gate).collect(run)
                if not (tries_left and walk_again(run, ctx)):
                    break
        finally:
            os.close(run.dir_fd)
        return walk.text(shown, ctx.limits.find_max_results)

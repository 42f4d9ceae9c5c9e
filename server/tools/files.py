"""``write``, ``edit`` and ``ls``, and what every file tool shares: the opened-file check and
the safe replace. ``read`` and its bounded line readers are :mod:`server.tools.read`.

Blocking file work runs in a worker thread so the bridge loop keeps answering ``ping``.
"""

from __future__ import annotations

import os
from typing import Any

from ..policy import safeopen
from ..policy.paths import CallPaths, PathPolicy
from ..policy.walk import EntryGate, in_lane, shown_name
from ..present.diffview import (
    DIFF_READ_MAX,
    MISSING_DIGEST,
    Before,
    BeforeState,
    EditProblem,
    apply_edit,
    digest_of,
)
from ..vocab import Tier
from . import pools
from .base import Tool, ToolContext, ToolError, ToolResult
from .fileio import SNIFF_BYTES, atomic_write, io_error, is_binary, read_upto

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


def prestat(ctx: ToolContext, path: str, shown: str) -> os.stat_result:
    """The stat the bridge took when it judged the call (one syscall per call), or a fresh one."""
    st = ctx.policy.stat(path) if isinstance(ctx.policy, CallPaths) else None
    if st is None:
        try:
            st = os.stat(path)
        except OSError as e:
            raise io_error(e, shown) from None
    return st


def open_read(path: str, shown: str) -> tuple[int, os.stat_result]:
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
DASH = f"{'-':>10}"
SCANDIR_FD = os.scandir in os.supports_fd


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
        return await pools.run(pools.Pool.FILE, self._write, args, ctx)

    def _write(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        data = args["content"].encode("utf-8", "surrogatepass")
        if len(data) > ctx.limits.write_max_bytes:
            raise ToolError(
                f"{shown}: content of {len(data)} bytes is over the "
                f"{ctx.limits.write_max_bytes}-byte limit"
            )
        path = ctx.resolve(shown)
        if ctx.approved and ctx.shown_digest is not None:
            before = read_before(path, DIFF_READ_MAX)
            if before.digest != ctx.shown_digest:
                raise ToolError(f"{shown}: {CHANGED_SINCE_SHOWN}")
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
        return await pools.run(pools.Pool.FILE, self._edit, args, ctx)

    def _edit(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        shown = args["path"]
        old, new = args["old_string"], args["new_string"]
        if old == new:
            raise ToolError("old_string and new_string are the same; nothing to change")
        path = ctx.resolve(shown)
        fd, st = open_read(path, shown)
        try:
            judge_opened(ctx, path, st, shown, write=True)
            if st.st_size > ctx.limits.write_max_bytes:
                raise ToolError(
                    f"{shown}: file of {st.st_size} bytes is over the "
                    f"{ctx.limits.write_max_bytes}-byte limit"
                )
            raw = read_upto(fd, ctx.limits.write_max_bytes + 1)
        except OSError as e:
            raise io_error(e, shown) from None
        finally:
            os.close(fd)
        unchanged_since_shown(ctx, raw, shown)
        if is_binary(raw[:SNIFF_BYTES]):
            raise ToolError(f"{shown}: binary file; edit works on text files only")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ToolError(f"{shown}: not valid UTF-8; edit works on UTF-8 text only") from None
        try:  # the one definition of an edit: the diff the human approved was made by it
            updated, count = apply_edit(text, old, new, bool(args.get("replace_all")), shown)
        except EditProblem as e:
            raise ToolError(str(e)) from None
        safe_write(path, updated.encode("utf-8"), shown)
        return ToolResult.text(f"replaced {count} occurrence{'s' if count > 1 else ''} in {shown}")


CHANGED_SINCE_SHOWN = (
    "the file changed after the diff you approved was made; nothing was done (call again)"
)


def unchanged_since_shown(ctx: ToolContext, raw: bytes, shown: str) -> None:
    """An approved change applies only to the file its diff was made from (What the human sees
    is what runs): another writer in between makes it refuse, never apply to other text."""
    if ctx.approved and ctx.shown_digest is not None and digest_of(raw) != ctx.shown_digest:
        raise ToolError(f"{shown}: {CHANGED_SINCE_SHOWN}")


def read_before(path: str, max_bytes: int) -> Before:
    """The file at the real ``path`` as an approval shows it (a file worker; never follows a
    symlink, never blocks on a FIFO): its text, or why there is none to compare."""
    try:
        fd, st = safeopen.open_read(path)
    except FileNotFoundError:
        return Before(BeforeState.MISSING, digest=MISSING_DIGEST)
    except safeopen.NotRegular as e:
        return Before(BeforeState.UNREADABLE, why=e.what)
    except (OSError, safeopen.PathChanged) as e:
        return Before(BeforeState.UNREADABLE, why=type(e).__name__)
    try:
        if st.st_size > max_bytes:
            return Before(BeforeState.TOO_BIG, size=st.st_size)
        raw = read_upto(fd, max_bytes + 1)
    except OSError as e:
        return Before(BeforeState.UNREADABLE, why=type(e).__name__)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        return Before(BeforeState.TOO_BIG, size=len(raw))
    if is_binary(raw[:SNIFF_BYTES]):
        return Before(BeforeState.BINARY, size=len(raw))
    try:
        return Before(BeforeState.TEXT, raw.decode("utf-8"), len(raw), digest=digest_of(raw))
    except UnicodeDecodeError:
        return Before(BeforeState.NOT_UTF8, size=len(raw))


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
        # The directory that was judged is listed, not what its path names by now: opened
        # with no symlink at any component and listed through the descriptor (Windows: no
        # listing by descriptor, the path is listed as before).
        dfd: int | None = None
        try:
            try:
                if SCANDIR_FD:
                    dfd = safeopen.open_dir(path)
                    with os.scandir(dfd) as it:
                        entries = sorted(it, key=lambda e: e.name)
                else:
                    with os.scandir(path) as it:
                        entries = sorted(it, key=lambda e: e.name)
            except safeopen.PathChanged:
                raise ToolError(f"{shown}: {CHANGED}; nothing was listed") from None
            except NotADirectoryError:
                raise ToolError(f"{shown}: not a directory (use read)") from None
            except OSError as e:
                raise io_error(e, shown) from None
            return self._lines(entries, path, dfd, shown, ctx)
        finally:
            if dfd is not None:
                os.close(dfd)

    def _lines(
        self,
        entries: list[os.DirEntry[str]],
        path: str,
        dfd: int | None,
        shown: str,
        ctx: ToolContext,
    ) -> ToolResult:
        """One line per entry the policy lets through, judged by this folder's rules
        (:meth:`EntryGate.child`): a directory or link is known by its ``d_type`` and never
        stat'ed; a file is stat'ed once (its size, and its link count for the hard-link check)."""
        cap = ctx.limits.list_max_entries
        gate = EntryGate.for_base(ctx.policy, path)
        rules = gate.rules(path)
        lines: list[str] = []
        listed = 0
        lane = in_lane(entries)
        try:
            for entry in lane:
                name = entry.name
                st: os.stat_result | None = None
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if gate.child(rules, path, name, None, is_dir=True):
                            continue
                        line = f"dir   {DASH}  {shown_name(name)}/"
                    elif entry.is_symlink():
                        if gate.child(rules, path, name, None):
                            continue
                        link = self._link_line(entry, path, dfd, gate)
                        if link is None:
                            continue
                        line = link
                    else:
                        st = entry.stat(follow_symlinks=False)
                        if gate.child(rules, path, name, st):
                            continue
                        line = f"file  {st.st_size:>10}  {shown_name(name)}"
                except OSError:
                    if st is None and gate.child(rules, path, name, None):
                        continue
                    line = f"?     {DASH}  {shown_name(name)}"
                listed += 1
                if listed <= cap:
                    lines.append(line)
        finally:
            lane.close()  # a suspended lane iterator holds the lane
        note = gate.note()
        if not listed:
            text = f"{shown}: (empty directory)"
            return ToolResult.text(f"{text}\n{note}" if note else text)
        if listed > cap:
            lines.append(f"… {listed - cap} more entries not shown")
        if note:
            lines.append(note)
        return ToolResult.text("\n".join(lines))

    @staticmethod
    def _link_line(
        entry: os.DirEntry[str], path: str, dfd: int | None, gate: EntryGate
    ) -> str | None:
        """A link's line, or None when where it points is refused (judged by the real path
        it resolves to, as a path argument would be)."""
        entry_path = os.path.join(path, entry.name)
        target = os.readlink(entry_path) if dfd is None else os.readlink(entry.name, dir_fd=dfd)
        if gate.refuses(os.path.realpath(entry_path)):
            return None
        return f"link  {DASH}  {shown_name(entry.name)} -> {shown_name(target)}"

"""The runner's side of the box: plan a call's box, sweep up after it, say what it refused.

Blocking functions (:func:`prepare`, :func:`sweep`) run in a worker pool; the bridge's loop
only awaits them. :func:`refused_note` is pure.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from . import probe
from .bwrap import BwrapHost, render
from .host import (
    SCAN_MAX_ENTRIES,
    SCAN_MAX_MASKS,
    PrivateCwd,
    TooManySecrets,
    gather,
    made_by_call,
)
from .plan import BoxPlan
from .policy import BoxConfig, HostView, build_plan, missing_persistence, project_of

HOW_TO_ASK = (
    'To run this command outside the box, call bash again with "box": false and a "reason" '
    "(a human decides)."
)


@dataclass(frozen=True, slots=True)
class BoxRequest:
    """What the pipeline hands ``bash`` so it can box a call: the config's ``box`` object, the
    roots, and the bridge's own files (config, audit, runtime dir) that stay private."""

    config: BoxConfig
    roots: tuple[str, ...]
    own: tuple[str, ...]
    named_roots: tuple[str, ...] = ()  # the roots as configured (``~/work``, maybe a link)


@dataclass(frozen=True, slots=True)
class Watch:
    """What a call's writable tree held before it ran, to find the repositories it made."""

    project: str
    home: str
    known: frozenset[str]  # real paths of every git dir seen before the call
    had: frozenset[str] = frozenset()  # the persistence the project scan found before it
    links: tuple[tuple[str, str], ...] = ()  # persistence that was a symlink: (path, target)
    unlisted: frozenset[str] = frozenset()  # folders the scan could not list before the call


@dataclass(frozen=True, slots=True)
class Prepared:
    plan: BoxPlan
    argv: tuple[str, ...]
    missing: tuple[str, ...]  # persistence paths absent before the call (swept after it)
    watch: Watch | None = None  # None: nothing writable to look through after the call


def watch_of(view: HostView) -> Watch | None:
    project = project_of(view)
    if project is None:
        return None
    had = frozenset((*view.nested, *view.linked))
    return Watch(
        project, view.home, frozenset(view.git_dirs), had, view.links, frozenset(view.unlisted)
    )


def outside_host() -> BwrapHost | None:
    """Blocking: bubblewrap for a call run outside the box (:func:`render_outside`), when this
    machine can make a box at all (the probe runs once, then is cached)."""
    probe.probe()
    return probe.host()


class NoBox(Exception):
    """No box can be made here (the pipeline asks a human first, so this only guards)."""


def prepare(
    request: BoxRequest, cwd: str, argv: Sequence[str], status_fd: int | None = None
) -> Prepared:
    """Blocking: look at the disk, build the plan, render it as a bwrap command line (with
    ``status_fd``: bubblewrap says there whether the command started, see
    :data:`~server.box.bwrap.STATUS_FD`)."""
    bwrap = probe.host()
    if bwrap is None:
        raise NoBox(probe.status().detail)
    try:
        view = gather(cwd, request.roots, request.config, request.own, request.named_roots)
    except PrivateCwd as e:
        raise NoBox(
            f"the call's folder {e} is in your home's hidden tree (or ~/snap, the snap apps'"
            " homes), which the box keeps private: "
            'run the command elsewhere, or with "box": false (a human decides)'
        ) from None
    except TooManySecrets as e:
        raise NoBox(
            f"{e} holds over {SCAN_MAX_MASKS} secret-looking or hard-linked files straight in "
            f"it, or more than {SCAN_MAX_ENTRIES} entries to look through for them: more than "
            'the box hides; run the command with "box": false (a human decides)'
        ) from None
    plan = build_plan(view, request.config)
    missing = missing_persistence(view, project_of(view))
    return Prepared(plan, tuple(render(plan, bwrap, argv, status_fd)), missing, watch_of(view))


def sweep(missing: Sequence[str], watch: Watch | None = None) -> tuple[str, ...]:
    """Blocking: remove the persistence paths a boxed call created (they did not exist before,
    so the box could not mount over them). Symlinks are removed, never followed: not the last
    component, and not any folder on the way — each path is reached from ``/`` one folder at a
    time without following a link, because the call (or another call running beside it) may
    have swapped a folder for a link to the home (``mv sub sub.old && ln -s ~ sub`` made
    ``sub/.vscode`` name the human's ``~/.vscode``). A path behind such a link is left alone
    and reported as not removed (when it exists: the human's own link to a folder without the
    file is nothing the call made). What the call made is removed first: a ``.claude`` link
    it made goes before the ``.claude/settings.json`` that would be reached through it. What
    cannot be removed (a tree too deep for a recursive
    delete, a folder made read-only) is moved aside first and removed by ``rm`` after its modes
    are reset; a path that still exists after all that is returned with a ``!`` in front, so
    the note says so loudly."""
    removed: list[str] = []
    if watch is not None:
        made, unseen = made_persistence(watch)
        missing = [*made, *missing]
        removed += ["!" + folder for folder in unseen]  # made unlistable: unseen inside
    for path in dict.fromkeys(missing):  # (what the call made may be a listed path too)
        if _absent(path):
            # Nothing by any route (a link on the way is followed here): the careful walk
            # below would find nothing either, at one open per folder instead of one lstat.
            continue
        try:
            fd = _parent(path)
        except FileNotFoundError:
            continue  # its folder is gone: nothing was made there
        except OSError:
            if not _absent(path):  # only looks: a link (or worse) on the way, or no way in
                removed.append("!" + path)  # not ours to follow
            continue
        try:
            name = os.path.basename(path)
            try:
                if not _exists_at(fd, name):
                    continue
            except OSError:  # its folder cannot be searched (the call took the mode away)
                removed.append("!" + path)
                continue
            with contextlib.suppress(Exception):  # whatever happened, it is reported below
                _remove(fd, name)
            removed.append(path if not _exists_at(fd, name) else "!" + path)
        finally:
            os.close(fd)
    for path, target in watch.links if watch is not None else ():
        restored = _restore_link(path, target)
        if restored is not None:
            removed.append(restored)
    return tuple(removed)


def _restore_link(path: str, target: str) -> str | None:
    """Put back a persistence symlink the call replaced (the box's read-only bind lands on its
    target; the link's own name was writable): whatever took its place is removed, and the
    human's link made again. None when it is as it was; ``!path`` when it could not be."""
    try:
        fd = _parent(path)
    except OSError:
        return "!" + path if os.path.lexists(path) else None  # only looks
    try:
        name = os.path.basename(path)
        with contextlib.suppress(OSError):
            if os.readlink(name, dir_fd=fd) == target:
                return None
        with contextlib.suppress(Exception):  # whatever happened, it is reported below
            if _exists_at(fd, name):
                _remove(fd, name)
            os.symlink(target, name, dir_fd=fd)
        try:
            back = os.readlink(name, dir_fd=fd) == target
        except OSError:
            back = False
        return path if back else "!" + path
    finally:
        os.close(fd)


# What a repository the call made must lose: git runs its config and hooks (a nested repository
# registered as a gitlink is entered by the human's next ``git status`` in the project, and its
# ``core.fsmonitor`` runs). ``commondir``/``gitdir`` stay: a worktree the call added still works.
NEW_REPO_PERSISTENCE = ("config", "config.worktree", "hooks", "info")


def made_persistence(watch: Watch) -> tuple[list[str], list[str]]:
    """Blocking: what the call made that runs outside the box later, to be swept like the
    rest: the persistence of every git dir in the call's tree that was not there before
    (``git init sub``, ``git submodule add``, a worktree), and every editor, direnv or hooks
    folder or file it made below the top (``lib/.envrc``, ``web/.vscode``); and the folders
    it made unlistable, whose insides cannot be looked at (reported as not cleaned)."""
    repos, made, unseen = made_by_call(
        watch.project, watch.home, watch.known, watch.had, watch.unlisted
    )
    paths = [*(os.path.join(d, name) for d in repos for name in NEW_REPO_PERSISTENCE), *made]
    return paths, unseen


def _parent(path: str) -> int:
    """A descriptor of ``path``'s folder, opened from ``/`` without following any link."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open("/", flags)
    try:
        for part in os.path.dirname(os.path.abspath(path)).strip("/").split("/"):
            if part:
                parent, fd = fd, os.open(part, flags, dir_fd=fd)
                os.close(parent)
    except OSError:
        os.close(fd)
        raise
    return fd


def _absent(path: str) -> bool:
    """Nothing is at ``path``: its ``lstat`` says so (no such file, or a file on the way). Any
    other failure tells nothing: a folder on the way without search permission (the call
    can ``chmod 600 .`` after planting ``.envrc``: ``lexists`` then said absent, and what it
    planted stayed, unreported), a link loop."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except (OSError, ValueError):
        return False
    return False


def _exists_at(fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _system_program(name: str) -> str:
    """``name`` from the system's own folders, never looked up on the bridge's ``PATH``: the
    sweep runs in the folder that held what it removes (the call's project), where a relative
    ``PATH`` entry (``.``, ``node_modules/.bin``, an empty one: ``PATH=$GOBIN:$PATH`` with
    ``GOBIN`` unset) found the call's own ``chmod``, run outside the box in the bridge's session
    (attack9)."""
    for folder in ("/usr/bin", "/bin"):
        path = os.path.join(folder, name)
        if os.access(path, os.X_OK):
            return path
    return os.path.join("/bin", name)


def _remove(fd: int, name: str) -> None:
    if not stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
        os.unlink(name, dir_fd=fd)
        return
    aside = f"{name}.a2a-removing-{os.getpid()}"
    # atomic: the name is free at once, whatever the tree holds
    os.rename(name, aside, src_dir_fd=fd, dst_dir_fd=fd)
    if not stat.S_ISDIR(os.stat(aside, dir_fd=fd, follow_symlinks=False).st_mode):
        os.unlink(aside, dir_fd=fd)  # swapped for a link between the look and the move
        return
    # ``chmod``/``rm`` run in the folder the descriptor holds, never by a path that a link
    # could redirect; -R and -rf follow no link inside the tree.
    where = f"/proc/self/fd/{fd}" if sys.platform.startswith("linux") else None
    chmod, rm = _system_program("chmod"), _system_program("rm")
    for argv in ([chmod, "-R", "u+rwx", "--", aside], [rm, "-rf", "--", aside]):
        if where is None:
            break
        subprocess.run(argv, cwd=where, pass_fds=(fd,), capture_output=True, check=False)
    if _exists_at(fd, aside):
        os.rename(aside, name, src_dir_fd=fd, dst_dir_fd=fd)  # back where the note names it
        raise OSError(f"could not remove {name}")


# "bash: line 1: .git/hooks/x: Read-only file system", "touch: cannot touch '/x': ...",
# Python's "[Errno 30] Read-only file system: '/x'"; "Permission denied" counts only for a
# path the box made private (its mask is a read-only empty file).
_READ_ONLY = re.compile(r"([^\s'\"‘’`:]+)['\"’`]?: Read-only file system")
_READ_ONLY_PY = re.compile(r"Read-only file system: '([^'\n]*)'")
_DENIED = re.compile(r"([^\s'\"‘’`:]+)['\"’`]?: Permission denied")
_NETWORK = (  # lower case: what programs print when there is no network at all
    "network is unreachable",
    "could not resolve",
    "temporary failure in name resolution",
    "name or service not known",
    "connection refused",
    "couldn't connect",
    "failed to connect",
    "could not connect",
    "getaddrinfo",
    "no route to host",
)


def _private(path: str, plan: BoxPlan) -> bool:
    path = os.path.normpath(os.path.join(plan.cwd, path))
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in plan.read_private)


def refused_note(output: str, plan: BoxPlan, removed: Sequence[str] = ()) -> str | None:
    """What the box refused, from the command's own error text and the plan, or None."""
    paths = _READ_ONLY.findall(output) + _READ_ONLY_PY.findall(output)
    paths += [p for p in _DENIED.findall(output) if _private(p, plan)]
    paths = list(dict.fromkeys(paths))
    parts: list[str] = []
    if paths:
        shown = ", ".join(paths[:3]) + (" …" if len(paths) > 3 else "")
        parts.append(f"writing {shown} (the box writes only the project and TMPDIR)")
    elif "Read-only file system" in output:
        parts.append("a write outside the project (the box writes only the project and TMPDIR)")
    if not plan.network and any(n in output.lower() for n in _NETWORK):
        parts.append("the network (the box has none, loopback included)")
    gone = [p for p in removed if not p.startswith("!")]
    stuck = [p[1:] for p in removed if p.startswith("!")]
    if gone:
        parts.append("persistence it created, now removed: " + ", ".join(gone[:5]))
    if stuck:
        parts.append("persistence it created that COULD NOT be removed: " + ", ".join(stuck[:5]))
    if not parts:
        return None
    return "[the box refused " + "; ".join(parts) + ". " + HOW_TO_ASK + "]"

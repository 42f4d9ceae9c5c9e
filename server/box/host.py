"""Look at the disk for one call: the :class:`~server.box.policy.HostView` the plan is built from.

Blocking (stat, scandir, small reads): call it in a worker thread, never on the event loop.
Bounded: one listing of the home and of ``/home``, a walk up from the cwd, and at most
``MAX_GIT_DIRS`` git dirs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import glob
import os
import stat
import struct
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterable

from ..policy.private import SNAP, git_config_files, git_named, gitdir_of_file, snap_homes
from ..policy.protected import TABLE, EscalationKind, Matcher, fold, is_name_pattern
from ..policy.safeopen import symlink_free
from . import kept
from .gitconfig import MAX_OTHER_REPOS, redacted, repo_configs
from .policy import (
    LINKED_FOLDERS,
    SYSTEM_PRIVATE,
    SYSTEM_PRIVATE_FILES,
    SYSTEM_READABLE,
    VAR,
    VAR_SHOWN,
    BoxConfig,
    HostEntry,
    HostView,
    holders,
    home_data_folders,
    is_nested_persistence,
    persistence_paths,
    project_of,
    within,
)
from .secrets import RACY_NS, IndexView, SecretIndex, index_for
from .secrets import skipped as _index_skips
from .system import SYSTEM_WALK
from .system import found as system_found

MAX_GIT_DIRS = 200
# The project scan for secret-looking files (``.env``, ``*.pem``, ``id_rsa``...) and hard links
# (a second name of a file outside): bounded, so a huge tree costs at most this many entries.
SCAN_MAX_ENTRIES = 20_000
SCAN_MAX_DEPTH = 6
SCAN_MAX_MASKS = 256  # each is one mount: past this the box is refused, not made leaky
SCAN_SKIP = frozenset({".git", "node_modules", ".venv", "venv", "__pycache__", "target"})
INDEX_MAX_MASKS = 128  # masks from the roots' index (outside the project): see _outside
# Folders the index knows but has not looked into (past its budget or depth: every folder
# made while its budget is full) are looked into by the call's own plan (:func:`_look_now`),
# newest first, so a folder made a moment ago shows at once, its secret-looking files masked.
# Bounded: at most this many such folders per call, each with at most FRESH_MAX_ENTRIES
# entries in its whole tree and all of them at most FRESH_CALL_MAX_ENTRIES; past a bound a
# folder is hidden whole, as the index alone does.
FRESH_MAX_FOLDERS = 64
FRESH_MAX_ENTRIES = 1_000
FRESH_CALL_MAX_ENTRIES = 4_000


def _realpath(path: str) -> str:
    """``os.path.realpath``, answered by one ``openat2`` when no component of ``path`` is a
    symlink (:func:`~server.policy.safeopen.symlink_free`: then it *is* its real path), or when
    nothing is at a name in such a folder (most of the places looked for are absent): a box's
    planning resolves ~60 paths, and ``realpath`` is an ``lstat`` per component and Python."""
    if symlink_free(path):
        return path
    parent, name = os.path.split(path)
    if (
        name not in ("", ".", "..")
        and path == os.path.join(parent, name)  # (``/a//b``: split drops the ``//``)
        and symlink_free(parent)
        and not os.path.lexists(path)
    ):
        return path  # realpath's answer too: a real folder, and nothing at the name in it
    return os.path.realpath(path)


def _real(path: str) -> str | None:
    path = os.path.expanduser(path)
    if symlink_free(path):
        return path  # it exists, and it is its own real path
    if not os.path.exists(path):  # one stat: most listed places are absent on a given machine
        return None
    real = _realpath(path)
    return real if os.path.exists(real) else None


def _hidden(home: str, keep_clear: Iterable[str]) -> tuple[HostEntry, ...]:
    """Each existing ``~/.*`` entry, by its real path (a symlink hides its target), and
    ``~/snap`` whole: each snap app's homes (``~/snap/<app>/<revision|common>``) are homes of
    their own, with browser profiles and app sessions in their hidden trees.

    A target that holds the home or a root (``~/.x -> /``) is skipped: hiding it would hide
    the project itself. A ``~/snap`` that holds a root hides each snap home's hidden entries
    instead.
    """
    clear = [home, *keep_clear]
    out = _entries(home, clear, lambda name: name.startswith(".") or name == SNAP)
    for target in _linked_out(home):  # ``~/.config/fish -> ~/dotfiles/fish`` (GNU Stow)
        if os.path.lexists(target) and not any(within(c, target) for c in clear):
            out.append(HostEntry(target, os.path.isdir(target)))
    snap = os.path.join(home, SNAP)
    if os.path.isdir(snap) and not any(e.path == _realpath(snap) for e in out):
        # (``current`` links to a revision: each home by its real path, once)
        real_snap = _realpath(snap)
        for snap_home in dict.fromkeys(_realpath(h) for h in snap_homes(home)):
            if within(snap_home, real_snap) and snap_home != real_snap:
                out += _entries(snap_home, [snap_home, *clear], lambda n: n.startswith("."))
    return tuple(dict.fromkeys(out))


LINKS_MAX_ENTRIES = 20_000  # entries of the home's hidden tree looked at for links
LINKS_MAX_DEPTH = 5  # ``~/.config/systemd/user/default.target.wants/x.service``
LINKS_KEEP_S = 30.0  # how long one look is kept (the human makes such links rarely)
_LINKS: dict[str, tuple[float, tuple[str, ...]]] = {}
_LINKS_LOCK = threading.Lock()


def _linked_out(home: str) -> tuple[str, ...]:
    """Real targets of the links *inside* the home's hidden tree that point out of it: a
    dot-file kept in a repository and linked into place (``~/.config/autostart/x.desktop ->
    ~/dotfiles/autostart/x.desktop``) is the hidden tree's file, private and persistence, at
    its target too (an outside review, attack6: a boxed call in ``~/dotfiles`` rewrote what
    the human's next login ran). The links straight in the home are :func:`_entries`'. One
    bounded look (no link followed, caches and dependency trees skipped) is kept
    :data:`LINKS_KEEP_S` seconds; a folder past the bounds is not looked into."""
    now = time.monotonic()
    with _LINKS_LOCK:
        last = _LINKS.get(home)
        if last is not None and now - last[0] < LINKS_KEEP_S:
            return last[1]
    hidden_top = os.path.join(home, ".")
    found: list[str] = []
    todo: list[tuple[str, int]] = []
    with contextlib.suppress(OSError):
        todo = [
            (e.path, 1)
            for e in os.scandir(home)
            if e.name.startswith(".")
            and e.is_dir(follow_symlinks=False)
            and not _index_skips(e.name)
        ]
    seen = 0
    while todo and seen < LINKS_MAX_ENTRIES:
        here, depth = todo.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            try:
                if entry.is_symlink():
                    real = _realpath(entry.path)
                    if not real.startswith(hidden_top) and within(real, home):
                        found.append(real)
                elif (
                    entry.is_dir(follow_symlinks=False)
                    and depth < LINKS_MAX_DEPTH
                    and not _index_skips(entry.name)
                    and entry.name != ".git"
                ):
                    todo.append((entry.path, depth + 1))
            except OSError:
                continue
    answer = tuple(dict.fromkeys(found))
    with _LINKS_LOCK:
        _LINKS[home] = (now, answer)
    return answer


def _entries(folder: str, clear: list[str], hides: Callable[[str], bool]) -> list[HostEntry]:
    """The entries of ``folder`` whose names ``hides`` picks, by real path, except those
    that hold what must stay clear (the home, a root)."""
    out: list[HostEntry] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        if not hides(entry.name):
            continue
        try:
            link = entry.is_symlink()
        except OSError:
            continue
        if link:
            real = _real(entry.path)
            is_dir = real is not None and os.path.isdir(real)
        else:  # the home is real and this is no link: its path is its real path (no stat)
            real = entry.path
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
        if real is None or any(within(c, real) for c in clear):
            continue
        out.append(HostEntry(real, is_dir))
    return out


def _others(home: str) -> tuple[str, ...]:
    """Other users' homes: ``/home/*`` and ``/root`` (whichever is not ours)."""
    found: list[str] = []
    with contextlib.suppress(OSError):
        found = [e.path for e in os.scandir("/home") if e.is_dir(follow_symlinks=False)]
    found.append("/root")
    out = []
    for path in found:
        real = _real(path)
        if real is not None and not within(home, real) and not within(real, home):
            out.append(real)
    return tuple(out)


def _read_gitdir(git_file: str) -> str | None:
    target = gitdir_of_file(git_file)
    return None if target is None else _real(target)


def _common_dir(git_dir: str) -> str:
    try:
        with open(os.path.join(git_dir, "commondir"), encoding="utf-8", errors="replace") as f:
            rel = f.read(4096).strip()
    except OSError:
        return git_dir
    return _real(os.path.join(git_dir, rel)) or git_dir


def _nested(common: str) -> list[str]:
    """``modules/*`` (submodules, nested too) and ``worktrees/*`` git dirs of a repository."""
    out: list[str] = []
    todo = [common]
    while todo and len(out) < MAX_GIT_DIRS:
        here = todo.pop()
        for sub in ("modules", "worktrees"):
            try:
                entries = [e.path for e in os.scandir(os.path.join(here, sub)) if e.is_dir()]
            except OSError:
                continue
            for path in entries[: MAX_GIT_DIRS - len(out)]:
                out.append(_realpath(path))
                if sub == "modules":
                    todo.append(path)
    return out


def _git(cwd: str) -> tuple[str | None, str | None, tuple[str, ...]]:
    """(top-level, the ``.git`` file or None, the repository's git dirs) above ``cwd``."""
    here = cwd
    while True:
        dot = os.path.join(here, ".git")
        if os.path.isdir(dot):
            common = _realpath(dot)
            return here, None, tuple(dict.fromkeys([common, *_nested(common)]))
        if os.path.isfile(dot):
            git_dir = _read_gitdir(dot)
            if git_dir is None:
                return here, dot, ()
            common = _common_dir(git_dir)
            return here, dot, tuple(dict.fromkeys([git_dir, common, *_nested(common)]))
        parent = os.path.dirname(here)
        if parent == here:
            return None, None, ()
        here = parent


@functools.cache
def _own_code() -> tuple[str, ...]:
    """The bridge's own Python (its venv, the base install) and its install folder (for a
    checkout, the checkout), real paths. Found once: the running interpreter and package do
    not move (it was four ``realpath`` walks per boxed call)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the server package
    prefixes = (sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(here))
    return tuple(dict.fromkeys(_realpath(p) for p in prefixes))


@functools.cache
def _tmp_visible() -> tuple[str, ...]:
    """What the box shows read-only through its private /tmp: :func:`_own_code` where it lies
    under /tmp. Code, not secrets: outside /tmp a boxed command reads it anyway."""
    tmp = "/tmp"  # noqa: S108
    return tuple(sorted(r for r in _own_code() if within(r, tmp) and r != tmp and os.path.isdir(r)))


def _is_git_dir(path: str) -> bool:
    """A folder git itself made: ``HEAD`` and ``objects`` + ``refs``, or (a worktree's)
    ``commondir``; never a symlink's or a ``.git`` file's word for any folder."""
    if not os.path.isfile(os.path.join(path, "HEAD")):
        return False
    if os.path.isfile(os.path.join(path, "commondir")):
        return True
    return all(os.path.isdir(os.path.join(path, d)) for d in ("objects", "refs"))


class PrivateCwd(Exception):
    """The call's folder lies in a private place (the home's hidden tree, ``~/snap``): no
    box hides that place from a call that runs in it, so a human decides."""


class TooManySecrets(Exception):
    """The project holds more secret-looking or hard-linked files than the box hides."""


@functools.cache
def _name_matcher() -> Matcher:
    """The table's name entries (``.env``, ``*.pem``, ``id_rsa``, ``.kube/config``...) compiled
    once: the scans ask only :meth:`Matcher.file`, which no home and no disk changes. Compiling
    the whole table resolves every location's real path: that was 85% of planning a box, per
    call. The same table and matcher the read tool judges by (one source of "secret-looking")."""
    return Matcher([loc for loc in TABLE if is_name_pattern(loc.pattern)], "/")


@dataclasses.dataclass
class Scan:
    """What the project scan found: masks, and the persistence anywhere in the tree."""

    masks: list[HostEntry]
    nested: list[str]  # existing persistence (``sub/.vscode``, a nested ``.git`` file...)
    git_dirs: list[str]  # nested repositories' git dirs (and theirs: modules, worktrees)
    repos: list[tuple[str, str]]  # (work tree or bare dir, common git dir) of each found
    links: list[str] = dataclasses.field(default_factory=list)  # secret-looking symlinks
    linked: list[str] = dataclasses.field(default_factory=list)  # links named ``.claude``...
    unlisted: list[str] = dataclasses.field(default_factory=list)  # there, but not listable


def _found_git(path: str, is_dir: bool, scan: Scan) -> None:
    """A ``.git`` below the top: a nested clone (dir) or a submodule or worktree (file)."""
    if is_dir:
        common = _realpath(path)
        scan.git_dirs += [common, *_nested(common)]
        scan.repos.append((os.path.dirname(path), common))
        return
    scan.nested.append(path)  # the file itself: rewritten, it redirects the repository
    git_dir = _read_gitdir(path)
    if git_dir is not None:
        common = _common_dir(git_dir)
        scan.git_dirs += [git_dir, common, *_nested(common)]
        scan.repos.append((os.path.dirname(path), common))


class _Found(enum.Enum):
    """What the project scan makes of an entry that is not a folder."""

    NOTHING = "nothing"
    LINK = "link"  # a secret-looking symlink: what it points to is masked where it lies
    MASK = "mask"  # secret-looking, masked
    # A plain file: masked when it has a second name (a hard link, maybe to a secret), asked
    # per call: a name added elsewhere (``ln proj/notes ~/.bash_history``) leaves its folder
    # unchanged, and what is written through that name is read through this one.
    FILE = "file"
    PERSISTENCE = "persistence"  # x.pth, sitecustomize.py: read-only in the box


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    is_dir: bool
    nested: bool  # persistence by its name (``.vscode``, ``x/.claude/settings.json``)
    linked: bool  # a symlink named like a linked folder (``.claude``)
    found: _Found


@dataclasses.dataclass(frozen=True, slots=True)
class _Folder:
    """One folder's part of the project scan, from its names and kinds alone, so it holds
    while the folder's own entries do (a file's link count does not: it is asked per call)."""

    count: int  # every entry, as the bound counts them
    names: frozenset[str]
    entries: tuple[_Entry, ...]  # only those that change the scan: folders, ``.git``, finds
    files: tuple[str, ...] = ()  # plain files: their link count is asked per call


# The scan's last look per folder (:mod:`server.box.kept`): a folder's key changes whenever a
# name in it is added, removed or renamed, which is also the only way a name in the project can
# come to point at a secret (``ln ~/.ssh/id_rsa proj/key`` adds a name here). Kept: names and
# kinds. Asked per call: each file's link count (a second name made elsewhere leaves the folder
# as it was), what a ``.git`` file says, what other folders hold.
_FOLDERS: kept.Kept[_Folder] = kept.Kept(16_384)


def _look_at(here: str, matcher: Matcher) -> _Folder | None:
    """``here``'s part of the scan: from the kept look when the folder is unchanged (one
    ``stat``), else from a ``scandir``."""
    since = kept.generation()
    key = kept.folder_key(here)
    if key is None:
        return None
    known = _FOLDERS.get(here, key)
    if known is not None:
        return known
    try:
        with os.scandir(here) as it:
            entries = list(it)
    except OSError:
        return None
    out: list[_Entry] = []
    files: list[str] = []
    for entry in entries:
        try:
            found = _entry(entry, matcher)
        except OSError:
            continue
        if found.found is _Found.FILE:
            files.append(found.name)  # its link count is asked per call
        if (
            found.is_dir
            or found.nested
            or found.linked
            or found.found in (_Found.LINK, _Found.MASK, _Found.PERSISTENCE)
            or found.name == ".git"
        ):
            out.append(found)  # the rest (most files) change nothing in the kept part
    folder = _Folder(len(entries), frozenset(e.name for e in entries), tuple(out), tuple(files))
    _FOLDERS.keep(here, key, folder, since)
    return folder


def _entry(entry: os.DirEntry[str], matcher: Matcher) -> _Entry:
    """Raises OSError when the entry cannot be looked at (then it is left out, as before)."""
    is_dir = entry.is_dir(follow_symlinks=False)
    nested = entry.name != ".git" and is_nested_persistence(entry.path)
    linked = not nested and entry.name in LINKED_FOLDERS and entry.is_symlink()
    found = _Found.NOTHING
    if not is_dir and entry.name != ".git":
        key = fold(entry.path)
        if not entry.is_file(follow_symlinks=False):
            if matcher.secret_file(key):
                found = _Found.LINK if entry.is_symlink() else _Found.MASK
        else:
            hit = matcher.file(key)
            if hit is not None and hit.kind is EscalationKind.PERSISTENCE:
                found = _Found.PERSISTENCE
            elif hit is not None:
                found = _Found.MASK
            else:
                found = _Found.FILE
    return _Entry(entry.name, is_dir, nested, linked, found)


def _second_names(here: str, files: Iterable[str], is_home: bool, scan: Scan) -> None:
    """Mask each plain file of ``here`` that has a second name now (a hard link: it may be a
    secret's, or become one when the secret is written through the other name): asked per
    call, at one ``fstatat`` a file from the folder's descriptor (by path when it cannot be
    opened)."""
    fd: int | None = None
    if os.stat in os.supports_dir_fd:
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        with contextlib.suppress(OSError):
            fd = os.open(here, flags)
    try:
        for name in files:
            if is_home and (name.startswith(".") or name == SNAP):
                continue  # masked whole (_hidden)
            try:
                if fd is not None:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                else:
                    st = os.lstat(os.path.join(here, name))
            except OSError:
                continue
            if st.st_nlink > 1:
                scan.masks.append(HostEntry(os.path.join(here, name), False))
    finally:
        if fd is not None:
            os.close(fd)


def _scan(top: str, home: str) -> Scan:
    """Secret-looking files and hard-linked files under ``top`` (bounded walk): the box masks
    them like the home's hidden files; and the persistence anywhere in the tree (the table's
    "anywhere" kind): nested repositories (a ``.git`` dir or file, a bare one: ``HEAD`` +
    ``objects`` + ``refs``), ``.vscode``, ``.idea``, ``.envrc``, ``.direnv``, ``.husky``,
    ``.githooks``, ``*.pth``, ``sitecustomize.py``. Symlinks are not followed (their targets
    are judged where they lie). Each folder's part is kept while the folder is unchanged
    (:func:`_look_at`): a tree of 1,200 files cost 13 ms a boxed call, every call; each
    plain file's link count is still asked per call (an ``lstat``: ~2.7 ms of it)."""
    matcher = _name_matcher()
    scan = Scan([], [], [], [])
    seen = 0
    todo = [(top, 0)]
    while todo:
        if seen >= SCAN_MAX_ENTRIES:
            raise TooManySecrets(top)  # unscanned files could hold secrets: refuse, not leak
        here, depth = todo.pop()
        folder = _look_at(here, matcher)
        if folder is None:
            if os.path.lexists(here):
                scan.unlisted.append(here)  # no search or read permission: unseen inside
            continue
        if here != top and {"HEAD", "objects", "refs"} <= folder.names:
            scan.git_dirs += [_realpath(here), *_nested(here)]  # a bare repository
            scan.repos.append((here, _realpath(here)))
            continue
        seen += folder.count
        for entry in folder.entries:
            if here == home and (entry.name.startswith(".") or entry.name == SNAP):
                continue  # the home's hidden tree and ~/snap are masked whole (_hidden)
            path = os.path.join(here, entry.name)
            if entry.name == ".git":
                if here != top:
                    with contextlib.suppress(OSError):
                        _found_git(path, entry.is_dir, scan)
                continue
            if entry.nested:
                scan.nested.append(path)  # read-only; a secret inside still masked
            elif entry.linked:
                scan.linked.append(path)
            if entry.is_dir:
                if depth < SCAN_MAX_DEPTH and entry.name not in SCAN_SKIP:
                    todo.append((path, depth + 1))
            elif entry.found is _Found.LINK:
                scan.links.append(path)  # what it points to is masked
            elif entry.found is _Found.MASK:
                scan.masks.append(HostEntry(path, False))  # a file, a named pipe, a socket
            elif entry.found is _Found.PERSISTENCE:
                scan.nested.append(path)
        if folder.files:
            _second_names(here, folder.files, here == home, scan)
    scan.masks = coalesce(scan.masks, top, SCAN_MAX_MASKS)
    return scan


MAX_GITLINKS = 1000  # gitlinks read from one index (a monorepo of submodules has fewer)


# The last answer per index file, keyed by what changes when the file does: a monorepo's
# index (tens of MiB) was read after every boxed call. ``st_ctime`` cannot be set back by a
# process (``touch -d`` sets only atime and mtime), and an answer read within RACY_NS of the
# file's last change is not kept (a change in the same clock tick leaves the key as it was).
_GITLINKS: dict[str, tuple[tuple[int, int, int, int], list[str]]] = {}
_GITLINKS_MAX = 64
_GITLINKS_LOCK = threading.Lock()  # gather runs in several worker threads


def _gitlinks(index: str) -> list[str]:
    """The paths of the gitlinks (mode 160000: submodules) in a git index, v2 to v4; those are
    what ``git status`` enters and runs git in. Unknown formats: none."""
    try:
        with open(index, "rb") as f:
            st = os.fstat(f.fileno())
            key = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
            with _GITLINKS_LOCK:
                cached = _GITLINKS.get(index)
            if cached is not None and cached[0] == key:
                return list(cached[1])
            data = f.read(64 << 20)
    except OSError:
        return []
    out = _parse_gitlinks(data)
    if st.st_ctime_ns < time.time_ns() - RACY_NS:
        with _GITLINKS_LOCK:
            if len(_GITLINKS) >= _GITLINKS_MAX:
                _GITLINKS.pop(next(iter(_GITLINKS)))
            _GITLINKS[index] = (key, out)
    return list(out)


def _parse_gitlinks(data: bytes) -> list[str]:
    if len(data) < 12 or data[:4] != b"DIRC":
        return []
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3, 4):
        return []
    out: list[str] = []
    pos, prev = 12, b""
    try:
        for _ in range(count):
            start = pos
            mode = struct.unpack(">I", data[pos + 24 : pos + 28])[0]
            flags = struct.unpack(">H", data[pos + 60 : pos + 62])[0]
            pos += 62
            if version >= 3 and flags & 0x4000:
                pos += 2
            if version == 4:
                strip = data[pos] & 0x7F  # git's varint: 7 bits a byte, +1 per continuation
                while data[pos] & 0x80:
                    pos += 1
                    strip = ((strip + 1) << 7) | (data[pos] & 0x7F)
                pos += 1
                end = data.index(b"\0", pos)
                name = prev[: len(prev) - strip] + data[pos:end]
                pos = end + 1
            else:
                end = data.index(b"\0", pos)
                name = data[pos:end]
                pos = start + ((end - start + 8) // 8) * 8
            prev = name
            if mode == 0o160000:
                out.append(name.decode("utf-8", "surrogateescape"))
                if len(out) >= MAX_GITLINKS:
                    break
    except (struct.error, ValueError, IndexError):
        return out
    return out


def made_by_call(
    project: str, home: str, known: Iterable[str], had: Iterable[str], unlisted: Iterable[str] = ()
) -> tuple[list[str], list[str], list[str]]:
    """What a call made in ``project``, from one look after it: the git dirs that are not in
    ``known`` (see :func:`_made_repositories`), and the editor, direnv and hooks folders and
    files (:data:`NESTED_PERSISTENCE`) anywhere the project scan looks that are not in
    ``had`` (what the scan found before the call: ``lib/.envrc`` runs when the human enters
    ``lib``; ``.claude/settings.json`` when the human next opens the project with Claude
    Code). A tree too big to look through yields only the repositories its indexes name.
    Third: the folders the look could not list that ``unlisted`` (those it could not list
    before) does not hold: the call took their permissions away (``chmod 000 lib`` after
    planting ``lib/.envrc``), so what it made inside is unseen, and they are reported."""
    kept.forget_if_remounted()
    try:
        scan: Scan | None = _scan(project, home)
    except TooManySecrets:
        scan = None
    repos = _made_repositories(project, known, scan.git_dirs if scan else [])
    if scan is None:
        return repos, [], []
    had, before = set(had), set(unlisted)
    made = [p for p in dict.fromkeys(scan.nested) if is_nested_persistence(p) and p not in had]
    made += [p for p in scan.linked if p not in had]  # ``ln -s cfg .claude``: the link goes
    return repos, made, [p for p in scan.unlisted if p not in before]


def _made_repositories(project: str, known: Iterable[str], scanned: Iterable[str]) -> list[str]:
    """Git dirs in ``project`` that are not in ``known`` (what the tree held before a call):
    those the project scan finds, the submodules and worktrees of every known repository,
    and every gitlink's repository in those repositories' indexes (wherever it lies: a nested
    repository in ``node_modules`` registered as a submodule is entered by ``git status``)."""
    known = set(known)
    found = set(scanned)
    for git_dir in list(known):
        found.update(_nested(git_dir))
    tops = [(os.path.dirname(d), d) for d in known | found if os.path.basename(d) == ".git"]
    for top, git_dir in tops:
        for rel in _gitlinks(os.path.join(git_dir, "index")):
            dot = os.path.join(top, rel, ".git")
            if os.path.isdir(dot) and not os.path.islink(dot):
                found.add(_realpath(dot))
            elif os.path.isfile(dot):
                target = _read_gitdir(dot)
                if target is not None:
                    found.add(target)
    return sorted(d for d in found if d not in known and within(d, project) and _is_git_dir(d))


READ_ALLOW_SCAN = 64  # entries looked at per box.read_allow folder (a cache can be huge)


# Per ``box.read_allow`` folder: the folders its look went through (with their keys) and what
# it found; kept while every one of those folders is unchanged (one ``stat`` each).
_Visited = tuple[tuple[str, kept.Key | None], ...]
_ALLOWED_LOOKS: kept.Kept[tuple[_Visited, tuple[str, ...]]] = kept.Kept(512)


def _secrets_allowed(allowed: Iterable[str]) -> list[HostEntry]:
    """Secret-looking files in the ``box.read_allow`` folders the box re-opens: git reads its
    credential store from ``~/.config/git/credentials``, beside the config the box must show.
    A small look per folder (:data:`READ_ALLOW_SCAN` entries, breadth first): config folders
    are small, and the toolchain caches hold no credentials of their own."""
    out: list[HostEntry] = []
    for top in allowed:
        since, top_key = kept.generation(), kept.folder_key(top)
        known = _ALLOWED_LOOKS.get(top, top_key) if top_key is not None else None
        if known is not None and all(kept.folder_key(d) == key for d, key in known[0][1:]):
            found = known[1]
        else:
            visited, found = _look_for_secrets(top)
            keys = [key for _, key in visited]
            if top_key is not None and all(k is not None and kept.settled(k) for k in keys):
                _ALLOWED_LOOKS.put(top, top_key, (visited, found), since)
        out += [HostEntry(path, False) for path in found]  # a file, a named pipe
    return out


def _look_for_secrets(
    top: str,
) -> tuple[_Visited, tuple[str, ...]]:
    """One folder's look for :func:`_secrets_allowed`: (each folder listed, its key before the
    listing), and the secret-looking files found."""
    matcher = _name_matcher()
    visited: list[tuple[str, kept.Key | None]] = []
    found: list[str] = []
    todo, seen = [top], 0
    while todo and seen < READ_ALLOW_SCAN:
        here = todo.pop(0)
        key = kept.folder_key(here)
        visited.append((here, key))
        entries = kept.listing(here) if key is not None else None
        if entries is None:
            continue
        for name, kind in entries[: READ_ALLOW_SCAN - seen]:
            seen += 1
            path = os.path.join(here, name)
            if kind == kept.Kind.DIR:
                todo.append(path)
            elif kind != kept.Kind.LINK and matcher.secret_file(fold(path)):
                found.append(path)
    return tuple(visited), tuple(found)


# Top-level folders an OS makes: programs, libraries, config, the homes, its own runtime and
# temporary places (each judged further by the rest of the policy). Any other top-level folder
# (``/srv``, ``/mnt``, ``/media``, ``/data``, a backup disk at ``/backup``) holds data, not the
# system: outside every root, the box hides it whole unless it holds what the call needs.
SYSTEM_TOPS = frozenset(
    {
        "bin",
        "boot",
        "dev",
        "etc",
        "gnu",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "lost+found",
        "nix",
        "opt",
        "proc",
        "root",
        "run",
        "sbin",
        "snap",
        "sys",
        "tmp",
        "usr",
        "var",
    }
)


def _foreign_tops(
    needed: Iterable[str],
    programs: Iterable[str] = (),
    root: str = "/",
    system: frozenset[str] = SYSTEM_TOPS,
) -> tuple[list[HostEntry], list[str]]:
    """The folders of ``root`` no OS makes (not in ``system``: :data:`SYSTEM_TOPS` at the top,
    :data:`~server.box.policy.VAR_SHOWN` in /var): masked whole (private by
    default: the roots are what the human shared), and what the call needs inside one
    (``needed``: a root, the cwd, the bridge's Python...) re-opened on its own, read-only, so
    the rest of that top stays hidden: a root at ``/srv/www/app`` used to show every sibling
    (``/srv/backup``). A top that *is* needed (or lies inside what is) stays as it is.

    ``programs`` (the folders on ``PATH`` and where their links lead) re-open their install
    prefix when they are a ``bin`` folder (``/srv/tools/node/bin`` -> ``/srv/tools/node``:
    its ``lib`` beside it). Returns (masks, re-opened paths)."""
    needed = [n for n in needed if n != os.sep]  # "/" holds every top: only a root may
    for folder in programs:
        if folder == os.sep:
            continue
        base = os.path.basename(folder.rstrip(os.sep))
        parent = os.path.dirname(folder.rstrip(os.sep))
        needed.append(parent if base in ("bin", "sbin") and parent != os.sep else folder)
    masks: list[HostEntry] = []
    reopened: list[str] = []
    # what is needed, by the entry of ``root`` it lies in; and the needed folders themselves
    inside: dict[str, list[str]] = {}
    prefix = root.rstrip(os.sep) + os.sep
    for n in needed:
        if n.startswith(prefix):
            inside.setdefault(n[len(prefix) :].split(os.sep, 1)[0], []).append(n)
    exact = frozenset(os.path.normpath(n) for n in needed)
    # (by its real path: a /var that is a link, ``/var -> /opt/var``, is listed through it,
    # as ``os.scandir`` did; the masks keep the link's path, which bubblewrap follows too)
    for name, kind in kept.listing(_realpath(root)) or ():
        if name in system or kind == kept.Kind.LINK:
            continue  # a symlink at the top leads to a folder judged on its own
        path = os.path.join(root, name)
        if kind == kept.Kind.FILE:
            # A file straight in / (a dump a script left: /backup.sql) is data too: an empty
            # file in its place, when this user can read it at all (asked per call: a mode).
            if os.access(path, os.R_OK) and path not in needed:
                masks.append(HostEntry(path, False))
            continue
        if kind != kept.Kind.DIR:
            continue  # a socket, a device: nothing to read
        if any(h in exact for h in holders(path)):
            continue  # the top itself is needed (a root at /srv), or what holds it
        masks.append(HostEntry(path, True))
        reopened += inside.get(name, [])
    # one mount each: what lies inside another re-opened path shows with it
    outer = [r for r in set(reopened) if not any(within(r, o) and r != o for o in reopened)]
    return masks, sorted(outer)


def _path_link_targets(folders: tuple[str, ...]) -> tuple[str, ...]:
    """Where the programs on ``PATH`` that are symlinks lead (``/usr/local/bin/x ->
    /srv/tools/x``): the folders holding those targets must stay visible. Kept per folder
    while its mtime (a link added or removed) stays the same."""
    out: list[str] = []
    for folder in folders:
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            continue
        racy = mtime >= time.time_ns() - RACY_NS  # changed within a clock tick: look now
        out += _links_in.__wrapped__(folder, mtime) if racy else _links_in(folder, mtime)
    return tuple(dict.fromkeys(out))


@functools.lru_cache(maxsize=64)
def _links_in(folder: str, mtime: int) -> tuple[str, ...]:
    del mtime  # part of the cache key only
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for entry in os.scandir(folder):
            with contextlib.suppress(OSError):
                if entry.is_symlink():
                    out.add(os.path.dirname(_realpath(entry.path)))
    return tuple(sorted(out))


@functools.cache
def _on_path_patterns(path_var: str) -> tuple[str, ...]:
    """The table's persistence folders in the home's visible tree (``~/bin``...), and every
    folder on the ``PATH`` the bridge was started with (the human's own, ``~/tools/bin``): a
    program planted there runs, outside the box, the next time the human types its name."""
    table = [
        loc.pattern
        for loc in TABLE
        if loc.kind is EscalationKind.PERSISTENCE
        and loc.pattern.startswith("~/")
        and not loc.pattern.startswith("~/.")
        and not any(c in loc.pattern for c in "*?[")
    ]
    on_path = [p for p in path_var.split(os.pathsep) if os.path.isabs(p)]
    return tuple(dict.fromkeys([*table, *on_path]))


def coalesce(
    masks: list[HostEntry],
    top: str,
    limit: int,
    hideable: Callable[[str], bool] | None = None,
) -> list[HostEntry]:
    """At most ``limit`` masks (each is one mount). Past it, the deepest folders that hold two
    or more masks become one mask each, level by level, so more is hidden rather than anything
    shown (600 ``many/*/credentials`` become one mask over ``many``; a lone ``.env`` beside
    them stays a file mask). ``top`` itself is never masked: a project whose secrets lie
    straight in it beyond the limit is refused (:class:`TooManySecrets`).

    With ``hideable`` (the masks outside the project), the folders it allows are the
    candidates instead, and when none is left the masks stay as they are: more mounts, a
    slower start, nothing shown."""
    paths = {m.path: m.is_dir for m in masks}
    while len(paths) > limit:
        counts: dict[str, int] = {}
        for path in paths:
            parent = os.path.dirname(path)
            while parent != os.path.dirname(parent) and (
                hideable(parent) if hideable else parent != top and within(parent, top)
            ):
                counts[parent] = counts.get(parent, 0) + 1
                parent = os.path.dirname(parent)
        groups = [folder for folder, n in counts.items() if n >= 2]
        if not groups:
            if hideable is not None:
                break
            raise TooManySecrets(top)
        deepest = max(folder.count(os.sep) for folder in groups)
        folders = {folder for folder in groups if folder.count(os.sep) == deepest}
        merged = {p: d for p, d in paths.items() if os.path.dirname(p) not in folders}
        for folder in folders:
            merged = {p: d for p, d in merged.items() if not within(p, folder)}
            merged[folder] = True
        paths = merged
    return [HostEntry(p, d) for p, d in paths.items()]


def _unlooked(
    folder: str,
    project: str,
    hideable: Callable[[str], bool],
    hidden: tuple[str, ...],
    strict: bool = True,
    roots: tuple[str, ...] = (),
) -> list[HostEntry]:
    """Masks for a folder the index did not look into (past its budget or depth) that the
    box cannot hide whole: it holds the call's project or ``cwd`` (or lies in, or holds, what
    the box must read whole). Hiding nothing in it showed every secret beside the call (the
    agent picks its ``cwd``: a folder below one the index left out read that folder's
    ``.env``). Looked into now, for this call: its secret-looking files are masked, each
    subfolder it may hide is hidden whole, the others are looked into the same way; the
    project is left to the project scan, and dependency trees are skipped as the index skips
    them; what a secret-looking link there points to is masked too. Bounded: past
    :data:`SCAN_MAX_ENTRIES` entries or :data:`SCAN_MAX_MASKS` masks, or a folder on the way
    that may not be listed, the box is refused (:class:`TooManySecrets`), not made leaky.

    Not ``strict`` (a folder on the way to the project or ``cwd`` is strict; one that only
    lies in, or holds, a root, the home or what the box must read whole — a ``read_allow``
    folder, a git dir — is not): what the bound leaves out stays as it is. Refusing there
    would refuse every call, in every project, for a big folder the human chose to show (or
    a root that cannot be listed, a network drive gone away)."""
    matcher = _name_matcher()
    out: list[HostEntry] = []
    seen = 0
    todo = [folder]
    while todo:
        here = todo.pop()
        try:
            entries = list(os.scandir(here))
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            if not strict:
                continue
            raise TooManySecrets(here) from None  # there, not listable: nothing to mask by
        for entry in entries:
            seen += 1
            if seen > SCAN_MAX_ENTRIES:
                if not strict:
                    return out[:SCAN_MAX_MASKS]
                raise TooManySecrets(folder)
            path = entry.path
            if within(path, project) or any(within(path, h) for h in hidden):
                continue
            try:
                if entry.is_dir(follow_symlinks=False):
                    if _index_skips(entry.name):
                        continue
                    if hideable(path):
                        out.append(HostEntry(path, True))
                    else:
                        todo.append(path)
                elif matcher.secret_file(fold(path)):
                    if entry.is_symlink():
                        out += [HostEntry(t, False) for t in _link_targets([path], roots)]
                    else:  # a file, a named pipe
                        out.append(HostEntry(path, False))
            except OSError:
                continue
    if len(out) > SCAN_MAX_MASKS:
        if not strict:
            return out[:SCAN_MAX_MASKS]
        raise TooManySecrets(folder)
    return out


# Folders too big to look into per call, by path -> (device, inode, mtime, ctime) when found
# so: hidden whole without another look while the folder itself is unchanged (a full index
# budget would otherwise cost every call the same failed look). Hiding whole is what the
# index does anyway, so a stale answer hides more, never shows more.
_TOO_BIG: dict[str, tuple[int, int, int, int]] = {}
_TOO_BIG_MAX = 4096
_TOO_BIG_LOCK = threading.Lock()


def _stamp(folder: str) -> tuple[int, int, int, int] | None:
    try:
        st = os.stat(folder, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def _look_now(folder: str, room: int, roots: tuple[str, ...]) -> tuple[list[HostEntry] | None, int]:
    """Masks for a folder the index did not look into (and the box may hide whole): its
    secret-looking files (and what its secret-looking links point to), every folder below
    looked into the same way, dependency and cache trees skipped as the index skips them, a
    subfolder that may not be listed hidden whole; with the entries it saw. At most ``room``
    entries: past it (or a folder that may not be listed at all), None for the masks, and
    the caller hides the folder whole. A folder gone since: nothing to hide."""
    matcher = _name_matcher()
    out: list[HostEntry] = []
    seen = 0
    todo = [folder]
    while todo:
        here = todo.pop()
        try:
            with os.scandir(here) as it:
                entries = list(it)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError:
            if here == folder:
                return None, seen
            out.append(HostEntry(here, True))  # there, not listable: hidden whole
            continue
        seen += len(entries)
        if seen > room:
            return None, seen
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name == ".git":  # the index's repos get a redacted config
                        out += _credential_configs(entry.path)
                    elif not _index_skips(entry.name):
                        todo.append(entry.path)
                elif matcher.secret_file(fold(entry.path)):
                    if entry.is_symlink():
                        out += [HostEntry(t, False) for t in _link_targets([entry.path], roots)]
                    else:  # a file, a named pipe
                        out.append(HostEntry(entry.path, False))
            except OSError:
                continue
    return out, seen


def _credential_configs(git_dir: str) -> list[HostEntry]:
    """A repository found by :func:`_look_now`: its git config (and what it includes) masked
    whole when it holds a credential. The index's repositories get a redacted copy instead
    (:func:`_git_redacted`, from ``index.repos``); this one is not in the index, and the folder
    was hidden whole before it was looked into (attack9: ``https://me:TOKEN@host`` showed)."""
    home = os.path.expanduser("~")
    pairs = redacted([os.path.join(git_dir, "config")], home, MAX_OTHER_REPOS)
    return [HostEntry(real, False) for real, _ in pairs]


def _unindexed_masks(folders: Iterable[str], roots: tuple[str, ...]) -> list[HostEntry]:
    """Masks for the folders the index did not look into that the box may hide whole
    (newest first): the newest :data:`FRESH_MAX_FOLDERS` are looked into now
    (:func:`_look_now`, within the bounds), the rest hidden whole as before."""
    out: list[HostEntry] = []
    left = FRESH_CALL_MAX_ENTRIES
    for n, folder in enumerate(folders):
        if n >= FRESH_MAX_FOLDERS or left <= 0:
            out.append(HostEntry(folder, True))
            continue
        stamp = _stamp(folder)
        if stamp is None:
            continue  # gone: nothing to hide (a mount over it would fail the box's setup)
        with _TOO_BIG_LOCK:
            known_big = _TOO_BIG.get(folder) == stamp
        if known_big:
            out.append(HostEntry(folder, True))
            continue
        room = min(FRESH_MAX_ENTRIES, left)
        looked, seen = _look_now(folder, room, roots)
        left -= seen
        if looked is not None:
            out += looked
            continue
        out.append(HostEntry(folder, True))
        if seen > FRESH_MAX_ENTRIES:  # too big on its own, not for lack of room left
            with _TOO_BIG_LOCK:
                if len(_TOO_BIG) >= _TOO_BIG_MAX:
                    _TOO_BIG.clear()
                _TOO_BIG[folder] = stamp
    return out


def _outside(
    secrets: Iterable[str],
    unindexed: Iterable[str],
    hidden: Iterable[str],
    holds: Iterable[str],
    under: Iterable[str],
    roots: tuple[str, ...] = (),
) -> list[HostEntry]:
    """The index's secret-looking files and the folders it did not look into, outside the
    project, as masks: none inside a folder hidden whole already, at most
    :data:`INDEX_MAX_MASKS` (each mount makes every box start slower: bubblewrap reads the
    mount table once per mount). Past it, folders holding several become one mask. Never a
    folder that holds what the call needs (its project, cwd, a root, the home) or what it
    must read whole (a git dir, ``read_allow``, ``PATH``, the bridge's Python), nor one inside
    those; a folder the index did not look into that is such a folder is looked into now
    (:func:`_unlooked`), and so is one it may hide, when small (:func:`_unindexed_masks`: a
    folder made a moment ago shows at once). ``holds[0]`` is the project, ``holds[1]`` the
    cwd."""
    hidden, holds, under = tuple(hidden), tuple(holds), tuple(under)
    keep = (*holds, *under)

    def hideable(folder: str) -> bool:
        return not any(within(k, folder) for k in keep) and not any(
            within(folder, u) for u in under
        )

    def shown(path: str) -> bool:
        return not any(within(path, h) for h in hidden)

    masks = [HostEntry(p, False) for p in secrets]
    whole: list[str] = []  # hideable: looked into now when small (``_unindexed_masks``)
    for folder in (p for p in unindexed if shown(p)):
        if hideable(folder):
            whole.append(folder)
        else:
            strict = any(within(h, folder) for h in holds[:2])  # the project's or cwd's way
            masks += _unlooked(folder, holds[0], hideable, hidden, strict, roots)
    masks += _unindexed_masks(whole, roots)
    masks = [m for m in masks if shown(m.path)]
    return coalesce(masks, "/", INDEX_MAX_MASKS, hideable)


MAX_LINKS = 256  # secret-looking symlinks resolved per call (each is a few stats)


def _link_targets(links: Iterable[str], roots: Iterable[str]) -> list[str]:
    """The real files secret-looking symlinks point to (``~/svc/.env -> ~/vault/settings``):
    the name the human gave the secret is the link's, and the box reads through a link, so the
    target is masked wherever it lies (a link is never masked itself: a mount follows it).
    Resolved per call, at most :data:`MAX_LINKS` (the rest: their targets are judged by name
    where they lie, as before). Only targets in the roots (what the index covers): a link the
    agent plants (``.env -> /usr/lib/…/libc.so.6``) must not mask what every box runs."""
    roots = tuple(roots)
    out: list[str] = []
    for link in list(dict.fromkeys(links))[:MAX_LINKS]:
        real = _realpath(link)
        if real == link or not any(within(real, r) for r in roots):
            continue  # outside the roots: not indexed, as any file there
        try:
            mode = os.stat(real).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) or stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            out.append(real)
    return out


def _in_project(scan: Scan, index: IndexView, project: str, roots: tuple[str, ...]) -> list[str]:
    """Add the index's secrets and what secret-looking links point to that lie in the project
    to the scan's masks (coalesced by the project's rule); return those elsewhere. The scan
    looks 6 levels deep, the index 16: a ``.env`` 7 levels down the project was readable, and
    movable anywhere, while the index knew it."""
    found = [*index.secrets, *_link_targets([*scan.links, *index.links], roots)]
    inside = [p for p in found if within(p, project)]
    if inside:
        folders = [m.path for m in scan.masks if m.is_dir]
        more = [HostEntry(p, False) for p in inside if not any(within(p, f) for f in folders)]
        scan.masks = coalesce([*scan.masks, *more], project, SCAN_MAX_MASKS)
    return [p for p in found if not within(p, project)]


def _index(real_roots: Iterable[str], home: str) -> SecretIndex:
    return index_for(tuple(sorted(real_roots)), home, _name_matcher())


def warm(roots: Iterable[str]) -> None:
    """Walk the system folders and the roots' secret index now (a thread at start), not in
    the first boxed call."""
    with contextlib.suppress(OSError):
        system_found(_name_matcher().secret_path)
    home = _realpath(os.path.expanduser("~"))
    real_roots = [r for r in (_real(x) for x in roots) if r is not None]
    with contextlib.suppress(OSError):
        _index(real_roots, home).view()


def _elsewhere(
    view: HostView,
    project_top: str,
    hidden_dirs: list[str],
    index: IndexView,
    secrets: list[str],
    path_real: tuple[str, ...],
) -> tuple[list[HostEntry], list[str]]:
    """What the box hides beyond the project and the home's hidden tree: secret-looking files
    elsewhere in the roots (``~/otherproj/.env``, ``secrets``) and the folders the kept index
    did not look into, then the top-level folders no OS makes (``/srv``, ``/mnt``...).
    ``path_real``: the real folders on ``PATH``."""
    python = _own_code()
    masks = _outside(
        secrets,
        (p for p in index.unindexed if not within(p, project_top)),
        hidden=hidden_dirs,
        holds=[project_top, view.cwd, view.home, *view.roots],
        under=[*view.git_dirs, *view.allowed, *view.on_path, *python, *view.tmp_visible],
        roots=view.roots,
    )
    # A git dir counts only inside a root: a ``.git`` file in the project (which the agent can
    # write) names any folder, and ``gitdir: /srv/backup/repo/.git`` re-opened that backup's
    # whole history. A worktree whose common dir lies in such a folder needs box.read_allow.
    git_dirs = [d for d in view.git_dirs if any(within(d, r) for r in view.roots)]
    needed = [*view.roots, view.cwd, project_top, view.home, *python]
    needed += [*view.write_allow, *git_dirs, *view.tmp_visible]
    programs = [*path_real, *_path_link_targets(path_real)]
    if any(r == os.sep for r in view.roots):
        return masks, []  # the human shared everything
    tops, reopened = _foreign_tops(needed, programs)
    var_tops, var_reopened = _foreign_tops(needed, programs, VAR, _var_shown())
    hidden_too = [*hidden_dirs, *(t.path for t in var_tops if t.is_dir)]
    system = _system_masks(view, hidden_too, programs, [*needed, *programs, *view.allowed])
    return [*masks, *tops, *var_tops, *system], sorted({*reopened, *var_reopened})


def _home_data_folders(home: str) -> tuple[str, ...]:
    """The home's data folders (:func:`~server.box.policy.home_data_folders`), with the user's
    ``user-dirs.dirs`` (a small file, read per call: a renamed folder counts at once)."""
    config = os.environ.get("XDG_CONFIG_HOME") or os.path.join(home, ".config")
    try:
        with open(os.path.join(config, "user-dirs.dirs"), encoding="utf-8", errors="replace") as f:
            text = f.read(65536)
    except OSError:
        text = ""
    return tuple(_realpath(d) for d in home_data_folders(home, text))


SYSTEM_MAX_MASKS = 64  # masks from the system folders' walk (see _system_masks)


@functools.cache
def _var_shown(root: str = "/") -> frozenset[str]:
    """:data:`VAR_SHOWN`, and the folders of /var a system top-level folder links to: an
    OSTree system (Fedora Silverblue, CoreOS) keeps ``/opt``, ``/usr/local`` and ``/home`` in
    ``/var/opt``, ``/var/usrlocal``, ``/var/home``; those are the system, judged as such.
    Found once: the top-level links are the OS's layout."""
    out = set(VAR_SHOWN)
    var = os.path.join(root, VAR.lstrip(os.sep))
    for top in (*SYSTEM_TOPS, "usr/local"):
        path = os.path.join(root, top)
        if os.path.islink(path):
            real = _realpath(path)
            if os.path.dirname(real) == var:
                out.add(os.path.basename(real))
    return frozenset(out)


def _system_masks(
    view: HostView, hidden: list[str], programs: list[str], keep: list[str]
) -> list[HostEntry]:
    """Secret-looking files in the system folders outside the roots (``/opt/app/.env``,
    ``/usr/local/etc/app/secret.key``: :mod:`server.box.system`, walked once), as masks: none
    in a root (the roots' index and the project scan judge those, and keep current), in a
    folder hidden whole already, or straight in a ``programs`` folder (``PATH``: a program
    named ``credentials-helper`` is code). Past :data:`SYSTEM_MAX_MASKS`, folders holding
    several become one mask, never one of :data:`~server.box.system.SYSTEM_WALK` (nor what
    holds one) and never one that holds what the call needs (``keep``)."""
    bins = set(programs)
    found = [
        p
        for p in system_found(_name_matcher().secret_path)
        if os.path.dirname(p) not in bins
        and not any(within(p, r) for r in (*view.roots, *hidden))
        and os.path.lexists(p)  # the walk is kept 10 min: a file gone since is no mount point
    ]
    if not found:
        return []
    walked = [w for w in SYSTEM_WALK if w != os.sep]

    def hideable(folder: str) -> bool:
        inside = any(within(folder, w) and folder != w for w in walked)
        return inside and not any(within(k, folder) for k in keep)

    return coalesce([HostEntry(p, False) for p in found], "/", SYSTEM_MAX_MASKS, hideable)


def _root_links(roots: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(link, real path) of each root configured by a symlink: the plan makes the link again
    in the box when a folder hidden whole holds it (the real path is re-opened)."""
    out: list[tuple[str, str]] = []
    for root in roots:
        path = os.path.abspath(os.path.expanduser(root))
        if os.path.islink(path) and (real := _real(path)) is not None and real != path:
            out.append((path, real))
    return tuple(out)


def _own_masks(
    own: Iterable[str], cwd: str, real_roots: tuple[str, ...]
) -> tuple[list[str], list[HostEntry]]:
    """(folders, files) of the bridge's own places and the system's private ones, real paths.

    Files (the config, the audit log, /etc/shadow...) are masked as files, wherever they lie:
    those this user can read. The box runs as this user without capabilities, so a file it
    cannot read (/etc/shadow for anyone but root) needs no mask; each mask is a mount, and
    bubblewrap re-reads the whole mount table for every one."""
    own_real = [r for r in (_real(p) for p in (*own, *SYSTEM_PRIVATE)) if r is not None]
    files = [HostEntry(f, False) for f in own_real if not os.path.isdir(f)]
    files += [HostEntry(f, False) for f in glob.glob(SYSTEM_PRIVATE_FILES) if os.path.isfile(f)]
    files = [f for f in files if os.access(f.path, os.R_OK)]
    own_real = [o for o in own_real if os.path.isdir(o)]
    # Never hide a folder that holds the project or a root ("/tmp/x" when the project is in it).
    own_real = [o for o in own_real if not any(within(r, o) for r in (cwd, *real_roots))]
    files = [f for f in files if not any(within(f.path, o) for o in own_real)]  # hidden with it
    return own_real, files


def _path_folders(home: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the real ``PATH`` folders, the persistence folders on it: never a project)."""
    folders = _on_path_patterns(os.environ.get("PATH", ""))
    # (a PATH entry that holds the home, ``/``, would leave no project at all: its files are
    # outside every project anyway)
    # A PATH folder that does not exist yet counts too (by where it would be): made in a
    # project (``~/tools/bin`` on PATH, the call in ``~/tools``), a program there ran outside
    # the box the next time the human typed its name, and it was never swept.
    path_dirs = [p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]
    later = [_realpath(p) for p in path_dirs if not os.path.lexists(p)]
    real_of = {p: _real(p) for p in folders}  # each resolved once per call
    path_real = tuple(dict.fromkeys(r for p in path_dirs if (r := real_of.get(p))))
    on_path = tuple(
        dict.fromkeys(r for r in (*real_of.values(), *later) if r and not within(home, r))
    )
    return path_real, on_path


def gather(
    cwd: str,
    roots: Iterable[str],
    config: BoxConfig,
    own: Iterable[str],
    named_roots: Iterable[str] = (),
) -> HostView:
    """What the disk says for a call in ``cwd`` (a real, existing folder). ``named_roots``:
    the roots as the config names them (a link there is made again in the box)."""
    kept.forget_if_remounted()
    home = _realpath(os.path.expanduser("~"))
    real_roots = tuple(r for r in (_real(x) for x in roots) if r is not None)
    cwd = _realpath(cwd)
    top, git_file, git_dirs = _git(cwd)
    data = _home_data_folders(home)
    git_real = any(_is_git_dir(d) for d in git_dirs[:1])
    draft = HostView(
        cwd=cwd, home=home, roots=real_roots, git_top=top, home_data=data, git_real=git_real
    )
    # The call's folder never unmasks what holds it: a cwd in the home's hidden tree
    # (``~/.config/git``) would otherwise open all of ``~/.config`` and make it the project.
    hidden = _hidden(home, real_roots)
    if any(within(cwd, entry.path) for entry in hidden):
        raise PrivateCwd(cwd)
    project_top = project_of(draft) or cwd
    own_real, files = _own_masks(own, cwd, real_roots)
    scan = _scan(project_top, home)
    repos = list(scan.repos)
    if top is not None and git_dirs:
        repos.append((top, git_dirs[0] if git_file is None else _common_dir(git_dirs[0])))
    # Only real git dirs: a ``.git`` file or symlink the agent wrote may name any folder
    # (the home, a work tree), and the repository's git dirs outside the project are writable.
    git_dirs = tuple(d for d in dict.fromkeys([*git_dirs, *scan.git_dirs]) if _is_git_dir(d))
    path_real, on_path = _path_folders(home)
    wanted = (*config.read_allow, *SYSTEM_READABLE)
    allowed = tuple(r for r in (_real(p) for p in wanted) if r is not None)
    write_allow = tuple(r for r in (_real(p) for p in config.write_allow) if r is not None)
    others, tmp_visible = _others(home), _tmp_visible()
    # Secret-looking files elsewhere in the roots (``~/otherproj/.env``): the kept index; those
    # in the project join the scan's masks.
    index = _index(real_roots, home).view()
    elsewhere_secrets = _in_project(scan, index, project_top, real_roots)
    view = HostView(
        cwd=cwd,
        home=home,
        roots=real_roots,
        hidden=(*hidden, *scan.masks, *files, *_secrets_allowed(allowed)),
        allowed=allowed,
        others=others,
        own=tuple(dict.fromkeys(own_real)),
        git_top=top,
        git_file=git_file,
        git_dirs=git_dirs,
        write_allow=write_allow,
        tmp_visible=tmp_visible,
        nested=tuple(dict.fromkeys(scan.nested)),
        hooks=git_named(repos, home),
        on_path=on_path,
        home_data=data,
        git_real=git_real,
        root_links=_root_links(named_roots),
        linked=tuple(scan.linked),
        unlisted=tuple(scan.unlisted),
    )
    hidden_dirs = [*(e.path for e in hidden if e.is_dir), *own_real, *others]
    beyond, reopened = _elsewhere(
        view, project_top, hidden_dirs, index, elsewhere_secrets, path_real
    )
    view = dataclasses.replace(view, hidden=(*view.hidden, *beyond), reopened=tuple(reopened))
    candidates = persistence_paths(view, project_of(view))
    existing = _existing(candidates)
    redact = _git_redacted(home, git_dirs, index.repos)
    links = _links(existing, scan.linked)
    return dataclasses.replace(view, existing=existing, links=links, git_redacted=redact)


def _existing(paths: Iterable[str]) -> frozenset[str]:
    """Which of ``paths`` exist (as ``lexists``): by their folder's listing, one ``stat`` per
    folder when it is unchanged (a project's persistence is ~40 names in a few folders)."""
    by_folder: dict[str, list[str]] = {}
    for path in paths:
        by_folder.setdefault(os.path.dirname(path), []).append(path)
    out: set[str] = set()
    for folder, inside in by_folder.items():
        listing = kept.listing(folder)
        if listing is None:  # not a folder (a symlink to one, gone, unreadable)
            out.update(p for p in inside if os.path.lexists(p))
            continue
        names = {name for name, _ in listing}
        loose: set[str] | None = None  # made once, when a name is not there as it is
        for path in inside:
            name = os.path.basename(path)
            if name in names:
                out.add(path)
                continue
            if loose is None:
                loose = {_loose(n) for n in names}
            if (name in ("", ".", "..") or _loose(name) in loose) and os.path.lexists(path):
                out.add(path)  # a file system that folds case or Unicode forms (APFS, casefold)
    return frozenset(out)


def _loose(name: str) -> str:
    """``name`` as a case- and form-insensitive file system may match it (``.VSCode`` is
    ``.vscode`` on APFS): a loose match is confirmed by ``lexists``, never taken as is."""
    return unicodedata.normalize("NFC", name).casefold()


def _links(existing: Iterable[str], linked: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """(path, target) of each persistence path that is a symlink now (see ``HostView.links``)."""
    out: list[tuple[str, str]] = []
    for path in dict.fromkeys((*existing, *linked)):
        with contextlib.suppress(OSError):
            if os.path.islink(path):
                out.append((path, os.readlink(path)))
    return tuple(out)


def _git_redacted(
    home: str, git_dirs: Iterable[str], others: Iterable[str]
) -> tuple[tuple[str, str], ...]:
    """git's config files the box may show (the global ones, every git dir of the call's
    repositories, every other repository's in the roots, what they include) that hold a
    credential, each with a redacted copy to bind over it (one ``stat`` per unchanged file)."""
    own = redacted([*git_config_files(home), *repo_configs(git_dirs)], home)
    configs = [os.path.join(r, ".git", "config") for r in others]
    return tuple(dict.fromkeys([*own, *redacted(configs, home, MAX_OTHER_REPOS)]))

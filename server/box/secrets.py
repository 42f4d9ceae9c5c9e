"""Secret-looking files in the roots, outside the call's project: an index kept current.

Why an index: the box reads the whole filesystem but private places (``shared/spec/box.md``),
and "private" includes secret-looking names anywhere (``~/otherproj/.env``, ``~/notes/id_rsa``).
The project is scanned on every call (:func:`server.box.host._scan`); the rest of the roots is
far too big for that (a home holds tens of thousands of folders), so it is walked once and then
kept current:

- on Linux by inotify: every indexed folder is watched, and before each call the queued events
  are read and only the folders they name are looked at again. The kernel queues an event
  before the ``creat``/``rename`` returns, so a secret created before the call is hidden from it;
- elsewhere (or for folders past the watch limit) by each folder's ``mtime`` and ``ctime``,
  checked per call (``tar``, ``rsync -a``, ``touch -d`` set an ``mtime`` back; nothing but the
  kernel sets a ``ctime``).

Bounded: the walk stops after :data:`MAX_DIRS` folders (breadth first: the shallow folders,
where projects keep their ``.env``, come first) and skips what :data:`SCAN_SKIP` names
(dependency and build trees). What it did not reach is reported (``complete`` is False) and
written in the docs as the box's stated limit, not hidden.

Blocking (scandir, stat, inotify reads): call it from a worker thread, as ``gather`` is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import select
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import BinaryIO

from ..policy.protected import Matcher, fold
from .policy import within

MAX_DIRS = 20_000  # folders indexed (and watched) at most, over all the roots
MAX_DEPTH = 16  # below a root
RACY_NS = 2_000_000_000  # times this close to a look are re-checked (coarse clocks, FAT: 2 s)
# Dependency and build trees, and git dirs (the project scan skips the first six too): they
# hold no secrets of the user's, and would spend the budget. Skipped wherever they lie.
SCAN_SKIP = frozenset(
    {
        ".git",
        "node_modules",
        ".venv",
        "venv",
        "__pycache__",
        "target",
        ".tox",
        "site-packages",
        "dist-packages",
        "Library",  # macOS's ~/Library; a Unity project's build cache
    }
)
# Toolchains, skipped only straight in a root or the home (``~/go``, ``~/snap``): anywhere
# else the name is a project's (``~/work/api/go`` is Go code, and its ``.env`` was readable).
TOP_SKIP = frozenset({"go", "anaconda3", "miniconda3", "snap", "AppData"})
# Caches by the names caches give themselves (``.cache``, ``.mypy_cache``, ``.parcel-cache``,
# ``cache``, ``Caches``); "cache" anywhere in a name skipped projects (``cache-service``).
CACHE_NAMES = frozenset({"cache", "caches", "cachedata"})


_OCTAL = re.compile(rb"\\([0-7]{3})")  # mountinfo's escapes: \040 a space, \012 a newline


def skipped(name: str, top: bool = False) -> bool:
    """A folder name the index does not look into (a dependency, cache or toolchain tree);
    ``top``: the folder lies straight in a root or the home."""
    if name in SCAN_SKIP or (top and name in TOP_SKIP):
        return True
    low = name.lower()
    return low in CACHE_NAMES or low.endswith("_cache") or (low[:1] == "." and "cache" in low)


class _Shut(Exception):
    """A folder that is there but may not be listed (``chmod 000``, another user's ``--x``
    drop folder). It was left out of the index and not hidden, while the box may still open
    a file in it by name (``~/drop/.env``); now it is listed as not looked into (hidden whole)
    and tried again per call, so one opened later (``chmod 700``) is looked into."""


@dataclasses.dataclass(slots=True)
class _Dir:
    stamp: tuple[int, int]  # its (mtime, ctime) in ns when looked at
    inode: tuple[int, int]  # (st_dev, st_ino): which folder this path named when looked at
    depth: int
    secrets: frozenset[str]  # names of secret-looking files (pipes too) straight in it
    subdirs: frozenset[str]  # names of the folders indexed below it
    wd: int | None = None  # its inotify watch, if it has one
    # Its mtime was too close to the look to be trusted (a change in the same clock tick
    # leaves the mtime as it was): looked at again until it is older (git's "racy" files).
    racy: bool = False
    links: frozenset[str] = frozenset()  # names of secret-looking symlinks straight in it
    repo: bool = False  # it holds a ``.git`` folder (its config may hold a credential)


@dataclasses.dataclass(frozen=True, slots=True)
class IndexView:
    """What the index holds at one moment."""

    secrets: tuple[str, ...]  # real paths of secret-looking files
    folders: int  # folders indexed
    # Folders the index knows exist but did not look into (past MAX_DIRS or MAX_DEPTH), the
    # newest first: the box looks into the newest few per call (a folder made a moment ago
    # shows at once) and hides the rest whole, so a full budget hides more and shows nothing
    # unlooked-at (server.box.host._unindexed_masks).
    unindexed: tuple[str, ...] = ()
    # Secret-looking symlinks (``~/svc/.env -> ~/vault/settings``): the secret's name is the
    # link's, so what it points to is hidden; resolved per call (a link's target can change
    # with no event in the link's folder).
    links: tuple[str, ...] = ()
    # Folders holding a ``.git`` folder: the box shows each one's ``.git/config``, which may
    # hold a credential (a redacted copy is bound over it: server.box.gitconfig).
    repos: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.unindexed


def _watcher() -> object | None:
    """An inotify instance on Linux, else None (per-call ``mtime`` checks)."""
    if sys.platform != "linux":
        return None
    try:
        import inotify_simple

        return inotify_simple.INotify(nonblocking=True)
    except (ImportError, OSError):
        return None


_Poll = Callable[[float], list[tuple[int, int]]]


def _mount_table() -> tuple[BinaryIO | None, _Poll | None]:
    """``/proc/self/mountinfo`` kept open, with a poll that says when it changed (Linux)."""
    if sys.platform != "linux":
        return None, None
    try:
        f = open("/proc/self/mountinfo", "rb")  # noqa: SIM115 - kept open with the index
    except OSError:
        return None, None
    watcher = select.poll()
    watcher.register(f.fileno(), select.POLLPRI)
    return f, watcher.poll


def _mask() -> int:
    import inotify_simple

    f = inotify_simple.flags
    return int(
        f.CREATE
        | f.DELETE
        | f.MOVED_FROM
        | f.MOVED_TO
        | f.DELETE_SELF
        | f.MOVE_SELF
        | f.ONLYDIR
        | f.DONT_FOLLOW
    )


class SecretIndex:
    """The secret-looking files in ``tops`` (real folders), minus the home's hidden tree
    (the box hides it whole) and minus :data:`SCAN_SKIP` trees. Thread-safe."""

    def __init__(
        self, tops: Iterable[str], home: str, matcher: Matcher, max_dirs: int = MAX_DIRS
    ) -> None:
        self._tops = tuple(dict.fromkeys(tops))
        self._home = home
        self._matcher = matcher
        self._max = max_dirs
        self._lock = threading.Lock()
        self._dirs: dict[str, _Dir] = {}
        # Each watch's folders: a watch belongs to an inode, so one folder known at two paths
        # (moved, and its old path not forgotten yet; a bind mount) shares one descriptor.
        self._by_wd: dict[int, set[str]] = {}
        self._polled: set[str] = set()  # indexed folders without a watch: their times say
        self._frontier: dict[str, int] = {}  # unindexed folders -> depth
        self._built = False
        self._view: IndexView | None = None  # what view() said last, while nothing changed
        self._inotify = _watcher()
        self._mount_raw = b""  # /proc/self/mountinfo when last read
        self._mount_file, self._mount_poll = _mount_table()
        self._mounted: frozenset[tuple[bytes, str]] = frozenset()  # (mount id, point) in tops
        self._watch_mask = _mask() if self._inotify is not None else 0

    def close(self) -> None:
        """Stop watching (a call still using this index walks again, by mtimes)."""
        with self._lock:
            if self._mount_file is not None:
                self._mount_file.close()
                self._mount_file, self._mount_poll, self._mount_raw = None, None, b""
            if self._inotify is not None:
                with contextlib.suppress(OSError):
                    self._inotify.close()  # type: ignore[attr-defined]
                self._inotify = None
            self._dirs.clear()
            self._polled.clear()
            self._by_wd.clear()
            self._built = False
            self._view = None

    def view(self) -> IndexView:
        """The index now: built on first use, then brought up to date (events or mtimes)."""
        with self._lock:
            if not self._built:
                self._rebuild()
                self._view = None
            elif self._refresh():
                self._view = None
            if self._view is None:
                found = [os.path.join(d, n) for d, rec in self._dirs.items() for n in rec.secrets]
                links = [os.path.join(d, n) for d, rec in self._dirs.items() for n in rec.links]
                self._view = IndexView(
                    tuple(sorted(found)),
                    len(self._dirs),
                    tuple(reversed(self._frontier)),  # newest first
                    tuple(sorted(links)),
                    tuple(sorted(d for d, rec in self._dirs.items() if rec.repo)),
                )
            return self._view

    # -- building ---------------------------------------------------------------------------

    def _rebuild(self) -> None:
        for wd in list(self._by_wd):
            self._drop_watch(wd)
        self._dirs.clear()
        self._polled.clear()
        self._frontier.clear()
        self._built = True
        self._mounts_changed()
        self._walk([(top, 0) for top in self._tops])

    def _walk(self, todo: list[tuple[str, int]]) -> None:
        """Index ``todo`` and what lies below, breadth first, within the budget."""
        queue = list(todo)
        i = 0
        while i < len(queue):
            path, depth = queue[i]
            i += 1
            if path in self._dirs:
                continue
            if len(self._dirs) >= self._max or depth > MAX_DEPTH:
                self._frontier[path] = depth  # known, not looked into: hidden whole
                continue
            self._frontier.pop(path, None)
            try:
                rec = self._look(path, depth)
            except _Shut:
                self._frontier[path] = depth  # hidden whole while it cannot be listed
                continue
            if rec is None:
                continue
            self._put(path, rec)
            queue += [(os.path.join(path, n), depth + 1) for n in rec.subdirs]

    def _look(self, path: str, depth: int) -> _Dir | None:
        """One folder: watch it first (so nothing made while it is listed is missed), then
        list it. None: it is gone (or no folder); :class:`_Shut`: it is there but may not be
        listed."""
        wd: int | None = None
        if self._inotify is not None:
            try:
                wd = self._inotify.add_watch(path, self._watch_mask)  # type: ignore[attr-defined]
            except OSError:
                wd = None  # past the watch limit, or gone: its times are checked per call
            if wd is not None:
                self._by_wd.setdefault(wd, set()).add(path)
        try:
            looked = time.time_ns()
            st = os.stat(path, follow_symlinks=False)
            stamp = (st.st_mtime_ns, st.st_ctime_ns)
            inode = (st.st_dev, st.st_ino)
        except OSError:
            if wd is not None:
                self._drop_watch(wd, path)
            return None
        try:
            entries = list(os.scandir(path))
        except OSError as e:
            if wd is not None:
                self._drop_watch(wd, path)
            if isinstance(e, (FileNotFoundError, NotADirectoryError)):
                return None
            raise _Shut(path) from None
        secrets: list[str] = []
        subdirs: list[str] = []
        links: list[str] = []
        repo = False
        for entry in entries:
            name = entry.name
            if path == self._home and name.startswith("."):
                continue  # the home's hidden tree: hidden whole by the box
            try:
                if entry.is_dir(follow_symlinks=False):
                    repo = repo or name == ".git"
                    if self._listed(path, name):
                        subdirs.append(name)
                else:  # a file, a named pipe (a password manager's ``.env``), a socket
                    if self._matcher.secret_file(fold(entry.path)):
                        (links if entry.is_symlink() else secrets).append(name)
            except OSError:
                continue
        racy = wd is None and max(stamp) >= looked - RACY_NS
        return _Dir(
            stamp,
            inode,
            depth,
            frozenset(secrets),
            frozenset(subdirs),
            wd,
            racy,
            frozenset(links),
            repo,
        )

    # -- keeping current --------------------------------------------------------------------

    def _refresh(self) -> bool:
        """Bring the index up to date; whether anything was looked at again."""
        dirty: set[str] = set()
        if self._inotify is not None:
            overflow = False
            while True:
                try:
                    events = list(self._inotify.read(timeout=0))  # type: ignore[attr-defined]
                except (BlockingIOError, OSError):
                    events = []
                if not events:
                    break
                for event in events:
                    if event.wd == -1:  # IN_Q_OVERFLOW: events were lost
                        overflow = True
                    dirty.update(self._by_wd.get(event.wd, ()))
            if overflow:
                self._rebuild()
                return True
        # Folders without a watch (no inotify here, or past its limit): their times say.
        for path in list(self._polled):
            rec = self._dirs[path]
            try:
                st = os.stat(path, follow_symlinks=False)
                if (
                    rec.racy
                    or (st.st_mtime_ns, st.st_ctime_ns) != rec.stamp
                    or (st.st_dev, st.st_ino) != rec.inode
                ):
                    dirty.add(path)
            except OSError:
                dirty.add(path)
        # A filesystem mounted or unmounted in the roots (a vault, a network drive): inotify
        # says nothing (the watch is on the folder under the mount), so the mount table does.
        # The folder's inode changes with it: it is looked into anew (see ``_again``).
        unwatched: list[tuple[str, int]] = []
        for point in self._mounts_changed():
            parent = os.path.dirname(point)
            if point in self._dirs:
                dirty.add(point)
            elif parent in self._dirs and self._listed(parent, os.path.basename(point)):
                unwatched.append((point, self._dirs[parent].depth + 1))
        # Parents first: a removed subtree is forgotten before a moved one is indexed again
        # (a watch follows its inode, so a moved folder keeps its watch descriptor).
        for path in sorted(dirty, key=lambda p: p.count(os.sep)):
            self._again(path)
        if unwatched:
            self._walk(unwatched)
            dirty.update(p for p, _ in unwatched)
        # Room again (folders went away): look into what the budget left out.
        waiting = [(p, d) for p, d in self._frontier.items() if d <= MAX_DEPTH]
        if waiting and len(self._dirs) < self._max:
            before = len(self._frontier)
            self._walk(sorted(waiting, key=lambda item: item[1]))
            return True if len(self._frontier) != before else bool(dirty)
        return bool(dirty)

    def _listed(self, parent: str, name: str) -> bool:
        """Whether the index looks into folder ``name`` of ``parent`` (not skipped, not the
        home's hidden tree)."""
        top = parent == self._home or parent in self._tops
        return not skipped(name, top) and not (parent == self._home and name.startswith("."))

    def _mounts_changed(self) -> set[str]:
        """The mount points in the roots mounted or unmounted since the last look (Linux:
        ``/proc/self/mountinfo``; elsewhere none are seen)."""
        if self._mount_file is None or self._mount_poll is None:
            return set()
        # The kernel marks the table "changed" for poll(): a call reads it only then (0.5 µs
        # against ~40 µs for a read).
        if self._mount_raw and not self._mount_poll(0):
            return set()
        try:
            self._mount_file.seek(0)
            raw = self._mount_file.read()
        except OSError:
            return set()
        if raw == self._mount_raw:
            return set()
        self._mount_raw = raw
        now: set[tuple[bytes, str]] = set()
        for line in raw.splitlines():
            fields = line.split(b" ")
            if len(fields) < 5:
                continue
            point = os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m[1], 8)]), fields[4]))
            if any(within(point, top) for top in self._tops):
                now.add((fields[0], point))
        changed = {point for _, point in now ^ self._mounted}
        self._mounted = frozenset(now)
        return changed

    def _again(self, path: str) -> None:
        """Look at one indexed folder again: its secrets now, subfolders gone and new. Its
        watch is asked for again: the same inode keeps its descriptor, a folder made anew in
        its place (``rm -r x && mkdir x``) gets one."""
        old = self._dirs.get(path)
        if old is None:
            return
        try:
            new, shut = self._look(path, old.depth), False
        except _Shut:
            new, shut = None, True
        if old.wd is not None and (new is None or new.wd != old.wd):
            self._drop_watch(old.wd, path)
        if new is None:
            self._forget(path)
            if shut:  # hidden whole until it can be listed again (looked at per call)
                self._frontier[path] = old.depth
            return
        # Another folder under the same name (``mv app app.old && git clone … app``): its
        # folders are new ones whatever their names. Keeping the old records kept their
        # watches, which follow the old inodes away: the new ``app/cfg`` went deaf.
        replaced = new.inode != old.inode
        for gone in old.subdirs if replaced else old.subdirs - new.subdirs:
            self._forget(os.path.join(path, gone))
        self._put(path, new)
        # Past the depth bound too: ``_walk`` lists those as not looked into (hidden whole).
        # Skipping them left a folder made later below the last level neither looked into
        # nor hidden, and its secrets readable.
        fresh = sorted(new.subdirs if replaced else new.subdirs - old.subdirs)
        self._walk([(os.path.join(path, n), old.depth + 1) for n in fresh])

    def _put(self, path: str, rec: _Dir) -> None:
        self._dirs[path] = rec
        if rec.wd is None:
            self._polled.add(path)
        else:
            self._polled.discard(path)

    def _forget(self, path: str) -> None:
        """Drop a folder and everything indexed below it."""
        for sub in [p for p in self._dirs if within(p, path)]:
            rec = self._dirs.pop(sub)
            self._polled.discard(sub)
            if rec.wd is not None:
                self._drop_watch(rec.wd, sub)
        for sub in [p for p in self._frontier if within(p, path)]:
            del self._frontier[sub]

    def _drop_watch(self, wd: int, path: str | None = None) -> None:
        """``path`` no longer uses the watch ``wd`` (None: nothing does); removed with its last
        path. A watch belongs to an inode, not a path: a folder moved elsewhere in the roots
        is looked into again at its new path *with the same descriptor* (``add_watch`` on a
        watched inode returns it), and forgetting the old path then removed the new path's
        watch: the moved folder (``mv ~/downloads/app ~/app``) went deaf, and a ``.env`` made
        in it later was readable."""
        owners = self._by_wd.get(wd)
        if owners is None:
            return
        if path is not None:
            owners.discard(path)
            if owners:
                return  # another path still owns it
        del self._by_wd[wd]
        if self._inotify is not None:
            with contextlib.suppress(OSError):
                self._inotify.rm_watch(wd)  # type: ignore[attr-defined]


_INDEXES: dict[tuple[tuple[str, ...], str], SecretIndex] = {}
_INDEXES_LOCK = threading.Lock()


def index_for(tops: tuple[str, ...], home: str, matcher: Matcher) -> SecretIndex:
    """The process's index for these roots (one at a time: a config with other roots closes
    the old one, and its watches with it)."""
    key = (tops, home)
    with _INDEXES_LOCK:
        found = _INDEXES.get(key)
        if found is None:
            for old in _INDEXES.values():
                old.close()
            _INDEXES.clear()
            found = _INDEXES[key] = SecretIndex(tops, home, matcher)
        return found

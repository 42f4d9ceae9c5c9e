"""Hard links to protected files: the device+inode of every protected file, so a second name
for ``~/.ssh/id_rsa`` (or for ``~/proj/.env``) is judged as the file it is, wherever it lives.

Three sets: the files in the protected locations (scanned at start, refreshed when an unknown
multiply-linked file shows up), files with secret-looking names anywhere in the roots (a
bounded background walk), and protected files judged by path since start. Every walk is
bounded and never follows symlinks. Used by :class:`server.policy.paths.PathPolicy`.
"""

from __future__ import annotations

import glob
import os
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .protected import EscalationKind, Hit, Matcher, fold

if TYPE_CHECKING:
    from .private import PrivateScope

# Hard-link recognition: how many protected files are remembered, how deep a location is
# scanned, and how stale the set may be before an unknown multiply-linked file triggers a rescan.
IDENTITY_MAX_FILES = 20_000
IDENTITY_MAX_DEPTH = 8
IDENTITY_REFRESH_S = 2.0
# Secret-looking names (``.env``, ``*.pem``) can be anywhere in the roots: a bounded background
# walk finds them (noise folders skipped), refreshed at most this often.
NAMES_MAX_ENTRIES = 200_000
NAMES_MAX_DEPTH = 8
NAMES_REFRESH_S = 30.0
NAMES_SKIP_DIRS = frozenset(
    {
        ".git",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".hg",
        ".svn",
        ".cache",
        "Library",
        "AppData",
        ".var",
        "snap",
        ".local",
        ".npm",
        ".cargo",
        ".rustup",
        "go",
        "site-packages",
        "dist-packages",
        "target",
        "build",
        "dist",
        ".pyenv",
        ".rbenv",
        ".nvm",
        ".conda",
        "anaconda3",
        "miniconda3",
        ".sdkman",
        ".gradle",
        ".m2",
        ".vscode-server",
    }
)


def _is_cache(name: str) -> bool:
    return "cache" in name.lower()


@dataclass(frozen=True, slots=True)
class Known:
    hit: Hit
    path: str


def _regular_files(
    tops: Iterable[str],
    descend: Callable[[os.DirEntry[str], int], bool],
    more: Callable[[], bool],
    max_entries: int | None = None,
) -> Iterator[os.DirEntry[str]]:
    """The regular files below ``tops``, depth first, symlinks never followed, unreadable
    folders skipped. A folder is entered when ``descend(entry, depth)``; the walk stops once
    ``more()`` is false or ``max_entries`` entries were seen (checked per folder)."""
    visited = 0
    stack = [(t, 0) for t in tops]
    while stack and more() and (max_entries is None or visited < max_entries):
        d, depth = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    visited += 1
                    try:
                        if e.is_dir(follow_symlinks=False):
                            if descend(e, depth):
                                stack.append((e.path, depth + 1))
                            continue
                        if not e.is_file(follow_symlinks=False):
                            continue
                    except OSError:
                        continue
                    yield e
        except OSError:
            continue


class IdentityIndex:
    """The device+inode of every protected file known, so a hard link is judged as its target.

    Why: a path check alone is fooled by a second name (``ln ~/.ssh/id_rsa ~/proj/x``); the
    path policy asks this index whether a file under an innocent name is a protected one.
    Scans run in the background and are bounded; judging waits only where it must.
    """

    def __init__(
        self,
        secrets: Matcher,
        roots: Sequence[str],
        own_files: Sequence[tuple[str, str]],
        private: PrivateScope | None = None,
    ) -> None:
        self._secrets = secrets
        self._private = private
        self.roots = tuple(roots)
        self._own_files = tuple(own_files)  # (real path, category) of the bridge's own files
        self._ids: dict[tuple[int, int], Known] = {}  # files in protected locations
        self._named: dict[tuple[int, int], Known] = {}  # secret-looking names in the roots
        self._seen: dict[tuple[int, int], Known] = {}  # protected files judged since start
        self._ids_at = 0.0
        self._named_at = 0.0
        self._ids_lock = threading.Lock()
        self._named_lock = threading.Lock()
        self._ids_ready = threading.Event()
        self._named_ready = threading.Event()

    def start(self) -> None:
        """Scan in the background (the bridge starts at once; judging waits where it must)."""
        threading.Thread(target=self._scan_all, name="a2a-protected-scan", daemon=True).start()

    def ready(self) -> None:
        """No scan at all (tests that do not need hard-link recognition)."""
        self._ids_ready.set()
        self._named_ready.set()

    def remember(self, st: os.stat_result, hit: Hit, path: str) -> None:
        """A protected file judged by path: its identity is known from now on."""
        if stat.S_ISREG(st.st_mode) and len(self._seen) < IDENTITY_MAX_FILES:
            self._seen.setdefault((st.st_dev, st.st_ino), Known(hit, path))

    def _scan(self) -> None:
        """Stat the files in the protected locations (bounded; symlinks never followed; cache
        folders of browser profiles skipped) and swap in the new identity set."""
        with self._ids_lock:
            fresh = time.monotonic() - self._ids_at < IDENTITY_REFRESH_S
            if fresh and self._ids_ready.is_set():
                return  # another thread just rescanned while this one waited for the lock
            ids: dict[tuple[int, int], Known] = {}
            try:
                roots: list[tuple[str, Hit]] = []
                for pattern, hit in self._secrets.locations:
                    if pattern.startswith(("/proc/", "/dev/")):
                        continue  # pseudo files: judged by path, no identity worth keeping
                    if "*" in pattern or "?" in pattern:
                        roots += [(p, hit) for p in glob.glob(pattern)]
                    else:
                        roots.append((pattern, hit))
                for p, cat in self._own_files:
                    d, name = os.path.split(p)
                    try:
                        names = [n for n in os.listdir(d) if n == name or n.startswith(name + ".")]
                    except OSError:
                        names = []
                    roots += [
                        (os.path.join(d, n), Hit(cat, EscalationKind.OWN_FILE, p)) for n in names
                    ]
                for path, hit in roots:
                    if len(ids) >= IDENTITY_MAX_FILES:
                        break
                    self._scan_one(path, hit, ids)
            finally:
                self._ids = ids
                self._ids_at = time.monotonic()
                self._ids_ready.set()

    def _private_tops(self) -> list[tuple[str, Hit]]:
        p = self._private
        if p is None:
            return []
        out = []
        for top in p.dirs_under(p.home):
            cat = p.category(fold(top))
            name = os.path.basename(top)
            # Tool and cache folders are skipped (bounded scan); ~/.local holds app data.
            noise = _is_cache(name) or (name in NAMES_SKIP_DIRS and name != ".local")
            if cat is not None and not noise:
                out.append((top, Hit(cat, EscalationKind.PROTECTED, top)))
        return out

    def _scan_all(self) -> None:
        """Protected locations first (small; hard links to them are the likely ones), then the
        walk of the roots for secret-looking names."""
        try:
            self._scan()
        finally:
            try:
                self._scan_names()
            finally:
                self._named_ready.set()

    def _scan_names(self) -> None:
        """Walk the roots (bounded, no symlinks, noise and protected folders skipped) for files
        with secret-looking names, so a hard link to ``~/proj/.env`` is recognised too."""
        with self._named_lock:
            self._named_at = time.monotonic()
            named: dict[tuple[int, int], Known] = {}
            # Private by default: the hidden home tree too (noise folders skipped). Here, not
            # in the table's scan: that one reruns every 2 s when an unknown multiply-linked
            # file shows up (a pnpm tree), this one at most every 30 s, in the background.
            for path, top_hit in self._private_tops():
                if len(named) >= IDENTITY_MAX_FILES // 2:
                    break
                self._scan_one(path, top_hit, named, noisy=True)
            for e in _regular_files(
                self.roots,
                self._walk_into,
                lambda: len(named) < IDENTITY_MAX_FILES,
                NAMES_MAX_ENTRIES,
            ):
                hit = self._secrets.file(fold(e.path))
                if hit is not None:
                    try:
                        s = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    named.setdefault((s.st_dev, s.st_ino), Known(hit, e.path))
            self._named = named
            self._named_at = time.monotonic()

    def _walk_into(self, e: os.DirEntry[str], depth: int) -> bool:
        return (
            depth < NAMES_MAX_DEPTH
            and e.name not in NAMES_SKIP_DIRS
            and self._secrets.location(fold(e.path)) is None
            and (self._private is None or self._private.category(fold(e.path)) is None)
        )

    def _scan_one(
        self, top: str, hit: Hit, ids: dict[tuple[int, int], Known], noisy: bool = False
    ) -> None:
        """``noisy``: a private-by-default top (not a known store): skip tool and cache
        folders below it, as the names walk does."""
        try:
            st = os.lstat(top)
        except OSError:
            return
        if stat.S_ISREG(st.st_mode):
            if not noisy or (st.st_dev, st.st_ino) not in ids:
                ids[(st.st_dev, st.st_ino)] = Known(hit, top)
            return
        if not stat.S_ISDIR(st.st_mode):
            return
        for e in _regular_files(
            (top,),
            lambda e, depth: (
                depth < IDENTITY_MAX_DEPTH
                and not _is_cache(e.name)
                and not (noisy and e.name in NAMES_SKIP_DIRS)
            ),
            lambda: len(ids) < IDENTITY_MAX_FILES,
        ):
            try:
                s = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if noisy:  # a store the table names keeps its own category
                ids.setdefault((s.st_dev, s.st_ino), Known(hit, e.path))
            else:
                ids[(s.st_dev, s.st_ino)] = Known(hit, e.path)

    def wait_scanned(self, timeout: float = 10.0) -> bool:
        return self._ids_ready.wait(timeout) and self._named_ready.wait(timeout)

    def find(self, st: os.stat_result, *, refresh: bool = True) -> Known | None:
        """The protected file this regular file is (by device+inode), or None.

        An unknown file with more than one link may trigger a (bounded) rescan; never with
        ``refresh=False`` (on the event loop).
        """
        ident = (st.st_dev, st.st_ino)
        known = self._ids.get(ident) or self._named.get(ident) or self._seen.get(ident)
        if known is None and st.st_nlink > 1 and refresh:
            self._ids_ready.wait(10)
            self._named_ready.wait(10)
            known = self._ids.get(ident) or self._named.get(ident)
            if known is None and time.monotonic() - self._ids_at > IDENTITY_REFRESH_S:
                self._scan()
                known = self._ids.get(ident)
            if known is None and time.monotonic() - self._named_at > NAMES_REFRESH_S:
                self._named_at = time.monotonic()  # one background walk at a time
                threading.Thread(target=self._scan_names, daemon=True).start()
        return known

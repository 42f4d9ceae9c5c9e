"""Which paths a call may touch without a human looking, and why a human must look at the others.

The real path (``~`` expanded, relative to the first root, symlinks resolved) decides, so ``..``
and a symlink that points out of a root are judged by where they land. What the tools then open
is opened without following symlinks (:mod:`server.policy.safeopen`) and judged again by its
identity,
so a swap between the check and the open cannot change the answer.

The protected locations are one table (:mod:`server.policy.protected`); this module compiles it for
the running user and answers four questions: :meth:`PathPolicy.judge` (a path argument),
:meth:`PathPolicy.judge_entry` (one entry of a walk, fast), :meth:`PathPolicy.judge_opened`
(an opened file, by path and device+inode) and :meth:`PathPolicy.protected_dirs_under` (what a
walk should prune).
"""

from __future__ import annotations

import glob
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass

from . import safeopen
from .entries import EVERY_CHILD, FolderRules
from .gitsecrets import MAX_BYTES as GIT_CONFIG_MAX_BYTES
from .gitsecrets import holds_secret, is_git_config
from .hardlinks import IdentityIndex
from .private import PrivateScope, config_named, git_dir_of
from .protected import (
    DEFAULT_PRIVATE_ALLOW,
    HIDDEN_HOME,
    TABLE,
    EscalationKind,
    Hit,
    Location,
    Matcher,
    fold,
    own_default_locations,
    removable,
)
from .safeopen import symlink_free

__all__ = ["CallPaths", "Escalation", "EscalationKind", "PathPolicy", "is_within"]

USER_CATEGORY = "protected in your config"
GIT_CONFIG_CATEGORY = "git config holding a credential"
GIT_CONFIG_CACHE = 1024  # git config files whose verdict is kept (by path and identity)
OUTSIDE_CATEGORY = "outside the configured roots"
OWN_CATEGORY = "bridge data"
# Folders whose children's rules are kept (:meth:`PathPolicy.folder_rules`); a walk of a big
# tree meets more, and then the cache starts over (compiling one costs a few µs).
FOLDER_CACHE = 4096
NAME_CACHE = 65536  # entry names -> (folded, secret-looking): ~10 MB at most


@dataclass(frozen=True, slots=True)
class Escalation:
    """Why a call needs a human: what kind, in words a human reads, and the real path."""

    kind: EscalationKind
    category: str  # human words shown in every UI, e.g. "SSH keys", "shell startup file"
    path: str  # the real path that was judged

    @property
    def text(self) -> str:
        k = self.kind
        if k is EscalationKind.OUTSIDE_ROOTS:
            return f"{self.path} is outside the configured roots"
        if k is EscalationKind.OWN_FILE:
            return f"{self.path} is one of the bridge's own files ({self.category})"
        if k is EscalationKind.UNCHECKED:
            return (
                f"the call was not checked for protected paths ({self.category}); "
                "a human must look at it"
            )
        if k is EscalationKind.PERSISTENCE:
            return (
                f"{self.path} is a persistence location ({self.category}); "
                "writing there can make programs run later"
            )
        return f"{self.path} is in a protected location ({self.category})"

    @property
    def always_asks(self) -> bool:
        """No session grant, "always allow" or rule covers it: only a human decision does."""
        return self.kind is not EscalationKind.OUTSIDE_ROOTS

    def to_json(self) -> dict[str, str]:
        return {
            "kind": str(self.kind),
            "category": self.category,
            "path": self.path,
            "text": self.text,
        }

    def __str__(self) -> str:
        return self.text


def always_asks(escalation: Escalation | None) -> bool:
    """An escalation no rule, grant or "always allow" may cover: only a human decision does."""
    return escalation is not None and escalation.always_asks


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _norm(path: str) -> str:
    return os.path.normcase(path)  # case-insensitive file systems on Windows


def _prefix(path: str) -> str:
    return path if path.endswith(os.sep) else path + os.sep


def is_within(path: str, parent: str) -> bool:
    """``path`` is ``parent`` or below it; both are normalised real paths, so a prefix test is
    exact (``/a/bc`` is not inside ``/a/b``) and much cheaper than ``commonpath``."""
    return path == parent or path.startswith(_prefix(parent))


def user_location(entry: str) -> str:
    """A ``protected.add`` entry in table syntax: ``~/x``, ``/abs``, a bare name, ``**/a/b``."""
    if entry.startswith(("~", "**/")) or "/" not in entry or os.path.isabs(entry):
        return entry
    return os.path.abspath(entry)


def _named(entry: str | tuple[str, str]) -> tuple[str, str]:
    return (entry, OWN_CATEGORY) if isinstance(entry, str) else entry


def unescape_name(p: str) -> str:
    """``caf\\xe9.txt`` (as ``ls``/``find``/``grep`` show a non-UTF-8 name) back to the real
    name, when the literal path does not exist and the unescaped one does."""
    if os.path.lexists(p):
        return p
    raw = re.sub(r"\\x([89a-fA-F][0-9a-fA-F])", lambda m: chr(0xDC00 + int(m.group(1), 16)), p)
    return raw if raw != p and os.path.lexists(raw) else p


class PathPolicy:
    """Roots, the protected table (with the user's additions and removals), the bridge's own
    files, and the identities of protected files for recognising hard links."""

    def __init__(
        self,
        roots: Iterable[str],
        sensitive: Iterable[str] = (),
        own_files: Iterable[str | tuple[str, str]] = (),
        *,
        remove: Iterable[str] = (),
        own_dirs: Iterable[str | tuple[str, str]] = (),
        home: str | None = None,
        scan_identities: bool = True,
        private_allow: Iterable[str] = DEFAULT_PRIVATE_ALLOW,
        other_homes: Iterable[str] | None = None,
    ) -> None:
        self.home = _real(home or "~")
        # Private by default: the home's hidden tree and other users' homes, minus the allow
        # list; ``~`` in an allow entry is this policy's home.
        allow = [self.home + a[1:] if a == "~" or a.startswith("~/") else a for a in private_allow]
        self.private = PrivateScope(self.home, allow, other_homes)
        self.roots = tuple(_real(r) for r in roots) or (self.home,)
        removed = tuple(remove)
        table = [loc for loc in TABLE if not any(removable(r, loc) for r in removed)]
        added = [Location(user_location(p), USER_CATEGORY) for p in sensitive]
        own = [
            Location(d, cat, EscalationKind.OWN_FILE)
            for d, cat in map(_named, (*own_default_locations(), *own_dirs))
            if d
        ]
        persist = EscalationKind.PERSISTENCE
        secrets = [loc for loc in (*table, *added, *own) if loc.kind is not persist]
        persistence = [loc for loc in table if loc.kind is persist]
        self._secrets = Matcher(secrets, self.home)
        self._persistence = Matcher(persistence, self.home)
        # The bridge's config (holds the token on fallback) and audit log with its rotations.
        named = [(_real(p), cat) for p, cat in map(_named, own_files)]
        self.own_files = tuple(p for p, _ in named)
        self._own = {fold(p): cat for p, cat in named}
        self._own_below = tuple(k + "." for k in self._own) or ("\0",)
        # Precomputed for the hot path: one str.startswith over a tuple per check.
        self._roots_exact = frozenset(_norm(r) for r in self.roots)
        self._roots_below = tuple(_prefix(_norm(r)) for r in self.roots)
        self._folders: dict[str, FolderRules] = {}
        self._names: dict[str, tuple[str, bool]] = {}
        # git config files read for credentials: real path -> (identity, holds one)
        self._git_configs: dict[str, tuple[tuple[int, int, int, int, int], bool]] = {}
        # Hard links: (st_dev, st_ino) of protected files -> what they are.
        self._identities = IdentityIndex(
            self._secrets,
            self.roots,
            tuple((p, self._own[fold(p)]) for p in self.own_files),
            private=self.private,
        )
        if scan_identities:
            self._identities.start()
        else:
            self._identities.ready()

    # -- paths as the model gives them ----------------------------------------------------------

    def resolve(self, path: str | None) -> str:
        """Absolute real path for a tool argument; an empty or absent path is the first root."""
        if not path:
            return self.roots[0]
        p = os.path.expanduser(path)
        if not os.path.isabs(p):
            p = os.path.join(self.roots[0], p)
        if "\\x" in p:  # a non-UTF-8 name as the walking tools show it (walkpolicy.shown_name)
            p = unescape_name(p)
        if symlink_free(p):  # the common case in one syscall; else realpath's walk
            return p
        for _ in range(5):
            try:
                return os.path.realpath(p)
            except OSError:  # a link vanished between realpath's lstat and readlink: retry
                continue
        # Still racing: judge the plain normalised path; opening it follows no symlink anyway.
        return os.path.normpath(p)

    def display(self, real: str) -> str:
        """A path as the model should see it: relative to the first root when inside it."""
        root = self.roots[0]
        if is_within(real, root) and real != root:
            return os.path.relpath(real, root)
        return real

    def escalation(
        self, path: str | None, *, write: bool = False, probe: bool = False
    ) -> Escalation | None:
        return self.judge(self.resolve(path), write=write, probe=probe)

    # -- judging --------------------------------------------------------------------------------

    def _secret_hit(self, key: str, name_check: bool = True) -> Hit | None:
        if key in self._own or key.startswith(self._own_below):
            cat = self._own.get(key) or next(
                c for k, c in self._own.items() if key.startswith(k + ".")
            )
            return Hit(cat, EscalationKind.OWN_FILE, key)
        hit = self._secrets.location(key)
        if hit is None and name_check:
            hit = self._secrets.file(key)  # its name, or its last components (.kube/config)
        if hit is None:
            hit = self._secrets.anywhere(key)
        return hit

    def _private_hit(self, key: str, *, write: bool) -> Hit | None:
        """A private place no table entry names (the hidden home tree, another user's home):
        for a write to the hidden tree a persistence location, else a private one; the
        category is the table's when it knows the place (``~/.bashrc``: shell startup file)."""
        category = self.private.category(key)
        if category is None:
            return None
        if write and category == HIDDEN_HOME:
            return Hit("hidden file in your home", EscalationKind.PERSISTENCE, key)
        if not write:
            known = self._persistence.location(key)
            category = known.category if known is not None else category
        return Hit(category, EscalationKind.PROTECTED, key)

    def judge(self, real: str, *, write: bool = False, probe: bool = False) -> Escalation | None:
        """Why the already-resolved ``real`` path needs a human, or None.

        Order: the bridge's own files and protected locations (secrets), then, for a write,
        persistence locations, then the private-by-default places, then (``probe``, for a
        write by a built-in tool) a folder that is a git dir, then the roots.
        """
        key = fold(real)
        hit = self._secret_hit(key)
        if hit is None and write:
            hit = self._persistence.location(key) or self._persistence.anywhere(key)
            if hit is None:
                hit = self._persistence.name(key[key.rfind("/") + 1 :])
        if hit is None:
            hit = self._private_hit(key, write=write)
        if hit is None and write and probe:
            gitdir = git_dir_of(real)
            if gitdir is not None:
                hit = Hit(f"git metadata in {gitdir}", EscalationKind.PERSISTENCE, real)
            else:
                named = config_named(real, self.home)
                if named is not None:
                    hit = Hit(f"named by git config: {named}", EscalationKind.PERSISTENCE, real)
        if hit is not None:
            return Escalation(hit.kind, hit.category, real)
        n = _norm(real)
        if not (n in self._roots_exact or n.startswith(self._roots_below)):
            return Escalation(EscalationKind.OUTSIDE_ROOTS, OUTSIDE_CATEGORY, real)
        return None

    def judge_entry(self, real: str, st: os.stat_result | None = None) -> Escalation | None:
        """One entry of a walk: protected location, own file, secret-looking name, or a hard
        link to a known protected file. Not "outside the roots" and not persistence (walks
        read). Fast: a few prefix tests and one regex on the name.

        With ``st`` (from ``lstat``/``DirEntry.stat(follow_symlinks=False)``): a directory is not
        judged by its name (a venv called ``.env`` is fine), and a regular file is also judged
        by its device+inode. Call it from a worker thread: an unknown multiply-linked file may
        trigger a (bounded) rescan of the protected files.
        """
        is_dir = st is not None and stat.S_ISDIR(st.st_mode)
        key = fold(real)
        hit = self._secret_hit(key, name_check=not is_dir) or self._private_hit(key, write=False)
        if hit is not None:
            if st is not None and not is_dir:
                self._identities.remember(st, hit, real)
            return Escalation(hit.kind, hit.category, real)
        if st is not None and stat.S_ISREG(st.st_mode):
            return self.judge_identity(real, st)
        return None

    def folder_rules(self, real_dir: str) -> FolderRules:
        """Which children of the real folder ``real_dir`` may be refused by their path: walks
        judge the others by name and link count alone (:mod:`server.policy.entries`)."""
        dkey = fold(real_dir).rstrip("/") or "/"
        rules = self._folders.get(dkey)
        if rules is None:
            rules = self._compile_folder(dkey)
            if len(self._folders) >= FOLDER_CACHE:
                self._folders.clear()
            self._folders[dkey] = rules
        return rules

    def _compile_folder(self, dkey: str) -> FolderRules:
        if self._secrets.has_anywhere:
            return EVERY_CHILD  # a user's ``**/`` pattern: judged per path, as before
        if self._secret_hit(dkey, name_check=False) or self._private_hit(dkey, write=False):
            return EVERY_CHILD  # the folder itself is refused (or holds a refused prefix)
        below = dkey.rstrip("/") + "/"
        names, patterns = self._secrets.children(below)
        tail_names, tail_patterns = self._secrets.tail_children(dkey.rstrip("/"))
        names, patterns = names | tail_names, patterns + tail_patterns
        private_names, prefixes = self.private.children(below)
        own = [o[len(below) :] for o in self._own if o.startswith(below)]
        own = [o for o in own if "/" not in o]  # a file directly in this folder (+ rotations)
        return FolderRules(
            False,
            names | private_names | frozenset(own),
            prefixes + tuple(o + "." for o in own),
            patterns,
        )

    def name_info(self, name: str) -> tuple[str, bool]:
        """A walked entry's name folded, and whether it is secret-looking as a file's name
        (``.env``, ``*.pem``, wherever it is); cached, as the same names recur in every walk."""
        info = self._names.get(name)
        if info is None:
            key = fold(name)
            info = (key, self._secrets.name(key) is not None)
            if len(self._names) >= NAME_CACHE:
                self._names.clear()
            self._names[name] = info
        return info

    def judge_opened(
        self, real: str, st: os.stat_result, *, write: bool = False, refresh: bool = True
    ) -> Escalation | None:
        """An opened file: its real path and its identity (a hard link to a protected file is
        that file, also outside the roots). ``refresh=False`` on the event loop: never rescan
        there."""
        esc = self.judge(real, write=write, probe=write)
        if esc is not None and esc.always_asks:
            if stat.S_ISREG(st.st_mode) and esc.kind is not EscalationKind.PERSISTENCE:
                self._identities.remember(st, Hit(esc.category, esc.kind, real), real)
            return esc
        if stat.S_ISREG(st.st_mode):
            return self.judge_identity(real, st, refresh=refresh) or esc
        return esc

    def judge_identity(
        self, real: str, st: os.stat_result, *, refresh: bool = True
    ) -> Escalation | None:
        """A regular file that is (by device+inode) a known protected file."""
        known = self._identities.find(st, refresh=refresh)
        if known is None or known.path == real:
            return None if known is None else Escalation(known.hit.kind, known.hit.category, real)
        category = f"{known.hit.category}; hard link to {known.path}"
        return Escalation(known.hit.kind, category, real)

    def protected_dirs_under(self, base: str) -> list[str]:
        """Real paths of the protected locations (and own files) that exist at or below
        ``base``: a walk prunes them without looking inside. Secret-looking names are not
        listed (they are judged per entry)."""
        out: list[str] = []
        bkey = fold(base).rstrip("/")
        below = bkey + "/"
        for pattern, _hit in self._secrets.locations:
            k = fold(pattern)
            head = k.split("*", 1)[0].split("?", 1)[0]
            if head == k:  # a plain location
                if (k == bkey or k.startswith(below)) and os.path.lexists(pattern):
                    out.append(pattern)
            elif head.startswith(below) or below.startswith(head) or head == bkey:
                # Only glob what could lie under base (never all of /proc for a home walk).
                for p in glob.glob(pattern):
                    pk = fold(p)
                    if pk == bkey or pk.startswith(below):
                        out.append(p)
        for p in self.own_files:
            k = fold(p)
            if (k == bkey or k.startswith(below)) and os.path.lexists(p):
                out.append(p)
        out += self.private.dirs_under(base)
        return sorted(set(out))

    def wait_scanned(self, timeout: float = 10.0) -> bool:
        return self._identities.wait_scanned(timeout)

    # -- git config files that hold a credential ----------------------------------------------

    @staticmethod
    def _config_key(st: os.stat_result) -> tuple[int, int, int, int, int]:
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def git_config_verdict(self, real: str, st: os.stat_result) -> bool | None:
        """Whether the git config file ``real`` (as ``st`` says it is now) holds a credential:
        None when it was not read in that state (:meth:`inspect_git_configs` reads it). No
        I/O: safe on the event loop."""
        hit = self._git_configs.get(real)
        return hit[1] if hit is not None and hit[0] == self._config_key(st) else None

    def git_config_holds_secret(self, real: str) -> bool:
        """Blocking (a worker thread): whether the git config file ``real`` holds a
        credential now, read only when its identity changed since the last look."""
        try:
            st = os.stat(real)
        except OSError:
            return False
        verdict = self.git_config_verdict(real, st)
        if verdict is None:
            self.inspect_git_configs([real])
            verdict = self.git_config_verdict(real, st)
        return verdict is not False

    def inspect_git_configs(self, paths: Iterable[str]) -> None:
        """Blocking (a worker thread): read each git config file (at most
        :data:`~server.policy.gitsecrets.MAX_BYTES`; a bigger one counts as holding a
        credential) and keep whether it holds one, by its identity."""
        for real in paths:
            try:
                fd = safeopen.open_read(real)[0]
            except (OSError, safeopen.NotRegular, safeopen.PathChanged):
                continue
            try:
                st = os.fstat(fd)
                data = b""
                while len(data) <= GIT_CONFIG_MAX_BYTES:
                    chunk = os.read(fd, GIT_CONFIG_MAX_BYTES + 1 - len(data))
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                continue
            finally:
                os.close(fd)
            secret = len(data) > GIT_CONFIG_MAX_BYTES or holds_secret(
                data.decode("utf-8", "replace")
            )
            if len(self._git_configs) >= GIT_CONFIG_CACHE:
                self._git_configs.clear()
            self._git_configs[real] = (self._config_key(st), secret)


class CallPaths:
    """The path policy as one call sees it: each path is resolved (and stat'ed) once.

    The escalation check and the tool then act on the very same real path (no second
    ``realpath``), and the tool can tell whether what it opened is what was judged.
    """

    def __init__(self, policy: PathPolicy) -> None:
        self.policy = policy
        self.roots = policy.roots
        self._memo: dict[str, str] = {}
        self._stats: dict[str, os.stat_result | None] = {}
        # git config files met by this call whose content was not read yet: the pipeline
        # reads them in a worker (PathPolicy.inspect_git_configs) and judges the call again.
        self.unread_git_configs: list[str] = []

    def resolve(self, path: str | None) -> str:
        key = path or ""
        real = self._memo.get(key)
        if real is None:
            real = self._memo[key] = self.policy.resolve(path)
        return real

    def stat(self, real: str) -> os.stat_result | None:
        """``os.stat`` of a resolved path, memoised for the call; None when it cannot be
        stat'ed (missing, no permission)."""
        if real in self._stats:
            return self._stats[real]
        try:
            st: os.stat_result | None = os.stat(real)
        except (OSError, ValueError):
            st = None
        self._stats[real] = st
        return st

    def escalation(
        self, path: str | None, *, write: bool = False, probe: bool = False
    ) -> Escalation | None:
        """``probe``: also look for a git dir around a written path (a built-in write; the
        bash check judges thousands of words and does not probe)."""
        real = self.resolve(path)
        esc = self.policy.judge(real, write=write, probe=probe)
        if esc is None or not esc.always_asks:
            st = self.stat(real)
            if st is not None and stat.S_ISREG(st.st_mode):
                # On the loop: no rescan here; the tool re-judges what it opens.
                esc = self.policy.judge_identity(real, st, refresh=False) or esc
                if (esc is None or not esc.always_asks) and is_git_config(real):
                    esc = self._git_config(real, st) or esc
        return esc

    def _git_config(self, real: str, st: os.stat_result) -> Escalation | None:
        """A git config file holding a credential is private, like a secret-looking file
        (``~/.gitconfig`` and ``.git/config`` are readable for git's sake, and git keeps
        tokens there); one not read yet is noted for the pipeline."""
        verdict = self.policy.git_config_verdict(real, st)
        if verdict is None:
            if real not in self.unread_git_configs:
                self.unread_git_configs.append(real)
            return None
        if not verdict:
            return None
        return Escalation(EscalationKind.PROTECTED, GIT_CONFIG_CATEGORY, real)

    def display(self, real: str) -> str:
        return self.policy.display(real)

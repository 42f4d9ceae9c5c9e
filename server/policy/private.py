"""Private by default: the places no table has to list.

The protected table (:mod:`server.policy.protected`) names the stores it knows, with the category a
human reads; lists of bad places are never complete, so the path policy also treats as private
every place a credential store or a start-up hook usually lives, listed or not:

- the home's whole hidden tree (``~/.*``): private for reads, persistence for writes; the same
  for each snap app's own home (``~/snap/<app>/<revision|common>/.*``);
- other users' homes;

except the paths in ``private.allow`` (and what lies below them). :class:`PrivateScope` answers
"is this folded key private, and in which words" with prefix tests only (it runs per walked
entry), and lists what a walk must prune.

:func:`git_dir_of` is the one file-system probe here: a folder that *is* a git dir (``HEAD`` +
``objects`` + ``refs``, or ``HEAD`` + ``commondir``) whatever its name, so a write that makes or
fills one (the target of an agent-written ``.git`` file) always asks.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping

from .protected import HIDDEN_HOME, OTHER_HOME, fold

__all__ = [
    "PrivateScope",
    "config_entries",
    "config_named",
    "git_config_files",
    "git_dir_of",
    "git_named",
    "included_files",
    "other_homes",
    "snap_homes",
]

APP_DATA = ("library", "appdata")  # folded names of the hidden app-data folders
# A snap app's homes: ``~/snap/<app>/<revision>`` (``current`` links to one) and
# ``~/snap/<app>/common``, each the ``HOME`` the app runs with, its hidden tree its own
# (Ubuntu's Firefox and Chromium, the Slack, Telegram and VS Code snaps keep their data there).
SNAP = "snap"
MAX_SNAP_HOMES = 512  # listed per walk that reaches ~/snap (apps times revisions: a few dozen)
MAX_ANCESTORS = 64  # of a written path, probed for git dirs
_PRUNE_DEPTH = 8  # folders below a hidden one walked to keep an allowed path reachable


def _real(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def _within(key: str, parent: str) -> bool:
    return key == parent or key.startswith(parent + "/")


def _account_home() -> set[str]:
    """This account's home from the password database (POSIX), which may differ from the
    ``HOME`` in use. Only our own entry: enumerating the database can be slow (LDAP)."""
    if sys.platform == "win32":
        return set()
    import pwd

    try:
        return {os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir)}
    except KeyError:
        return set()


def other_homes(home: str) -> list[str]:
    """Real paths of other users' home folders: every ``/home/*`` and ``/Users/*`` folder (on
    Windows the home's siblings) and ``/root``, except this user's own (the ``HOME`` in use
    and the account's) and any folder that holds it."""
    mine = _account_home()
    mine.add(home)
    found: set[str] = set()
    bases = [os.path.dirname(home)] if sys.platform == "win32" else ["/home", "/Users"]
    for base in bases:
        try:
            names = os.listdir(base)
        except OSError:
            continue
        skip = ("Shared", "Public", "Default", "Default User", "All Users")
        found.update(os.path.join(base, n) for n in names if n not in skip)
    if sys.platform != "win32":
        found.add("/root")
    out = []
    for h in found:
        real = os.path.realpath(h)
        if real in ("/", "") or not os.path.isdir(real):
            continue
        if any(_within(m, real) or _within(real, m) for m in mine):
            continue  # our own home, or a folder that holds it
        if sys.platform != "win32" and not real.startswith(
            ("/home/", "/Users/", "/root", "/var/root")
        ):
            continue  # service accounts' homes (/var/lib/x, /nonexistent) are not homes
        out.append(real)
    return sorted(out)


class PrivateScope:
    """The home's hidden tree and other users' homes, minus ``private.allow``."""

    def __init__(
        self, home: str, allow: Iterable[str], others: Iterable[str] | None = None
    ) -> None:
        self.home = home
        fhome = fold(home).rstrip("/")
        # ``~/.*``, and the folders macOS and Windows hide in the home for the same purpose
        # (app data, credentials, start-up items): ``~/Library``, ``~/AppData``.
        app_data = tuple(fhome + "/" + h for h in APP_DATA)
        # Walks call :meth:`category` per entry: one tuple ``startswith`` and one set lookup.
        self._hidden_below = (fhome + "/.", *(a + "/" for a in app_data))
        self._hidden_exact = frozenset(app_data)
        self._snap_below = fhome + "/" + SNAP + "/"
        self.allow = tuple(_real(a) for a in allow)
        self._allow = tuple(fold(a) for a in self.allow)
        self.others = tuple(other_homes(home) if others is None else others)
        self._others = tuple(fold(o) for o in self.others)
        self._others_below = tuple(o + "/" for o in self._others) or ("\0",)
        self._others_exact = frozenset(self._others)

    def allowed(self, key: str) -> bool:
        return any(_within(key, a) for a in self._allow)

    def category(self, key: str) -> str | None:
        """Why the folded real path ``key`` is private, or None."""
        if key.startswith(self._hidden_below) or key in self._hidden_exact:
            return None if self.allowed(key) else HIDDEN_HOME
        if key.startswith(self._snap_below) and self._in_snap_hidden(key):
            return None if self.allowed(key) else HIDDEN_HOME
        if key.startswith(self._others_below) or key in self._others_exact:
            return None if self.allowed(key) else OTHER_HOME
        return None

    def _in_snap_hidden(self, key: str) -> bool:
        """``key`` (below ``~/snap/``) lies in a snap home's hidden tree:
        ``<app>/<home>/.<name>`` and below."""
        parts = key[len(self._snap_below) :].split("/", 3)
        return len(parts) >= 3 and bool(parts[0]) and bool(parts[1]) and parts[2][:1] == "."

    def _snap_home(self, below: str) -> bool:
        """``below`` (a folded folder key plus ``/``) is a snap home: ``~/snap/<app>/<home>/``."""
        if not below.startswith(self._snap_below):
            return False
        parts = below[len(self._snap_below) : -1].split("/")
        return len(parts) == 2 and all(parts)

    def children(self, below: str) -> tuple[frozenset[str], tuple[str, ...]]:
        """For the folder whose folded key plus ``/`` is ``below`` (itself not private): the
        child names, and name prefixes, that may be private (:mod:`server.policy.entries`).
        Only the home's (and a snap home's) children can enter a hidden tree, and only a
        home's parent holds another user's home; below an allowed folder nothing is private."""
        names = {o[len(below) :] for o in self._others if o.startswith(below)}
        prefixes: tuple[str, ...] = ()
        if below == self._hidden_below[0][:-1]:  # the home: ~/.*, ~/Library, ~/AppData
            names.update(APP_DATA)
            prefixes = (".",)
        elif self._snap_home(below):  # ~/snap/<app>/<home>/.*
            prefixes = (".",)
        return frozenset(n for n in names if n and "/" not in n), prefixes

    def dirs_under(self, base: str) -> list[str]:
        """Private folders and files at or below the real folder ``base`` that a walk prunes:
        the hidden entries of the home and of each snap home (an entry holding an allowed
        path is opened, and its other entries pruned) and other users' homes."""
        out: list[str] = []
        bkey = fold(base).rstrip("/")
        if _within(fold(self.home), bkey):
            for n in _listdir(self.home):
                if n.startswith(".") or fold(n) in APP_DATA:
                    self._prune(os.path.join(self.home, n), out, 0)
        snap = os.path.join(self.home, SNAP)
        if _within(fold(snap), bkey) or _within(bkey, fold(snap)):
            for home in snap_homes(self.home):
                if _within(fold(home), bkey) or _within(bkey, fold(home)):
                    for n in _listdir(home):
                        if n.startswith("."):
                            self._prune(os.path.join(home, n), out, 0)
        for o in self.others:
            if _within(fold(o), bkey) or _within(bkey, fold(o)):
                out.append(o)
        return [p for p in out if _within(fold(p), bkey)]

    def _prune(self, path: str, out: list[str], depth: int) -> None:
        key = fold(path)
        if self.allowed(key):
            return
        holds_allowed = any(a.startswith(key + "/") for a in self._allow)
        if not holds_allowed or depth >= _PRUNE_DEPTH or not os.path.isdir(path):
            out.append(path)
            return
        try:
            names = os.listdir(path)
        except OSError:
            out.append(path)
            return
        for n in names:
            self._prune(os.path.join(path, n), out, depth + 1)


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def snap_homes(home: str) -> list[str]:
    """Each snap app's homes under ``home``: ``~/snap/<app>/<revision|common|current>``
    (a link among them too: ``current``), at most :data:`MAX_SNAP_HOMES`."""
    snap = os.path.join(home, SNAP)
    out: list[str] = []
    for app in sorted(_listdir(snap)):
        for name in sorted(_listdir(os.path.join(snap, app))):
            out.append(os.path.join(snap, app, name))
            if len(out) >= MAX_SNAP_HOMES:
                return out
    return out


def _is_git_dir(d: str, written: str) -> bool:
    """``d`` holds (or, once ``written`` exists, will hold) what git needs to use it."""

    def has(name: str) -> bool:
        p = os.path.join(d, name)
        return written == p or written.startswith(p + os.sep) or os.path.lexists(p)

    return has("HEAD") and ((has("objects") and has("refs")) or has("commondir"))


def git_dir_of(real: str) -> str | None:
    """The git dir ``real`` is in (or would complete by being written), or None.

    Git uses a folder as a repository when it holds ``HEAD`` plus ``objects`` and ``refs`` (or
    a ``commondir``), wherever a ``.git`` file points; so writing into such a folder (or the
    file that makes a folder one) can change what the next ``git status`` runs. A few
    ``lstat`` calls per ancestor, bounded."""
    d = os.path.dirname(real)
    for _ in range(MAX_ANCESTORS):
        if _is_git_dir(d, real):
            return d
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
    return None


_SECTION = re.compile(r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\]\s*(.*)$')
_ENTRY = re.compile(r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*?))?\s*$")


def _config_entries(config: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a git config file (:func:`config_entries`); unreadable: none."""
    try:
        with open(config, encoding="utf-8", errors="replace") as f:
            return config_entries(f.read(1 << 20))
    except OSError:
        return []


def config_entries(text: str) -> list[tuple[str, str, str]]:
    """(section, key, value) of a git config text, folded like git (a plain reading: no
    continuation lines; a comment after a value ends it)."""
    out: list[tuple[str, str, str]] = []
    section = ""
    for line in text.splitlines():
        head = _SECTION.match(line)
        if head:
            section, line = head.group(1).lower(), head.group(3)
        entry = _ENTRY.match(line)
        if entry is None or entry.group(2) is None:
            continue
        value = re.split(r"\s[#;]", entry.group(2), maxsplit=1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out.append((section, entry.group(1).lower(), value))
    return out


# Where git reads its system-wide config: ``$(prefix)/etc/gitconfig`` of each usual install
# (distribution, Homebrew, Xcode's tools; Git for Windows and its ProgramData file).
SYSTEM_GIT_CONFIGS: tuple[str, ...] = (
    ("C:/Program Files/Git/etc/gitconfig", "C:/ProgramData/Git/config")
    if sys.platform == "win32"
    else (
        "/etc/gitconfig",
        "/usr/local/etc/gitconfig",
        "/opt/homebrew/etc/gitconfig",
        "/Library/Developer/CommandLineTools/usr/share/git-core/gitconfig",
        "/Applications/Xcode.app/Contents/Developer/usr/share/git-core/gitconfig",
    )
)
MAX_INCLUDE_DEPTH = 10  # git's own: a deeper chain is an error, git runs nothing from it
MAX_CONFIG_FILES = 128  # files read per chain (each is read once, whatever includes it)


def git_config_files(home: str, env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Every system and global config file git may read for this user: the system files
    (:data:`SYSTEM_GIT_CONFIGS`, ``GIT_CONFIG_SYSTEM``), ``GIT_CONFIG_GLOBAL``,
    ``$XDG_CONFIG_HOME/git/config``, ``~/.config/git/config`` and ``~/.gitconfig``. More
    than one git reads (``GIT_CONFIG_GLOBAL`` replaces the last three, the human's shell may
    set what the bridge's does not): what one of them names is kept read-only, failing closed.
    """
    env = os.environ if env is None else env
    out = list(SYSTEM_GIT_CONFIGS)
    for var in ("GIT_CONFIG_SYSTEM", "GIT_CONFIG_GLOBAL"):
        value = env.get(var, "")
        if value and value != os.devnull:
            out.append(_resolve(home, value, home))
    xdg = env.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(xdg):
        out.append(os.path.join(xdg, "git", "config"))
    out += [os.path.join(home, ".config", "git", "config"), os.path.join(home, ".gitconfig")]
    return tuple(dict.fromkeys(out))


def included_files(config: str, real: str, text: str, home: str) -> list[str]:
    """The files the config text of ``config`` (real path ``real``) includes: each
    ``include.path`` and every ``includeIf.<condition>.path`` (every condition counts), as
    :func:`_include_targets` resolves them. One reading for the hooks' chain and the box's
    redacted copies."""
    return [
        target
        for section, name, value in config_entries(text)
        if section in ("include", "includeif") and name == "path" and value
        for target in _include_targets(config, real, value, home)
    ]


def _include_targets(config: str, real: str, value: str, home: str) -> tuple[str, ...]:
    """The files an ``include.path`` (or ``includeIf.*.path``) ``value`` in ``config`` (whose
    real path is ``real``) names: ``~`` and ``~user`` expanded (:func:`_resolve`), a relative
    path joined to the including file's folder — git's word for that folder is the path it
    opened (a symlinked ``~/.gitconfig`` includes relative to ``~``); the folder the file
    really lies in too."""
    if value.startswith("%(prefix)/"):
        return ()  # relative to git's install prefix: the system's, not the agent's
    out = [_resolve(os.path.dirname(config), value, home)]
    if real != config:
        out.append(_resolve(os.path.dirname(real), value, home))
    return tuple(dict.fromkeys(out))


Entry = tuple[str, str, str, tuple[str, ...]]  # section, key, value, files an include names


def _config_chain(configs: Iterable[str], home: str) -> list[Entry]:
    """(section, key, value, included files) of each config file in ``configs`` and of every
    file they include (``include.path`` and every ``includeIf.<condition>.path``), depth
    first, to :data:`MAX_INCLUDE_DEPTH` levels as git does. Every condition counts as true
    (which repository, branch or remote it asks about is not known here: fail closed). A file
    is read once however often it is included (by its identity: a cycle ends there, through
    links too), at most :data:`MAX_CONFIG_FILES`; an absent one costs one ``stat``."""
    out: list[Entry] = []
    seen: set[tuple[int, int]] = set()
    todo = [(c, 0) for c in reversed(list(configs))]
    while todo and len(seen) < MAX_CONFIG_FILES:
        config, depth = todo.pop()
        try:
            st = os.stat(config)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        real = ""
        included: list[str] = []
        for section, name, value in _config_entries(config):
            targets: tuple[str, ...] = ()
            if section in ("include", "includeif") and name == "path" and value:
                real = real or os.path.realpath(config)
                targets = _include_targets(config, real, value, home)
                included += targets
            out.append((section, name, value, targets))
        if depth < MAX_INCLUDE_DEPTH:
            todo += [(t, depth + 1) for t in reversed(included)]
    return out


def git_named(
    repos: Iterable[tuple[str, str]], home: str, configs: Iterable[str] | None = None
) -> tuple[str, ...]:
    """What each repository's git config names in a work tree: its hooks folder
    (``core.hooksPath``, existing or not), the files it includes (``include.path``,
    ``includeIf.*.path``), and every existing file a value names (a filter's or a diff
    driver's script, an ``sshCommand`` wrapper). Git runs or reads these as it runs the config
    itself, which the box keeps read-only: writing them would be writing the config.

    The config is the repository's (``config``, ``config.worktree``) and the system and
    global files (``configs``, by default :func:`git_config_files`), each with every file
    it includes, recursively (:func:`_config_chain`). The one reader of what a config names:
    the box (read-only, swept after the call) and the path policy (a write asks) both ask it.
    """
    repos = list(repos)
    if not repos:
        return ()
    shared = _config_chain(git_config_files(home) if configs is None else configs, home)
    out: list[str] = []
    for top, common in repos:
        local = [os.path.join(common, "config"), os.path.join(common, "config.worktree")]
        for section, key, value, included in (*shared, *_config_chain(local, home)):
            if included:
                out += included
            elif section == "core" and key == "hookspath":
                out.append(_resolve(top, value, home))
            elif section not in ("include", "includeif"):
                for word in value.split():
                    word = word.strip("'\"")
                    if "/" in word and "://" not in word:
                        path = _resolve(top, word, home)
                        if os.path.isfile(path):
                            out.append(path)
    return tuple(dict.fromkeys(out))


def _resolve(base: str, value: str, home: str) -> str:
    """A path a git config value names, as git reads it: ``~/`` is the home, ``~user/``
    that user's home, a relative path joined to ``base``."""
    if value == "~" or value.startswith("~/"):
        value = home + value[1:]
    elif value.startswith("~"):
        value = os.path.expanduser(value)
    return os.path.normpath(os.path.join(base, value))


def gitdir_of_file(git_file: str) -> str | None:
    """The folder a ``.git`` *file* names (``gitdir: ../x/.git/worktrees/y``), joined to the
    file's folder but not resolved, or None when the file says nothing of the kind."""
    try:
        with open(git_file, encoding="utf-8", errors="replace") as f:
            line = f.read(4096).strip()
    except OSError:
        return None
    if not line.startswith("gitdir:"):
        return None
    return os.path.join(os.path.dirname(git_file), line[len("gitdir:") :].strip())


def _repository_of(real: str) -> tuple[str, str] | None:
    """(work tree, common git dir) of the repository ``real`` lies in, or None: the nearest
    ``.git`` above it (a dir, or a file naming one), bounded."""
    d = os.path.dirname(real)
    for _ in range(MAX_ANCESTORS):
        dot = os.path.join(d, ".git")
        if os.path.isdir(dot):
            return d, os.path.realpath(dot)
        if os.path.isfile(dot):
            named = gitdir_of_file(dot)
            if named is None:
                return None
            git_dir = os.path.realpath(named)
            try:
                with open(os.path.join(git_dir, "commondir"), encoding="utf-8") as f:
                    git_dir = os.path.realpath(os.path.join(git_dir, f.read(4096).strip()))
            except OSError:
                pass
            return d, git_dir
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent
    return None


def config_named(real: str, home: str) -> str | None:
    """The path the git config of the repository ``real`` lies in names and ``real`` is (or is
    below), or None: writing it is writing the config (:func:`git_named`)."""
    repo = _repository_of(real)
    if repo is None:
        return None
    for named in git_named([repo], home):
        if real == named or real.startswith(named.rstrip(os.sep) + os.sep):
            return named
    return None

"""The box's policy: what the disk looks like (a :class:`HostView`) -> one call's :class:`BoxPlan`.

Why two steps: :func:`build_plan` is pure (unit-tested on hand-made views, no disk, no
bubblewrap), and :func:`server.box.host.gather` is the one place that looks at the disk.

The defaults (``shared/spec/box.md``): read everything but private places (each hidden entry of
the home except ``box.read_allow``, other users' homes, the bridge's own files and runtime dir,
``XDG_RUNTIME_DIR``); write only the call's project (the git top-level of the cwd, else the cwd,
when it lies inside a root and is not the home), ``TMPDIR`` and ``box.write_allow``; persistence
inside the project (``.git/hooks``, ``.git/config*``, a ``.git`` file and the git dir it names,
``.vscode``, ``.idea``, ``.envrc``, ``.direnv``, the hook managers' config, coding agents' and
editors' settings that start commands) stays read-only; no network.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..policy.protected import AGENT_SETTINGS_FILES, EDITOR_RUNS_LATER, HOOK_MANAGER_FILES
from .plan import BoxPlan, BoxStatus

# What ordinary toolchains read from the home (box.md); their credential files stay private
# because they are not under these paths (``~/.cargo/credentials.toml``, ``~/.npmrc``...).
DEFAULT_READ_ALLOW = (
    "~/.gitconfig",
    "~/.config/git",
    "~/.pyenv",
    "~/.rustup",
    "~/.cargo/bin",
    "~/.cargo/registry",
    "~/.nvm",
    "~/.local/bin",
    "~/.local/lib",
    "~/.npm/_cacache",
    "~/.cache/pip",
    "~/.m2/repository",
    "~/.gradle/caches",
)
# Startup and editor hooks a project may hold: read-only in the box when they exist, removed
# after the call when the call created them (see :func:`missing_persistence`). Folders and
# files alike, by their path below the project (``.claude/settings.json`` is the file: the
# rest of ``.claude`` is the agent's prompts, not commands). The hook managers' config and
# the coding agents' and editors' settings that start commands later (attack5) are the
# protected table's, so a write by a tool asks for the same names the box keeps read-only.
PROJECT_PERSISTENCE = (
    ".vscode",
    ".idea",
    ".envrc",
    ".direnv",
    *HOOK_MANAGER_FILES,
    *AGENT_SETTINGS_FILES,
    *EDITOR_RUNS_LATER,
)
# The same names anywhere in the writable tree, found by the project scan (the protected table's
# "anywhere" persistence): hooks folders husky and friends point ``core.hooksPath`` at too.
NESTED_PERSISTENCE = (*PROJECT_PERSISTENCE, ".husky", ".githooks")
# Names that say what they are only with their folder's (``settings.json`` in ``.claude``).
_NESTED_NAMES = frozenset(n for n in NESTED_PERSISTENCE if "/" not in n)
_NESTED_TAILS = frozenset(n for n in NESTED_PERSISTENCE if "/" in n)
_NESTED_LEAVES = frozenset(n.rsplit("/", 1)[1] for n in _NESTED_TAILS)
# Their folders: one a call makes as a *link* (``ln -s cfg .claude``) puts the settings where
# the agent reads them with no path of the list below the top to find or sweep.
LINKED_FOLDERS = frozenset(n.rsplit("/", 1)[0].rsplit("/", 1)[-1] for n in _NESTED_TAILS)
# VS Code offers to open a workspace file it finds in the folder; its tasks run like .vscode's.
NESTED_SUFFIXES = (".code-workspace",)


def is_nested_persistence(path: str) -> bool:
    """``path`` (a real path in a project) is :data:`NESTED_PERSISTENCE` by its name, or by
    its folder's name and its own (``x/.claude/settings.json``), or a workspace file."""
    name = os.path.basename(path)
    if name in _NESTED_NAMES or name.endswith(NESTED_SUFFIXES):
        return True
    if name not in _NESTED_LEAVES:
        return False
    return os.path.basename(os.path.dirname(path)) + "/" + name in _NESTED_TAILS


# ``commondir`` and ``gitdir`` point git at another directory (its config, its hooks): a new one
# would redirect the repository, so they are persistence like the config itself.
GIT_DIR_PERSISTENCE = ("hooks", "config", "config.worktree", "commondir", "gitdir", "info")
# A network namespace does not cut sockets that are files: /run holds the Docker and Podman
# sockets, the D-Bus system bus and every user's runtime dir (session bus -> systemd --user).
# Only the DNS stub's folder stays readable (a box with network on needs it).
SYSTEM_PRIVATE = ("/run", "/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
SYSTEM_PRIVATE_FILES = "/etc/ssh/ssh_host_*_key"  # a glob: the host's private keys
SYSTEM_READABLE = ("/run/systemd/resolve",)
BOX_TMP = "/tmp"  # noqa: S108 - a private tmpfs in every box: TMPDIR
# What programs read in /var: their state (``lib``: the package database, ``machine-id``;
# ``db``: Gentoo's and Void's package databases), ``cache`` (fonts, man pages) and the links
# into ``/run`` (hidden itself). Every other folder
# of /var holds data, not the system, and is hidden whole like a top-level folder no OS makes:
# the mail spool (``mail``, ``spool``), ``backups``, ``log``, ``crash`` dumps, ``www``,
# ``opt``/``local`` data, other programs' files in ``tmp`` (a private, writable one instead).
VAR = "/var"
VAR_SHOWN = frozenset({"cache", "db", "empty", "lib", "lock", "run"})


@dataclass(frozen=True, slots=True)
class BoxConfig:
    """The config's ``box`` object (validated in :mod:`server.infra.config`)."""

    read_allow: tuple[str, ...] = DEFAULT_READ_ALLOW
    write_allow: tuple[str, ...] = ()
    network: bool = False


@dataclass(frozen=True, slots=True)
class HostEntry:
    path: str  # real path
    is_dir: bool


@dataclass(frozen=True, slots=True)
class HostView:
    """What :func:`server.box.host.gather` saw on the disk for one call; all paths real.

    ``git_top``: the folder holding the ``.git`` above the cwd (None outside a repository);
    ``git_file``: that ``.git`` when it is a file (worktree, submodule); ``git_dirs``: every git
    dir of the repository (the ``.git`` dir or the one a ``.git`` file names, its common dir,
    ``modules/*`` and ``worktrees/*``); ``existing``: which persistence paths exist.
    """

    cwd: str
    home: str
    roots: tuple[str, ...]
    hidden: tuple[HostEntry, ...] = ()  # each existing ``~/.*`` entry
    allowed: tuple[str, ...] = ()  # existing ``box.read_allow`` entries
    others: tuple[str, ...] = ()  # other users' homes
    own: tuple[str, ...] = ()  # the bridge's config, audit and runtime dirs, XDG_RUNTIME_DIR
    git_top: str | None = None
    git_file: str | None = None
    git_dirs: tuple[str, ...] = ()
    existing: frozenset[str] = frozenset()
    write_allow: tuple[str, ...] = ()  # existing ``box.write_allow`` entries
    # Read-only folders under /tmp the box shows through its private /tmp: the roots there and
    # the Python the bridge runs (a venv made in a temporary clone must still run).
    tmp_visible: tuple[str, ...] = ()
    # Existing persistence the project scan found anywhere in the tree (``sub/.vscode``, a
    # nested repository's or a submodule's ``.git`` file, ``.husky``, ``x.pth``...).
    nested: tuple[str, ...] = ()
    # What every repository's git config names in a work tree: ``core.hooksPath`` (existing or
    # not), included files, scripts a value names (a filter, an ``sshCommand`` wrapper).
    hooks: tuple[str, ...] = ()
    # The table's persistence folders in the home's visible tree (``~/bin``, ``~/go/bin``,
    # ``~/Library/LaunchAgents``): never a project, read-only inside one.
    on_path: tuple[str, ...] = ()
    # What the call needs inside a top-level folder no OS makes, which the box hides whole (a
    # root at ``/srv/www/app`` in a hidden ``/srv``): re-opened read-only on its own.
    reopened: tuple[str, ...] = ()
    # The home's data folders (Documents, Desktop...; see :func:`home_data_folders`): a
    # folder in one is no project unless it is a repository's.
    home_data: tuple[str, ...] = ()
    # ``git_top``'s ``.git`` names a real git dir (``HEAD``, ``objects``, ``refs``): a ``.git``
    # file pointing nowhere or an empty ``.git`` folder planted in a data folder made it a project.
    git_real: bool = True
    # (link, real path) of each root configured by a symlink (``~/work -> /var/tmp/w``).
    root_links: tuple[tuple[str, str], ...] = ()
    # Symlinks the project scan found named as a persistence file's folder (``.claude``, see
    # :data:`LINKED_FOLDERS`): the human's own are kept; one a call makes is swept after it.
    linked: tuple[str, ...] = ()
    # Existing persistence that is a symlink (and those ``linked`` folders), with its target:
    # the read-only bind lands on the target, and the link's own name in the writable folder
    # stays replaceable (``rm .mcp.json && echo … > .mcp.json``): the sweep puts it back.
    links: tuple[tuple[str, str], ...] = ()
    # (real path, redacted copy) of each git config file the box may show that holds a
    # credential (server.box.gitconfig): the global ones, included ones, every repository's.
    git_redacted: tuple[tuple[str, str], ...] = ()
    # Folders in the project the scan could not list (the human's ``chmod 000`` drop folder):
    # one a call makes unlistable is reported after it (what it planted inside goes unseen).
    unlisted: tuple[str, ...] = ()


# The home's data folders, by the names each OS gives them (the XDG defaults on Linux; a
# ``user-dirs.dirs`` file may move or rename them, see :func:`home_data_folders`).
HOME_DATA_FOLDERS: tuple[str, ...] = ("Desktop", "Documents", "Downloads", "Music", "Pictures")
HOME_DATA_FOLDERS += ("Videos", "Movies", "Public", "Templates")
# Folders a sync client mirrors to other devices and a cloud (their defaults): a file deleted
# there is deleted everywhere.
HOME_DATA_FOLDERS += ("OneDrive", "Dropbox", "Google Drive", "iCloud Drive", "Nextcloud")
HOME_DATA_FOLDERS += ("ownCloud", "Sync", "pCloudDrive", "MEGA", "Seafile", "Box", "Yandex.Disk")
_USER_DIR = re.compile(r'^\s*XDG_[A-Z]+_DIR\s*=\s*"([^"]*)"\s*$')


def home_data_folders(home: str, user_dirs: str = "") -> tuple[str, ...]:
    """The home's data folders (pure): :data:`HOME_DATA_FOLDERS` in the home, and each folder a
    ``user-dirs.dirs`` text names (``XDG_DOCUMENTS_DIR="$HOME/Dokumente"``), except the home
    itself (``xdg-user-dirs`` sets a folder it disables to ``$HOME/``). Why: the box writes the
    call's project, which outside a repository is its ``cwd``; a ``cwd`` the agent names in
    ``~/Documents`` made the human's documents writable with nobody asked (an outside review,
    2026-12-05). A repository there is still a project."""
    out = [os.path.join(home, name) for name in HOME_DATA_FOLDERS]
    for line in user_dirs.splitlines():
        m = _USER_DIR.match(line)
        if m is None:
            continue
        value = m.group(1)
        if value.startswith("$HOME"):
            value = home + value[len("$HOME") :]
        if not value.startswith("/"):
            continue
        value = os.path.normpath(value)
        if value != home and within(value, home):
            out.append(value)
    return tuple(dict.fromkeys(out))


def within(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip(os.sep) + os.sep)


def holders(path: str) -> list[str]:
    """``path`` and every folder above it, ``/a/b`` -> ``/a/b``, ``/a``, ``/`` (pure)."""
    out = [path]
    while path not in (os.sep, ""):
        path = os.path.dirname(path)
        out.append(path)
    return out


def data_folder(path: str) -> bool:
    """A folder the box hides whole because it holds data, not the system: a top-level
    folder no OS makes (``/srv``), or one of /var outside :data:`VAR_SHOWN` (``/var/mail``).
    What the call needs inside one is re-opened (``HostView.reopened``)."""
    parent = os.path.dirname(path)
    if path == os.sep:
        return False
    return parent == os.sep or (parent == VAR and os.path.basename(path) not in VAR_SHOWN)


def project_of(view: HostView) -> str | None:
    """The tree a boxed call may write: the git top-level of its cwd, else the cwd — only when
    inside a root and not the home (a call in the home writes nothing but its temp dir), and a
    cwd that is no repository's only outside the home's data folders (``~/Documents``)."""
    for candidate in (view.git_top, view.cwd):
        if candidate is None or candidate == view.home:
            continue
        if any(within(d, candidate) for d in view.home_data):
            continue  # ~/Documents itself, or what holds it: never, even with a .git in it
        if any(within(candidate, d) for d in view.home_data) and (
            candidate != view.git_top or not view.git_real
        ):
            continue  # the human's data, not a project (a real repository inside one is)
        if any(within(candidate, p) for p in view.on_path):
            continue  # ~/bin: a program there runs outside the box from the human's PATH
        if any(within(candidate, r) for r in view.roots) and not within(view.home, candidate):
            return candidate
    return None


def persistence_paths(view: HostView, project: str | None) -> tuple[str, ...]:
    """Every persistence path the call could write, existing or not (project top and cwd)."""
    out: list[str] = []
    if project is None:
        return ()
    for top in dict.fromkeys((project, view.cwd)):
        if within(top, project):
            out += [os.path.join(top, name) for name in PROJECT_PERSISTENCE]
    if view.git_file is not None:
        out.append(view.git_file)
    for git_dir in view.git_dirs:
        out += [os.path.join(git_dir, name) for name in GIT_DIR_PERSISTENCE]
    if view.git_top is None or view.git_file is None:
        out += [os.path.join(project, ".git", name) for name in GIT_DIR_PERSISTENCE]
    out += [p for p in (*view.nested, *view.hooks, *view.on_path) if within(p, project)]
    return tuple(dict.fromkeys(out))


def pins(targets: list[str], trees: list[str]) -> list[str]:
    """Every folder strictly between a writable tree and a path it masks or protects.

    Each becomes a mount point (bound onto itself), and a mount point cannot be renamed or
    removed: ``mv app app2 && mkdir -p app/.git`` would otherwise carry the read-only hooks and
    config (or a masked ``.env``) away with ``app2`` and put a fresh, writable one where the
    human's was, or move a masked secret where the next call's scan does not look."""
    out: set[str] = set()
    for target in targets:
        around = [t for t in trees if within(target, t) and target != t]
        if not around:
            continue
        tree = max(around, key=len)
        here = os.path.dirname(target)
        while here != tree and within(here, tree):
            out.add(here)
            here = os.path.dirname(here)
    return sorted(out)


def missing_persistence(view: HostView, project: str | None) -> tuple[str, ...]:
    """Persistence paths that do not exist before the call: the box cannot mount over what is
    not there, so the runner removes whichever of these the call created (and says so)."""
    return tuple(p for p in persistence_paths(view, project) if p not in view.existing)


def _may_write_outside(git_dir: str, project: str, view: HostView) -> bool:
    """A git dir of the repository outside the project (a worktree's or submodule's) is
    writable only where a project could be: inside a root, never holding the home, the
    project or a root, never in a program folder on ``PATH``. A ``.git`` file the agent wrote
    names it: ``gitdir: ~`` made the whole home writable (``~/.bash_login``, ``~/bin``)."""
    if not any(within(git_dir, r) and git_dir != r for r in view.roots):
        return False
    if within(view.home, git_dir) or within(project, git_dir):
        return False
    if any(within(r, git_dir) for r in view.roots):
        return False
    return not any(within(git_dir, p) for p in view.on_path)


def _masked(path: str, private: list[str]) -> bool:
    return any(within(path, p) for p in private)


def _hidden_at(path: str, private: list[str], reopened: tuple[str, ...]) -> bool:
    """Whether the box hides ``path``: the deepest mask above it, unless something re-opened
    deeper than that mask holds it (a project under ``/var/tmp`` or ``/srv``, both hidden
    whole with the project re-opened). Treating every path under a hidden data folder as
    masked left a re-opened project's ``.git/hooks`` unprotected: writable."""
    masks = [p for p in private if within(path, p)]
    if not masks:
        return False
    deepest = max(masks, key=len)
    return not any(within(path, r) and len(r) > len(deepest) for r in reopened)


def _shown_redacted(
    pairs: tuple[tuple[str, str], ...], private: list[str], reallow: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    """The redacted git config copies to bind: each over a file the box shows (a file a
    private mask hides stays hidden: a copy bound over it would show what the mask hides).
    Shown: no mask covers it, or a re-opened ``read_allow`` path at least as deep as the
    deepest mask does (mounts go from the widest to the narrowest)."""
    out: list[tuple[str, str]] = []
    for path, copy in pairs:
        masks = [len(p) for p in private if within(path, p)]
        opened = [len(a) for a in reallow if within(path, a)]
        if not masks or (opened and max(opened) >= max(masks)):
            out.append((path, copy))
    return tuple(sorted(set(out)))


def build_plan(view: HostView, config: BoxConfig) -> BoxPlan:
    """One call's box (pure): see the module docstring for the policy."""
    project = project_of(view)
    allowed = tuple(sorted(set(view.allowed)))
    private: list[str] = []
    files: list[str] = []
    for entry in view.hidden:
        if entry.path in allowed:
            continue  # readable as it is (e.g. ~/.gitconfig)
        private.append(entry.path)
        if not entry.is_dir:
            files.append(entry.path)
    private += [p for p in view.others if not (project and within(project, p))]
    private += list(view.own)
    private = sorted(set(private))
    # Re-bound read-only only where a private folder hides them.
    reallow = tuple(a for a in allowed if any(within(a, p) and a != p for p in private))
    # What the call needs inside a hidden data folder (``/srv``, ``/var/tmp``): re-opened unless
    # a mask below that folder (a secret folder the index found there) hides it too.
    below_tops = [p for p in private if not data_folder(p)]
    reallow += tuple(r for r in view.reopened if _masked(r, private) and not _masked(r, below_tops))
    reallow = tuple(sorted(set(reallow)))
    write: list[str] = []
    if project is not None:
        write.append(project)
        # Each git dir in the project is bound onto itself: a mount point cannot be renamed or
        # replaced, so ``mv .git x && mkdir .git`` cannot swap in a repository without the
        # read-only hooks and config below.
        inside = [d for d in view.git_dirs if within(d, project)]
        outside = [d for d in view.git_dirs if not within(d, project)]
        inside += [d for d in outside if _may_write_outside(d, project, view)]
        # Nothing a mask hides is bound again: a later bind of the real path would cover the
        # mask (an ``.envrc`` is secret-looking *and* persistence: its read-only bind undid its
        # empty-file mask, and the box read it). A mask is read-only already, or a tmpfs.
        write += [d for d in inside if not _hidden_at(d, private, reallow)]
    write += list(view.write_allow)
    protected = [p for p in persistence_paths(view, project) if p in view.existing]
    protected = [p for p in protected if any(within(p, w) for w in write)]
    protected = [p for p in protected if not _hidden_at(p, private, reallow)]
    pinned = [
        p
        for p in pins([*protected, *private, *write], list(write))
        if not _hidden_at(p, private, reallow)
    ]
    return BoxPlan(
        redacted=_shown_redacted(view.git_redacted, private, reallow),
        cwd=view.cwd,
        read_private=tuple(private),
        write=tuple(sorted(set(write))),
        write_protected=tuple(sorted(set(protected))),
        tmpdir=BOX_TMP,
        network=config.network,
        private_files=tuple(sorted(set(files))),
        read_allow=reallow,
        read_visible=tuple(
            sorted({r for r in (*view.roots, *view.tmp_visible) if within(r, BOX_TMP)})
        ),
        pinned=tuple(p for p in pinned if p not in write),
        symlinks=tuple(
            (link, real)
            for link, real in view.root_links
            if _hidden_at(link, private, reallow)
            and any(within(link, d) and data_folder(d) for d in private)
        ),
    )


def box_gate(args: Mapping[str, Any], status: BoxStatus) -> str | None:
    """Why a boxable call must wait for a human, or None when it may run in the box unasked.

    Nothing runs outside the box unasked: not by rule, grant or tier.
    """
    if args.get("box") is False:
        reason = args.get("reason")
        why = f": {reason}" if isinstance(reason, str) and reason.strip() else ""
        return f'the agent asks to run this call outside the box ("box": false){why}'
    if not status.available:
        return f"no box is available here, so a human decides ({status.detail})"
    return None

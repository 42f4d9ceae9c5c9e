"""What one boxed process may touch, as data: the contract between the policy and a mechanism.

Why data first: the same plan becomes bubblewrap arguments on Linux and a Seatbelt profile on
macOS, and tests read it without starting anything. Every path here is absolute and real
(symlinks resolved) when the plan is built.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Mechanism(enum.StrEnum):
    """How a box is made on this machine."""

    BWRAP = "bubblewrap"  # Linux: mount, PID, IPC and network namespaces (bwrap)
    SEATBELT = "seatbelt"  # macOS: sandbox-exec with a generated profile (never run here)
    NONE = "none"  # no box: the box tier behaves as prompt


@dataclass(frozen=True, slots=True)
class BoxPlan:
    """One boxed process's view of the machine.

    ``read_private``: paths that are neither readable nor listable inside the box (folders
    appear empty, files empty). ``write``: trees the process may change. ``write_protected``:
    paths inside ``write`` that stay read-only (persistence: ``.git/hooks``, ``.git/config``,
    ``.vscode``...). ``tmpdir``: the private temporary folder (``TMPDIR``), writable, gone with
    the call. ``network``: False means no network at all, loopback included.
    """

    cwd: str
    read_private: tuple[str, ...]
    write: tuple[str, ...]
    write_protected: tuple[str, ...]
    tmpdir: str
    network: bool = False
    # Entries of ``read_private`` that are files (masked with an empty file, not an empty folder).
    private_files: tuple[str, ...] = ()
    # Paths inside ``read_private`` that stay readable, read-only (``box.read_allow``).
    read_allow: tuple[str, ...] = ()
    # Roots under /tmp: the box's private /tmp would hide them; re-bound read-only first (the
    # private masks inside them still apply).
    read_visible: tuple[str, ...] = ()
    # Folders inside ``write`` between a writable tree and what it masks or protects: each is
    # its own mount point (bound onto itself), which cannot be renamed or removed, so nothing
    # masked or read-only can be carried away with its folder and replaced.
    pinned: tuple[str, ...] = ()
    # (link, target): a root configured by a symlink that lies in a folder the box hides whole
    # (``/var/tmp/x/link -> /var/tmp/x/data``): made again in the box, so the human's path works.
    symlinks: tuple[tuple[str, str], ...] = ()
    # (path, copy): git config files that hold a credential, each covered read-only by a copy
    # with the credential replaced (server.box.gitconfig); the last mounts on their paths.
    redacted: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class BoxStatus:
    """Whether this machine can box, shown by ``status``, the page and the tray."""

    available: bool
    mechanism: Mechanism
    detail: str  # e.g. "bwrap 0.8.0, user namespaces" or why there is no box

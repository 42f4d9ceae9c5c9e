"""BoxPlan -> bubblewrap argv (pure).

Why bubblewrap: a mount namespace makes "read everything but private places, write only the
project, its hooks read-only" natural (a tmpfs over ``~/.ssh``, a read-only bind over
``.git/hooks`` inside a writable bind), which Landlock alone cannot say (it only adds
allowances). Mount order matters: later mounts cover earlier ones, so the argv goes from the
widest to the narrowest: the read-only root, the private masks, what ``read_allow`` re-opens,
the writable trees, the persistence inside them.

Every box also gets: a fresh ``/dev``, ``/proc`` of its own PID namespace (``/proc/1/environ``
is its own shell, ``/proc/self/root`` its own root), a private ``/tmp`` (also hides
``/tmp/.X11-unix``: keystrokes into the desktop are an escape) and ``/dev/shm``, no network
(loopback included), its own IPC and UTS namespaces, a new session (no ``TIOCSTI`` into a
terminal), no capabilities, no nested user namespaces, and death with its supervisor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .plan import BoxPlan
from .policy import BOX_TMP


@dataclass(frozen=True, slots=True)
class BwrapHost:
    """Facts about this machine's bubblewrap, found by the probe."""

    bwrap: str  # absolute path
    empty_file: str  # a 0444 empty file: the mask of a private file
    disable_userns: bool = True  # bwrap >= 0.8: no user namespace inside the box


def _depth(path: str) -> tuple[int, str]:
    return (path.rstrip("/").count("/"), path)


def render(plan: BoxPlan, host: BwrapHost, argv: Sequence[str]) -> list[str]:
    """The bwrap command line that runs ``argv`` in ``plan``'s box."""
    out = [host.bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc"]
    out += ["--unshare-uts", "--unshare-cgroup-try", "--unshare-user"]
    if host.disable_userns:
        out.append("--disable-userns")
    out += ["--cap-drop", "ALL"]
    if not plan.network:
        out.append("--unshare-net")
    out += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    out += ["--tmpfs", "/tmp", "--tmpfs", "/dev/shm"]  # noqa: S108 - private tmpfs
    for path in sorted(plan.read_visible, key=_depth):
        out += ["--ro-bind", path, path]
    files = set(plan.private_files)
    for path in sorted(plan.read_private, key=_depth):
        if path in files:
            out += ["--ro-bind", host.empty_file, path]
        else:
            out += ["--tmpfs", path]  # writable but gone with the box: nothing persists
    for path in sorted(plan.read_allow, key=_depth):
        out += ["--ro-bind", path, path]
    for path in sorted(plan.write, key=_depth):
        out += ["--bind", path, path]
    for path in sorted(plan.write_protected, key=_depth):
        out += ["--ro-bind", path, path]
    if plan.tmpdir != BOX_TMP:
        out += ["--bind", plan.tmpdir, plan.tmpdir]
    out += ["--chdir", plan.cwd, "--setenv", "TMPDIR", plan.tmpdir, "--", *argv]
    return out

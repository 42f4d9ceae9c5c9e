"""Secret-looking files in the system folders outside the roots: walked once per process.

Why: outside the roots the box shows the system and hides data. Data folders are hidden whole
(a top-level folder no OS makes, and every folder of ``/var`` but what programs read:
:data:`server.box.policy.VAR_SHOWN`). ``/etc``, ``/usr/local``, ``/opt``, ``/var/lib`` and
``/var/cache`` are both: programs and their config, which ordinary work needs (compilers, the
CA certificates, the package database), and now and then a secret an admin or an installer
left there (``/opt/app/.env``, ``/usr/local/etc/app/secret.key``,
``/var/lib/app/credentials.json``). Hiding those folders whole would break the box; so their
secret-looking files are found by name and masked, one by one.

They change when software is installed, not between two calls: the walk runs once at start
(a thread, :func:`server.box.host.warm`) and again in a thread every :data:`REWALK_S`, while
the calls use the last answer; it is bounded (:data:`MAX_DIRS` folders,
breadth first, :data:`MAX_DEPTH` levels; dependency trees and caches skipped as the roots'
index skips them). A file put there after a walk is masked once the next walk ends: a stated
limit (``docs/security/box.md``).

Two refinements keep ordinary work running: a ``*.pem`` is masked only when it holds a private
key (``/etc/ssl/certs/*.pem``, ``/etc/pki/ca-trust/extracted/pem/*.pem`` and a TLS proxy's CA
are certificates every HTTPS client in the box reads), and symlinks are not followed (what a
link points to is judged where it lies: ``/etc/ssl/certs/*.pem`` lead to ``/usr/share``).
Only files this user can read get a mask: each is a mount, and the box cannot read the others.

Blocking (scandir, small reads): call it from a worker thread, as ``gather`` is.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable

from .secrets import skipped

# The system folders that hold config and state beside programs (walked); the rest of the
# system is code from packages (``/usr`` but ``/usr/local``), or hidden whole (data folders).
SYSTEM_WALK = ("/etc", "/usr/local", "/opt", "/var/lib", "/var/cache")
MAX_DIRS = 20_000  # folders looked into, over all of SYSTEM_WALK (this VM: 1,451 in 0.05-0.15 s)
MAX_DEPTH = 8  # below each of SYSTEM_WALK
PEM_PEEK = 1 << 20  # bytes of a ``*.pem`` read for a private key; a bigger one is masked
KEY_MARK = b"PRIVATE KEY"  # every PEM private key: RSA, EC, OPENSSH, ENCRYPTED, plain PKCS#8


def holds_key(path: str) -> bool:
    """A ``*.pem`` file with a private key in it (or too big to tell): masked. A certificate
    (or a bundle of them) is not a secret, and TLS in the box needs it."""
    try:
        with open(path, "rb") as f:
            data = f.read(PEM_PEEK + 1)
    except OSError:
        return False  # this user cannot read it: neither can the box
    return len(data) > PEM_PEEK or KEY_MARK in data


def walk(
    is_secret: Callable[[str], bool],
    tops: Iterable[str] = SYSTEM_WALK,
    max_dirs: int = MAX_DIRS,
) -> tuple[tuple[str, ...], bool]:
    """(the secret-looking files under ``tops`` this user can read — ``is_secret`` judges a
    file's path, so a name that looks secret only in its folder, ``.kube/config``, counts —
    whether the walk looked
    into every folder it found). Breadth first over all the tops at once, so the shallow
    folders (``/opt/app``, ``/etc/app``), where such files are kept, come first."""
    found: list[str] = []
    todo = [(top, 0) for top in tops]
    looked = 0
    complete = True
    while todo:
        if looked >= max_dirs:
            complete = False
            break
        here, depth = todo.pop(0)
        try:
            entries = list(os.scandir(here))
        except OSError:
            continue  # not there, or not this user's to list: the box cannot list it either
        looked += 1
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    if depth < MAX_DEPTH and not skipped(entry.name):
                        todo.append((entry.path, depth + 1))
                    elif depth >= MAX_DEPTH:
                        complete = False
                    continue
                if entry.is_symlink() or not is_secret(entry.path):
                    continue
                if not os.access(entry.path, os.R_OK):
                    continue
                if entry.name.lower().endswith(".pem") and not holds_key(entry.path):
                    continue
                found.append(entry.path)
            except OSError:
                continue
    return tuple(found), complete


REWALK_S = 600.0  # an answer older than this is walked again, in a thread (calls never wait)


class _Kept:
    """The one answer of this process, when it was walked, and whether a walk is running."""

    def __init__(self) -> None:
        self.found: tuple[str, ...] | None = None
        self.at = 0.0
        self.walking = False


_LOCK = threading.Lock()
_KEPT = _Kept()


def found(
    is_secret: Callable[[str], bool], clock: Callable[[], float] = time.monotonic
) -> tuple[str, ...]:
    """The walk's answer: walked on first use (a thread at start; a call that comes meanwhile
    waits for it) and kept; past :data:`REWALK_S`, walked again in a thread while the calls
    keep the last answer (software installed while the bridge runs: its ``.env`` is masked
    within minutes, not at the next start)."""
    with _LOCK:
        if _KEPT.found is None:
            _KEPT.found, _KEPT.at = walk(is_secret)[0], clock()
        elif clock() - _KEPT.at >= REWALK_S and not _KEPT.walking:
            _KEPT.walking = True
            threading.Thread(target=_rewalk, args=(is_secret, clock), daemon=True).start()
        return _KEPT.found


def _rewalk(is_secret: Callable[[str], bool], clock: Callable[[], float]) -> None:
    try:
        fresh = walk(is_secret)[0]
    except Exception:  # keep the last answer; try again after REWALK_S
        fresh = None
    with _LOCK:
        if fresh is not None:
            _KEPT.found = fresh
        _KEPT.at, _KEPT.walking = clock(), False

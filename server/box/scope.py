"""Run a program unable to reach abstract unix sockets made outside it (Landlock scope, ABI 6).

Why: an abstract unix socket (``@/tmp/.X11-unix/X0``, a session bus at
``unix:abstract=/tmp/dbus-…``, ``@/tmp/.ICE-unix/…``) is no file, so no mount hides it: it
belongs to the network namespace. A box without network has its own namespace and reaches
none; a box *with* network (a stdio upstream server by default, bash with ``box.network: "on"``)
shares the bridge's, and reached the desktop's X server (keystrokes into any window) and an
abstract session bus (the keyring, ``systemd --user``). Landlock's
``LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET`` (Linux 6.12, ABI 6) denies connecting to an abstract
socket made outside the process's Landlock domain; sockets made inside the box still work.

How: bubblewrap cannot set a Landlock domain, so this file is run as a script before it
(``python -I -S scope.py /usr/bin/bwrap …``), sets the scope (no filesystem or network rights
are handled: mounts, files and TCP are untouched) and ``exec``\\ s bwrap, which keeps it for
the whole box. Only boxes with network pay the interpreter's start (~10–20 ms); without
network the box's own namespace does the job. Stdlib only, no package import: ``-I -S``.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

SYS_CREATE_RULESET = 444  # the same number on every Linux architecture (new syscalls)
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1
PR_SET_NO_NEW_PRIVS = 38
SCOPE_ABI = 6  # the first ABI with scopes
SCRIPT = os.path.abspath(__file__)  # run as a script: ``python -I -S SCRIPT bwrap …``


def abi() -> int:
    """The kernel's Landlock ABI (0: none, or not Linux)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        version = libc.syscall(SYS_CREATE_RULESET, None, 0, CREATE_RULESET_VERSION)
    except (OSError, AttributeError):
        return 0
    return max(int(version), 0)


def restrict() -> None:
    """Scope this process (and everything it runs) away from outside abstract sockets."""
    libc = ctypes.CDLL(None, use_errno=True)
    attr = struct.pack("QQQ", 0, 0, SCOPE_ABSTRACT_UNIX_SOCKET)  # fs, net: none; scoped
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = libc.syscall(SYS_CREATE_RULESET, buf, len(attr), 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.syscall(SYS_RESTRICT_SELF, fd, 0) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)


def main(argv: list[str]) -> None:
    """Scope, then become ``argv``; a box is never started unscoped by this script."""
    if not argv:
        sys.exit("usage: scope.py PROGRAM [ARG...]")
    try:
        restrict()
    except OSError as e:
        sys.exit(f"the box cannot scope abstract sockets here: {e}")
    os.execv(argv[0], argv)  # noqa: S606 - bwrap's argv, built by the bridge (bwrap.render)


if __name__ == "__main__":
    main(sys.argv[1:])

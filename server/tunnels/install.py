"""Writing a client's MCP config: here (``client-config --install``) or on a tunnel's remote
machine (``connect --install``), merged with what the file holds (:mod:`..present.clientwriters`).

Remote: the file is read over ssh (``cat``), merged here, and written back through ssh's
**stdin** by a fixed ``sh`` script (``umask 077``, a temp file beside it, ``mv``): the token is
never on a command line, here or there, so no ``ps`` on either machine shows it. The script
names only the file's path under ``$HOME``, which comes from this module's table, never from
the user. Everything here blocks (a file, a process): the bridge runs it in a worker, the CLI
on its own thread.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import stat
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import IO

from ..errors import BridgeError
from ..infra.fsutil import write_private_atomic
from ..present.clientconfig import ClientKind
from ..present.clientwriters import TARGETS, Merged, UnparseableConfig, merge
from .plan import base_options, clip
from .sshconfig import Confined, SshConfigError, confine, known_options

REMOTE_TIMEOUT_S = 60.0
# The most of the remote file (or of ssh's error output) read back: the remote side is the
# agent's machine, so what it sends may never end. A client's config is far smaller.
REMOTE_READ_MAX = 32 << 20
STDERR_KEEP = 64 << 10
ABSENT = 3  # the read script's exit status when the file does not exist

# $1 = the file under $HOME. Single-quoted for the remote login shell (bash, zsh, fish, csh
# all pass it to sh unchanged); no single quote inside.
READ_SCRIPT = 'f="$HOME/$1"; [ -e "$f" ] || exit 3; exec cat -- "$f"'
WRITE_SCRIPT = (
    'umask 077; f="$HOME/$1"; mkdir -p -- "$(dirname -- "$f")" || exit 1; '
    't=$(mktemp "$f.a2a-XXXXXX") || exit 1; '
    'if cat > "$t" && chmod 600 "$t" && mv -f -- "$t" "$f"; then exit 0; fi; '
    'rm -f -- "$t"; exit 1'
)


class InstallError(BridgeError):
    """The client config could not be written (what failed, in one line; the file untouched)."""


@dataclass(frozen=True, slots=True)
class Installed:
    """What ``--install`` did: the file (as the user names it) and what changed in it."""

    where: str  # "~/.claude.json" or "user@host:~/.claude.json"
    merged: Merged

    def describe(self) -> str:
        return self.merged.describe(self.where)


def local_path(kind: ClientKind, override: str | None = None) -> str:
    """Where ``kind`` reads its config on this machine (``~`` expanded)."""
    target = TARGETS.get(kind)
    if target is None:
        raise InstallError(f"--install is not supported for {kind.value}: print it instead")
    return os.path.abspath(os.path.expanduser(override or target.path))


def install_local(kind: ClientKind, url: str, token: str, path: str | None = None) -> Installed:
    """Merge the bridge's entry into the local file: 0600, atomic; an unparseable file is
    refused and left as it is."""
    full = local_path(kind, path)
    try:
        existing: str | None = _read_regular(full)
    except FileNotFoundError:
        existing = None
    except (OSError, UnicodeDecodeError) as e:
        raise InstallError(f"cannot read {full}: {e}") from None
    try:
        merged = merge(kind, existing, url, token)
        data = merged.text.encode("utf-8")
    except UnparseableConfig as e:
        raise InstallError(f"{full} was left untouched: {e}") from None
    except Exception as e:  # never a traceback: the merged text (and so the error) holds the token
        raise InstallError(f"{full} was left untouched: {_unmergeable(e)}") from None
    if merged.text != existing or _loose(full):
        try:
            os.makedirs(os.path.dirname(full), mode=0o700, exist_ok=True)
            write_private_atomic(full, data)
        except OSError as e:
            raise InstallError(f"cannot write {full}: {e.strerror or e}") from None
    return Installed(full, merged)


def _read_regular(path: str) -> str:
    """The file's text; a FIFO or a device (planted where a client's config goes) is refused
    without blocking, and at most :data:`REMOTE_READ_MAX` bytes are read."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        raw = f.read(REMOTE_READ_MAX + 1)
    if len(raw) > REMOTE_READ_MAX:
        raise OSError(errno.EFBIG, f"larger than {REMOTE_READ_MAX >> 20} MiB")
    return raw.decode("utf-8")


def _unmergeable(e: Exception) -> str:
    """Why a file could not be merged, without the error's text: it may quote the merged
    document, token included."""
    return f"its content cannot be merged ({type(e).__name__})"


def _loose(path: str) -> bool:
    """An unchanged file still gets its mode fixed: it holds the token."""
    try:
        return os.stat(path).st_mode & 0o077 != 0
    except OSError:
        return False


def _remote_file(kind: ClientKind) -> str:
    target = TARGETS.get(kind)
    if target is None or not target.path.startswith("~/"):
        raise InstallError(f"--install on a remote machine is not supported for {kind.value}")
    return target.path[2:]


def remote_argv(
    target: str,
    script: str,
    rel: str,
    ssh_config: str | None,
    known: frozenset[str] = frozenset(),
) -> list[str]:
    """``ssh ... -- target "sh -c '<script>' sh <file>"``: the remote command names the file,
    never its content (pure; tests/unit checks no argument can carry a token)."""
    command = f"sh -c {shlex.quote(script)} sh {shlex.quote(rel)}"
    # No forward at all: the user's LocalForward/RemoteForward/DynamicForward for the host
    # are not this session's to open (the tunnel's own -R is the tunnel's, not this one's).
    clear = ["-o", "ClearAllForwardings=yes"]
    # The command runs as given, its stdin read (the write's content): a config's
    # SessionType none/subsystem or StdinNull yes would have the read find "nothing" and the
    # write replace the file with an empty one (options of OpenSSH 8.7+, passed when known).
    session = [
        opt
        for name, value in (("sessiontype", "SessionType=default"), ("stdinnull", "StdinNull=no"))
        if name in known
        for opt in ("-o", value)
    ]
    return ["ssh", *base_options(ssh_config, known), *clear, *session, "--", target, command]


def _confined_ssh(ssh_config: str | None, folder: str) -> Confined:
    """The private copy of the user's ssh config (:mod:`.sshconfig`): the same config the
    tunnel reads, so a jump host's ssh opens no forward either."""
    try:
        return confine(folder, ssh_config)
    except SshConfigError as e:
        raise InstallError(clip(str(e))) from None


def install_remote(
    kind: ClientKind,
    target: str,
    url: str,
    token: str,
    ssh_config: str | None = None,
    timeout: float = REMOTE_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> Installed:
    """Read the client's file on ``target``, merge, write it back through ssh's stdin."""
    _remote_file(kind)  # a client with no remote file is refused before any ssh runs
    with tempfile.TemporaryDirectory(prefix="a2a-bridge-ssh-") as folder:
        try:
            known = known_options("ssh", env)
        except (OSError, subprocess.SubprocessError) as e:
            raise InstallError(f"cannot run ssh: {getattr(e, 'strerror', None) or e}") from None
        confined = _confined_ssh(ssh_config, os.path.join(folder, "ssh"))
        return _install_remote(kind, target, url, token, confined, known, timeout, env)


def _install_remote(
    kind: ClientKind,
    target: str,
    url: str,
    token: str,
    confined: Confined,
    known: frozenset[str],
    timeout: float,
    env: dict[str, str] | None,
) -> Installed:
    rel = _remote_file(kind)
    where = f"{target}:~/{rel}"
    ssh_config = confined.path
    read = _ssh(remote_argv(target, READ_SCRIPT, rel, ssh_config, known), None, timeout, env)
    if read.stdout is None:
        raise InstallError(
            f"{where} was left untouched: it is too large (over {REMOTE_READ_MAX >> 20} MiB)"
        )
    if read.returncode == ABSENT:
        existing: str | None = None
    elif read.returncode == 0:
        existing = read.stdout.decode("utf-8", "replace")
    else:
        raise InstallError(f"cannot read {where}: {confined.explain(_ssh_error(read))}")
    try:
        merged = merge(kind, existing, url, token)
        data = merged.text.encode("utf-8")
    except UnparseableConfig as e:
        raise InstallError(f"{where} was left untouched: {e}") from None
    except Exception as e:  # never a traceback: the merged text (and so the error) holds the token
        raise InstallError(f"{where} was left untouched: {_unmergeable(e)}") from None
    wrote = _ssh(
        remote_argv(target, WRITE_SCRIPT, rel, ssh_config, known),
        data,
        timeout,
        env,
    )
    if wrote.returncode != 0:
        raise InstallError(f"cannot write {where}: {confined.explain(_ssh_error(wrote))}")
    return Installed(where, merged)


@dataclass(frozen=True, slots=True)
class _Ran:
    """One ssh run: its status, its output (None: past :data:`REMOTE_READ_MAX`, ssh ended
    there) and the tail of its error output."""

    returncode: int
    stdout: bytes | None
    stderr: bytes


def _pump(fd: int, keep: bytearray, limit: int, tail: bool, over: threading.Event) -> None:
    """Read ``fd`` to its end, keeping at most ``limit`` bytes: the first ones (``over`` is
    set past them: the caller ends ssh) or, with ``tail``, the last ones."""
    with contextlib.suppress(OSError):  # closed under it: ssh gone, a child kept the pipe
        while chunk := os.read(fd, 1 << 16):
            keep += chunk
            if len(keep) > limit:
                if not tail:
                    over.set()
                    return
                del keep[: len(keep) - limit]


def _feed(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError):  # ssh ended first (killed, or the remote hung up)
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _ssh(argv: list[str], stdin: bytes | None, timeout: float, env: dict[str, str] | None) -> _Ran:
    """Run ssh with ``stdin``; what it prints is read bounded (threads pump the pipes, so a
    remote that sends without end costs at most :data:`REMOTE_READ_MAX` here)."""
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
    except OSError as e:
        raise InstallError(f"cannot run ssh: {e.strerror or e}") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    out, err, over = bytearray(), bytearray(), threading.Event()
    pumps = [
        threading.Thread(
            target=_pump, args=(proc.stdout.fileno(), out, REMOTE_READ_MAX, False, over)
        ),
        threading.Thread(target=_pump, args=(proc.stderr.fileno(), err, STDERR_KEEP, True, over)),
    ]
    writer = threading.Thread(target=_feed, args=(proc.stdin, stdin or b""))
    pumps.append(writer)  # a remote that never reads must not hold this thread past timeout
    for t in pumps:
        t.daemon = True
        t.start()
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and not over.is_set():
            if time.monotonic() > deadline:
                raise InstallError(f"ssh did not finish in {timeout:g} s")
            over.wait(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for t in pumps:
            t.join(5)
        for f in (proc.stdout, proc.stderr):
            f.close()
    if over.is_set():
        return _Ran(proc.returncode, None, bytes(err))
    return _Ran(proc.returncode, bytes(out), bytes(err))


def _ssh_error(done: _Ran) -> str:
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return clip(lines[-1]) if lines else f"ssh exited with status {done.returncode}"

"""The user's ssh config as the app's own ssh reads it: everything but what widens exposure.

Why a copy: the tunnel must carry exactly one forward, its ``-R``. Options that take one value
are the command line's to set (OpenSSH keeps the first value it reads, and the command line is
read first: :data:`.plan.CONFINED`), but ``LocalForward``, ``RemoteForward`` and
``DynamicForward`` add up, and the only switch that drops them, ``ClearAllForwardings``, drops
the command line's ``-R`` too (checked with OpenSSH 9.2: ``ssh -G -o ClearAllForwardings=yes
-R ...`` lists no forward). So the app's ssh reads (``-F``) a private copy of the user's config
files, line for line, with the lines that open or share something commented out
(:data:`DROPPED`): the forwards, and the per-host switches a jump host's own ssh (``ProxyJump``
runs ``ssh -F <this copy>``, without the app's ``-o`` options) would otherwise still apply:
agent, X11 and GSSAPI credential forwarding, local and remote commands, shared connections,
forking to the background. Every other line (HostName, User, Port, IdentityFile, ProxyJump,
ProxyCommand, known hosts, ``Match``) stays where it was, so line numbers in ssh's errors are
the user's (:meth:`Confined.explain` names the user's file again). ``Include`` lines point to
the copies of the files they name, resolved as ssh would (relative to ``~/.ssh`` or the system
folder, globbed, sorted).

Then :func:`widened` checks what ssh itself says it will do (``ssh -G`` with the tunnel's whole
command line): a forward or switch that got through anyway (an ssh that reads the config another
way than this module) stops the start instead of opening it.

The parsing and checking here are pure; :func:`confine` reads and writes files (the bridge runs
it in a worker, ``--install`` on its own thread).
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from ..errors import BridgeError

# What the copy comments out: lowercase keywords. Forwards add up (the command line cannot
# undo them); the rest are one-value switches the command line sets for the tunnel itself, also
# dropped so that a jump host's ssh (which gets only -F) falls back to OpenSSH's defaults.
FORWARDS = frozenset({"localforward", "remoteforward", "dynamicforward"})
DROPPED = FORWARDS | frozenset(
    {
        "clearallforwardings",  # "yes" would clear the tunnel's own -R (cmd line sets "no")
        "forwardagent",  # the user's keys, usable from the agent's machine
        "forwardx11",
        "forwardx11trusted",
        "gssapidelegatecredentials",  # the user's Kerberos tickets, handed over at login
        "permitlocalcommand",
        "localcommand",  # a command run here at every (re)connect
        "remotecommand",
        "requesttty",
        "sessiontype",
        "stdinnull",
        "forkafterauthentication",  # ssh -f: a background ssh the app no longer watches
        "controlmaster",  # a master that outlives the app, or the user's own, with its forwards
        "controlpath",
        "controlpersist",
        "tunnel",  # a tun/tap device
        "tunneldevice",
        "gatewayports",  # local forwards open on every interface
    }
)
INCLUDE_DEPTH_MAX = 16  # OpenSSH's own limit (READCONF_MAX_DEPTH)

# A config line's keyword: leading blanks, the word (ssh also takes it in double quotes:
# '"LocalForward" 1 h:2' opens a forward), then blanks and/or one '=' (ssh_config(5)).
_LINE = re.compile(r'[ \t]*(?:"([^"]*)"|([^\s="]+))[ \t]*(?:=[ \t]*)?(.*)', re.DOTALL)

# What ``ssh -G`` must say about the tunnel's own ssh (lowercase key -> accepted values). A key
# this ssh does not print (an older OpenSSH, a build without GSSAPI) is not checked.
EXPECTED: Mapping[str, frozenset[str]] = {
    "forwardagent": frozenset({"no"}),
    "forwardx11": frozenset({"no"}),
    "tunnel": frozenset({"no", "false"}),
    "controlmaster": frozenset({"no", "false"}),
    "controlpath": frozenset({"none"}),
    "permitlocalcommand": frozenset({"no"}),
    "clearallforwardings": frozenset({"no"}),
    "exitonforwardfailure": frozenset({"yes"}),
    "forkafterauthentication": frozenset({"no"}),
    "sessiontype": frozenset({"none"}),
    "gssapidelegatecredentials": frozenset({"no"}),
    "gatewayports": frozenset({"no"}),
    "batchmode": frozenset({"yes"}),
}


class SshConfigError(BridgeError):
    """The user's ssh config cannot be read as ssh would (one line, ssh's words where it has
    them)."""


def keyword(line: str) -> tuple[str, str, str] | None:
    """A config line's keyword (lowercase, then as written) and the rest; None for a blank
    line or a comment."""
    stripped = line.lstrip(" \t")
    if not stripped.strip() or stripped.startswith("#"):
        return None
    m = _LINE.match(line)
    if m is None:
        return None
    word = m.group(1) if m.group(1) is not None else m.group(2)
    return word.lower(), word, m.group(3).rstrip("\r\n")


def include_args(rest: str) -> list[str]:
    """``Include``'s arguments: blank-separated, quoted with ``"`` or ``'``, up to a ``#``."""
    lexer = shlex.shlex(rest, posix=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an unclosed quote: ssh refuses the line too
        raise SshConfigError(f"unbalanced quotes in: Include {rest.strip()}") from None


def quoted(path: str) -> str:
    """A path as an ssh_config argument (a Windows temp folder may hold spaces)."""
    return '"' + path.replace("\\", "/" if sys.platform == "win32" else "\\\\") + '"'


def filter_text(text: str, include: Callable[[list[str]], list[str]]) -> tuple[str, list[str]]:
    """One config file's copy: each :data:`DROPPED` line commented out, each ``Include``
    pointed at ``include(args)`` (the copies' paths); same line count. Returns the copy and
    the keywords dropped (as written)."""
    out: list[str] = []
    dropped: list[str] = []
    for line in text.splitlines(keepends=True):
        found = keyword(line)
        end = "\n" if line.endswith(("\n", "\r")) else ""
        if found is None:
            out.append(line)
            continue
        key, word, rest = found
        if key in DROPPED:
            dropped.append(word)
            out.append(f"# (not for omp-a2a-bridge's tunnel) {word}{end}")
        elif key == "include":
            paths = include(include_args(rest))
            out.append(("Include " + " ".join(quoted(p) for p in paths) if paths else "#") + end)
        else:
            out.append(line)
    return "".join(out), dropped


def parse_effective(text: str) -> dict[str, list[str]]:
    """``ssh -G``'s output: each lowercase key and its values, in order."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        parts = line.strip().split(None, 1)
        if parts:
            out.setdefault(parts[0].lower(), []).append(parts[1] if len(parts) > 1 else "")
    return out


def widened(effective: Mapping[str, list[str]], own_forwards: int = 1) -> list[str]:
    """What the tunnel's ssh would do beyond its one forward, from ``ssh -G``: empty when
    nothing. Each entry names the option and its value, as ssh prints them."""
    problems: list[str] = []
    for key in sorted(FORWARDS):
        values = effective.get(key, [])
        extra = values[own_forwards:] if key == "remoteforward" else values
        problems += [f"{key} {v}" for v in extra]
    for key, accepted in EXPECTED.items():
        for value in effective.get(key, []):
            if value.lower() not in accepted:
                problems.append(f"{key} {value}")
    return problems


# -- files ------------------------------------------------------------------------------------


def user_dir() -> str:
    return os.path.expanduser(os.path.join("~", ".ssh"))


def system_dir() -> str:
    if sys.platform == "win32":
        return os.path.join(os.environ.get("PROGRAMDATA", r"C:\ProgramData"), "ssh")
    return "/etc/ssh"


def default_sources() -> tuple[str, str]:
    """What ssh reads without ``-F``: the user's file, then the system's."""
    return os.path.join(user_dir(), "config"), os.path.join(system_dir(), "ssh_config")


@dataclass(frozen=True, slots=True)
class Confined:
    """The copy ssh reads (``-F path``) and which copy stands for which of the user's files."""

    path: str
    sources: tuple[tuple[str, str], ...]  # (copy, original)
    dropped: tuple[str, ...]  # keywords commented out, as written

    def explain(self, text: str) -> str:
        """ssh's words with the user's file names instead of the copies'."""
        for copy, original in self.sources:
            text = text.replace(copy, original)
        return text


def _checked_read(path: str, user: bool) -> str | None:
    """A config file's text (None: absent); a user file writable by others is refused, with
    ssh's own words (ssh refuses to read it too)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SshConfigError(f"Can't open user config file {path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        return None
    if (
        user
        and sys.platform != "win32"
        and ((st.st_uid not in (0, os.getuid())) or st.st_mode & 0o022)
    ):
        raise SshConfigError(f"Bad owner or permissions on {path}")
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return f.read()
    except OSError as e:
        raise SshConfigError(f"Can't open user config file {path}: {e.strerror or e}") from None


class _Copier:
    """Copies one tree of config files (a file and what it includes) into ``folder``."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.copies: dict[str, str] = {}  # original -> copy
        self.dropped: list[str] = []
        self._stack: list[str] = []

    def copy(self, original: str, user: bool) -> str | None:
        original = os.path.abspath(original)
        if original in self.copies:
            return self.copies[original]
        if len(self._stack) >= INCLUDE_DEPTH_MAX or original in self._stack:
            raise SshConfigError(f"{original}: Include nested too deeply (or in a loop)")
        text = _checked_read(original, user)
        if text is None:
            return None
        self._stack.append(original)
        try:
            copy, dropped = filter_text(text, lambda args: self._include(args, user))
        finally:
            self._stack.pop()
        path = os.path.join(self.folder, f"{len(self.copies):03d}.conf")
        _write_private(path, copy)
        self.copies[original] = path
        self.dropped += dropped
        return path

    def _include(self, args: list[str], user: bool) -> list[str]:
        out: list[str] = []
        for arg in args:
            if arg.startswith("~"):
                if not user:
                    continue  # ssh refuses '~' in a system file's Include
                pattern = os.path.expanduser(arg)
            elif os.path.isabs(arg):
                pattern = arg
            else:
                pattern = os.path.join(user_dir() if user else system_dir(), arg)
            for found in sorted(glob.glob(pattern)):
                copy = self.copy(found, user)
                if copy is not None:
                    out.append(copy)
        return out


def _write_private(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        f.write(text)


_lock = threading.Lock()


def confine(folder: str, config: str | None = None) -> Confined:
    """Write the copy of the user's ssh config into ``folder`` (made 0700) and return it.

    ``config``: a file given with ``-F`` (then ssh reads only it, and so does the copy);
    None: ``~/.ssh/config`` then the system's ``ssh_config``, as ssh reads them.
    """
    os.makedirs(folder, mode=0o700, exist_ok=True)
    with _lock:  # two tunnels starting at once write their own folders; one lock is enough
        copier = _Copier(folder)
        if config is not None:
            parts = [(config, True)]
        else:
            user, system = default_sources()
            parts = [(user, True), (system, False)]
        lines = ["# omp-a2a-bridge: your ssh config, less what its tunnel never opens\n"]
        for original, is_user in parts:
            copy = copier.copy(original, is_user)
            if copy is not None:
                lines += ["Match all\n", f"Include {quoted(copy)}\n"]
        top = os.path.join(folder, "config")
        _write_private(top, "".join(lines))
        sources = tuple((c, o) for o, c in copier.copies.items())
        return Confined(top, sources, tuple(copier.dropped))


_known: dict[str, frozenset[str]] = {}
PROBE_TIMEOUT_S = 60.0


def known_options(program: str = "ssh", env: Mapping[str, str] | None = None) -> frozenset[str]:
    """The option names this ssh knows (lowercase): the keys ``ssh -G`` prints for a config
    of nothing. Asked once per ssh program; :class:`OSError` when it cannot run."""
    path = env.get("PATH") if env is not None else None
    found = shutil.which(program, path=path) or program
    with _lock:
        if found in _known:
            return _known[found]
    done = subprocess.run(
        [found, "-G", "-F", os.devnull, "--", "localhost"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        env=None if env is None else dict(env),
        timeout=PROBE_TIMEOUT_S,
    )
    names = frozenset(parse_effective(done.stdout))
    if done.returncode == 0 and names:
        with _lock:
            _known[found] = names
    return names

"""The environment the bridge hands to the processes it starts for agents.

``bash`` (and its supervisor) and upstream stdio MCP servers never inherit the bridge's whole
environment: a desktop session's environment holds ``GITHUB_TOKEN``, ``AWS_SECRET_ACCESS_KEY``,
``OPENAI_API_KEY``, ``SSH_AUTH_SOCK`` (the user's SSH agent: every loaded key), the D-Bus session
bus (the Secret Service keyring), ``DISPLAY`` (X11 lets any client read keystrokes), and a
single ``env`` or ``printenv`` would hand all of it to the agent.

So a child gets an **allow-list** of harmless names (:data:`SAFE_NAMES`, :data:`SAFE_PREFIXES`)
copied from the bridge's environment, plus what the user adds in config:

- ``pass``: more names to copy, exact (``GOPATH``) or globs (``CARGO_*``). A name reached by a
  glob is still refused when it looks like a secret (:data:`SECRET_PATTERNS`); a name listed
  exactly is the user's explicit choice and passes.
- ``set``: fixed values (``{"FOO": "bar"}``), explicit, written in the config.

Never, whatever the config says: an ``A2A_BRIDGE_*`` variable, a value holding the bridge's
token, or an inherited value that is a bash function export (``() {``, the Shellshock shape the
MCP SDK also skips). This module reads the environment and nothing else: no SDK import.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

BRIDGE_PREFIX = "A2A_BRIDGE_"

# Copied when present. Why each is harmless (and needed), in docs/decisions/infra.md:
#   PATH      finding programs;                HOME      ~ and every program's dot-files
#   USER, LOGNAME  who runs (git, ssh, many tools read them; public in /etc/passwd anyway)
#   SHELL     the user's login shell (a path); LANG, LANGUAGE, LC_*  UTF-8 and messages
#   TERM      how to draw (output is a pipe); TZ  local time;  TMPDIR  the per-user temp dir
#   XDG_CONFIG_HOME/DATA_HOME/CACHE_HOME/STATE_HOME/CONFIG_DIRS/DATA_DIRS  where programs keep
#             their files, so a program finds the same config as in the user's own shell
# Not copied: PWD/OLDPWD (the shell sets them from its real cwd), COLUMNS/LINES (not a
# terminal), EDITOR/VISUAL/PAGER (commands: a GUI editor would open on the user's screen),
# XDG_RUNTIME_DIR (holds the session bus, keyring, gpg-agent and Wayland sockets), DISPLAY,
# WAYLAND_DISPLAY, XAUTHORITY, DBUS_SESSION_BUS_ADDRESS, SSH_AUTH_SOCK, proxies (a proxy URL
# can carry a password) - each can be passed by name in the config.
if sys.platform == "win32":
    SAFE_NAMES: frozenset[str] = frozenset(
        {
            "APPDATA", "COMSPEC", "HOMEDRIVE", "HOMEPATH", "LOCALAPPDATA", "PATH", "PATHEXT",
            "PROCESSOR_ARCHITECTURE", "SYSTEMDRIVE", "SYSTEMROOT", "TEMP", "TMP", "USERNAME",
            "USERPROFILE", "WINDIR",
        }
    )  # fmt: skip
    SAFE_PREFIXES: tuple[str, ...] = ()
else:
    SAFE_NAMES = frozenset(
        {
            "HOME", "LANG", "LANGUAGE", "LOGNAME", "PATH", "SHELL", "TERM", "TMPDIR", "TZ",
            "USER", "XDG_CACHE_HOME", "XDG_CONFIG_DIRS", "XDG_CONFIG_HOME", "XDG_DATA_DIRS",
            "XDG_DATA_HOME", "XDG_STATE_HOME",
        }
    )  # fmt: skip
    SAFE_PREFIXES = ("LC_",)

# Names that look like a secret or a key to one: refused when a ``pass`` glob reaches them
# (``pass: ["GITHUB_*"]`` passes GITHUB_USER, not GITHUB_TOKEN). Matched case-insensitively.
SECRET_PATTERNS: tuple[str, ...] = (
    "*TOKEN*", "*SECRET*", "*PASSWORD*", "*PASSWD*", "*PASSPHRASE*", "*KEY*", "*CREDENTIAL*",
    "*_AUTH*", "*AUTHORITY*", "*COOKIE*", "*SESSION*", "*PRIVATE*", "*_PAT", "*_DSN",
    "*DATABASE_URL*", "*_SOCK", "AWS_*", "SSH_*", "GPG_*", "KRB5*", "DISPLAY",
    "WAYLAND_DISPLAY", "XDG_RUNTIME_DIR",
)  # fmt: skip
_SECRET = re.compile("|".join(fnmatch.translate(p) for p in SECRET_PATTERNS), re.IGNORECASE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_GLOB_NAME = re.compile(r"[A-Za-z0-9_*?]+\Z")


def looks_secret(name: str) -> bool:
    """True for a name like ``GITHUB_TOKEN``, ``AWS_REGION``, ``SSH_AUTH_SOCK``, ``DISPLAY``."""
    return _SECRET.match(name) is not None


def _key(name: str) -> str:
    """Names compare case-insensitively on Windows, exactly elsewhere."""
    return name.upper() if sys.platform == "win32" else name


# In every tool child's environment (bash and its supervisor, stdio upstream servers): the
# control API refuses a peer with this in its own or an ancestor's /proc/PID/environ, so no
# tool approves its own calls (server/control/peer.py). Nothing the config says removes it.
TOOL_MARKER = "OMP_A2A_TOOL"


def is_bridge_name(name: str) -> bool:
    return name.upper().startswith(BRIDGE_PREFIX)


@dataclass(frozen=True)
class EnvSpec:
    """What the user added to a child's environment: names to copy and fixed values."""

    passed: tuple[str, ...] = ()  # exact names or globs (``*``, ``?``)
    set: dict[str, str] = field(default_factory=dict)

    @functools.cached_property
    def _exact(self) -> frozenset[str]:
        return frozenset(_key(p) for p in self.passed if "*" not in p and "?" not in p)

    @functools.cached_property
    def _globs(self) -> re.Pattern[str] | None:
        globs = [fnmatch.translate(_key(p)) for p in self.passed if "*" in p or "?" in p]
        return re.compile("|".join(globs)) if globs else None

    def passes(self, name: str) -> bool:
        """Copied from the bridge's environment: the safe list, an exact ``pass`` entry, or a
        ``pass`` glob that does not reach a secret-looking name."""
        key = _key(name)
        if key in SAFE_NAMES or key.startswith(SAFE_PREFIXES) or key in self._exact:
            return True
        return self.globbed(name) and not looks_secret(name)

    def globbed(self, name: str) -> bool:
        """A ``pass`` glob matches ``name``."""
        return self._globs is not None and self._globs.match(_key(name)) is not None


class EnvSpecError(ValueError):
    """``(field, what it must be)`` of a bad ``env`` config entry."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"{name} must be {what}")
        self.name = name
        self.what = what


def parse_env_spec(raw: Any, where: str) -> EnvSpec:
    """``{"pass": [names or globs], "set": {name: value}}``; anything else fails closed."""
    if raw is None:
        return EnvSpec()
    if not isinstance(raw, dict) or not set(raw) <= {"pass", "set"}:
        raise EnvSpecError(where, 'an object {"pass": [...], "set": {...}}')
    passed = raw.get("pass", [])
    if not isinstance(passed, list) or not all(
        isinstance(p, str) and _GLOB_NAME.match(p) for p in passed
    ):
        raise EnvSpecError(
            f"{where}.pass",
            "an array of variable names or globs (letters, digits, '_', '*', '?')",
        )
    values = raw.get("set", {})
    if not isinstance(values, dict) or not all(
        isinstance(k, str) and _NAME.match(k) and isinstance(v, str) and "\0" not in v
        for k, v in values.items()
    ):
        raise EnvSpecError(f"{where}.set", "an object mapping variable names to strings")
    bridge = [n for n in [*passed, *values] if is_bridge_name(n)]
    if bridge:
        raise EnvSpecError(where, f"free of the bridge's own A2A_BRIDGE_* variables ({bridge[0]})")
    return EnvSpec(tuple(passed), dict(values))


@dataclass(frozen=True)
class ChildEnv:
    """The environment to start a child with, and the names withheld from it (for one log line)."""

    env: dict[str, str]
    withheld: tuple[str, ...]


def build_env(
    spec: EnvSpec,
    secret: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> ChildEnv:
    """The allow-listed part of ``environ`` (default: the bridge's) plus ``spec.set``.

    ``withheld`` names what the config asked for but was refused: a ``pass`` glob's
    secret-looking match, or a variable whose value holds the bridge's ``secret``.
    """
    source = os.environ if environ is None else environ
    env: dict[str, str] = {}
    withheld: list[str] = []
    for name, value in source.items():
        if is_bridge_name(name) or value.startswith("()"):
            continue
        if not spec.passes(name):
            if spec.globbed(name):  # reached by a glob, refused as secret-looking
                withheld.append(name)
            continue
        env[name] = value
    env.update(spec.set)
    if secret:
        for name in [n for n, v in env.items() if secret in v]:
            del env[name]
            withheld.append(name)
    env[TOOL_MARKER] = "1"
    return ChildEnv(env, tuple(sorted(set(withheld))))


PR_SET_DUMPABLE = 4


def absolute_path(value: str) -> str:
    """``PATH`` without its empty and relative entries (pure).

    Why: the bridge runs programs by name (``chmod``, ``ssh``...) and some of them from a
    folder an agent can write (a call's project); an empty entry (``PATH=$GOBIN:$PATH`` with
    ``GOBIN`` unset gives ``:/usr/bin``) or ``.``/``node_modules/.bin`` there made the agent's
    own ``./chmod`` run outside the box, as the bridge (an outside review, attack9). Only
    absolute folders name the same programs wherever the bridge stands."""
    return os.pathsep.join(p for p in value.split(os.pathsep) if p and os.path.isabs(p))


def keep_absolute_path() -> None:
    """Drop the relative entries of this process's ``PATH`` (:func:`absolute_path`), once at
    start: every program the bridge and its tools look up by name is found the same way."""
    value = os.environ.get("PATH")
    if value is not None and absolute_path(value) != value:
        os.environ["PATH"] = absolute_path(value)


def hide_own_environment() -> bool:
    """Linux: make the bridge process non-dumpable, as ``ssh-agent`` and ``gpg-agent`` do.

    The bridge's own environment still holds whatever the desktop session gave it (and
    ``A2A_BRIDGE_TOKEN`` when set), and any process of the same user may normally read
    ``/proc/<pid>/environ`` - a ``bash`` call that computes the bridge's pid at run time is not
    seen by the path check. A non-dumpable process's ``/proc/<pid>`` files belong to root, so
    ``environ``, ``mem``, ``maps`` and ``fd`` become unreadable to the user's other processes,
    and ``ptrace`` is refused; children are dumpable again once they ``exec``. Returns whether
    it took effect (False elsewhere, or where ``prctl`` is unavailable).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False

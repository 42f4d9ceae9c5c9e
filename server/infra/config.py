"""The bridge's JSON config: where it lives, what it may hold, and how it is saved.

Validation fails closed: a malformed file or field stops the start with
``invalid config at <file>: field '<name>' must be <what>`` and the file is never "healed".
Saving rewrites the whole document atomically (0600) from the raw dict that was loaded, so keys
this version does not know survive.
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Final

from ..box.policy import DEFAULT_READ_ALLOW, BoxConfig
from ..errors import ConfigError
from ..machines.identity import MachineRecord, parse_machines
from ..policy.protected import DEFAULT_PRIVATE_ALLOW, known_removals
from ..policy.rules import RuleError, RuleSet, parse_rules
from ..present.textsafe import safe
from ..tunnels.plan import TunnelError, TunnelSpec, parse_tunnels
from ..upstream.config import McpServerSpec, _Fail, parse_mcp_servers
from ..vocab import Tier
from .childenv import EnvSpec, EnvSpecError, parse_env_spec
from .fsutil import write_private_atomic
from .locations import (  # noqa: F401 - re-exported: callers import them from here
    audit_path,
    config_path,
    log_path,
    read_config_file,
)

TIERS = tuple(Tier)
TOKEN_MIN_LENGTH = 32
ZERO_OK_LIMITS = ("inline_read_max_bytes", "max_connections")  # 0 has a meaning there


@dataclass(frozen=True)
class Limits:
    """Per-tool limits; all in bytes, lines or seconds."""

    read_max_bytes: int = 256 * 1024
    # Regular files up to this size are read on the bridge loop (like Tornado's own
    # StaticFileHandler); a worker-thread hop costs more than the read. 0 = always a thread.
    inline_read_max_bytes: int = 64 * 1024
    read_max_lines: int = 2000
    read_line_max_chars: int = 2000
    image_max_bytes: int = 5 * 1024 * 1024
    write_max_bytes: int = 10 * 1024 * 1024
    list_max_entries: int = 1000
    find_max_results: int = 1000
    grep_max_matches: int = 500
    search_timeout_s: float = 60.0  # grep/find: rg is killed after this and partial results kept
    output_max_bytes: int = 64 * 1024
    # bash output past this many bytes ends the command (head and tail are still kept).
    output_kill_bytes: int = 64 * 1024 * 1024
    bash_timeout_s: float = 120.0
    bash_max_timeout_s: float = 3600.0
    # Open connections on the MCP listener; 0 = automatic, from the file-descriptor limit.
    max_connections: int = 0


@dataclass(frozen=True)
class Config:
    path: str
    host: str = "127.0.0.1"
    port: int = 0
    # The port the bridge picked itself (``port`` 0 at the first start), saved beside ``port``:
    # while the two agree, a busy port may move; any other port is the user's and never moves.
    picked_port: int | None = None
    token_store: str = "keyring"
    token: str | None = None
    deny: frozenset[str] = frozenset()
    deny_mcp_tools: bool = False
    allowed_origins: frozenset[str] = frozenset()
    roots: tuple[str, ...] = ()
    sensitive_paths: tuple[str, ...] = ()  # additions: the old key plus protected.add
    protected_remove: tuple[str, ...] = ()  # built-in locations or categories to drop
    # Exceptions to "private by default" (the home's hidden tree, other users' homes).
    private_allow: tuple[str, ...] = DEFAULT_PRIVATE_ALLOW
    tiers: dict[str, Tier] = field(default_factory=dict)
    default_tier: Tier = Tier.PROMPT
    approval_timeout_s: float = 55.0
    max_pending: int = 32  # calls waiting for approval, all sessions together
    max_pending_per_session: int = 8
    audit_max_bytes: int = 10 * 1024 * 1024
    audit_keep: int = 5
    log_max_bytes: int = 1024 * 1024  # the bridge's own log (log.max_bytes, log.keep)
    log_keep: int = 3
    limits: Limits = Limits()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    rules: RuleSet = field(default_factory=RuleSet)
    bash_env: EnvSpec = field(
        default_factory=EnvSpec
    )  # bash's additions (server/infra/childenv.py)
    box: BoxConfig = field(default_factory=BoxConfig)  # the box bash runs in (server/box)
    tunnels: tuple[TunnelSpec, ...] = ()  # ssh tunnels the app keeps up (server/tunnels)
    # Remote machines besides ``default`` (server/machines): a token digest each, never the
    # token unless the keyring was unusable.
    machines: tuple[MachineRecord, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


# -- the known keys ------------------------------------------------------------------------------
#
# Every key a config may hold, in one place: an unknown key stops the start (a typo such as
# "aproval" or "root" used to be ignored silently, leaving the whole home exposed with the tiers
# the user thought they had changed). To add a setting, add its key here (and parse it below).
#
# A value is either LEAF (its inside, if any, is checked by the field's own parser), a dict (an
# object whose keys are fixed: each is walked), or Named(x) (an object whose keys the user names,
# e.g. upstream servers; each value is walked with x).


@dataclass(frozen=True, slots=True)
class Named:
    """An object whose keys are names the user picks; each value follows ``value``."""

    value: Schema


Schema = dict[str, "Schema"] | Named | None
LEAF: Final = None

# One upstream server's keys; "type" is the mcpServers shape clients use ("stdio", "http"):
# accepted so a pasted entry works, and only informational.
SERVER_KEYS = (
    *("command", "args", "env", "cwd", "url", "headers", "timeout_s", "box", "network"),
    "type",
)

KNOWN_KEYS: Final[dict[str, Schema]] = {
    "host": LEAF,
    "port": LEAF,  # written by the bridge on the first start
    "picked_port": LEAF,  # written by the bridge: the port it picked itself (may move)
    "token_store": LEAF,
    "token": LEAF,  # written by the bridge (token_store "file" or a keyring fallback)
    "deny": LEAF,
    "deny_mcp_tools": LEAF,
    "allowed_origins": LEAF,
    "roots": LEAF,
    "sensitive_paths": LEAF,
    "protected": {"add": LEAF, "remove": LEAF},
    "private": {"allow": LEAF},
    "approval": {  # tiers: written by the bridge too ("Always allow" on older versions)
        "tiers": LEAF,
        "default_tier": LEAF,
        "timeout_s": LEAF,
        "max_pending": LEAF,
        "max_pending_per_session": LEAF,
    },
    "rules": {"allow": LEAF, "ask": LEAF, "deny": LEAF},  # written by the bridge
    "audit": {"max_bytes": LEAF, "keep": LEAF},
    "log": {"max_bytes": LEAF, "keep": LEAF},
    "limits": {f.name: LEAF for f in fields(Limits)},
    "mcp_servers": Named(dict.fromkeys(SERVER_KEYS, LEAF)),
    "bash": {"env": {"pass": LEAF, "set": LEAF}},
    "box": {"read_allow": LEAF, "write_allow": LEAF, "network": LEAF},
    "tunnels": LEAF,  # an array; each entry's keys are checked by server/tunnels/plan.py
    # written by the bridge (machines add): a digest each, the token only without a keyring
    "machines": Named({"created": LEAF, "sha256": LEAF, "token": LEAF, "last_seen": LEAF}),
}


def unknown_key(raw: dict[str, Any], schema: dict[str, Schema] = KNOWN_KEYS) -> str | None:
    """``unknown key 'aproval' (did you mean 'approval'?)`` for the first key (in the file's
    order, depth first) that ``schema`` does not know, or None. Pure."""
    found = _first_unknown(raw, schema, "")
    if found is None:
        return None
    dotted, siblings = found
    *parents, leaf = dotted.split(".")
    close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
    if close:
        hint = ".".join([*parents, close[0]])
    else:  # a key at the wrong level ("tier" at the top): where it exists, if in one place
        paths = _dotted_paths(schema, "")
        leaves = {p.rsplit(".", 1)[-1] for p in paths}
        near = difflib.get_close_matches(leaf, sorted(leaves), n=1, cutoff=0.75)
        elsewhere = [p for p in paths if near and p.rsplit(".", 1)[-1] == near[0]]
        hint = elsewhere[0] if len(elsewhere) == 1 else ""
    shown = safe(dotted)
    if hint:
        return f"unknown key '{shown}' (did you mean '{hint}'?)"
    return f"unknown key '{shown}' (not a setting; see the configuration reference)"


def _first_unknown(
    value: Any, schema: dict[str, Schema], prefix: str
) -> tuple[str, list[str]] | None:
    """``(dotted key, the known keys beside it)`` of the first unknown key below ``value``.
    A value of the wrong type is left to the field's parser (it names the field)."""
    if not isinstance(value, dict):
        return None
    for key, child in value.items():
        dotted = f"{prefix}{key}"
        if key not in schema:
            return dotted, list(schema)
        inner = schema[key]
        if isinstance(inner, Named) and isinstance(child, dict):
            for name, item in child.items():
                if isinstance(inner.value, dict):
                    found = _first_unknown(item, inner.value, f"{dotted}.{name}.")
                    if found is not None:
                        return found
        elif isinstance(inner, dict):
            found = _first_unknown(child, inner, f"{dotted}.")
            if found is not None:
                return found
    return None


def _dotted_paths(schema: dict[str, Schema], prefix: str) -> list[str]:
    """Every fixed key's dotted path (names the user picks are not walked)."""
    out: list[str] = []
    for key, inner in schema.items():
        out.append(prefix + key)
        if isinstance(inner, dict):
            out.extend(_dotted_paths(inner, f"{prefix}{key}."))
    return out


def _fail(path: str, name: str, what: str) -> ConfigError:
    return ConfigError(f"invalid config at {path}: field '{name}' must be {what}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


def valid_token(token: Any) -> bool:
    return (
        isinstance(token, str)
        and len(token) >= TOKEN_MIN_LENGTH
        and not any(c.isspace() for c in token)
    )


def _string_list(path: str, raw: dict, name: str) -> list[str]:
    v = raw.get(name, [])
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise _fail(path, name, "an array of non-empty strings")
    return v


def _limits(path: str, raw: Any) -> Limits:
    if raw is None:
        return Limits()
    if not isinstance(raw, dict):
        raise _fail(path, "limits", "an object")
    defaults = Limits()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if not hasattr(defaults, key):
            continue  # not reached: unknown keys stop the start (KNOWN_KEYS)
        default = getattr(defaults, key)
        if isinstance(default, float):
            if not _is_number(value) or value <= 0:
                raise _fail(path, f"limits.{key}", "a positive number")
            values[key] = float(value)
        else:
            least = 0 if key in ZERO_OK_LIMITS else 1
            if not _is_int(value) or value < least:
                raise _fail(path, f"limits.{key}", "a positive integer")
            values[key] = value
    limits = Limits(**values)
    if limits.bash_timeout_s > limits.bash_max_timeout_s:
        # Else every bash call without its own timeout_s fails, blaming an argument the agent
        # never sent.
        raise _fail(
            path,
            "limits.bash_timeout_s",
            f"at most limits.bash_max_timeout_s ({limits.bash_max_timeout_s:g})",
        )
    return limits


def _check_locations(path: str, name: str, entries: list[str]) -> None:
    """Added protected locations: ``~/x``, ``/abs``, a bare name or ``**/a/b``. A relative
    path with a slash would silently mean a place under the bridge's working directory."""
    for entry in entries:
        if not (entry.startswith(("~", "**/")) or "/" not in entry or os.path.isabs(entry)):
            raise _fail(
                path,
                name,
                f"paths starting with ~/ or /, bare names or **/ patterns ({entry!r} is relative)",
            )


def _roots(path: str, raw: dict) -> list[str]:
    """Absolute or ``~`` paths: a relative root would resolve against whatever directory the
    bridge happened to start in, and relative tool paths resolve against the first root."""
    roots = _string_list(path, raw, "roots")
    for entry in roots:
        if not os.path.isabs(os.path.expanduser(entry)):
            raise _fail(
                path, "roots", f"absolute paths or paths starting with ~/ ({entry!r} is not)"
            )
    return roots


def _protected(path: str, raw: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``protected``: ``{"add": [...], "remove": [...]}``; a removal must name a built-in
    location or category (a typo would otherwise silently keep nothing removed)."""
    if raw is None:
        return (), ()
    what = 'an object {"add": [...], "remove": [...]}'
    if not isinstance(raw, dict) or not set(raw) <= {"add", "remove"}:
        raise _fail(path, "protected", what)
    add, remove = raw.get("add", []), raw.get("remove", [])
    for name, v in (("add", add), ("remove", remove)):
        if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
            raise _fail(path, f"protected.{name}", "an array of non-empty strings")
    _check_locations(path, "protected.add", add)
    known = known_removals()
    for entry in remove:
        if entry not in known:
            raise _fail(
                path,
                "protected.remove",
                f"built-in protected locations or categories ({entry!r} is neither; "
                "the bridge's own files cannot be removed)",
            )
    return tuple(add), tuple(remove)


def _private(path: str, raw: Any) -> tuple[str, ...]:
    """``private``: ``{"allow": [...]}``, paths (``~/x`` or absolute) the private-by-default
    rule leaves readable; a list given replaces the default, so ``[]`` allows nothing."""
    if raw is None:
        return DEFAULT_PRIVATE_ALLOW
    if not isinstance(raw, dict) or not set(raw) <= {"allow"}:
        raise _fail(path, "private", 'an object {"allow": [...]}')
    allow = raw.get("allow", list(DEFAULT_PRIVATE_ALLOW))
    if not isinstance(allow, list) or not all(isinstance(x, str) and x for x in allow):
        raise _fail(path, "private.allow", "an array of non-empty strings")
    for entry in allow:
        if not (entry == "~" or entry.startswith("~/") or os.path.isabs(entry)):
            raise _fail(
                path,
                "private.allow",
                f"paths starting with ~/ or / ({entry!r} is neither)",
            )
    return tuple(allow)


def _bash(path: str, raw: Any) -> EnvSpec:
    """``bash``: ``{"env": {"pass": [...], "set": {...}}}``; other keys are kept, not read."""
    if raw is None:
        return EnvSpec()
    if not isinstance(raw, dict):
        raise _fail(path, "bash", 'an object {"env": {"pass": [...], "set": {...}}}')
    try:
        return parse_env_spec(raw.get("env"), "bash.env")
    except EnvSpecError as e:
        raise _fail(path, e.name, e.what) from None


def _box(path: str, raw: Any) -> BoxConfig:
    """``box``: ``{"read_allow": [...], "write_allow": [...], "network": "off"|"on"}``.

    ``read_allow`` replaces the default list (``~/`` paths, absolute); ``write_allow`` adds
    folders every boxed call may write besides its project.
    """
    if raw is None:
        return BoxConfig()
    if not isinstance(raw, dict):
        raise _fail(
            path,
            "box",
            'an object {"read_allow": [...], "write_allow": [...], "network": "off"|"on"}',
        )
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("read_allow", "write_allow"):
        value = raw.get(key, list(DEFAULT_READ_ALLOW) if key == "read_allow" else [])
        if not isinstance(value, list) or not all(
            isinstance(v, str) and (v.startswith("~/") or os.path.isabs(v)) for v in value
        ):
            raise _fail(path, f"box.{key}", "an array of absolute or ~/ paths")
        lists[key] = tuple(value)
    home = os.path.normpath(os.path.expanduser("~"))
    # normpath: "/.", "/..", "~/." and "~/x/.." name / and the home too
    if any(
        os.path.normpath(os.path.expanduser(v)) in ("/", "//", home) for v in lists["write_allow"]
    ):
        raise _fail(path, "box.write_allow", "folders other than / and the home itself")
    network = raw.get("network", "off")
    if network not in ("off", "on"):
        raise _fail(path, "box.network", "one of 'off', 'on'")
    return BoxConfig(lists["read_allow"], lists["write_allow"], network == "on")


def _remote(
    path: str, raw: dict[str, Any]
) -> tuple[tuple[TunnelSpec, ...], tuple[MachineRecord, ...]]:
    """The remote side: ``tunnels`` (server/tunnels) and ``machines`` (server/machines)."""
    try:
        tunnels = parse_tunnels(raw.get("tunnels"))
    except TunnelError as e:
        raise ConfigError(f"invalid config at {path}: field 'tunnels': {e}") from None
    try:
        machines = parse_machines(raw.get("machines"))
    except ValueError as e:
        name, _, what = str(e).partition(": ")
        raise _fail(path, name, what) from None
    return tunnels, machines


def parse_config(path: str, raw: Any) -> Config:
    """Validate a loaded document; raise :class:`ConfigError` naming the first bad field."""
    if not isinstance(raw, dict):
        raise ConfigError(f"invalid config at {path}: expected a JSON object")
    unknown = unknown_key(raw)
    if unknown is not None:  # first: a typo explains what follows (and weakens nothing)
        raise ConfigError(f"invalid config at {path}: {unknown}")
    host = raw.get("host", "127.0.0.1")
    if not isinstance(host, str) or not host.strip():
        raise _fail(path, "host", "a non-empty string")
    port = raw.get("port", 0)
    if not _is_int(port) or not 0 <= port <= 65535:
        raise _fail(path, "port", "an integer in [0, 65535]")
    picked = raw.get("picked_port")
    if picked is not None and (not _is_int(picked) or not 1 <= picked <= 65535):
        raise _fail(path, "picked_port", "an integer in [1, 65535] (the bridge writes it)")
    token_store = raw.get("token_store", "keyring")
    if token_store not in ("keyring", "file"):
        raise _fail(path, "token_store", "one of 'keyring', 'file'")
    token = raw.get("token")
    if token is not None and not valid_token(token):
        raise _fail(path, "token", f"at least {TOKEN_MIN_LENGTH} characters, no whitespace")
    deny = _string_list(path, raw, "deny")
    deny_mcp = raw.get("deny_mcp_tools", False)
    if not isinstance(deny_mcp, bool):
        raise _fail(path, "deny_mcp_tools", "a boolean")
    origins = _string_list(path, raw, "allowed_origins")
    roots = _roots(path, raw)
    sensitive = _string_list(path, raw, "sensitive_paths")
    _check_locations(path, "sensitive_paths", sensitive)
    added, removed = _protected(path, raw.get("protected"))
    private_allow = _private(path, raw.get("private"))

    tiers, default_tier, timeout_s, max_pending, max_per_session = _approval(path, raw)
    max_bytes, keep = _rotation(path, raw, "audit", 10 * 1024 * 1024, 5)
    log_max_bytes, log_keep = _rotation(path, raw, "log", 1024 * 1024, 3)

    try:
        mcp_servers = parse_mcp_servers(raw.get("mcp_servers"))
    except _Fail as e:
        raise _fail(path, e.name, e.what) from None
    rules = config_rules(path, raw.get("rules"), tuple(roots) or (os.path.expanduser("~"),))
    tunnels, machines = _remote(path, raw)

    return Config(
        path=path,
        host=host.strip(),
        port=port,
        picked_port=picked,
        token_store=token_store,
        token=token,
        deny=frozenset(deny),
        deny_mcp_tools=deny_mcp,
        allowed_origins=frozenset(o.strip().rstrip("/").lower() for o in origins),
        roots=tuple(roots) or (os.path.expanduser("~"),),
        sensitive_paths=tuple(sensitive) + added,
        protected_remove=removed,
        private_allow=private_allow,
        tiers=tiers,
        default_tier=default_tier,
        approval_timeout_s=timeout_s,
        max_pending=max_pending,
        max_pending_per_session=max_per_session,
        audit_max_bytes=max_bytes,
        audit_keep=keep,
        log_max_bytes=log_max_bytes,
        log_keep=log_keep,
        limits=_limits(path, raw.get("limits")),
        mcp_servers=mcp_servers,
        rules=rules,
        bash_env=_bash(path, raw.get("bash")),
        box=_box(path, raw.get("box")),
        tunnels=tunnels,
        machines=machines,
        raw=raw,
    )


def _approval(path: str, raw: dict[str, Any]) -> tuple[dict[str, Tier], Tier, float, int, int]:
    """The ``approval`` object: tiers, the default tier, the timeout and the pending caps."""
    approval = raw.get("approval", {})
    if not isinstance(approval, dict):
        raise _fail(path, "approval", "an object")
    tiers = approval.get("tiers", {})
    if not isinstance(tiers, dict) or not all(
        isinstance(k, str) and v in TIERS for k, v in tiers.items()
    ):
        raise _fail(path, "approval.tiers", "an object mapping tool names to allow|box|prompt|deny")
    default_tier = approval.get("default_tier", "prompt")
    if default_tier not in TIERS:
        raise _fail(path, "approval.default_tier", "one of 'allow', 'box', 'prompt', 'deny'")
    timeout_s = approval.get("timeout_s", 55)
    if not _is_number(timeout_s) or timeout_s < 0:
        raise _fail(path, "approval.timeout_s", "a number >= 0 (0 = wait forever)")
    max_pending = approval.get("max_pending", 32)
    if not _is_int(max_pending) or not 1 <= max_pending <= 10000:
        raise _fail(path, "approval.max_pending", "an integer in [1, 10000]")
    max_per_session = approval.get("max_pending_per_session", 8)
    if not _is_int(max_per_session) or not 1 <= max_per_session <= 10000:
        raise _fail(path, "approval.max_pending_per_session", "an integer in [1, 10000]")
    typed = {k: Tier(v) for k, v in tiers.items()}
    return typed, Tier(default_tier), float(timeout_s), max_pending, max_per_session


def _rotation(
    path: str, raw: dict[str, Any], name: str, max_bytes: int, keep: int
) -> tuple[int, int]:
    """The ``audit`` or ``log`` object: the size at which the file rotates, how many old
    generations it keeps."""
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise _fail(path, name, "an object")
    max_bytes = value.get("max_bytes", max_bytes)
    if not _is_int(max_bytes) or max_bytes < 4096:
        raise _fail(path, f"{name}.max_bytes", "an integer >= 4096")
    keep = value.get("keep", keep)
    if not _is_int(keep) or not 1 <= keep <= 100:
        raise _fail(path, f"{name}.keep", "an integer in [1, 100]")
    return max_bytes, keep


def config_rules(path: str, raw: Any, roots: tuple[str, ...]) -> RuleSet:
    """The ``rules`` object; ``~/`` is the real home, relative paths start at the first root."""
    try:
        return parse_rules(raw, base=os.path.realpath(os.path.expanduser(roots[0])))
    except RuleError as e:
        raise ConfigError(f"invalid config at {path}: {e}") from None


def load_config(path: str | None = None) -> Config:
    """Read and validate the config; an absent file means all defaults."""
    path = path or config_path()
    found = read_config_file(path)
    if found is None:
        return parse_config(path, {})
    raw, st = found
    config = parse_config(path, raw)  # a malformed field is named first
    holds = config.token is not None or any(m.token is not None for m in config.machines)
    check_private(path, st, holds_token=holds)
    return config


def check_private(path: str, st: os.stat_result, holds_token: bool) -> None:
    """Refuse a config other users could change or, when it holds the token, read (POSIX).

    Like ssh with a private key or a config others may write: no repair, no start. The
    bridge never loosens its files (it writes them 0600 in a 0700 folder), so a loose one
    was made by hand or by another program; a token others could read may already be
    copied, so the fix is theirs to make (chmod, then rotate the token). Someone else's
    config, or one that other users may write or replace (its folder), decides what runs
    unattended (rules, tiers, roots) and is refused too.
    """
    if not hasattr(os, "getuid"):
        return  # Windows: ACLs, not mode bits; the profile folder is private by default
    uid = os.getuid()
    mode = stat.S_IMODE(st.st_mode)
    where = f"invalid config at {path}"
    if st.st_uid not in (uid, 0):
        raise ConfigError(f"{where}: it belongs to uid {st.st_uid}, not to you (uid {uid})")
    if mode & 0o022:
        raise ConfigError(
            f"{where}: other users can change it (mode {mode:o}); run 'chmod 600 {path}'"
        )
    if holds_token and mode & 0o044:
        raise ConfigError(
            f"{where}: it holds the token and other users can read it (mode {mode:o}); run "
            f"'chmod 600 {path}', then 'a2a-bridge token rotate' (it may have been copied)"
        )
    # The folder of the name and, when it is a symlink, of the file it points to: others
    # who can change either could replace what is read.
    folders = dict.fromkeys(
        os.path.dirname(p) for p in (os.path.abspath(path), os.path.realpath(path))
    )
    for folder in folders:
        try:
            dst = os.stat(folder)
        except OSError:
            continue
        if dst.st_uid not in (uid, 0) or (dst.st_mode & 0o022 and not dst.st_mode & stat.S_ISVTX):
            raise ConfigError(
                f"{where}: its folder {folder} can be changed by other users (owner uid "
                f"{dst.st_uid}, mode {stat.S_IMODE(dst.st_mode):o}): they could replace the "
                f"config; run 'chmod 700 {folder}'"
            )


def save_raw(path: str, raw: dict[str, Any]) -> None:
    write_private_atomic(path, (json.dumps(raw, indent=2, ensure_ascii=False) + "\n").encode())


def update_config(path: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Re-read the file, apply ``changes`` (dotted keys reach into objects), save it.

    Re-reading first means an edit the user made by hand since the start is not overwritten by
    a key the bridge changes (e.g. "Always allow" persisting a tier). A value of ``None`` removes
    the key.
    """
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read())
        if not isinstance(raw, dict):
            raise ConfigError(f"invalid config at {path}: expected a JSON object")
    except FileNotFoundError:
        raw = {}
    except ValueError as e:
        raise ConfigError(f"invalid config at {path}: not valid JSON ({e})") from None
    raw = copy.deepcopy(raw)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split(".")
        node = raw
        for p in parents:
            child = node.get(p)
            if not isinstance(child, dict):
                child = {}
                node[p] = child
            node = child
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    parse_config(path, raw)  # never write a file the next start would refuse
    save_raw(path, raw)
    return raw


_EDIT_LOCK = threading.Lock()


def edit_config(path: str, edit: Callable[[dict[str, Any]], None]) -> Config:
    """Like :func:`update_config`, for changes that depend on what the file holds now.

    ``edit`` changes the freshly read document in place (e.g. appends to ``rules.allow``); the
    result is validated before it is written, and edits are serialised so two at once do not
    lose one another. Returns the new config.
    """
    with _EDIT_LOCK:
        try:
            with open(path, "rb") as f:
                raw = json.loads(f.read())
        except FileNotFoundError:
            raw = {}
        except ValueError as e:
            raise ConfigError(f"invalid config at {path}: not valid JSON ({e})") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"invalid config at {path}: expected a JSON object")
        edit(raw)
        cfg = parse_config(path, raw)
        save_raw(path, raw)
        return cfg

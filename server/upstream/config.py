"""``mcp_servers``: the user's upstream MCP servers, in the ``mcpServers`` shape clients use.

Only parsing and plain records live here, so loading the config never imports the ``mcp`` SDK
(about 1.5 s of imports); :mod:`server.upstream.manager` runs the servers.

Server keys become part of tool names (``mcp__<server>__<tool>``), so they are sanitised to
``[a-z0-9_]`` (runs of other characters become one ``_``, no leading or trailing ``_``): a
name can then never contain ``__`` and the split of a tool name is unambiguous. Two keys that
sanitise to the same name are refused rather than silently merged.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any

DEFAULT_CALL_TIMEOUT_S = 120.0
NAME_MAX = 40


class _Fail(Exception):
    """``field '<name>' must be <what>``; :mod:`server.infra.config` adds the file."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(name, what)
        self.name = name
        self.what = what


@dataclass(frozen=True, slots=True)
class McpServerSpec:
    """One configured upstream: stdio (``command``) or Streamable HTTP (``url``)."""

    name: str  # sanitised: [a-z0-9_], what tool names carry
    key: str  # as written in the config
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    timeout_s: float = DEFAULT_CALL_TIMEOUT_S  # one forwarded call, after approval
    # stdio only: run it in the box (server/box/edges.py: reads as bash, writes its cwd when
    # that is a project inside a root, else its TMPDIR), with network unless ``"network": "off"``.
    box: bool = True
    network: bool = True

    @property
    def kind(self) -> str:
        return "stdio" if self.command is not None else "http"

    @property
    def target(self) -> str:
        """What the UIs show: the command line, or the URL without query or credentials."""
        if self.command is not None:
            return " ".join((self.command, *self.args))
        url = (self.url or "").split("?", 1)[0].split("#", 1)[0]
        scheme, sep, rest = url.partition("://")
        host, slash, path = rest.partition("/")
        return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}"


def working_dir(spec: McpServerSpec, first_root: str | None) -> str | None:
    """The directory a stdio upstream runs in: its ``cwd``, else the first root (not the
    bridge's own working directory, which for a desktop or autostart launch is the home
    folder: relative names an agent sends would then reach ``.aws/credentials``). None for
    an HTTP upstream, whose directory the bridge cannot know."""
    if spec.kind != "stdio":
        return None
    return os.path.realpath(spec.cwd) if spec.cwd else first_root


def sanitise(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")[:NAME_MAX].strip("_")


def _str_map(value: Any, name: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
    ):
        raise _Fail(name, "an object mapping names to strings")
    return dict(value)


def _box_fields(value: dict[str, Any], base: str) -> tuple[bool, bool]:
    """``"box": true|false`` (default true) and ``"network": "on"|"off"`` (default on): a
    server usually needs the network (an API behind it), so only writes and private reads
    are what its box takes away by default."""
    box = value.get("box", True)
    if not isinstance(box, bool):
        raise _Fail(f"{base}.box", "true or false")
    network = value.get("network", "on")
    if network not in ("on", "off"):
        raise _Fail(f"{base}.network", '"on" or "off"')
    return box, network == "on"


def _one(key: str, value: Any) -> McpServerSpec:
    base = f"mcp_servers.{key}"
    name = sanitise(key)
    if not name:
        raise _Fail(base, "named with at least one letter or digit")
    if not isinstance(value, dict):
        raise _Fail(base, "an object with 'command' (stdio) or 'url' (HTTP)")
    command, url = value.get("command"), value.get("url")
    if (command is None) == (url is None):
        raise _Fail(base, "an object with exactly one of 'command' (stdio) or 'url' (HTTP)")
    timeout = value.get("timeout_s", DEFAULT_CALL_TIMEOUT_S)
    if (
        not isinstance(timeout, int | float)
        or isinstance(timeout, bool)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise _Fail(f"{base}.timeout_s", "a positive number")
    if command is not None:
        if not isinstance(command, str) or not command.strip():
            raise _Fail(f"{base}.command", "a non-empty string")
        args = value.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise _Fail(f"{base}.args", "an array of strings")
        env = _str_map(value.get("env"), f"{base}.env")
        bad = [k for k in env if k.upper().startswith("A2A_BRIDGE_") or "=" in k]
        if bad:
            raise _Fail(f"{base}.env", "free of the bridge's own A2A_BRIDGE_* variables")
        cwd = value.get("cwd")
        if cwd is not None and (not isinstance(cwd, str) or not cwd.strip()):
            raise _Fail(f"{base}.cwd", "a non-empty string")
        box, network = _box_fields(value, base)
        return McpServerSpec(
            name,
            key,
            command=command,
            args=tuple(args),
            env=env,
            cwd=os.path.expanduser(cwd) if cwd else None,
            timeout_s=float(timeout),
            box=box,
            network=network,
        )
    if "box" in value or "network" in value:
        raise _Fail(f"{base}.box", "left out for an HTTP server (only stdio servers run in a box)")
    if not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url):
        raise _Fail(f"{base}.url", "an http:// or https:// URL")
    headers = _str_map(value.get("headers"), f"{base}.headers")
    return McpServerSpec(name, key, url=url, headers=headers, timeout_s=float(timeout))


def parse_mcp_servers(raw: Any) -> tuple[McpServerSpec, ...]:
    """Validate ``mcp_servers``; raise :class:`_Fail` naming the first bad field."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise _Fail("mcp_servers", "an object mapping server names to server objects")
    specs: list[McpServerSpec] = []
    seen: dict[str, str] = {}
    for key, value in raw.items():
        spec = _one(key, value)
        if spec.name in seen:
            raise _Fail(
                f"mcp_servers.{key}",
                f"named differently: it becomes '{spec.name}' like '{seen[spec.name]}'",
            )
        seen[spec.name] = key
        specs.append(spec)
    return tuple(specs)

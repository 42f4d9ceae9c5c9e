"""An upstream server's tool as a bridge :class:`~server.tools.base.Tool`, and its pin.

Pinning: a fingerprint of each tool's definition is saved (0600 JSON next to the config) when a
tier, a rule or a human first allows it; a later, different definition suspends every grant
until a human approves the new one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Protocol

from ..infra.fsutil import write_private_atomic
from ..policy.bash.paths import arguments_escalation
from ..policy.paths import CallPaths, Escalation, PathPolicy
from ..tools.base import Tool, ToolContext, ToolResult
from ..types import UpstreamInfo
from ..vocab import Tier
from .config import McpServerSpec, working_dir

log = logging.getLogger(__name__)


def fingerprint(definition: dict[str, Any]) -> str:
    """sha256 over what a human judged: name, description, input schema, annotations."""
    data = {k: definition.get(k) for k in ("name", "description", "inputSchema", "annotations")}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


class PinStore:
    """Approved tool fingerprints, ``{"tools": {full_name: sha256}}`` in a 0600 file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.pins: dict[str, str] = {}
        self.unreadable = False  # then no tool counts as approved: each asks once again
        self._lock = threading.Lock()
        try:
            with open(path, "rb") as f:
                data = json.loads(f.read())
            tools = data.get("tools", {}) if isinstance(data, dict) else {}
            self.pins = {k: v for k, v in tools.items() if isinstance(v, str)}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, AttributeError) as e:
            self.unreadable = True
            log.warning("tool pins at %s unreadable (%s): every upstream tool asks again", path, e)

    def get(self, name: str) -> str | None:
        return self.pins.get(name)

    def set(self, name: str, fp: str) -> bool:
        """Pin ``fp`` for ``name``; whether that changed anything (then it is saved)."""
        if self.pins.get(name) == fp:
            return False
        self.pins[name] = fp
        path = self.path

        def save() -> None:
            # Serialised, and each save writes the latest pins: saves finishing out of order
            # can never leave an older set on disk.
            with self._lock:
                data = json.dumps({"tools": dict(self.pins)}, indent=1, sort_keys=True)
                try:
                    write_private_atomic(path, (data + "\n").encode())
                except OSError as e:
                    log.warning("could not save tool pins to %s: %s", path, e)

        try:
            asyncio.get_running_loop().run_in_executor(None, save)
        except RuntimeError:
            save()
        return True


class ToolServer(Protocol):
    """What an :class:`UpstreamTool` needs of its server: its spec, the pins, a way to say the
    pins changed, the server's current definition of a tool, and the call itself.

    Why a Protocol: the manager's ``UpstreamServer`` (the one implementation) builds its tools
    from this module; naming it here would make the two modules import each other.
    """

    spec: McpServerSpec
    pins: PinStore

    def changed(self) -> None: ...

    def current(self, upstream_name: str) -> UpstreamTool | None: ...

    async def call(self, tool: str, args: dict[str, Any]) -> ToolResult: ...


class UpstreamTool(Tool):
    """One upstream tool as a bridge tool; arguments are passed as they are (rules see them)."""

    default_tier = Tier.PROMPT  # upstream annotations are untrusted: never a reason to allow
    cancel_on_disconnect = True

    def __init__(self, server: ToolServer, definition: dict[str, Any]) -> None:
        self.server = server
        self.upstream_name: str = definition["name"]
        self.name = f"mcp__{server.spec.name}__{self.upstream_name}"
        self.description = str(definition.get("description") or "")
        self.input_schema = definition.get("inputSchema") or {"type": "object"}
        self.annotations = dict(definition.get("annotations") or {})
        self.extra: dict[str, Any] = {
            k: definition[k] for k in ("title", "outputSchema") if k in definition
        }
        self.fingerprint = fingerprint(definition)

    def describe(self) -> dict[str, Any]:
        d = super().describe()
        d.update(self.extra)
        return d

    def escalation(self, args: dict[str, Any], policy: PathPolicy | CallPaths) -> Escalation | None:
        """A string argument naming a protected or persistence location always asks: the
        bridge cannot know what the upstream opens (a filesystem server reads what it is told),
        and no rule or tier may cover those locations. A relative name is judged where the
        server runs: a stdio server's working directory, or, for an HTTP server (unknown),
        every plausible one."""
        spec = self.server.spec
        cwd = working_dir(spec, policy.resolve(None))
        return arguments_escalation(args, policy, cwd, unsure=cwd is None)

    def grants_suspended(self) -> bool:
        pin = self.server.pins.get(self.name)
        if pin is None:
            return self.server.pins.unreadable  # a lost pin is not "never approved"
        return pin != self.fingerprint

    def on_allowed(self, how: str) -> None:
        if how == "session_rule":
            return
        if (
            how == "approve"
            and self.server.pins.get(self.name) is None
            and not self.server.pins.unreadable
        ):
            return  # "approve once" remembers nothing
        if self.server.pins.set(self.name, self.fingerprint):
            self.server.changed()  # a new pin: the UIs' suspended grants may have changed
        # else the same definition, pinned already: nothing for the UIs (every allowed call
        # comes here; republishing each time cost a snapshot per call to every approver)

    def approval_info(self) -> UpstreamInfo:
        return UpstreamInfo(
            self.server.spec.name,
            self.upstream_name,
            self.description,
            self.annotations,
            self.grants_suspended(),
        )

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        current = self.server.current(self.upstream_name)
        if current is not None and current.fingerprint != self.fingerprint:
            # The server re-listed while the call waited: the human judged another definition.
            return ToolResult.text(
                f"tool '{self.name}' changed on its server while the call waited; call it again",
                True,
            )
        return await self.server.call(self.upstream_name, args)


@dataclass(slots=True)
class RawResult(ToolResult):
    """An upstream result, passed through as the upstream sent it."""

    raw: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return self.raw if self.raw is not None else ToolResult.to_json(self)

"""The catalogue: which tools exist, which are exposed, and their compiled schemas.

Schemas are checked and compiled once when a tool is added, so a call only runs the validator.
The same "not exposed" text answers denied and nonexistent names, so a token holder cannot
probe which names exist.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from importlib import metadata
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.protocols import Validator
from jsonschema.validators import validator_for

from ..mcp.protocol import TOOL_NAME_RE
from .base import Tool
from .fastcheck import compile_check

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "omp_a2a_bridge.tools"
MCP_TOOL_RE = re.compile(r"^mcp__[a-z0-9_-]{1,64}__[a-zA-Z0-9_-]{1,64}$")


class ToolRegistry:
    """The tools the bridge knows, which of them are exposed, and their compiled schemas.

    Why one catalogue: ``tools/list``, every call's lookup and the offline ``rules test`` must
    agree on what exists; a denied name answers exactly like an unknown one.
    """

    def __init__(self, deny: frozenset[str] = frozenset(), deny_mcp_tools: bool = False) -> None:
        self.deny = deny
        self.deny_mcp_tools = deny_mcp_tools
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Validator] = {}
        self._fast: dict[str, Callable[[dict[str, Any]], bool] | None] = {}
        # "mcp__github" in deny withholds every tool of that upstream server
        self._deny_prefixes = tuple(
            d + "__" for d in deny if d.startswith("mcp__") and d.count("__") == 1
        )

    def add(self, tool: Tool) -> None:
        name = tool.name
        if not (TOOL_NAME_RE.match(name) or MCP_TOOL_RE.match(name)):
            raise ValueError(f"invalid tool name {name!r}")
        if name in self._tools:
            raise ValueError(f"tool {name!r} is already registered")
        schema = tool.input_schema
        if not isinstance(schema, dict) or schema.get("type") != "object":
            raise ValueError(f"tool {name!r}: inputSchema must be an object schema")
        # 2020-12 unless the schema names its draft (upstream servers often say draft-07)
        cls = validator_for(schema, default=Draft202012Validator)
        try:
            cls.check_schema(schema)
        except SchemaError as e:
            raise ValueError(f"tool {name!r}: invalid inputSchema: {e.message}") from None
        self._tools[name] = tool
        self._validators[name] = cls(schema)
        self._fast[name] = compile_check(schema)

    def remove(self, name: str) -> None:
        """Withdraw a tool (an upstream server's tools come and go with it)."""
        self._tools.pop(name, None)
        self._validators.pop(name, None)
        self._fast.pop(name, None)

    def discover(self) -> list[str]:
        """Load tools from the ``omp_a2a_bridge.tools`` entry points; a broken one is skipped."""
        loaded = []
        for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
            try:
                obj = ep.load()
                tool = obj() if isinstance(obj, type) else obj
                if not isinstance(tool, Tool):
                    raise TypeError("entry point must be a Tool subclass or instance")
                self.add(tool)
                loaded.append(tool.name)
            except Exception as e:
                log.warning("tool entry point %r skipped: %s", ep.name, e)
        return loaded

    def all(self) -> list[Tool]:
        return list(self._tools.values())

    def withheld(self, name: str) -> bool:
        if name in self.deny or (self.deny_mcp_tools and name.startswith("mcp__")):
            return True
        return bool(self._deny_prefixes) and name.startswith(self._deny_prefixes)

    def get(self, name: str) -> Tool | None:
        """The registered, not-denied tool called ``name`` (tier ``deny`` is the caller's job)."""
        if self.withheld(name):
            return None
        return self._tools.get(name)

    def validate(self, name: str, args: dict[str, Any]) -> str | None:
        """None when ``args`` fit the schema, else a text naming the bad field."""
        fast = self._fast[name]
        if fast is not None and fast(args):
            return None
        error = best_match(self._validators[name].iter_errors(args))
        if error is None:
            return None
        where = ".".join(str(p) for p in error.absolute_path)
        if error.validator == "required" and not where:
            return f"invalid arguments for '{name}': {error.message}"
        if where:
            return f"invalid arguments for '{name}': field '{where}': {error.message}"
        return f"invalid arguments for '{name}': {error.message}"

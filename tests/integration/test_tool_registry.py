"""The tool registry: names, schemas compiled once, deny rules, entry-point discovery."""

from __future__ import annotations

import sys
import textwrap
from typing import Any

import pytest

from omp_a2a_bridge.server.tools import Tool, ToolContext, ToolResult
from omp_a2a_bridge.server.tools.registry import ToolRegistry


class Echo(Tool):
    name = "echo"
    description = "Echo the text back."
    input_schema = {
        "type": "object",
        "properties": {"text": {"type": "string", "description": "What to echo."}},
        "required": ["text"],
        "additionalProperties": False,
    }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult.text(args["text"])


def test_names_and_schemas_are_checked_once_at_registration():
    reg = ToolRegistry()
    reg.add(Echo())
    with pytest.raises(ValueError, match="already registered"):
        reg.add(Echo())

    class BadName(Echo):
        name = "Bad.Name"

    class BadSchema(Echo):
        name = "bad_schema"
        input_schema = {"type": "object", "properties": {"x": {"type": 5}}}

    class NotObject(Echo):
        name = "not_object"
        input_schema = {"type": "string"}

    for cls in (BadName, BadSchema, NotObject):
        with pytest.raises(ValueError):
            reg.add(cls())
    assert reg.validate("echo", {"text": "hi"}) is None
    assert reg.validate("echo", {"text": 1}) == (
        "invalid arguments for 'echo': field 'text': 1 is not of type 'string'"
    )


def test_deny_and_mcp_prefix():
    class Upstream(Echo):
        name = "mcp__git__status"

    reg = ToolRegistry(deny=frozenset({"echo"}), deny_mcp_tools=True)
    reg.add(Echo())
    reg.add(Upstream())
    assert reg.get("echo") is None and reg.get("mcp__git__status") is None
    reg2 = ToolRegistry()
    reg2.add(Upstream())
    assert reg2.get("mcp__git__status") is not None


def test_entry_point_discovery(tmp_path, monkeypatch, start_bridge):
    pkg = tmp_path / "a2a_extra_tools.py"
    pkg.write_text(
        textwrap.dedent(
            """
            from omp_a2a_bridge.server.tools import Tool, ToolResult

            class Shout(Tool):
                name = "shout"
                description = "Upper-case the text."
                input_schema = {
                    "type": "object",
                    "properties": {"text": {"type": "string", "description": "Text."}},
                    "required": ["text"],
                    "additionalProperties": False,
                }
                default_tier = "allow"

                async def run(self, args, ctx):
                    return ToolResult.text(args["text"].upper())

            broken = 42
            """
        )
    )
    dist = tmp_path / "a2a_extra_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: a2a-extra-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[omp_a2a_bridge.tools]\nshout = a2a_extra_tools:Shout\nbroken = a2a_extra_tools:broken\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    running = start_bridge(discover_tools=True)
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert "shout" in names and "broken" not in names
    assert c.call("shout", {"text": "hi"}).text == "HI"
    sys.modules.pop("a2a_extra_tools", None)

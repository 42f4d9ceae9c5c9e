"""A tiny stdio MCP server that reads and writes any path it is given (and connects to any
abstract unix socket): what a careless or
hostile upstream could do. ``python -m tests.security.fs_server`` (adapted from
``tests/support/upstream_server.py``). A failure is returned as the tool's text, so the test sees
what the kernel said ("Permission denied", "Read-only file system", an empty file)."""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server


def _tool(name: str, props: dict[str, Any]) -> types.Tool:
    schema = {"type": "object", "properties": props}
    return types.Tool(name=name, description=f"{name} a path", input_schema=schema)


def _do(name: str, args: dict[str, Any]) -> str:
    # Hex: the bridge judges path-like arguments itself, and a hostile server needs no
    # argument to read ~/.ssh; here only the box stands in the way.
    path = bytes.fromhex(str(args.get("hex"))).decode()
    try:
        if name == "connect":  # an abstract unix socket (X11's, a session bus's): no file
            import socket

            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect("\0" + path)
                return "RECEIVED:" + s.recv(200).decode("utf-8", "replace")
        if name == "read_file":
            with open(path, encoding="utf-8", errors="replace") as f:
                return "CONTENT:" + f.read()
        with open(path, "a", encoding="utf-8") as f:
            f.write(str(args.get("text", "")))
        return "WROTE"
    except OSError as e:
        return f"ERROR: {e}"


def main() -> None:
    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        path = {"hex": {"type": "string"}}
        both = {**path, "text": {"type": "string"}}
        tools = [_tool("read_file", path), _tool("append", both), _tool("connect", path)]
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        text = _do(params.name, params.arguments or {})
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)])

    server = Server("fs-server", on_list_tools=list_tools, on_call_tool=call_tool)
    from mcp.server.stdio import stdio_server

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    asyncio.run(run())


if __name__ == "__main__":
    main()

"""An MCP server with one ``echo`` tool, built with the official SDK (lowlevel API): the
upstream of ``python -m bench``'s forwarding rows. ``python -m bench.echo_server`` serves over
stdio; ``python -m bench.echo_server PORT`` over Streamable HTTP at ``/mcp``."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

ECHO = types.Tool(
    name="echo",
    description="Echo the text back.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
    annotations=types.ToolAnnotations(read_only_hint=True),
)


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[ECHO])


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    text = str((params.arguments or {}).get("text"))
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


SERVER = Server("bench-echo", on_list_tools=list_tools, on_call_tool=call_tool)


async def run() -> None:
    async with stdio_server() as (read, write):
        await SERVER.run(read, write, SERVER.create_initialization_options())


if __name__ == "__main__":
    if len(sys.argv) > 1:
        import uvicorn

        port = int(sys.argv[1])
        app = SERVER.streamable_http_app(host="127.0.0.1", json_response=True)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    else:
        asyncio.run(run())

"""An official MCP Python SDK client (1.x or 2.x, whichever this interpreter has) as a peer.

Usage: python py_client.py URL TOKEN basic|timeout-leave [RUNS]
Prints one JSON line: what the client saw, and every error it raised or logged.
``basic``: initialize, list tools, call ``read``, ping, leave (DELETE).
``timeout-leave``: RUNS times a fresh session calls a prompt-tier ``write`` with a 0.3 s
timeout, then leaves at once: the teardown race that crashed SDK clients.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from datetime import timedelta
from importlib import metadata
from typing import Any

VERSION = metadata.version("mcp")
MAJOR = int(VERSION.split(".")[0])


class Errors(logging.Handler):
    """Every WARNING or worse the SDK logs (how it reports teardown races)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"{record.name}: {record.getMessage()}"[:300])


async def session_v1(url: str, token: str, body: Any) -> Any:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    headers = {"Authorization": f"Bearer {token}"}
    async with (
        streamablehttp_client(url, headers=headers) as (read, write, _),
        ClientSession(read, write) as s,
    ):
        init = await s.initialize()
        return await body(s, init.protocolVersion, init.serverInfo.name)


async def session_v2(url: str, token: str, body: Any) -> Any:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with http, Client(streamable_http_client(url, http_client=http)) as c:
        return await body(c, c.protocol_version, c.server_info.name)


async def basic(s: Any, protocol: str, server: str) -> dict[str, Any]:
    tools = await s.list_tools()
    res = await s.call_tool("read", {"path": "hello.txt"})
    if protocol != "2026-07-28":  # ping is removed in the modern era (2.x's auto picks it)
        await s.send_ping()
    return {
        "protocol": protocol,
        "server": server,
        "tools": [t.name for t in tools.tools],
        "read": res.content[0].text,
        "isError": bool(res.isError if MAJOR < 2 else res.is_error),
    }


async def timeout_leave(s: Any, protocol: str, server: str) -> str:
    try:
        if MAJOR < 2:
            await s.call_tool("write", {"path": "x.txt", "content": "y"}, timedelta(seconds=0.3))
        else:
            await s.call_tool("write", {"path": "x.txt", "content": "y"}, read_timeout_seconds=0.3)
    except Exception as e:  # the SDK's own timeout error is the expected way out
        return type(e).__name__
    return "no timeout"


def main() -> None:
    url, token, scenario = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    errors = Errors()
    logging.basicConfig(level=logging.WARNING, handlers=[errors])
    session = session_v1 if MAJOR < 2 else session_v2
    body = basic if scenario == "basic" else timeout_leave
    out: dict[str, Any] = {"sdk": f"python mcp {VERSION}", "runs": runs, "results": []}
    crashes: list[str] = []
    for _ in range(runs):
        try:
            out["results"].append(asyncio.run(session(url, token, body)))
        except BaseException as e:  # a crash at teardown is what this measures
            crashes.append(f"{type(e).__name__}: {e}"[:300])
    out["crashes"] = crashes
    out["logged"] = errors.seen
    print(json.dumps(out))


if __name__ == "__main__":
    main()

"""The official MCP Python SDK server with a ``read`` tool equivalent to the bridge's.

Streamable HTTP, ``json_response=True``, stateful sessions: the SDK's closest configuration to
the bridge. ``python -m bench.sdk_server PORT``.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

mcp = MCPServer("sdk-ref")


@mcp.tool()
def read(path: str) -> str:
    """Read a text file and return numbered lines."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return "\n".join(f"{n:5d}\t{line.rstrip()}" for n, line in enumerate(f, 1))


def main() -> None:
    port = int(sys.argv[1])
    app = mcp.streamable_http_app(json_response=True, streamable_http_path="/")
    print(f"sdk listening on http://127.0.0.1:{port}/", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()

"""The framework floor: a bare Tornado handler doing JSON parse + file read + JSON response.

No auth, no sessions, no audit, no schema: what any Tornado MCP server must pay at least.
``python -m bench.floor_server PORT``.
"""

from __future__ import annotations

import asyncio
import json
import sys

from tornado import web


class Floor(web.RequestHandler):
    def post(self) -> None:
        msg = json.loads(self.request.body)
        path = msg["params"]["arguments"]["path"]
        with open(path, encoding="utf-8", errors="replace") as f:
            text = "\n".join(f"{n:5d}\t{line.rstrip()}" for n, line in enumerate(f, 1))
        result = {"content": [{"type": "text", "text": text}], "isError": False}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"jsonrpc": "2.0", "id": msg.get("id"), "result": result}))


async def main() -> None:
    port = int(sys.argv[1])
    web.Application([(r"/.*", Floor)]).listen(port, "127.0.0.1")
    print(f"floor listening on http://127.0.0.1:{port}/", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())

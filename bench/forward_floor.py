"""The forwarding floor: a bare Tornado handler in front of a running stdio MCP server.

What any MCP forwarder must pay at least for one ``tools/call``: the client's HTTP request
parsed, the call written as one line to the server's stdin, its reply line read from the
server's stdout and sent back as the HTTP response. No auth, no session, no judge, no audit, no
schema, no second JSON-RPC layer: the upstream rows' floor, as ``bench/floor_server.py`` is the
plain calls' floor. The server (``bench.echo_server`` over stdio) is started and initialized once;
the client's own ``initialize`` is answered from the server's reply to ours, its notifications
are accepted and dropped, and every other request is forwarded with its id renumbered (so
concurrent clients cannot collide) and restored in the answer.

``python -m bench.forward_floor PORT``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from tornado import web

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Upstream:
    """The stdio server: one writer, one reader task matching replies to waiters by id."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.waiters: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.last = 0
        self.init_result: dict[str, Any] = {}

    async def read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            msg = json.loads(line)
            fut = self.waiters.pop(msg.get("id"), None) if "method" not in msg else None
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.last += 1
        rid = self.last
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.waiters[rid] = fut
        line = json.dumps({**msg, "id": rid}, separators=(",", ":")).encode() + b"\n"
        self.proc.stdin.write(line)
        return await fut

    def notify(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")


class Forward(web.RequestHandler):
    def initialize(self, up: Upstream) -> None:
        self.up = up

    def get(self) -> None:
        self.set_status(405)  # no server-to-client stream

    async def post(self) -> None:
        msg = json.loads(self.request.body)
        if "id" not in msg:  # a notification: accepted, not forwarded
            self.set_status(202)
            return
        if msg.get("method") == "initialize":
            reply: dict[str, Any] = {"jsonrpc": "2.0", "result": self.up.init_result}
        else:
            reply = await self.up.request(msg)
        reply["id"] = msg["id"]
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(reply, separators=(",", ":")))


async def main() -> None:
    port = int(sys.argv[1])
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.echo_server",
        cwd=ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        limit=32 * 1024 * 1024,
    )
    up = Upstream(proc)
    reader = asyncio.create_task(up.read())
    init = await up.request(
        {
            "jsonrpc": "2.0",
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "forward-floor", "version": "0"},
            },
        }
    )
    up.init_result = init["result"]
    up.notify({"jsonrpc": "2.0", "method": "notifications/initialized"})
    web.Application([(r"/.*", Forward, {"up": up})]).listen(port, "127.0.0.1")
    print(f"forward floor on http://127.0.0.1:{port}/ (server pid {proc.pid})", flush=True)
    try:
        await asyncio.Event().wait()
    finally:
        reader.cancel()
        proc.terminate()


if __name__ == "__main__":
    asyncio.run(main())

"""The official MCP Python SDK client (mcp 2.x) as a real peer, in both connect modes."""

from __future__ import annotations

import asyncio
import time

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from ..support.helpers import TOKEN, in_thread, wait_for


async def _session(url: str, mode: str, body):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(10.0, read=30.0)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        return await body(client)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sdk_client_initializes_lists_and_calls(bridge, mode):
    with open(bridge.env["root"] + "/hello.txt", "w") as f:
        f.write("first line\nsecond\n")

    async def body(client):
        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        res = await client.call_tool("read", {"path": "hello.txt"})
        bad = await client.call_tool("nope", {})
        if mode == "legacy":
            await client.send_ping()  # removed in 2026-07-28, which "auto" picks (§ 9)
        return names, res, bad, client.server_info

    names, res, bad, info = asyncio.run(_session(bridge.runner.url, mode, body))
    assert names == ["read", "ls", "find", "grep", "write", "edit", "bash"]
    assert res.is_error is False
    assert res.content[0].text == "    1\tfirst line\n    2\tsecond"
    assert (
        bad.is_error is True and bad.content[0].text == "tool 'nope' is not exposed by this bridge"
    )
    assert info.name == "omp-a2a-bridge"
    # The SDK deletes its session on exit.
    assert bridge.runner.snapshot().sessions == ()


def test_sdk_client_timeout_cancels_a_pending_approval(start_bridge):
    running = start_bridge()
    running.runner.attach_approver("slow human")

    async def body(client):
        t0 = time.monotonic()
        try:
            await client.call_tool(
                "write", {"path": "x.txt", "content": "y"}, read_timeout_seconds=0.5
            )
        except Exception as e:  # the SDK raises MCPError -32001 on its own timeout
            return type(e).__name__, time.monotonic() - t0
        return "no timeout", 0

    async def run():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
        async with (
            http,
            Client(
                streamable_http_client(running.runner.url, http_client=http), mode="legacy"
            ) as client,
        ):
            outcome = await body(client)
            await client.send_ping()  # the session survives the cancelled call
            return outcome

    t, out = in_thread(asyncio.run, run())
    t.join(30)
    name, took = out[0]
    assert name == "MCPError" and took < 5
    # The client sent notifications/cancelled: the approval is withdrawn and audited.
    wait_for(lambda: running.runner.snapshot().pending == (), timeout=30)
    done = wait_for(lambda: [r for r in running.audit() if r["phase"] == "done"])
    assert done and done[0]["outcome"] == "cancelled"

"""Both MCP eras on one endpoint (protocol § 9): every 2026-07-28 row over raw HTTP, and the
official SDK client pinned to the modern era and in ``auto`` mode as real peers."""

from __future__ import annotations

import asyncio
import base64
import json
import os
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from omp_a2a_bridge.server.core.approvals import Decision

from ..support.helpers import TOKEN, Http, Response, in_thread, wait_for

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "modern-client", "version": "9.1"},
}
SERVER_INFO = "io.modelcontextprotocol/serverInfo"


def modern(
    running,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    headers: dict[str, str] | None = None,
    meta: dict[str, Any] | None = META,
    req_id: Any = 1,
    http_method: str = "POST",
) -> Response:
    """One self-contained modern request: version header, routing headers and ``_meta``."""
    p = dict(params or {})
    if meta is not None:
        p["_meta"] = meta
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": p}
    if req_id is not None:
        msg["id"] = req_id
    h = {"MCP-Protocol-Version": V, "Mcp-Method": method}
    if method == "tools/call" and "name" in p:
        h["Mcp-Name"] = p["name"]
    h.update(headers or {})
    return Http(running.port).request(http_method, body=msg, headers=h)


def test_discover_answers_without_a_session(bridge):
    r = modern(bridge, "server/discover")
    assert r.status == 200, r
    res = r.result
    assert res["resultType"] == "complete"
    assert V in res["supportedVersions"]
    assert res["capabilities"] == {"tools": {}}
    assert res["_meta"][SERVER_INFO]["name"] == "omp-a2a-bridge"
    assert res["cacheScope"] == "private" and res["ttlMs"] > 0
    assert "mcp-session-id" not in r.headers
    assert bridge.runner.snapshot().sessions == ()


def test_tools_list_is_deterministic_and_cacheable(bridge):
    a = modern(bridge, "tools/list")
    b = modern(bridge, "tools/list", req_id=2)
    assert a.status == b.status == 200
    assert a.result == b.result
    assert [t["name"] for t in a.result["tools"]] == [
        "read", "ls", "find", "grep", "write", "edit", "bash"
    ]  # fmt: skip
    assert a.result["cacheScope"] == "private" and a.result["resultType"] == "complete"
    assert a.result["_meta"][SERVER_INFO]["name"] == "omp-a2a-bridge"


def test_tools_call_runs_through_the_pipeline_and_is_audited(bridge):
    with open(bridge.env["root"] + "/hello.txt", "w") as f:
        f.write("hi\n")
    r = modern(bridge, "tools/call", {"name": "read", "arguments": {"path": "hello.txt"}})
    assert r.status == 200, r
    assert r.result["content"][0]["text"].endswith("hi")
    assert r.result["isError"] is False
    assert r.result["resultType"] == "complete"
    assert r.result["_meta"][SERVER_INFO]["name"] == "omp-a2a-bridge"
    done = [x for x in bridge.audit() if x["phase"] == "done"]
    assert done[-1]["era"] == V and done[-1]["client"] == "modern-client"
    assert done[-1]["outcome"] == "ok"
    # No session was created, and none is needed for the next request.
    assert bridge.runner.snapshot().sessions == ()


def test_unknown_tool_is_an_iserror_result_not_a_protocol_error(bridge):
    r = modern(bridge, "tools/call", {"name": "nope", "arguments": {}})
    assert r.status == 200 and r.result["isError"] is True
    assert r.result["content"][0]["text"] == "tool 'nope' is not exposed by this bridge"


@pytest.mark.parametrize(
    ("kw", "status", "code"),
    [
        (
            {
                "headers": {"MCP-Protocol-Version": "2099-01-01"},
                "meta": {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"},
            },
            400,
            -32022,
        ),
        ({"headers": {"Mcp-Method": "tools/call"}}, 400, -32020),
        ({"headers": {"Mcp-Method": ""}}, 400, -32020),
        ({"meta": None}, 400, -32602),
        ({"meta": {"io.modelcontextprotocol/protocolVersion": V}}, 400, -32602),
        (
            {"meta": {**META, "io.modelcontextprotocol/protocolVersion": "2026-01-01"}},
            400,
            -32020,
        ),
    ],
)
def test_each_error_row_for_tools_list(bridge, kw, status, code):
    r = modern(bridge, "tools/list", **kw)
    assert (r.status, r.error["code"]) == (status, code), r
    assert r.json["id"] == 1


def test_unsupported_version_names_supported_and_requested(bridge):
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    h = {"MCP-Protocol-Version": "2099-01-01"}
    r = modern(bridge, "tools/list", headers=h, meta=meta)
    assert (r.status, r.error["code"]) == (400, -32022)
    assert r.error["data"] == {"supported": [V], "requested": "2099-01-01"}
    # Without the modern envelope it is the 2025 era, whose order of checks is unchanged (no
    # session: refused before the version header is looked at).
    r = modern(bridge, "tools/list", headers=h, meta=None)
    assert (r.status, r.error["message"]) == (400, "missing mcp-session-id")


def test_mcp_name_must_equal_the_body(bridge):
    r = modern(
        bridge, "tools/call", {"name": "read", "arguments": {}}, headers={"Mcp-Name": "bash"}
    )
    assert (r.status, r.error["code"]) == (400, -32020)
    # A base64-sentinel header carrying the same name is the same name.
    sentinel = "=?base64?" + base64.b64encode(b"read").decode() + "?="
    r = modern(
        bridge,
        "tools/call",
        {"name": "read", "arguments": {"path": "nothing-here"}},
        headers={"Mcp-Name": sentinel},
    )
    assert r.status == 200 and r.result["isError"] is True


def test_order_of_checks_version_before_headers_before_meta(bridge):
    # Every later rung is wrong too; the version rung answers first.
    r = modern(
        bridge,
        "tools/list",
        headers={"MCP-Protocol-Version": "2099-01-01", "Mcp-Method": "x"},
        meta={"io.modelcontextprotocol/protocolVersion": "2099-01-01"},
    )
    assert r.error["code"] == -32022
    r = modern(bridge, "tools/list", headers={"Mcp-Method": "x"}, meta=None)
    assert r.error["code"] == -32020


def test_unknown_and_removed_methods_are_404(bridge):
    for method in ("resources/list", "ping", "tasks/list"):
        r = modern(bridge, method)
        assert (r.status, r.error["code"]) == (404, -32601), (method, r)


def test_notifications_are_acknowledged(bridge):
    r = modern(bridge, "notifications/cancelled", {"requestId": 1}, req_id=None)
    assert (r.status, r.raw) == (202, b"")


def test_get_and_delete_are_405_and_checked_before_auth(bridge):
    h = {"MCP-Protocol-Version": V}
    for method in ("GET", "DELETE"):
        r = Http(bridge.port, token=None).request(method, headers=h)
        assert r.status == 405 and r.headers["Allow"] == "POST", (method, r)


def test_wrong_token_is_401_before_any_modern_check(bridge):
    r = Http(bridge.port, token="wrong").request(
        body={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"MCP-Protocol-Version": "2099-01-01"},
    )
    assert r.status == 401


def test_parse_errors_come_before_the_version(bridge):
    r = Http(bridge.port).request(body=b"{not json", headers={"MCP-Protocol-Version": V})
    assert (r.status, r.error["code"]) == (400, -32700)


def test_session_headers_on_a_modern_request_are_ignored(bridge):
    r = modern(bridge, "tools/list", headers={"Mcp-Session-Id": "f" * 32, "Last-Event-ID": "3"})
    assert r.status == 200, r


def test_the_2025_era_is_unchanged_on_the_same_endpoint(bridge):
    c = bridge.client()
    assert c.rpc("ping").status == 200
    assert c.rpc("tools/list").result["tools"][0]["name"] == "read"
    r = c.rpc("ping", headers={"MCP-Protocol-Version": "2025-06-18"})
    assert r.status == 200
    # initialize under a header the 2025 era does not know: that era's rule, unchanged.
    r = Http(bridge.port).request(
        body={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}},
        headers={"MCP-Protocol-Version": "1999-01-01"},
    )
    assert (r.status, r.error["code"]) == (400, -32600)
    # Under the modern header it is a removed method (the conformance suite's rule).
    r = modern(bridge, "initialize")
    assert (r.status, r.error["code"]) == (404, -32601)
    assert len(bridge.runner.snapshot().sessions) == 1  # only the session made above


def test_a_waiting_call_holds_its_request_until_approved(start_bridge):
    running = start_bridge()  # write is prompt-tier
    running.runner.attach_approver("test human")
    t, out = in_thread(
        modern,
        running,
        "tools/call",
        {"name": "write", "arguments": {"path": "m.txt", "content": "x"}},
    )
    (p,) = running.pending()
    assert p.client == "modern-client"
    running.runner.decide(p.id, Decision.APPROVE)
    t.join(60)
    r = out[0]
    assert r.status == 200 and r.result["isError"] is False, r
    assert r.result["resultType"] == "complete"
    with open(running.env["root"] + "/m.txt") as f:
        assert f.read() == "x"


# -- the official SDK client as a peer -------------------------------------------------------


async def _sdk(url: str, mode: str, body):
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(10.0, read=30.0)
    )
    async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
        return await body(client)


@pytest.mark.parametrize("mode", [V, "auto"])
def test_sdk_client_in_the_modern_era_lists_and_calls(bridge, mode):
    with open(bridge.env["root"] + "/hello.txt", "w") as f:
        f.write("first line\n")

    async def body(client):
        tools = await client.list_tools()
        res = await client.call_tool("read", {"path": "hello.txt"})
        return [t.name for t in tools.tools], res

    names, res = asyncio.run(_sdk(bridge.runner.url, mode, body))
    assert names[0] == "read" and "bash" in names
    assert res.is_error is False and res.content[0].text.endswith("first line")
    done = [x for x in bridge.audit() if x["phase"] == "done"]
    assert done[-1]["era"] == V  # auto picked the modern era
    assert bridge.runner.snapshot().sessions == ()


def test_sdk_modern_call_waits_for_an_approval_from_the_control_api(start_bridge):
    from omp_a2a_bridge.server.control.client import ControlClient

    running = start_bridge(control=True)
    running.runner.attach_approver("test human")

    async def body(client):
        return await client.call_tool("write", {"path": "sdk.txt", "content": "ok"})

    t, out = in_thread(asyncio.run, _sdk(running.runner.url, V, body))
    (p,) = running.pending()
    control = ControlClient(running.runner.control)
    control.decide(p.id, Decision.APPROVE)
    t.join(60)
    res = out[0]
    assert not isinstance(res, BaseException), res
    assert res.is_error is False
    wait_for(lambda: any(x.get("decided_by") == "user" for x in running.audit()))
    rec = [x for x in running.audit() if x["phase"] == "done"][-1]
    assert (rec["era"], rec["outcome"]) == (V, "ok")
    assert json.dumps(rec).count("sdk.txt") >= 1


# -- tasks for long approvals (the Tasks extension) ------------------------------------------

TASKS_META = {
    **META,
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}


def test_a_waiting_call_becomes_a_task_polled_then_approved(start_bridge):
    running = start_bridge()  # write is prompt-tier
    running.runner.attach_approver("test human")
    args = {"path": "t.txt", "content": "from a task"}
    r = modern(running, "tools/call", {"name": "write", "arguments": args}, meta=TASKS_META)
    assert r.status == 200, r
    task = r.result
    assert task["resultType"] == "task" and task["status"] == "working"
    assert task["pollIntervalMs"] > 0 and task["ttlMs"] > 0
    assert task["createdAt"].endswith("Z") and task["lastUpdatedAt"].endswith("Z")
    # The Mcp-Name header, when sent on tasks/*, must name the same task.
    wrong = modern(
        running, "tasks/get", {"taskId": task["taskId"]}, meta=TASKS_META,
        headers={"Mcp-Name": "someone-else"},
    )  # fmt: skip
    assert (wrong.status, wrong.error["code"]) == (400, -32020)
    (p,) = running.pending()  # the approval waits while the request has ended
    polled = modern(running, "tasks/get", {"taskId": task["taskId"]}, meta=TASKS_META)
    assert polled.result["status"] == "working"
    # tasks/result holds until the human decides; the decision completes the task.
    poll = {"taskId": task["taskId"]}
    t, out = in_thread(lambda: modern(running, "tasks/result", poll, meta=TASKS_META))
    running.runner.decide(p.id, Decision.APPROVE)
    t.join(60)
    assert out[0].status == 200 and out[0].result["isError"] is False, out[0]
    assert out[0].result["resultType"] == "complete"
    done = modern(running, "tasks/get", {"taskId": task["taskId"]}, meta=TASKS_META)
    assert done.result["status"] == "completed"
    assert done.result["result"]["isError"] is False
    with open(running.env["root"] + "/t.txt") as f:
        assert f.read() == "from a task"
    rec = [x for x in running.audit() if x["phase"] == "done"][-1]
    assert (rec["era"], rec["decided_by"], rec["outcome"]) == (V, "user", "ok")


def test_tasks_cancel_withdraws_the_approval_and_is_audited(start_bridge):
    running = start_bridge()
    running.runner.attach_approver("test human")
    args = {"path": "never.txt", "content": "x"}
    r = modern(running, "tools/call", {"name": "write", "arguments": args}, meta=TASKS_META)
    task_id = r.result["taskId"]
    running.pending()
    c = modern(running, "tasks/cancel", {"taskId": task_id}, meta=TASKS_META)
    assert c.status == 200, c
    wait_for(lambda: running.runner.snapshot().pending == ())
    got = wait_for(
        lambda: (
            (g := modern(running, "tasks/get", {"taskId": task_id}, meta=TASKS_META)).result[
                "status"
            ]
            != "working"
            and g
        )
    )
    assert got.result["status"] == "cancelled"
    assert not os.path.exists(running.env["root"] + "/never.txt")
    rec = wait_for(lambda: [x for x in running.audit() if x["phase"] == "done"])[-1]
    assert rec["outcome"] == "cancelled"


def test_tasks_only_for_clients_that_declare_them(start_bridge):
    running = start_bridge({"approval": {"tiers": {"read": "allow"}}})
    # A call that needs no human answers at once, even for a tasks client.
    r = modern(running, "tools/call", {"name": "ls", "arguments": {"path": "."}}, meta=TASKS_META)
    assert r.result["resultType"] == "complete"
    # tasks/* without the declaration is an unknown method; an unknown task is a client mistake.
    assert modern(running, "tasks/get", {"taskId": "x"}).status == 404
    r = modern(running, "tasks/get", {"taskId": "nope"}, meta=TASKS_META)
    assert (r.status, r.error["code"]) == (400, -32602)

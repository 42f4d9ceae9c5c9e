"""The wire protocol over real HTTP: every row of the error table and the order of checks."""

from __future__ import annotations

import json
import re
import socket
import sys
import time

import pytest

from omp_a2a_bridge.server.mcp.protocol import UNAUTHORIZED_HINT

from ..support.helpers import TOKEN, Http, Mcp, assert_nagle_off


@pytest.fixture
def running(start_bridge):
    return start_bridge()


def test_initialize_issues_session_and_fixed_version(running):
    c = Mcp(running.port)
    r = c.request(
        body={
            "jsonrpc": "2.0",
            "id": 7,
            "method": "initialize",
            "params": {
                "protocolVersion": "1999-01-01",
                "clientInfo": {"name": "x", "version": "2"},
            },
        }
    )
    assert r.status == 200
    assert r.headers["Content-Type"] == "application/json"
    assert re.fullmatch(r"[0-9a-f]{32}", r.headers["mcp-session-id"])
    assert r.json == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "omp-a2a-bridge", "version": r.result["serverInfo"]["version"]},
        },
    }
    # Each initialize mints a new session, even on a connection that already has one.
    sid1 = r.headers["mcp-session-id"]
    r2 = c.request(
        body={"jsonrpc": "2.0", "id": 8, "method": "initialize"},
        headers={"mcp-session-id": sid1},
    )
    assert r2.headers["mcp-session-id"] != sid1
    names = {s.client for s in running.runner.snapshot().sessions}
    assert names == {"x", "unknown"}


@pytest.mark.parametrize(
    "auth",
    [None, "Bearer wrong-token", f"Basic {TOKEN}", "Bearer", "Bearer ", f"Bearer {TOKEN}x", TOKEN],
)
def test_unauthorized(running, auth):
    h = Http(running.port, token=None)
    headers = {"Authorization": auth} if auth is not None else {}
    r = h.request(body={"jsonrpc": "2.0", "id": 1, "method": "initialize"}, headers=headers)
    assert r.status == 401
    assert r.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32000, "message": "unauthorized", "data": UNAUTHORIZED_HINT},
    }
    assert "WWW-Authenticate" not in r.headers
    assert len(running.runner.snapshot().sessions) == 0


def test_bearer_scheme_case_insensitive_and_multiple_spaces(running):
    h = Http(running.port, token=None)
    for auth in (f"bearer {TOKEN}", f"BEARER   {TOKEN}"):
        r = h.request(
            body={"jsonrpc": "2.0", "id": 1, "method": "initialize"},
            headers={"Authorization": auth},
        )
        assert r.status == 200, auth


def test_unauthorized_is_counted_and_warned_without_token(running, log_records):
    h = Http(running.port, token="nope-" + "x" * 40)
    for _ in range(3):
        assert h.request(body={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status == 401
    msgs = [r.getMessage() for r in log_records.records]
    assert "1 unauthorized attempt(s) - check the token in the client's config" in msgs
    assert running.runner.bridge.unauthorized == 3
    assert all(TOKEN not in m and "nope-" not in m for m in msgs)


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({"Origin": "http://evil.example.com"}, "forbidden origin"),
        ({"Origin": "null"}, "forbidden origin"),
        ({"Origin": "http://localhost.evil.com:80"}, "forbidden origin"),
        ({"Host": "evil.example.com"}, "forbidden host"),
        ({"Host": "evil.example.com:8080"}, "forbidden host"),
    ],
)
def test_dns_rebinding_guard(running, headers, message):
    h = Http(running.port)
    r = h.request(body={"jsonrpc": "2.0", "id": 1, "method": "initialize"}, headers=headers)
    assert r.status == 403
    assert r.error == {"code": -32000, "message": message}


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://localhost:5173"},
        {"Origin": "https://127.0.0.1"},
        {"Origin": "http://[::1]:9"},
        {"Host": "localhost:1234"},
        {"Host": "[::1]:1234"},
        {"Host": "127.0.0.1"},
    ],
)
def test_loopback_host_and_origin_pass(running, headers):
    r = Http(running.port).request(
        body={"jsonrpc": "2.0", "id": 1, "method": "initialize"}, headers=headers
    )
    assert r.status == 200


def test_allowed_origins_from_config(start_bridge):
    running = start_bridge({"allowed_origins": ["https://tools.example.com/"]})
    r = Http(running.port).request(
        body={"jsonrpc": "2.0", "id": 1, "method": "initialize"},
        headers={"Origin": "https://tools.example.com"},
    )
    assert r.status == 200


def test_order_forbidden_origin_before_auth_and_405_before_everything(running):
    h = Http(running.port, token=None)
    r = h.request(body=b"{}", headers={"Origin": "http://evil.example"})
    assert r.status == 403
    r = h.request("GET", headers={"Origin": "http://evil.example"})
    assert r.status == 405


def test_no_token_and_no_session_is_401(running):
    r = Http(running.port, token=None).request(body={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status == 401


@pytest.mark.parametrize("body", [b"", b"{", b"not json", b"\xff\xfe", b'{"a":1}x'])
def test_parse_error(running, body):
    r = Http(running.port).request(body=body)
    assert r.status == 400
    assert r.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error"},
    }


@pytest.mark.parametrize(
    "msg",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
        "just a string",
        42,
        None,
        {"id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": 2.0, "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1},
    ],
)
def test_invalid_request(running, msg):
    r = Http(running.port).request(body=json.dumps(msg))
    assert r.status == 400
    assert r.error == {"code": -32600, "message": "invalid request"}


def test_missing_and_unknown_session(running):
    c = Mcp(running.port)
    r = c.rpc("ping")
    assert (r.status, r.error) == (400, {"code": -32000, "message": "missing mcp-session-id"})
    # Notifications are subject to the session rule too.
    r = c.rpc("notifications/initialized", req_id=None)
    assert (r.status, r.error["message"]) == (400, "missing mcp-session-id")
    c.sid = "f" * 32
    r = c.rpc("ping")
    assert (r.status, r.error) == (404, {"code": -32000, "message": "unknown session"})
    c.sid = ""
    r = c.rpc("ping", headers={"mcp-session-id": ""})
    assert r.status == 404


def test_protocol_version_header(running):
    c = running.client()
    for v in ("2025-11-25", "2025-06-18", "2025-03-26"):
        assert c.rpc("ping", headers={"MCP-Protocol-Version": v}).status == 200
    r = c.rpc("ping", headers={"MCP-Protocol-Version": "1999-01-01"})
    assert (r.status, r.error) == (400, {"code": -32600, "message": "unsupported protocol version"})
    assert r.json["id"] is not None
    # The 2026-07-28 header is the modern era (§ 9, tests/integration/test_modern_era.py): its own
    # checks, and a request without its routing headers is told so.
    r = c.rpc("ping", headers={"MCP-Protocol-Version": "2026-07-28"})
    assert (r.status, r.error["code"]) == (400, -32020)


def test_server_discover_probe_is_answered_in_the_modern_era(running):
    """Newer clients probe first with no session and a 2026 version header: the bridge serves
    that era too (§ 9), without creating a session."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    r = Http(running.port).request(
        body={"jsonrpc": "2.0", "id": 0, "method": "server/discover", "params": {"_meta": meta}},
        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"},
    )
    assert r.status == 200 and "2026-07-28" in r.result["supportedVersions"]
    assert len(running.runner.snapshot().sessions) == 0


def test_notifications_are_202_even_with_id(running):
    c = running.client()
    r = c.rpc("notifications/initialized", req_id=None)
    assert (r.status, r.raw) == (202, b"")
    r = c.rpc("notifications/whatever", req_id=5)
    assert (r.status, r.raw) == (202, b"")


def test_ping_and_unknown_method(running):
    c = running.client()
    r = c.rpc("ping", req_id="abc")
    assert r.json == {"jsonrpc": "2.0", "id": "abc", "result": {}}
    r = c.rpc("resources/list")
    assert r.status == 200
    assert r.error == {"code": -32601, "message": "method not found"}
    r = c.rpc("ping", req_id=None)  # no id and not a notification: still answered, id null
    assert r.json == {"jsonrpc": "2.0", "id": None, "result": {}}


@pytest.mark.parametrize("method", ["GET", "PUT", "PATCH", "OPTIONS", "HEAD"])
def test_other_methods_405(running, method):
    r = Http(running.port, token=None).request(method)
    assert r.status == 405
    assert r.raw == b""
    if method == "GET":
        assert r.headers["Allow"] == "POST, DELETE"
    assert "Access-Control-Allow-Origin" not in r.headers


def test_any_path_is_mcp(running):
    c = Mcp(running.port)
    r = c.request(body={"jsonrpc": "2.0", "id": 1, "method": "initialize"}, path="/mcp/whatever")
    assert r.status == 200


def test_delete_ends_session_idempotently(running):
    c = running.client()
    sid = c.sid
    r = c.request("DELETE", headers={"mcp-session-id": sid})
    assert (r.status, r.raw) == (204, b"")
    assert c.rpc("ping").status == 404
    assert c.request("DELETE", headers={"mcp-session-id": sid}).status == 204
    assert c.request("DELETE").status == 204


def test_unauthenticated_delete_cannot_end_a_session(running):
    c = running.client()
    r = Http(running.port, token="x" * 40).request("DELETE", headers={"mcp-session-id": c.sid})
    assert r.status == 401
    assert c.rpc("ping").status == 200


def test_internal_error_is_generic(running, log_records, monkeypatch):
    c = running.client()

    def boom():
        raise OSError(2, "No such file", "/secret/host/path")

    monkeypatch.setattr(running.runner.bridge, "listing", boom)
    r = c.rpc("tools/list")
    assert r.status == 500
    assert r.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32603, "message": "internal error"},
    }
    assert b"secret" not in r.raw
    logged = "\n".join(log_records.messages)
    assert "internal error" in logged
    # The server keeps working afterwards.
    monkeypatch.undo()
    assert c.rpc("ping").status == 200


def test_body_limit_content_length(running):
    big = b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"' + b"a" * (1024 * 1024) + b'"}}'
    r = Http(running.port).request(body=big)
    assert r.status == 413
    assert r.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": "request body too large"},
    }
    assert r.headers["Connection"] == "close"
    # Exactly at the limit is fine (parse error here, but not 413).
    at_limit = b" " * (1024 * 1024)
    assert Http(running.port).request(body=at_limit).status == 400


def test_body_limit_chunked(running):
    s = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    head = (
        "POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        f"Authorization: Bearer {TOKEN}\r\n\r\n"
    ).encode()
    chunk = b"a" * 65536
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(17)) + b"0\r\n\r\n"
    s.sendall(head + body)
    data = b""
    while True:
        part = s.recv(65536)
        if not part:
            break
        data += part
    assert data.startswith(b"HTTP/1.1 413")
    assert b"request body too large" in data
    s.close()


def _raw_exchange(port: int, requests: list[bytes]) -> list[bytes]:
    """Send raw requests one after another on ONE connection; return each response head+body."""
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    f = s.makefile("rb")
    out = []
    for req in requests:
        s.sendall(req)
        status = f.readline()
        headers = {}
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            k, v = line.decode().split(":", 1)
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get("content-length", "0"))
        out.append(status + f.read(n))
    s.close()
    return out


def test_keep_alive_survives_early_rejects(running):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize"}).encode()

    def req(auth: str | None, extra: str = "") -> bytes:
        a = f"Authorization: Bearer {auth}\r\n" if auth else ""
        return (
            f"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n{a}{extra}\r\n"
        ).encode() + body

    replies = _raw_exchange(
        running.port,
        [
            req(None),
            req("wrong" * 10),
            req(TOKEN, "Origin: http://evil.example\r\n"),
            req(TOKEN),
        ],
    )
    assert replies[0].startswith(b"HTTP/1.1 401")
    assert replies[1].startswith(b"HTTP/1.1 401")
    assert replies[2].startswith(b"HTTP/1.1 403")
    assert replies[3].startswith(b"HTTP/1.1 200")
    assert b'"protocolVersion":"2025-11-25"' in replies[3]


def test_responses_have_no_cors_headers(running):
    c = running.client()
    r = c.rpc("ping", headers={"Origin": "http://localhost:3000"})
    assert not [h for h in r.headers if h.lower().startswith("access-control")]


def test_oversized_body_refused_before_it_is_read(running):
    """Headers alone are enough for the 413: the server does not wait for 100 MB."""
    s = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    s.sendall(
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 104857600\r\n"
        + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
        + b"x" * 1000
    )
    data = s.recv(65536)
    assert data.startswith(b"HTTP/1.1 413")
    assert data.endswith(b'"request body too large"}}')
    s.close()


def test_client_that_sends_the_whole_oversized_body_still_reads_the_413(running):
    """Lingering close: the server drains the body it refused, so a client that writes
    everything before reading gets the 413 instead of a reset (regression: the drain deadline
    was once computed on the wrong clock and expired at once)."""
    big = b'{"x":"' + b"a" * (1024 * 1024 + 10) + b'"}'
    for _ in range(30):
        r = Http(running.port).request(body=big)
        assert r.status == 413


def test_non_loopback_bind_warns_and_skips_only_the_host_check(start_bridge, log_records):
    running = start_bridge({"host": "0.0.0.0"})  # we only ever connect to 127.0.0.1 here
    assert any("not a loopback address" in w for w in running.runner.snapshot().warnings)
    assert any("not a loopback address" in m for m in log_records.messages)
    h = Http(running.port)
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize"}
    assert h.request(body=body, headers={"Host": "desktop.lan:8080"}).status == 200
    r = h.request(body=body, headers={"Origin": "http://evil.example"})
    assert (r.status, r.error["message"]) == (403, "forbidden origin")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_connections_keep_nagle_off_between_responses(running):
    """``TCP_NODELAY`` is set once at accept and stays: Tornado turned it on and off around
    every response (two setsockopt calls per request, ~10% of a small call's GIL time)."""
    c = Mcp(running.port)
    c.initialize()
    for _ in range(3):
        assert c.call("ls", {}).status == 200
        time.sleep(0.1)  # the server has finished the request (Tornado reset Nagle there)
        assert_nagle_off(running.port, "MCP connection")

"""The revised wire rules (issue 17) and strict body parsing (issue 10 item 3).

Version negotiation, the bare 202 for a call the client cancelled, DELETE's 204 before the
session's held calls end, and bodies that are not strict UTF-8 JSON: the pure functions first,
then the same rules over real HTTP against a bridge on port 0.
"""

from __future__ import annotations

import contextlib
import json
import math
import socket
import struct
import sys
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.mcp.protocol import (
    PARSE_ERROR,
    PROTOCOL_VERSION,
    negotiate_version,
    parse_json,
    parse_message,
)

from ..support.helpers import TOKEN, Mcp, in_thread, wait_for

# -- version negotiation: pure -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"protocolVersion": "2025-06-18"}, "2025-06-18"),
        ({"protocolVersion": "2025-03-26"}, "2025-03-26"),
        ({"protocolVersion": "2025-11-25"}, "2025-11-25"),
        ({"protocolVersion": "1999-01-01"}, "2025-11-25"),
        ({"protocolVersion": "2026-07-28"}, "2025-11-25"),
        ({"protocolVersion": "2024-11-05"}, "2025-11-25"),
        ({"protocolVersion": 20250618}, "2025-11-25"),
        ({"protocolVersion": ["2025-06-18"]}, "2025-11-25"),
        ({}, "2025-11-25"),
        (None, "2025-11-25"),
        ("2025-06-18", "2025-11-25"),
    ],
)
def test_negotiate_version(params, expected):
    assert negotiate_version(params) == expected
    assert PROTOCOL_VERSION == "2025-11-25"


# -- strict parsing: pure ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":Infinity,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":-1e999,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{"t":NaN}}}',
        b'{"jsonrpc":"2.0","id":1,"method":"x","params":{"timeout_s":1E400}}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"p":"a\\uDFFFb"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"\\udc80":1}}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":["\\ude00\\ud83d"]}',
        b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"\\ud83d\\u0041"}',
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16-le"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16-be"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-32"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-32-le"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-32-be"),
        b"\xef\xbb\xbf" + b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":"\xff","method":"ping"}',
        b'{"jsonrpc":"2.0","id":"\xed\xa0\x80","method":"ping"}',  # an encoded surrogate
        b'{"jsonrpc":"2.0","id":"\xc0\xaf","method":"ping"}',  # overlong
        '{"jsonrpc":"2.0","id":"é","method":"ping"}'.encode("latin-1"),
        b"",
        b"   ",
    ],
)
def test_parse_refuses_what_is_not_strict_utf8_json(body):
    with pytest.raises(ValueError):
        parse_json(body)
    msg, reject = parse_message(body)
    assert msg is None and reject is not None
    assert (reject.status, reject.code, reject.message, reject.id) == (
        400,
        PARSE_ERROR,
        "parse error",
        None,
    )


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # A valid surrogate pair (what ASCII-only encoders send for an emoji) is one character.
        (b'{"a":"\\ud83d\\ude00"}', {"a": "\U0001f600"}),
        (b'{"a":"\\uD83D\\uDE00 ok"}', {"a": "\U0001f600 ok"}),
        # An escaped backslash followed by "ud800" is plain text, not an escape.
        (b'{"a":"\\\\ud800"}', {"a": "\\ud800"}),
        ('{"a":"é ✓ 😀"}'.encode(), {"a": "é ✓ 😀"}),
        (b'{"a":1e308,"b":-1.5e-300,"c":0.1,"d":12345678901234567890}', None),
        (b' \r\n\t{"a":[]}\n', {"a": []}),
    ],
)
def test_parse_accepts_strict_json(body, expected):
    value = parse_json(body)
    if expected is not None:
        assert value == expected
    else:
        assert all(math.isfinite(v) for v in value.values())
    # Whatever is accepted can be written back as UTF-8 JSON (the property the rules protect).
    json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")


# -- over HTTP ---------------------------------------------------------------------------------


@pytest.fixture
def running(start_bridge):
    return start_bridge()


def _init(c: Mcp, version: object = "absent") -> dict:
    params: dict = {"clientInfo": {"name": "neg", "version": "3"}}
    if version != "absent":
        params["protocolVersion"] = version
    r = c.request(body={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
    assert r.status == 200, r
    c.sid = r.headers["mcp-session-id"]
    return r.result


@pytest.mark.parametrize(
    ("asked", "answered"),
    [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2025-11-25", "2025-11-25"),
        ("1999-01-01", "2025-11-25"),
        ("absent", "2025-11-25"),
        (None, "2025-11-25"),
    ],
)
def test_initialize_negotiates_and_the_session_keeps_it(running, asked, answered):
    c = Mcp(running.port)
    result = _init(c, asked)
    assert result["protocolVersion"] == answered
    assert result["capabilities"] == {"tools": {}}
    [s] = running.runner.snapshot().sessions
    assert (s.client, s.protocol) == ("neg", answered)
    # The same JSON subset is served whatever was negotiated.
    r = c.rpc("tools/list", headers={"MCP-Protocol-Version": answered})
    assert r.status == 200 and isinstance(r.result["tools"], list)


def test_session_json_shows_the_negotiated_version(running):
    from omp_a2a_bridge.server.present.views import session_json

    c = Mcp(running.port)
    _init(c, "2025-06-18")
    [s] = running.runner.snapshot().sessions
    assert session_json(s)["protocol"] == "2025-06-18"


@pytest.mark.parametrize(
    "body",
    [
        b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":1e999,"method":"ping"}',
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read",'
        b'"arguments":{"path":"\\udcff"}}}',
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"\\ud800"}}',
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-16-le"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-32"),
        '{"jsonrpc":"2.0","id":1,"method":"ping"}'.encode("utf-32-be"),
        b'{"jsonrpc":"2.0","id":1,"method":"p\xffing"}',
    ],
)
def test_bad_bodies_are_400_parse_error_never_500_or_invalid_json(start_bridge, body):
    running = start_bridge({"approval": {"tiers": {"read": "allow"}}})
    c = Mcp(running.port)
    _init(c)
    r = c.request(body=body, headers={"mcp-session-id": c.sid or ""})
    assert r.status == 400, r
    assert r.headers["Content-Type"] == "application/json"
    # The body is strict JSON (no NaN/Infinity can come back) and the id is null.
    assert json.loads(r.raw, parse_constant=_refuse) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "parse error"},
    }
    # Nothing was called or audited, and the connection still works.
    assert running.audit() == []
    assert c.rpc("ping").result == {}


def _refuse(name: str) -> None:
    raise AssertionError(f"{name} in a response")


def test_emoji_as_a_surrogate_pair_still_works(bridge):
    with open(bridge.env["root"] + "/\U0001f600.txt", "w") as f:
        f.write("smile\n")
    c = bridge.client()
    body = (
        b'{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"read",'
        b'"arguments":{"path":"\\ud83d\\ude00.txt"}}}'
    )
    r = c.request(body=body, headers={"mcp-session-id": c.sid or ""})
    assert r.status == 200 and r.result["isError"] is False
    assert "smile" in r.text


# -- the cancelled call's reply --------------------------------------------------------------


def test_cancelled_call_gets_bare_202_other_endings_keep_their_answer(start_bridge):
    running = start_bridge({"approval": {"timeout_s": 30}})
    running.runner.attach_approver("human")
    c = running.client()
    args = {"path": running.env["root"] + "/x.txt", "content": "y"}
    t, out = in_thread(c.call, "write", args, "call-1")
    running.pending()
    other = Mcp(running.port)
    other.sid = c.sid
    r = other.rpc("notifications/cancelled", {"requestId": "call-1"}, req_id=None)
    assert (r.status, r.raw) == (202, b"")
    t.join(60)
    assert (out[0].status, out[0].raw) == (202, b"")
    # A cancel naming nothing (or an already finished call) changes nothing.
    assert other.rpc("notifications/cancelled", {"requestId": "call-1"}, req_id=None).status == 202
    wait_for(lambda: running.runner.snapshot().pending == ())
    # A call ended by the tray (not cancelled by the client) still gets an answer.
    c2 = running.client()
    t2, out2 = in_thread(c2.call, "write", args, 9)
    running.pending()
    assert running.runner.end_session(c2.sid)
    t2.join(60)
    assert out2[0].status == 200 and out2[0].json["id"] == 9
    assert out2[0].result["isError"] is True
    done = wait_for(
        lambda: len(d := [r["outcome"] for r in running.audit() if r["phase"] == "done"]) == 2 and d
    )
    assert done == ["cancelled", "cancelled"]


# -- DELETE ends held calls --------------------------------------------------------------------


# Python does not name it; 35 is SO_TIMESTAMPNS on every Linux architecture but a few.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)


def _timestamped_socket(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.settimeout(10)
    return s


def _arrival(s: socket.socket) -> tuple[bytes, float]:
    """The first bytes of a response and the kernel's receive time of them (not the reader's)."""
    data, anc, _, _ = s.recvmsg(65536, socket.CMSG_SPACE(16))
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", raw[:16])
            return data, sec + nsec / 1e9
    raise AssertionError("no receive timestamp")


@contextlib.contextmanager
def _kernel_timestamps_on() -> Iterator[None]:
    """Hold receive timestamping on for the test.

    Linux turns it on for the whole system lazily, from a work queue, when the first socket asks
    and off when the last one closes; a packet that arrives before the work ran carries no
    timestamp (seen once in CI under load). A socket pair that asks, kept open and polled until
    its packets are stamped, makes the test's own sockets find it on.
    """
    with socket.create_server(("127.0.0.1", 0)) as server:
        b = socket.create_connection(server.getsockname())
        a, _ = server.accept()
    try:
        b.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        b.settimeout(10)

        def stamped() -> bool:
            a.sendall(b"x")
            _, anc, _, _ = b.recvmsg(16, socket.CMSG_SPACE(16))
            return any(kind == SO_TIMESTAMPNS for _, kind, _ in anc)

        wait_for(stamped, timeout=60)
        yield
    finally:
        a.close()
        b.close()


def _post(s: socket.socket, body: dict, sid: str) -> None:
    raw = json.dumps(body).encode()
    s.sendall(
        b"POST / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {TOKEN}\r\nmcp-session-id: {sid}\r\n".encode()
        + f"Content-Length: {len(raw)}\r\n\r\n".encode()
        + raw
    )


@pytest.mark.skipif(sys.platform != "linux", reason="needs SO_TIMESTAMPNS (Linux)")
def test_delete_ends_held_calls_with_202_before_its_204(start_bridge):
    running = start_bridge({"approval": {"timeout_s": 30}})
    running.runner.attach_approver("human")
    with _kernel_timestamps_on():
        _delete_rounds(running)
    assert running.runner.snapshot().sessions == ()


def _delete_rounds(running) -> None:
    for _ in range(5):  # a few rounds: the order must hold every time, not by luck
        c = running.client()
        held = _timestamped_socket(running.port)
        args = {"path": running.env["root"] + "/x.txt", "content": "y"}
        _post(
            held,
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "write", "arguments": args},
            },
            c.sid or "",
        )
        running.pending()
        deleter = _timestamped_socket(running.port)
        deleter.sendall(
            b"DELETE / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {TOKEN}\r\nmcp-session-id: {c.sid}\r\n\r\n".encode()
        )
        deleted, t_deleted = _arrival(deleter)
        answer, t_answer = _arrival(held)
        assert deleted.startswith(b"HTTP/1.1 204"), deleted
        # The client gave the call up with its session: a bare 202, no JSON-RPC response,
        # sent before the 204 (a client that closes on the 204 finds nothing still open).
        assert answer == b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n", answer
        assert t_answer < t_deleted
        held.close()
        deleter.close()
        wait_for(lambda: running.runner.snapshot().pending == ())


def test_delete_of_unknown_session_is_still_204(running):
    c = Mcp(running.port)
    r = c.request("DELETE", headers={"mcp-session-id": "nope"})
    assert (r.status, r.raw) == (204, b"")
    assert c.request("DELETE").status == 204  # no header at all

"""server/mcp/protocol.py: the wire rules as pure functions (no server, no sockets)."""

from __future__ import annotations

import json

import pytest

from omp_a2a_bridge.server.mcp import protocol as p


def test_error_and_result_bodies_are_compact_json_rpc():
    assert json.loads(p.error_body(7, p.PARSE_ERROR, "parse error")) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32700, "message": "parse error"},
    }
    assert json.loads(p.error_body(None, p.SERVER_ERROR, "x", data="why"))["error"]["data"] == "why"
    assert b" " not in p.error_body(1, 1, "m")  # separators without spaces
    body = p.result_body("a", {"text": "é"})
    assert body == '{"jsonrpc":"2.0","id":"a","result":{"text":"é"}}'.encode()  # UTF-8 kept


def test_reject_body_is_empty_without_a_code():
    assert p.METHOD_NOT_ALLOWED.body() == b""
    assert json.loads(p.UNAUTHORIZED.body())["error"]["data"] == p.UNAUTHORIZED_HINT
    assert json.loads(p.Reject(400, p.INVALID_REQUEST, "bad", id=3).body())["id"] == 3


@pytest.mark.parametrize(
    ("header", "token"),
    [
        (None, None),
        ("", None),
        ("Bearer abc", "abc"),
        ("bEaReR \t abc", "abc"),
        ("Bearer abc  ", "abc  "),  # verbatim: a padded token fails the compare later
        ("Bearer ", None),
        ("Bearerabc", None),
        ("Basic abc", None),
        (" Bearer abc", None),
    ],
)
def test_bearer_token(header, token):
    assert p.bearer_token(header) == token


def test_token_matches_is_exact():
    assert p.token_matches("secret", "secret")
    assert not p.token_matches(None, "secret")
    assert not p.token_matches("secre", "secret")
    assert not p.token_matches("secret ", "secret")
    assert not p.token_matches("Secret", "secret")


@pytest.mark.parametrize(
    ("host", "name"),
    [
        ("127.0.0.1:8080", "127.0.0.1"),
        ("LOCALHOST", "localhost"),
        ("[::1]:80", "::1"),
        ("[::1]", "::1"),
        ("::1", "::1"),
        ("[broken", "[broken"),
        (" evil.example:9 ", "evil.example"),
    ],
)
def test_host_name(host, name):
    assert p.host_name(host) == name


@pytest.mark.parametrize(
    ("name", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.9.8.7", True),
        ("::1", True),
        ("127.0.0.256", False),
        ("127.0.0.1.evil.com", False),
        ("127.evil.com", False),
        ("localhost.evil.com", False),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
    ],
)
def test_is_loopback_name(name, loopback):
    assert p.is_loopback_name(name) is loopback


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        ("http://localhost:5173", True),
        ("https://127.0.0.1", True),
        ("HTTP://LOCALHOST/", True),
        ("http://[::1]:9", True),
        ("http://localhost.evil.com", False),
        ("null", False),
        ("file://localhost", False),  # only http(s)
        ("http://[::1", False),  # unparsable: refused, not an exception
        ("https://app.example", False),
        ("https://listed.example/", True),  # in allowed_origins, after normalizing
    ],
)
def test_origin_allowed(origin, allowed):
    assert p.origin_allowed(origin, frozenset({"https://listed.example"})) is allowed


def test_check_host_origin_order_and_binding():
    none: frozenset[str] = frozenset()
    assert p.check_host_origin("127.0.0.1:1", None, loopback_bound=True, allowed=none) is None
    assert (
        p.check_host_origin("evil.example", None, loopback_bound=True, allowed=none)
        is p.FORBIDDEN_HOST
    )
    # Not bound to loopback: the Host header is not judged (a LAN name is expected there).
    assert p.check_host_origin("evil.example", None, loopback_bound=False, allowed=none) is None
    # The origin is judged first.
    both_bad = p.check_host_origin(
        "evil.example", "http://evil.example", loopback_bound=True, allowed=none
    )
    assert both_bad is p.FORBIDDEN_ORIGIN


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b'{"a": NaN}',
        b'{"a": Infinity}',
        b'{"a": -Infinity}',
        b'{"a": 1e999}',
        b'{"a": "\\ud800"}',
        b'{"\\udfff": 1}',
        b"\xef\xbb\xbf{}",  # a BOM
        '{"a": 1}'.encode("utf-16"),
        b'{"a": "\xff"}',
    ],
)
def test_parse_json_refuses_what_json_or_utf8_cannot_carry(body):
    with pytest.raises(ValueError):
        p.parse_json(body)


def test_parse_json_accepts_pairs_and_large_finite_numbers():
    assert p.parse_json(b'{"e": "\\ud83d\\ude00", "n": 1e308}') == {"e": "😀", "n": 1e308}


@pytest.mark.parametrize(
    ("body", "status", "code", "rid"),
    [
        (b"nope", 400, p.PARSE_ERROR, None),
        (b"[]", 400, p.INVALID_REQUEST, None),
        (b"1", 400, p.INVALID_REQUEST, None),
        (b'{"jsonrpc": "1.0", "id": 4, "method": "ping"}', 400, p.INVALID_REQUEST, 4),
        (b'{"jsonrpc": "2.0", "id": 5, "method": 5}', 400, p.INVALID_REQUEST, 5),
        (b'{"jsonrpc": "2.0", "id": 6}', 400, p.INVALID_REQUEST, 6),
        (b"[" * 100_000, 400, p.PARSE_ERROR, None),  # deep nesting: an error, not a crash
    ],
)
def test_parse_message_rejects(body, status, code, rid):
    msg, reject = p.parse_message(body)
    assert msg is None and reject is not None
    assert (reject.status, reject.code, reject.id) == (status, code, rid)


def test_parse_message_accepts_a_request_and_a_notification():
    msg, reject = p.parse_message(b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}')
    assert reject is None and msg == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    msg, reject = p.parse_message(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')
    assert reject is None and msg is not None and "id" not in msg


def test_protocol_version_header():
    assert p.check_protocol_version(None, 1) is None
    for v in p.ACCEPTED_PROTOCOL_VERSIONS:
        assert p.check_protocol_version(v, 1) is None
    r = p.check_protocol_version("2024-11-05", 9)
    assert r is not None and (r.status, r.code, r.id) == (400, p.INVALID_REQUEST, 9)


@pytest.mark.parametrize(
    ("params", "version"),
    [
        ({"protocolVersion": "2025-06-18"}, "2025-06-18"),
        ({"protocolVersion": "2025-03-26"}, "2025-03-26"),
        ({"protocolVersion": p.PROTOCOL_VERSION}, p.PROTOCOL_VERSION),
        ({"protocolVersion": "2099-01-01"}, p.PROTOCOL_VERSION),
        ({"protocolVersion": 5}, p.PROTOCOL_VERSION),
        ({}, p.PROTOCOL_VERSION),
        (None, p.PROTOCOL_VERSION),
        ([], p.PROTOCOL_VERSION),
    ],
)
def test_negotiate_version(params, version):
    assert p.negotiate_version(params) == version


def test_initialize_result_and_texts():
    r = p.initialize_result("1.2.3", "2025-06-18")
    assert r["protocolVersion"] == "2025-06-18" and r["capabilities"] == {"tools": {}}
    assert r["serverInfo"] == {"name": "omp-a2a-bridge", "version": "1.2.3"}
    assert p.not_exposed_text("x") == "tool 'x' is not exposed by this bridge"
    assert p.TOOL_NAME_RE.match("read_file") and not p.TOOL_NAME_RE.match("Read")
    assert not p.TOOL_NAME_RE.match("a" * 65)

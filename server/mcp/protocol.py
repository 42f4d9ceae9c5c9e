"""The wire rules of ``shared/spec/protocol.md`` as small pure functions.

Nothing here does I/O, so every rule of the error table is unit-testable on its own; the HTTP
layer (:mod:`server.mcp.http`) only strings these together in the order of checks (§2).
"""

from __future__ import annotations

import hmac
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

PROTOCOL_VERSION = "2025-11-25"
ACCEPTED_PROTOCOL_VERSIONS = frozenset({"2025-11-25", "2025-06-18", "2025-03-26"})
# Older revisions a client may ask for in ``initialize`` and get echoed back (§5 "Version
# negotiation"): the JSON subset the bridge serves is the same in all of them.
ECHOED_PROTOCOL_VERSIONS = frozenset({"2025-06-18", "2025-03-26"})
MAX_BODY_BYTES = 1024 * 1024

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
SERVER_ERROR = -32000
REQUEST_CANCELLED = -32800

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
TOOL_NAME_RE = re.compile(r"^[a-z0-9_]{1,64}$")

_BEARER_RE = re.compile(r"^bearer[ \t]+", re.IGNORECASE)


@dataclass(slots=True)
class Reply:
    """The one answer type of the MCP endpoint: HTTP status, body and any extra headers.

    Every step of the order of checks (:mod:`server.mcp.http`) and every method answers with one.
    """

    status: int
    body: bytes = b""
    headers: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """A request refused before dispatch: HTTP status plus a JSON-RPC error (or no body)."""

    status: int
    code: int | None = None
    message: str = ""
    id: Any = None
    data: str | None = None

    def body(self) -> bytes:
        if self.code is None:
            return b""
        return error_body(self.id, self.code, self.message, self.data)

    def reply(self) -> Reply:
        return Reply(self.status, self.body())


# A wrong token sends OAuth-capable clients (Inspector, mcp-remote) into OAuth discovery, which
# fails on its own terms ("Dynamic Client Registration rejected (HTTP 401)"); each of them, and
# Claude Code, prints the 401 body, so the body says what is actually wrong. The same text for
# every 401: it tells nothing about the real token.
UNAUTHORIZED_HINT = (
    "wrong or missing bearer token; this server has no OAuth: send the header "
    "'Authorization: Bearer <token>' with the token 'a2a-bridge client-config' prints"
)
UNAUTHORIZED = Reject(401, SERVER_ERROR, "unauthorized", data=UNAUTHORIZED_HINT)
FORBIDDEN_ORIGIN = Reject(403, SERVER_ERROR, "forbidden origin")
FORBIDDEN_HOST = Reject(403, SERVER_ERROR, "forbidden host")
BODY_TOO_LARGE = Reject(413, INVALID_REQUEST, "request body too large")
METHOD_NOT_ALLOWED = Reject(405)
INTERNAL = Reject(500, INTERNAL_ERROR, "internal error")


# ``json.dumps`` with options builds a new encoder per call; every reply is encoded: the
# same options, built once (the very same text).
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_ENCODE_ASCII = json.JSONEncoder(separators=(",", ":")).encode


def error_body(request_id: Any, code: int, message: str, data: str | None = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _ENCODE_ASCII({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def result_body(request_id: Any, result: Any) -> bytes:
    return _ENCODE({"jsonrpc": "2.0", "id": request_id, "result": result}).encode()


def bearer_token(authorization: str | None) -> str | None:
    """The credential of an ``Authorization: Bearer <token>`` header, verbatim, or None.

    The scheme word is case-insensitive and one or more spaces follow it; everything after is
    the token, trailing spaces included (so a padded token simply fails the compare).
    """
    if not authorization:
        return None
    m = _BEARER_RE.match(authorization)
    if m is None:
        return None
    token = authorization[m.end() :]
    return token or None


def token_matches(presented: str | None, expected: str) -> bool:
    """Constant-time compare; different lengths simply fail."""
    if presented is None:
        return False
    return hmac.compare_digest(presented.encode(), expected.encode())


def host_name(host_header: str) -> str:
    """The name part of a ``Host`` header: ``[::1]:80`` -> ``::1``, ``a:9`` -> ``a``."""
    h = host_header.strip().lower()
    if h.startswith("["):
        end = h.find("]")
        return h[1:end] if end > 0 else h
    if h.count(":") == 1:
        return h.split(":", 1)[0]
    return h


def is_loopback_name(name: str) -> bool:
    return name in LOOPBACK_NAMES or (name.startswith("127.") and _is_ipv4(name))


def _is_ipv4(name: str) -> bool:
    parts = name.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)


def normalize_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


def origin_allowed(origin: str, allowed: frozenset[str]) -> bool:
    """A loopback origin (any port, http or https) or one listed in ``allowed_origins``."""
    norm = normalize_origin(origin)
    if norm in allowed:
        return True
    try:
        parts = urlsplit(norm)
        hostname = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and hostname is not None and is_loopback_name(hostname)


def check_host_origin(
    host: str | None, origin: str | None, *, loopback_bound: bool, allowed: frozenset[str]
) -> Reject | None:
    """Step 2 of the order of checks: the DNS-rebinding guard."""
    if origin is not None and not origin_allowed(origin, allowed):
        return FORBIDDEN_ORIGIN
    if loopback_bound and host is not None and not is_loopback_name(host_name(host)):
        return FORBIDDEN_HOST
    return None


class _NotJson(ValueError):
    """A JSON value Python's parser accepts but JSON (RFC 8259) does not."""


def _no_constant(name: str) -> Any:
    raise _NotJson(name)  # NaN, Infinity, -Infinity


def _finite_float(text: str) -> float:
    value = float(text)
    if value in (_INF, -_INF):  # 1e999 and friends: no JSON encoder can give them back
        raise _NotJson(text)
    return value


_INF = float("inf")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE_RE = re.compile(r"\\u[dD][89a-fA-F]")
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite_float)


def _has_lone_surrogate(value: Any) -> bool:
    """True when a string (or key) anywhere in ``value`` holds a surrogate code point.

    A strictly decoded UTF-8 body cannot carry one, so it can only come from a ``\\uD8xx``
    escape without its partner; Python keeps those as lone surrogates, which no UTF-8 writer
    (response, audit, file system) can encode.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _SURROGATE_RE.search(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def parse_json(body: bytes) -> Any:
    """The body as strict JSON, or :class:`ValueError`.

    Stricter than ``json.loads(bytes)``: the body must be UTF-8 (no sniffing of UTF-16/32, no
    BOM), ``NaN``/``Infinity`` and numbers that overflow to infinity are refused, and so are
    strings with lone surrogates. Every such body is a parse error, so nothing the bridge could
    not write back out (as JSON or UTF-8) ever gets past the door.
    """
    text = body.decode("utf-8")  # strict: UnicodeDecodeError is a ValueError
    value = _DECODER.decode(text)
    # Only a \\uD800-\\uDFFF escape can produce a surrogate (strict decoding let none through
    # unescaped), so the walk runs only for bodies that have one: emoji from ASCII-only encoders.
    if _SURROGATE_ESCAPE_RE.search(text) is not None and _has_lone_surrogate(value):
        raise _NotJson("lone surrogate")
    return value


def parse_message(body: bytes) -> tuple[dict[str, Any] | None, Reject | None]:
    """Steps 4 and 5: parse the body and check the JSON-RPC shape."""
    try:
        msg = parse_json(body)
    except (ValueError, RecursionError):
        return None, Reject(400, PARSE_ERROR, "parse error")
    if not isinstance(msg, dict):
        return None, Reject(400, INVALID_REQUEST, "invalid request")
    request_id = msg.get("id")
    if msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
        return None, Reject(400, INVALID_REQUEST, "invalid request", request_id)
    return msg, None


def check_protocol_version(value: str | None, request_id: Any) -> Reject | None:
    """Step 7: an absent header is fine; a known version is fine; anything else is refused."""
    if value is None or value in ACCEPTED_PROTOCOL_VERSIONS:
        return None
    return Reject(400, INVALID_REQUEST, "unsupported protocol version", request_id)


def not_exposed_text(name: str) -> str:
    return f"tool '{name}' is not exposed by this bridge"


def negotiate_version(params: Any) -> str:
    """The revision to answer ``initialize`` with (§5 "Version negotiation").

    A requested older revision the bridge serves is echoed (MCP's lifecycle rule; clients on
    older SDKs disconnect otherwise); the newest, an unknown one or none gets the newest.
    """
    requested = params.get("protocolVersion") if isinstance(params, dict) else None
    if isinstance(requested, str) and requested in ECHOED_PROTOCOL_VERSIONS:
        return requested
    return PROTOCOL_VERSION


def initialize_result(version: str, protocol_version: str = PROTOCOL_VERSION) -> dict[str, Any]:
    return {
        "protocolVersion": protocol_version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "omp-a2a-bridge", "version": version},
    }

"""The 2026-07-28 era on the same endpoint (protocol § 9), as pure functions.

A modern request carries its version and the client's identity on every request
(``MCP-Protocol-Version`` header, ``params._meta``); there is no ``initialize``, no session and
no ``ping``. The 2025 era (§ 1-8, the seed's contract) is untouched: :func:`is_modern` decides
per request, and only a request it calls modern goes through :func:`check_request`.

Why its own module: the order of checks differs from the 2025 one (version before headers before
``_meta``), errors carry HTTP statuses by code and object ``data``, and results gain
``resultType`` and ``_meta``; keeping those rules here keeps :mod:`server.mcp.http` one ladder.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from .protocol import (
    ACCEPTED_PROTOCOL_VERSIONS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    Reply,
)

MODERN_VERSION = "2026-07-28"
MODERN_VERSIONS = (MODERN_VERSION,)

INVALID_PARAMS = -32602
HEADER_MISMATCH = -32020
UNSUPPORTED_VERSION = -32022

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

# How long a client may cache tools/list and server/discover. The list depends on the token and
# on the user's rules and tiers, which change live: a short time, and "private" (never shared).
LIST_TTL_MS = 60_000
CACHE_SCOPE = "private"

# The HTTP status of a JSON-RPC error on the modern wire (the SDKs' table): client mistakes are
# 400, an unknown method 404; every other code (a tool's isError is a result) stays 200.
_STATUS_BY_CODE = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
# The body parameter the Mcp-Name header repeats, per method.
_NAME_BEARING = {
    "tools/call": "name",
    "tasks/get": "taskId",
    "tasks/result": "taskId",
    "tasks/cancel": "taskId",
}
_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>[A-Za-z0-9+/]*={0,2})\?=$")


@dataclass(frozen=True, slots=True)
class Envelope:
    """What a modern request says about itself, after every check passed."""

    version: str
    client_name: str
    client_version: str
    capabilities: dict[str, Any]

    @property
    def wants_tasks(self) -> bool:
        """The client declared the Tasks extension: a call that waits for a human may become a
        task instead of a held request."""
        ext = self.capabilities.get("extensions")
        return isinstance(ext, dict) and TASKS_EXTENSION in ext


def is_modern(version_header: str | None, method: str, params: Any = None) -> bool:
    """The era of one request (§ 9). Modern: the 2026-07-28 header (an ``initialize`` under it
    is a removed method: 404, as the conformance suite requires), or another header the 2025
    era does not know on a request that carries the modern envelope (``params._meta`` with a
    protocol version; it then gets -32022). A 2025 header or none is the 2025 era, whose rule
    for an unknown header (400 -32600) stays exactly as it was."""
    if version_header is None:
        return False
    if version_header == MODERN_VERSION:
        return True  # initialize too: removed in this era, so it is a 404 there
    if method == "initialize":
        return False
    if version_header in ACCEPTED_PROTOCOL_VERSIONS or not isinstance(params, dict):
        return False
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def error_reply(req_id: Any, code: int, message: str, data: Any = None) -> Reply:
    """A JSON-RPC error with the modern status for its code."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = json.dumps(
        {"jsonrpc": "2.0", "id": req_id, "error": error}, separators=(",", ":"), ensure_ascii=False
    ).encode()
    return Reply(_STATUS_BY_CODE.get(code, 200), body)


def decode_header_value(value: str | None) -> str | None:
    """A header value as the client meant it: ``=?base64?…?=`` carries non-token text; a broken
    one decodes to None so it never matches a body value by accident."""
    if value is None:
        return None
    m = _B64_SENTINEL.fullmatch(value)
    if m is None:
        return value
    payload = m.group("payload")
    try:
        raw = base64.b64decode(payload, validate=True)
        if base64.b64encode(raw).decode("ascii") != payload:
            return None
        return raw.decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None


def _text(value: Any, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def check_request(
    msg: dict[str, Any], version_header: str, method_header: str | None, name_header: str | None
) -> Envelope | Reply:
    """The modern order of checks after the body parsed (§ 9): version, then the routing headers
    against the body, then the required ``_meta`` fields. The first failure answers."""
    req_id = msg.get("id")
    if version_header not in MODERN_VERSIONS:
        data = {"supported": [*MODERN_VERSIONS], "requested": version_header}
        return error_reply(req_id, UNSUPPORTED_VERSION, "Unsupported protocol version", data)
    method = msg["method"]
    if method_header != method:
        return error_reply(req_id, HEADER_MISMATCH, "Mcp-Method header does not match the body")
    params = msg.get("params")
    name_key = _NAME_BEARING.get(method)
    if name_key is not None:
        name = params.get(name_key) if isinstance(params, dict) else None
        mismatch = decode_header_value(name_header) != name
        # tools/call must carry it; on tasks/* the header is optional but must agree.
        if name is not None and mismatch and (method == "tools/call" or name_header is not None):
            return error_reply(req_id, HEADER_MISMATCH, "Mcp-Name header does not match the body")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return error_reply(req_id, INVALID_PARAMS, "params._meta is required")
    missing = [k for k in (PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY) if k not in meta]
    if missing:
        return error_reply(req_id, INVALID_PARAMS, f"params._meta lacks {', '.join(missing)}")
    if meta[PROTOCOL_VERSION_KEY] != version_header:
        text = "MCP-Protocol-Version header does not match params._meta"
        return error_reply(req_id, HEADER_MISMATCH, text)
    caps = meta[CLIENT_CAPABILITIES_KEY]
    if not isinstance(caps, dict):
        return error_reply(req_id, INVALID_PARAMS, "clientCapabilities must be an object")
    info = meta.get(CLIENT_INFO_KEY)
    info = info if isinstance(info, dict) else {}
    return Envelope(
        version_header, _text(info.get("name")) or "unknown", _text(info.get("version")), caps
    )


def server_meta(version: str) -> dict[str, Any]:
    return {SERVER_INFO_KEY: {"name": "omp-a2a-bridge", "version": version}}


def discover_result(version: str) -> dict[str, Any]:
    """``server/discover``: the versions served on this endpoint and what the bridge offers."""
    return {
        "resultType": "complete",
        "supportedVersions": [*MODERN_VERSIONS],
        "capabilities": {"tools": {}},
        "ttlMs": LIST_TTL_MS,
        "cacheScope": CACHE_SCOPE,
        "_meta": server_meta(version),
    }


def listing_result(tools_json: bytes, version: str) -> bytes:
    """A modern ``tools/list`` result from the already serialised ``{"tools": [...]}``."""
    extra = json.dumps(
        {
            "resultType": "complete",
            "ttlMs": LIST_TTL_MS,
            "cacheScope": CACHE_SCOPE,
            "_meta": server_meta(version),
        },
        separators=(",", ":"),
    ).encode()
    return tools_json[:-1] + b"," + extra[1:]


def decorate_body(body: bytes, version: str) -> bytes:
    """Give a 2025-style result body the modern fields (``resultType``, ``_meta.serverInfo``).

    A result that carries no ``_meta`` of its own (built-in tools) gets the fields spliced in
    before its last brace, without parsing a result that may be megabytes; one that does (an
    upstream tool's) is parsed and merged, so the upstream's ``_meta`` is kept.
    """
    if not body.startswith(b'{"jsonrpc":"2.0","id":') or b'"result":{' not in body:
        return body  # an error body: its status was decided with its code
    if b'"_meta"' in body:
        msg = json.loads(body)
        result = msg.get("result")
        if isinstance(result, dict):
            found = result.get("_meta")
            meta: dict[str, Any] = found if isinstance(found, dict) else {}
            result.setdefault("resultType", "complete")
            result["_meta"] = {**meta, **server_meta(version)}
        return json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()
    extra = json.dumps(
        {"resultType": "complete", "_meta": server_meta(version)}, separators=(",", ":")
    ).encode()
    head, tail = body[:-2], body[-2:]
    if tail != b"}}":
        return body
    sep = b"" if head.endswith(b"{") else b","
    return head + sep + extra[1:-1] + tail

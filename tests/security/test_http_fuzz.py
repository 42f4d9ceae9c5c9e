"""Hostile input against the live server over real HTTP (hypothesis).

Invariants: only statuses from the error table, never a 500, no error in the server's log,
never more than 64 sessions, ``ping`` still answers, and audit start/done records still pair.
Bounded by default; ``A2A_FUZZ_EXAMPLES=5000`` runs longer.
"""

from __future__ import annotations

import http.client
import json
import logging
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions
from omp_a2a_bridge.server.infra.audit import pair_calls, read_records
from omp_a2a_bridge.server.infra.logs import PACKAGE_LOGGER, setup_logging

from ..support.helpers import TOKEN, Mcp

EXAMPLES = int(os.environ.get("A2A_FUZZ_EXAMPLES", "120"))
ALLOWED = {200, 202, 204, 400, 401, 403, 404, 405, 413}


class ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """One bridge for the whole module (hypothesis runs many examples against it)."""
    tmp = tmp_path_factory.mktemp("fuzz")
    (tmp / "root").mkdir()
    saved = {
        k: os.environ.get(k) for k in ("A2A_BRIDGE_CONFIG", "A2A_BRIDGE_AUDIT", "A2A_BRIDGE_TOKEN")
    }
    os.environ.update(
        A2A_BRIDGE_CONFIG=str(tmp / "config.json"),
        A2A_BRIDGE_AUDIT=str(tmp / "audit.jsonl"),
        A2A_BRIDGE_TOKEN=TOKEN,
    )
    (tmp / "config.json").write_text(json.dumps({"roots": [str(tmp / "root")]}))
    setup_logging()
    errors = ErrorLog()
    for name in (PACKAGE_LOGGER, "tornado", "asyncio"):
        logging.getLogger(name).addHandler(errors)
    tornado_level = logging.getLogger("tornado").level
    logging.getLogger("tornado").setLevel(logging.ERROR)
    runner = BridgeRunner(RunnerOptions(port=0, discover_tools=False))
    runner.start()
    session = Mcp(runner.bridge.port)
    session.initialize()
    yield runner, session, errors, str(tmp / "audit.jsonl")
    runner.stop()
    for name in (PACKAGE_LOGGER, "tornado", "asyncio"):
        logging.getLogger(name).removeHandler(errors)
    logging.getLogger("tornado").setLevel(tornado_level)
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


json_leaf = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
json_any = st.recursive(
    json_leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
methods = st.sampled_from(
    ["initialize", "ping", "tools/list", "tools/call", "notifications/initialized",
     "notifications/cancelled", "server/discover", "resources/list", ""]
) | st.text(max_size=20)  # fmt: skip
tool_params = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["read", "ls", "find", "grep", "write", "edit", "bash", "x"])
        | st.text(max_size=10),
        "arguments": json_any,
    }
)
messages = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2.0]) | json_leaf,
        "id": st.integers(min_value=-(2**70), max_value=2**70) | st.text(max_size=300) | json_any,
        "method": methods | json_leaf,
        "params": tool_params | json_any,
    },
)


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


bodies = st.one_of(
    messages.map(lambda m: json.dumps(m).encode()),
    json_any.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=300),
    st.integers(min_value=1, max_value=50_000).map(deep),
    st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
header_values = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0xFF, blacklist_characters="\x7f"),
    max_size=60,
).map(str.strip)


def send(port: int, body: bytes, headers: dict[str, str], method: str = "POST") -> int:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        c.putrequest(method, "/", skip_host="Host" in headers, skip_accept_encoding=True)
        for k, v in headers.items():
            c.putheader(k, v.encode("latin-1"))
        c.putheader("Content-Length", str(len(body)))
        c.endheaders(body)
        r = c.getresponse()
        r.read()
        return r.status
    finally:
        c.close()


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=bodies,
    auth=st.sampled_from(["good", "none", "wrong", "basic", "lower"]),
    sid=st.sampled_from(["live", "none", "bogus", "empty"]) | header_values,
    version=st.sampled_from([None, "2025-11-25", "2025-03-26", "2026-07-28", "1.0"])
    | header_values,
    origin=st.sampled_from([None, "http://localhost:3000", "http://evil.example", "null"])
    | header_values,
    host=st.sampled_from([None, "127.0.0.1", "localhost:1", "evil.example", "[::1]:5"]),
    method=st.sampled_from(["POST", "POST", "POST", "DELETE", "GET", "PUT"]),
)
def test_fuzz_requests(live, body, auth, sid, version, origin, host, method):
    runner, session, errors, _ = live
    headers: dict[str, str] = {}
    tokens = {
        "good": f"Bearer {TOKEN}",
        "wrong": "Bearer " + "w" * 40,
        "basic": f"Basic {TOKEN}",
        "lower": f"bearer {TOKEN}",
    }
    if auth in tokens:
        headers["Authorization"] = tokens[auth]
    sids = {"live": session.sid, "bogus": "f" * 32, "empty": ""}
    if sid in sids:
        headers["mcp-session-id"] = sids[sid]
    elif sid != "none" and sid:
        headers["mcp-session-id"] = sid
    if version is not None and version:
        headers["MCP-Protocol-Version"] = version
    if origin is not None:
        headers["Origin"] = origin
    if host is not None:
        headers["Host"] = host
    status = send(runner.bridge.port, body, headers, method)
    assert status in ALLOWED, (status, body[:200], headers)
    assert len(runner.bridge.sessions) <= 64
    assert not errors.records, [r.getMessage() for r in errors.records]


def test_after_the_fuzz_the_server_is_healthy_and_audit_pairs(live):
    runner, _session, errors, audit = live  # the fuzzer may have DELETEd that session
    fresh = Mcp(runner.bridge.port)
    fresh.initialize()
    assert fresh.rpc("ping").json["result"] == {}
    assert runner.bridge.audit.flush(60), "the audit writer fell behind"
    calls = pair_calls(read_records(audit))
    assert all(c["start"] is not None and c["done"] is not None for c in calls)
    assert not errors.records

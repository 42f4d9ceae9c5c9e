"""Upstream MCP servers behind the bridge, against real servers the tests start.

The upstream is ``tests/support/upstream_server.py`` (the official SDK's lowlevel server) over stdio
and over Streamable HTTP, and ``@modelcontextprotocol/server-everything`` from npm through node.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from omp_a2a_bridge.server.infra.config import ConfigError, parse_config

from ..e2e.test_approval_page_browser import _wait
from ..e2e.test_approval_page_browser import browser as _chromium  # noqa: F401 - the fixture "browser"
from ..support.helpers import STOP_LIMIT_S, TOKEN, free_port, in_thread, read_text, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ["echo", "image", "structured", "mixed", "fail", "protocol_error", "sleep", "crash"]


def stdio_spec(state: str, **extra) -> dict:
    """The test server over stdio, outside the box: these tests read the files it writes into
    ``state`` (a pytest temp folder outside the roots), which in the box would land in its
    private /tmp. The same server runs in the box in tests/security/test_box_walks.py, and the
    npm reference server below runs in the box (the default)."""
    spec = {
        "command": sys.executable,
        "args": ["-m", "tests.support.upstream_server", "--state", state],
        "cwd": REPO,
        "box": False,
    }
    spec.update(extra)
    return spec


def ready(running, name: str = "t", timeout: float = 30.0):
    def check():
        for s in running.runner.snapshot().servers:
            if s.name == name and s.state == "ready":
                return s
        return None

    return wait_for(check, timeout)


def lines(state: str, file: str) -> list[str]:
    try:
        with open(os.path.join(state, file)) as f:
            return f.read().split()
    except FileNotFoundError:
        return []


@pytest.fixture
def state(tmp_path) -> str:
    d = tmp_path / "upstream-state"
    d.mkdir()
    return str(d)


@pytest.fixture
def upstream(start_bridge, state):
    """A bridge with the test server over stdio; its tools allow-tier unless a test says not."""

    def start(config: dict | None = None, **spec_extra):
        cfg = {"mcp_servers": {"t": stdio_spec(state, **spec_extra)}}
        cfg.update(config or {})
        running = start_bridge(cfg)
        ready(running)
        return running

    return start


ALLOW = {"approval": {"default_tier": "allow", "tiers": {f"mcp__t__{t}": "allow" for t in TOOLS}}}


# -- config ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("servers", "message"),
    [
        ([], "field 'mcp_servers' must be an object mapping server names to server objects"),
        ({"a": "x"}, "field 'mcp_servers.a' must be an object with 'command' (stdio) or 'url'"),
        ({"a": {}}, "field 'mcp_servers.a' must be an object with exactly one of 'command'"),
        ({"a": {"command": "x", "url": "http://h"}}, "field 'mcp_servers.a' must be an object"),
        ({"a": {"command": ""}}, "field 'mcp_servers.a.command' must be a non-empty string"),
        ({"a": {"command": "x", "args": "y"}}, "field 'mcp_servers.a.args' must be an array"),
        ({"a": {"command": "x", "env": {"K": 1}}}, "field 'mcp_servers.a.env' must be an object"),
        (
            {"a": {"command": "x", "env": {"A2A_BRIDGE_TOKEN": "t"}}},
            "field 'mcp_servers.a.env' must be free of the bridge's own A2A_BRIDGE_* variables",
        ),
        ({"a": {"command": "x", "cwd": 3}}, "field 'mcp_servers.a.cwd' must be a non-empty string"),
        ({"a": {"url": "ftp://h"}}, "field 'mcp_servers.a.url' must be an http:// or https:// URL"),
        ({"a": {"url": "http://h", "headers": []}}, "field 'mcp_servers.a.headers' must be an"),
        ({"a": {"url": "http://h", "timeout_s": 0}}, "field 'mcp_servers.a.timeout_s' must be a"),
        ({"a": {"command": "x", "box": "yes"}}, "field 'mcp_servers.a.box' must be true or false"),
        ({"a": {"command": "x", "network": True}}, "field 'mcp_servers.a.network' must be \"on\""),
        ({"a": {"url": "http://h", "box": False}}, "field 'mcp_servers.a.box' must be left out"),
        ({"--": {"command": "x"}}, "field 'mcp_servers.--' must be named with at least one"),
        (
            {"My Server": {"command": "x"}, "my-server": {"command": "y"}},
            "field 'mcp_servers.my-server' must be named differently: it becomes 'my_server' "
            "like 'My Server'",
        ),
    ],
)
def test_config_errors_name_the_field(servers, message):
    with pytest.raises(ConfigError) as e:
        parse_config("/c.json", {"mcp_servers": servers})
    assert str(e.value).startswith(f"invalid config at /c.json: {message}")


def test_config_shape_is_the_clients_mcpservers_block():
    cfg = parse_config(
        "/c.json",
        {
            "mcp_servers": {
                "Git Hub!": {"url": "https://u:p@h.example/mcp?k=1", "headers": {"A": "b"}},
                "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {}, "cwd": "~"},
            }
        },
    )
    gh, tm = cfg.mcp_servers
    assert (gh.name, gh.kind, gh.target, gh.headers) == (
        "git_hub",
        "http",
        "https://h.example/mcp",
        {"A": "b"},
    )
    assert (tm.name, tm.kind, tm.target, tm.cwd) == (
        "time",
        "stdio",
        "uvx mcp-server-time",
        os.path.expanduser("~"),
    )


# -- listing, calls, results -------------------------------------------------------------------


def test_tools_listed_after_builtins_and_results_pass_through(upstream):
    running = upstream(ALLOW)
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    builtin = ["read", "ls", "find", "grep", "write", "edit", "bash"]
    assert names[:7] == builtin
    assert names[7:] == sorted(names[7:]) and "mcp__t__echo" in names
    echo = next(t for t in c.rpc("tools/list").result["tools"] if t["name"] == "mcp__t__echo")
    assert echo["annotations"] == {"readOnlyHint": True}
    assert echo["description"] == "Echo the text back."

    assert c.call("mcp__t__echo", {"text": "hi"}).result == {
        "content": [{"type": "text", "text": "hi"}],
        "isError": False,
    }
    img = c.call("mcp__t__image").result["content"][0]
    assert img["type"] == "image" and img["mimeType"] == "image/png" and img["data"]
    st = c.call("mcp__t__structured", {"a": 2, "b": 3}).result
    assert st["structuredContent"] == {"sum": 5} and st["isError"] is False
    mixed = [b["type"] for b in c.call("mcp__t__mixed").result["content"]]
    assert mixed == ["audio", "resource_link", "resource"]
    fail = c.call("mcp__t__fail").result
    assert fail == {"content": [{"type": "text", "text": "upstream says no"}], "isError": True}
    err = c.call("mcp__t__protocol_error")
    assert err.result["isError"] is True
    assert err.text == (
        "upstream server 't' returned an error for 'protocol_error': "
        "bad things upstream (code -32602)"
    )
    bad = c.call("mcp__t__structured", {"a": "x"})
    assert bad.result["isError"] is True and "field 'a'" in bad.text
    # Every call is audited under the bridge's name for the tool.
    done = [r for r in running.audit() if r["phase"] == "done"]
    assert {r["tool"] for r in done} >= {"mcp__t__echo", "mcp__t__fail"}
    assert next(r for r in done if r["tool"] == "mcp__t__fail")["outcome"] == "error"


def test_child_environment_is_minimal_and_never_has_the_token(upstream, state, monkeypatch):
    monkeypatch.setenv("SOME_SECRET_OF_THE_USER", "s3cret")
    running = upstream(ALLOW, env={"GREETING": "hello", "LEAKY": "x" + TOKEN})
    with open(os.path.join(state, "env.json")) as f:
        env = json.load(f)
    assert env["GREETING"] == "hello"
    assert "LEAKY" not in env and "SOME_SECRET_OF_THE_USER" not in env
    assert not [k for k in env if k.startswith("A2A_BRIDGE_")]
    assert TOKEN not in json.dumps(env)
    assert running.runner.snapshot().servers[0].tools >= len(TOOLS)


def test_default_tier_is_prompt_and_the_approver_sees_the_upstream(upstream, state):
    # default_tier allow does not reach upstream tools: their annotations say read-only, but
    # that is the upstream's word.
    running = upstream({"approval": {"default_tier": "allow"}})
    running.runner.attach_approver("test")
    c = running.client()
    t, out = in_thread(c.call, "mcp__t__echo", {"text": "hi"})
    (p,) = running.pending()
    assert p.tool == "mcp__t__echo"
    assert p.upstream is not None
    assert p.upstream.server == "t" and p.upstream.tool == "echo"
    assert p.upstream.description == "Echo the text back."
    assert p.upstream.annotations == {"readOnlyHint": True}
    assert p.upstream.changed is False
    running.runner.decide(p.id, "allow_session")
    t.join(60)
    assert out[0].text == "hi"
    assert c.call("mcp__t__echo", {"text": "again"}).text == "again"  # session grant
    other = running.client("other")
    t, out = in_thread(other.call, "mcp__t__echo", {"text": "x"})
    (p,) = running.pending()
    running.runner.decide(p.id, "deny", "not now")
    t.join(60)
    assert out[0].text == "denied by the user: not now"


def test_deny_and_deny_mcp_tools(upstream, start_bridge, state):
    running = upstream({**ALLOW, "deny": ["mcp__t__echo"]})
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert "mcp__t__echo" not in names and "mcp__t__image" in names
    assert c.call("mcp__t__echo", {"text": "x"}).text == (
        "tool 'mcp__t__echo' is not exposed by this bridge"
    )
    running.runner.stop()

    running = upstream({**ALLOW, "deny": ["mcp__t"]})
    names = [t["name"] for t in running.client().rpc("tools/list").result["tools"]]
    assert not [n for n in names if n.startswith("mcp__")]
    running.runner.stop()

    running = upstream({**ALLOW, "deny_mcp_tools": True})
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert names == ["read", "ls", "find", "grep", "write", "edit", "bash"]
    assert c.call("mcp__t__image").result["isError"] is True


# -- failures ------------------------------------------------------------------------------------


def test_hang_becomes_a_timeout_text_and_the_upstream_is_cancelled(upstream, state):
    running = upstream(ALLOW, timeout_s=0.5)
    c = running.client()
    r = c.call("mcp__t__sleep", {"seconds": 30})
    assert r.result["isError"] is True
    assert r.text == (
        "upstream server 't' did not answer 'sleep' within 0.5 s (the call was cancelled upstream)"
    )
    wait_for(lambda: lines(state, "cancelled"))
    assert c.call("mcp__t__echo", {"text": "still here"}).text == "still here"


def test_client_cancel_is_forwarded_upstream(upstream, state):
    running = upstream(ALLOW)
    c = running.client()
    t, out = in_thread(c.call, "mcp__t__sleep", {"seconds": 30}, 77)
    wait_for(lambda: lines(state, "sleeping"))  # the upstream runs it
    other = running.client()
    other.sid = c.sid
    other.rpc("notifications/cancelled", {"requestId": 77}, req_id=None)
    t.join(60)
    assert out[0].status == 202 and out[0].raw == b""  # cancelled: no JSON-RPC response
    assert wait_for(lambda: lines(state, "cancelled"))
    done = [r for r in running.audit() if r["phase"] == "done"]
    assert done[-1]["outcome"] == "cancelled"


def test_client_disconnect_is_forwarded_upstream(upstream, state):
    running = upstream(ALLOW)
    c = running.client()
    c.conn.timeout = 1
    t, _ = in_thread(c.call, "mcp__t__sleep", {"seconds": 30})
    wait_for(lambda: lines(state, "sleeping"))  # the upstream runs it
    c.conn.sock.shutdown(socket.SHUT_RDWR)
    assert wait_for(lambda: lines(state, "cancelled"))
    t.join(60)


def test_crash_restart_and_call_again(upstream, state):
    running = upstream(ALLOW)
    c = running.client()
    r = c.call("mcp__t__crash")
    assert r.result["isError"] is True
    assert "upstream server 't' stopped while running 'crash'" in r.text
    wait_for(lambda: len(lines(state, "starts")) >= 2, 30)
    view = ready(running)
    assert view.restarts >= 1
    assert "upstream server starting (stderr line)" in view.stderr
    assert c.call("mcp__t__echo", {"text": "back"}).text == "back"


def test_a_stdio_answer_over_the_message_cap_disconnects_and_restarts(upstream, state, monkeypatch):
    from omp_a2a_bridge.server.upstream import stdio as upstream_stdio

    monkeypatch.setattr(upstream_stdio, "LINE_MAX_BYTES", 1 << 20)
    tiers = {"approval": {"tiers": {"mcp__t__big": "allow", "mcp__t__echo": "allow"}}}
    running = upstream(
        tiers, args=["-m", "tests.support.upstream_server", "--state", state, "--big"]
    )
    c = running.client()
    assert c.call("mcp__t__big", {"bytes": 1000}).text == "x" * 1000
    r = c.call("mcp__t__big", {"bytes": 2 << 20})
    assert r.result["isError"] is True and "upstream server 't' stopped" in r.text, r.text
    wait_for(lambda: len(lines(state, "starts")) >= 2, 30)
    view = ready(running)
    assert "(bridge) a message over 32 MiB: disconnected" in view.stderr
    assert c.call("mcp__t__echo", {"text": "back"}).text == "back"


def test_a_server_that_is_down_is_absent_and_says_why(start_bridge, tmp_path):
    running = start_bridge({"mcp_servers": {"gone": {"command": str(tmp_path / "nope")}}})
    view = wait_for(
        lambda: next((s for s in running.runner.snapshot().servers if s.state == "failed"), None)
    )
    assert view.last_error == f"cannot start it: command not found ({tmp_path / 'nope'})"
    c = running.client()
    t0 = time.monotonic()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert time.monotonic() - t0 < 10  # not held up by the server that is down (was 2 s)
    assert not [n for n in names if n.startswith("mcp__")]


def test_shutdown_stops_the_servers_within_budget(upstream, state):
    running = upstream(ALLOW)
    pid = int(lines(state, "starts")[-1])
    c = running.client()
    t, _ = in_thread(c.call, "mcp__t__sleep", {"seconds": 30})
    wait_for(lambda: lines(state, "sleeping"))
    t0 = time.monotonic()
    running.runner.stop()
    assert time.monotonic() - t0 < STOP_LIMIT_S
    with pytest.raises(ProcessLookupError):
        wait_for(lambda: os.kill(pid, 0) and False, 30)  # raises once the pid is gone (reaped)
    t.join(60)


# -- list_changed and pinning --------------------------------------------------------------------


def test_list_changed_refreshes_and_a_changed_definition_asks_again(upstream, state):
    tiers = {"mcp__t__echo": "allow", "mcp__t__mutate": "allow"}
    running = upstream({"approval": {"tiers": tiers}})
    running.runner.attach_approver("test")
    c = running.client()
    assert c.call("mcp__t__echo", {"text": "1"}).text == "1"  # allowed by tier: pinned now
    pins_file = os.path.join(os.path.dirname(running.env["config"]), "upstream-pins.json")
    wait_for(lambda: os.path.exists(pins_file))
    assert os.stat(pins_file).st_mode & 0o777 == 0o600
    assert c.call("mcp__t__mutate").text == "mutated"

    def listed():
        names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
        return "mcp__t__extra" in names and names

    wait_for(listed)
    echo = next(t for t in c.rpc("tools/list").result["tools"] if t["name"] == "mcp__t__echo")
    assert "evil.example" in echo["description"]
    assert running.runner.snapshot().servers[0].changed == ("mcp__t__echo",)

    # The tier no longer allows it: the human sees "changed" and decides again.
    t, out = in_thread(c.call, "mcp__t__echo", {"text": "2"})
    (p,) = running.pending()
    assert p.upstream is not None and p.upstream.changed is True
    assert "evil.example" in p.upstream.description
    running.runner.decide(p.id, "approve")  # approving re-pins
    t.join(60)
    assert out[0].text == "2"
    assert c.call("mcp__t__echo", {"text": "3"}).text == "3"  # the tier applies again
    assert running.runner.snapshot().servers[0].changed == ()


def test_pins_survive_a_restart_of_the_bridge(upstream, state):
    running = upstream({"approval": {"tiers": {"mcp__t__echo": "allow"}}})
    assert running.client().call("mcp__t__echo", {"text": "1"}).text == "1"
    running.runner.stop()
    open(os.path.join(state, "mutated"), "w").close()  # the definition changes while we are off
    running = upstream({"approval": {"tiers": {"mcp__t__echo": "allow"}}})
    running.runner.attach_approver("test")
    c = running.client()
    t, out = in_thread(c.call, "mcp__t__echo", {"text": "2"})
    (p,) = running.pending()
    assert p.upstream.changed is True
    running.runner.decide(p.id, "deny")
    t.join(60)
    assert out[0].text == "denied by the user"


# -- HTTP upstream ---------------------------------------------------------------------------------


@pytest.fixture
def http_upstream(state):
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.upstream_server",
            "--state",
            state,
            "--http",
            str(port),
        ],
        cwd=REPO,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/mcp"

    def up():
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_for(up, 30)
    yield url, proc
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def test_http_upstream_lists_calls_cancels_and_refreshes(start_bridge, http_upstream, state):
    url, _ = http_upstream
    spec = {"url": url, "headers": {"X-Test": "1"}, "timeout_s": 5}
    tiers = {"mcp__h__mutate": "allow", "mcp__h__sleep": "allow"}
    running = start_bridge({"mcp_servers": {"h": spec}, "approval": {"tiers": tiers}})
    ready(running, "h")
    c = running.client()
    running.runner.attach_approver("test")
    t, out = in_thread(c.call, "mcp__h__structured", {"a": 1, "b": 2})
    (p,) = running.pending()
    assert p.upstream.server == "h"
    running.runner.decide(p.id, "allow_always")
    t.join(60)
    assert out[0].result["structuredContent"] == {"sum": 3}
    # "Always allow" saves a rule naming every argument (not a tier, not the whole tool).
    assert c.call("mcp__h__structured", {"a": 1, "b": 2}).result["structuredContent"] == {"sum": 3}
    # Effective at once; saved to the config by a worker after that (rulebook.add): waited for.
    wait_for(lambda: json.loads(read_text(running.env["config"])).get("rules", {}).get("allow"))
    with open(running.env["config"]) as f:
        assert json.load(f)["rules"]["allow"] == ["mcp__h__structured(a=1, b=2, nothing else)"]

    t, out = in_thread(c.call, "mcp__h__sleep", {"seconds": 30}, 5)
    wait_for(lambda: lines(state, "sleeping"))  # the upstream runs it
    other = running.client()
    other.sid = c.sid
    other.rpc("notifications/cancelled", {"requestId": 5}, req_id=None)
    t.join(60)
    assert out[0].status == 202 and out[0].raw == b""  # cancelled: no JSON-RPC response
    assert wait_for(lambda: lines(state, "cancelled"))

    assert c.call("mcp__h__mutate").text == "mutated"
    wait_for(lambda: "mcp__h__extra" in [t["name"] for t in c.rpc("tools/list").result["tools"]])


def test_http_upstream_reconnects_after_it_comes_back(start_bridge, state, monkeypatch):
    from omp_a2a_bridge.server.upstream import manager as upstream

    # Retries stay automatic; only their back-off is capped lower than 30 s, so the test does
    # not sit out a doubled wait while the server's process starts again.
    monkeypatch.setattr(upstream, "BACKOFF_MAX_S", 1.0)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tests.support.upstream_server",
        "--state",
        state,
        "--http",
        str(port),
    ]
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    try:
        running = start_bridge({"mcp_servers": {"h": {"url": f"http://127.0.0.1:{port}/mcp"}}})
        ready(running, "h")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        running.runner.restart_server("h")
        wait_for(lambda: running.runner.snapshot().servers[0].state == "failed", 60)
        proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
        ready(running, "h", 60)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.mark.parametrize("answer", ["json", "sse"])
def test_http_upstream_answer_over_the_message_cap_ends_the_call_with_an_error(
    start_bridge, state, answer, monkeypatch
):
    """A Streamable-HTTP upstream's reply is capped per message like stdio's: an over-size
    answer (a JSON body or one SSE event) fails that call; the bridge reads no more of it and
    the server stays usable."""
    from omp_a2a_bridge.server.upstream import http as upstream_http

    monkeypatch.setattr(upstream_http, "MESSAGE_MAX_BYTES", 1 << 20)
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tests.support.upstream_server",
        "--state",
        state,
        "--http",
        str(port),
    ]
    cmd += ["--big"] + (["--json-response"] if answer == "json" else [])
    proc = subprocess.Popen(cmd, cwd=REPO, start_new_session=True)
    try:
        tiers = {"mcp__h__big": "allow", "mcp__h__echo": "allow"}
        url = f"http://127.0.0.1:{port}/mcp"
        running = start_bridge({"mcp_servers": {"h": {"url": url}}, "approval": {"tiers": tiers}})
        ready(running, "h", 60)
        c = running.client()
        assert c.call("mcp__h__big", {"bytes": 1000}).text == "x" * 1000
        r = c.call("mcp__h__big", {"bytes": 3 << 20})
        assert r.result["isError"] is True
        # The JSON body is cut by the bridge's transport, the SSE event by the SDK's reader.
        assert ("over 1 MiB" if answer == "json" else "1048576 byte limit") in r.text, r.text
        assert c.call("mcp__h__echo", {"text": "still here"}).text == "still here"
        done = [x for x in running.audit() if x["phase"] == "done" and x["tool"] == "mcp__h__big"]
        assert [x["outcome"] for x in done] == ["ok", "error"]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# -- the official SDK client through the bridge -------------------------------------------------


def test_sdk_client_drives_an_upstream_tool(upstream):
    running = upstream(ALLOW)

    async def run():
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
        async with (
            http,
            Client(streamable_http_client(running.runner.url, http_client=http)) as client,
        ):
            tools = await client.list_tools()
            res = await client.call_tool("mcp__t__structured", {"a": 4, "b": 5})
            return [t.name for t in tools.tools], res

    names, res = asyncio.run(run())
    assert "mcp__t__structured" in names
    assert res.is_error is False and res.structured_content == {"sum": 9}


# -- the UIs: snapshot, control API, CLI, tray menu ------------------------------------------------


def test_servers_in_status_api_cli_and_restart(start_bridge, state, tmp_path, cli):
    from omp_a2a_bridge.server.present.views import snapshot_json

    from ..support.control_client import Api

    cfg = {
        "mcp_servers": {"t": stdio_spec(state), "gone": {"command": str(tmp_path / "missing")}},
        **ALLOW,
    }
    running = start_bridge(cfg, control=True)
    ready(running)
    wait_for(lambda: running.runner.snapshot().servers[1].state == "failed")
    snap = snapshot_json(running.runner.snapshot())
    t, gone = snap["servers"]
    assert (t["name"], t["state"], t["kind"], t["last_error"]) == ("t", "ready", "stdio", None)
    assert t["tools"] == 10 and t["changed"] == [] and len(t["stderr"]) <= 5
    assert gone["state"] == "failed" and "command not found" in gone["last_error"]
    assert gone["tools"] == 0

    api = Api(running.runner.control)
    r = api.call("GET", "/api/servers")
    assert r.status == 200
    assert [s["name"] for s in r.json["servers"]] == ["t", "gone"]
    assert "upstream server starting (stderr line)" in r.json["servers"][0]["stderr"]
    assert api.call("POST", "/api/servers/nope/restart").status == 404
    assert Api(running.runner.control, secret=None).call("GET", "/api/servers").status == 401
    starts = len(lines(state, "starts"))
    r = api.call("POST", "/api/servers/t/restart", body=b"{}")
    assert r.status == 202 and r.json == {"ok": True, "name": "t"}
    wait_for(lambda: len(lines(state, "starts")) > starts, 30)
    assert ready(running).restarts >= 1

    out = cli("status")
    assert "upstream MCP servers: 1 of 2 ready" in out.stdout
    out = cli("servers", "--json")
    assert out.returncode == 0, out.stderr
    assert [s["name"] for s in json.loads(out.stdout)["servers"]] == ["t", "gone"]
    out = cli("servers")
    assert out.returncode == 0
    assert "t  ready  10 tool(s)  stdio:" in out.stdout
    assert "gone  failed  0 tool(s)" in out.stdout and "last error: cannot start it" in out.stdout
    out = cli("servers", "--restart", "gone")
    assert out.returncode == 0 and "restarting" in out.stdout


def test_tray_servers_submenu(upstream, state):
    from omp_a2a_bridge.tray.menu import menu_model

    running = upstream(ALLOW)
    items = menu_model(running.runner.snapshot())
    servers = next(i for i in items if i.text.startswith("Servers"))
    assert servers.text == "Servers (1)"
    (entry,) = servers.submenu
    assert entry.text == "t — ready · 10 tools"
    assert [(i.text, i.action) for i in entry.submenu] == [("Restart", ("restart_server", "t"))]
    # No servers configured: no submenu.
    snap = dataclasses.replace(running.runner.snapshot(), servers=())
    assert not [i for i in menu_model(snap) if i.text.startswith("Servers")]


# -- the reference server from npm, through node ------------------------------------------------

EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def npm_prefix() -> str:
    """Where the tests' npm packages live; ``.ci/run`` fills it before the suite runs."""
    return os.environ.get("A2A_BRIDGE_TEST_NPM") or os.path.join(
        os.path.expanduser("~"), ".cache", "omp-a2a-bridge-tests", "npm"
    )


def npm_package(spec: str, entry: str) -> str:
    """Install ``spec`` into the cached prefix once; the path of ``entry`` inside it.

    Outside CI a machine without node/npm or without the registry skips with the install line.
    """
    prefix = npm_prefix()
    path = os.path.join(prefix, "node_modules", entry)
    if os.path.exists(path):
        return path
    line = f"npm install --prefix {prefix} {spec}"
    problem = None
    if not (shutil.which("node") and shutil.which("npm")):
        problem = "needs node and npm"
    else:
        os.makedirs(prefix, exist_ok=True)
        r = subprocess.run(
            ["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", spec],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if r.returncode != 0 or not os.path.exists(path):
            problem = f"npm install failed: {(r.stderr or r.stdout)[-300:]}"
    if problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{problem}: {line}")
        pytest.skip(f"{problem}: {line}")
    return path


@pytest.fixture(scope="module")
def everything() -> dict:
    script = npm_package(EVERYTHING, "@modelcontextprotocol/server-everything/dist/index.js")
    return {"command": shutil.which("node") or "node", "args": [script, "stdio"]}


def test_reference_server_everything_through_the_bridge(start_bridge, everything):
    tiers = {
        f"mcp__everything__{t}": "allow"
        for t in ("get-sum", "get-tiny-image", "get-structured-content", "get-env", "echo")
    }
    running = start_bridge(
        {"mcp_servers": {"everything": everything}, "approval": {"tiers": tiers}}
    )
    view = ready(running, "everything")
    assert view.tools >= 10 and view.skipped == ()
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert {"mcp__everything__echo", "mcp__everything__get-sum"} <= set(names)
    assert c.call("mcp__everything__get-sum", {"a": 2, "b": 3}).text == "The sum of 2 and 3 is 5."
    assert c.call("mcp__everything__echo", {"message": "hi"}).text == "Echo: hi"
    img = c.call("mcp__everything__get-tiny-image").result["content"]
    assert "image" in [b["type"] for b in img]
    st = c.call("mcp__everything__get-structured-content", {"location": "New York"}).result
    assert not st.get("isError") and isinstance(st["structuredContent"], dict)
    env = c.call("mcp__everything__get-env").text
    assert TOKEN not in env and "A2A_BRIDGE" not in env
    # Its schemas say draft-07; the bridge checks arguments by that draft before forwarding.
    bad = c.call("mcp__everything__get-sum", {"a": "two", "b": 3})
    assert bad.result["isError"] is True
    assert bad.text == (
        "invalid arguments for 'mcp__everything__get-sum': field 'a': 'two' is not of type 'number'"
    )
    # Not allowed by a tier: a human decides, and without one the call is refused.
    r = c.call("mcp__everything__get-resource-links", {"count": 1})
    assert r.text.startswith("approval required but no approver is available")


def test_inspector_cli_drives_an_upstream_tool(upstream):
    """A second real client (the MCP Inspector CLI, TypeScript SDK v2) through the bridge."""
    bin_js = npm_package(INSPECTOR, ".bin/inspector")
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=False)
    if int(node.stdout.strip().lstrip("v").split(".")[0] or 0) < 20:
        pytest.skip(f"the Inspector CLI needs node >= 20 (found {node.stdout.strip()})")
    running = upstream(ALLOW)
    env = dict(os.environ, HOME=os.path.join(npm_prefix(), "home"))
    os.makedirs(env["HOME"], exist_ok=True)
    r = subprocess.run(
        [
            bin_js,
            "--cli",
            running.runner.url,
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {TOKEN}",
            "--method",
            "tools/call",
            "--tool-name",
            "mcp__t__structured",
            "--tool-args-json",
            '{"a": 20, "b": 22}',
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-500:]
    out = json.loads(r.stdout)
    assert out["result"]["structuredContent"] == {"sum": 42}


def test_a_server_that_exits_at_once_says_how_and_backs_off(start_bridge, tmp_path):
    script = "import sys; print('no API key configured', file=sys.stderr); sys.exit(3)"
    servers = {
        "quits": {"command": sys.executable, "args": ["-c", script]},
        "nowhere": {"command": sys.executable, "cwd": str(tmp_path / "missing-dir")},
    }
    running = start_bridge({"mcp_servers": servers})

    def failed(name, restarts=0):
        def check():
            for s in running.runner.snapshot().servers:
                if s.name == name and s.state == "failed" and s.restarts >= restarts:
                    return s
            return None

        return check

    view = wait_for(failed("quits", 2), 20)  # restarted with back-off, still failing
    assert view.last_error == "the server exited with code 3: no API key configured"
    assert view.stderr[-1] == "no API key configured"
    view = wait_for(failed("nowhere"))
    assert view.last_error == (
        f"cannot start it: working directory {tmp_path / 'missing-dir'} does not exist"
    )


def test_a_definition_that_changes_while_the_call_waits_is_not_run(upstream, state):
    running = upstream({"approval": {"tiers": {"mcp__t__mutate": "allow"}}})
    running.runner.attach_approver("test")
    c = running.client()
    t, out = in_thread(c.call, "mcp__t__echo", {"text": "x"})
    (p,) = running.pending()
    assert running.client().call("mcp__t__mutate").text == "mutated"
    wait_for(lambda: running.runner.snapshot().servers[0].tools == 11)
    running.runner.decide(p.id, "approve")
    t.join(60)
    assert out[0].result["isError"] is True
    assert out[0].text == (
        "tool 'mcp__t__echo' changed on its server while the call waited; call it again"
    )


def test_terminal_and_tray_show_upstream_details(upstream, state):
    from omp_a2a_bridge.server.cli.watch import describe
    from omp_a2a_bridge.server.present.views import pending_json
    from omp_a2a_bridge.tray.menu import menu_model

    running = upstream({"approval": {"tiers": {"mcp__t__echo": "allow"}}})
    running.runner.attach_approver("test")
    c = running.client()
    assert c.call("mcp__t__echo", {"text": "1"}).text == "1"
    open(os.path.join(state, "mutated"), "w").close()
    running.runner.restart_server("t")
    wait_for(lambda: running.runner.snapshot().servers[0].changed == ("mcp__t__echo",), 30)
    t, _ = in_thread(c.call, "mcp__t__echo", {"text": "2"})
    (p,) = running.pending()
    text = describe(pending_json(p))
    assert "upstream server t, tool echo" in text
    assert "its definition CHANGED since it was approved" in text
    assert "Also sends it to evil.example." in text
    assert 'annotations (untrusted): {"readOnlyHint": true}' in text
    items = menu_model(running.runner.snapshot())
    approve = next(i for i in items if i.text.startswith("Approve: mcp__t__echo"))
    assert approve.text.endswith("· changed since approved")
    servers = next(i for i in items if i.text.startswith("Servers"))
    assert servers.submenu[0].text == "t — ready · 11 tools · 1 changed since approved"
    running.runner.decide(p.id, "deny")
    t.join(60)


def test_an_http_server_that_is_not_there_says_why(start_bridge):
    port = free_port()
    running = start_bridge({"mcp_servers": {"h": {"url": f"http://127.0.0.1:{port}/mcp"}}})
    view = wait_for(
        lambda: (
            running.runner.snapshot().servers[0].state == "failed"
            and (running.runner.snapshot().servers[0])
        )
    )
    assert view.last_error == "HTTP: ConnectError: All connection attempts failed"
    r = running.client().call("mcp__h__anything")
    assert r.text == "tool 'mcp__h__anything' is not exposed by this bridge"


def test_a_tool_with_an_invalid_name_is_skipped_and_said_so(upstream, state):
    open(os.path.join(state, "odd"), "w").close()
    running = upstream(ALLOW)
    view = running.runner.snapshot().servers[0]
    assert view.skipped == ("has space: invalid tool name 'mcp__t__has space'",)
    assert view.tools == 10
    assert running.client().call("mcp__t__echo", {"text": "ok"}).text == "ok"


def test_the_page_shows_servers_and_upstream_details(start_bridge, state, request, tmp_path):
    browser = request.getfixturevalue("_chromium")  # test_browser's Chromium fixture
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.common.by import By

    servers = {"t": stdio_spec(state), "gone": {"command": str(tmp_path / "missing")}}
    running = start_bridge({"mcp_servers": servers}, control=True)
    ready(running)
    browser.get(running.runner.login_url())

    def row(name: str):
        def text(d) -> str:
            try:  # rows are rebuilt whenever a server's state changes
                return d.find_element(By.CSS_SELECTOR, f"#servers tr[data-server={name}]").text
            except (StaleElementReferenceException, NoSuchElementException):
                return ""

        return text

    _wait(browser, lambda d: "ready" in row("t")(d) and "10" in row("t")(d))
    _wait(browser, lambda d: "cannot start it" in row("gone")(d))

    agent = running.client("claude-code")
    t, out = in_thread(agent.call, "mcp__t__echo", {"text": "from the page"})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    assert card.find_element(By.CSS_SELECTOR, "pre.description").text == "Echo the text back."
    assert '"readOnlyHint": true' in card.find_element(By.CSS_SELECTOR, "pre.annotations").text
    assert "upstream server t · tool echo" in card.text
    card.find_element(By.XPATH, ".//button[text()='Approve']").click()
    t.join(60)
    assert out[0].text == "from the page"

    starts = len(lines(state, "starts"))

    def click_restart(d) -> bool:
        try:  # the rows are rebuilt when a server's state changes ("gone" keeps retrying)
            row = d.find_element(By.CSS_SELECTOR, "#servers tr[data-server=t]")
            row.find_element(By.XPATH, ".//button[text()='Restart']").click()
            return True
        except StaleElementReferenceException:
            return False

    _wait(browser, click_restart)
    wait_for(lambda: len(lines(state, "starts")) > starts, 30)


def test_http_tools_are_relisted_without_a_notification(
    start_bridge, http_upstream, state, monkeypatch
):
    from omp_a2a_bridge.server.upstream import manager as upstream

    monkeypatch.setattr(upstream, "PING_EVERY_S", 0.1)
    url, _ = http_upstream
    running = start_bridge({"mcp_servers": {"h": {"url": url}}})
    ready(running, "h")
    assert running.runner.snapshot().servers[0].tools == 10
    open(os.path.join(state, "mutated"), "w").close()  # changed, and nobody says so
    wait_for(lambda: running.runner.snapshot().servers[0].tools == 11, 60)


# -- what reaches the user's terminal ------------------------------------------------------------


def test_an_upstreams_hostile_stderr_and_tool_names_reach_the_log_rendered(
    env, tmp_path, serve_process
):
    """A `serve` terminal shows an upstream's exit reason (its last stderr line) and skipped tool
    names; escape sequences in them arrive escaped, never raw."""
    from ..conftest import write_config

    evil = "printf 'ok\\n\\033]0;PWNED\\007\\033[31mred\\033[0m\\n' >&2; exit 3"
    write_config(env["config"], {"mcp_servers": {"evil": {"command": "sh", "args": ["-c", evil]}}})
    log = tmp_path / "serve.log"
    with open(log, "w") as err:
        proc, _port = serve_process(stderr=err)
    try:
        text = wait_for(lambda: "retrying" in (t := log.read_text()) and t, timeout=60)
    finally:
        proc.terminate()
        proc.wait(10)
    assert "upstream evil: the server exited with code 3" in text
    assert "\x1b" not in text and "\x07" not in text
    assert "\\x1b]0;PWNED\\x07\\x1b[31mred" in text  # shown, so the user sees what it tried

"""Real MCP clients against a real bridge on port 0 (issue 17).

Each client is the published package, installed once into a cache (see ``tools.py``): the
official conformance suite, the Inspector CLI, the TypeScript SDK (current and a pre-2025-11-25
release), the Python SDK (2.x, newest 1.x and a pre-2025-11-25 1.x), mcp-remote over stdio, and
Claude Code and Gemini CLI driven by the exact commands ``a2a-bridge client-config`` prints.
Teardown races are measured in loops: "time out, then leave" 40 times per SDK, 0 errors.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from omp_a2a_bridge.server.present import clientconfig
from omp_a2a_bridge.server.present.clientconfig import ClientKind

from ..conftest import Running
from ..support.helpers import TOKEN, wait_for
from . import tools
from .authproxy import AuthProxy
from .conftest import Peers

HERE = Path(__file__).resolve().parent
CLIENTS = HERE / "clients"
LOOPS = 40
NOT_FOUND_TEXT = "hello.txt: not found"


def _write_args(running: Running) -> dict[str, str]:
    return {"path": os.path.join(running.env["root"], "out.txt"), "content": "approved"}


def _approve_next(running: Running) -> threading.Thread:
    """Approve the next call that waits, like the human at the tray would."""

    def approve() -> None:
        [p] = running.pending(1, timeout=60)
        running.runner.decide(p.id, "approve")

    t = threading.Thread(target=approve, daemon=True)
    t.start()
    return t


# -- the official conformance suite -------------------------------------------------------------


def _conformance(peers: Peers, bridge: Running, results: Path, package: str, *args: str) -> str:
    """Run the official suite (``package`` from the interop cache) against the bridge; its
    summary. The suite cannot send a header, so a loopback proxy adds the bearer token (the
    bridge's auth rules are unchanged); Host and Origin pass through for the DNS-rebinding
    scenario."""
    with AuthProxy(bridge.port, TOKEN) as proxy:
        argv = [tools.npm_bin(package, "conformance"), "server", "--url", proxy.url, *args]
        r = peers.run([*argv, "-o", str(results)], timeout=300)
    summary = r.stdout[r.stdout.find("=== SUMMARY ===") :]
    assert r.returncode == 0, summary or r.stdout[-3000:] + r.stderr[-3000:]
    return summary


def test_conformance_suite_matches_the_baseline(peers: Peers, peer_bridge: Running, tmp_path):
    """Every scenario passes except the baseline's, each a feature the bridge lacks on purpose."""
    baseline = str(HERE / "conformance-baseline.yml")
    summary = _conformance(
        peers, peer_bridge, tmp_path / "results", "conformance", "--expected-failures", baseline
    )
    for scenario in ("server-initialize", "ping", "tools-list", "dns-rebinding-protection"):
        assert re.search(rf"✓ {scenario}: \d+ passed, 0 failed", summary), summary


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28"])
def test_conformance_requirements_of_each_era(
    peers: Peers, peer_bridge: Running, tmp_path, revision
):
    """Both eras on one endpoint (§ 9): the requirement set each revision froze at its release,
    every gap in a per-era baseline with its reason."""
    baseline = str(HERE / f"conformance-baseline-{revision}.yml")
    args = ("--requirements", revision, "--expected-failures", baseline)
    summary = _conformance(peers, peer_bridge, tmp_path / "results", "conformance-eras", *args)
    assert re.search(r"✓ tools-list: \d+ passed, 0 failed", summary), summary


# -- the Inspector CLI ---------------------------------------------------------------------------


def _inspector(peers: Peers, running: Running, *args: str, token: str = TOKEN) -> Any:
    argv = [tools.npm_bin("inspector", "inspector"), "--cli", running.runner.url]
    argv += ["--transport", "http", "--header", f"Authorization: Bearer {token}", *args]
    return peers.run(argv, timeout=120)


def test_inspector_lists_calls_gets_approval_and_times_out(peers: Peers, peer_bridge: Running):
    r = _inspector(peers, peer_bridge, "--method", "tools/list")
    assert r.returncode == 0, r.stdout + r.stderr
    names = [t["name"] for t in json.loads(r.stdout)["tools"]]
    assert names == ["read", "ls", "find", "grep", "write", "edit", "bash"]

    r = _inspector(
        peers, peer_bridge, "--method", "tools/call", "--tool-name", "read",
        "--tool-arg", "path=hello.txt",
    )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "hello from the bridge" in json.loads(r.stdout)["content"][0]["text"]

    # A prompt-tier call: held until the human approves, then it runs.
    approver = _approve_next(peer_bridge)
    args = _write_args(peer_bridge)
    r = _inspector(
        peers, peer_bridge, "--method", "tools/call", "--tool-name", "write",
        "--tool-arg", f"path={args['path']}", "content=approved",
    )  # fmt: skip
    approver.join(60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["isError"] is False
    assert Path(args["path"]).read_text() == "approved"

    # Nobody decides: the approval times out (approval.timeout_s = 3) with a clear result.
    r = _inspector(
        peers, peer_bridge, "--method", "tools/call", "--tool-name", "write",
        "--tool-arg", f"path={args['path']}", "content=never",
    )  # fmt: skip
    out = json.loads(r.stdout)
    assert out["isError"] is True and out["content"][0]["text"] == "approval timed out after 3 s"
    assert Path(args["path"]).read_text() == "approved"
    sessions = peer_bridge.runner.snapshot().sessions
    assert {s.protocol for s in sessions} <= {"2025-11-25"}


# -- the TypeScript SDK ---------------------------------------------------------------------------


TS = {"current": ("ts-sdk", "2025-11-25"), "pre-2025-11-25": ("ts-sdk-old", "2025-06-18")}


def _ts_argv(running: Running, which: str, *args: str) -> list[str]:
    sdk = tools.npm_package_dir(TS[which][0], "@modelcontextprotocol/sdk")
    node = os.path.join(tools.node_bin_dir(), "node")
    return [node, str(CLIENTS / "ts_client.mjs"), sdk, running.runner.url, TOKEN, *args]


def _ts(peers: Peers, running: Running, which: str, *args: str) -> dict[str, Any]:
    return peers.json_line(_ts_argv(running, which, *args))


@pytest.mark.parametrize("which", list(TS))
def test_typescript_sdk_connects_and_tears_down_cleanly(peers, peer_bridge, which):
    out = _ts(peers, peer_bridge, which, "basic")
    assert out["crashes"] == [] and out["logged"] == [], out
    [res] = out["results"]
    assert res["protocol"] == TS[which][1]  # an older client gets its own version back
    assert res["tools"][0] == "read" and "hello from the bridge" in res["read"]

    # Time out (the SDK sends notifications/cancelled), then leave: 40 times, 0 errors.
    out = peers.json_lines_at_once(
        lambda n: _ts_argv(peer_bridge, which, "timeout-leave", str(n), "20"), LOOPS
    )
    assert out["results"] == ["McpError"] * LOOPS, out
    assert (out["crashes"], out["logged"]) == ([], []), out

    # Leaving at the very instant of the timeout: the only reports allowed are the SDK aborting
    # its own still-unsent cancellation at close (it does the same against the SDK's own
    # server); nothing the bridge sent, e.g. "Received a response for an unknown message ID".
    out = peers.json_lines_at_once(
        lambda n: _ts_argv(peer_bridge, which, "timeout-leave", str(n)), 20
    )
    assert out["crashes"] == [], out
    own_aborts = [m for m in out["logged"] if m.endswith("This operation was aborted")]
    assert own_aborts == out["logged"], out
    wait_for(lambda: peer_bridge.runner.snapshot().pending == (), timeout=60)


# -- the Python SDK -------------------------------------------------------------------------------


PY = {
    "2.x": (None, "2026-07-28"),  # mode="auto" finds the modern era (§ 9)
    "newest-1.x": ("py-mcp-1.30.0", "2025-11-25"),
    "pre-2025-11-25": ("py-mcp-1.22.0", "2025-06-18"),
}


@pytest.mark.parametrize("which", list(PY))
def test_python_sdk_connects_and_tears_down_cleanly(peers, peer_bridge, which):
    venv, protocol = PY[which]
    python = tools.py_python(venv) if venv else sys.executable
    base = [python, "-W", "ignore", str(CLIENTS / "py_client.py"), peer_bridge.runner.url, TOKEN]
    out = peers.json_line([*base, "basic"])
    assert out["crashes"] == [] and out["logged"] == [], out
    [res] = out["results"]
    assert res["protocol"] == protocol
    assert res["tools"][0] == "read" and "hello from the bridge" in res["read"]

    out = peers.json_lines_at_once(lambda n: [*base, "timeout-leave", str(n)], LOOPS)
    assert len(out["results"]) == LOOPS and set(out["results"]) <= {"McpError", "MCPError"}, out
    assert (out["crashes"], out["logged"]) == ([], []), out
    done = wait_for(
        lambda: (
            len(
                d := [
                    r for r in peer_bridge.audit() if r["phase"] == "done" and r["tool"] == "write"
                ]
            )
            == LOOPS
            and d
        ),
        timeout=10,
    )
    assert {r["outcome"] for r in done} == {"cancelled"}


# -- mcp-remote over stdio (Claude Desktop's recipe) -------------------------------------------


def test_mcp_remote_over_stdio_with_the_claude_desktop_recipe(peers: Peers, peer_bridge: Running):
    recipe = clientconfig.recipe(ClientKind.CLAUDE_DESKTOP, peer_bridge.runner.url, TOKEN)
    server = json.loads(recipe.text)["mcpServers"]["omp-host"]
    assert server["args"][:2] == ["-y", "mcp-remote"]
    argv = [tools.npm_bin("mcp-remote", "mcp-remote"), *server["args"][2:]]
    env = dict(peers.env, **server["env"])
    proc = subprocess.Popen(
        argv, env=env, cwd=peers.home, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdin is not None and proc.stdout is not None

        def rpc(msg: dict[str, Any]) -> dict[str, Any] | None:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(json.dumps(msg) + "\n")
            proc.stdin.flush()
            if "id" not in msg:
                return None
            while True:
                line = proc.stdout.readline()
                assert line, "mcp-remote closed its stdout"
                reply = json.loads(line)
                if reply.get("id") == msg["id"]:
                    return reply

        init = rpc(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "stdio-desktop", "version": "1"}}}
        )  # fmt: skip
        assert init is not None and init["result"]["protocolVersion"] == "2025-06-18"
        rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
        listing = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert listing is not None and listing["result"]["tools"][0]["name"] == "read"
        call = rpc(
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
             "params": {"name": "read", "arguments": {"path": "hello.txt"}}}
        )  # fmt: skip
        assert call is not None and "hello from the bridge" in call["result"]["content"][0]["text"]
        # The stdio client's version reached the bridge (mcp-remote may also keep a probe session).
        sessions = peer_bridge.runner.snapshot().sessions
        assert "2025-06-18" in {s.protocol for s in sessions}, sessions
    finally:
        proc.terminate()
        proc.wait(10)


# -- Claude Code and Gemini CLI: the printed recipes, run for real ------------------------------


def _mcp_list(peers: Peers, kind: ClientKind, exe: str, running: Running) -> str:
    recipe = clientconfig.recipe(kind, running.runner.url, TOKEN)
    env = dict(peers.env, PATH=os.pathsep.join([str(Path(exe).parent), peers.env["PATH"]]))
    if recipe.env is not None:
        env["A2A_BRIDGE_TOKEN"] = TOKEN
    added = peers.run(["bash", "-c", recipe.text], env=env)
    assert added.returncode == 0, added.stdout + added.stderr
    listed = peers.run([exe, "mcp", "list"], env=env, timeout=180)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return listed.stdout + listed.stderr


def test_claude_code_mcp_list_says_connected(peers: Peers, peer_bridge: Running):
    out = _mcp_list(
        peers, ClientKind.CLAUDE_CODE, tools.npm_bin("claude-code", "claude"), peer_bridge
    )
    assert re.search(r"omp-host: http://127\.0\.0\.1:\d+/ \(HTTP\) - ✔ Connected", out), out


def test_gemini_cli_mcp_list_says_connected(peers: Peers, peer_bridge: Running):
    # A fresh home is an untrusted folder, where Gemini CLI disables every MCP server.
    peers.env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"
    out = _mcp_list(peers, ClientKind.GEMINI, tools.npm_bin("gemini", "gemini"), peer_bridge)
    assert re.search(r"omp-host: http://127\.0\.0\.1:\d+/ \(http\) - Connected", out), out
    sessions = peer_bridge.runner.snapshot().sessions
    assert sessions == () or {s.protocol for s in sessions} == {"2025-06-18"}


# -- a wrong token shows up as a wrong token ------------------------------------------------------


def test_wrong_token_is_reported_as_such_by_inspector_mcp_remote_and_claude_code(
    peers: Peers, peer_bridge: Running
):
    """OAuth-capable clients turn a 401 into OAuth discovery, which then fails on its own terms
    (``Dynamic Client Registration rejected (HTTP 401)``); each prints the 401 body, whose
    ``data`` says what is really wrong. Nothing else about auth changes (no OAuth endpoints)."""
    hint = "wrong or missing bearer token"
    r = _inspector(peers, peer_bridge, "--stored-auth-only", "--method", "tools/list", token="bad")
    assert r.returncode != 0 and hint in r.stdout + r.stderr, r.stdout + r.stderr

    remote = peers.run(
        [
            tools.npm_bin("mcp-remote", "mcp-remote"),
            peer_bridge.runner.url,
            "--header",
            "Authorization:Bearer bad",
        ],
        timeout=60,
    )
    assert remote.returncode != 0 and hint in remote.stderr, remote.stderr[-3000:]

    claude = tools.npm_bin("claude-code", "claude")
    recipe = clientconfig.recipe(ClientKind.CLAUDE_CODE, peer_bridge.runner.url, "bad")
    assert (
        peers.run(["bash", "-c", recipe.text.replace("claude ", f"{claude} ", 1)]).returncode == 0
    )
    listed = peers.run([claude, "mcp", "list"], timeout=180)
    assert "Failed to connect" in listed.stdout and hint in listed.stdout, listed.stdout
    assert peer_bridge.runner.snapshot().sessions == ()


# -- client-config --install: the file the real client then reads ------------------------------


def _installed_and_listed(
    peers: Peers, start_bridge, kind: ClientKind, rel: str, before: str, exe: str
) -> tuple[str, str]:
    """``client-config --for KIND --install`` into a home that already has another server,
    then the real client's ``mcp list``: (what the file holds, what the client printed)."""
    running = start_bridge(control=True)
    path = peers.home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(before)
    env = dict(peers.env, PATH=os.pathsep.join([str(Path(exe).parent), peers.env["PATH"]]))
    env.update(
        A2A_BRIDGE_CONFIG=running.env["config"],
        A2A_BRIDGE_RUNTIME_DIR=running.env["runtime"],
        A2A_BRIDGE_AUDIT=running.env["audit"],
        A2A_BRIDGE_TOKEN=TOKEN,
    )
    server = [sys.executable, "-m", "omp_a2a_bridge.server"]
    done = peers.run([*server, "client-config", "--for", kind.value, "--install"], env=env)
    assert done.returncode == 0 and "omp-host added" in done.stdout, done.stdout + done.stderr
    assert path.stat().st_mode & 0o777 == 0o600
    env.pop("A2A_BRIDGE_TOKEN")  # the client reads the token from its file, nothing else
    listed = peers.run([exe, "mcp", "list"], env=env, timeout=180)
    assert listed.returncode == 0, listed.stdout + listed.stderr
    return path.read_text(), listed.stdout + listed.stderr


def test_claude_code_lists_the_installed_config_as_connected(peers: Peers, start_bridge):
    before = json.dumps({"numStartups": 2, "mcpServers": {"docs": {"command": "false"}}})
    text, out = _installed_and_listed(
        peers, start_bridge, ClientKind.CLAUDE_CODE, ".claude.json", before,
        tools.npm_bin("claude-code", "claude"),
    )  # fmt: skip
    assert re.search(r"omp-host: http://127\.0\.0\.1:\d+/ \(HTTP\) - ✔ Connected", out), out
    assert "docs: false" in out  # the other server is still there
    assert json.loads(text)["mcpServers"]["docs"] == {"command": "false"}


def test_gemini_cli_lists_the_installed_config_as_connected(peers: Peers, start_bridge):
    peers.env["GEMINI_CLI_TRUST_WORKSPACE"] = "true"  # else: "Disabled" (an untrusted folder)
    before = json.dumps({"mcpServers": {"docs": {"command": "false"}}})
    text, out = _installed_and_listed(
        peers, start_bridge, ClientKind.GEMINI, ".gemini/settings.json", before,
        tools.npm_bin("gemini", "gemini"),
    )  # fmt: skip
    assert re.search(r"omp-host: http://127\.0\.0\.1:\d+/ \(http\) - Connected", out), out
    assert "docs: false" in out
    assert json.loads(text)["mcpServers"]["docs"] == {"command": "false"}


def test_codex_lists_the_installed_config_with_its_bearer_token(peers: Peers, start_bridge):
    """``codex mcp list`` reads the file without connecting (Codex connects only in a session,
    which needs an OpenAI login): it must list our server, with its URL and a bearer token."""
    before = '# mine\nmodel = "o3"\n\n[mcp_servers.docs]\ncommand = "false"\n'
    text, out = _installed_and_listed(
        peers, start_bridge, ClientKind.CODEX, ".codex/config.toml", before,
        tools.npm_bin("codex", "codex"),
    )  # fmt: skip
    assert re.search(r"omp-host\s+http://127\.0\.0\.1:\d+/\s+-\s+enabled\s+Bearer token", out), out
    assert re.search(r"docs\s+false", out), out
    assert text.startswith("# mine\n")


def _codex_app_server(peers: Peers, exe: str, requests: list[dict[str, Any]]) -> list[dict]:
    """Codex's own app server over stdio (JSON-RPC lines, no OpenAI login needed for MCP
    status): ``initialize``, then ``requests`` in order; the response to each."""
    p = subprocess.Popen(
        [exe, "app-server"],
        env=peers.env,
        cwd=peers.home,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert p.stdin is not None and p.stdout is not None
    timer = threading.Timer(240, p.kill)  # a hung client fails the test instead of hanging it
    timer.start()
    try:
        answers = []
        first = {"method": "initialize", "params": {"clientInfo": {"name": "t", "version": "1"}}}
        for i, req in enumerate([first, *requests], start=1):
            p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": i, **req}) + "\n")
            p.stdin.flush()
            if i == 1:
                p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "initialized"}) + "\n")
                p.stdin.flush()
            while True:
                line = p.stdout.readline()
                assert line, (p.poll(), p.stderr.read()[-3000:] if p.poll() is not None else "")
                msg = json.loads(line)
                if msg.get("id") == i and "method" not in msg:
                    break
            assert "error" not in msg, msg
            answers.append(msg["result"])
        return answers[1:]
    finally:
        timer.cancel()
        p.stdin.close()
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(10)


def test_codex_connects_with_the_installed_config_and_lists_the_bridges_tools(
    peers: Peers, start_bridge
):
    """Codex says nothing of a connection in ``mcp list`` (it connects in a session, which needs
    an OpenAI login), but its app server's ``mcpServerStatus/list`` connects to each server it
    is configured with: the file ``--install`` wrote takes Codex to the bridge, through the
    bearer token in it, and back with the bridge's tools. With a wrong token it reports the
    401's own words."""
    exe = tools.npm_bin("codex", "codex")
    before = '# mine\nmodel = "o3"\n'
    _installed_and_listed(peers, start_bridge, ClientKind.CODEX, ".codex/config.toml", before, exe)
    peers.env.pop("A2A_BRIDGE_TOKEN", None)
    (status,) = _codex_app_server(
        peers, exe, [{"method": "mcpServerStatus/list", "params": {"serverName": "omp-host"}}]
    )
    (server,) = [s for s in status["data"] if s["name"] == "omp-host"]
    assert server["serverInfo"]["name"] == "omp-a2a-bridge", server
    assert server["authStatus"] == "bearerToken" and not server.get("toolsError"), server
    assert {"read", "ls", "find", "grep", "write", "edit", "bash"} <= set(server["tools"])
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+", server["httpOrigin"])
    # A wrong token in the same file: no tools, and the bridge's hint in Codex's error.
    config = peers.home / ".codex" / "config.toml"
    config.write_text(config.read_text().replace(TOKEN, "w" * 43))
    (status,) = _codex_app_server(
        peers, exe, [{"method": "mcpServerStatus/list", "params": {"serverName": "omp-host"}}]
    )
    (server,) = [s for s in status["data"] if s["name"] == "omp-host"]
    assert server["tools"] == {} and server["serverInfo"] is None, server
    assert "wrong or missing bearer token" in server["toolsError"], server


def test_claude_code_on_the_remote_side_connects_through_a_tunnel(
    peers: Peers, start_bridge, ssh_server, cli
):
    """``connect --client claude-code --install``: the real Claude Code, run with the remote
    side's home (where the config was written over ssh), reaches the bridge through the
    tunnel and says Connected."""
    from ..support.sshd import free_port

    running = start_bridge(control=True)
    rport = free_port()
    r = cli("connect", "--client", "claude-code", "--install", "--remote-port", str(rport),
            ssh_server.target)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    claude = tools.npm_bin("claude-code", "claude")
    env = dict(peers.env, HOME=str(ssh_server.home))
    env.pop("A2A_BRIDGE_TOKEN", None)
    listed = peers.run([claude, "mcp", "list"], env=env, cwd=ssh_server.home, timeout=180)
    out = listed.stdout + listed.stderr
    assert f"omp-host: http://127.0.0.1:{rport}/ (HTTP) - ✔ Connected" in out, out
    assert running.runner.tunnels()[0].state == "up"

"""Tunnels the app keeps up, against a real OpenSSH server on loopback (tests/support/sshd.py).

The "remote machine" is this one reached through sshd: its ``$HOME`` is a temporary folder,
and the remote-forwarded port listens on this machine's loopback, so an MCP client "on the
remote side" is simply a client of ``127.0.0.1:<remote port>``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import tomllib

import pytest

from omp_a2a_bridge.server.vocab import TunnelState

from ..support.helpers import TOKEN, Mcp, wait_for
from ..support.sshd import CmdlineScanner, free_port, parent_of, tunnel_pids

UP_S = 90  # generous: ssh's handshake under a loaded 2-core machine


def _tunnel(running, name: str = "testremote"):
    found = [t for t in running.runner.tunnels() if t.name == name]
    return found[0] if found else None


def _up(running, name: str = "testremote"):
    return wait_for(
        lambda: (t := _tunnel(running, name)) is not None and t.state is TunnelState.UP and t,
        UP_S,
        0.05,
    )


def _remote_client_works(port: int, token: str = TOKEN) -> bool:
    """An MCP client on the remote side: initialize and list tools through the forward."""
    c = Mcp(port, token=token)
    try:
        assert c.initialize().status == 200
        listed = c.rpc("tools/list")
        return listed.status == 200 and any(t["name"] == "read" for t in listed.result["tools"])
    finally:
        c.close()


@pytest.fixture
def tunnel_bridge(start_bridge, ssh_server):
    return start_bridge(control=True)


def test_connect_brings_a_forward_up_that_a_remote_client_reaches_with_the_token(
    tunnel_bridge, ssh_server, cli
):
    rport = free_port()
    r = cli("connect", "--remote-port", str(rport), ssh_server.target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "up" in r.stdout and f"http://127.0.0.1:{rport}/" in r.stdout
    t = _up(tunnel_bridge)
    assert (t.target, t.remote_port, t.local_port) == ("testremote", rport, tunnel_bridge.port)
    assert _remote_client_works(rport)
    wrong = Mcp(rport, token="wrong-token-" + "x" * 30)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    assert wrong.request(body=init).status == 401
    wrong.close()
    # saved in the config, listed by `tunnels` and in the snapshot / status JSON
    with open(tunnel_bridge.env["config"]) as f:
        saved = json.load(f)["tunnels"]
    assert saved == [{"name": "testremote", "target": "testremote", "remote_port": rport}]
    listed = cli("tunnels", "--json")
    assert json.loads(listed.stdout)["tunnels"][0]["state"] == "up"
    status = json.loads(cli("status", "--json").stdout)
    assert status["tunnels"][0]["remote_url"] == f"http://127.0.0.1:{rport}/"
    assert "testremote  up" in cli("tunnels").stdout
    assert "tunnels: 1 of 1 up" in cli("status").stdout


def test_killing_ssh_is_noticed_and_the_tunnel_comes_back(tunnel_bridge, ssh_server):
    rport = free_port()
    states: list[tuple[TunnelState, str | None]] = []
    tunnel_bridge.runner.subscribe(
        lambda snap: states.extend((t.state, t.last_error) for t in snap.tunnels)
    )
    tunnel_bridge.runner.add_tunnel("box", ssh_server.target, rport)
    _up(tunnel_bridge, "box")
    (pid,) = tunnel_pids(rport)
    assert parent_of(pid) == os.getpid()  # the app's own child
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (TunnelState.DOWN, "ssh was killed by signal 9") in states, UP_S)
    wait_for(lambda: states[-1][0] is TunnelState.UP, UP_S, 0.05)
    t = _tunnel(tunnel_bridge, "box")
    # 2 runs, or 3 when sshd had not yet released the port of the killed one after 1 s
    assert t.attempts >= 2 and t.last_error is None
    new = tunnel_pids(rport)
    assert len(new) == 1 and new[0] != pid
    assert _remote_client_works(rport)


def test_a_busy_remote_port_is_reported_down_with_ssh_words(tunnel_bridge, ssh_server, cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        rport = taken.getsockname()[1]
        r = cli("connect", "--name", "busy", "--remote-port", str(rport), ssh_server.target)
        assert r.returncode == 1
        assert "down" in r.stdout and "remote port forwarding failed" in r.stdout, r.stdout
        t = _tunnel(tunnel_bridge, "busy")
        assert t.state is not TunnelState.UP
        status = cli("status").stdout  # down, or already trying again (connecting)
        assert re.search(r"busy (down|connecting): Error: remote port forwarding failed", status)
        assert "remote port forwarding failed" in (t.last_error or "")
        assert cli("tunnels", "--rm", "busy").returncode == 0
    assert _tunnel(tunnel_bridge, "busy") is None
    wait_for(lambda: not tunnel_pids(rport), 30)


def test_a_changed_bridge_port_is_followed(tunnel_bridge, start_bridge, ssh_server):
    """The live port moves (here: to a second bridge's): the forward restarts on it and the
    remote side's URL stays the same."""
    rport = free_port()
    tunnel_bridge.runner.add_tunnel("moving", ssh_server.target, rport)
    _up(tunnel_bridge, "moving")
    other = start_bridge()
    bridge = tunnel_bridge.runner.bridge

    def move() -> None:
        bridge.port = other.port
        bridge.tunnels.follow_port(other.port)

    tunnel_bridge.runner.call(move)
    wait_for(
        lambda: (
            (t := _tunnel(tunnel_bridge, "moving")).local_port == other.port
            and t.state is TunnelState.UP
        ),
        UP_S,
        0.05,
    )
    assert _remote_client_works(rport)
    assert other.runner.snapshot().sessions  # the session is on the other bridge now
    assert not tunnel_bridge.runner.snapshot().sessions


def test_stopping_the_bridge_leaves_no_ssh(start_bridge, ssh_server):
    rport = free_port()
    running = start_bridge(
        {"tunnels": [{"name": "saved", "target": ssh_server.target, "remote_port": rport}]}
    )
    _up(running, "saved")  # a saved tunnel starts with the app
    assert len(tunnel_pids(rport)) == 1
    running.runner.stop()
    wait_for(lambda: not tunnel_pids(rport), 30)


def test_connect_without_a_bridge_saves_it_for_the_next_start(env, ssh_server, cli, start_bridge):
    rport = free_port()
    r = cli("connect", "--name", "later", "--remote-port", str(rport), ssh_server.target)
    assert r.returncode == 0 and "starts with the bridge" in r.stdout, r.stdout + r.stderr
    with open(env["config"]) as f:
        tunnels = json.load(f)["tunnels"]
    # start_bridge writes its own config: carry the saved entry over, as a restart would
    running = start_bridge({"tunnels": tunnels})
    _up(running, "later")
    assert _remote_client_works(rport)


# -- --install: the remote client's config, the token only through ssh's stdin ------------------


def _remote_file(ssh_server, rel: str) -> str:
    return str(ssh_server.home / rel)


@pytest.mark.parametrize(
    ("client", "rel", "existing"),
    [
        (
            "claude-code",
            ".claude.json",
            '{"numStartups": 3, "mcpServers": {"docs": {"type": "stdio", "command": "docs"}}}',
        ),
        (
            "gemini",
            ".gemini/settings.json",
            '{"theme": "dark", "mcpServers": {"docs": {"command": "docs"}}}',
        ),
        (
            "codex",
            ".codex/config.toml",
            '# mine\nmodel = "o3"\n[mcp_servers.docs]\ncommand = "d"\n',
        ),
    ],
)
def test_install_writes_a_private_merged_config_and_no_command_line_shows_the_token(
    tunnel_bridge, ssh_server, cli, client, rel, existing
):
    path = _remote_file(ssh_server, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(existing)
    os.chmod(path, 0o644)
    rport = free_port()
    added = cli("machines", "add", "testremote", "--json")  # the tunnel's machine: its own token
    assert added.returncode == 0, added.stderr
    mtoken = json.loads(added.stdout)["token"]
    assert mtoken != TOKEN
    with CmdlineScanner(mtoken) as scan:
        r = cli(
            "connect", "--client", client, "--install", "--remote-port", str(rport),
            ssh_server.target,
        )  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert scan.found == [], scan.found
    assert scan.scans > 3 and scan.seen_ssh > 0  # it looked while ssh ran
    assert scan.seen_writes > 0  # ... and while the ssh carrying the token ran, there and here
    assert TOKEN not in r.stdout + r.stderr and mtoken not in r.stdout + r.stderr
    assert f"testremote:~/{rel}:" in r.stdout and "omp-host added" in r.stdout
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        text = f.read()
    if client == "codex":
        doc = tomllib.loads(text)
        assert text.startswith("# mine\n") and doc["model"] == "o3"
        entry = doc["mcp_servers"]["omp-host"]
        assert entry["http_headers"] == {"Authorization": f"Bearer {mtoken}"}
    else:
        doc = json.loads(text)
        assert doc.get("numStartups", 3) == 3 and doc.get("theme", "dark") == "dark"
        entry = doc["mcpServers"]["omp-host"]
        assert entry["headers"] == {"Authorization": f"Bearer {mtoken}"}
    assert doc["mcpServers" if client != "codex" else "mcp_servers"]["docs"]
    assert entry.get("url", entry.get("httpUrl")) == f"http://127.0.0.1:{rport}/"
    leftovers = [n for n in os.listdir(os.path.dirname(path)) if ".a2a-" in n]
    assert leftovers == []
    # what the file says reaches the bridge through the tunnel, as machine testremote
    _up(tunnel_bridge)
    assert _remote_client_works(rport, mtoken)
    assert [x.machine for x in tunnel_bridge.runner.snapshot().sessions] == ["testremote"]
    # the same again changes nothing
    again = cli("tunnels")  # still listed
    assert "testremote" in again.stdout


def test_install_refuses_an_unparseable_remote_file_and_leaves_it(tunnel_bridge, ssh_server, cli):
    path = _remote_file(ssh_server, ".claude.json")
    with open(path, "w") as f:
        f.write("{half a file")
    r = cli("connect", "--client", "claude-code", "--install", ssh_server.target)
    assert r.returncode != 0
    assert "left untouched" in r.stderr and "not valid JSON" in r.stderr, r.stderr
    with open(path) as f:
        assert f.read() == "{half a file"


def test_install_without_a_client_is_refused(tunnel_bridge, ssh_server, cli):
    r = cli("connect", "--install", ssh_server.target)
    assert r.returncode != 0 and "--install needs --client" in r.stderr
    assert _tunnel(tunnel_bridge) is None


def test_bad_connect_arguments_are_one_clear_line(tunnel_bridge, cli):
    r = cli("connect", "--name", "x", "--", "-oProxyCommand=touch /tmp/pwned")
    assert r.returncode != 0 and "ssh target" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    r = cli("connect", "--remote-port", "0", "me@host")
    assert r.returncode != 0 and "remote_port" in r.stderr
    assert tunnel_bridge.runner.tunnels() == ()


# -- the same actions in process and over HTTP -----------------------------------------------------


@pytest.fixture(params=["in process", "over HTTP"])
def both(request, tunnel_bridge):
    from omp_a2a_bridge.server.control.client import ControlClient

    runner = tunnel_bridge.runner
    api = runner if request.param == "in process" else ControlClient(runner.control, timeout=150)
    return tunnel_bridge, api


def test_tunnel_actions_behave_the_same_in_process_and_over_http(both, ssh_server):
    from omp_a2a_bridge.server.api import BridgeError

    running, api = both
    rport = free_port()
    api.add_tunnel("m1", ssh_server.target, rport, "generic")
    _up(running, "m1")
    assert api.reconnect_tunnel("m1") is True
    wait_for(
        lambda: (t := _tunnel(running, "m1")).attempts >= 2 and t.state is TunnelState.UP,
        UP_S,
        0.05,
    )
    assert api.reconnect_tunnel("nope") is False
    line = api.install_client("m1")
    assert line == "testremote:~/.config/omp-a2a-bridge/mcp.json: mcpServers.omp-host added"
    again = api.install_client("m1")
    assert again.endswith("already up to date")
    with pytest.raises(BridgeError, match="no tunnel named"):
        api.install_client("nope")
    api.add_tunnel("bare", ssh_server.target, free_port())
    with pytest.raises(BridgeError, match="names no client"):
        api.install_client("bare")
    with pytest.raises(BridgeError, match="ssh target"):
        api.add_tunnel("bad", "-oProxyCommand=x")
    assert api.remove_tunnel("m1") is True
    assert api.remove_tunnel("m1") is False
    assert [t.name for t in running.runner.tunnels()] == ["bare"]
    wait_for(lambda: not tunnel_pids(rport), 30)


def test_the_command_line_scan_would_see_a_token():
    """The scan above can fail: a process that has the token on its command line is found."""
    import subprocess

    with CmdlineScanner(TOKEN) as scan:
        proc = subprocess.Popen(["sh", "-c", "sleep 3", TOKEN])
        wait_for(lambda: scan.found, 30)
        proc.wait(30)
    assert TOKEN in scan.found[0]


def test_no_ssh_program_is_a_down_tunnel_with_the_reason(start_bridge, tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    running = start_bridge(control=True)
    monkeypatch.setenv("PATH", str(empty))  # ssh is looked up in the environment it gets
    running.runner.add_tunnel("nossh", "me@host", free_port())
    t = wait_for(
        lambda: (t := _tunnel(running, "nossh")).state is TunnelState.DOWN and t, UP_S, 0.05
    )
    assert t.last_error == "cannot run ssh: No such file or directory"
    assert running.runner.remove_tunnel("nossh") is True


def test_connecting_again_keeps_a_working_forward(tunnel_bridge, ssh_server, cli):
    rport = free_port()
    args = ("connect", "--remote-port", str(rport), "--client", "claude-code", ssh_server.target)
    assert cli(*args).returncode == 0
    (pid,) = tunnel_pids(rport)
    again = cli(*args, "--install")  # e.g. to write the client's config afterwards
    assert again.returncode == 0, again.stdout + again.stderr
    assert tunnel_pids(rport) == [pid]  # the same ssh: nothing dropped
    assert _tunnel(tunnel_bridge).attempts == 1


def test_install_for_a_new_machine_enrolls_it_with_its_own_token(tunnel_bridge, ssh_server, cli):
    """Connecting a machine the bridge does not know gives it an identity (machines add): the
    remote config holds that machine's token, not the default one, and revoking the machine
    cuts exactly that client."""
    rport = free_port()
    r = cli("connect", "--client", "claude-code", "--install", "--remote-port", str(rport),
            ssh_server.target)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    listed = json.loads(cli("machines", "list", "--json").stdout)["machines"]
    assert [m["name"] for m in listed] == ["default", "testremote"]
    with open(_remote_file(ssh_server, ".claude.json")) as f:
        header = json.load(f)["mcpServers"]["omp-host"]["headers"]["Authorization"]
    mtoken = header.removeprefix("Bearer ")
    assert mtoken != TOKEN and mtoken not in r.stdout + r.stderr
    _up(tunnel_bridge)
    assert _remote_client_works(rport, mtoken)
    # machines list shows the machine's tunnel state beside its sessions and calls
    rows = json.loads(cli("machines", "list", "--json").stdout)["machines"]
    assert [(m["name"], m["tunnel"], m["sessions"]) for m in rows] == [
        ("default", None, 0),
        ("testremote", "up", 1),
    ]
    assert cli("machines", "list").stdout.splitlines()[2].split()[-1] == "up"
    assert cli("machines", "rm", "testremote").returncode == 0
    c = Mcp(rport, token=mtoken)
    try:
        assert c.rpc("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                     "clientInfo": {"name": "x", "version": "1"}}).status == 401  # fmt: skip
    finally:
        c.close()
    assert _remote_client_works(rport)  # the default token still works through it


def test_the_tunnel_signs_in_with_the_users_own_ssh_agent(
    start_bridge, ssh_server, tmp_path, monkeypatch
):
    """The user's agent (``SSH_AUTH_SOCK``) reaches the app's ssh as it reaches a terminal's:
    here the only key sshd accepts is held by an agent, and the client config names no key
    file, so the forward comes up only if the app's ssh asked that agent."""

    from ..support.sshd import start_agent

    key = ssh_server.client_config.parent / "user_key"  # the one authorized key
    agent, sock = start_agent(tmp_path, key)
    try:
        kept = [
            line
            for line in ssh_server.client_config.read_text().splitlines()
            if not line.strip().startswith(("IdentityFile", "IdentitiesOnly", "IdentityAgent"))
        ]
        ssh_server.client_config.write_text("\n".join(kept) + "\n")
        os.rename(key, str(key) + ".moved")  # nor a default key file ssh could fall back on
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        running = start_bridge(control=True)
        rport = free_port()
        running.runner.add_tunnel("agented", ssh_server.target, rport)
        _up(running, "agented")
        assert _remote_client_works(rport)
        assert running.runner.remove_tunnel("agented") is True
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(10)


def test_install_with_no_bridge_running_keeps_the_token_off_every_command_line(
    env, ssh_server, cli, start_bridge
):
    """``connect --install`` with no bridge: the CLI itself writes the remote config (not the
    bridge's worker), under the same /proc scan. ``--name default`` writes the bridge's own
    token, known before the run, so the scan can look for it; the next start brings the tunnel
    up and the file's token reaches the bridge through it."""
    from ..conftest import write_config

    write_config(env["config"], {"roots": [env["root"]], "port": free_port()})
    rport = free_port()
    with CmdlineScanner(TOKEN) as scan:
        r = cli("connect", "--name", "default", "--client", "generic", "--install",
                "--remote-port", str(rport), ssh_server.target)  # fmt: skip
    assert r.returncode == 0, r.stdout + r.stderr
    assert "starts with the bridge" in r.stdout and TOKEN not in r.stdout + r.stderr
    assert scan.found == [], scan.found
    assert scan.seen_writes > 0  # it looked while the token was on its way
    path = _remote_file(ssh_server, ".config/omp-a2a-bridge/mcp.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open(path) as f:
        entry = json.load(f)["mcpServers"]["omp-host"]
    assert entry == {
        "type": "http",
        "url": f"http://127.0.0.1:{rport}/",
        "headers": {"Authorization": f"Bearer {TOKEN}"},
    }
    with open(env["config"]) as f:
        saved = json.load(f)
    assert "machines" not in saved  # default is the bridge's own token: nothing enrolled
    running = start_bridge({"tunnels": saved["tunnels"]})
    _up(running, "default")
    assert _remote_client_works(rport)
    assert [x.machine for x in running.runner.snapshot().sessions] == ["default"]


def test_a_config_ssh_cannot_read_is_down_with_ssh_words_naming_the_users_file(
    tunnel_bridge, ssh_server
):
    """ssh reads a private copy of the config (server/tunnels/sshconfig.py); what it says about
    that copy names the user's own file, line numbers unchanged."""
    with open(ssh_server.client_config, "a") as f:
        f.write("  NoSuchOption yes\n")
    line = len(ssh_server.client_config.read_text().splitlines())
    tunnel_bridge.runner.add_tunnel("badcfg", ssh_server.target, free_port())
    t = wait_for(
        lambda: (t := _tunnel(tunnel_bridge, "badcfg")) and t.state is TunnelState.DOWN and t,
        UP_S,
        0.05,
    )
    assert str(ssh_server.client_config) in t.last_error, t.last_error
    assert "a2a-bridge-ssh-" not in t.last_error  # never the copy's name
    assert t.last_error.endswith(f"line {line}: Bad configuration option: nosuchoption")

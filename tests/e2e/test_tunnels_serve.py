"""Tunnels with ``a2a-bridge serve`` as a real process and a real sshd: a saved tunnel comes up
with the app, goes away with it (no orphan ssh, also when the app is killed), and after a
restart on another port the remote side's URL still reaches the bridge."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess

from ..conftest import write_config
from ..support.helpers import TOKEN, Mcp, stop_process, wait_for
from ..support.sshd import free_port, parent_of, tunnel_pids

UP_S = 120


def _reaches(port: int) -> bool:
    try:
        c = Mcp(port, token=TOKEN)
        try:
            return c.initialize().status == 200
        finally:
            c.close()
    except (OSError, AssertionError):
        return False


def test_a_saved_tunnel_lives_and_dies_with_serve_and_follows_its_port(
    env, ssh_server, serve_process
):
    rport = free_port()
    tunnel = {"name": "remote", "target": ssh_server.target, "remote_port": rport}
    write_config(env["config"], {"roots": [env["root"]], "tunnels": [tunnel]})
    proc, port = serve_process(args=("--port", "0"))
    wait_for(lambda: _reaches(rport), UP_S, 0.2)
    (pid,) = tunnel_pids(rport)
    assert parent_of(pid) == proc.pid
    stop_process(proc)
    assert proc.returncode == 0
    wait_for(lambda: not tunnel_pids(rport), 30)
    assert not _reaches(rport)

    # Next start: another port; the remote side's URL is the same and reaches it.
    other = free_port()
    assert other != port
    proc2, port2 = serve_process(args=("--port", str(other)))
    assert port2 == other
    wait_for(lambda: _reaches(rport), UP_S, 0.2)
    (pid2,) = tunnel_pids(rport)
    assert f"127.0.0.1:{rport}:127.0.0.1:{other}".encode() in _cmdline(pid2)

    # Killed without a chance to stop: the kernel ends its ssh too (PR_SET_PDEATHSIG).
    proc2.send_signal(signal.SIGKILL)
    proc2.wait(10)
    wait_for(lambda: not tunnel_pids(rport), 30)


def test_a_picked_port_that_moved_is_followed_by_the_tunnel_and_every_client_config(
    env, ssh_server, serve_process, cli
):
    """Issue 25's last bullet in one real run: the port the bridge picked (and saved) is taken
    by someone else before the next start, so the start moves it; the saved tunnel forwards to
    the port the bridge listens on now (the remote URL stays the same), and ``url``,
    ``client-config`` and ``machines add`` hand out the live port, never the saved one."""
    rport = free_port()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))  # someone else holds the port the bridge picked last time
    taken.listen(1)
    picked = taken.getsockname()[1]
    tunnel = {"name": "remote", "target": ssh_server.target, "remote_port": rport}
    config = {
        "roots": [env["root"]],
        "port": picked,
        "picked_port": picked,  # written by the bridge: a port it chose, so it may move
        "token_store": "file",
        "tunnels": [tunnel],
    }
    write_config(env["config"], config)
    try:
        proc, live = serve_process(args=())  # no --port: the saved one
        assert live != picked
        wait_for(lambda: _reaches(rport), UP_S, 0.2)
        (pid,) = tunnel_pids(rport)
        assert f"127.0.0.1:{rport}:127.0.0.1:{live}".encode() in _cmdline(pid)
        assert parent_of(pid) == proc.pid
        url = f"http://127.0.0.1:{live}/"
        assert cli("url").stdout.strip() == url
        server = json.loads(cli("client-config").stdout)["mcpServers"]["omp-host"]
        assert server["url"] == url
        added = cli("machines", "add", "laptop", "--json")
        assert added.returncode == 0, added.stderr
        minted = json.loads(added.stdout)
        assert minted["config"]["mcpServers"]["omp-host"]["url"] == url
        # that machine's token reaches the moved bridge through the tunnel, as laptop
        c = Mcp(rport, token=minted["token"])
        try:
            assert c.initialize().status == 200
        finally:
            c.close()
        listed = json.loads(cli("sessions", "--json").stdout)["sessions"]
        assert "laptop" in [s["machine"] for s in listed]
        tunnels = json.loads(cli("tunnels", "--json").stdout)["tunnels"]
        assert [(t["name"], t["state"], t["local_port"]) for t in tunnels] == [
            ("remote", "up", live)
        ]
    finally:
        taken.close()
    with open(env["config"]) as f:
        assert json.load(f)["port"] == live  # the moved port is the saved one from now on


def _cmdline(pid: int) -> bytes:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().replace(b"\0", b" ")


def test_tunnels_without_sshd_report_down_and_stop_cleanly(env, serve_process, tmp_path):
    """No server at all: the tunnel is down with ssh's words, and serve still stops at once."""
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host nowhere\n  HostName 127.0.0.1\n  Port {free_port()}\n  BatchMode yes\n"
    )
    rport = free_port()
    tunnel = {"name": "nowhere", "target": "nowhere", "remote_port": rport}
    write_config(env["config"], {"roots": [env["root"]], "tunnels": [tunnel]})
    e = dict(os.environ, A2A_BRIDGE_SSH_CONFIG=str(config))
    proc, _ = serve_process(e, args=("--port", "0"))
    status = wait_for(lambda: _status(e, "Connection refused"), UP_S, 0.3)
    assert "nowhere  down" in status and "next try in" in status
    stop_process(proc)
    assert proc.returncode == 0
    wait_for(lambda: not tunnel_pids(rport), 30)


def _status(env: dict[str, str], text: str) -> str | None:
    from ..support.helpers import SERVER

    r = subprocess.run([*SERVER, "tunnels"], env=env, capture_output=True, text=True, timeout=60)
    return r.stdout if text in r.stdout else None

"""The app's own ssh hands the remote machine nothing but the one forward.

The remote machine is where the agent runs: whatever its session gets, the agent gets. The
user's ``~/.ssh/config`` may forward their ssh agent to that host (``ForwardAgent``): fine for
a terminal the user watches, not for an ssh the app starts on its own. Found in the outside
review: ``connect --install`` ran ``ssh -T host "sh -c ..."`` with the user's forwarding on, so
for the whole session (as long as the remote side likes: a FIFO at the client's config file
holds its ``cat``) an agent on the remote machine could use the user's keys through the
forwarded socket: sign in to any host they open, this machine included.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pytest

from omp_a2a_bridge.server.tunnels.install import REMOTE_READ_MAX

from ..support.helpers import in_thread, pids_where, wait_for
from ..support.sshd import free_port, start_agent

WAIT_S = 90  # ssh's handshake under a loaded 2-core machine


def _start_agent(folder: Path) -> tuple[subprocess.Popen, str]:
    """A private ssh-agent holding one key (the user's keys, as far as the attack goes)."""
    key = folder / "users_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "users-key", "-f", str(key)],
        check=True,
        capture_output=True,
    )
    return start_agent(folder, key)


def _blocked_cat(fifo: str) -> int | None:
    """The remote side's ``cat`` of the client config, held by the FIFO there."""
    needle = fifo.encode()
    found = pids_where(lambda a: os.path.basename(a[0]) == b"cat" and needle in a)
    return found[0] if found else None


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [x.split(b"=", 1) for x in f.read().split(b"\0") if b"=" in x]
    return {k.decode(): v.decode("utf-8", "replace") for k, v in pairs}


def test_install_never_forwards_the_users_ssh_agent_to_the_remote(
    start_bridge, ssh_server, tmp_path, monkeypatch
):
    agent, sock = _start_agent(tmp_path)
    try:
        # The user's own config forwards their agent to this host (a common dev-box setup).
        # (The fixture's "IdentityAgent none" goes: a user's config uses their agent.)
        config = ssh_server.client_config.read_text().replace("  IdentityAgent none\n", "")
        ssh_server.client_config.write_text(
            config + f"Host {ssh_server.target}\n  ForwardAgent yes\n"
        )
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        running = start_bridge(control=True)
        # The agent on the remote machine makes the client config a FIFO: the install's
        # session stays open until it lets go.
        fifo = str(ssh_server.home / ".claude.json")
        os.mkfifo(fifo, 0o600)
        running.runner.add_tunnel("testremote", ssh_server.target, free_port(), "claude-code")
        t, out = in_thread(running.runner.install_client, "testremote")
        try:
            pid = wait_for(lambda: _blocked_cat(fifo), WAIT_S, 0.05)
            remote_env = _environ(pid)
            forwarded = remote_env.get("SSH_AUTH_SOCK")
            listed = ""
            if forwarded:  # what the remote agent does with it: list (and use) the user's keys
                env = {**os.environ, "SSH_AUTH_SOCK": forwarded}
                r = subprocess.run(
                    ["ssh-add", "-l"], capture_output=True, text=True, env=env, timeout=30
                )
                listed = r.stdout
        finally:
            # let the install finish: the remote side writes an empty config into the FIFO
            fd = os.open(fifo, os.O_WRONLY)
            os.write(fd, b"{}\n")
            os.close(fd)
            t.join(WAIT_S)
        assert forwarded is None, f"the remote session got the user's agent: {listed!r}"
        assert "users-key" not in listed
        assert isinstance(out[0], str) and "omp-host added" in out[0], out
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(10)


def test_the_apps_ssh_never_joins_or_leaves_a_shared_connection(start_bridge, ssh_server, tmp_path):
    """``ControlMaster``/``ControlPersist`` in the user's config: the app's ssh must not become
    a master that outlives it (a persistent connection to the agent's machine, planted), nor
    ride on the user's own master (whose forwardings are not the app's to give)."""
    folder = tempfile.mkdtemp(prefix="a2a-cm-", dir="/tmp")  # a socket path must be short
    control = os.path.join(folder, "cm-%C")
    with open(ssh_server.client_config, "a") as f:
        f.write(
            f"Host {ssh_server.target}\n  ControlMaster auto\n  ControlPath {control}\n"
            "  ControlPersist 600\n"
        )
    running = start_bridge(control=True)
    rport = free_port()
    running.runner.add_tunnel("testremote", ssh_server.target, rport, "claude-code")
    try:
        out = running.runner.install_client("testremote")
        assert "omp-host added" in out
        masters = [p for p in os.listdir(folder) if p.startswith("cm-")]
    finally:
        for p in os.listdir(folder):  # a master left behind (the hole): end it
            subprocess.run(
                ["ssh", "-F", str(ssh_server.client_config), "-S", os.path.join(folder, p),
                 "-O", "exit", ssh_server.target],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
    assert masters == [], "the app's ssh left a persistent master connection behind"


# -- what the remote machine sends back is hostile too -----------------------------------------


def test_a_hostile_remote_client_config_is_a_clear_refusal(start_bridge, ssh_server):
    """The remote side of ``--install`` is the agent's: its client config may be nested past
    any parser's depth, or endless. Each is refused in one line, the file left as it is; never
    a 500, a traceback or the whole stream in this process's memory."""
    from ..support.control_client import Api

    running = start_bridge(control=True)
    api = Api(running.runner.control)
    path = ssh_server.home / ".claude.json"
    running.runner.add_tunnel("testremote", ssh_server.target, free_port(), "claude-code")
    deep = '{"mcpServers": ' + "[" * 200_000 + "]" * 200_000 + "}"
    path.write_text(deep)
    r = api.call("POST", "/api/tunnels/testremote/install")
    assert r.status == 400, r
    assert "left untouched" in r.json["error"] and "nested" in r.json["error"], r
    assert path.read_text() == deep
    # endless, as far as this side can tell: a FIFO fed past the read's bound (finite here,
    # so the test stays bounded too when the bound is missing)
    path.unlink()
    os.mkfifo(path, 0o600)
    chunk, chunks = b"x" * (1 << 20), (REMOTE_READ_MAX >> 20) + 8

    def feed() -> None:
        fd = os.open(path, os.O_WRONLY)
        try:
            for _ in range(chunks):
                os.write(fd, chunk)
        except OSError:
            pass  # the reader went away: what the bridge should do
        finally:
            os.close(fd)

    t, _ = in_thread(feed)
    api.conn.timeout = 180
    try:
        r = api.call("POST", "/api/tunnels/testremote/install")
    finally:
        t.join(60)
    assert r.status == 400, r
    assert "too large" in r.json["error"], r


@pytest.mark.parametrize(
    "target",
    ["-oProxyCommand", "-x@host", "u@-host", "--", "-", "u@-oProxyJump", "-F@x", "@host", "u@"],
)
def test_a_target_ssh_could_read_as_an_option_is_never_saved(start_bridge, target):
    """The target goes after ``--``, and OpenSSH refuses such names itself; the bridge still
    refuses them first (what the docs promise), so none is saved or handed to ssh."""
    from ..support.control_client import Api

    running = start_bridge(control=True)
    r = Api(running.runner.control).call(
        "POST", "/api/tunnels", {"name": "evil", "target": target, "remote_port": 43000}
    )
    assert r.status == 400 and "ssh target" in r.json["error"], r
    assert running.runner.tunnels() == ()


@pytest.mark.parametrize(
    ("existing", "refused"),
    [
        ('{"note": "\\ud800", "mcpServers": {}}', False),  # valid JSON, not encodable as is
        ('{"big": 1e999, "mcpServers": {}}', True),  # would be written back as "Infinity"
        ('{"n": NaN, "mcpServers": {}}', True),  # not JSON at all
        ('{"n": -Infinity}', True),
    ],
)
def test_a_remote_file_is_written_back_as_valid_json_or_left_alone(
    start_bridge, ssh_server, existing, refused
):
    """The merge writes back what it read; a value JSON cannot carry back exactly is refused
    (the file left as it was), never a 500 and never a file its client can no longer read."""
    from ..support.control_client import Api

    running = start_bridge(control=True)
    api = Api(running.runner.control)
    path = ssh_server.home / ".claude.json"
    path.write_text(existing)
    running.runner.add_tunnel("testremote", ssh_server.target, free_port(), "claude-code")
    r = api.call("POST", "/api/tunnels/testremote/install")
    if refused:
        assert r.status == 400 and "left untouched" in r.json["error"], r
        assert path.read_text() == existing
        return
    assert r.status == 200, r
    import json

    doc = json.loads(path.read_text())  # strict: no Infinity, no lone surrogate written raw
    assert doc["note"] == "\ud800" and "omp-host" in doc["mcpServers"]

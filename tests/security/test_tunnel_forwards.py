"""The app's tunnel carries exactly its one forward, whatever the user's ssh config adds.

A user's ``~/.ssh/config`` often gives a dev box more than a login: a SOCKS proxy on the
desktop (``DynamicForward``), a database reached from here (``LocalForward``), something of the
desktop shown to the remote side (``RemoteForward``), the agent forwarded, a ``LocalCommand``,
a shared master. In a terminal the user sees and ends them; the app's ssh would open them
unwatched for as long as the app runs, restarted at every reconnect, towards the machine where
the agent runs. ``ClearAllForwardings`` cannot be used (it clears the tunnel's own ``-R`` too),
so the app's ssh reads a private copy of the config without them (server/tunnels/sshconfig.py)
and ``ssh -G`` checks the result before each start.

Here the config names all of it for the host (some in an ``Include``d file, one keyword
quoted, one with ``=``), against a real sshd: the tunnel still comes up and the bridge is
reached through it, and ssh and sshd listen on no other port, no command ran, no agent socket
was made on the remote side, no ssh forked away and no master was left.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from omp_a2a_bridge.server.tunnels.sshconfig import parse_effective, widened
from omp_a2a_bridge.server.vocab import TunnelState

from ..support.helpers import TOKEN, Mcp, in_thread, pids_where, wait_for
from ..support.sshd import free_port, parent_of, start_agent, tunnel_pids

WAIT_S = 90  # ssh's handshake under a loaded 2-core machine


class Hostile:
    """The ports, files and folders a hostile ssh config for the test host names."""

    def __init__(self, tmp: Path, ssh_server) -> None:
        self.local = free_port()  # LocalForward: a port here to something there
        self.dynamic = free_port()  # DynamicForward: a SOCKS proxy here
        self.remote = free_port()  # RemoteForward: something here, shown there
        self.local_ran = tmp / "local-command-ran"
        self.remote_ran = ssh_server.home / "remote-command-ran"
        self.control = tempfile.mkdtemp(prefix="a2a-cm-", dir="/tmp")  # a socket path is short
        target = f"127.0.0.1:{ssh_server.port}"  # any port that listens
        included = tmp / "dev-boxes.conf"
        included.write_text(
            f"Host {ssh_server.target}\n"
            f"  LocalForward 127.0.0.1:{self.local} {target}\n"
            "  ForwardAgent yes\n"
            "  PermitLocalCommand yes\n"
            f"  LocalCommand touch {self.local_ran}\n"
            "  ControlMaster auto\n"
            f"  ControlPath {self.control}/cm-%C\n"
            "  ControlPersist 600\n"
        )
        # The user's own setup: their agent signs in (the fixture's key file is dropped), and
        # every switch that widens the session is on for this host.
        kept = [
            line
            for line in ssh_server.client_config.read_text().splitlines()
            if not line.strip().startswith(("IdentityFile", "IdentitiesOnly", "IdentityAgent"))
        ]
        ssh_server.client_config.write_text(
            f"Include {included}\n"
            + "\n".join(kept)
            + "\n"
            + f'  "DynamicForward" 127.0.0.1:{self.dynamic}\n'
            + f"  RemoteForward=127.0.0.1:{self.remote} {target}\n"
            + "  ClearAllForwardings yes\n"  # would clear the tunnel's own -R too
            + "  ForkAfterAuthentication yes\n"  # ssh -f: a background ssh nobody watches
            + "  GatewayPorts yes\n"
            + "  ForwardX11 yes\n"
            + "  RequestTTY force\n"
            + "  StdinNull yes\n"
            + f"  RemoteCommand touch {self.remote_ran}\n"
            + "  Tunnel yes\n"
        )

    def close(self, ssh_config: Path, target: str) -> list[str]:
        """End any master left behind (the hole); returns their names."""
        left = [p for p in os.listdir(self.control) if p.startswith("cm-")]
        for p in left:
            subprocess.run(
                ["ssh", "-F", str(ssh_config), "-S", os.path.join(self.control, p),
                 "-O", "exit", target],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip
        shutil.rmtree(self.control, ignore_errors=True)
        return left


def _descendants(pid: int) -> set[int]:
    """``pid``'s live descendants (sshd's per-connection processes)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = parent_of(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return found


def _socket_inodes(pids: set[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    return inodes


def _listening_ports(pids: set[int]) -> set[int]:
    """The TCP ports these processes listen on (from /proc/net/tcp{,6}): what they opened,
    whatever else runs on this shared machine."""
    inodes = _socket_inodes(pids)
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.read().splitlines()[1:]:
                cols = row.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    ports.add(int(cols[1].rsplit(":", 1)[1], 16))
    return ports


def _agent_sockets(pids: set[int]) -> list[str]:
    """Unix sockets these processes hold whose path is an ssh agent's (sshd names a forwarded
    agent ``/tmp/ssh-XXXX/agent.<pid>``)."""
    inodes = _socket_inodes(pids)
    with open("/proc/net/unix") as f:
        rows = [r.split() for r in f.read().splitlines()[1:]]
    return [r[7] for r in rows if len(r) > 7 and r[6] in inodes and "/agent." in r[7]]


def _users_agent(tmp_path: Path, ssh_server, monkeypatch) -> subprocess.Popen:
    key = ssh_server.client_config.parent / "user_key"  # the one authorized key
    agent, sock = start_agent(tmp_path, key)
    monkeypatch.setenv("SSH_AUTH_SOCK", sock)
    return agent


def _remote_client_works(port: int) -> bool:
    c = Mcp(port, token=TOKEN)
    try:
        return c.initialize().status == 200 and c.rpc("tools/list").status == 200
    finally:
        c.close()


def test_the_tunnel_opens_its_one_forward_and_nothing_the_config_adds(
    start_bridge, ssh_server, tmp_path, monkeypatch
):
    agent = _users_agent(tmp_path, ssh_server, monkeypatch)
    hostile = Hostile(tmp_path, ssh_server)
    try:
        running = start_bridge(control=True)
        rport = free_port()
        running.runner.add_tunnel("devbox", ssh_server.target, rport)
        t = wait_for(
            lambda: (
                (x := [v for v in running.runner.tunnels() if v.name == "devbox"])
                and x[0].state is TunnelState.UP
                and x[0]
            ),
            WAIT_S,
            0.05,
        )
        assert t.last_error is None
        assert _remote_client_works(rport)  # the bridge is reached through the tunnel
        (pid,) = tunnel_pids(rport)
        assert parent_of(pid) == os.getpid()  # the app's own ssh, not one forked away
        sshd = _descendants(ssh_server.proc.pid)
        # every port the tunnel's ssh (here) and its sshd session (there) listen on
        assert _listening_ports({pid} | sshd) == {rport}
        assert not hostile.local_ran.exists(), "the config's LocalCommand ran"
        assert not hostile.remote_ran.exists(), "the config's RemoteCommand ran"
        assert _agent_sockets(sshd) == [], "the remote side got an agent socket"
        assert running.runner.remove_tunnel("devbox") is True
    finally:
        left = hostile.close(ssh_server.client_config, ssh_server.target)
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(10)
    assert left == [], "the app's ssh left a master connection behind"


def _blocked_cat(fifo: str) -> int | None:
    needle = fifo.encode()
    found = pids_where(lambda a: os.path.basename(a[0]) == b"cat" and needle in a)
    return found[0] if found else None


def test_install_under_the_same_config_opens_nothing_and_writes_the_file(
    start_bridge, ssh_server, tmp_path, monkeypatch
):
    """``--install`` opens a session (where agent forwarding, a tty, a remote command and
    stdin matter): held open by the remote side (a FIFO at the client's config), it has no
    forward, no agent socket, and the config's ``RemoteCommand``, ``StdinNull`` or
    ``LocalCommand`` neither stop it nor run; the file is written, with the token."""
    agent = _users_agent(tmp_path, ssh_server, monkeypatch)
    hostile = Hostile(tmp_path, ssh_server)
    try:
        running = start_bridge(control=True)
        rport = free_port()  # the tunnel's own forward (up beside the install)
        running.runner.add_tunnel("testremote", ssh_server.target, rport, "claude-code")
        fifo = str(ssh_server.home / ".claude.json")
        os.mkfifo(fifo, 0o600)
        t, out = in_thread(running.runner.install_client, "testremote")
        try:
            cat = wait_for(lambda: _blocked_cat(fifo), WAIT_S, 0.05)
            with open(f"/proc/{cat}/environ", "rb") as f:
                remote_env = f.read().split(b"\0")
            sshd = _descendants(ssh_server.proc.pid)
            installs = set(pids_where(lambda a: os.path.basename(a[0]) == b"ssh"))
            installs = {p for p in installs if parent_of(p) == os.getpid()}
            listening = _listening_ports(installs | sshd)
            agents = _agent_sockets(sshd)
        finally:
            # let the install finish: the remote side writes an empty config into the FIFO
            # (none reads it when the install failed before: then there is nothing to free)
            with contextlib.suppress(OSError):
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, b"{}\n")
                os.close(fd)
            t.join(WAIT_S)
        assert installs, "the install's ssh was not seen"
        assert not [v for v in remote_env if v.startswith(b"SSH_AUTH_SOCK=")]
        assert agents == [], "the remote side got an agent socket"
        assert listening - {rport} == set(), f"the install's ssh opened {listening}"
        assert isinstance(out[0], str) and "omp-host added" in out[0], out
        written = ssh_server.home / ".claude.json"  # the FIFO replaced by the file
        assert written.is_file() and "omp-host" in written.read_text()
        assert "Bearer " in written.read_text()  # StdinNull did not empty what ssh carried
        assert not hostile.local_ran.exists(), "the config's LocalCommand ran"
        assert not hostile.remote_ran.exists(), "the config's RemoteCommand ran"
    finally:
        left = hostile.close(ssh_server.client_config, ssh_server.target)
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(10)
    assert left == [], "the install's ssh left a master connection behind"


def test_the_check_sees_what_ssh_itself_would_open(ssh_server, tmp_path):
    """The check before each start reads ``ssh -G``: on the raw config (no copy, none of the
    app's options but the one that keeps forwards), it names every forward and switch that
    config adds."""
    hostile = Hostile(tmp_path, ssh_server)
    try:
        done = subprocess.run(
            ["ssh", "-G", "-F", str(ssh_server.client_config), "-o", "ClearAllForwardings=no",
             ssh_server.target],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
    finally:
        hostile.close(ssh_server.client_config, ssh_server.target)
    problems = " | ".join(widened(parse_effective(done.stdout), own_forwards=0))
    for word in (
        f"localforward [127.0.0.1]:{hostile.local}",
        f"dynamicforward [127.0.0.1]:{hostile.dynamic}",
        f"remoteforward [127.0.0.1]:{hostile.remote}",
        "forwardagent yes",
        "permitlocalcommand yes",
        "controlmaster auto",
        "forkafterauthentication yes",
        "gatewayports yes",
    ):
        assert word in problems, (word, problems)


def test_a_jump_host_is_kept_and_opens_nothing_either(start_bridge, ssh_server, tmp_path):
    """``ProxyJump`` is the user's config working as it should, and keeps working through the
    copy; the jump host's own ssh (run by ssh with ``-F <copy>`` and none of the app's options)
    opens none of the forwards, command or master the config names for the jump host (before,
    with ``ClearAllForwardings no`` for it, the jump hop's ssh listened on its LocalForward)."""
    local = free_port()
    ran = tmp_path / "jump-local-command-ran"
    control = tempfile.mkdtemp(prefix="a2a-cm-", dir="/tmp")
    fixture = ssh_server.client_config.read_text()
    behind = fixture.replace(f"Host {ssh_server.target}", "Host behind", 1)
    ssh_server.client_config.write_text(
        behind
        + "  ProxyJump testremote\n"
        + fixture
        + f"  LocalForward 127.0.0.1:{local} 127.0.0.1:{ssh_server.port}\n"
        + "  ClearAllForwardings no\n"  # undoes what ssh -W implies for the jump host
        + "  PermitLocalCommand yes\n"
        + f"  LocalCommand touch {ran}\n"
        + "  ControlMaster auto\n"
        + f"  ControlPath {control}/cm-%C\n"
        + "  ControlPersist 600\n"
    )
    try:
        running = start_bridge(control=True)
        rport = free_port()
        running.runner.add_tunnel("behind", "behind", rport)
        wait_for(
            lambda: (
                (x := [v for v in running.runner.tunnels() if v.name == "behind"])
                and x[0].state is TunnelState.UP
            ),
            WAIT_S,
            0.05,
        )
        assert _remote_client_works(rport)
        (pid,) = tunnel_pids(rport)
        ours = {pid} | _descendants(pid)  # the tunnel's ssh and the jump host's
        jump = [p for p in ours - {pid} if b"-W" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert jump, "no jump host ssh: ProxyJump was not kept"
        assert _listening_ports(ours) == set()
        assert _listening_ports(_descendants(ssh_server.proc.pid)) == {rport}
        assert not ran.exists(), "the jump host's LocalCommand ran"
        assert running.runner.remove_tunnel("behind") is True
    finally:
        left = [p for p in os.listdir(control) if p.startswith("cm-")]
        for p in left:
            subprocess.run(
                ["ssh", "-F", str(ssh_server.client_config), "-S", os.path.join(control, p),
                 "-O", "exit", "testremote"],
                capture_output=True, timeout=30, check=False,
            )  # fmt: skip
        shutil.rmtree(control, ignore_errors=True)
    assert left == [], "the jump host's ssh left a master connection behind"


def test_an_ssh_that_would_still_open_more_is_never_started(
    start_bridge, ssh_server, tmp_path, monkeypatch
):
    """The copy is one line of defence; ``ssh -G`` is the other: an ssh that adds a forward of
    its own (here a wrapper first on ``PATH``, as a distro or a user's alias might) is not
    started at all, and the tunnel is down saying what ssh would have opened."""
    extra = free_port()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "ssh"
    real = shutil.which("ssh")
    wrapper.write_text(
        f'#!/bin/sh\nexec {real} -o "LocalForward 127.0.0.1:{extra} 127.0.0.1:{ssh_server.port}"'
        ' "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    running = start_bridge(control=True)
    rport = free_port()
    running.runner.add_tunnel("wrapped", ssh_server.target, rport)
    t = wait_for(
        lambda: (
            (x := [v for v in running.runner.tunnels() if v.name == "wrapped"])
            and x[0].state is TunnelState.DOWN
            and x[0]
        ),
        WAIT_S,
        0.05,
    )
    assert t.last_error.startswith("not started: ssh would also apply localforward"), t
    assert f"[127.0.0.1]:{extra}" in t.last_error
    assert tunnel_pids(rport) == []  # no tunnel ssh ran
    assert running.runner.remove_tunnel("wrapped") is True

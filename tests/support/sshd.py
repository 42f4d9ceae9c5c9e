"""A real OpenSSH server on a loopback port, for tests that drive ``ssh`` for real.

``start_sshd(folder)`` starts ``/usr/sbin/sshd -D`` as the current user (root or not) with a
temporary host key, one authorized key (a temporary key pair) and nothing else: no PAM, no
password, no strict modes, and ``SetEnv HOME=<folder>/home`` so the "remote" machine's home is a
temporary folder, never the user's real one (sshd itself still starts the session in the
passwd home; what the tests check goes through ``$HOME``). It writes an ssh client config with
one Host, ``testremote``, that reaches it with that key and a private known-hosts file, so
``ssh -F <client_config> testremote`` needs no agent, no prompt and no ``~/.ssh``.

``.ci/run`` installs ``openssh-server``; without ``/usr/sbin/sshd`` the fixture fails under CI
and skips elsewhere.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from omp_a2a_bridge.server.tunnels.install import WRITE_SCRIPT

from .helpers import free_port, pids_where

SSHD = "/usr/sbin/sshd"
HOST_ALIAS = "testremote"


@dataclass
class SshServer:
    port: int
    home: Path  # the remote side's $HOME
    client_config: Path  # ssh -F this: Host testremote
    proc: subprocess.Popen
    log: Path
    extra: dict[str, str] = field(default_factory=dict)

    @property
    def target(self) -> str:
        return HOST_ALIAS

    def ssh(self, *command: str, timeout: float = 60, **kw) -> subprocess.CompletedProcess:
        """Run a command on the "remote" side, as a user would (``ssh testremote ...``)."""
        argv = ["ssh", "-F", str(self.client_config), "-o", "BatchMode=yes", HOST_ALIAS, *command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def available() -> bool:
    return os.path.exists(SSHD) and shutil.which("ssh") is not None


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "a2a-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )


def start_sshd(folder: Path, timeout: float = 60) -> SshServer:
    """Start sshd on a free loopback port; returns once it listens there.

    The port is picked before sshd binds it: another process (a second CI run on the same
    machine, a bridge on port 0) may take it in between. sshd then fails to bind and the start
    is tried again on another port; and "listening" is read from sshd's own log, so a
    stranger's server on that port never passes for ours.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    home = folder / "home"
    home.mkdir(exist_ok=True)
    host_key, user_key = folder / "host_key", folder / "user_key"
    _keygen(host_key)
    _keygen(user_key)
    authorized = folder / "authorized_keys"
    authorized.write_text((folder / "user_key.pub").read_text())
    os.chmod(authorized, 0o600)
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    deadline = time.monotonic() + timeout
    for _ in range(BIND_ATTEMPTS):
        server = _try_sshd(folder, home, host_key, user_key, authorized, deadline)
        if server is not None:
            return server
    raise RuntimeError(f"sshd found no free port in {BIND_ATTEMPTS} tries")


BIND_ATTEMPTS = 5
BIND_FAILED = ("Address already in use", "Cannot bind any address")


def _try_sshd(
    folder: Path, home: Path, host_key: Path, user_key: Path, authorized: Path, deadline: float
) -> SshServer | None:
    """sshd on a port picked now: the server once it listens, None when the port was taken."""
    port = free_port()
    user = _whoami()  # the account sshd logs into: this process's, whatever $USER says
    config = folder / "sshd_config"
    config.write_text(
        "\n".join(
            [
                f"Port {port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {host_key}",
                f"PidFile {folder / 'sshd.pid'}",
                f"AuthorizedKeysFile {authorized}",
                "UsePAM no",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "PermitRootLogin prohibit-password",
                f"AllowUsers {user}",
                "AllowTcpForwarding yes",
                "GatewayPorts no",
                "X11Forwarding no",
                "PrintMotd no",
                "PrintLastLog no",
                "LogLevel VERBOSE",
                f"SetEnv HOME={home}",
                "",
            ]
        )
    )
    known = folder / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(folder / 'host_key.pub').read_text()}")
    client = folder / "ssh_config"
    client.write_text(
        "\n".join(
            [
                f"Host {HOST_ALIAS}",
                "  HostName 127.0.0.1",
                f"  Port {port}",
                f"  User {user}",
                f"  IdentityFile {user_key}",
                "  IdentitiesOnly yes",
                "  IdentityAgent none",
                f"  UserKnownHostsFile {known}",
                "  GlobalKnownHostsFile /dev/null",
                "  StrictHostKeyChecking yes",
                "  LogLevel ERROR",
                "",
            ]
        )
    )
    log = folder / "sshd.log"
    proc = subprocess.Popen(
        [SSHD, "-D", "-e", "-f", str(config)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115 - the child keeps it; closed with the process
        start_new_session=True,
    )
    server = SshServer(port, home, client, proc, log)
    listening = f"Server listening on 127.0.0.1 port {port}."
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if proc.poll() is not None:
            if any(why in text for why in BIND_FAILED):
                return None  # taken since it was picked: another port
            raise RuntimeError(f"sshd exited: {text[-2000:]}")
        if listening in text:
            return server
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"sshd did not start in time: {log.read_text()[-2000:]}")


def start_agent(folder: Path, key: Path) -> tuple[subprocess.Popen, str]:
    """A private ssh-agent (its own session: ``os.killpg`` ends it) holding ``key``."""
    sock = str(folder / "agent.sock")
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", sock],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while not os.path.exists(sock) and time.monotonic() < deadline:
        time.sleep(0.05)
    env = {**os.environ, "SSH_AUTH_SOCK": sock}
    # the socket's file exists a moment before the agent accepts on it (ssh-add: status 2)
    while True:
        added = subprocess.run(["ssh-add", str(key)], capture_output=True, env=env, timeout=30)
        if added.returncode == 0:
            return proc, sock
        if added.returncode != 2 or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGTERM)  # not left running for a failed test
            raise RuntimeError(f"ssh-add failed: {added.stderr!r}")
        time.sleep(0.05)


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def tunnel_pids(remote_port: int) -> list[int]:
    """The ssh processes forwarding ``remote_port`` (found in /proc by their command line)."""
    needle = f"127.0.0.1:{remote_port}:127.0.0.1:".encode()
    return pids_where(lambda a: os.path.basename(a[0]) == b"ssh" and any(needle in x for x in a))


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


# A piece of ``server/tunnels/install.py``'s WRITE_SCRIPT: on the command line of the ssh that
# carries the token on its stdin, and of the remote ``sh`` that writes it.
WRITE_MARK = WRITE_SCRIPT.encode()[:40]


def _another_runs(pid: int, root: int) -> bool:
    """``pid`` descends from another test run (a pytest process that is not ``root``): the test
    token is the same in every run, and a second suite on the machine (another CI clone) has it
    on its own clients' command lines. An orphan (re-parented to init) still counts as ours."""
    for _ in range(64):
        if pid == root or pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"pytest" in f.read():
                    return True
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


class CmdlineScanner:
    """Reads every process's command line over and over (a thread) and keeps any that holds
    ``secret``: what another user's ``ps`` would have seen."""

    def __init__(self, secret: str) -> None:
        import threading

        self.secret = secret.encode()
        self.found: list[str] = []
        self.scans = 0
        self.seen_ssh = 0  # ssh processes seen while scanning (the scan saw the install run)
        # processes seen that run ``--install``'s write script (the local ssh, and the remote
        # ``sh`` sshd started): the scan looked while the token was on its way through stdin
        self.seen_writes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._root = os.getpid()  # this run's pytest (see _another_runs)

    def __enter__(self) -> CmdlineScanner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _check_environ(self, pid: str) -> None:
        """An ssh's environment must not hold the secret either (no A2A_BRIDGE_* reaches it)."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if self.secret in f.read():
                    self.found.append(f"environment of ssh {pid}")
        except OSError:
            pass

    def _run(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        raw = f.read()
                except OSError:
                    continue
                if self.secret in raw and not _another_runs(int(entry), self._root):
                    self.found.append(raw.replace(b"\0", b" ").decode("utf-8", "replace"))
                if WRITE_MARK in raw:
                    self.seen_writes += 1
                if os.path.basename(raw.split(b"\0", 1)[0]) == b"ssh":
                    self.seen_ssh += 1
                    self._check_environ(entry)
            self.scans += 1

"""Tunnels as data: the saved entry, the ssh command line, the back-off and the state machine.

Pure (no process, no clock of its own, no file): :mod:`.supervisor` runs what is decided here,
and tests/unit/test_tunnels_plan.py checks it without ssh.

Why OpenSSH and not a library: the user's own ``~/.ssh/config``, agent, keys, jump hosts and
known hosts already work with it; the bridge stays on loopback and only ``ssh -R`` reaches it.
``BatchMode=yes``: the app never waits on a password or host-key prompt nobody sees (the first
connection is made by hand once, as with any new host). ``ExitOnForwardFailure``: a remote port
that is taken ends ssh at once with a clear line, instead of a connection that forwards nothing.
The user's config gives the connection (host, user, port, keys, jump hosts, known hosts), never
more than the one forward: :data:`CONFINED` and :mod:`.sshconfig`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import BridgeError
from ..machines.identity import DEFAULT as DEFAULT_MACHINE
from ..machines.identity import NAME_MAX, NAME_RULE, MachineNameError, check_name
from ..present.clientconfig import ClientKind
from ..present.textsafe import safe
from ..vocab import TunnelState

# Back-off between tries: 1, 2, 4 ... seconds, at most BACKOFF_CAP_S; a tunnel that stayed up
# for STABLE_S starts again from the first step when it drops.
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 60.0
STABLE_S = 60.0
KEEPALIVE_S = 15  # ServerAliveInterval: a dead link is noticed within 15 s x 3
KEEPALIVE_COUNT = 3
CONNECT_TIMEOUT_S = 20
ERROR_MAX_CHARS = 200

# What ``--client`` may name for a tunnel: the clients an agent runs with on a remote machine.
TUNNEL_CLIENTS = (ClientKind.CLAUDE_CODE, ClientKind.CODEX, ClientKind.GEMINI, ClientKind.GENERIC)

# user@host, a Host alias, user@[::1]: no space, quote or shell character; never a leading '-'
# (ssh would read it as an option: the target also goes after '--').
_TARGET = re.compile(
    r"(?:[A-Za-z0-9_][A-Za-z0-9._+-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.%]+\])"
)
# ssh -v's line once the remote forward listens (OpenSSH 7 to 10):
# "debug1: remote forward success for: listen 127.0.0.1:43000, connect 127.0.0.1:53917"
FORWARD_OK = "remote forward success for: listen"


class TunnelError(BridgeError, ValueError):
    """A tunnel entry that cannot be used (``connect``'s arguments or the config's entry)."""


@dataclass(frozen=True, slots=True)
class TunnelSpec:
    """One saved tunnel: the config's ``tunnels`` entry."""

    name: str
    target: str
    remote_port: int
    client: ClientKind | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "target": self.target,
            "remote_port": self.remote_port,
        }
        if self.client is not None:
            out["client"] = self.client.value
        return out


def default_name(target: str) -> str:
    """``--name`` when none is given: the host part of ``user@host`` made a machine name (the
    tunnel's name is its machine's): lowercase, each run of other characters a dash
    (``build.example.com`` -> ``build-example-com``, ``[::1]`` -> ``1``). Never ``default``,
    the bridge's own token: a new host gets an identity of its own."""
    host = target.rsplit("@", 1)[-1].strip("[]").lower()
    name = re.sub(r"[^a-z0-9_-]+", "-", host).strip("-_")[:NAME_MAX].strip("-_") or "remote"
    return f"{name}-host" if name == DEFAULT_MACHINE else name


def check_spec(name: Any, target: Any, remote_port: Any, client: Any = None) -> TunnelSpec:
    """A valid :class:`TunnelSpec`, or :class:`TunnelError` naming what is wrong."""
    try:
        check_name(name)
    except MachineNameError:
        raise TunnelError(
            f"tunnel name {safe(name)!s} is its machine's name: {NAME_RULE}"
        ) from None
    if not isinstance(target, str) or not _TARGET.fullmatch(target):
        raise TunnelError(
            f"ssh target {safe(target)!s} must be user@host or a Host of your ssh config "
            "(no spaces, not starting with '-')"
        )
    if isinstance(remote_port, bool) or not isinstance(remote_port, int):
        raise TunnelError("remote_port must be an integer in [1, 65535]")
    if not 1 <= remote_port <= 65535:
        raise TunnelError("remote_port must be an integer in [1, 65535]")
    kind = None
    if client is not None:
        values = [k.value for k in TUNNEL_CLIENTS]
        if client not in values:
            raise TunnelError(f"client must be one of {', '.join(values)}")
        kind = ClientKind(client)
    return TunnelSpec(name, target, remote_port, kind)


def parse_tunnels(raw: Any) -> tuple[TunnelSpec, ...]:
    """The config's ``tunnels`` array; names are unique."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise TunnelError("tunnels must be an array of {name, target, remote_port, client}")
    out: list[TunnelSpec] = []
    for item in raw:
        if not isinstance(item, dict) or not set(item) <= {
            "name",
            "target",
            "remote_port",
            "client",
        }:
            raise TunnelError(
                "each tunnel must be an object with name, target, remote_port and optionally client"
            )
        spec = check_spec(
            item.get("name"), item.get("target"), item.get("remote_port"), item.get("client")
        )
        if any(s.name == spec.name for s in out):
            raise TunnelError(f"two tunnels are named {spec.name}")
        out.append(spec)
    return tuple(out)


# What the app's own ssh never hands the remote machine, whatever the user's ssh config says
# for that host (on the command line, they win over the config: OpenSSH keeps the first value it
# reads): the remote machine is where the agent runs, and the app's ssh runs unwatched, for as
# long as the app does. No forwarded ssh agent (the user's keys, usable from the remote side),
# no X11 (this display), no tun device, no tty; no command run here (LocalCommand) at each
# (re)connect; no shared connection (ControlMaster/ControlPersist would leave a master to the
# agent's machine running after the app stops, or ride on the user's own, with its forwards);
# GatewayPorts only ever widens local forwards (there are none). The forwards a config adds up
# cannot be undone here: :mod:`.sshconfig` gives ssh a copy of the config without them.
CONFINED = [
    "-a",
    "-x",
    "-T",
    "-o",
    "ForwardAgent=no",
    "-o",
    "ForwardX11=no",
    "-o",
    "Tunnel=no",
    "-o",
    "ControlMaster=no",
    "-o",
    "ControlPath=none",
    "-o",
    "PermitLocalCommand=no",
    "-o",
    "GatewayPorts=no",
]
# The same, for options only some OpenSSH builds know (an unknown -o is fatal): each is passed
# when ``ssh -G`` lists it (:func:`.sshconfig.known_options`). ForkAfterAuthentication (8.7+):
# ``ssh -f`` from the config would leave a background ssh the app no longer sees (it outlives
# the app, and its exit looks like a failure, so the app starts another); GSSAPI delegation
# hands the remote machine the user's Kerberos tickets at login.
CONFINED_IF_KNOWN = {
    "forkafterauthentication": "ForkAfterAuthentication=no",
    "gssapidelegatecredentials": "GSSAPIDelegateCredentials=no",
}


def base_options(ssh_config: str | None = None, known: frozenset[str] = frozenset()) -> list[str]:
    """The options every ssh the app runs carries (the tunnel and ``--install``'s); ``known``:
    the option names this ssh knows (lowercase, as ``ssh -G`` prints them)."""
    opts = [*CONFINED]
    for name, option in CONFINED_IF_KNOWN.items():
        if name in known:
            opts += ["-o", option]
    opts += [
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o",
        f"ServerAliveInterval={KEEPALIVE_S}",
        "-o",
        f"ServerAliveCountMax={KEEPALIVE_COUNT}",
    ]
    if ssh_config:
        opts = ["-F", ssh_config, *opts]
    return opts


def ssh_argv(
    spec: TunnelSpec,
    local_port: int,
    ssh_config: str | None = None,
    program: str = "ssh",
    known: frozenset[str] = frozenset(),
) -> list[str]:
    """The tunnel's command line: the remote machine's ``127.0.0.1:remote_port`` reaches the
    bridge's live ``127.0.0.1:local_port``, and nothing else. ``-v`` is how the supervisor
    hears that the forward is up (:data:`FORWARD_OK`); no secret is on this line or in that
    output. ``ClearAllForwardings=no``: a config's ``yes`` would clear this ``-R`` too."""
    return [
        program,
        "-N",
        "-v",
        *base_options(ssh_config, known),
        "-o",
        "ClearAllForwardings=no",
        "-o",
        "ExitOnForwardFailure=yes",
        "-R",
        f"127.0.0.1:{spec.remote_port}:127.0.0.1:{local_port}",
        "--",
        spec.target,
    ]


def check_argv(argv: list[str]) -> list[str]:
    """``ssh -G`` with the tunnel's own command line: what ssh would do, printed, nothing done
    (without ``-v``: its last stderr line is then its error, if any)."""
    return [argv[0], "-G", *(a for a in argv[1:] if a != "-v")]


def backoff(failures: int) -> float:
    """Seconds to wait before try number ``failures + 1`` (``failures`` >= 1 in a row)."""
    if failures <= 0:
        return 0.0
    return min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2 ** min(failures - 1, 16))


def error_line(lines: list[str], code: int | None) -> str:
    """Why ssh ended, as one safe, bounded line: the signal that killed it, else its last
    stderr line that is neither debug output nor ``-v``'s progress notes (e.g.
    ``Permission denied (publickey).``), else the exit status."""
    if code is not None and code < 0:
        return f"ssh was killed by signal {-code}"
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith(_NOT_ERRORS):
            return clip(text)
    if code is None:
        return "ssh ended"
    return f"ssh exited with status {code}"


# ssh -v's lines that say nothing about why it ended
_NOT_ERRORS = (
    "debug1:",
    "debug2:",
    "debug3:",
    "OpenSSH_",
    "Authenticated to ",
    "Transferred: ",
    "Bytes per second",
)


def clip(text: str) -> str:
    """One safe line (control and bidi characters escaped), at most ERROR_MAX_CHARS."""
    one = safe(" ".join(text.split()))
    return one if len(one) <= ERROR_MAX_CHARS else one[: ERROR_MAX_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Status:
    """A tunnel's state machine (what :class:`~server.types.TunnelView` shows)."""

    state: TunnelState = TunnelState.CONNECTING
    last_error: str | None = None
    since: float = 0.0
    failures: int = 0  # failed runs in a row (reset by a stable period or a Reconnect)
    up_since: float | None = None
    attempts: int = 0
    retry_at: float | None = None

    def started(self, now: float) -> Status:
        """ssh was started (first try, a retry, or a restart on a new port)."""
        return replace(
            self,
            state=TunnelState.CONNECTING,
            since=now,
            up_since=None,
            attempts=self.attempts + 1,
            retry_at=None,
        )

    def forwarded(self, now: float) -> Status:
        """ssh said the remote forward listens."""
        return replace(self, state=TunnelState.UP, since=now, up_since=now, last_error=None)

    def ended(self, now: float, error: str) -> tuple[Status, float]:
        """ssh exited: the new status and the seconds to wait before the next try."""
        stable = self.up_since is not None and now - self.up_since >= STABLE_S
        failures = 1 if stable else self.failures + 1
        delay = backoff(failures)
        return (
            replace(
                self,
                state=TunnelState.DOWN,
                since=now,
                last_error=error,
                failures=failures,
                up_since=None,
                retry_at=now + delay,
            ),
            delay,
        )

    def restarted(self, now: float, why: str | None = None) -> Status:
        """Asked to start again at once (Reconnect, a new port): no back-off, none counted."""
        return replace(self, failures=0, retry_at=None, last_error=why or self.last_error)

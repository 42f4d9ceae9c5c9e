"""Everything that can fail or block before the bridge's loop runs: config, token, sockets,
the audit log, the control file.

Why apart from :mod:`server.core.runner`: this part runs once, on the caller's thread, and its
failures must reach the user as one clear line (:class:`~server.errors.StartupError`,
:class:`~server.errors.AlreadyRunning`); the runner is what keeps the bridge running and hands
out the thread-safe API. :func:`prepare` returns what the loop thread needs, or raises having
closed what it opened so far (the caller cleans up the rest from :class:`Prepared`).
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
import threading
from dataclasses import dataclass, field

from tornado.netutil import bind_sockets

from ..box import host as box_host
from ..box import probe as box_probe
from ..control.controlfile import (
    ControlInfo,
    claim,
    control_path,
    prepare_runtime_dir,
    read_control,
)
from ..errors import AlreadyRunning, ConfigError, RuntimeDirError, StartupError
from ..infra import childenv, logfile, orphans
from ..infra.audit import AuditLog
from ..infra.config import Config, audit_path, load_config, update_config
from ..infra.tokens import KeyringStore, TokenStore
from ..mcp.http import BODY_TIMEOUT_S, IDLE_CONNECTION_TIMEOUT_S
from ..mcp.netlimits import raise_nofile
from ..mcp.protocol import is_loopback_name
from ..mcp.sessions import SessionTable
from ..present.secrets import remember
from ..tools.base import Tool
from .bridge import Bridge, BridgeOptions
from .portowner import port_holder

log = logging.getLogger(__name__)

LISTEN_BACKLOG = (
    1024  # a burst of clients connecting at once waits in the kernel, not on SYN retries
)


@dataclass
class RunnerOptions:
    """How to start a bridge: config path, address overrides, tools, and what tests inject."""

    config_path: str | None = None
    host: str | None = None  # --host: overrides the config for this run, never saved
    port: int | None = None  # --port: likewise
    tools: list[Tool] | None = None  # None: the built-in tools
    discover_tools: bool = True
    keyring_store: KeyringStore | None = None
    audit_path: str | None = None
    session_table: SessionTable | None = None  # tests inject one with a fake clock
    control: bool = False  # the local control API + control file (serve and tray turn it on)
    idle_timeout_s: float = IDLE_CONNECTION_TIMEOUT_S  # close idle keep-alive connections
    body_timeout_s: float = BODY_TIMEOUT_S  # close connections whose body trickles in


@dataclass
class Prepared:
    """What :func:`prepare` opened, filled in as it goes (so a failure can be undone)."""

    nofile: int | None = None
    bridge: Bridge | None = None
    url: str = ""
    loopback: bool = True
    sockets: list[socket.socket] = field(default_factory=list)
    control_sockets: list[socket.socket] = field(default_factory=list)
    control: ControlInfo | None = None


def url_for(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def bind(host: str, port: int, may_move: bool) -> tuple[list[socket.socket], int, bool]:
    """Bind ``host:port``; a busy port moves to a free one only when ``may_move`` (a port the
    bridge picked itself), else :class:`PortBusy` (other errors raise)."""
    try:
        socks = bind_sockets(port, host, backlog=LISTEN_BACKLOG)
        moved = False
    except OSError as e:
        if e.errno != errno.EADDRINUSE or port == 0:
            raise
        if not may_move:
            raise PortBusy(port) from None
        socks = bind_sockets(0, host, backlog=LISTEN_BACKLOG)
        moved = True
    return socks, socks[0].getsockname()[1], moved


class PortBusy(Exception):
    """A port the user chose is in use: the start stops (see :func:`busy_line`)."""

    def __init__(self, port: int) -> None:
        super().__init__(port)
        self.port = port


def busy_line(port: int, chosen_by: str, holder: str | None) -> str:
    """The one line a busy chosen port stops the start with (pure)."""
    held = f"by {holder}" if holder else "(the OS does not say by whom: try 'ss -ltnp')"
    return (
        f"port {port} is already in use {held}; {chosen_by} chose it, so the bridge does not "
        "move it: stop that program or choose another port"
    )


def prepare(opts: RunnerOptions, out: Prepared) -> None:
    """Load config and token, bind, build the bridge, claim the control file (into ``out``).

    With ``control`` on, a live instance found through the control file raises
    :class:`AlreadyRunning` before anything is bound.
    """
    out.nofile = raise_nofile()
    childenv.keep_absolute_path()  # no ./chmod from a project folder (server/infra/childenv.py)
    box_probe.probe()  # once per process, before the loop runs (it starts bwrap once)
    orphans.enable()  # a tool's orphans stay the bridge's (server/control/peer.py)
    config = _load_config(opts)
    logfile.set_rotation(config.log_max_bytes, config.log_keep)  # when this process has one
    tokens = _resolve_token(config, opts)
    host, bound, warnings = _listen(opts, config, tokens, out)
    bridge = _build_bridge(opts, config, tokens)
    if box_probe.status().available:  # the roots' secret index, walked before the first call
        threading.Thread(
            target=box_host.warm, args=(bridge.pipeline.box.roots,), daemon=True
        ).start()
    bridge.host, bridge.port = host, bound
    bridge.url = out.url = url_for(host, bound)
    bridge.warnings = warnings
    out.bridge = bridge
    if opts.control:
        out.control = _claim_control(out)
        bridge.control_url = out.control.url


def _load_config(opts: RunnerOptions) -> Config:
    """The config; with ``control`` on, also a private runtime directory and no live instance."""
    try:
        config = load_config(opts.config_path)
    except ConfigError as e:
        raise StartupError(str(e)) from None
    if opts.control:
        try:
            prepare_runtime_dir()
        except RuntimeDirError as e:
            raise StartupError(str(e)) from None
        live = read_control()
        if live is not None and live.pid != os.getpid():
            raise AlreadyRunning(live)
    return config


def _resolve_token(config: Config, opts: RunnerOptions) -> TokenStore:
    tokens = TokenStore(config, opts.keyring_store)
    try:
        tokens.resolve()
    except ConfigError as e:
        raise StartupError(str(e)) from None
    except OSError as e:
        raise StartupError(
            f"cannot store the token in {config.path}: {e.strerror or e} "
            "(make its folder writable, or fix the keyring)"
        ) from None
    return tokens


def _listen(
    opts: RunnerOptions, config: Config, tokens: TokenStore, out: Prepared
) -> tuple[str, int, list[str]]:
    """Bind the MCP sockets (into ``out``): the host, the port bound and the warnings so far.

    Only a port the bridge picked itself moves when busy (``port`` 0 at the first start, saved
    with ``picked_port``); one the user chose (``--port``, or a ``port`` they wrote) stops the
    start naming who holds it: moving it would silently break every client config and tunnel.
    """
    host = opts.host or config.host
    port = opts.port if opts.port is not None else config.port
    picked = opts.port is None and (config.port == 0 or config.picked_port == config.port)
    warnings: list[str] = []
    if tokens.state and tokens.state.warning:
        warnings.append(tokens.state.warning)
    try:
        out.sockets, bound, moved = bind(host, port, may_move=picked)
    except PortBusy:
        by = "--port" if opts.port is not None else f"'port' in {config.path}"
        raise StartupError(busy_line(port, by, port_holder(port))) from None
    except OSError as e:
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    if moved:
        w = (
            f"port {port} (picked by the bridge) is busy - moved to {bound}; "
            "'a2a-bridge url' and 'client-config' give the new one"
        )
        log.warning(w)
        warnings.append(w)
    if picked and (config.port == 0 or moved):
        # Keep the picked port so the URL in remote configs stays valid from now on.
        try:
            update_config(config.path, {"port": bound, "picked_port": bound})
        except (OSError, ConfigError) as e:
            log.warning("could not save the port to %s: %s", config.path, e)
    out.loopback = is_loopback_name(host.strip("[]").lower())
    if not out.loopback:
        w = (
            f"bound to {host}, which is not a loopback address - anyone who can reach "
            "it can try the token"
        )
        log.warning(w)
        warnings.append(w)
    return host, bound, warnings


def _build_bridge(opts: RunnerOptions, config: Config, tokens: TokenStore) -> Bridge:
    audit = AuditLog(
        opts.audit_path or audit_path(),
        config.audit_max_bytes,
        config.audit_keep,
        secret=lambda: tokens.token if tokens.state else None,
    )
    if opts.tools is None:
        from ..tools.builtin import builtin_tools  # only when the built-in tools are wanted

        tools = builtin_tools(config.bash_env)
    else:
        tools = opts.tools
    return Bridge(
        BridgeOptions(
            config,
            tokens,
            audit,
            tools,
            discover_tools=opts.discover_tools,
            session_table=opts.session_table,
        )
    )


def _claim_control(out: Prepared) -> ControlInfo:
    """Bind the control API's socket (into ``out``) and claim the control file for it."""
    out.control_sockets = bind_sockets(0, "127.0.0.1")
    control_port = out.control_sockets[0].getsockname()[1]
    info = ControlInfo(
        os.getpid(), url_for("127.0.0.1", control_port), secrets.token_urlsafe(32), out.url
    )
    remember(info.secret)  # never in the audit, a log line or a UI, whatever the caps
    try:
        claim(info)
    except RuntimeDirError as e:
        raise StartupError(str(e)) from None
    except OSError as e:
        raise StartupError(
            f"cannot create the control file {control_path()}: {e.strerror or e}"
        ) from None
    return info

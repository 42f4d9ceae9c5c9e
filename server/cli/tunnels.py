"""``a2a-bridge connect [--name N] [--remote-port P] [--client C] [--install] user@host`` and
``a2a-bridge tunnels [--json] [--reconnect N] [--rm N]``: tunnels the app keeps up.

With a bridge running, ``connect`` hands the tunnel to it through the control API (it saves
the tunnel, starts ``ssh -N -R`` and keeps it up; ``--install`` writes the client's config on
the remote machine from there) and waits to say whether the forward came up. With none
running, it saves the tunnel in the config: the next start brings it up.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ..control.client import ControlClient
from ..control.controlfile import read_control
from ..errors import BridgeError, ControlError, NotRunning
from ..infra.config import load_config
from ..infra.tokens import TokenStore
from ..machines.store import add_machine
from ..present.textsafe import safe
from ..present.timefmt import ago
from ..tunnels.identity import machine_token
from ..tunnels.install import REMOTE_TIMEOUT_S, install_remote
from ..tunnels.plan import TUNNEL_CLIENTS, check_spec, default_name
from ..tunnels.saved import save_tunnel
from ..tunnels.supervisor import ssh_config, ssh_env
from .remote import print_json

WAIT_UP_S = 60.0  # how long `connect` waits to say "up" (ssh's ConnectTimeout is 20 s)


def tunnel_line(t: dict[str, Any]) -> str:
    """One tunnel for a terminal: name, state, where; the last error when it is not up."""
    line = (
        f"{t['name']}  {t['state']}  {t['target']}  remote 127.0.0.1:{t['remote_port']}"
        f" -> local {t['local_port'] or '?'}"
    )
    if t.get("client"):
        line += f"  ({t['client']})"
    if t["state"] != "up" and t.get("last_error"):
        line += f"\n    last error: {safe(t['last_error'])}"
        if t.get("retry_in") is not None:
            line += f" (next try in {ago(t['retry_in'])})"
    return line


def _wait(client: ControlClient, name: str, timeout: float = WAIT_UP_S) -> dict[str, Any] | None:
    """The tunnel once it is up, or down after a second try (a first one may meet the remote
    port of a replaced ssh not yet freed), or where it is after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        found = [t for t in client.listing("tunnels")["tunnels"] if t["name"] == name]
        if not found:
            return None
        last = found[0]
        if last["state"] == "up" or (last["state"] == "down" and last["attempts"] >= 2):
            return last
        time.sleep(0.2)
    return last


def cmd_connect(args: argparse.Namespace) -> int:
    name = args.name or default_name(args.target)
    if args.install and args.client is None:
        raise BridgeError("--install needs --client (claude-code, codex, gemini or generic)")
    info = read_control()
    if info is None:
        return _connect_offline(args, name)
    client = ControlClient(info, timeout=REMOTE_TIMEOUT_S * 2 + 10)
    client.add_tunnel(name, args.target, args.remote_port, args.client)
    if args.install:
        print(client.install_client(name))
    t = _wait(client, name)
    if t is None:
        raise BridgeError(f"tunnel {name} is gone (removed meanwhile?)")
    print(tunnel_line(t))
    if t["state"] == "up":
        print(f"on {args.target}, MCP clients use {t['remote_url']} (saved; kept up by the app)")
        return 0
    print("the app keeps trying with back-off; 'a2a-bridge tunnels' shows its state")
    return 1


def _connect_offline(args: argparse.Namespace, name: str) -> int:
    """No bridge runs: save the tunnel (it starts with the bridge); ``--install`` still writes
    the remote client's config, with the token of the stored configuration."""
    cfg = load_config()
    port = args.remote_port if args.remote_port is not None else cfg.port
    if not port:
        raise BridgeError("no port chosen yet: give --remote-port, or start the bridge once")
    spec = check_spec(name, args.target, port, args.client)
    save_tunnel(cfg.path, spec)
    print(
        f"tunnel {name} saved: it starts with the bridge ('a2a-bridge serve' or the tray); "
        f"on {args.target}, MCP clients use http://127.0.0.1:{port}/"
    )
    if args.install and spec.client is not None:
        tokens = TokenStore(cfg)
        tokens.resolve()
        url = f"http://127.0.0.1:{port}/"

        def enroll(machine: str) -> str:
            minted = add_machine(cfg.path, machine, None)
            print(f"machine {machine} added: its own token goes into the remote client's config")
            if minted.warning is not None:
                print(f"warning: {minted.warning}", file=sys.stderr)
            return minted.token

        token = machine_token(tokens, name, enroll)
        done = install_remote(spec.client, spec.target, url, token, ssh_config(), env=ssh_env())
        print(done.describe())
    return 0


def cmd_tunnels(args: argparse.Namespace) -> int:
    client = ControlClient.connect()
    if args.reconnect:
        if not client.reconnect_tunnel(args.reconnect):
            raise ControlError(404, f"no tunnel named {args.reconnect}")
        print(f"tunnel {args.reconnect} reconnecting")
        return 0
    if args.rm:
        if not client.remove_tunnel(args.rm):
            raise ControlError(404, f"no tunnel named {args.rm}")
        print(f"tunnel {args.rm} stopped and removed")
        return 0
    data = client.listing("tunnels")
    if args.json:
        print_json(data)
        return 0
    if not data["tunnels"]:
        print("no tunnels ('a2a-bridge connect user@host' adds one)")
    for t in data["tunnels"]:
        print(tunnel_line(t))
    return 0


def add_tunnel_parsers(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "connect",
        help="keep an ssh tunnel to user@host up, so agents there reach this bridge",
    )
    c.add_argument("target", metavar="USER@HOST", help="user@host or a Host of your ssh config")
    c.add_argument("--name", help="the machine's name (default: the host part)")
    c.add_argument(
        "--remote-port",
        type=int,
        metavar="P",
        help="the port clients on the remote machine use (default: this bridge's port)",
    )
    c.add_argument(
        "--client",
        choices=[k.value for k in TUNNEL_CLIENTS],
        help="the MCP client on the remote machine (for --install)",
    )
    c.add_argument(
        "--install",
        action="store_true",
        help="write that client's MCP config on the remote machine (merged, 0600, over ssh)",
    )
    c.set_defaults(func=cmd_connect)
    t = sub.add_parser("tunnels", help="the ssh tunnels the app keeps up, and their state")
    t.add_argument("--json", action="store_true", help="print the API's JSON")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--reconnect", metavar="NAME", help="start that tunnel's ssh again now")
    g.add_argument("--rm", metavar="NAME", help="stop that tunnel and remove it from the config")
    t.set_defaults(func=cmd_tunnels)


__all__ = ["NotRunning", "add_tunnel_parsers", "cmd_connect", "cmd_tunnels", "tunnel_line"]

"""``a2a-bridge machines add|list|rm``: one identity (and token) per remote machine.

With a bridge running, everything goes through its control API, so a new machine's token
works at once and a removed one's next request is a 401 (its sessions end). Without one, the
config (and the keyring) are changed directly; the next start reads them. ``list`` never
prints a token; ``add`` prints the new one once, inside the client config.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from ..control.client import ControlClient
from ..control.controlfile import read_control
from ..core.startup import url_for
from ..errors import ConfigError
from ..infra.config import load_config
from ..machines.identity import DEFAULT, check_name
from ..machines.store import add_machine, remove_machine
from ..present import clientconfig
from ..present.textsafe import safe
from ..present.timefmt import ago


def _client() -> ControlClient | None:
    return ControlClient.connect() if read_control() is not None else None


def _note(text: str) -> None:
    print(f"a2a-bridge: {text}", file=sys.stderr)


def cmd_add(args: argparse.Namespace) -> int:
    name = check_name(args.name)
    client = _client()
    if client is not None:
        added = client.add_machine(name)
        token, config, warning = added.token, added.config, added.warning
    else:
        cfg = load_config()
        if cfg.port == 0:  # checked before minting: a token without a URL helps no one
            raise ConfigError(
                "no port chosen yet: start the bridge once ('a2a-bridge serve'), then add "
                "the machine"
            )
        minted = add_machine(cfg.path, name)
        token, warning = minted.token, minted.warning
        config = clientconfig.snippet(url_for(cfg.host, cfg.port), token)
    if warning:
        _note(f"warning: {warning}")
    if args.json:
        print(json.dumps({"name": name, "token": token, "config": config}, indent=2))
        return 0
    _note(
        f"machine {name} added; its token is shown this once. Put this MCP client config on "
        f"{name} (the URL is this machine's loopback: reach it through a tunnel):"
    )
    print(json.dumps(config, indent=2))
    return 0


def _offline_machines() -> list[dict[str, Any]]:
    cfg = load_config()
    rows: list[dict[str, Any]] = [
        {"name": DEFAULT, "created": None, "last_seen": None, "calls": 0, "sessions": 0}
    ]
    for m in sorted(cfg.machines, key=lambda m: m.name):
        rows.append(
            {
                "name": m.name,
                "created": m.created,
                "last_seen": m.last_seen,  # saved when the bridge last stopped
                "calls": 0,
                "sessions": 0,
            }
        )
    for row in rows:
        row["tunnel"] = None
    return rows


def _when(t: float | None, now: float) -> str:
    return "-" if t is None else f"{ago(now - t)} ago"


def cmd_list(args: argparse.Namespace) -> int:
    client = _client()
    rows = client.listing("machines")["machines"] if client else _offline_machines()
    if client is None:
        _note(
            "no bridge is running: last seen is as of its last stop; calls and sessions are "
            "counted by a running bridge"
        )
    # Only the fields a listing has: never a token, whatever the API answered.
    keep = ("name", "created", "last_seen", "calls", "sessions", "tunnel")
    rows = [{k: row.get(k) for k in keep} for row in rows]
    if args.json:
        print(json.dumps({"machines": rows}, indent=2, ensure_ascii=True))
        return 0
    now = time.time()
    table = [("NAME", "ADDED", "LAST SEEN", "CALLS", "SESSIONS", "TUNNEL")]
    for r in rows:
        table.append(
            (
                safe(str(r["name"])),
                _when(r["created"], now),
                _when(r["last_seen"], now),
                str(r["calls"]),
                str(r["sessions"]),
                safe(str(r["tunnel"])) if r["tunnel"] else "-",
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    name = args.name
    if name != DEFAULT:
        check_name(name)
    client = _client()
    if client is not None:
        if not client.remove_machine(name):
            raise ConfigError(f"no machine named {name} ('a2a-bridge machines list')")
        _note(f"machine {name} removed: its sessions ended and its token no longer works")
        return 0
    warning = remove_machine(load_config().path, name)
    if warning:
        _note(f"warning: {warning}")
    _note(f"machine {name} removed: its token no longer works")
    return 0


def add_machines_parser(sub: argparse._SubParsersAction) -> None:
    m = sub.add_parser(
        "machines",
        help="add, list or remove remote machines (one token each)",
        description="Each remote machine gets its own token; its name comes from that token.",
    )
    actions = m.add_subparsers(dest="action", required=True)
    a = actions.add_parser("add", help="mint a token for a new machine (printed once)")
    a.add_argument("name", help="the machine's name, e.g. laptop (lowercase, digits, - _)")
    a.add_argument("--json", action="store_true", help='print {"name", "token", "config"}')
    a.set_defaults(func=cmd_add)
    ls = actions.add_parser("list", help="the machines (never a token)")
    ls.add_argument("--json", action="store_true", help="print the API's JSON")
    ls.set_defaults(func=cmd_list)
    r = actions.add_parser("rm", help="revoke a machine at once (its sessions end)")
    r.add_argument("name")
    r.set_defaults(func=cmd_rm)

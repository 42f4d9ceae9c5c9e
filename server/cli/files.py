"""``a2a-bridge config check [--file F]`` and ``a2a-bridge logs [-n N] [--follow] [--path]``:
this machine's config and log file, read without a running bridge.

Why without the bridge: both answer the questions of a start that failed or went unseen (is my
config valid? what did the bridge say under autostart?), when there is no bridge to ask.
``config check`` runs the very validation a start runs (unknown keys, malformed fields, a
config others could change), so "ok" means the next start will not stop on the config.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from ..infra.config import load_config, log_path
from ..infra.logfile import tail_lines
from ..present.textsafe import safe
from .audit import Follower

LOG_KEEP_MAX = 100  # generations looked at (log.keep is at most 100)


def cmd_config_check(args: argparse.Namespace) -> int:
    """Exit 0 and ``ok: <file>``, or the start's own error line and exit 1 (through main)."""
    path = args.file or None
    cfg = load_config(os.path.abspath(path) if path else None)
    absent = "" if os.path.exists(cfg.path) else " (no file: every setting is the default)"
    print(f"ok: {safe(cfg.path)}{absent}")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    path = log_path()
    if args.path:
        print(safe(path))
        return 0
    if not os.path.exists(path) and not args.follow:
        print(f"a2a-bridge: no log yet at {safe(path)} (the bridge writes it when it runs)")
        return 0
    # Following: open the live file at its end first, so nothing written while the last
    # lines are printed is lost (a line written in that instant may show twice).
    follower = Follower(path, LOG_KEEP_MAX) if args.follow else None
    if follower is not None:
        follower.begin()
    for line in tail_lines(path, args.lines, LOG_KEEP_MAX) if args.lines > 0 else []:
        print(safe(line))
    if follower is not None:
        sys.stdout.flush()  # the last lines now, not with the first new one (a pipe buffers)
        with contextlib.suppress(KeyboardInterrupt):
            follower.run()
    return 0


def add_files_parsers(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser("config", help="check the config file without starting")
    actions = c.add_subparsers(dest="config_action", required=True)
    check = actions.add_parser(
        "check", help="validate the config as a start would: exit 1 naming the problem, or 0"
    )
    check.add_argument("--file", help="the config file to check (default: the one in use)")
    check.set_defaults(func=cmd_config_check)
    lg = sub.add_parser("logs", help="show the bridge's log file (what it printed on stderr)")
    lg.add_argument("-n", "--lines", type=int, default=50, help="how many lines (default 50)")
    lg.add_argument("--follow", "-f", action="store_true", help="keep printing new lines")
    lg.add_argument("--path", action="store_true", help="print where the log file is")
    lg.set_defaults(func=cmd_logs)

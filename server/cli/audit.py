"""``a2a-bridge audit [-n N] [--follow]``: the audit log as lines a human reads.

Why its own module: it reads the log files directly (it works with no bridge running), and
saying who decided and why in words (``denied by the user via approval page (wrong folder)``,
``timed out (policy)``) is its own job. Every field from the log is agent-influenced, so all of
it is rendered safe.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

from ..errors import BridgeError, ConfigError, exit_line
from ..infra.auditread import pair_calls, read_records, recent_calls
from ..infra.locations import (
    DEFAULT_AUDIT_KEEP,
    audit_path,
    audit_settings,
    config_path,
    read_config_file,
)
from ..present.textsafe import safe, shorten

OUTCOME_WORDS = {
    "denied": "denied",
    "not_exposed": "not exposed",
    "no_approver": "no approver attached",
    "timeout": "timed out",
    "cancelled": "cancelled",
    "paused": "paused",
}


def _describe(call: dict) -> str:
    """One audit line; every field from the log is agent-influenced, so all of it is safe-rendered.

    Says who decided and why: ``denied by the user via approval page (wrong folder)``,
    ``no approver attached``, ``timed out``, ``cancelled``, ``paused``.
    """
    start, done = call["start"] or {}, call["done"] or {}
    rec = start or done
    ts = safe(rec.get("ts", "?"))
    status = safe(done.get("outcome", "?")) if done else "PENDING"
    took = f"{safe(done['duration_ms'])}ms" if "duration_ms" in done else "-"
    who = shorten(rec.get("client") or "?", 40).text
    tool = shorten(rec.get("tool", "?"), 60).text
    args = shorten(rec.get("args", ""), 300).text
    line = f"{ts}  {status:<11} {took:>8}  {tool}  ({who})  {args}"
    if done:
        line += "  — " + _decided(done)
    return line


def _decided(done: dict) -> str:
    """Who decided and why, in words."""
    outcome, by = done.get("outcome"), done.get("decided_by") or "policy"
    approver = f" via {shorten(done['approver'], 40).text}" if done.get("approver") else ""
    reason = f" ({shorten(done['reason'], 200).text})" if done.get("reason") else ""
    if by == "user" and outcome == "denied":
        return f"denied by the user{approver}{reason}"
    if by == "user":
        then = f", then {OUTCOME_WORDS[outcome]}" if outcome in OUTCOME_WORDS else ""
        return f"approved by the user{approver}{then}"
    if outcome == "no_approver":
        return "no approver attached"
    if outcome in OUTCOME_WORDS:
        return f"{OUTCOME_WORDS[outcome]} ({safe(by)}){reason}"
    if outcome in ("ok", "error"):
        return f"allowed by {safe(by).replace('_', ' ')}"
    return f"{safe(outcome)} ({safe(by)})"


def configured_keep() -> int:
    """``audit.keep`` from the config file: how many rotated generations there may be.

    Why not :func:`load_config`: importing the config's machinery costs more than the whole
    command may take, and the audit log is what one reads when something is wrong, a broken
    rule in the config included. A file that is not JSON, or an invalid ``audit`` object, is
    still an error, in the words ``load_config`` uses.
    """
    path = config_path()
    found = read_config_file(path)
    if found is None:
        return DEFAULT_AUDIT_KEEP
    raw = found[0]
    if not isinstance(raw, dict):
        raise ConfigError(f"invalid config at {path}: expected a JSON object")
    return audit_settings(path, raw)[1]


def cmd_audit(args: argparse.Namespace) -> int:
    """The last ``-n`` calls, read from the end of the log (a full log of 200k calls costs
    what 20 calls cost); ``-n 0`` reads it all. ``--follow`` opens the live file at its end
    first and reads back from that position, so no record is missed or printed twice."""
    path = audit_path()
    keep = configured_keep()
    follower = _AuditFollower(path, keep) if args.follow else None
    if follower is not None:
        follower.begin()
    if args.limit > 0:
        calls = recent_calls(path, keep, args.limit, follower.file if follower else None)
    else:
        calls = pair_calls(read_records(path, keep))
    for call in calls:
        print(_describe(call))
    if follower is None:
        return 0
    sys.stdout.flush()  # the tail now, not when the first new record comes (a pipe buffers)
    # A call printed as PENDING above is paired when its done arrives.
    follower.starts = {c["id"]: c["start"] for c in calls if c["start"] and not c["done"]}
    with contextlib.suppress(KeyboardInterrupt):
        follower.run()
    return 0


class Follower:
    """``--follow``: hand each line to :meth:`line` once, across rotations, never half a line
    (``audit --follow`` and ``logs --follow``).

    The log file stays open: when the path names another file (rotated), the old one is read
    to its end first (records written since the last poll), then every rotated generation not
    seen before (a burst can rotate several times between two polls), oldest first, then the
    new file from its start. A line without its newline yet is kept until the rest arrives; one
    left unfinished at the end of a rotated file (a crash mid-write) is dropped.
    """

    POLL_S = 0.5

    def __init__(self, path: str, keep: int) -> None:
        self.path = path
        self.keep = keep
        self.partial = b""
        self.file: BinaryIO | None = None
        self.ino: int | None = None
        self.known: set[int] = set()  # inodes of rotated files already printed or old

    def _open(self, at_end: bool) -> None:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - kept open across polls
        except FileNotFoundError:
            return
        self.file, self.ino = f, os.fstat(f.fileno()).st_ino
        if at_end:
            f.seek(0, os.SEEK_END)

    def _generations(self) -> list[tuple[str, int]]:
        """The rotated files (``audit.jsonl.N``) that exist, oldest first, with their inodes."""
        found: list[tuple[str, int]] = []
        for n in range(self.keep, 0, -1):
            name = f"{self.path}.{n}"
            with contextlib.suppress(OSError):
                found.append((name, os.stat(name).st_ino))
        return found

    def begin(self) -> None:
        """Open the live file at its end: what is there now is printed (or older) already."""
        self._open(at_end=True)
        # What is there now has been printed (or was before us): only later files are new.
        self.known = {ino for _, ino in self._generations()}

    def run(self) -> None:
        print(f"following {self.path} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        while True:
            self.poll()
            time.sleep(self.POLL_S)

    def poll(self) -> None:
        try:
            ino: int | None = os.stat(self.path).st_ino
        except FileNotFoundError:
            ino = None
        if self.file is not None:
            self._drain(self.file)
            if ino == self.ino:
                return
            # Rotated: the writer closed the old file before renaming it, so one more read
            # gets everything it was given since the last poll.
            self._drain(self.file)
            self.file.close()
            self.file = None
            self.partial = b""  # unfinished at the end of a closed file: a crash mid-write
            if self.ino is not None:
                self.known.add(self.ino)
        elif ino is None:
            return  # no log yet
        # Whole generations that rotated past since (a burst between two polls), oldest first.
        generations = self._generations()
        for name, gen_ino in generations:
            if gen_ino not in self.known:
                self._emit_file(name)
        self.known = {gen_ino for _, gen_ino in generations}
        self._open(at_end=False)
        if self.file is not None:
            self._drain(self.file)

    def _emit_file(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError), open(name, "rb") as f:
            self._drain(f)
        self.partial = b""

    def _drain(self, f: BinaryIO) -> None:
        data = self.partial + f.read()
        *lines, self.partial = data.split(b"\n")
        for line in lines:
            self.line(line.decode("utf-8", errors="replace"))

    def line(self, line: str) -> None:
        """One whole line, as written."""
        print(safe(line), flush=True)


class _AuditFollower(Follower):
    """Each record in words; a done record is paired with its start."""

    def __init__(self, path: str, keep: int) -> None:
        super().__init__(path, keep)
        self.starts: dict[Any, dict] = {}  # start records by call id, until their done

    def line(self, line: str) -> None:
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if not isinstance(rec, dict):
            return
        if rec.get("phase") == "start":
            self.starts[rec.get("id")] = rec
            print(_describe({"start": rec, "done": None}), flush=True)
        elif rec.get("phase") == "done":
            start = self.starts.pop(rec.get("id"), None)
            print(_describe({"start": start, "done": rec}), flush=True)


HELP = "show recent tool calls (start and done paired)"


def _arguments(a: argparse.ArgumentParser) -> None:
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new calls")
    a.add_argument("--limit", "-n", type=int, default=50, help="how many calls (0 = all)")
    a.set_defaults(func=cmd_audit)


def add_audit_parser(sub: argparse._SubParsersAction) -> None:
    _arguments(sub.add_parser("audit", help=HELP, description=HELP))


def main(argv: Sequence[str]) -> int:
    """``a2a-bridge audit ...`` without the rest of the CLI (see :func:`server.cli.quick`):
    the same arguments and the same exit path as :func:`server.cli.main.main`."""
    parser = argparse.ArgumentParser(prog="a2a-bridge audit", description=HELP)
    _arguments(parser)
    args = parser.parse_args(argv)
    try:
        code = cmd_audit(args)
        sys.stdout.flush()
        return code
    except BridgeError as e:
        print(exit_line(e), file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:  # `a2a-bridge audit | head`: the reader left, stop quietly
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return 0

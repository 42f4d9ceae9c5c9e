"""Reading the audit log: every record, or the last calls read from the end of the files.

Why apart from :mod:`.audit` (the writer): ``a2a-bridge audit`` needs only this, and the
writer's imports (hashing, logging, threads, the secret scrubber) would be most of the
command's start-up.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any, BinaryIO


def read_records(path: str, keep: int = 100) -> list[dict[str, Any]]:
    """All records, oldest generation first; unparseable lines (a crash's tail) are skipped."""
    files = [f"{path}.{n}" for n in range(keep, 0, -1)] + [path]
    out: list[dict[str, Any]] = []
    for f in files:
        try:
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    with contextlib.suppress(ValueError):
                        rec = json.loads(line)
                        if isinstance(rec, dict):
                            out.append(rec)
        except FileNotFoundError:
            continue
    return out


def _lines_backwards(f: BinaryIO, end: int, block: int = 64 * 1024) -> Iterator[bytes]:
    """The non-empty lines of the first ``end`` bytes of ``f``, last first, read backwards in
    blocks: the cost is the bytes between the end and the oldest line wanted, not the file.
    An unfinished last line (a crash mid-write) comes out too; it does not parse."""
    pos = end
    rest = b""  # the head of a line that started in an earlier block
    while pos > 0:
        step = min(block, pos)
        pos -= step
        f.seek(pos)
        pieces = (f.read(step) + rest).split(b"\n")
        rest = pieces[0]
        for line in reversed(pieces[1:]):
            if line:
                yield line
    if rest:
        yield rest


def _records_backwards(
    path: str, keep: int, current: BinaryIO | None = None
) -> Iterator[dict[str, Any]]:
    """Every record, newest first: the live file (``current``, up to its position, when the
    caller holds it open), then ``path.1``, ``path.2``, ... up to ``keep`` (a missing one is
    passed over). Unparseable lines are skipped."""
    names = [path] + [f"{path}.{n}" for n in range(1, keep + 1)]
    for n, name in enumerate(names):
        if n == 0 and current is not None:
            f, end = current, current.tell()
        else:
            try:
                f = open(name, "rb")  # noqa: SIM115 - closed below
            except FileNotFoundError:
                continue  # no live file yet, or a generation someone removed
            end = f.seek(0, os.SEEK_END)
        try:
            for line in _lines_backwards(f, end):
                with contextlib.suppress(ValueError):
                    rec = json.loads(line)
                    if isinstance(rec, dict):
                        yield rec
        finally:
            if f is current:
                f.seek(end)
            else:
                f.close()


def recent_calls(
    path: str, keep: int, want: int, current: BinaryIO | None = None
) -> list[dict[str, Any]]:
    """The ``want`` calls that started last, oldest first, each ``{"id", "start", "done"}`` as
    :func:`pair_calls` gives them, reading the log backwards only until ``want`` starts were
    seen. Exact whatever lies between: a done is written after its start, so the done of every
    call in the answer has been read by then, even when its start sits in an older rotated
    file; a done whose start lies further back belongs to an older call and is left out.
    ``current``: the live file, held open by ``--follow`` at the position it follows from.
    (``pair_calls`` over the whole log would also show a done whose start was never written, a
    failed write; reading from the end cannot tell it from an older call's.)"""
    calls: dict[str, dict[str, Any]] = {}
    started: list[dict[str, Any]] = []  # newest first
    if want <= 0:
        return []
    for rec in _records_backwards(path, keep, current):
        cid, phase = rec.get("id"), rec.get("phase")
        if not isinstance(cid, str) or phase not in ("start", "done"):
            continue
        entry = calls.setdefault(cid, {"id": cid, "start": None, "done": None})
        if entry[phase] is not None:
            continue  # a repeat: pair_calls keeps the last written, the first met here
        entry[phase] = rec
        if phase == "start":
            started.append(entry)
            if len(started) >= want:
                break
    started.reverse()
    return started


def pair_calls(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join start/done records by id: one entry per call, oldest first; hung calls have no done."""
    calls: dict[str, dict[str, Any]] = {}
    for rec in records:
        cid = rec.get("id")
        if not isinstance(cid, str):
            continue
        entry = calls.setdefault(cid, {"id": cid, "start": None, "done": None})
        if rec.get("phase") in ("start", "done"):
            entry[rec["phase"]] = rec
    return list(calls.values())

"""Turning ``rg``'s output into ``find`` and ``grep`` results, under the path policy.

Split from ``search.py`` (which builds the ``rg`` command lines and runs them). Both parsers
work on whole blocks of bytes with C-level operations (``split``, ``findall``, ``count``,
``set``) and keep Python loops to what must be judged one by one: the entries that are shown,
and each *distinct* file behind a counted grep match. A Python loop per path or per match
costs more than ``rg``'s own walk or search, and it holds the GIL while the event loop wants it.
"""

from __future__ import annotations

import itertools
import os
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..policy import safeopen
from ..policy.walk import EntryGate, in_lane, shown_name
from .fileio import glob_regex
from .rg import RgRun

WALK_LIMIT = 200_000
FS_DECODE = (sys.getfilesystemencoding(), sys.getfilesystemencodeerrors())
MATCH_TEXT_MAX = 300
# Past the shown cap, matches are still counted (cheaply) up to this many, then rg is stopped.
COUNT_LIMIT = 100_000

_RECORD_PATH = re.compile(rb"(?m)^([^\0\n]*)\0")  # the path of each ``path NUL line`` record


Filter = Callable[[list[str]], list[str]]


def name_filter(pattern: str) -> Filter:
    """The paths of a list that match the glob, as ``glob_regex(pattern).match`` decides.

    The two shapes agents send most, a name suffix (``*.py``) and a plain name (``Makefile``),
    are string tests (no regex call per path: 0.9 vs 2.4 ms for 10,000 paths); every other
    pattern takes the regex. A pattern without ``/`` matches the last component at any depth.
    """
    rx = glob_regex(pattern)
    plain = "/" not in pattern and not any(c in pattern for c in "?[")
    if plain and pattern.startswith("*") and "*" not in pattern[1:]:
        tail = pattern[1:]  # no '/' in it: the path ends with it iff its last component does
        return lambda paths: [p for p in paths if p.endswith(tail)]
    if plain and "*" not in pattern:
        below = "/" + pattern
        return lambda paths: [p for p in paths if p == pattern or p.endswith(below)]
    match = rx.match
    return lambda paths: [p for p in paths if match(p)]


@dataclass(slots=True)
class FindWalk:
    """``rg --files --null`` output → the sorted entries (files and their directories) that
    match the glob, judged by the policy in order until the cap is shown.

    rg's list is split, decoded and filtered block by block *while rg still walks* (on a
    machine with a free core that work costs no wall time); only the sort and the policy for
    the shown entries wait for the end of the list.
    """

    pattern: str
    gate: EntryGate
    matched: list[str] = field(default_factory=list)
    parents: set[str] = field(default_factory=set)
    cut: bool = False

    def collect(self, run: RgRun) -> FindWalk:
        keep = name_filter(self.pattern)
        parents = self.parents
        seen = 0
        carry = b""
        try:
            for block in run.chunks():
                data = carry + block if carry else block
                end = data.rfind(b"\0")
                if end == -1:
                    carry = data
                    continue
                carry = data[end + 1 :]
                paths = data[:end].decode(*FS_DECODE).split("\0")
                seen += len(paths)
                if seen > WALK_LIMIT:
                    del paths[len(paths) - (seen - WALK_LIMIT) :]
                    self.cut = True
                self._add(paths, keep, parents)
                if self.cut:
                    break
            if carry and not self.cut:  # rg was stopped in the middle of a name
                self._add([carry.decode(*FS_DECODE)], keep, parents)
        finally:
            run.kill()
            run.finish()
        return self

    def _add(self, paths: list[str], keep: Filter, parents: set[str]) -> None:
        self.matched += keep(paths)
        parents.update([p.rpartition("/")[0] for p in paths])

    def matches(self) -> list[str]:
        """Every matching entry, unsorted: files as listed, directories with a trailing '/'.

        Every ancestor directory of a listed file is an entry too (find matches directories).
        """
        dirs = set(self.parents)
        for d in self.parents:
            d = d.rpartition("/")[0]
            while d and d not in dirs:
                dirs.add(d)
                d = d.rpartition("/")[0]
        dirs.discard("")
        match = glob_regex(self.pattern).match
        return self.matched + [d + "/" for d in dirs if match(d)]

    def text(self, shown: str, cap: int) -> str:
        """Sorted matches; the path policy judges them in order until ``cap`` are shown.

        Entries past the cap are counted, not judged (judging costs a few µs per entry, more
        than the walk itself): their names are never shown, so the only effect is that the
        "more matches" count may include some protected entries.
        """
        gate = self.gate
        matched = self.matches()
        matched.sort()
        base = gate.base.rstrip(os.sep)
        found: list[str] = []
        used = 0
        folder_rel: str | None = None
        folder, rules = base, gate.rules(base)
        lane = in_lane(matched)
        try:
            for rel in lane:
                if len(found) >= cap:
                    break
                used += 1
                is_dir = rel.endswith("/")
                parent, _, name = (rel[:-1] if is_dir else rel).rpartition("/")
                if parent != folder_rel:  # sorted: the entries of one folder come together
                    folder_rel = parent
                    folder = f"{base}{os.sep}{parent}" if parent else base
                    rules = gate.rules(folder)
                st: os.stat_result | None = None
                if not is_dir:
                    try:  # the link count: a hard link to a protected file is that file
                        st = os.lstat(f"{folder}{os.sep}{name}")
                    except OSError:
                        st = None
                if gate.child(rules, folder, name, st, is_dir=is_dir):
                    continue
                found.append(shown_name(rel))
        finally:
            lane.close()  # a suspended lane iterator holds the lane
        if not found:
            text = f"no paths under {shown} match {self.pattern!r}"
        else:
            text = "\n".join(found)
            more = len(matched) - used
            if more > 0:
                text += f"\n… {more} more matches not shown; narrow the pattern"
        if self.cut:
            text += f"\n… stopped after {WALK_LIMIT} entries; search a smaller directory"
        note = gate.note()
        return f"{text}\n{note}" if note else text


@dataclass(slots=True)
class GrepMatches:
    """Parses ``rg --null --line-number`` output: ``path NUL line:text LF`` per match.

    With ``label`` (one file, searched through the descriptor the bridge opened and judged
    itself) every record is that file: rg calls it ``<stdin>``, the result calls it ``label``.
    """

    gate: EntryGate
    cwd: str
    single: bool
    cap: int
    shown: str
    label: str = ""
    out: list[tuple[str, int, str]] = field(default_factory=list)
    total: int = 0
    stopped: bool = False  # we stopped counting at COUNT_LIMIT and killed rg
    binary: bool = False  # a file named directly is binary
    code: int = 0
    err: str = ""
    prefix: str = ""  # cwd with one trailing separator

    def __post_init__(self) -> None:
        self.prefix = self.cwd.rstrip(os.sep) + os.sep

    def collect(self, run: RgRun) -> GrepMatches:
        """Parse until ``cap`` matches are kept, then only count (see :meth:`_count_rest`)."""
        buf = b""
        cur_path: bytes | None = None
        cur_ok = False
        cur_shown = ""
        chunks = run.chunks()
        try:
            for block in chunks:
                buf = buf + block if buf else block
                pos = 0
                n = len(buf)
                while pos < n and len(self.out) < self.cap:
                    z = buf.find(b"\0", pos)
                    if self.single:
                        nl = buf.find(b"\n", pos)
                        if nl != -1 and (z == -1 or nl < z):
                            # "path: binary file matches (...)": rg's note for a named file
                            self.binary = True
                            pos = nl + 1
                            continue
                    if z == -1:
                        break
                    nl = buf.find(b"\n", z)
                    if nl == -1:
                        break
                    path = buf[pos:z]
                    if path != cur_path:
                        cur_path = path
                        cur_ok = self._allowed(path)
                        cur_shown = shown_name(self._rel(path)) if cur_ok else ""
                    if cur_ok:
                        self.total += 1
                        self._keep(cur_shown, buf[z + 1 : nl])
                    pos = nl + 1
                buf = buf[pos:]
                if len(self.out) >= self.cap:
                    self._count_rest(buf, chunks, run)
                    break
        finally:
            run.kill()
            self.code, self.err = run.finish()
        return self

    def _count_rest(self, buf: bytes, chunks: Any, run: RgRun) -> None:
        """Past the cap: count the remaining records up to COUNT_LIMIT, then stop rg. Their
        names and lines are never shown, but each *file* is still judged (once): a left-out
        file must not count, or the total would tell whether a secret matched the regex.

        Per block: one ``findall`` for the records' paths and one ``set`` of them; a Python
        call only for each path not judged before (rg prints a file's matches together, so
        about once per file). Blocks are handled as they come, while rg still searches."""
        limit = self.cap + COUNT_LIMIT
        judged: set[bytes] = set()
        refused: set[bytes] = set()
        carry = b""
        for block in itertools.chain((buf,), chunks):
            data = carry + block if carry else block
            cut = data.rfind(b"\n") + 1
            whole, carry = data[:cut], data[cut:]
            paths = _RECORD_PATH.findall(whole)
            n = len(paths)
            uniq = set(paths)
            if not uniq <= judged:
                for path in uniq - judged:
                    judged.add(path)
                    if not self._allowed(path, counted_only=True):
                        refused.add(path)
            if refused:
                for path in uniq & refused:
                    n -= paths.count(path)
            self.total += n
            if self.total >= limit:
                self.stopped = True
                run.kill()
                return

    def _rel(self, raw: bytes) -> str:
        if self.label:
            return self.label
        rel = raw[2:] if raw.startswith(b"./") else raw
        return rel.decode(*FS_DECODE)

    def _allowed(self, raw: bytes, *, counted_only: bool = False) -> bool:
        """The policy's verdict on one file rg printed. Not counted in the closing note:
        whether a left-out file *matched* is its content. A labelled single file was judged
        when it was opened.

        rg opens the files of a walk by path, following symlinks. Without ``--follow`` it
        only ever lists regular files, so a file whose lines are shown must still be reached
        by its name with no symlink at any component (opened like ``read`` opens, never
        blocking on a FIFO), and that file's identity is judged (a hard link to a protected
        file is that file). A name that is now a symlink, a FIFO, gone, or behind a swapped
        directory was changed after rg listed it: what rg read is unknown, so it is left out.
        A file past the shown cap is only counted: an ``lstat`` (the name itself must still be
        a regular file) costs half the open, on up to 100,000 files. (A swap undone before
        this check cannot be seen: docs/security/model.md.)"""
        if self.label:
            return True
        real = self.prefix + self._rel(raw)
        if counted_only:
            try:
                st = os.lstat(real)
            except OSError:
                return False
            if not stat.S_ISREG(st.st_mode):
                return False
        else:
            try:
                fd, st = safeopen.open_read(real)
            except OSError:
                return False
            os.close(fd)
        return not self.gate.withholds(real, st)

    def _keep(self, shown: str, rec: bytes) -> None:
        number, _, text = rec.partition(b":")
        line = text.decode("utf-8", "replace").rstrip("\r")
        if len(line) > MATCH_TEXT_MAX:
            line = line[:MATCH_TEXT_MAX] + "…"
        try:
            lineno = int(number)
        except ValueError:
            return
        self.out.append((shown, lineno, line))

    def text(self, pattern: str, timed_out: bool, timeout_s: float) -> str:
        self.out.sort(key=lambda m: (m[0], m[1]))
        lines = [f"{p}:{n}:{t}" for p, n, t in self.out]
        if lines:
            result = "\n".join(lines)
        elif self.binary:
            result = f"{self.shown}: binary file matches; grep shows text files only"
        else:
            result = f"no matches for {pattern!r} in {self.shown}"
        more = self.total - len(self.out)
        if more > 0:
            at_least = "at least " if self.stopped else ""
            result += f"\n… {at_least}{more} more matches not shown; narrow the pattern or path"
        if timed_out:
            result += f"\n… search stopped after {timeout_s:g} s; results are partial"
        note = self.gate.note()
        return f"{result}\n{note}" if note else result

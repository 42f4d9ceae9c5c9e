"""The path policy, entry by entry, for the walking tools (``ls``, ``find``, ``grep``).

Only the base of a walk goes through the call's escalation check; everything the walk reaches
is judged here: protected entries (credential stores, secret-looking names, the bridge's own
files, hard links to protected files) are left out of names and contents and counted, and the
result ends with one line saying how many were left out and why.

When the base itself is protected, a human has already approved this very call (nothing else
covers a protected path), so its entries are shown: the human saw what they allowed.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from .entries import FolderRules
from .gitsecrets import is_git_config
from .paths import CallPaths, PathPolicy, always_asks

# What a walk knows of a directory it did not stat (its d_type, or rg's listing): the policy
# only needs to know it is one (a secret-looking *name* judges files, not directories).
S_ISDIR, S_ISREG = stat.S_ISDIR, stat.S_ISREG
# One walk at a time runs its per-entry loop (ls, find's shown entries). Each ``lstat`` there
# releases the GIL; with several pool threads in such loops on 2 cores every release became a
# contended hand-off: 4 threads listing 1,000 entries cost 2.7–3.8x the CPU per call of one
# (11.6–15.7 vs 4.1–4.3 ms) and fewer calls/s; in the lane 5.0–5.2 ms at the same calls/s as
# one thread (issue 26, docs/design/performance.md). Released every LANE_CHUNK entries, so a
# huge folder does not hold up a small one.
WALK_LANE = threading.Lock()
T = TypeVar("T")
LANE_CHUNK = 256
DIR_STAT = os.stat_result((stat.S_IFDIR | 0o755, 0, 0, 0, 0, 0, 0, 0, 0, 0))


def policy_of(ctx_policy: PathPolicy | CallPaths) -> PathPolicy:
    """The :class:`PathPolicy` behind a tool context's policy (``CallPaths`` wraps it)."""
    return ctx_policy.policy if isinstance(ctx_policy, CallPaths) else ctx_policy


def judge_entry(policy: PathPolicy, real: str, st: os.stat_result | None) -> bool:
    """True when the policy refuses this walked entry (its real path; ``st`` from lstat)."""
    return policy.judge_entry(real, st) is not None


def protected_dirs_under(policy: PathPolicy, base: str) -> list[str]:
    """Real paths of protected directories strictly below ``base``, to prune up front."""
    return [d for d in policy.protected_dirs_under(base) if d != base]


@dataclass(slots=True)
class EntryGate:
    """Judges the entries of one walk below ``base`` and counts what it leaves out."""

    policy: PathPolicy
    base: str
    active: bool = True
    left_out: int = 0
    _seen: set[str] = field(default_factory=set)
    _name_info: Callable[[str], tuple[str, bool]] = field(init=False)

    def __post_init__(self) -> None:
        self._name_info = self.policy.name_info

    @classmethod
    def for_base(cls, ctx_policy: PathPolicy | CallPaths, base: str) -> EntryGate:
        policy = policy_of(ctx_policy)
        approved_protected = always_asks(policy.judge(base))
        return cls(policy, base, active=not approved_protected)

    def refuses(self, real: str, st: os.stat_result | None = None, *, count: bool = True) -> bool:
        """True (and, with ``count``, counted once per path) when ``real`` must be left out.

        grep passes ``count=False``: it only meets files that matched, so counting them would
        tell the agent whether a secret's content matched its regex."""
        if not self.active or not judge_entry(self.policy, real, st):
            return False
        if count and real not in self._seen:
            self._seen.add(real)
            self.left_out += 1
        return True

    def withholds(self, real: str, st: os.stat_result | None = None) -> bool:
        """:meth:`refuses` (uncounted) for a file whose *content* a walk returns (grep's
        matches), and a git config file holding a credential (it is read, bounded: blocking,
        call it from a worker thread). Where a box can be made the walk sees a redacted copy
        anyway; without one, this keeps ``grep -r token ~/.config/git`` from showing it."""
        if self.refuses(real, st, count=False):
            return True
        return self.active and is_git_config(real) and self.policy.git_config_holds_secret(real)

    def rules(self, folder: str) -> FolderRules:
        """The children's rules of the real folder ``folder`` (see :meth:`child`)."""
        return self.policy.folder_rules(folder)

    def child(
        self,
        rules: FolderRules,
        folder: str,
        name: str,
        st: os.stat_result | None,
        *,
        is_dir: bool = False,
        count: bool = True,
    ) -> bool:
        """:meth:`refuses` for the entry ``name`` of the real ``folder`` (``rules`` from
        :meth:`rules`), the verdict the same: only a name the folder's rules suspect, a
        secret-looking file name, or a regular file with more than one link (a hard link may
        be a protected file's other name) takes the full per-path judgement; a child that is
        none of those is not refused, with no path built and no index looked up.

        ``st`` from ``lstat`` when the walk has it; without it ``is_dir`` says the entry is a
        directory (known from its ``d_type``), else it is judged as a file."""
        if not self.active:
            return False
        if st is not None:
            is_dir = S_ISDIR(st.st_mode)
        key, secret = self._name_info(name)
        if (
            (secret and not is_dir)
            or rules.suspect(key)
            or (st is not None and st.st_nlink > 1 and S_ISREG(st.st_mode))
        ):
            real = folder.rstrip(os.sep) + os.sep + name
            return self.refuses(real, DIR_STAT if is_dir and st is None else st, count=count)
        return False

    def pruned(self) -> list[str]:
        """Protected directories below the base that the walk must not enter."""
        return protected_dirs_under(self.policy, self.base) if self.active else []

    def count_pruned(self, dirs: list[str], *, hidden: bool) -> None:
        """Count pruned directories that exist and the walk would otherwise have entered."""
        for d in dirs:
            rel = os.path.relpath(d, self.base)
            if rel.startswith(".."):
                continue
            if not hidden and any(part.startswith(".") for part in rel.split(os.sep)):
                continue  # hidden: the walk would not have gone there anyway
            if os.path.lexists(d) and d not in self._seen:
                self._seen.add(d)
                self.left_out += 1

    def note(self) -> str:
        """The closing line, or "" when nothing was left out."""
        if not self.left_out:
            return ""
        n = self.left_out
        return f"({n} {'entry' if n == 1 else 'entries'} in protected locations not shown)"


def in_lane(items: Sequence[T]) -> Generator[T, None, None]:
    """``items``, walked while holding :data:`WALK_LANE` (let go between chunks). Close the
    iterator when stopping early (``contextlib.closing``): a suspended one holds the lane."""
    for start in range(0, len(items), LANE_CHUNK):
        with WALK_LANE:
            yield from items[start : start + LANE_CHUNK]


def shown_name(name: str) -> str:
    """A file name as the agent sees it: undecodable bytes (surrogate escapes, from a
    non-UTF-8 name) become visible ``\\xNN`` escapes instead of breaking the JSON reply."""
    if name.isascii():
        return name
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        out = []
        for ch in name:
            code = ord(ch)
            if 0xDC80 <= code <= 0xDCFF:
                out.append(f"\\x{code - 0xDC00:02x}")
            elif 0xD800 <= code <= 0xDFFF:
                out.append(f"\\u{code:04x}")
            else:
                out.append(ch)
        return "".join(out)


def shown_bytes(raw: bytes) -> str:
    """Raw path bytes (from ``rg``) shown like :func:`shown_name`."""
    return shown_name(os.fsdecode(raw))

"""Risk cues: a short warning on a waiting call that does something easy to regret.

A cue is a hint for the human reading the call, never a decision: the judge
(:mod:`server.policy.judge`) decides what asks, runs or is refused, and nothing here changes
that. Cues are read from the same shell analysis the rules use (:mod:`server.policy.bash.parse`:
the simple commands found anywhere, wrappers and ``sh -c`` strings included, and every reason
the command is not plain), not from regular expressions over its text, so ``echo "rm -rf /"``
does not cue and ``\\rm -fr x``, ``sudo rm -r x``, ``sh -c 'git push -f'`` do.

Kinds: piping into a shell (``curl … | sh``), force pushes (``git push --force``/``-f``/``+ref``),
recursive deletes (``rm -r``, ``find -delete``), and writes outside the roots.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..policy.bash.parse import SHELLS, SimpleCommand, analyze, program_index
from ..policy.bash.wrappers import subcommand_starts
from ..policy.paths import is_within
from .textsafe import shorten


class Risk(enum.StrEnum):
    SHELL_PIPE = "shell_pipe"  # runs what it reads (often code fetched from the network)
    FORCE_PUSH = "force_push"  # rewrites a remote branch's history
    RECURSIVE_DELETE = "recursive_delete"  # deletes a whole tree
    OUTSIDE_WRITE = "outside_write"  # writes outside the configured roots


# A cue in a few words, for a menu label or a notification (the full text is in the details).
SHORT = {
    Risk.SHELL_PIPE: "pipes into a shell",
    Risk.FORCE_PUSH: "force push",
    Risk.RECURSIVE_DELETE: "recursive delete",
    Risk.OUTSIDE_WRITE: "writes outside the roots",
}


def short_text(cue: dict[str, Any]) -> str:
    """The few words for a cue from a preview's ``risks`` (unknown kinds: its text)."""
    try:
        return SHORT[Risk(str(cue.get("risk")))]
    except ValueError:
        return str(cue.get("text") or "risk")


@dataclass(frozen=True, slots=True)
class Cue:
    risk: Risk
    text: str  # safe words for every UI

    def to_json(self) -> dict[str, str]:
        return {"risk": self.risk.value, "text": self.text}


DOWNLOADERS = frozenset({"curl", "wget", "fetch", "aria2c", "http", "https", "xh", "lwp-request"})
# Interpreters that run code handed to them as a string or a file descriptor.
CODE_RUNNERS = SHELLS | frozenset(
    {"python", "python3", "perl", "ruby", "node", "php", "lua", "pwsh", "powershell"}
)
RUNS_STRING = ("runs a string as shell code", "runs its arguments as shell code")
# find's tests that take a value: ``find -name -delete`` looks for files named "-delete".
FIND_VALUED = frozenset(
    {"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-regex", "-iregex",
     "-lname", "-ilname", "-newer", "-user", "-group", "-perm", "-type", "-size", "-mtime",
     "-mmin", "-atime", "-amin", "-ctime", "-cmin", "-maxdepth", "-mindepth", "-fstype",
     "-inum", "-links", "-uid", "-gid", "-samefile", "-printf", "-fprint", "-fprintf", "-fls",
     "-context", "-xtype", "-used"}
)  # fmt: skip
CUE_MAX = 6


def _base(cmd: SimpleCommand) -> tuple[str, tuple[str, ...]] | None:
    """The program's base name and the literal texts after it, or None (computed name)."""
    i = program_index(cmd.words)
    if i is None or not cmd.words[i].literal:
        return None
    return cmd.words[i].text.rsplit("/", 1)[-1].lstrip("\\"), tuple(
        w.text for w in cmd.words[i + 1 :]
    )


def _options(args: Sequence[str]) -> list[str]:
    """The option words before ``--`` (after it, ``-r`` is a file name)."""
    out: list[str] = []
    for a in args:
        if a == "--":
            break
        if a.startswith("-") and len(a) > 1:
            out.append(a)
    return out


def _recursive_rm(args: Sequence[str]) -> bool:
    for o in _options(args):
        if o == "--recursive" or (not o.startswith("--") and ("r" in o[1:] or "R" in o[1:])):
            return True
    return False


def _find_deletes(args: Sequence[str]) -> bool:
    return any(
        a == "-delete" and (k == 0 or args[k - 1] not in FIND_VALUED) for k, a in enumerate(args)
    )


def _force_push(cmd: SimpleCommand, args: Sequence[str]) -> bool:
    """``git [global options] push`` with ``--force``, ``-f`` (also in a cluster) or a
    ``+refspec``; ``--force-with-lease`` is the careful form and does not cue."""
    starts = [0, *subcommand_starts("git", cmd.words[-len(args) :] if args else ())]
    for k in starts:
        if k < len(args) and args[k] == "push":
            rest = args[k + 1 :]
            ended = False
            for a in rest:
                if a == "--":
                    ended = True
                    continue
                if not ended and (
                    a in ("--force", "--mirror")
                    or (a.startswith("-") and not a.startswith("--") and "f" in a[1:])
                ):
                    return True
                if a.startswith("+") and len(a) > 1:
                    return True
    return False


def bash_cues(command: str, roots: Sequence[str] = (), cwd: str | None = None) -> list[Cue]:
    """The cues of one bash command (see the module docstring); [] when none apply."""
    a = analyze(command)
    cues: list[Cue] = []
    progs = [(c, _base(c)) for c in a.everywhere]
    named = [(c, b[0], b[1]) for c, b in progs if b is not None]
    downloads = sorted({p for _, p, _ in named if p in DOWNLOADERS})
    piped = [
        n.removeprefix("piping into ").split(",")[0]
        for n in a.notes
        if n.startswith("piping into ")
    ]
    reenters = any(n.endswith(RUNS_STRING) for n in a.notes)
    dynamic_runner = any(
        p in CODE_RUNNERS and any(not w.literal for w in c.words) for c, p, _ in named
    ) or (
        any("process substitution" in n for n in a.notes)
        and any(p in CODE_RUNNERS for _, p, _ in named)
    )
    if piped or (downloads and (reenters or dynamic_runner)):
        if downloads:
            text = f"runs code fetched from the network ({downloads[0]} into a shell)"
        else:
            text = f"pipes into {piped[0]}, which runs what it reads"
        cues.append(Cue(Risk.SHELL_PIPE, shorten(text, 120).text))
    if any(p == "git" and _force_push(c, args) for c, p, args in named):
        cues.append(Cue(Risk.FORCE_PUSH, "force push: rewrites the remote branch's history"))
    deletes = [
        p
        for _, p, args in named
        if (p in ("rm", "rmdir") and _recursive_rm(args)) or (p == "find" and _find_deletes(args))
    ]
    if deletes:
        how = "find -delete" if deletes[0] == "find" else f"{deletes[0]} -r"
        cues.append(Cue(Risk.RECURSIVE_DELETE, f"recursive delete ({how}): removes a whole tree"))
    outside = _redirects_outside(a.notes, roots, cwd)
    if outside is not None:
        cues.append(
            Cue(Risk.OUTSIDE_WRITE, f"writes outside the roots: {shorten(outside, 160).text}")
        )
    return cues[:CUE_MAX]


def _redirects_outside(notes: Sequence[str], roots: Sequence[str], cwd: str | None) -> str | None:
    """The first redirection target (``> /etc/x``) outside every root, or None."""
    if not roots:
        return None
    for n in notes:
        if not n.startswith("redirection "):
            continue
        parts = n.split(" ", 2)
        if len(parts) < 3 or parts[1].startswith("<"):
            continue
        target = os.path.expanduser(parts[2])
        if not os.path.isabs(target):
            if cwd is None:
                continue
            target = os.path.join(cwd, target)
        target = os.path.normpath(target)
        if not any(is_within(target, r) for r in roots):
            return target
    return None


def call_cues(
    tool: str,
    args: dict[str, Any],
    *,
    escalation: Any = None,
    roots: Sequence[str] = (),
    cwd: str | None = None,
) -> list[Cue]:
    """Every cue of one call: bash from its command, write/edit from where they write (the
    escalation the path policy found: outside the roots)."""
    if tool == "bash":
        command = args.get("command")
        return bash_cues(command, roots, cwd) if isinstance(command, str) else []
    kind = str(getattr(escalation, "kind", ""))
    if tool in ("write", "edit") and kind == "outside_roots":
        path = shorten(getattr(escalation, "path", ""), 160).text
        return [Cue(Risk.OUTSIDE_WRITE, f"writes outside the roots: {path}")]
    return []


def cues_text(cues: Sequence[dict[str, Any]] | None) -> list[str]:
    """``⚠ force push: …`` lines from a preview's ``risks`` (already safe)."""
    return [f"⚠ {c.get('text')}" for c in cues or [] if isinstance(c, dict)]

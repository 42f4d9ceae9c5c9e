"""Session grants: "Allow … for this session", as narrow as the call it was given on.

A grant once meant "every later call of this tool from this session runs unattended": after
one on ``echo one``, ``rm -rf ~/Documents`` ran. Now a grant has a **scope** and its label says
it (box.md § Grants as narrow as the call):

- ``bash``: the program and its subcommand of each simple command (``git commit …``,
  ``npm test …``), kept as allow rules (``bash(git commit *)``) so a later call is judged
  exactly like rules are: per simple command, every one must fall within a granted scope, and
  nothing unreadable (a redirect, a substitution) is ever covered.
- ``write``/``edit``: the call's project (the git top-level of the file) or, outside a git
  project, the file's folder; never the home itself.
- any other tool: the tool, as before ("every call of ``mcp__x__y``").

No grant is offered where it cannot apply: an escalated call (private, persistence, outside
the roots), a command no rule could allow, a destructive program (``rm``, ``git push
--force``…), or a scope holding hidden characters (the human could not read what is granted).
Pure except :func:`project_of`, which looks for ``.git`` (run it off the event loop).
"""

from __future__ import annotations

import enum
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..present.textsafe import hidden_in
from .bash.parse import SimpleCommand, analyze, program_index
from .paths import is_within
from .proposals import command_prefix, never_wild, quote_word, unquote_words
from .rules import Rule, RuleError, RuleList, RuleSet, evaluate, parse_rule

WRITE_TOOLS = frozenset({"write", "edit"})
# Programs whose every use may destroy or run what it is pointed at: a session-wide
# "prog …" would cover ``rm -rf ~`` or ``find ~ -delete``; approve these once.
NO_GRANT = frozenset(
    {"rm", "rmdir", "unlink", "shred", "dd", "truncate", "srm", "wipe", "mkfs", "find",
     "sed", "gsed", "chmod", "chown", "chgrp", "mv", "ln", "kill", "pkill", "killall"}
)  # fmt: skip


class GrantKind(enum.StrEnum):
    TOOL = "tool"  # every call of the tool (plugins, upstream tools)
    COMMANDS = "commands"  # bash: these program + subcommand prefixes
    FOLDER = "folder"  # write/edit: this project or folder, at any depth


@dataclass(frozen=True, slots=True)
class Grant:
    """One "Allow … for this session" a human gave: what it covers, and how it is shown."""

    tool: str
    kind: GrantKind
    scope: str  # what the label names: "`git commit …`", "~/proj", "`mcp__gh__get`"
    rules: tuple[Rule, ...] = ()  # COMMANDS: bash(prefix *) allow rules
    folder: str = ""  # FOLDER: the real project or folder

    @property
    def label(self) -> str:
        """The button's text in every UI."""
        if self.kind is GrantKind.FOLDER:
            verb = "writes" if self.tool == "write" else "edits"
            return f"Allow {verb} in {self.scope} for this session"
        return f"Allow {self.scope} for this session"


def _shown_path(real: str, home: str) -> str:
    if real == home:
        return "~"
    if is_within(real, home):
        return "~/" + os.path.relpath(real, home).replace(os.sep, "/")
    return real


def project_of(real: str, roots: Sequence[str], home: str) -> str | None:
    """The folder a write/edit grant covers: the git top-level holding ``real`` when it lies
    inside a root and is not the home, else the file's folder (not the home either); None
    when neither is inside a root. File I/O: never on the event loop."""
    folder = os.path.dirname(real)
    d = folder
    while True:
        if d != home and os.path.lexists(os.path.join(d, ".git")):
            if any(is_within(d, r) for r in roots):
                return d
            break
        parent = os.path.dirname(d)
        if parent == d or d == home:
            break
        d = parent
    if folder != home and any(is_within(folder, r) for r in roots):
        return folder
    return None


def _command_scope(cmd: SimpleCommand) -> tuple[str, ...] | None:
    """The words of a grant's prefix for one simple command, or None (no grant)."""
    prefix = command_prefix(cmd)
    i = program_index(cmd.words)
    if prefix is None or i is None or never_wild(cmd):
        return None
    if cmd.words[i].text.rsplit("/", 1)[-1] in NO_GRANT:
        return None
    return prefix


def offer(
    tool: str,
    args: Mapping[str, Any],
    *,
    escalated: bool,
    project: str | None = None,
    home: str | None = None,
) -> Grant | None:
    """The grant "Allow for this session" would give on this call, or None (not offered).

    ``project``: for write/edit, :func:`project_of` of the call's real path (None: not
    offered). ``escalated``: the call needs a human whatever is granted (private,
    persistence, outside the roots): no grant can apply.
    """
    if escalated:
        return None
    home = home or os.path.realpath(os.path.expanduser("~"))
    grant: Grant | None
    if tool == "bash":
        grant = _bash_offer(args)
    elif tool in WRITE_TOOLS:
        if project is None:
            return None
        grant = Grant(tool, GrantKind.FOLDER, _shown_path(project, home), folder=project)
    elif tool in ("read", "ls", "find", "grep"):
        return None  # their prompts are escalations; a tier of prompt is asked per call
    else:
        grant = Grant(tool, GrantKind.TOOL, f"every `{tool}` call")
    if grant is None or hidden_in([grant.scope]):
        return None
    return grant


def _bash_offer(args: Mapping[str, Any]) -> Grant | None:
    cmd = args.get("command")
    if not isinstance(cmd, str):
        return None
    a = analyze(cmd)
    if a.unsafe is not None or not a.commands:
        return None
    prefixes: list[tuple[str, ...]] = []
    for c in a.commands:
        p = _command_scope(c)
        if p is None:
            return None
        if p not in prefixes:
            prefixes.append(p)
    try:
        texts = [" ".join(quote_word(w) for w in p) for p in prefixes]
        rules = tuple(parse_rule(f"bash({t} *)", allow=True) for t in texts)
    except RuleError:
        return None
    scope = ", ".join(f"`{unquote_words(p)} …`" for p in prefixes)
    grant = Grant("bash", GrantKind.COMMANDS, scope, rules=rules)
    return grant if covering([grant], "bash", args, None) is grant else None


def covering(
    grants: Iterable[Grant], tool: str, args: Mapping[str, Any], real: str | None
) -> Grant | None:
    """The grant that lets this call run unattended, or None. The caller has already made
    sure the call is not escalated; for bash every simple command must fall within the
    granted prefixes (of any of the session's bash grants), as with allow rules."""
    mine = [g for g in grants if g.tool == tool]
    for g in mine:
        if g.kind is GrantKind.TOOL:
            return g
        if g.kind is GrantKind.FOLDER and real is not None and is_within(real, g.folder):
            return g
    bash = [g for g in mine if g.kind is GrantKind.COMMANDS]
    if not bash:
        return None
    rules = tuple(r for g in bash for r in g.rules)
    v = evaluate(RuleSet(allow=rules), tool, args, None)
    if v.decision is not RuleList.ALLOW:
        return None
    return next((g for g in bash if any(r.text == v.rule for r in g.rules)), bash[0])

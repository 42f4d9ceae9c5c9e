"""Proposals: the narrow rule "Always allow calls like this" offers for one call.

A proposal covers the call it was made for and as little else as possible: ``bash`` gets the
program and its subcommand with the rest of the words (never an interpreter running a script
it was handed inline), path tools get the real file or its folder, other tools their exact
arguments. The human can edit it before saving; :mod:`server.policy.rulebook` checks the edit.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping
from typing import Any

from ..present.textsafe import hidden_in
from .bash.parse import SCRIPT_RUNNERS, SimpleCommand, analyze, program_index
from .bash.wrappers import WRAPPERS
from .rules import (
    ARG_NAME,
    NOTHING_ELSE,
    PATH_TOOLS,
    RULE_MAX,
    WALK_TOOLS,
    Kind,
    RuleError,
    RuleList,
    RuleSet,
    evaluate,
    parse_rule_lines,
)

_SUBCOMMAND = re.compile(r"^[A-Za-z][A-Za-z0-9_:-]*$")
# awk's first word is its program, the narrow part of a proposal (like python's script).
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
# Programs whose options anywhere on the line can run code or write files (``sed -e '1e id'``
# after the script, GNU getopt permutes): no narrow proposal exists.
_NO_PROPOSAL = frozenset({"sed", "gsed"})


def _quote(word: str) -> str:
    """A call's word as a rule word that matches only itself: quoted for the shell, and its
    ``*?[`` made literal (``[*]``), or ``awk '/x*/'`` would save a glob that also matches
    ``awk '/x/{system("…")} /x/'``."""
    word = re.sub(r"([*?\[])", r"[\1]", word)
    return word if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", word) else shlex.quote(word)


def _propose_command(cmd: SimpleCommand) -> str | None:
    words = cmd.words
    i = program_index(words)
    if i is None or not all(w.literal for w in words[: i + 1]):
        return None
    head = [_quote(w.text) for w in words[: i + 1]]
    prog = words[i].text.rsplit("/", 1)[-1]
    if prog in _NO_PROPOSAL or prog in WRAPPERS or prog == "find":
        # A wrapper's or find's own options are the narrow part: propose the exact command.
        if prog in _NO_PROPOSAL or not all(w.literal for w in words):
            return None
        return f"bash({' '.join(_quote(w.text) for w in words)})"
    nxt = words[i + 1] if i + 1 < len(words) else None
    if SCRIPT_RUNNERS.match(prog) or prog in _AWKS:
        # python script.py *: the script is the narrow part; python -c ... has none.
        if nxt is None or not nxt.literal or nxt.text.startswith("-"):
            return None
        head.append(_quote(nxt.text))
    elif nxt is not None and nxt.literal and _SUBCOMMAND.match(nxt.text):
        head.append(nxt.text)
    return f"bash({' '.join(head)} *)"


def _glob_escape(path: str) -> str:
    return re.sub(r"([*?\[\]\\!#])", r"\\\1", path)


def _arg_glob(value: str) -> str:
    """An argument's string as an ``arg=glob`` value that matches only itself (fnmatch has no
    backslash escape: ``*?[`` become ``[*]``, ``[?]``, ``[[]``)."""
    return re.sub(r"([*?\[])", r"[\1]", value)


def _arg_value(value: Any) -> str | None:
    """One argument as a rule value, or None when the grammar cannot say exactly it.

    Strings are quoted JSON (``id="42"`` matches only the string); numbers, booleans and null
    are bare JSON literals, which an allow rule matches only as that type (``id=42`` never
    matches the string ``"42"``, ``recursive=false`` never ``"false"``): the rule allows what
    the human saw and nothing that only prints the same. Objects, arrays and non-finite
    numbers have no exact form.
    """
    if isinstance(value, str):
        return json.dumps(_arg_glob(value), ensure_ascii=False)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, bool | int | float) or value is None:
        return json.dumps(value)
    return None


def _propose_args(tool: str, args: Mapping[str, Any]) -> str | None:
    """``tool(a="x", n=42, nothing else)``: every argument the call had, and no other (a later
    call that adds an ``env`` is not "like this"), or None when one of them cannot be written
    exactly (a name outside the grammar, an object, an array): "Always allow" is then not
    offered. A call without arguments gets ``tool(nothing else)``."""
    pairs: list[str] = []
    for key, value in sorted(args.items()):
        text = _arg_value(value)
        if text is None or not isinstance(key, str) or not ARG_NAME.match(key):
            return None
        pairs.append(f"{key}={text}")
    return f"{tool}({', '.join([*pairs, NOTHING_ELSE])})"


def savable(text: str) -> str | None:
    """Why ``text`` may not become a standing "Always allow" rule, or None when it may.

    The one place this is decided: the proposal offered with a pending call
    (:func:`propose`), what the snapshot and ``/api/pending`` carry, and what
    :meth:`server.policy.rulebook.RuleBook.rule_to_save` saves from the tray, the page, ``watch``
    and
    ``a2a-bridge approve --always`` all pass through it. A rule with a hidden character (raw,
    or inside a quoted value where JSON escaped it) would show the human something else than
    what it matches.
    """
    if len(text) > RULE_MAX:
        return f"longer than {RULE_MAX} characters"
    try:
        parsed = parse_rule_lines(text)
    except RuleError as e:
        return str(e)
    values: list[Any] = [text]
    for r in parsed:
        if r.kind is Kind.ARGS:
            values += [a.name for a in r.args] + [a.glob for a in r.args]
        values += list(r.words)
    if hidden_in(values):
        return "it contains hidden characters (bidi, invisible or control characters)"
    return None


def _path_glob(real: str, home: str) -> str:
    p = real.replace(os.sep, "/")
    h = home.replace(os.sep, "/").rstrip("/")
    if p == h:
        shown = "~"
    elif p.startswith(h + "/"):
        shown = "~/" + _glob_escape(p[len(h) + 1 :])
    else:
        shown = _glob_escape(p)
    return shown.rstrip("/") + "/**"


def propose(
    tool: str,
    args: Mapping[str, Any],
    real: str | None,
    *,
    home: str | None = None,
    base: str | None = None,
) -> str | None:
    """A narrow rule that covers this call (several lines for a compound command), or None.

    Never ``bash(*)``; None when no rule could ever allow the call (a redirect, a
    substitution...) so that the UIs do not offer to save one that would never apply.
    """
    home = home or os.path.realpath(os.path.expanduser("~"))
    if tool == "bash":
        cmd = args.get("command")
        if not isinstance(cmd, str):
            return None
        a = analyze(cmd)
        if a.unsafe is not None:
            return None
        texts: list[str] = []
        for c in a.commands:
            t = _propose_command(c)
            if t is None:
                return None
            if t not in texts:
                texts.append(t)
        text = "\n".join(texts)
    elif tool in PATH_TOOLS:
        if real is None:
            return None
        folder = real if tool in WALK_TOOLS else os.path.dirname(real)
        text = f"{tool}({_path_glob(folder, home)})"
    else:
        proposal = _propose_args(tool, args)
        if proposal is None:
            return None
        text = proposal
    if savable(text) is not None:
        return None
    # A proposal must allow the very call it came from; otherwise offer nothing.
    try:
        rules = RuleSet(allow=tuple(parse_rule_lines(text, home=home, base=base)))
    except RuleError:
        return None
    return text if evaluate(rules, tool, args, real).decision is RuleList.ALLOW else None

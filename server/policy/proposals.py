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

from ..present.secrets import scrub
from ..present.textsafe import hidden_in
from .bash.parse import SCRIPT_RUNNERS, SimpleCommand, analyze, program_index
from .bash.wrappers import GLOBAL_OPTIONS, WRAPPERS, subcommand_starts
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
# Programs that read or write whatever they are pointed at (box.md § Grants as narrow as the
# call): ``bash(grep *)`` would allow ``grep -r . ~``, ``bash(curl *)`` any upload, ``bash(cp
# *)`` any copy. Their proposal is the call's literal words, nothing more.
POINTED = frozenset(
    {"grep", "egrep", "fgrep", "rg", "ag", "ack", "cat", "tac", "less", "more", "bat", "batcat",
     "head", "tail", "wc", "nl", "od", "hexdump", "xxd", "strings", "base64", "base32",
     "md5sum", "sha1sum", "sha256sum", "sha512sum", "b2sum", "cksum", "cmp", "diff", "comm",
     "cut", "paste", "join", "uniq", "sort", "tr", "fold", "fmt", "column", "jq", "yq",
     "curl", "wget", "nc", "ncat", "socat", "scp", "rsync", "sftp", "ftp",
     "tar", "zip", "unzip", "gzip", "gunzip", "zcat", "bzip2", "bunzip2", "xz", "unxz",
     "zstd", "7z", "cpio", "cp", "mv", "ln", "install", "tee", "dd", "du", "df", "stat",
     "file", "touch", "mkdir", "truncate", "split", "csplit", "sed", "gsed", "awk", "gawk",
     "mawk", "nawk", "find", "fd", "fdfind", "locate", "printf", "test", "[", "xargs",
     "openssl", "gpg", "shred", "chmod", "chown", "chgrp", "realpath", "readlink", "tree"}
)  # fmt: skip
# Never a wildcard, whatever the call: a literal proposal or none (``rm -rf build`` must not
# become ``bash(rm *)``, which runs ``rm -rf ~``).
NEVER_WILD_PROGRAMS = frozenset({"rm", "rmdir", "unlink", "srm", "wipe"})
_PUBLISH = frozenset({"publish", "unpublish", "deprecate", "owner", "yank", "upload"})
# A recursive flag or an output option: the path after it is where the program writes or
# how far it reads, so the proposal keeps the literal words.
_LITERAL_OPTIONS = frozenset(
    {"-o", "--output", "-t", "--target-directory", "-d", "-r", "-R", "--recursive", "-O",
     "--output-document", "--output-file"}
)  # fmt: skip


def quote_word(word: str) -> str:
    """A call's word as a rule word that matches only itself: quoted for the shell, and its
    ``*?[`` made literal (``[*]``), or ``awk '/x*/'`` would save a glob that also matches
    ``awk '/x/{system("…")} /x/'``."""
    word = re.sub(r"([*?\[])", r"[\1]", word)
    return word if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", word) else shlex.quote(word)


def unquote_words(words: tuple[str, ...]) -> str:
    """Words as a human reads a command (shell-quoted where needed), for labels."""
    return " ".join(
        shlex.quote(w) if not re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", w) else w for w in words
    )


def _program(cmd: SimpleCommand) -> tuple[int, str] | None:
    i = program_index(cmd.words)
    if i is None or not all(w.literal for w in cmd.words[: i + 1]):
        return None
    return i, cmd.words[i].text.rsplit("/", 1)[-1]


def never_wild(cmd: SimpleCommand) -> bool:
    """``rm``, ``git push --force``, ``npm publish``: never covered by a wildcard (no
    ``prog *`` proposal, no session grant); a literal proposal at most."""
    found = _program(cmd)
    if found is None:
        return True
    i, prog = found
    rest = [w.text for w in cmd.words[i + 1 :]]
    if prog in NEVER_WILD_PROGRAMS:
        return True
    # The subcommand as written or past global options (``git -C . push``, ``npm -w x publish``).
    starts = [0, *subcommand_starts(prog, cmd.words[i + 1 :])]
    subs = {rest[k] for k in starts if k < len(rest)}
    # ``git push *`` would cover ``git push --force``, ``+main``, ``--delete``: literal only.
    return bool(subs & _PUBLISH) or (prog == "git" and "push" in subs)


def _literal_only(cmd: SimpleCommand, i: int, prog: str) -> bool:
    """The proposal is the call's literal words: a pointed-at program, a wrapper, a
    never-wild one, or a recursive/output option anywhere among the arguments."""
    if prog in POINTED or prog in WRAPPERS or never_wild(cmd):
        return True
    for w in cmd.words[i + 1 :]:
        t = w.text.split("=", 1)[0]
        if t in _LITERAL_OPTIONS:
            return True
        if re.fullmatch(r"-[A-Za-z]+", t) and ("r" in t or "R" in t):
            return True  # a short-option cluster holding -r/-R (``-rn``)
    return False


def command_prefix(cmd: SimpleCommand) -> tuple[str, ...] | None:
    """The narrow head of a command (raw words): assignments, the program and its subcommand
    or script (``git commit``, ``python3 tool.py``), or None when there is none to name
    (``python3 -c …``, a computed program)."""
    found = _program(cmd)
    if found is None:
        return None
    i, prog = found
    words = cmd.words
    head = [w.text for w in words[: i + 1]]
    nxt = words[i + 1] if i + 1 < len(words) else None
    if SCRIPT_RUNNERS.match(prog) or prog in _AWKS:
        if nxt is None or not nxt.literal or nxt.text.startswith("-"):
            return None
        head.append(nxt.text)
    elif nxt is not None and nxt.literal and _SUBCOMMAND.match(nxt.text):
        head.append(nxt.text)
    elif prog in GLOBAL_OPTIONS:
        return None  # ``git -C x …``: the subcommand cannot be named, ``git *`` is everything
    return tuple(head)


def _propose_command(cmd: SimpleCommand) -> str | None:
    found = _program(cmd)
    if found is None:
        return None
    i, prog = found
    if _literal_only(cmd, i, prog):
        if not all(w.literal for w in cmd.words):
            return None
        return f"bash({' '.join(quote_word(w.text) for w in cmd.words)})"
    head = command_prefix(cmd)
    if head is None:
        if prog not in GLOBAL_OPTIONS or not all(w.literal for w in cmd.words):
            return None
        return f"bash({' '.join(quote_word(w.text) for w in cmd.words)})"  # git -C x log
    return f"bash({' '.join(quote_word(w) for w in head)} *)"


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
    if scrub(text) != text:
        # A token (or a piece of one) an agent echoed: a standing rule would show and save it.
        return "it contains a secret the bridge holds (a token)"
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


def _holds_home(folder: str, home: str) -> bool:
    """The folder is the home or holds it (``/home``, ``/``)."""
    f = folder.replace(os.sep, "/").rstrip("/") + "/"
    h = home.replace(os.sep, "/").rstrip("/") + "/"
    return h.startswith(f)


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
        if tool not in WALK_TOOLS and _holds_home(folder, home):
            # A file straight in the home (or above it): its folder at any depth is every
            # project, document and download of the home (``write(~/**)``), never "calls like
            # this one". The file itself is the narrowest rule (as a grant never names the home).
            text = f"{tool}({_path_glob(real, home).removesuffix('/**')})"
        else:
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


# Why "Always allow" is not offered: one sentence per cause, the same in every UI. The old
# single text ("no rule can name exactly this call") was wrong for most calls that reached it
# (an SSH key read, a redirect, an ask rule, hidden characters).
NO_RULE_FALLBACK = "no rule can name exactly this call"


def why_no_rule(
    tool: str,
    args: Mapping[str, Any],
    real: str | None,
    *,
    always_asks: str | None = None,
    ask_rule: str | None = None,
    guard: bool = False,
    home: str | None = None,
    base: str | None = None,
) -> str | None:
    """Why no "Always allow" rule is offered for this call, or None when one is.

    ``always_asks``: the escalation's words when it always asks (protected, persistence, the
    bridge's own files, unchecked); ``ask_rule``: the ask rule that matched; ``guard``: deny
    rules exist and the command cannot be read. Pure: the same analysis :func:`propose` runs.
    """
    if always_asks:
        return f"{always_asks}: that always asks a human, no rule may cover it"
    if ask_rule:
        return f"the ask rule {ask_rule} matches it, so an allow rule would never apply"
    proposal = propose(tool, args, real, home=home, base=base)
    if proposal is not None and not guard:
        return None
    if tool == "bash":
        return _why_no_bash_rule(args, guard)
    if tool in PATH_TOOLS:
        if real is None:
            return "its path could not be resolved, so no rule can name it"
        return _why_unsavable(f"{tool}({real})") or NO_RULE_FALLBACK
    if any(not isinstance(k, str) or not ARG_NAME.match(k) for k in args):
        return "an argument's name is outside the rule grammar, so no rule can name it exactly"
    if any(_arg_value(v) is None for v in args.values()):
        return (
            "an argument is an object, an array or a non-finite number: no rule can name it exactly"
        )
    return _why_unsavable(json.dumps(dict(args), ensure_ascii=False)) or NO_RULE_FALLBACK


def _why_no_bash_rule(args: Mapping[str, Any], guard: bool) -> str:
    cmd = args.get("command")
    if not isinstance(cmd, str):
        return "the call has no command"
    a = analyze(cmd)
    if guard:
        return f"deny rules exist and the command cannot be fully read ({a.unsafe}): it always asks"
    if a.unsafe is not None:
        return f"no rule can allow this command: {a.unsafe}"
    for c in a.commands:
        if _propose_command(c) is None:
            if not all(w.literal for w in c.words):
                return f"a word of `{c.shown}` is computed when it runs: no rule can name it"
            return f"`{c.shown}` has no program a rule can name"
    if hidden_in(cmd):
        return "the command contains hidden characters, so no rule is saved from it"
    return NO_RULE_FALLBACK


def _why_unsavable(text: str) -> str | None:
    if hidden_in(text):
        return "it contains hidden characters, so no rule is saved from it"
    if len(text) > RULE_MAX:
        return f"the rule would be longer than {RULE_MAX} characters"
    return None

"""Rules: per-call argument patterns the human can read, e.g. ``bash(git status)``.

Pure (no I/O besides ``realpath`` of the home directory at parse time). Three lists,
``deny`` then ``ask`` then ``allow``; the first list with a match decides, no match falls back
to the tool's tier (the bridge does that).

``bash`` commands are read by :mod:`server.policy.bash.parse` (tree-sitter-bash). A call is allowed
by
rules only when **every** simple command in it matches an allow rule and nothing in it can run
code or write files behind the rules' back; anything else makes the call *unallowable* (it
asks, or is denied where a deny rule matches any command found anywhere in it, substitutions
included). Deny and ask rules also see the program by its last path component (``/bin/rm`` is
``rm``) and past leading assignments; allow rules stay literal (``./git`` may be anything).

Path tools match the *real* path with gitignore-style globs (``pathspec``, the semantics
Claude Code users know): ``~/`` is the home directory, ``/`` is absolute, a pattern without a
slash (``*.lock``) matches at any depth, ``**`` spans directories, and another relative pattern
with a slash is taken relative to the first root. Other tools: ``tool(arg=value, ...)``, typed
(:class:`ArgPattern`): an allow rule's ``x=false`` never matches the string ``"false"``.

This module parses rules, holds the three lists and decides (:func:`evaluate`); the narrow rule
offered by "Always allow calls like this" is :mod:`server.policy.proposals`' job.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import json
import math
import os
import re
import shlex
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pathspec

from ..errors import BridgeError
from ..machines.identity import DEFAULT as DEFAULT_MACHINE
from ..machines.identity import MachineNameError, check_name
from .bash.parse import (
    Analysis,
    SimpleCommand,
    Walker,
    Word,
    analyze,
    analyze_pattern,
    normalise,
    program_index,
)
from .bash.wrappers import subcommand_starts

PATH_TOOLS = frozenset({"read", "write", "edit", "ls", "find", "grep"})
WALK_TOOLS = frozenset({"ls", "find", "grep"})  # their path is a directory
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
RULE_MAX = 1000  # characters; a rule is something a human reads
# The last item of an ``arg=glob`` pattern that makes it exact: a call with any argument the
# rule does not name does not match (what "Always allow" proposes for an upstream tool).
NOTHING_ELSE = "nothing else"


class RuleError(BridgeError, ValueError):
    """A rule that cannot be used; the message says why, in a few words."""


class RuleList(enum.StrEnum):
    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


ORDER = (RuleList.DENY, RuleList.ASK, RuleList.ALLOW)


# -- rules --------------------------------------------------------------------------------------


class Kind(enum.StrEnum):
    ANY = "any"  # ``tool``: every call
    BASH = "bash"
    PATH = "path"
    ARGS = "args"


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    tool: str
    kind: Kind
    words: tuple[str, ...] = ()  # bash pattern tokens; "*" is any run of words
    path: str = ""  # the path glob as written
    spec: pathspec.PathSpec | None = field(default=None, compare=False)
    args: tuple[ArgPattern, ...] = ()
    exact: bool = False  # ARGS: ", nothing else": the call has no argument the rule omits
    # ``@laptop bash(...)``: the rule applies only to calls from that machine (its token);
    # None: to every machine.
    machine: str | None = None

    def applies_to(self, machine: str | None) -> bool:
        return self.machine is None or self.machine == machine

    def matches(self, tool: str, args: Mapping[str, Any], real: str | None, allow: bool) -> bool:
        """For ``kind`` BASH, use :meth:`matches_command` per simple command instead."""
        if tool != self.tool:
            return False
        if self.kind is Kind.ANY:
            return True
        if self.kind is Kind.PATH:
            if real is None or self.spec is None:
                return False
            # Real paths come resolved; normalise anyway so "a/../b" can never match "a/**".
            rel = os.path.normpath(real).replace(os.sep, "/").lstrip("/")
            if self.spec.match_file(rel):
                return True
            return tool in WALK_TOOLS and self.spec.match_file(rel + "/")
        if self.kind is Kind.ARGS:
            # "nothing else" narrows an allow rule; a deny or ask rule still matches a call
            # that adds an argument (an upstream may ignore it: no way around a deny rule).
            if allow and self.exact and set(args) - {a.name for a in self.args}:
                return False
            if allow:
                # An argument named again in another case (``DRY_RUN`` beside ``dry_run``) may
                # be the one a case-insensitive upstream reads: the allow rule does not match.
                named = {a.name.casefold(): a.name for a in self.args}
                if any(named.get(str(k).casefold(), k) != k for k in args):
                    return False
                return all(a.name in args and a.matches(args[a.name], True) for a in self.args)
            # Deny/ask: names case-insensitively (Go's encoding/json fills Force from "FORCE").
            folded = [(str(k).casefold(), v) for k, v in args.items()]
            return all(
                any(k == a.name.casefold() and a.matches(v, False) for k, v in folded)
                for a in self.args
            )
        return False

    def matches_command(self, cmd: SimpleCommand, allow: bool) -> bool:
        if allow:  # literal: ``git`` never covers ``./git`` (an agent-written binary)
            return _match_words(self.words, cmd.words, True)
        forms = _program_forms(cmd.words)
        return any(_match_words(p, w, False) for p in self._deny_patterns() for w in forms)

    def _deny_patterns(self) -> tuple[tuple[str, ...], ...]:
        """A deny rule written with a path (``bash(/bin/rm *)``) also names the program by its
        last component: ``rm x`` may well run ``/bin/rm``."""
        first = self.words[0] if self.words else ""
        base = first.rsplit("/", 1)[-1]
        if base and base != first and not any(c in first for c in "*?["):
            return (self.words, (base, *self.words[1:]))
        return (self.words,)


def _scalar(v: Any) -> bool:
    return isinstance(v, int | float | bool) or v is None


class ValueKind(enum.StrEnum):
    """What an ``arg=value`` value is, which decides the JSON types it can match."""

    TEXT = "text"  # quoted, ``x="a*"``: a glob over a string
    WORD = "word"  # bare and not a JSON literal, ``x=acme/*``: a glob over a string
    LITERAL = "literal"  # bare ``true``, ``false``, ``null`` or a JSON number: that value


# A bare value that is exactly a JSON number is that number, not text (``01``, ``+1``, ``1.``,
# ``NaN`` are not JSON numbers: they stay words, globs over strings as they always were).
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
# A string a deny/ask rule's number may be read from (Python's int()/float(), JS's Number()).
_LOOSE_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_PREFIXED_INT = re.compile(r"[+-]?0(?:[xX][0-9a-fA-F]+|[oO][0-7]+|[bB][01]+)")
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None}
_COERCE_MAX = 64  # characters: a longer string is never read as a number for deny/ask
_WALK_MAX = 10_000  # values inside one argument a deny/ask rule searches; more: it matches


@dataclass(frozen=True, slots=True)
class ArgPattern:
    """One ``name=value`` of an ``arg=glob`` rule, typed.

    An **allow** rule matches exactly what the human read: a quoted value or a bare word only
    a JSON string, ``false`` only the boolean false, ``7`` only the number 7 (numbers compare
    by value, so ``7`` also matches ``7.0`` and ``0`` matches ``-0``; a boolean is never a
    number). Objects and arrays never match. A **deny or ask** rule asks "may this be what the
    rule names?", so it matches more, never less: the string forms of a literal (``"false"``,
    ``"FALSE"``, ``"7.0"``, ``"0x7"``, ``"７"``, a float64-equal number), a value whose JSON
    text matches the glob (``x="7*"`` matches ``70``), any value found inside an array or
    object, under the argument's name in any case (the rule matches in :meth:`Rule.matches`) —
    an upstream that coerces types cannot slip a denied value past it by sending another JSON
    type.
    """

    name: str
    glob: str  # TEXT/WORD: the glob; LITERAL: the literal as written
    kind: ValueKind
    value: Any = None  # LITERAL: the JSON value

    def matches(self, v: Any, allow: bool) -> bool:
        if self._exact(v):
            return True
        if allow:
            return False
        stack, budget = [v], _WALK_MAX
        while stack:  # every value inside, without recursion (nesting depth is the agent's)
            budget -= 1
            if budget < 0:
                return True  # too big to search on the event loop: it may be what it names
            x = stack.pop()
            if isinstance(x, dict):
                stack.extend(x.values())
            elif isinstance(x, list):
                stack.extend(x)
            elif self._exact(x) or self._loose(x):
                return True
        if isinstance(v, dict | list):  # also the container's JSON text, as a coercion sees it
            try:
                text = json.dumps(v, ensure_ascii=False)
            except (RecursionError, ValueError):
                return True  # too deep to read: it may be what the rule names
            return fnmatch.fnmatchcase(text, self.glob)
        return False

    def _exact(self, v: Any) -> bool:
        if self.kind is not ValueKind.LITERAL:
            return isinstance(v, str) and fnmatch.fnmatchcase(v, self.glob)
        return _same(self.value, v)

    def _loose(self, v: Any) -> bool:
        """Deny/ask only: the same value under another JSON type, or the JSON text matching."""
        if not _scalar(v) and not isinstance(v, str):
            return False
        text = v if isinstance(v, str) else json.dumps(v)
        if fnmatch.fnmatchcase(text, self.glob):
            return True
        if self.kind is not ValueKind.LITERAL:
            return False
        if isinstance(v, str) and len(v) <= _COERCE_MAX:
            word = _plain_digits(unicodedata.normalize("NFKC", v)).strip()
            if word.lower() in _LITERALS:
                return _same(self.value, _LITERALS[word.lower()])
            number = _read_number(word)
            return number is not None and _same_number(self.value, number)
        return _same_number(self.value, v)


def _plain_digits(text: str) -> str:
    """Any Unicode decimal digit as its ASCII digit (Python's int() reads ``"٧"`` as 7)."""
    return "".join(str(d) if (d := unicodedata.decimal(c, None)) is not None else c for c in text)


def _read_number(word: str) -> int | float | None:
    """A string as a lenient upstream reads it as a number (deny/ask only): ``07``, ``+7``,
    ``7.``, ``.5``, ``1_000``, ``0x7``, ``0o7``, ``0b111``; None when it is not one."""
    w = word.replace("_", "")
    if not w or "_" in (word[0], word[-1]):
        return None
    if _PREFIXED_INT.fullmatch(w):
        return int(w, 0)
    if _LOOSE_NUMBER.fullmatch(w):  # "07", "+7", "7.", ".5": how upstreams read it
        digits = w.isdigit() or (w[0] in "+-" and w[1:].isdigit())
        return int(w) if digits else float(w)
    return None


def _f64(n: int | float) -> float:
    """The number as JavaScript's JSON.parse (a float64) holds it."""
    try:
        return float(n)
    except OverflowError:
        return math.inf if n > 0 else -math.inf


def _same_number(a: Any, b: Any) -> bool:
    """Deny/ask: equal as written, or equal once both are read as float64
    (``9007199254740993`` is ``9007199254740992`` to JSON.parse)."""
    if _same(a, b):
        return True
    numbers = [x for x in (a, b) if isinstance(x, int | float) and not isinstance(x, bool)]
    return len(numbers) == 2 and _f64(a) == _f64(b)


def _same(a: Any, b: Any) -> bool:
    """JSON equality of two scalars: same type (a boolean is not a number), numbers by value."""
    if a is None or isinstance(a, bool):
        return type(b) is type(a) and b == a
    if isinstance(a, int | float):
        return isinstance(b, int | float) and not isinstance(b, bool) and b == a
    return False


def _bare_value(name: str, text: str) -> ArgPattern:
    """An unquoted value: a JSON literal is typed, anything else is a glob over strings."""
    if text in _LITERALS:
        return ArgPattern(name, text, ValueKind.LITERAL, _LITERALS[text])
    if _JSON_NUMBER.fullmatch(text):
        number = json.loads(text)
        if isinstance(number, float) and not math.isfinite(number):
            raise RuleError(f"the number for {name} is out of range")
        return ArgPattern(name, text, ValueKind.LITERAL, number)
    return ArgPattern(name, text, ValueKind.WORD)


def _program_forms(words: Sequence[Word]) -> list[tuple[Word, ...]]:
    """Deny/ask: the ways bash may run the same program. ``/bin/rm``, ``./rm`` and ``X=1 rm``
    run ``rm`` as surely as ``rm`` does, so the command word is also matched by its last path
    component (and that in lower case without ``.exe``) and without the assignments before it.
    Allow rules never use these forms: a path-named program may be anything."""
    forms = [tuple(words)]
    i = program_index(words)
    if i is None:
        return forms
    rest = tuple(words[i:])
    if i:
        forms.append(rest)
    prog = rest[0]
    if not prog.literal:
        return forms
    base = prog.text.rsplit("/", 1)[-1]
    # macOS and Windows file systems ignore case (``/bin/RM`` is rm), Git Bash runs ``rm.exe``.
    plain = base.casefold().removesuffix(".exe")
    for name in dict.fromkeys((base, plain)):
        if name and name != prog.text:
            forms.extend((*f[: len(f) - len(rest)], Word(name), *rest[1:]) for f in forms[:2])
    # ``git -C . push`` runs ``git push``: also without the global options before a subcommand.
    named = list(forms)
    for k in subcommand_starts(plain, rest[1:]):
        forms.extend((*f[: len(f) - len(rest) + 1], *rest[1 + k :]) for f in named)
    return forms


def _match_words(pattern: Sequence[str], words: Sequence[Word], allow: bool) -> bool:
    """``*`` matches any run of words. Allow: a dynamic word matches only ``*``. Deny/ask
    ("may it match?"): a dynamic word matches any single token."""
    if pattern and words and pattern[0] != "*" and words[0].literal:
        first = pattern[0]
        if not any(c in first for c in "*?[") and first != words[0].text:
            return False  # the common case: another program

    @functools.cache
    def m(i: int, j: int) -> bool:
        if i == len(pattern):
            return j == len(words)
        tok = pattern[i]
        if tok == "*":
            return any(m(i + 1, k) for k in range(j, len(words) + 1))
        if j == len(words):
            return False
        w = words[j]
        if not w.literal:
            ok = not allow
        elif any(c in tok for c in "*?["):
            ok = fnmatch.fnmatchcase(w.text, tok)
        else:
            ok = w.text == tok
        return ok and m(i + 1, j + 1)

    return m(0, 0)


def _split_rule(text: str) -> tuple[str, str | None]:
    t = text.strip()
    if not t:
        raise RuleError("empty rule")
    if len(t) > RULE_MAX:
        raise RuleError(f"longer than {RULE_MAX} characters")
    if "(" not in t:
        return t, None
    name, _, rest = t.partition("(")
    if not rest.endswith(")"):
        raise RuleError("expected tool(pattern) with a closing parenthesis")
    return name.strip(), rest[:-1]


def _split_machine(text: str) -> tuple[str | None, str]:
    """``@laptop bash(git status)`` -> ``("laptop", "bash(git status)")``: a rule scoped to
    one machine (``rules add --machine laptop``). No ``@``: ``(None, text)``."""
    t = text.strip()
    if not t.startswith("@"):
        return None, text
    name, _, rest = t[1:].partition(" ")
    try:
        check_name(name)
    except MachineNameError as e:
        raise RuleError(f"'@{name[:40]}': {e}") from None
    if not rest.strip() or rest.strip().startswith("@"):
        raise RuleError(f"expected a rule after @{name}, e.g. @{name} bash(git status)")
    return name, rest


def scoped(text: str, machine: str | None) -> str:
    """A rule's text scoped to ``machine`` (``rules add --machine``); None: unchanged.
    A text that already names a machine is refused rather than scoped twice."""
    if machine is None:
        return text
    check_name(machine)
    if text.strip().startswith("@"):
        raise RuleError("the rule already names a machine (@NAME); drop --machine or the @NAME")
    return f"@{machine} {text.strip()}"


def scoped_proposal(rule: str | None, machine: str | None, several: bool) -> str | None:
    """The "Always allow" proposal for a call from ``machine``: no wider than the call, so
    scoped to its machine (each line of a compound one) once the bridge knows more than one
    machine, or whenever the call is not ``default``'s. With only ``default`` there is no one
    else to scope against and the proposal reads as before machines existed (a rule saved
    then applies to machines added later; ``rules list`` shows it unscoped)."""
    if rule is None or machine is None or not (several or machine != DEFAULT_MACHINE):
        return rule
    return "\n".join(scoped(line, machine) for line in rule.splitlines() if line.strip())


def parse_rule(
    text: str, *, home: str | None = None, base: str | None = None, allow: bool = False
) -> Rule:
    """Parse one rule; ``home`` for ``~/`` and ``base`` (the first root) for relative paths.

    ``allow``: the rule goes into the allow list, where a rule that can never allow anything
    (``bash(sh -c *)``) is refused rather than silently useless.
    """
    if not isinstance(text, str):
        raise RuleError("must be a string")
    machine, text = _split_machine(text)
    if machine is not None:
        rule = parse_rule(text, home=home, base=base, allow=allow)
        return replace(rule, text=f"@{machine} {rule.text}", machine=machine)
    tool, pattern = _split_rule(text)
    if not TOOL_NAME.match(tool):
        raise RuleError(f"{tool!r} is not a tool name (letters, digits, _ . -)")
    canonical = text.strip()
    if pattern is None:
        return Rule(canonical, tool, Kind.ANY)
    if not pattern.strip():
        raise RuleError(f"empty pattern; write {tool} alone to match every call")
    if tool == "bash":
        return Rule(canonical, tool, Kind.BASH, words=_bash_pattern(pattern, allow))
    if tool in PATH_TOOLS:
        glob = pattern.strip()
        return Rule(canonical, tool, Kind.PATH, path=glob, spec=_path_spec(glob, home, base))
    args, exact = _arg_pattern(pattern)
    return Rule(canonical, tool, Kind.ARGS, args=args, exact=exact)


def _bash_pattern(pattern: str, allow: bool) -> tuple[str, ...]:
    p = pattern.strip()
    if p.endswith(":*"):  # Claude Code's legacy prefix form: npm run test:*
        p = p[:-2] + " *"
    try:
        tokens = tuple(shlex.split(p, comments=False, posix=True))
    except ValueError as e:
        raise RuleError(f"bash pattern: {e}") from None
    if not tokens:
        raise RuleError("empty bash pattern")
    if len(tokens[-1]) > 1 and tokens[-1].endswith("*") and not tokens[-1].endswith("\\*"):
        # Claude Code's meaning: a ``*`` glued to the end of the last word matches the rest of
        # the command (``bash(echo forbidden*)`` denies ``echo forbidden now``), for deny, ask
        # and allow alike; the word itself stays a glob (``forbiddenX`` too).
        tokens = (*tokens, "*")
    probe = Walker(0)
    probe.check_program(SimpleCommand(normalise([Word(t, t != "*") for t in tokens])))
    shape = analyze_pattern(p)  # the rule's own words, not what a wrapper runs
    if len(shape.commands) != 1 or (shape.unsafe and shape.unsafe != probe.unsafe):
        raise RuleError(
            "a bash rule is one simple command (no ; && || | & redirections or substitutions): "
            "write one rule per command"
        )
    if allow and probe.unsafe and tokens[0] != "*":
        raise RuleError(f"an allow rule can never cover this: {probe.unsafe}")
    return tokens


def _path_spec(glob: str, home: str | None, base: str | None) -> pathspec.PathSpec:
    if glob.startswith("!"):
        raise RuleError("negation (!) is not supported: use a deny or ask rule")
    if "\n" in glob or "\r" in glob:
        raise RuleError("a path pattern is one line")
    g = glob
    if g == "~" or g.startswith("~/"):
        h = home or os.path.realpath(os.path.expanduser("~"))
        g = h.replace(os.sep, "/").rstrip("/") + g[1:]
    elif g.startswith("~"):
        raise RuleError("only ~/ (your home) is understood, not ~user")
    elif not g.startswith("/") and "/" in g.rstrip("/") and not g.startswith("**"):
        b = (base or os.path.realpath(os.path.expanduser("~"))).replace(os.sep, "/").rstrip("/")
        g = f"{b}/{g}"
    if g.endswith("/") and len(g) > 1:
        g += "**"
    try:
        return pathspec.PathSpec.from_lines("gitignore", [g])
    except Exception as e:
        raise RuleError(f"path pattern: {e}") from None


def _arg_pattern(pattern: str) -> tuple[tuple[ArgPattern, ...], bool]:
    """The typed ``name=value`` items, and whether the pattern ends with ``nothing else``."""
    out: list[ArgPattern] = []
    rest = pattern.strip()
    while rest:
        if rest == NOTHING_ELSE:
            return tuple(out), True
        name, eq, after = rest.partition("=")
        name = name.strip()
        if not eq or not ARG_NAME.match(name):
            raise RuleError("expected tool(arg=glob, ...) for this tool")
        after = after.lstrip()
        if after.startswith('"'):
            try:
                value, end = json.JSONDecoder().raw_decode(after)
            except ValueError:
                raise RuleError(f"bad quoted value for {name}") from None
            if not isinstance(value, str):
                raise RuleError(f"bad quoted value for {name}")
            after = after[end:].lstrip()
            if after and not after.startswith(","):
                raise RuleError(f"expected , after the value of {name}")
            rest = after[1:].strip()
            item = ArgPattern(name, value, ValueKind.TEXT)
        else:
            value, _, rest = after.partition(",")
            item = _bare_value(name, value.strip())
            rest = rest.strip()
        if any(a.name == name for a in out):
            raise RuleError(f"{name} given twice")
        out.append(item)
    return tuple(out), False


# -- rule sets ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleSet:
    deny: tuple[Rule, ...] = ()
    ask: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()

    def get(self, which: RuleList) -> tuple[Rule, ...]:
        return getattr(self, which.value)

    def to_json(self) -> dict[str, list[str]]:
        return {k.value: [r.text for r in self.get(k)] for k in (RuleList.ALLOW, *ORDER[:2])}

    def __len__(self) -> int:
        return len(self.deny) + len(self.ask) + len(self.allow)


def parse_rules(
    raw: Any, *, home: str | None = None, base: str | None = None, where: str = "rules"
) -> RuleSet:
    """The config's ``rules`` object; a bad entry raises ``RuleError("rules.allow[3]: why")``."""
    if raw is None:
        return RuleSet()
    if not isinstance(raw, dict):
        raise RuleError(f"{where}: must be an object with allow, ask and deny lists")
    lists: dict[str, tuple[Rule, ...]] = {}
    for which in RuleList:
        items = raw.get(which.value, [])
        if not isinstance(items, list):
            raise RuleError(f"{where}.{which.value}: must be an array of rule strings")
        parsed = []
        for i, text in enumerate(items):
            try:
                parsed.append(parse_rule(text, home=home, base=base, allow=which is RuleList.ALLOW))
            except RuleError as e:
                raise RuleError(f"{where}.{which.value}[{i}]: {e}") from None
        lists[which.value] = tuple(parsed)
    return RuleSet(**lists)


def parse_rule_lines(text: str, **kw: Any) -> list[Rule]:
    """One or more rules, one per line (how a proposal or an edited one travels)."""
    if not isinstance(text, str):
        raise RuleError("rule must be a string")
    rules = [parse_rule(line, allow=True, **kw) for line in text.splitlines() if line.strip()]
    if not rules:
        raise RuleError("empty rule")
    return rules


# -- decisions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the rules say about one call. ``decision`` None: no rule matched (the tier decides).

    ``unsafe``: set for bash calls no allow rule could cover (the reason, for the human).
    """

    decision: RuleList | None
    rule: str | None = None
    index: int | None = None
    unsafe: str | None = None

    @property
    def label(self) -> str | None:
        return f"{self.decision.value}: {self.rule}" if self.decision and self.rule else None


def evaluate(
    rules: RuleSet,
    tool: str,
    args: Mapping[str, Any],
    real: str | None,
    machine: str | None = None,
) -> Verdict:
    """deny, then ask, then allow; the first list with a match wins. A rule scoped to a
    machine (``@laptop ...``) counts only when ``machine`` is that one."""
    analysis = None
    if not any(r.tool == tool for which in ORDER for r in rules.get(which)):
        return Verdict(None)  # no rule names this tool: nothing to parse
    if tool == "bash":
        cmd = args.get("command")
        analysis = analyze(cmd) if isinstance(cmd, str) else Analysis((), (), "no command")
    for which in ORDER:
        allow = which is RuleList.ALLOW
        for i, rule in enumerate(rules.get(which)):
            if rule.tool != tool or not rule.applies_to(machine):
                continue
            if rule.kind is Kind.BASH and analysis is not None:
                if allow:
                    continue  # all commands must match some allow rule: see below
                if any(rule.matches_command(c, False) for c in analysis.everywhere):
                    return Verdict(which, rule.text, i, analysis.unsafe)
            elif rule.kind is Kind.ANY and analysis is not None and allow:
                if analysis.unsafe is None:
                    return Verdict(which, rule.text, i)
            elif rule.matches(tool, args, real, allow):
                return Verdict(which, rule.text, i, analysis.unsafe if analysis else None)
        unreadable = analysis is not None and analysis.unsafe is not None
        if (
            which is RuleList.DENY
            and unreadable
            and any(r.tool == "bash" and r.applies_to(machine) for r in rules.deny)
        ):
            # Deny rules exist and something in the command (eval of a computed string, a
            # parse error...) could hide a denied command from the search: ask, never run it
            # unattended, even on an allow tier.
            assert analysis is not None
            return Verdict(RuleList.ASK, None, None, analysis.unsafe)
        if allow and analysis is not None and analysis.unsafe is None:
            decided = _allow_bash(rules.allow, analysis.commands, machine)
            if decided is not None:
                return Verdict(which, rules.allow[decided].text, decided)
    return Verdict(None, None, None, analysis.unsafe if analysis else None)


def _allow_bash(
    allow: Sequence[Rule], commands: Sequence[SimpleCommand], machine: str | None = None
) -> int | None:
    """Index of the rule to name when every command matches an allow rule, else None.

    The named rule is the one that matched the first command (the rest are in the same call).
    """
    first: int | None = None
    bash_rules = [
        (i, r)
        for i, r in enumerate(allow)
        if r.tool == "bash" and r.kind is Kind.BASH and r.applies_to(machine)
    ]
    for n, cmd in enumerate(commands):
        hit = next((i for i, r in bash_rules if r.matches_command(cmd, True)), None)
        if hit is None:
            return None
        if n == 0:
            first = hit
    return first


def add_rule(raw: Any, which: RuleList, texts: Iterable[str]) -> dict[str, Any]:
    """A copy of the config's ``rules`` object with ``texts`` appended (duplicates skipped)."""
    rules = dict(raw) if isinstance(raw, dict) else {}
    current = list(rules.get(which.value, []))
    for t in texts:
        if t not in current:
            current.append(t)
    rules[which.value] = current
    return rules


def edit_raw_rules(
    config: dict[str, Any], which: RuleList, add: Sequence[str] = (), remove: Sequence[str] = ()
) -> None:
    """Change the config document's ``rules`` in place: append ``add``, drop ``remove``.

    Other keys of ``rules`` (and of the config) are left as they are. Removing a rule that is
    not in the list raises :class:`RuleError`, so a stale UI learns it.
    """
    raw = config.get("rules")
    if raw is not None and not isinstance(raw, dict):
        raise RuleError("rules: must be an object with allow, ask and deny lists")
    config["rules"] = add_rule(raw, which, add)
    current = config["rules"][which.value]
    for text in remove:
        if text not in current:
            raise RuleError(f"{text} is not in rules.{which.value}")
        current.remove(text)

"""Rules: per-call argument patterns the human can read, e.g. ``bash(git status)``.

Pure (no I/O besides ``realpath`` of the home directory at parse time). Three lists,
``deny`` then ``ask`` then ``allow``; the first list with a match decides, no match falls back
to the tool's tier (the bridge does that).

Why a real shell parser: prefix rules are bypassable (Roo: allowing ``git show`` also allowed
``git show > ~/.ssh/id_rsa``). ``bash`` commands are parsed with tree-sitter-bash (a maintained
grammar used by editors and GitHub's code navigation; ``bashlex`` has not been released since
2023). A call is allowed by rules only when **every** simple command in it matches an allow
rule and nothing in it can run code or write files behind the rules' back: redirection into a
file, command/process substitution, ``eval``/``source``/``.``/``exec``, ``sh -c`` re-entry,
backgrounding, here-docs feeding an interpreter, variable assignments, control flow and
anything the parser does not fully understand make the call *unallowable* (it asks, or is
denied where a deny rule matches any command found anywhere in it, substitutions included).

Path tools match the *real* path with gitignore-style globs (``pathspec``, the semantics
Claude Code users know): ``~/`` is the home directory, ``/`` is absolute, a pattern without a
slash (``*.lock``) matches at any depth, ``**`` spans directories, and another relative pattern
with a slash is taken relative to the first root. Other tools: ``tool(arg=glob, ...)``.
"""

from __future__ import annotations

import enum
import fnmatch
import functools
import json
import os
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pathspec
import tree_sitter
import tree_sitter_bash

from .errors import BridgeError

PATH_TOOLS = frozenset({"read", "write", "edit", "ls", "find", "grep"})
WALK_TOOLS = frozenset({"ls", "find", "grep"})  # their path is a directory
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
ARG_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
RULE_MAX = 1000  # characters; a rule is something a human reads
COMMAND_MAX = 20_000  # longer bash commands are never allowed by a rule (they ask)
CACHE_MAX = 4096  # analyses of commands up to this long are cached (agents repeat themselves)
REENTRY_DEPTH = 4  # nested ``sh -c`` strings searched for deny rules


class RuleError(BridgeError, ValueError):
    """A rule that cannot be used; the message says why, in a few words."""


class RuleList(enum.StrEnum):
    DENY = "deny"
    ASK = "ask"
    ALLOW = "allow"


ORDER = (RuleList.DENY, RuleList.ASK, RuleList.ALLOW)


# -- bash analysis ------------------------------------------------------------------------------

# Builtins that run a string or a file as shell code, or change what later words mean.
REENTRY_BUILTINS = frozenset(
    {"eval", "source", ".", "exec", "command", "builtin", "trap", "enable", "alias", "fc",
     "hash", "coproc", "mapfile", "readarray"}
)  # fmt: skip
SHELLS = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
     "rbash", "yash", "pwsh", "powershell"}
)  # fmt: skip
# Programs that run stdin as a script: a here-doc or here-string into one is code.
INTERPRETER = re.compile(
    r"^(?:.*/)?(?:sh|bash|zsh|dash|ksh|mksh|ash|fish|csh|tcsh|busybox|rbash|yash|pwsh|powershell"
    r"|python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|perl[0-9.]*|ruby|irb|php|lua[0-9.]*"
    r"|luajit|tclsh|wish|Rscript|R|osascript|awk|gawk|mawk|nawk|sed|jq|xargs|env|sudo|doas|su"
    r"|ssh|docker|podman|kubectl|psql|mysql|sqlite3|gdb|lldb|expect|make|at|batch|crontab)$"
)
# Words an assignment may set and still be matched as if it were not there: locale and
# display only. Anything else (PATH, LD_PRELOAD, GIT_*, PAGER, *_COMMAND...) can run code,
# so it stays part of the words and only a rule that names it matches.
HARMLESS_VARS = re.compile(
    r"^(?:LANG|LANGUAGE|LC_[A-Z]+|TZ|NO_COLOR|FORCE_COLOR|CLICOLOR|CLICOLOR_FORCE|TERM|COLUMNS"
    r"|LINES|CI)$"
)
SAFE_REDIRECT_TARGETS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
# Node types that may appear in an allowable tree; anything else makes it unallowable.
_STRUCTURE = frozenset(
    {"program", "list", "pipeline", "subshell", "compound_statement", "negated_command",
     "redirected_statement", "command", "comment"}
)  # fmt: skip
_DANGER = {
    "command_substitution": "command substitution",
    "process_substitution": "process substitution",
    "arithmetic_expansion": "arithmetic expansion",
    "variable_assignment": "a variable assignment",
    "declaration_command": "a declaration (export, declare, local...)",
    "unset_command": "unset",
    "function_definition": "a function definition",
}
_ANYWHERE = {
    "command_substitution": "command substitution",
    "process_substitution": "process substitution",
    "arithmetic_expansion": "arithmetic expansion",
    "ERROR": "the parser could not read all of it",
}
_SEPARATORS = frozenset({";", "\n", "&&", "||", "|", "|&", "(", ")", "{", "}", "!"})
_HEREDOC_PARTS = frozenset({"heredoc_start", "heredoc_end", "heredoc_body", "heredoc_content"})
_GLOB_CHARS = frozenset("*?[{}")
_META = frozenset(";&|<>()`$\n'\"")  # never in a plain word: the parser and bash disagree

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())


@dataclass(frozen=True, slots=True)
class Word:
    """One word after quote removal; ``literal`` False when bash would expand it further."""

    text: str
    literal: bool = True


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    words: tuple[Word, ...]

    @property
    def shown(self) -> str:
        return " ".join(w.text if w.literal else "<dynamic>" for w in self.words)


@dataclass(frozen=True, slots=True)
class Analysis:
    """A bash command as rules see it.

    ``commands``: the top-level simple commands, each must match an allow rule. ``everywhere``:
    every simple command found anywhere (substitutions, here-doc bodies, literal ``sh -c``
    strings), any of which may match a deny or ask rule. ``unsafe``: why no rule can allow it.
    """

    commands: tuple[SimpleCommand, ...]
    everywhere: tuple[SimpleCommand, ...]
    unsafe: str | None = None


def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(_LANGUAGE)


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _unescape_word(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw):
            if raw[i + 1] != "\n":  # a line continuation disappears
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _unescape_dquoted(raw: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw) and raw[i + 1] in '$`"\\\n':
            if raw[i + 1] != "\n":
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


class _Walker:
    """Turns a tree-sitter tree into simple commands, noting the first reason it is unsafe."""

    def __init__(self, depth: int) -> None:
        self.depth = depth
        self.unsafe: str | None = None
        self.commands: list[SimpleCommand] = []
        self.everywhere: list[SimpleCommand] = []

    def flag(self, why: str) -> None:
        if self.unsafe is None:
            self.unsafe = why

    # words ------------------------------------------------------------------------------------

    def word(self, node: tree_sitter.Node) -> Word:
        t = node.type
        raw = _text(node)
        if t == "word":
            stripped = re.sub(r"\\.", "", raw, flags=re.S)
            if any(c in _META or c.isspace() for c in stripped):
                self.flag(f"the parser and bash may read {raw!r} differently")
                return Word(_unescape_word(raw), False)
            glob = any(c in _GLOB_CHARS for c in stripped) or stripped.startswith("~")
            return Word(_unescape_word(raw), not glob)
        if t == "number":
            return Word(raw, True)
        if t == "raw_string":
            return Word(raw[1:-1], True)
        if t == "string":
            inner = [c for c in node.children if c.type not in ('"',)]
            if all(c.type == "string_content" for c in inner):
                return Word(_unescape_dquoted(raw[1:-1]), True)
            for c in inner:
                if c.type == "expansion":
                    self.expansion(c)
                elif c.type not in ("string_content", "simple_expansion"):
                    self.flag(f"{c.type.replace('_', ' ')} in a string")
            return Word(raw, False)
        if t == "concatenation":
            parts = [self.word(c) for c in node.named_children]
            return Word("".join(p.text for p in parts), all(p.literal for p in parts))
        if t == "simple_expansion":
            return Word(raw, False)
        if t == "expansion":
            self.expansion(node)
            return Word(raw, False)
        if t in ("ansi_c_string", "translated_string", "brace_expression"):
            return Word(raw, False)
        self.flag(f"{t.replace('_', ' ')} in a word")
        return Word(raw, False)

    def expansion(self, node: tree_sitter.Node) -> None:
        """``${NAME}`` is plain; ``${x@P}``, ``${!x}``, defaults and the like are not."""
        if not re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", _text(node)):
            self.flag("a parameter expansion beyond ${NAME}")

    # structure ---------------------------------------------------------------------------------

    def walk(self, node: tree_sitter.Node) -> None:
        t = node.type
        if t not in _STRUCTURE:
            self.flag(_DANGER.get(t, f"{t.replace('_', ' ')} (only simple commands are matched)"))
            return
        if t == "comment":
            return
        if t == "command":
            self.command(node)
            return
        if t == "redirected_statement":
            for c in node.children:
                if c.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                    self.redirect(c, node)
                else:
                    self.walk(c)
            return
        for c in node.children:
            if not c.is_named:
                if c.type == "&":
                    self.flag("backgrounding with &")
                elif c.type not in _SEPARATORS:
                    self.flag(f"{c.type!r} where bash expects a command")
                continue
            self.walk(c)

    def redirect(self, node: tree_sitter.Node, owner: tree_sitter.Node) -> None:
        if node.type in ("heredoc_redirect", "herestring_redirect"):
            target = self._program_of(owner)
            if target is None or INTERPRETER.match(target):
                self.flag(f"a here-doc feeding {target or 'a command'}")
            extra = [c for c in node.named_children if c.type not in _HEREDOC_PARTS]
            if node.type == "herestring_redirect" and extra:
                self.word(extra.pop(0))  # the here-string itself
            if extra:
                self.flag("arguments after a redirection")
            return
        op = next((c.type for c in node.children if not c.is_named), "")
        named = [c for c in node.named_children if c.type != "file_descriptor"]
        dest = named[0] if named else None
        if len(named) > 1:
            # bash: words after a redirection are more arguments; tree-sitter files them here.
            self.flag("arguments after a redirection")
        if dest is None:
            self.flag("a redirection the parser did not understand")
            return
        w = self.word(dest)
        if not w.literal:
            self.flag("a redirection to a computed target")
        elif op in (">&", "<&") and (w.text.isdigit() or w.text == "-"):
            return  # fd duplication or closing: 2>&1, >&2, 2>&-
        elif w.text in SAFE_REDIRECT_TARGETS and op in (">", ">>", "&>", "&>>", ">|", ">&", "<"):
            return
        else:
            self.flag(f"redirection {op} {w.text}")

    def _program_of(self, owner: tree_sitter.Node) -> str | None:
        for c in owner.named_children:
            if c.type == "command":
                name = c.child_by_field_name("name")
                if name is not None:
                    w = self.word(name.named_children[0]) if name.named_children else None
                    if w is not None and w.literal:
                        return w.text
        return None

    def command(self, node: tree_sitter.Node) -> None:
        words: list[Word] = []
        for c in node.children:
            if c.type == "variable_assignment":
                name = c.child_by_field_name("name")
                value = c.child_by_field_name("value")
                v = self.word(value) if value is not None else Word("", True)
                words.append(Word(f"{_text(name) if name else ''}={v.text}", v.literal))
                if not v.literal:
                    self.flag("an assignment of a computed value")
            elif c.type == "command_name":
                inner = c.named_children
                words.append(self.word(inner[0]) if inner else Word(_text(c), False))
            elif c.type in ("file_redirect", "heredoc_redirect", "herestring_redirect"):
                self.redirect(c, node.parent or node)
            elif c.is_named and c.type != "comment":
                words.append(self.word(c))
        cmd = SimpleCommand(_normalise(words))
        self.commands.append(cmd)
        self.everywhere.append(cmd)
        self.check_program(cmd)
        if _piped_into(node):
            self.check_stdin_is_code(cmd)

    def check_stdin_is_code(self, cmd: SimpleCommand) -> None:
        """``curl x | sh``: a shell, or an interpreter given no script, runs its stdin."""
        i = _program_index(cmd.words)
        if i is None or not cmd.words[i].literal:
            return
        base = cmd.words[i].text.rsplit("/", 1)[-1]
        script = any(w.literal and not w.text.startswith("-") for w in cmd.words[i + 1 :])
        if base in SHELLS or (_SCRIPT_RUNNERS.match(base) and not script):
            self.flag(f"piping into {base}, which runs what it reads")

    def check_program(self, cmd: SimpleCommand) -> None:
        words = cmd.words
        i = _program_index(words)
        if i is None:
            self.flag("a command with only assignments")
            return
        prog = words[i]
        if not prog.literal:
            self.flag("a computed command name")
            return
        base = prog.text.rsplit("/", 1)[-1]
        if prog.text in REENTRY_BUILTINS:
            self.flag(f"{prog.text} runs its arguments as shell code")
            self._reenter(words[i + 1 :])
        elif base in SHELLS or (base == "su"):
            flags = [w.text for w in words[i + 1 :] if w.literal and w.text.startswith("-")]
            if any(f == "-c" or (not f.startswith("--") and "c" in f[1:]) for f in flags) or any(
                f in ("--command", "--init-file", "--rcfile") for f in flags
            ):
                self.flag(f"{base} -c runs a string as shell code")
                self._reenter(words[i + 1 :])
        elif base == "env" and len(words) > i + 1:
            self.flag("env with options that run a command differently")

    def _reenter(self, rest: Sequence[Word]) -> None:
        """Search literal code strings (``sh -c 'rm -rf ~'``) for commands a deny rule names."""
        if self.depth >= REENTRY_DEPTH:
            return
        # Computed words too (their source text): for a deny rule, "could be" is enough.
        texts = [w.text for w in rest if w.text.strip() and not w.text.startswith("-")]
        if len(rest) > 1:
            texts.append(" ".join(w.text for w in rest))  # eval joins its arguments
        for text in texts:
            self.everywhere.extend(analyze(text, self.depth + 1).everywhere)


def _piped_into(node: tree_sitter.Node) -> bool:
    """The command reads a pipe: it is not the first stage of its pipeline."""
    child, parent = node, node.parent
    if parent is not None and parent.type == "redirected_statement":
        child, parent = parent, parent.parent
    if parent is None or parent.type != "pipeline":
        return False
    first = parent.named_children[0] if parent.named_children else None
    return first is not None and first.id != child.id


def _program_index(words: Sequence[Word]) -> int | None:
    for i, w in enumerate(words):
        if not _is_assignment(w):
            return i
    return None


def _is_assignment(w: Word) -> bool:
    return w.literal and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.text) is not None


def _normalise(words: list[Word]) -> tuple[Word, ...]:
    """``env [-i] [-u X] [--] A=1 cmd`` is ``A=1 cmd``; harmless locale assignments drop out."""
    out = list(words)
    i = _program_index(out)
    while i is not None and out[i].literal and out[i].text in ("env", "/usr/bin/env"):
        j = i + 1
        ok = True
        while j < len(out) and out[j].literal and out[j].text.startswith("-"):
            opt = out[j].text
            if opt == "--":
                j += 1
                break
            if opt in ("-i", "--ignore-environment", "-0", "--null"):
                j += 1
            elif opt in ("-u", "--unset") and j + 1 < len(out):
                j += 2
            elif opt.startswith("--unset="):
                j += 1
            else:
                ok = False  # -S / --split-string re-enters; -C changes dir; unknown: keep env
                break
        if not ok or j >= len(out):
            break  # "env" alone prints the environment: matched as the program env
        out = out[:i] + out[j:]
        i = _program_index(out)
    prog = _program_index(out)
    if prog is None:
        return tuple(out)
    kept = [w for w in out[:prog] if not HARMLESS_VARS.match(w.text.split("=", 1)[0])]
    return tuple(kept + out[prog:])


def analyze(command: str, depth: int = 0) -> Analysis:
    """Parse ``command`` like bash would and list what rules must judge."""
    if len(command) <= CACHE_MAX:
        return _analyze_cached(command, depth)
    return _analyze(command, depth)


@functools.lru_cache(maxsize=512)
def _analyze_cached(command: str, depth: int) -> Analysis:
    return _analyze(command, depth)


def _analyze(command: str, depth: int) -> Analysis:
    if len(command) > COMMAND_MAX:
        return Analysis((), (), f"a command over {COMMAND_MAX} characters")
    if "\x00" in command:
        return Analysis((), (), "a NUL byte in the command")
    tree = _parser().parse(command.encode("utf-8", "surrogatepass"))
    root = tree.root_node
    w = _Walker(depth)
    w.walk(root)
    # Commands inside substitutions, here-doc bodies and control flow: for deny and ask rules.
    seen = {id(c) for c in w.everywhere}
    for node in _descendants(root):
        if node.type in _ANYWHERE:  # belt and braces: whatever the walk made of it
            w.flag(_ANYWHERE[node.type])
        elif node.type == "expansion":  # also in here-doc bodies, which the walk skips
            w.expansion(node)
        if node.type == "command" and not _inside_top(node, root):
            sub = _Walker(depth)
            sub.command(node)
            for c in sub.everywhere:
                if id(c) not in seen:
                    w.everywhere.append(c)
    if root.has_error:
        w.flag("the parser could not read all of it")
    gap = _uncovered(root, command.encode("utf-8", "surrogatepass"))
    if gap is not None:
        w.flag(f"text the parser skipped ({gap!r})")
    if not w.commands:
        w.flag("no command")
    return Analysis(tuple(w.commands), tuple(w.everywhere), w.unsafe)


_GAP = re.compile(rb"(?:[ \t\n]|\\\n)*")


def _uncovered(root: tree_sitter.Node, source: bytes) -> str | None:
    """Text between the parser's tokens that is not plain blank space or a line continuation.

    tree-sitter-bash silently skips some bytes bash gives meaning to (``\\ `` is a literal
    space in bash, nothing to the grammar): a call with such a gap is never allowed.
    """
    pos = 0
    for node in _descendants(root):
        if node.child_count == 0:
            if node.start_byte > pos and not _GAP.fullmatch(source[pos : node.start_byte]):
                return source[pos : node.start_byte].decode("utf-8", "replace")
            pos = max(pos, node.end_byte)
    if not _GAP.fullmatch(source[pos:]):
        return source[pos:].decode("utf-8", "replace")
    return None


def _descendants(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _inside_top(node: tree_sitter.Node, root: tree_sitter.Node) -> bool:
    """A command the structural walk reached (only structure nodes between it and the root)."""
    p = node.parent
    while p is not None and p != root:
        if p.type not in _STRUCTURE:
            return False
        p = p.parent
    return True


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
    args: tuple[tuple[str, str], ...] = ()

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
            for name, glob in self.args:
                if name not in args:
                    return False
                v = args[name]
                s = v if isinstance(v, str) else json.dumps(v) if _scalar(v) else None
                if s is None or not fnmatch.fnmatchcase(s, glob):
                    return False
            return True
        return False

    def matches_command(self, cmd: SimpleCommand, allow: bool) -> bool:
        return _match_words(self.words, cmd.words, allow)


def _scalar(v: Any) -> bool:
    return isinstance(v, int | float | bool) or v is None


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


def parse_rule(
    text: str, *, home: str | None = None, base: str | None = None, allow: bool = False
) -> Rule:
    """Parse one rule; ``home`` for ``~/`` and ``base`` (the first root) for relative paths.

    ``allow``: the rule goes into the allow list, where a rule that can never allow anything
    (``bash(sh -c *)``) is refused rather than silently useless.
    """
    if not isinstance(text, str):
        raise RuleError("must be a string")
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
    return Rule(canonical, tool, Kind.ARGS, args=_arg_pattern(pattern))


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
    probe = _Walker(0)
    probe.check_program(SimpleCommand(_normalise([Word(t, t != "*") for t in tokens])))
    shape = analyze(p)
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


def _arg_pattern(pattern: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    rest = pattern.strip()
    while rest:
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
        else:
            value, _, rest = after.partition(",")
            value = value.strip()
            rest = rest.strip()
        if any(n == name for n, _ in out):
            raise RuleError(f"{name} given twice")
        out.append((name, value))
    return tuple(out)


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


def evaluate(rules: RuleSet, tool: str, args: Mapping[str, Any], real: str | None) -> Verdict:
    """deny, then ask, then allow; the first list with a match wins."""
    analysis = None
    if not any(r.tool == tool for which in ORDER for r in rules.get(which)):
        return Verdict(None)  # no rule names this tool: nothing to parse
    if tool == "bash":
        cmd = args.get("command")
        analysis = analyze(cmd) if isinstance(cmd, str) else Analysis((), (), "no command")
    for which in ORDER:
        allow = which is RuleList.ALLOW
        for i, rule in enumerate(rules.get(which)):
            if rule.tool != tool:
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
        if which is RuleList.DENY and unreadable and any(r.tool == "bash" for r in rules.deny):
            # Deny rules exist and something in the command (eval of a computed string, a
            # parse error...) could hide a denied command from the search: ask, never run it
            # unattended, even on an allow tier.
            assert analysis is not None
            return Verdict(RuleList.ASK, None, None, analysis.unsafe)
        if allow and analysis is not None and analysis.unsafe is None:
            decided = _allow_bash(rules.allow, analysis.commands)
            if decided is not None:
                return Verdict(which, rules.allow[decided].text, decided)
    return Verdict(None, None, None, analysis.unsafe if analysis else None)


def _allow_bash(allow: Sequence[Rule], commands: Sequence[SimpleCommand]) -> int | None:
    """Index of the rule to name when every command matches an allow rule, else None.

    The named rule is the one that matched the first command (the rest are in the same call).
    """
    first: int | None = None
    bash_rules = [(i, r) for i, r in enumerate(allow) if r.tool == "bash" and r.kind is Kind.BASH]
    for n, cmd in enumerate(commands):
        hit = next((i for i, r in bash_rules if r.matches_command(cmd, True)), None)
        if hit is None:
            return None
        if n == 0:
            first = hit
    return first


# -- proposals: "Always allow calls like this" --------------------------------------------------

_SUBCOMMAND = re.compile(r"^[A-Za-z][A-Za-z0-9_:-]*$")
_SCRIPT_RUNNERS = re.compile(
    r"^(?:python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|perl[0-9.]*|ruby|php|lua[0-9.]*|Rscript"
    r"|sh|bash|zsh|dash|ksh|fish|osascript|pwsh)$"
)


def _quote(word: str) -> str:
    return word if re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", word) else shlex.quote(word)


def _propose_command(cmd: SimpleCommand) -> str | None:
    words = cmd.words
    i = _program_index(words)
    if i is None or not all(w.literal for w in words[: i + 1]):
        return None
    head = [_quote(w.text) for w in words[: i + 1]]
    prog = words[i].text.rsplit("/", 1)[-1]
    nxt = words[i + 1] if i + 1 < len(words) else None
    if _SCRIPT_RUNNERS.match(prog):
        # python script.py *: the script is the narrow part; python -c ... has none.
        if nxt is None or not nxt.literal or nxt.text.startswith("-"):
            return None
        head.append(_quote(nxt.text))
    elif nxt is not None and nxt.literal and _SUBCOMMAND.match(nxt.text):
        head.append(nxt.text)
    return f"bash({' '.join(head)} *)"


def _glob_escape(path: str) -> str:
    return re.sub(r"([*?\[\]\\!#])", r"\\\1", path)


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
        pairs = [
            f"{k}={json.dumps(_glob_escape(v))}"
            for k, v in sorted(args.items())
            if isinstance(v, str) and ARG_NAME.match(k) and len(v) <= 200
        ]
        text = f"{tool}({', '.join(pairs)})" if pairs else tool
    # A proposal must allow the very call it came from; otherwise offer nothing.
    try:
        rules = RuleSet(allow=tuple(parse_rule_lines(text, home=home, base=base)))
    except RuleError:
        return None
    return text if evaluate(rules, tool, args, real).decision is RuleList.ALLOW else None


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

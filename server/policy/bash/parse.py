"""What a ``bash`` command really does, read with tree-sitter-bash: its simple commands, and
whether anything in it can run code or write files behind the rules' back.

Why a real shell parser: prefix rules are bypassable (Roo: allowing ``git show`` also allowed
``git show > ~/.ssh/id_rsa``). tree-sitter-bash is a maintained grammar used by editors and
GitHub's code navigation (``bashlex`` has not been released since 2023). :func:`analyze` returns
every simple command found anywhere (substitutions and ``sh -c`` strings included, for deny
rules) and, when the command is not plainly a list of simple commands, why no allow rule may
cover it: redirection into a file, command/process substitution, ``eval``/``source``/``.``/
``exec``, ``sh -c`` re-entry, backgrounding, here-docs feeding an interpreter, variable
assignments, control flow, and anything the parser does not fully understand.

Pure, no I/O. Over 400 lines for a reason: one walker over one grammar, whose node kinds are
only meaningful together; splitting it would scatter the list of what is dangerous.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import tree_sitter
import tree_sitter_bash

from .words import Word
from .wrappers import code_option, wrapped

COMMAND_MAX = 20_000  # longer bash commands are never allowed by a rule (they ask)
CACHE_MAX = 4096  # analyses of commands up to this long are cached (agents repeat themselves)
REENTRY_DEPTH = 4  # nested ``sh -c`` strings searched for deny rules

SCRIPT_RUNNERS = re.compile(
    r"^(?:python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|perl[0-9.]*|ruby|php|lua[0-9.]*|Rscript"
    r"|sh|bash|zsh|dash|ksh|fish|osascript|pwsh)$"
)

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
# Builtins that read a word as a variable name or an arithmetic expression: bash evaluates an
# array subscript in it, and ``$(…)`` or backticks inside the subscript run, even from a quoted
# string (``test -v 'a[$(id)]'``, ``printf -v 'a[$(id)]' x``, ``read 'a[$(id)]'``). The option
# after which the name comes (None: any argument may be one).
NAME_BUILTINS: dict[str, str | None] = {
    "printf": "-v", "test": "-v", "[": "-v", "read": None, "getopts": None, "wait": "-p",
    "shift": None, "return": None, "exit": None, "break": None, "continue": None,
    "ulimit": None, "times": None,
}  # fmt: skip
# Builtins that always evaluate or run their words: never allowed by a rule.
EVAL_BUILTINS = {
    "let": "let evaluates arithmetic (an array subscript in it runs $(…))",
    "compgen": "compgen runs -C commands and expands -W words",
    "complete": "complete runs -C commands and -F functions",
}
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
    # Every reason found, not just the first (the risk cues read them: server/present/risk.py).
    notes: tuple[str, ...] = ()


def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(_LANGUAGE)


def _text(node: tree_sitter.Node) -> str:
    return (node.text or b"").decode("utf-8", "surrogateescape")


def _unescape(raw: str, escapable: str | None = None) -> str:
    """Backslash escapes removed as bash does: any character (a bare word), or only those in
    ``escapable`` (inside double quotes); a backslash-newline is a line continuation and goes."""
    out: list[str] = []
    i = 0
    while i < len(raw):
        c = raw[i]
        if c == "\\" and i + 1 < len(raw) and (escapable is None or raw[i + 1] in escapable):
            if raw[i + 1] != "\n":  # a line continuation disappears
                out.append(raw[i + 1])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _unescape_word(raw: str) -> str:
    return _unescape(raw)


def _unescape_dquoted(raw: str) -> str:
    return _unescape(raw, '$`"\\\n')


class Walker:
    """Turns a tree-sitter tree into simple commands, noting the first reason it is unsafe."""

    def __init__(self, depth: int, wrappers: bool = True) -> None:
        self.depth = depth
        self.wrappers = wrappers  # also list the commands wrappers run (not for rule patterns)
        self.unsafe: str | None = None
        self.notes: list[str] = []
        self.commands: list[SimpleCommand] = []
        self.everywhere: list[SimpleCommand] = []

    def flag(self, why: str) -> None:
        if self.unsafe is None:
            self.unsafe = why
        if len(self.notes) < 64 and why not in self.notes:
            self.notes.append(why)

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
            self.heredoc_body(node)
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

    def heredoc_body(self, node: tree_sitter.Node) -> None:
        """An unquoted here-doc's body is expanded: backticks and ``$(…)`` in it run before
        the command reads it (``cat <<EOF`` with `` `rm -rf ~` `` inside). Such a call is never
        allowed by a rule, and the code in it is searched for deny rules."""
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        if start is None or any(q in _text(start) for q in "'\"\\"):
            return  # <<'EOF', <<"EOF", <<\EOF: the body is literal text
        for body in (c for c in node.children if c.type == "heredoc_body"):
            text = _text(body)
            if "`" in text or "$(" in text or "$[" in text:
                self.flag("command substitution in a here-doc")
                self.search_code(text, spans_only=True)

    def search_code(self, text: str, spans_only: bool = False) -> None:
        """Deny/ask: the commands ``text`` may run once bash expands it: each backtick span and
        ``$(…)``, and (unless ``spans_only``) the text itself read as a command."""
        if self.depth >= REENTRY_DEPTH:
            return
        pieces = [] if spans_only else [text]
        pieces += re.findall(r"`([^`]*)`", text)
        pieces += [text[m.end() :] for m in re.finditer(r"\$[(\[]", text)][:8]
        for piece in pieces:
            if piece.strip():
                self.everywhere.extend(analyze(piece, self.depth + 1).everywhere)

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
        cmd = SimpleCommand(normalise(words))
        self.commands.append(cmd)
        self.everywhere.append(cmd)
        self.check_program(cmd)
        if _piped_into(node):
            self.check_stdin_is_code(cmd)
        if self.wrappers:
            self.check_wrapped(cmd)

    def check_wrapped(self, cmd: SimpleCommand, depth: int = 0) -> None:
        """``timeout 5 git push``, ``nice sh -c …``, ``xargs rm``, ``find -exec rm {} ;``: the
        command a wrapper runs is a simple command of the call too, so a deny rule sees it,
        an allow rule must cover it as well, and ``sh -c`` inside it stays unallowable."""
        i = program_index(cmd.words)
        inner, why = wrapped(cmd.words, i)
        if why is not None:
            self.flag(why)
            if i is not None and self.depth < REENTRY_DEPTH:
                # ``watch rm x`` runs its words joined as shell code: search the joined tails
                # (past a few leading options) for commands a deny rule names.
                rest = cmd.words[i + 1 :]
                for k in range(min(len(rest), 5)):
                    text = " ".join(w.text for w in rest[k:])
                    self.everywhere.extend(analyze(text, self.depth + 1).everywhere)
        for words in inner:
            sub = SimpleCommand(normalise(list(words)))
            self.commands.append(sub)
            self.everywhere.append(sub)
            self.check_program(sub)
            if depth < REENTRY_DEPTH:
                self.check_wrapped(sub, depth + 1)

    def check_stdin_is_code(self, cmd: SimpleCommand) -> None:
        """``curl x | sh``: a shell, or an interpreter given no script, runs its stdin."""
        i = program_index(cmd.words)
        if i is None or not cmd.words[i].literal:
            return
        base = cmd.words[i].text.rsplit("/", 1)[-1]
        script = any(w.literal and not w.text.startswith("-") for w in cmd.words[i + 1 :])
        if base in SHELLS or (SCRIPT_RUNNERS.match(base) and not script):
            self.flag(f"piping into {base}, which runs what it reads")

    def check_program(self, cmd: SimpleCommand) -> None:
        words = cmd.words
        i = program_index(words)
        if i is None:
            self.flag("a command with only assignments")
            return
        prog = words[i]
        if not prog.literal:
            self.flag("a computed command name")
            return
        base = prog.text.rsplit("/", 1)[-1]
        self.check_names(base, words[i + 1 :])
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
        else:
            opt = code_option(base, words[i + 1 :])
            if opt is not None:
                self.flag(f"{base} {opt} runs another program")

    def check_names(self, base: str, rest: Sequence[Word]) -> None:
        """``printf -v 'a[$(id)]'``, ``test -v``, ``read``, ``let``, ``compgen -C``: words bash
        evaluates as names or arithmetic. Unallowable when one holds a subscript (or always,
        for ``let``/``compgen``/``complete``); its text is searched for deny rules."""
        if base in EVAL_BUILTINS:
            self.flag(EVAL_BUILTINS[base])
            for w in rest:
                if not w.text.startswith("-") or "[" in w.text:
                    self.search_code(w.text)
            return
        if base not in NAME_BUILTINS:
            return
        after = NAME_BUILTINS[base]
        texts = [w.text for w in rest]
        if after is not None and not any(t == after or t.startswith(after) for t in texts):
            return
        for w in rest:
            if "[" in w.text or (not w.literal and "$" in w.text):
                self.flag(f"{base} evaluates an array subscript in {w.text!r}")
                self.search_code(w.text)
                inner = w.text[w.text.find("[") + 1 : w.text.rfind("]")]
                if inner:
                    self.search_code(inner)

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


_QUOTED = frozenset({"raw_string", "string", "word", "concatenation"})
_EVALUATING = frozenset(
    {"test_command", "declaration_command", "unset_command", "compound_statement",
     "arithmetic_expansion", "unary_expression", "binary_expression", "for_statement",
     "c_style_for_statement"}
)  # fmt: skip


def _evaluated_context(node: tree_sitter.Node) -> bool:
    """The node is read by a construct that evaluates its text (arithmetic, ``[[ -v ]]``,
    ``declare``), not a plain command's argument."""
    p = node.parent
    while p is not None:
        if p.type in ("command", "program", "redirected_statement"):
            return False
        if p.type in _EVALUATING:
            return True
        p = p.parent
    return False


def _piped_into(node: tree_sitter.Node) -> bool:
    """The command reads a pipe: it is not the first stage of its pipeline."""
    child, parent = node, node.parent
    if parent is not None and parent.type == "redirected_statement":
        child, parent = parent, parent.parent
    if parent is None or parent.type != "pipeline":
        return False
    first = parent.named_children[0] if parent.named_children else None
    return first is not None and first.id != child.id


def program_index(words: Sequence[Word]) -> int | None:
    for i, w in enumerate(words):
        if not _is_assignment(w):
            return i
    return None


def _is_assignment(w: Word) -> bool:
    return w.literal and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w.text) is not None


def normalise(words: list[Word]) -> tuple[Word, ...]:
    """``env [-i] [-u X] [--] A=1 cmd`` is ``A=1 cmd``; harmless locale assignments drop out."""
    out = list(words)
    i = program_index(out)
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
        i = program_index(out)
    prog = program_index(out)
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
def analyze_pattern(pattern: str) -> Analysis:
    """A rule's own words: the commands a wrapper would run are not listed (``bash(timeout *)``
    is one simple command, ``timeout``)."""
    return _analyze(pattern, 0, wrappers=False)


def _analyze_cached(command: str, depth: int) -> Analysis:
    return _analyze(command, depth)


def _analyze(command: str, depth: int, wrappers: bool = True) -> Analysis:
    if len(command) > COMMAND_MAX:
        return Analysis((), (), f"a command over {COMMAND_MAX} characters")
    if "\x00" in command:
        return Analysis((), (), "a NUL byte in the command")
    tree = _parser().parse(command.encode("utf-8", "surrogatepass"))
    root = tree.root_node
    w = Walker(depth, wrappers)
    w.walk(root)
    # Commands inside substitutions, here-doc bodies and control flow: for deny and ask rules.
    seen = {id(c) for c in w.everywhere}
    for node in _descendants(root):
        if node.type in _ANYWHERE:  # belt and braces: whatever the walk made of it
            w.flag(_ANYWHERE[node.type])
        elif node.type == "expansion":  # also in here-doc bodies, which the walk skips
            w.expansion(node)
        elif node.type in _QUOTED and _evaluated_context(node):
            # ``(( 'a[$(rm x)]' ))``, ``[[ -v 'a[…]' ]]``, ``declare 'a[…]=1'``: bash evaluates
            # the quoted text, so the commands in it are searched for deny rules.
            text = _text(node)
            if "$(" in text or "`" in text:
                w.search_code(text[1:-1] if node.type == "raw_string" else text)
        if node.type == "command" and not _inside_top(node, root):
            sub = Walker(depth)
            sub.command(node)
            for c in sub.everywhere:
                if id(c) not in seen:
                    w.everywhere.append(c)
            w.notes.extend(n for n in sub.notes if n not in w.notes)  # risk cues read them
    if root.has_error:
        w.flag("the parser could not read all of it")
    gap = _uncovered(root, command.encode("utf-8", "surrogatepass"))
    if gap is not None:
        w.flag(f"text the parser skipped ({gap!r})")
    if not w.commands:
        w.flag("no command")
    return Analysis(tuple(w.commands), tuple(w.everywhere), w.unsafe, tuple(w.notes))


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

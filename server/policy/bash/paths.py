"""Protected and persistence paths named in a ``bash`` command line.

A rule such as ``bash(cat *)`` (or a session grant, or the allow tier) lets a command run
unattended, but "rules never cover protected or persistence locations": ``cat ~/.ssh/id_rsa``
and ``cp x ~/.bashrc`` must still ask a human. The bridge cannot know what a program will open,
so this is a deliberate over-approximation over the command *text*: every word-like token
(after ``$VAR``/``${VAR}`` and ``~`` expansion, quote and backslash removal, brace expansion,
``--opt=value`` and ``a:b`` splitting, and a bounded glob expansion) is resolved against the
working directory and judged by the path policy as a write (a command may write any path it
names). Any token that lands in a protected, persistence or own-file location makes the whole
call always ask. Code that computes a path at run time (``python -c`` joining strings, ``$(...)``
output) is not seen: a rule for an interpreter is the user's informed choice.
"""

from __future__ import annotations

import collections
import contextlib
import fnmatch
import glob
import itertools
import json
import os
import re
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..protected import fold

if TYPE_CHECKING:
    from ..paths import CallPaths, Escalation, PathPolicy

MAX_TOKENS = 10000  # judged per command: more than a 20,000-character command can hold
MAX_BRACES = 64  # words one brace expression may expand to
MAX_BRACE_STEPS = 4 * MAX_BRACES  # partial expansions tried for one word
MAX_SEQUENCES = 4  # ``{a..z}`` expressions in one word
MAX_ANCESTORS = 32  # of the working directory, for relative names after a ``cd``
MAX_TOKEN_LEN = 4096  # longer than PATH_MAX: the OS cannot open it anyway

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
# Positional and special parameters (``$1``, ``$@``, ``${*}``, ``$$``...): empty or unknowable
# in ``bash -c``, so the expanded text drops them (``~/.a$1ws`` is ``~/.aws``).
_SPECIAL = re.compile(r"\$(?:\{(?:[0-9]+|[@*#?!$-])\}|[0-9@*#?!$-])")
# ``$'...'`` (ANSI-C quoting, decoded by bash before the word is used) and ``$"..."``.
_ANSI_C = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.S)
_ANSI_ESC = re.compile(
    r"\\(?:x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|([0-7]{1,3})|c(.)|(.))",
    re.S,
)
_ANSI_SIMPLE = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n"}
_ANSI_SIMPLE.update({"r": "\r", "t": "\t", "v": "\v"})
# A bracket expression with a POSIX class (``[[:alpha:]]``), which Python's glob cannot read:
# judged as any one character.
_POSIX_CLASS = re.compile(r"\[!?\^?\]?[^\]]*\[:[a-z]+:\][^\]]*\]")
# ``{a..e}``, ``{1..9..2}``: bash's sequence expressions.
_SEQ = re.compile(r"\{(-?[0-9]+|[A-Za-z])\.\.(-?[0-9]+|[A-Za-z])(?:\.\.(-?[0-9]+))?\}")
# The shell's own working directory seen through /proc (``/proc/self/cwd``, ``/proc/$$/cwd``,
# ``/dev/fd/../cwd``): the bridge's realpath would resolve it to the *bridge's* directory.
_PROC_PID = r"^/proc/(?:self|thread-self|[0-9]+|[^/]*\$[^/]*)(?:/task/[^/]+)?"
_PROC_CWD = re.compile(_PROC_PID + r"/cwd(?=/|$)")
_PROC_ROOT = re.compile(_PROC_PID + r"/root(?=/|$)")
_SPLIT = re.compile(r"[\s;&|<>()`]+")
_SUB_SPLIT = re.compile(r"[=:,]+")
_BRACE = re.compile(r"\{([^{}]*,[^{}]*)\}")
_GLOB = re.compile(r"[*?\[]")
# A word that can name a path by itself; a bare word only matters after a change of directory.
_PATHLIKE = re.compile(r"[/.~*?\[]")
_MOVES = frozenset({"cd", "pushd", "popd", "-C", "--directory", "--chdir", "--cwd", "-chdir"})
_MOVE_OPTS = ("--directory", "--chdir", "--cwd", "-C", "--work-tree", "--git-dir", "-chdir")
# Options whose value is a directory the program works from (``tar -C``, ``git -C``,
# ``make --directory``): like a ``cd`` target, a base for the relative names after it.
_DIR_OPTS = frozenset(o for o in _MOVE_OPTS if o.startswith("-"))
_SHORT_C = re.compile(r"-[A-Za-z]+C")  # ``tar -xzC dir``: the cluster's last option takes it
# One shell word as bash reads it: a quoted part is part of the word, spaces included.
_WORD = re.compile(r"""(?:[^\s;&|<>()`'"\\]|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+""", re.S)
_QUOTED = re.compile(r"""'([^']*)'|"((?:[^"\\]|\\.)*)"|\\(.)""", re.S)
_DQ_ESCAPE = re.compile(r"""\\([$`"\\\n])""")
MAX_CD = 16
MAX_BASES = 256  # directories a relative name is tried from after cd; past it: asks
_BRACKETS = re.compile(r"[\[\]{}]")
_FILE_URL = re.compile(r"file://(?:localhost)?(?=/)", re.I)
# An upstream tool's arguments (arguments_escalation): past any of these the call is not
# judged but always asks. Keys count like values; nesting has no limit of its own (the walk is
# iterative), but every value visited counts, so the walk is bounded too.
MAX_STRINGS = 512  # keys and string values
MAX_ARGUMENT_CHARS = 32768  # all of them together
MAX_VALUES = 8192  # values visited at any depth (numbers, nulls, objects, arrays too)
MAX_ARG_FOLDERS = 16  # arguments naming an existing folder (each a base for the others)
# Past these the command is not analysed at all but always asks: the check runs on the bridge
# loop (it stats and globs), so an agent must not be able to make it arbitrarily long.
MAX_COMMAND_CHARS = 16384
MAX_JUDGED = 2000  # candidate paths judged per command
# Directory entries looked at per call (each entry a glob is matched against, each entry of a
# listing read, each ``lexists`` of a plain word): the cost of the check is bounded by the
# work, not by the words; past it the call asks. Ordinary commands look at a few hundred.
MAX_SCANNED = 50000


def _expand_vars(text: str, cwd: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """``$VAR``/``${VAR}`` as ``bash`` will expand them: from ``env``, the environment the
    shell runs with (the bridge's own when not given), except the shell's own ``PWD``/``OLDPWD``
    (its working directory) and ``IFS`` (a blank); special and positional parameters are
    dropped. A name missing from ``env`` is empty, as in bash: judged with the bridge's value
    instead, ``cat ${DISPLAY}/home/u/.aws/credentials`` looked relative while bash read the key.
    """
    env = os.environ if env is None else env

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or ""
        if name in ("PWD", "OLDPWD") and cwd is not None:
            return cwd
        if name == "IFS":
            return " "
        return env.get(name, "")

    return _SPECIAL.sub("", _VAR.sub(value, text))


def _ansi_c(body: str) -> str:
    """The text of a ``$'...'`` word, as bash decodes it."""

    def one(m: re.Match[str]) -> str:
        hexa, u4, u8, octal, ctrl, other = m.groups()
        code = hexa or u4 or u8
        if code is not None:
            return chr(min(int(code, 16), 0x10FFFF))
        if octal is not None:
            return chr(int(octal, 8) & 0xFF)
        if ctrl is not None:
            return chr(ord(ctrl) & 0x1F)
        return _ANSI_SIMPLE.get(other, other)

    return _ANSI_ESC.sub(one, body)


def _normalize(command: str) -> str:
    """Quoting that bash undoes before a word names a file: line continuations vanish,
    ``$'...'`` is decoded, ``$"..."`` is a plain double-quoted string."""
    command = command.replace("\\\n", "")
    command = _ANSI_C.sub(lambda m: "'" + _ansi_c(m.group(1)).replace("'", "") + "'", command)
    return command.replace('$"', '"')


def _sequences(word: str) -> str:
    """``{a..c}`` -> ``{a,b,c}``, so the brace expansion below sees the names; a long one,
    or one of many in a word, becomes ``*``."""

    def one(m: re.Match[str]) -> str:
        a, b, step_text = m.groups()
        step = abs(int(step_text)) if step_text else 1
        step = step or 1
        if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
            lo, hi = int(a), int(b)
            seq = [str(i) for i in range(lo, hi + 1, step)] or [
                str(i) for i in range(lo, hi - 1, -step)
            ]
        elif a.isalpha() and b.isalpha():
            lo, hi = ord(a), ord(b)
            r = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
            seq = [chr(i) for i in r]
        else:
            return m.group(0)
        if len(seq) > MAX_BRACES or many:
            return "*"  # its words are letters or numbers, never a "/": a glob covers them
        return "{" + ",".join(seq) + ",}"

    many = len(_SEQ.findall(word)) > MAX_SEQUENCES
    return _SEQ.sub(one, word)


def _globbable(name: str) -> str:
    """A bash glob as Python's ``glob`` reads it: ``[^x]`` is ``[!x]``, a POSIX class is any
    one character."""
    return _POSIX_CLASS.sub("?", name.replace("[^", "[!"))


def _proc_self(path: str, cwd: str) -> str:
    """``/proc/self/cwd/x`` (and ``/dev/fd/../cwd/x``) is ``<the shell's cwd>/x``;
    ``/proc/self/root/x`` is ``/x``."""
    if path.startswith("/dev/fd"):
        path = "/proc/self/fd" + path[len("/dev/fd") :]
    if not path.startswith("/proc/"):
        return path
    path = os.path.normpath(path)
    path = _PROC_ROOT.sub("", path, count=1) or "/"
    path = _PROC_CWD.sub(lambda _m: cwd, path, count=1)
    return os.path.normpath(path)


class TooComplex(Exception):
    """A word whose brace expansion is too large to judge: the command asks instead."""


def _braces(word: str) -> list[str]:
    """``a{b,c}d`` -> ``abd acd`` (nested and repeated). More than MAX_BRACES words, or more
    work than that takes, raises :class:`TooComplex`: a word cut short could hide the one
    expansion that names ``~/.aws/credentials``."""
    out: list[str] = []
    todo = [word]
    steps = 0
    while todo:
        steps += 1
        if len(out) >= MAX_BRACES or steps > MAX_BRACE_STEPS:
            raise TooComplex(f"a brace expansion of over {MAX_BRACES} words")
        w = todo.pop()
        m = _BRACE.search(w)
        if m is None:
            out.append(w)
            continue
        for alt in m.group(1).split(","):
            todo.append(w[: m.start()] + alt + w[m.end() :])
    return out


def _shell_words(text: str) -> list[str]:
    """``text``'s words as bash splits them, quotes and backslashes removed: ``'my key'`` and
    ``my\\ key`` are one word ``my key`` (the split below, on every blank, never sees it)."""

    def unquote(m: re.Match[str]) -> str:
        single, double, escaped = m.groups()
        if single is not None:
            return single
        if double is not None:
            return _DQ_ESCAPE.sub(r"\1", double)
        return "" if escaped == "\n" else escaped

    return [_QUOTED.sub(unquote, w) for w in _WORD.findall(text)]


def _move_targets(words: Sequence[str]) -> list[str]:
    """The folders a command works from besides its own: ``cd``/``pushd`` targets (options such
    as ``-P``, ``-n``, ``--`` skipped) and the values of ``-C``, ``--directory``, ``--chdir``,
    ``--work-tree``... (``-C dir``, ``-Cdir``, ``-xC dir``, ``--directory=dir``)."""
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if w in ("cd", "pushd"):
            while i < len(words) and words[i].startswith("-") and words[i] != "-":
                i += 1
            if i < len(words):
                out.append(words[i])
                i += 1
            continue
        if not w.startswith("-"):
            continue
        name, eq, value = w.partition("=")
        if eq and name in _DIR_OPTS:
            out.append(value)
        elif w in _DIR_OPTS or _SHORT_C.fullmatch(w):
            if i < len(words):
                out.append(words[i])
                i += 1
        elif w.startswith("-C") and len(w) > 2:
            out.append(w[2:])
    return out


def tokens(
    command: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    *,
    whole: bool = False,
) -> list[str]:
    """Every path-like candidate in ``command``, in order, without duplicates. ``whole``: the
    text is also one name by itself (an upstream's string: ``…/Application Support/…``)."""
    seen: dict[str, None] = {}
    # The text as written and as bash decodes it, each also expanded: ``$'…'`` found where
    # bash sees none (``echo '$' ; cat ~/.a\ws/x ; echo '``) must not hide a word either.
    norm = _normalize(command)
    texts = dict.fromkeys(
        (command, _expand_vars(command, cwd, env), norm, _expand_vars(norm, cwd, env))
    )
    for text in texts:
        # Whole shell words first (a quoted word with spaces is one name to bash), then every
        # piece split on blanks and separators (what a program may split it into).
        words = [_FILE_URL.sub("", w) for w in _shell_words(text) if re.search(r"\s", w)]
        if whole:
            words += dict.fromkeys((text.strip(), _FILE_URL.sub("", text.strip())))
        text = re.sub(r"\\(.)", r"\1", text, flags=re.S).replace("'", "").replace('"', "")
        text = _FILE_URL.sub("", text)
        for word in [*words, *_SPLIT.split(text)]:
            if not word:
                continue
            for w in _braces(_sequences(word)):
                seen.setdefault(w, None)
                for part in _SUB_SPLIT.split(w):
                    if part:
                        seen.setdefault(part, None)
            if len(seen) > MAX_TOKENS:
                # Never a prefix: the first word left out could be ``~/.ssh/id_rsa``.
                raise TooComplex(f"over {MAX_TOKENS} words")
    return list(seen)


def _bases(cwd: str) -> list[str]:
    out = [cwd]
    d = cwd
    for _ in range(MAX_ANCESTORS):
        parent = os.path.dirname(d)
        if parent == d:
            break
        out.append(parent)
        d = parent
    home = os.path.realpath(os.path.expanduser("~"))
    if home not in out:
        out.append(home)
    return out


MAX_LISTING = 4096  # entries of a base read at once to find one-word names; past it: lstat


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


class _OverBudget(Exception):
    """More directory entries to look at than :data:`MAX_SCANNED`: the call asks."""


# Folded listings of settled folders, kept across calls: an upstream call or a bash command
# names the same bases (the roots, the home, a server's working directory) every time, and
# listing and folding a large home per call was most of what judging such a call cost.
_Listing = tuple[tuple[int, int, int, int], int, frozenset[str] | None]  # key, count, names
_LISTINGS: collections.OrderedDict[str, _Listing] = collections.OrderedDict()
_LISTINGS_LOCK = threading.Lock()  # judged on the loop and in workers alike
LISTINGS_KEPT = 256
# A folder whose status last changed at least this long before it was listed may be served
# from the cache while its (device, inode, mtime, ctime) stay the same. Why ctime: a change of
# entries moves it and no one but the clock can set it back (``touch -d`` moves mtime only);
# why settled: the kernel's clock for these times is coarse, so a change in the same tick as
# the listing could leave them equal.
SETTLED_NS = 2_000_000_000


def folded_listing(
    base: str, now_ns: Callable[[], int] = time.time_ns
) -> tuple[int, frozenset[str] | None]:
    """How many entries ``base`` has (up to ``MAX_LISTING + 1``) and their folded names (None
    past ``MAX_LISTING``). Raises OSError when it cannot be listed."""
    st = os.stat(base)
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    with _LISTINGS_LOCK:
        hit = _LISTINGS.get(base)
        if hit is not None and hit[0] == key:
            _LISTINGS.move_to_end(base)
            return hit[1], hit[2]
    with os.scandir(base) as it:
        entries = list(itertools.islice(it, MAX_LISTING + 1))
    names = frozenset(fold(e.name) for e in entries) if len(entries) <= MAX_LISTING else None
    if now_ns() - max(st.st_mtime_ns, st.st_ctime_ns) >= SETTLED_NS:
        with _LISTINGS_LOCK:
            _LISTINGS[base] = (key, len(entries), names)
            _LISTINGS.move_to_end(base)
            while len(_LISTINGS) > LISTINGS_KEPT:
                _LISTINGS.popitem(last=False)
    return len(entries), names


class Budget:
    """Candidate paths judged so far, shared by the strings of one call (each stat costs), the
    folded entry names of each base read so far (one ``listdir`` per base and call, so the
    many plain words of a command cost a set lookup each, not a system call per base), the
    entries of each directory a glob read (once per call), and the directory entries looked at
    so far (``scanned``, bounded by :data:`MAX_SCANNED`)."""

    __slots__ = ("dirs", "judged", "listings", "scanned")

    def __init__(self) -> None:
        self.judged = 0
        self.listings: dict[str, frozenset[str] | None] = {}
        self.dirs: dict[str, list[os.DirEntry[str]]] = {}
        self.scanned = 0

    def charge(self, entries: int) -> None:
        """``entries`` more directory entries looked at; past :data:`MAX_SCANNED` the call
        is not judged further but asks."""
        self.scanned += entries
        if self.scanned > MAX_SCANNED:
            raise _OverBudget

    def may_exist(self, base: str, word: str) -> bool:
        """``word`` (one path component) may name an entry of ``base``: its folded form is in
        the listing (a superset on a case-sensitive system; exact with ``lexists`` below). A
        base too large or unreadable to list is asked with ``lexists`` instead."""
        if base not in self.listings:
            names: frozenset[str] | None = None
            with contextlib.suppress(OSError, ValueError):
                count, names = folded_listing(base)
                self.charge(count)
            self.listings[base] = names
        names = self.listings[base]
        if names is not None and fold(word) not in names:
            return False
        self.charge(1)
        return os.path.lexists(os.path.join(base, word))

    def entries(self, folder: str) -> list[os.DirEntry[str]]:
        """The entries of ``folder``, read once per call (as much of it as the budget
        allows); unreadable: none."""
        if folder not in self.dirs:
            got: list[os.DirEntry[str]] = []
            room = max(MAX_SCANNED - self.scanned + 1, 1)
            with contextlib.suppress(OSError, ValueError), os.scandir(folder or ".") as it:
                got = list(itertools.islice(it, room))
            self.dirs[folder] = got  # charged as it is matched, each time
        return self.dirs[folder]

    def glob(self, pattern: str, limit: int) -> list[str]:
        """Python's ``glob.glob(pattern, include_hidden=True)`` (no ``**``), on the listings of
        this call, each entry matched charged to the budget; at most ``limit`` matches."""
        head, sep, rest = pattern.partition("/") if pattern.startswith("/") else ("", "", pattern)
        found = [head + sep] if sep else [""]
        parts = [p for p in rest.split("/") if p]
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            nxt: list[str] = []
            if not glob.has_magic(part):
                for f in found:
                    path = os.path.join(f, part)
                    if last:
                        self.charge(1)
                        if not os.path.lexists(path):
                            continue
                    nxt.append(path)
            else:
                for f in found:
                    listed = self.entries(f)
                    self.charge(len(listed))  # each one matched against the pattern
                    names = [e.name for e in listed if last or _is_dir(e)]
                    nxt += [os.path.join(f, n) for n in fnmatch.filter(names, part)]
                    if len(nxt) > limit:
                        break
            found = nxt[: limit + 1]
            if not found:
                break
        return found if parts else []


def command_escalation(
    command: str,
    cwd: str,
    policy: PathPolicy | CallPaths,
    env: Mapping[str, str] | None = None,
    *,
    bases: Sequence[str] = (),
    budget: Budget | None = None,
    recursive: bool = False,
    whole: bool = False,
) -> Escalation | None:
    """The first protected/persistence/own-file location the command names, or None.

    A relative name is tried against the working directory; when the command can change
    directory (``cd``, ``pushd``, ``-C``...), also against each of the working directory's
    ancestors and the home directory, and every word is tried, not only path-like ones
    (``cd .. && cat .aws/credentials``, ``cd .ssh; cat id_rsa``). ``env`` is the environment
    the shell runs with (see :func:`_expand_vars`); a ``~`` is tried with its ``HOME`` too.
    ``bases``: more directories a relative name is tried against (a working directory that is
    not known for sure); ``budget``: the count of judged paths, shared across one call.
    ``recursive``: ``**`` means any depth (an upstream's glob), not ``*`` (bash without
    ``globstar``, which is off by default and off in ``bash -c``). ``whole``: the text is
    also one name by itself, spaces included (an upstream's string, not a command).
    """
    if len(command) > MAX_COMMAND_CHARS:
        return _unchecked(cwd, f"command of {len(command)} characters, too long to check")
    try:
        found = tokens(command, cwd, env, whole=whole)
    except TooComplex as e:
        return _unchecked(cwd, f"command holds {e}, too many to check")
    moves = any(t in _MOVES or t.startswith(_MOVE_OPTS) or _SHORT_C.fullmatch(t) for t in found)
    tried = _bases(cwd) if moves else [cwd]
    bases = list(dict.fromkeys([*tried, *bases]))
    if moves:  # and every folder a cd or -C names, from each base so far: cd .config; cd x
        targets = _move_targets(_shell_words(_expand_vars(_normalize(command), cwd, env)))
        if len(targets) > MAX_CD:  # the 17th ``cd`` could be the one into ``~/.config``
            return _unchecked(cwd, f"command changes directory over {MAX_CD} times")
        for target in targets:
            t = os.path.expanduser(target)
            more = [os.path.normpath(os.path.join(b, t)) for b in bases]
            bases = list(dict.fromkeys(bases + more))
            if len(bases) > MAX_BASES:
                why = f"command reaches over {MAX_BASES} working directories, too many to check"
                return _unchecked(cwd, why)
    # bash's HOME for ``~`` when ``bash.env`` sets another one than the bridge's (else None).
    shell_home = env.get("HOME") if env is not None else None
    if shell_home == os.path.expanduser("~"):
        shell_home = None
    budget = budget or Budget()
    try:
        return _words_escalation(found, cwd, policy, bases, budget, moves, shell_home, recursive)
    except _OverBudget:
        why = f"command names too many files to check (over {MAX_SCANNED} directory entries)"
        return _unchecked(cwd, why)


def _words_escalation(
    found: list[str],
    cwd: str,
    policy: PathPolicy | CallPaths,
    bases: list[str],
    budget: Budget,
    moves: bool,
    shell_home: str | None,
    recursive: bool,
) -> Escalation | None:
    """:func:`command_escalation` over the words ``found`` (raises :class:`_OverBudget`)."""
    for tok in found:
        if len(tok) > MAX_TOKEN_LEN:
            # The OS refuses a longer name, but a program may normalise it first
            # (``/./././…/.ssh/id_rsa``, as ``path.resolve`` does): judge that form.
            tok = os.path.normpath(tok)
        if len(tok) > MAX_TOKEN_LEN:
            continue
        if not (moves or _PATHLIKE.search(tok)):
            # A plain word (``creds``, ``fix``) is a file only where it exists: a symlink or a
            # hard link by that name in a base is judged by where it lands and what it is;
            # a word that names nothing anywhere is not a path at all.
            here = [b for b in bases if budget.may_exist(b, tok)]
            if here:
                budget.judged += len(here)
                if budget.judged > MAX_JUDGED:
                    why = f"command names over {MAX_JUDGED} paths, too many to check"
                    return _unchecked(cwd, why)
                for b in here:
                    esc = _judge(os.path.join(b, tok), policy, True)
                    if esc is not None:
                        return esc
            continue
        if tok == "~+" or tok.startswith(("~+/", "~-/")) or tok == "~-":
            tok = cwd + tok[2:]  # bash's $PWD and $OLDPWD (taken as the working directory)
        p = os.path.expanduser(tok) if tok.startswith("~") else tok
        names = [_proc_self(p, cwd)] if os.path.isabs(p) else [os.path.join(b, p) for b in bases]
        if shell_home and (tok == "~" or tok.startswith("~/")):
            names.append(shell_home + tok[1:])  # bash's own HOME, when bash.env sets another
        candidates = list(names)
        if recursive and "**" in tok:
            for name in names:
                esc = _descendants(name, policy)
                if esc is not None:
                    return esc
                # Every ``**/`` as no folder at all: ``~/**/.ssh/id_rsa`` names ``~/.ssh/id_rsa``.
                candidates.append(name.replace("**/", ""))
        for name in names:
            if _GLOB.search(name):
                # Never a prefix of the matches: the first one left out could be the
                # secret. Past MAX_JUDGED in all, the command asks (below).
                candidates += budget.glob(_globbable(name), MAX_JUDGED)
        bare = "/" not in tok
        budget.judged += len(candidates)
        if budget.judged > MAX_JUDGED:
            return _unchecked(cwd, f"command names over {MAX_JUDGED} paths, too many to check")
        for c in candidates:
            esc = _judge(c, policy, bare and c in names)
            if esc is not None:
                return esc
    return None


def _descendants(name: str, policy: PathPolicy | CallPaths) -> Escalation | None:
    """``<top>/**/x`` as a server reads it: any file at any depth below ``top`` (the literal
    part before the first glob). It is never expanded (that is a walk of the home folder on the
    bridge loop); instead, when ``top`` is in a protected location or holds one, the call asks:
    ``~/**/hosts.yml`` reaches ``~/.config/gh/hosts.yml``."""
    m = _GLOB.search(name)
    head = name[: m.start()] if m else name
    top = head if head.endswith("/") else os.path.dirname(head)
    raw = policy.policy if hasattr(policy, "policy") else policy
    try:
        real = os.path.realpath(top or "/")
        esc = raw.judge(real, write=True)
        if esc is not None and esc.always_asks:
            return esc
        for p in raw.protected_dirs_under(real):
            esc = raw.judge(p, write=True)
            if esc is not None and esc.always_asks:
                return esc
    except (OSError, ValueError):
        return None
    return None


def _unchecked(cwd: str, why: str) -> Escalation:
    """A command (or arguments) whose paths were not checked always asks; the reason says
    why, in every UI and to the agent."""
    from ..paths import Escalation, EscalationKind

    return Escalation(EscalationKind.UNCHECKED, why, cwd)


def _judge(path: str, policy: PathPolicy | CallPaths, bare: bool = False) -> Escalation | None:
    """Cheap first: the name as written (no system call); then, only when its folder exists
    (a symlink or a hard link could be on the way), the real path and the file's identity."""
    try:
        raw = policy.policy if hasattr(policy, "policy") else policy
        esc = raw.judge(os.path.normpath(path), write=True)
        if esc is not None and esc.always_asks:
            return esc
        # Nothing there and its folder not there either: nothing on the way can be a link.
        # (A bare word joined to a real base only needs the first test.)
        if not os.path.lexists(path) and not os.path.isdir(os.path.dirname(path) or "/"):
            return None
        if bare and not os.path.lexists(path):
            return None
        esc = policy.escalation(path, write=True)
        if (esc is None or not esc.always_asks) and not hasattr(policy, "policy"):
            # A bare PathPolicy judges by path only (CallPaths also checks the identity): a
            # hard link to ``~/.ssh/id_rsa`` is that file, whatever its name.
            real = raw.resolve(path)
            st = os.stat(real)
            if stat.S_ISREG(st.st_mode):
                esc = raw.judge_identity(real, st, refresh=False) or esc
    except (OSError, ValueError):
        return None
    return esc if esc is not None and esc.always_asks else None


def _strings(args: object) -> tuple[list[str], str | None]:
    """Every key and string value of ``args``, at any depth; or why they are too many to
    judge. Iterative (no depth limit to slip past), and bounded by :data:`MAX_VALUES`."""
    out: list[str] = []
    chars = 0
    stack: list[object] = [args]
    visited = 0
    while stack:
        value = stack.pop()
        visited += 1
        if visited > MAX_VALUES:
            return out, f"arguments hold over {MAX_VALUES} values, too many to check"
        if isinstance(value, dict):
            for k, v in value.items():
                key = str(k)
                out.append(key)
                chars += len(key)
                stack.append(v)
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            out.append(value)
            chars += len(value)
            if chars <= MAX_ARGUMENT_CHARS and value.lstrip()[:1] in ("[", "{", '"'):
                # JSON inside a string (``'["/home/u/.aws/credentials"]'``): a server may
                # decode it; its strings are judged too (and count towards the limits).
                with contextlib.suppress(ValueError, RecursionError):
                    stack.append(json.loads(value))
        else:
            continue
        if len(out) > MAX_STRINGS:
            return out, f"arguments hold over {MAX_STRINGS} names and strings, too many to check"
        if chars > MAX_ARGUMENT_CHARS:
            return out, f"arguments of over {MAX_ARGUMENT_CHARS} characters, too long to check"
    return out, None


def arguments_escalation(
    args: object,
    policy: PathPolicy | CallPaths,
    cwd: str | None = None,
    *,
    unsure: bool = False,
) -> Escalation | None:
    """The same judgement over every key and string value of a tool whose meaning the bridge
    does not know (an upstream ``mcp__`` tool). Relative names are taken from ``cwd``, the
    directory the upstream runs in (default: the first root); with ``unsure`` (its directory
    is not known: an HTTP upstream) also from the first root's ancestors, the home directory
    and the bridge's own working directory, and any of them that lands on a protected path
    asks. Arguments too many or too long to judge always ask, like a too-long command."""
    root = policy.resolve(None)
    cwd = cwd or root
    strings, too_many = _strings(args)
    if too_many is not None:
        return _unchecked(cwd, too_many)
    bases: list[str] = []
    if unsure:
        bases = _bases(root)
        with contextlib.suppress(OSError):
            bases.append(os.path.realpath(os.getcwd()))
    # A base and a relative part in two arguments (``{"cwd": "~", "files": ".aws/credentials"}``,
    # ``{"root": "~", "glob": "**/hosts.yml"}``): every argument that names an existing folder
    # is one more base for the others.
    # Also percent-decoded (``file:///…/.dock%65r``), and for an unsure upstream from every
    # base (``{"dir": ".docker", "file": "config.json"}``).
    folders: list[str] = []
    budget = Budget()
    for s in dict.fromkeys(strings):
        if not s or len(s) > MAX_TOKEN_LEN or "\0" in s:
            continue
        forms = [s]
        for _ in range(3):
            decoded = urllib.parse.unquote(forms[-1])
            if decoded == forms[-1]:
                break
            forms.append(decoded)
        for form in forms:
            p = os.path.expanduser(_expand_vars(_FILE_URL.sub("", form.strip())))
            if os.path.isabs(p):
                here = [p]
            elif "/" in p or p in (".", ".."):
                here = [os.path.join(b, p) for b in dict.fromkeys([cwd, *bases])]
            else:  # one word: a set lookup per base (one listing each), not a stat
                here = [os.path.join(b, p) for b in dict.fromkeys([cwd, *bases])]
                here = [q for q in here if budget.may_exist(os.path.dirname(q), p)]
            for q in here:
                with contextlib.suppress(OSError, ValueError):
                    if os.path.isdir(q):
                        folders.append(os.path.realpath(q))
    folders = list(dict.fromkeys(f for f in folders if f not in bases and f != cwd))
    if len(folders) > MAX_ARG_FOLDERS:
        return _unchecked(cwd, f"arguments name over {MAX_ARG_FOLDERS} folders, too many to check")
    bases += folders
    for s in strings:
        # Brackets are not globs to a server: ``['/home/u/.aws/credentials']`` (a list's repr)
        # names the file too, so the text is also judged with them as separators; and a server
        # may percent-decode (``%2essh/%69d_rsa``, ``file:///…/%2Eaws/credentials``,
        # ``?p=%2F…``), so each decoding (up to three rounds: ``%252e``) is judged too.
        texts = [s]
        for _ in range(3):
            decoded = urllib.parse.unquote(texts[-1])
            if decoded == texts[-1]:
                break
            texts.append(decoded)
        texts += [_BRACKETS.sub(" ", t) for t in texts if _BRACKETS.search(t)]
        for text in texts:
            esc = command_escalation(
                text, cwd, policy, bases=bases, budget=budget, recursive=True, whole=True
            )
            if esc is not None:
                return esc
    return None

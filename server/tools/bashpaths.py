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

import contextlib
import glob
import itertools
import os
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..paths import CallPaths, Escalation, PathPolicy

MAX_TOKENS = 10000  # judged per command: more than a 20,000-character command can hold
MAX_GLOB = 256  # matches of one glob that are judged
MAX_BRACES = 64  # words one brace expression may expand to
MAX_ANCESTORS = 32  # of the working directory, for relative names after a ``cd``
MAX_TOKEN_LEN = 4096  # longer than PATH_MAX: the OS cannot open it anyway

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_SPLIT = re.compile(r"[\s;&|<>()`]+")
_SUB_SPLIT = re.compile(r"[=:,]+")
_BRACE = re.compile(r"\{([^{}]*,[^{}]*)\}")
_GLOB = re.compile(r"[*?\[]")
# A word that can name a path by itself; a bare word only matters after a change of directory.
_PATHLIKE = re.compile(r"[/.~*?\[]")
_MOVES = frozenset({"cd", "pushd", "popd", "-C", "--directory", "--chdir", "--cwd", "-chdir"})
_MOVE_OPTS = ("--directory", "--chdir", "--cwd", "-C")
_CD = re.compile(r"(?:^|[\s;&|(])(?:cd|pushd)\s+([^\s;&|()<>`]+)")
MAX_CD = 16
MAX_BASES = 64
_FILE_URL = re.compile(r"file://(?:localhost)?(?=/)", re.I)
MAX_STRINGS = 64  # string arguments of one call that are judged (arguments_escalation)
MAX_STRING_LEN = 65536  # of each, the first characters are judged
# Past these the command is not analysed at all but always asks: the check runs on the bridge
# loop (it stats and globs), so an agent must not be able to make it arbitrarily long.
MAX_COMMAND_CHARS = 16384
MAX_JUDGED = 2000  # candidate paths judged per command


def _expand_vars(text: str) -> str:
    env = os.environ
    return _VAR.sub(lambda m: env.get(m.group(1) or m.group(2) or "", ""), text)


def _braces(word: str) -> list[str]:
    """``a{b,c}d`` -> ``abd acd`` (nested and repeated), at most MAX_BRACES results."""
    out: list[str] = []
    todo = [word]
    while todo and len(out) < MAX_BRACES:
        w = todo.pop()
        m = _BRACE.search(w)
        if m is None:
            out.append(w)
            continue
        for alt in m.group(1).split(","):
            todo.append(w[: m.start()] + alt + w[m.end() :])
    return out + todo[: max(MAX_BRACES - len(out), 0)]


def tokens(command: str) -> list[str]:
    """Every path-like candidate in ``command``, in order, without duplicates."""
    seen: dict[str, None] = {}
    for text in (command, _expand_vars(command)):
        text = re.sub(r"\\(.)", r"\1", text, flags=re.S).replace("'", "").replace('"', "")
        text = _FILE_URL.sub("", text)
        for word in _SPLIT.split(text):
            if not word:
                continue
            for w in _braces(word):
                seen.setdefault(w, None)
                for part in _SUB_SPLIT.split(w):
                    if part:
                        seen.setdefault(part, None)
            if len(seen) >= MAX_TOKENS:
                return list(seen)
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


def command_escalation(command: str, cwd: str, policy: PathPolicy | CallPaths) -> Escalation | None:
    """The first protected/persistence/own-file location the command names, or None.

    A relative name is tried against the working directory; when the command can change
    directory (``cd``, ``pushd``, ``-C``...), also against each of the working directory's
    ancestors and the home directory, and every word is tried, not only path-like ones
    (``cd .. && cat .aws/credentials``, ``cd .ssh; cat id_rsa``).
    """
    if len(command) > MAX_COMMAND_CHARS:
        return _unchecked(cwd, f"command of {len(command)} characters, too long to check")
    found = tokens(command)
    moves = any(t in _MOVES or t.startswith(_MOVE_OPTS) for t in found)
    bases = _bases(cwd) if moves else [cwd]
    if moves:  # and every folder a cd names, from each base so far: cd .config; cd autostart
        plain = re.sub(r"\\(.)", r"\1", _expand_vars(command)).replace("'", "").replace('"', "")
        for target in _CD.findall(plain)[:MAX_CD]:
            t = os.path.expanduser(target)
            more = [os.path.normpath(os.path.join(b, t)) for b in bases]
            bases = list(dict.fromkeys(bases + more))[:MAX_BASES]
    judged = 0
    for tok in found:
        if len(tok) > MAX_TOKEN_LEN or not (moves or _PATHLIKE.search(tok)):
            continue
        p = os.path.expanduser(tok) if tok.startswith("~") else tok
        names = [p] if os.path.isabs(p) else [os.path.join(b, p) for b in bases]
        candidates = list(names)
        for name in names:
            if _GLOB.search(name):
                with contextlib.suppress(OSError, ValueError, RecursionError):
                    candidates += itertools.islice(glob.iglob(name, recursive=False), MAX_GLOB)
        bare = "/" not in tok
        judged += len(candidates)
        if judged > MAX_JUDGED:
            return _unchecked(cwd, f"command names over {MAX_JUDGED} paths, too many to check")
        for c in candidates:
            esc = _judge(c, policy, bare and c in names)
            if esc is not None:
                return esc
    return None


def _unchecked(cwd: str, why: str) -> Escalation:
    """A command whose paths were not checked always asks; the reason says why."""
    from ..paths import Escalation, EscalationKind

    return Escalation(EscalationKind.PROTECTED, why, cwd)


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
    except (OSError, ValueError):
        return None
    return esc if esc is not None and esc.always_asks else None


def _strings(value: object, out: list[str], depth: int = 0) -> None:
    if len(out) >= MAX_STRINGS or depth > 8:
        return
    if isinstance(value, str):
        out.append(value[:MAX_STRING_LEN])
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)


def arguments_escalation(args: object, policy: PathPolicy | CallPaths) -> Escalation | None:
    """The same judgement over every string argument of a tool whose meaning the bridge does
    not know (an upstream ``mcp__`` tool): relative names are taken from the first root."""
    strings: list[str] = []
    _strings(args, strings)
    cwd = policy.resolve(None)
    for s in strings:
        esc = command_escalation(s, cwd, policy)
        if esc is not None:
            return esc
    return None

"""What the human sees is what runs: the one rendering function for agent-controlled text.

Every string that came from an agent (command, path, content, client name, tool name, reason,
session info) goes through :func:`render` (or :func:`shorten`) before any UI shows it: the tray
menu and notifications, the approval page, ``watch``, ``pending``, ``sessions`` and ``audit``.

- C0 and C1 controls, DEL and therefore every terminal escape sequence become visible escapes
  (``\\x1b``, ``\\x85``): with ESC itself escaped, ``ESC[2K`` or an OSC 52 clipboard write is
  just text, so nothing reaches a terminal or a menu raw.
- Bidi controls, format characters (zero-width joiners, BOM, tags), blank-looking characters
  (U+2800, U+3164, odd spaces), unassigned/private/surrogate code points become escapes
  (``\\u202e``) and set :attr:`Safe.hidden`, which every UI shows as "contains hidden
  characters". A long run of plain spaces becomes a visible marker and sets it too.
- Look-alike letters: a word that mixes Latin letters with letters of a script that draws
  like Latin (Cyrillic, Greek, Armenian, Cherokee, fullwidth and mathematical letters) is a
  UTS #39 "mixed script" word: ``get.docker.com`` with its ``o`` a Cyrillic one (U+043E) is
  another host that looks exactly like Docker's. The foreign letters of such a word are
  escaped where they stand (``d\\u043ecker``) and set :attr:`Safe.hidden`. A word wholly
  in one script (a Russian comment, Greek or Chinese text) is shown as is: only the *mix*
  inside one word deceives. (Letters, combining marks and digits make up a word; anything
  else separates words.) The one exception, UTS #39's "whole-script confusable": a word made
  only of letters that draw exactly as Latin ones (:data:`WHOLE_LOOKALIKES`) with Latin right
  after it in the same blank-free run (``аррӏе.com``, all Cyrillic before the dot) is flagged
  and escaped the same way.
- :func:`shorten` never hides the end: head, ``…``, tail and the total length.
- A secret the bridge knows (its token, the control secret), or a piece of one, becomes a
  marker first (:mod:`server.present.secrets`), before any cut.

Backslashes are left alone: an agent that writes a literal ``\\x1b`` shows exactly those four
characters, which is what runs; only real control characters raise the warning.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from .secrets import scrub

ELLIPSIS = "…"
SPACE_RUN = 12  # this many plain spaces in a row are shown as a marker (used to push text away)
HIDDEN_WARNING = "contains hidden characters"
# Combining marks in a row past this many are escaped ("Zalgo" text stacks them so high that
# they paint over the lines above and below, e.g. over the rest of a command on the page).
MARK_RUN = 4

BIDI = frozenset([*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C])
# Letters and symbols that draw nothing (padding that looks like blank space).
BLANK = frozenset(
    [
        *(0x2800, 0x3164, 0x115F, 0x1160, 0xFFA0, 0x034F, 0x17B4, 0x17B5, 0x180E),
        *range(0xFE00, 0xFE10),  # variation selectors
        *range(0xE0100, 0xE01F0),
    ]
)
# Categories shown escaped: controls, format, separators other than the plain space,
# surrogates, private use and unassigned.
ESCAPED_CATEGORIES = frozenset(["Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"])
# Scripts (the first word of a letter's Unicode name) with letters that draw like Latin ones.
# A word mixing Latin with any of these is flagged; a word in one of them alone is not.
LOOKALIKE_SCRIPTS = frozenset(
    ["CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC", "LISU", "FULLWIDTH", "MATHEMATICAL"]
)
# Letters of those scripts that draw (nearly) exactly as a Latin letter. A word made of these
# alone followed by Latin in the same run of non-blank text is a "whole-script" look-alike:
# ``аррӏе.com`` in Cyrillic is not Apple's host. (A word of them alone elsewhere is not
# flagged: Russian prose is full of such words, ``с``, ``о``, ``ее``.)
WHOLE_LOOKALIKES = frozenset(
    "\u0430\u0441\u0435\u043e\u0440\u0445\u0443\u0456\u0458\u0455\u04bb\u0501\u051b\u051d\u04cf"
    "\u0410\u0412\u0415\u041a\u041c\u041d\u041e\u0420\u0421\u0422\u0425\u0406\u0408\u0405\u04ae"
    "\u03bf\u03bd\u03c1\u03b9"
    "\u0391\u0392\u0395\u0396\u0397\u0399\u039a\u039c\u039d\u039f\u03a1\u03a4\u03a5\u03a7"
    "\u0585\u057d\u0570\u0578"
)
WHOLE_REACH = 16  # how far (non-blank characters) the Latin may follow such a word


@dataclass(frozen=True, slots=True)
class Safe:
    """Text safe to show anywhere, and what the rendering found in the original."""

    text: str
    hidden: bool = False  # bidi, invisible, blank-looking or control characters were escaped
    length: int = 0  # characters in the original
    truncated: bool = False

    def __str__(self) -> str:
        return self.text


def escape_char(ch: str) -> str:
    cp = ord(ch)
    if cp < 0x100:
        return f"\\x{cp:02x}"
    if cp < 0x10000:
        return f"\\u{cp:04x}"
    return f"\\U{cp:08x}"


@lru_cache(maxsize=4096)
def _classify(ch: str) -> int:
    """0: show as is; 1: escape (control, not hidden); 2: escape and flag hidden."""
    cp = ord(ch)
    if ch == " ":
        return 0
    if cp in BIDI or cp in BLANK:
        return 2
    if cp < 0x20 or 0x7F <= cp <= 0x9F:
        return 2
    if unicodedata.category(ch) in ESCAPED_CATEGORIES:
        return 2
    return 0


@lru_cache(maxsize=4096)
def _is_mark(ch: str) -> bool:
    return unicodedata.category(ch) in ("Mn", "Me")


class _Kind:
    """What a character is to the mixed-script check (ints: compared in a hot loop)."""

    OTHER = 0  # not part of a word
    WORD = 1  # a letter of another script, a combining mark or a digit: part of a word
    LATIN = 2
    LOOKALIKE = 3  # a letter of a script in LOOKALIKE_SCRIPTS


@lru_cache(maxsize=4096)
def _word_kind(ch: str) -> int:
    cat = unicodedata.category(ch)
    if cat[0] == "L":
        script = unicodedata.name(ch, "").split(" ", 1)[0]
        if script == "LATIN" or ch.isascii():
            return _Kind.LATIN
        return _Kind.LOOKALIKE if script in LOOKALIKE_SCRIPTS else _Kind.WORD
    if cat[0] == "M" or cat == "Nd":
        return _Kind.WORD
    return _Kind.OTHER


def _mixed_pattern(chars: set[str], bad: set[str]) -> str | None:
    """A pattern matching each whole word that mixes Latin with look-alike letters, or None
    when ``chars`` (the text's distinct characters) cannot hold one.

    Possessive quantifiers and disjoint classes keep it linear in the text's length: each
    word start is tried once per branch and nothing backtracks into a long word.
    """
    kinds: dict[int, list[str]] = {_Kind.WORD: [], _Kind.LATIN: [], _Kind.LOOKALIKE: []}
    for c in chars:
        k = _word_kind(c)
        if k != _Kind.OTHER and c not in bad:
            kinds[k].append(c)
    if not kinds[_Kind.LATIN] or not kinds[_Kind.LOOKALIKE]:
        return None

    def cls(*ks: int) -> str:
        return "[" + "".join(re.escape(c) for k in ks for c in sorted(kinds[k])) + "]"

    n, a, b = cls(_Kind.WORD), cls(_Kind.LATIN), cls(_Kind.LOOKALIKE)
    w = cls(_Kind.WORD, _Kind.LATIN, _Kind.LOOKALIKE)
    lat = cls(_Kind.WORD, _Kind.LATIN)
    look = cls(_Kind.WORD, _Kind.LOOKALIKE)
    if not kinds[_Kind.WORD]:
        n = "(?!)"  # an empty class is not a pattern: match nothing
    mixed = f"(?<!{w})(?:{n}*+{a}{lat}*+{b}|{n}*+{b}{look}*+{a}){w}*+"
    whole = [c for c in kinds[_Kind.LOOKALIKE] if c in WHOLE_LOOKALIKES]
    if whole:  # a word of look-alikes alone, Latin close after it in the same blank-free run
        c = "[" + "".join(re.escape(ch) for ch in sorted(whole)) + "]"
        not_latin = "[^\\s" + a[1:]
        mixed += f"|(?<!{w}){c}++(?!{w})(?={not_latin}{{0,{WHOLE_REACH}}}+{a})"
    return mixed


def _mixed_word(word: str) -> str:
    """A mixed-script word shown with its look-alike letters escaped (and, as everywhere, a
    stack of combining marks past :data:`MARK_RUN` escaped too)."""
    if any(_is_mark(c) for c in word):
        out: list[str] = []
        marks = 0
        for ch in word:
            marks = marks + 1 if _is_mark(ch) else 0
            lookalike = _word_kind(ch) == _Kind.LOOKALIKE
            out.append(escape_char(ch) if lookalike or marks > MARK_RUN else ch)
        return "".join(out)
    return word.translate(_ESCAPE_TABLE)


class _EscapeLookalikes(dict[int, str]):
    """A ``str.translate`` table escaping look-alike letters (filled on first use, in C)."""

    def __missing__(self, cp: int) -> str:
        ch = chr(cp)
        out = escape_char(ch) if _word_kind(ch) == _Kind.LOOKALIKE else ch
        if len(self) < 8192:
            self[cp] = out
        return out


_ESCAPE_TABLE = _EscapeLookalikes()


def _scan(text: str, multiline: bool) -> tuple[re.Pattern[str] | None, bool]:
    """A pattern matching exactly what must be escaped in ``text``, and the hidden flag.

    Classifying the *distinct* characters (``set`` runs in C) keeps a 900 KB argument cheap.
    """
    chars = set(text)
    bad = {c for c in chars if _classify(c)}
    hidden = any(c not in "\n\t" for c in bad)
    if multiline:
        bad -= {"\n", "\t"}
    runs = " " * SPACE_RUN in text
    hidden = hidden or runs
    parts = []
    if bad:
        parts.append("[" + "".join(re.escape(c) for c in sorted(bad)) + "]")
    if runs:
        parts.append(f" {{{SPACE_RUN},}}")
    mixed = _mixed_pattern(chars, bad)
    if mixed is not None and re.search(mixed, text):
        parts.append(mixed)  # a whole word, before the mark stack (the word handles its own)
        hidden = True
    marks = {c for c in chars if c not in bad and _is_mark(c)}
    if marks:
        cls = "[" + "".join(re.escape(c) for c in sorted(marks)) + "]"
        stack = re.compile(f"(?<={cls}{{{MARK_RUN}}}){cls}")
        if stack.search(text):  # a stack of marks draws over the lines around it
            parts.append(stack.pattern)
            hidden = True
    return (re.compile("|".join(parts)) if parts else None), hidden


def _token(m: str) -> str:
    if m[0] == " ":
        return f"⟨{len(m)} spaces⟩"
    if len(m) > 1:  # only a mixed-script word is a match longer than one character
        return _mixed_word(m)
    if m == "\n":
        return "\\n"
    if m == "\t":
        return "\\t"
    return escape_char(m)


def _segments(text: str, multiline: bool) -> tuple[list[tuple[str, bool]], bool]:
    """The rendered text as segments ``(text, atomic)``.

    Plain runs may be cut anywhere; escapes and markers are atomic, so truncation never
    splits one.
    """
    pattern, hidden = _scan(text, multiline)
    if pattern is None:
        return ([(text, False)] if text else []), hidden
    out: list[tuple[str, bool]] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append((text[pos : m.start()], False))
        out.append((_token(m.group()), True))
        pos = m.end()
    if pos < len(text):
        out.append((text[pos:], False))
    return out, hidden


def render(text: object, *, multiline: bool = False) -> Safe:
    """The whole text, safe: newlines kept only when ``multiline`` (else shown as ``\\n``)."""
    s = scrub(text if isinstance(text, str) else str(text))
    segments, hidden = _segments(s, multiline)
    return Safe("".join(t for t, _ in segments), hidden, len(s))


def hidden_in(value: object) -> bool:
    """Whether any string anywhere in a JSON-like value (dict keys and values, lists, nested
    to any depth) holds a character :func:`render` would flag as hidden.

    As everywhere in this module, a newline or a tab is shown escaped on one line but is not
    "hidden" (a multi-line SQL query is ordinary). Iterative, so a deeply nested argument
    cannot exhaust the stack.
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, str):
            if _scan(v, True)[1]:
                return True
        elif isinstance(v, dict):
            for k, item in v.items():
                if _scan(str(k), True)[1]:
                    return True
                stack.append(item)
        elif isinstance(v, list | tuple):
            stack.extend(v)
    return False


def safe(text: object) -> str:
    """Shorthand for one-line output (CLI columns, tray items): the safe text only."""
    return render(text).text


def _take(segments: list[tuple[str, bool]], budget: int, from_end: bool) -> str:
    """At most ``budget`` rendered characters from one end, never splitting an escape."""
    taken: list[str] = []
    used = 0
    for text, atomic in reversed(segments) if from_end else segments:
        room = budget - used
        if room <= 0:
            break
        if len(text) <= room:
            taken.append(text)
            used += len(text)
        elif not atomic:
            taken.append(text[-room:] if from_end else text[:room])
            used += room
        elif not taken:  # one oversized marker: show it anyway rather than nothing
            taken.append(text)
            used += len(text)
        else:
            break
    return "".join(reversed(taken) if from_end else taken)


def shorten(text: object, limit: int = 80, *, multiline: bool = False) -> Safe:
    """At most about ``limit`` characters: head, ``…``, tail and the total length.

    The tail is never dropped: a dangerous end (``…; curl x | sh``) stays visible, and the
    length says how much was left out. The result may exceed ``limit`` by the length note.
    Only a window at each end is rendered, so a huge argument costs little.
    """
    s = scrub(text if isinstance(text, str) else str(text))
    budget = max(limit - 1, 2)
    head_budget = budget - budget // 2
    tail_budget = budget // 2
    window = 8 * limit + 64
    if len(s) > 2 * window:
        _, hidden = _scan(s, multiline)
        head_seg, _ = _segments(s[:window], multiline)
        tail_seg, _ = _segments(s[-window:], multiline)
    else:
        segments, hidden = _segments(s, multiline)
        if sum(len(t) for t, _ in segments) <= limit:
            return Safe("".join(t for t, _ in segments), hidden, len(s))
        head_seg = tail_seg = segments
    head = _take(head_seg, head_budget, from_end=False)
    tail = _take(tail_seg, tail_budget, from_end=True)
    shown = head + ELLIPSIS + tail + f" ({len(s)} chars)"
    return Safe(shown, hidden, len(s), True)


def lines_preview(text: str, head: int = 6, tail: int = 4, width: int = 160) -> Safe:
    """A multi-line preview: first ``head`` and last ``tail`` lines, each line shortened.

    Used for file contents and edit strings: the middle is replaced by a line saying how many
    lines were left out, so the end of a huge write is always on screen. Only the shown lines
    are rendered; the hidden flag covers the whole text.
    """
    lines = scrub(text).split("\n")
    truncated = False
    if len(lines) > head + tail + 1:
        skipped = len(lines) - head - tail
        picked = [*lines[:head], None, *lines[-tail:]]
        truncated = True
    else:
        skipped = 0
        picked = list(lines)
    shown: list[str] = []
    for line in picked:
        if line is None:
            shown.append(f"{ELLIPSIS} {skipped} more lines {ELLIPSIS}")
            continue
        r = shorten(line, width, multiline=True)
        truncated |= r.truncated
        shown.append(r.text)
    _, hidden = _scan(text, True)
    return Safe("\n".join(shown), hidden, len(text), truncated)

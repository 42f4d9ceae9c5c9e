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
- :func:`shorten` never hides the end: head, ``…``, tail and the total length.

Backslashes are left alone: an agent that writes a literal ``\\x1b`` shows exactly those four
characters, which is what runs; only real control characters raise the warning.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

ELLIPSIS = "…"
SPACE_RUN = 12  # this many plain spaces in a row are shown as a marker (used to push text away)
HIDDEN_WARNING = "contains hidden characters"

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


@dataclass(frozen=True, slots=True)
class Safe:
    """Text safe to show anywhere, and what the rendering found in the original."""

    text: str
    hidden: bool = False  # bidi, invisible, blank-looking or control characters were escaped
    length: int = 0  # characters in the original
    truncated: bool = False

    def __str__(self) -> str:
        return self.text

    def labelled(self) -> str:
        """The text with the warning appended when the original hid something."""
        return f"{self.text} [⚠ {HIDDEN_WARNING}]" if self.hidden else self.text


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


def _tokens(text: str, multiline: bool) -> tuple[list[str], bool]:
    """The rendered text as a list of tokens, one per original character or space run.

    Tokens never split an escape, so truncation can cut between them safely.
    """
    out: list[str] = []
    hidden = False
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == " ":
            j = i
            while j < n and text[j] == " ":
                j += 1
            run = j - i
            if run >= SPACE_RUN:
                out.append(f"⟨{run} spaces⟩")
                hidden = True
            else:
                out.extend(" " * run)
            i = j
            continue
        if ch == "\n":
            out.append("\n" if multiline else "\\n")
        elif ch == "\t":
            out.append("\t" if multiline else "\\t")
        elif _classify(ch):
            out.append(escape_char(ch))
            hidden = True
        else:
            out.append(ch)
        i += 1
    return out, hidden


def render(text: object, *, multiline: bool = False) -> Safe:
    """The whole text, safe: newlines kept only when ``multiline`` (else shown as ``\\n``)."""
    s = text if isinstance(text, str) else str(text)
    tokens, hidden = _tokens(s, multiline)
    return Safe("".join(tokens), hidden, len(s))


def safe(text: object) -> str:
    """Shorthand for one-line output (CLI columns, tray items): the safe text only."""
    return render(text).text


def shorten(text: object, limit: int = 80, *, multiline: bool = False) -> Safe:
    """At most about ``limit`` characters: head, ``…``, tail and the total length.

    The tail is never dropped: a dangerous end (``…; curl x | sh``) stays visible, and the
    length says how much was left out. The result may exceed ``limit`` by the length note.
    """
    s = text if isinstance(text, str) else str(text)
    tokens, hidden = _tokens(s, multiline)
    total = sum(len(t) for t in tokens)
    if total <= limit:
        return Safe("".join(tokens), hidden, len(s))
    budget = max(limit - 1, 2)
    head_budget = budget - budget // 2
    tail_budget = budget // 2
    head: list[str] = []
    used = 0
    for t in tokens:
        if used + len(t) > head_budget and head:
            break
        head.append(t)
        used += len(t)
    tail: list[str] = []
    used = 0
    for t in reversed(tokens[len(head) :]):
        if used + len(t) > tail_budget and tail:
            break
        tail.append(t)
        used += len(t)
    tail.reverse()
    shown = "".join(head) + ELLIPSIS + "".join(tail) + f" ({len(s)} chars)"
    return Safe(shown, hidden, len(s), True)


def lines_preview(text: str, head: int = 6, tail: int = 4, width: int = 160) -> Safe:
    """A multi-line preview: first ``head`` and last ``tail`` lines, each line shortened.

    Used for file contents and edit strings: the middle is replaced by a line saying how many
    lines were left out, so the end of a huge write is always on screen.
    """
    r = render(text, multiline=True)
    lines = r.text.split("\n")
    shown = [shorten(line, width, multiline=True).text for line in lines] if lines else []
    truncated = any(len(x) > width for x in lines)
    if len(shown) > head + tail + 1:
        skipped = len(shown) - head - tail
        shown = [*shown[:head], f"{ELLIPSIS} {skipped} more lines {ELLIPSIS}", *shown[-tail:]]
        truncated = True
    return Safe("\n".join(shown), r.hidden, len(text), truncated)


def is_clean(text: str) -> bool:
    """True when ``text`` holds no character that :func:`render` would escape (tests, asserts)."""
    return not any(_classify(ch) for ch in text if ch not in "\n\t ")

"""The secrets the bridge knows (its tokens, the control secret), kept out of everything it shows.

Every UI, log line and audit record passes text through :func:`scrub` *before* any cap or cut:
redacting after a cut let a token cut by the audit's argument cap keep its first 20 characters.
A piece of a known secret counts too: any run of :data:`PIECE` or more characters taken from
one (an agent can send a token's head on purpose) becomes a marker. Shorter runs are left: they
are as likely to be chance as a piece, and too short to be worth anything.

Process-wide on purpose: the token store and the control server register what they create, and
the renderers (:mod:`server.present.textsafe`), the log formatter and the audit writer read it,
without being handed a bridge.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = [
    "MARKER",
    "absent_from_json",
    "forget_all",
    "known",
    "remember",
    "scrub",
    "scrub_value",
]

PIECE = 16  # characters of a known secret that count as a piece of it
MAX_SECRETS = 16  # the most recent ones (token rotations, restarts in one process)
MIN_SECRET = 2 * PIECE  # shorter strings are not registered (a test's "x" is no secret)
MARKER = "<secret>"
MAX_DEPTH = 64

_lock = threading.Lock()
_secrets: dict[str, str] = {}  # secret -> marker, oldest first
_grams: tuple[tuple[str, str], ...] = ()  # (piece, marker): every PIECE-long run of a secret
# Every PIECE-long run of a secret holds one of its BLOCK-long runs that start at a multiple of
# BLOCK: a text holding none of these holds no piece, found with a few fast substring searches
# instead of one search per piece (a 1 MB text: ~ms, not ~0.5 s of the event loop).
BLOCK = PIECE // 2
_blocks: tuple[str, ...] = ()
# The same blocks when none holds a character JSON may escape (``"``, ``\\``, controls,
# non-ASCII), so a block in a string is still a block in that string's JSON text; None when
# one does (then only a scrub of the values can tell). See :func:`absent_from_json`.
_json_blocks: tuple[str, ...] | None = ()


def remember(secret: str | None, marker: str = MARKER) -> None:
    """Register a secret the bridge holds; it is scrubbed from every shown or logged text."""
    global _grams, _blocks, _json_blocks
    if not secret or len(secret) < MIN_SECRET:
        return
    with _lock:
        _json_blocks = None  # until the new blocks are in place, no text is vouched for
        _secrets.pop(secret, None)
        _secrets[secret] = marker
        while len(_secrets) > MAX_SECRETS:
            del _secrets[next(iter(_secrets))]
        grams: dict[str, str] = {}
        for s, m in _secrets.items():
            for i in range(len(s) - PIECE + 1):
                grams.setdefault(s[i : i + PIECE], m)
        _grams = tuple(grams.items())
        _blocks = tuple(
            dict.fromkeys(
                s[k : k + BLOCK] for s in _secrets for k in range(0, len(s) - BLOCK + 1, BLOCK)
            )
        )
        escaped = any(c in '"\\' or c < " " or c > "\x7f" for b in _blocks for c in b)
        _json_blocks = None if escaped else _blocks


def forget_all() -> None:
    """Tests only: start from no known secret."""
    global _grams, _blocks, _json_blocks
    with _lock:
        _secrets.clear()
        _grams = ()
        _blocks = ()
        _json_blocks = ()


def known() -> tuple[str, ...]:
    with _lock:
        return tuple(_secrets)


def absent_from_json(text: str) -> bool:
    """True when ``text``, the JSON of a value, proves :func:`scrub_value` would leave every
    string in that value (keys included, at any depth it reaches) as it is; False when it
    cannot tell.

    Why: the audit writer checks a record's finished line with a few substring searches
    instead of rebuilding the record string by string (docs/design/performance.md). A string
    holding a piece of a secret holds one of its blocks (see ``BLOCK``), and a block without
    a character JSON escapes appears unchanged in the string's JSON text, however deeply the
    string is nested or re-encoded as a JSON string; so a text holding no block comes from a
    value holding no piece. A block that spans two strings in the text only sends the caller
    to the full scrub.
    """
    blocks = _json_blocks
    if blocks is None:
        return False
    return not any(map(text.__contains__, blocks))


def scrub(text: str) -> str:
    """``text`` with every known secret, and every piece of one, replaced by its marker."""
    grams = _grams
    if not grams or len(text) < PIECE:
        return text
    if not any(block in text for block in _blocks):
        return text  # no piece can be in it (see BLOCK)
    spans: list[tuple[int, int, str]] = []
    for gram, marker in grams:
        start = text.find(gram)
        while start >= 0:
            spans.append((start, start + PIECE, marker))
            start = text.find(gram, start + 1)
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    cur_start, cur_end, cur_marker = spans[0]
    for start, end, marker in spans[1:]:
        if start <= cur_end:  # overlapping runs of one secret: one marker
            cur_end = max(cur_end, end)
            continue
        out += [text[pos:cur_start], cur_marker]
        pos = cur_end
        cur_start, cur_end, cur_marker = start, end, marker
    out += [text[pos:cur_start], cur_marker, text[cur_end:]]
    return "".join(out)


def scrub_value(value: Any, depth: int = 0) -> Any:
    """:func:`scrub` on every string of a JSON-like value (keys included), before it is
    serialised and capped."""
    if not _grams:
        return value
    if isinstance(value, str):
        return scrub(value)
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {scrub_value(k, depth + 1): scrub_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub_value(v, depth + 1) for v in value]
    return value

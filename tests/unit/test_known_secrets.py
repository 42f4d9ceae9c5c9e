"""Known secrets are scrubbed before any cut: whole, in pieces, in every renderer and the audit."""

from __future__ import annotations

import json

import pytest

from omp_a2a_bridge.server.infra.audit import ARGS_CAP, cap_record
from omp_a2a_bridge.server.present import secrets
from omp_a2a_bridge.server.present.textsafe import lines_preview, render, shorten

TOKEN = "Zq7-known-secret-token-4f9a1c2e8b7d6a5f3e2d1c0b9a8f7e6d"
CONTROL = "control-secret-a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8"


@pytest.fixture(autouse=True)
def known():
    secrets.forget_all()
    secrets.remember(TOKEN, "<token>")
    secrets.remember(CONTROL)
    yield
    secrets.forget_all()


def _pieces(text: str) -> list[str]:
    """Every piece (>= PIECE chars) of a known secret still in ``text``."""
    out = []
    for s in (TOKEN, CONTROL):
        for i in range(len(s) - secrets.PIECE + 1):
            if s[i : i + secrets.PIECE] in text:
                out.append(s[i : i + secrets.PIECE])
    return out


def test_whole_secrets_and_pieces_become_markers():
    text = f"a {TOKEN} b {CONTROL[:20]} c {TOKEN[5:30]} d"
    out = secrets.scrub(text)
    assert _pieces(out) == []
    assert out.startswith("a <token> b <secret> c <token> d")
    assert secrets.scrub("plain text, nothing known") == "plain text, nothing known"
    assert secrets.scrub(TOKEN[: secrets.PIECE - 1]) == TOKEN[: secrets.PIECE - 1]  # too short


def test_absent_from_json_vouches_only_for_texts_without_a_block():
    assert secrets.absent_from_json(json.dumps({"path": "/r/a.txt"}))
    assert not secrets.absent_from_json(json.dumps({"p": f"x{TOKEN[7:23]}y"}))
    assert not secrets.absent_from_json(json.dumps(json.dumps([CONTROL[16:32]])))  # twice
    # A secret with a character JSON escapes: its blocks may not appear as such in the text,
    # so no text is vouched for.
    secrets.remember('quote"in-a-secret-' + "k" * 20)
    assert not secrets.absent_from_json(json.dumps({"path": "/r/a.txt"}))
    secrets.forget_all()
    assert secrets.absent_from_json(json.dumps({"path": TOKEN}))  # nothing known


def test_short_strings_are_never_registered():
    secrets.remember("x" * (secrets.MIN_SECRET - 1))
    assert "x" * (secrets.MIN_SECRET - 1) not in secrets.known()


def test_the_registry_keeps_only_the_most_recent():
    for i in range(secrets.MAX_SECRETS + 3):
        secrets.remember(f"rotated-token-{i:04d}-" + "q" * 40)
    assert len(secrets.known()) == secrets.MAX_SECRETS
    assert TOKEN not in secrets.known()


def test_scrub_value_reaches_keys_and_nested_values():
    value = {TOKEN: [{"x": f"pre {TOKEN[:24]}"}], "n": 3}
    assert _pieces(json.dumps(secrets.scrub_value(value))) == []


def test_the_audit_cap_cuts_after_redaction():
    """The issue's case: the 1 KiB argument cap cut a token and kept its first 20 characters."""
    pad = {f"k{i:02d}": "v" * 90 for i in range(10)}  # ~990 bytes of short (kept) strings
    leaked_unscrubbed = 0
    for lead in range(0, 60, 3):
        args = {**pad, "lead": "w" * lead, "zz": TOKEN}
        line = cap_record({"event": "call", "tool": "grep", "args": secrets.scrub_value(args)})
        assert _pieces(line) == [], lead
        assert len(json.loads(line)["args"]) <= ARGS_CAP + 1
        # Without scrubbing first, the same cap leaves a piece (the bug this guards against).
        unscrubbed = cap_record({"event": "call", "tool": "grep", "args": args})
        leaked_unscrubbed += bool(_pieces(unscrubbed))
    assert leaked_unscrubbed, "the fixture no longer puts the token across the cap"


@pytest.mark.parametrize("width", [10, 30, 60, 200])
def test_every_renderer_scrubs_before_shortening(width):
    text = "x" * width + TOKEN + "y" * width + "\n" + CONTROL
    for shown in (
        render(text).text,
        render(text, multiline=True).text,
        shorten(text, width).text,
        shorten(text, 20).text,
        lines_preview(text, width=width).text,
    ):
        assert _pieces(shown) == [], shown

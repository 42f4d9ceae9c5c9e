"""The diff an approval shows for ``write``/``edit`` (server/present/diffview.py): computed from
the same arguments the tool applies, bounded, agent text escaped, line endings visible."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.present.diffview import (
    DIFF_LINES_MAX,
    LINE_MAX,
    SHOWN_LINES_MAX,
    Before,
    BeforeState,
    EditProblem,
    apply_edit,
    change_view,
    diff_lines,
    diff_summary,
    diff_text_lines,
)


def text(before: str) -> Before:
    return Before(BeforeState.TEXT, before, len(before))


def ops(change: dict) -> list[str]:
    return [t if op == "@" else op + t for op, t in change["lines"]]


def test_an_edit_is_a_unified_diff_with_context():
    before = "".join(f"line {i}\n" for i in range(1, 21))
    args = {"path": "a.txt", "old_string": "line 10\n", "new_string": "line ten\n"}
    c = change_view("edit", args, text(before))
    assert c["kind"] == "diff" and c["added"] == 1 and c["removed"] == 1
    assert ops(c) == [
        "@@ -7,7 +7,7 @@",
        " line 7", " line 8", " line 9",
        "-line 10", "+line ten",
        " line 11", " line 12", " line 13",
    ]  # fmt: skip


def test_the_diff_is_what_the_tool_applies():
    """The tool and the diff share apply_edit: replace_all, and every refusal, the same."""
    assert apply_edit("a b a", "a", "c", True, "f") == ("c b c", 2)
    with pytest.raises(EditProblem, match="occurs 2 times"):
        apply_edit("a b a", "a", "c", False, "f")
    c = change_view("edit", {"path": "f", "old_string": "a", "new_string": "c"}, text("a\nb\na\n"))
    assert c["kind"] == "none" and "occurs 2 times" in c["why"]
    c = change_view(
        "edit",
        {"path": "f", "old_string": "a", "new_string": "c", "replace_all": True},
        text("a\nb\na\n"),
    )
    assert c["occurrences"] == 2 and c["added"] == 2 and c["removed"] == 2


def test_a_write_over_a_file_and_a_new_file():
    c = change_view("write", {"path": "f", "content": "x\ny\n"}, text("x\n"))
    assert c["kind"] == "diff" and ops(c)[-1] == "+y"
    new = change_view("write", {"path": "f", "content": "x\ny\n"}, Before(BeforeState.MISSING))
    assert new == {"kind": "new", "lines": 2}
    assert diff_summary(new) == "new file, 2 lines"
    same = change_view("write", {"path": "f", "content": "x\n"}, text("x\n"))
    assert same == {"kind": "same"}


@pytest.mark.parametrize(
    "state", [BeforeState.BINARY, BeforeState.NOT_UTF8, BeforeState.TOO_BIG, BeforeState.UNREADABLE]
)
def test_no_diff_says_why(state):
    c = change_view(
        "edit", {"path": "f", "old_string": "a", "new_string": "b"}, Before(state, size=9)
    )
    assert c["kind"] == "unknown" and c["why"]
    assert diff_text_lines(c)[0].startswith("no diff: ")


def test_hostile_text_is_escaped():
    evil = "ok\x1b]52;c;AAAA\x07 \u202eevil\n"
    c = change_view("write", {"path": "f", "content": evil}, text("ok\n"))
    shown = "\n".join(diff_text_lines(c))
    assert "\x1b" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "\\x1b" in shown and "\\u202e" in shown


def test_crlf_files_show_their_endings_once_and_changes_of_ending():
    before = "a\r\nb\r\nc\r\n"
    c = change_view(
        "edit", {"path": "f", "old_string": "b\r\n", "new_string": "B\r\n"}, text(before)
    )
    assert c["eol"] == "crlf"
    assert "-b" in ops(c) and "+B" in ops(c)  # no \r on every line
    assert not any("\\x0d" in line for line in ops(c))
    flip = change_view(
        "edit", {"path": "f", "old_string": "b\r\n", "new_string": "b\n"}, text(before)
    )
    assert "+b ⏎LF" in ops(flip)  # an ending that changes is visible
    assert diff_summary(c) == "+1 −1 lines, CRLF"


def test_no_trailing_newline_is_marked():
    c = change_view("edit", {"path": "f", "old_string": "b", "new_string": "B"}, text("a\nb"))
    assert ops(c)[-4:] == ["-b", "\\No newline at end of file", "+B", "\\No newline at end of file"]
    assert diff_text_lines(c)[-1] == "\\ No newline at end of file"


def test_the_output_is_bounded():
    before = "".join(f"{i}\n" for i in range(900))
    after = "".join(f"{i}!\n" for i in range(900))
    c = diff_lines(before, after)
    assert len(c["lines"]) == SHOWN_LINES_MAX + 1 and c["truncated"]
    assert c["added"] == 900 and c["removed"] == 900
    assert c["lines"][-1] == ["\\", f"… {900 * 2 + 1 - SHOWN_LINES_MAX} more diff lines"]
    long = diff_lines("a\n", "x" * 100_000 + "\n")
    assert all(len(t) <= LINE_MAX + 40 for _, t in long["lines"])


def test_a_huge_middle_is_not_matched_line_by_line():
    n = DIFF_LINES_MAX + 10
    c = diff_lines("".join(f"{i}\n" for i in range(n)), "".join(f"x{i}\n" for i in range(n)))
    assert c["removed"] == n and c["added"] == n
    assert any("more removed lines" in t for _, t in c["lines"])


def test_only_the_changed_region_is_compared():
    """Common head and tail are trimmed first: a one-line change in a long file is one hunk."""
    before = "".join(f"{i}\n" for i in range(100_000))
    after = before.replace("50000\n", "fifty thousand\n")
    c = diff_lines(before, after)
    assert [t for op, t in c["lines"] if op == "@"] == ["@@ -49998,7 +49998,7 @@"]


def test_other_tools_have_no_change():
    assert change_view("read", {"path": "f"}, text("x")) is None
    assert diff_text_lines(None) == [] and diff_summary(None) is None

"""server/tools/read.py + fileio.py: read's line, offset and cut logic on a tmp tree.

No bridge: the tool runs with a :class:`ToolContext` over a real :class:`PathPolicy`; the
streaming helpers run on in-memory buffered readers.
"""

from __future__ import annotations

import asyncio
import errno
import io
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.infra.config import Limits
from omp_a2a_bridge.server.policy.paths import PathPolicy
from omp_a2a_bridge.server.tools.base import ToolContext, ToolError
from omp_a2a_bridge.server.tools.fileio import glob_regex, image_type, io_error, is_binary
from omp_a2a_bridge.server.tools.read import (
    STOP,
    ReadTool,
    _bounded_lines,
    _line_start_from_end,
    _skip_lines,
    _take_plain,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    return root


def ctx(root, **limits: Any) -> ToolContext:
    policy = PathPolicy([str(root)], scan_identities=False)
    return ToolContext("c1", "s1", "pytest", policy, replace(Limits(), **limits))


def read(root, path: str, streamed: bool = False, **kw: Any) -> str:
    """The text of a read: on the loop (small files) or streamed in a worker (large ones)."""
    args = {"path": path, **{k: v for k, v in kw.items() if k in ("offset", "limit")}}
    limits = {k: v for k, v in kw.items() if k not in ("offset", "limit")}
    tool = ReadTool()
    if streamed:
        # inline 0: every non-empty file is streamed in constant memory, in a worker thread
        result = asyncio.run(tool.run(args, ctx(root, inline_read_max_bytes=0, **limits)))
    else:
        result = tool.run_now(args, ctx(root, **limits))
        assert result is not None
    return result.content[0]["text"]


@pytest.mark.parametrize("streamed", [False, True])
def test_numbered_lines_offset_limit_and_the_next_offset(tree, streamed):
    (tree / "f.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    text = read(tree, "f.txt", streamed)
    assert text.splitlines()[0] == "    1\tline 1" and text.endswith("   10\tline 10")
    text = read(tree, "f.txt", streamed, offset=4, limit=3)
    lines = ["    4\tline 4", "    5\tline 5", "    6\tline 6"]
    assert text == "\n".join([*lines, "… more lines follow; continue with offset=7"])
    assert read(tree, "f.txt", streamed, offset=10) == "   10\tline 10"
    with pytest.raises(ToolError, match=r"f\.txt: has 10 lines; offset 11 is past the end"):
        read(tree, "f.txt", streamed, offset=11)


@pytest.mark.parametrize("streamed", [False, True])
def test_crlf_no_final_newline_and_empty_files(tree, streamed):
    (tree / "crlf.txt").write_bytes(b"a\r\nb")
    assert read(tree, "crlf.txt", streamed) == "    1\ta\n    2\tb"
    (tree / "empty.txt").write_bytes(b"")
    assert read(tree, "empty.txt", streamed) == "empty.txt: (empty file)"


@pytest.mark.parametrize("streamed", [False, True])
def test_long_lines_are_cut_and_say_so(tree, streamed):
    (tree / "long.txt").write_text("x" * 50 + "\nshort\n")
    text = read(tree, "long.txt", streamed, read_line_max_chars=10)
    first, second = text.split("\n")
    assert first.startswith("    1\txxxxxxxxxx… [line cut: ")
    assert second == "    2\tshort"


@pytest.mark.parametrize("streamed", [False, True])
def test_the_byte_cap_stops_with_a_continuation(tree, streamed):
    (tree / "f.txt").write_text("".join(f"{i:04d}\n" for i in range(100)))
    text = read(tree, "f.txt", streamed, read_max_bytes=30)
    assert text.endswith("… more lines follow; continue with offset=4")
    assert text.count("\t") == 3


@pytest.mark.parametrize("streamed", [False, True])
def test_binary_is_refused_and_images_come_back_as_images(tree, streamed):
    (tree / "bin").write_bytes(b"abc\x00def")
    with pytest.raises(ToolError, match="bin: binary file \\(7 bytes\\)"):
        read(tree, "bin", streamed)
    (tree / "i.png").write_bytes(PNG)
    c = ctx(tree, inline_read_max_bytes=0 if streamed else 64 * 1024)
    tool = ReadTool()
    result = tool.run_now({"path": "i.png"}, c) or asyncio.run(tool.run({"path": "i.png"}, c))
    assert result.content[0]["type"] == "image" and result.content[0]["mimeType"] == "image/png"
    with pytest.raises(ToolError, match="over the 8-byte limit"):
        read(tree, "i.png", streamed, image_max_bytes=8)


def test_missing_files_and_directories_say_what_is_wrong(tree):
    (tree / "d").mkdir()
    with pytest.raises(ToolError, match=r"^nope\.txt: not found$"):
        ReadTool().run_now({"path": "nope.txt"}, ctx(tree))
    with pytest.raises(ToolError, match="d: is a directory"):
        read(tree, "d", streamed=True)


# -- negative offsets: counted from the end -------------------------------------------------

TEN = "".join(f"line {i}\n" for i in range(1, 11))


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("final_newline", [True, False])
def test_a_negative_offset_reads_the_last_lines_numbered_from_the_end(
    tree, streamed, final_newline
):
    (tree / "f.txt").write_text(TEN if final_newline else TEN[:-1])
    assert read(tree, "f.txt", streamed, offset=-3) == (
        "   -3\tline 8\n   -2\tline 9\n   -1\tline 10"
    )
    assert read(tree, "f.txt", streamed, offset=-1) == "   -1\tline 10"
    text = read(tree, "f.txt", streamed, offset=-5, limit=2)
    assert text == "   -5\tline 6\n   -4\tline 7\n… more lines follow; continue with offset=-3"


@pytest.mark.parametrize("streamed", [False, True])
def test_a_file_with_no_more_lines_than_asked_is_read_from_line_1(tree, streamed):
    (tree / "f.txt").write_text(TEN)
    whole = read(tree, "f.txt", streamed)
    assert read(tree, "f.txt", streamed, offset=-10) == whole  # exactly as many lines
    assert read(tree, "f.txt", streamed, offset=-500) == whole
    assert read(tree, "f.txt", streamed, offset=-50, limit=2) == (
        "    1\tline 1\n    2\tline 2\n… more lines follow; continue with offset=3"
    )
    (tree / "one.txt").write_text("\n")  # one empty line
    assert read(tree, "one.txt", streamed, offset=-1) == "    1\t"


@pytest.mark.parametrize("streamed", [False, True])
def test_tail_of_crlf_and_empty_files(tree, streamed):
    (tree / "crlf.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    assert read(tree, "crlf.txt", streamed, offset=-2) == "   -2\tb\n   -1\tc"
    (tree / "crlf2.txt").write_bytes(b"a\r\nb\r\nc")
    assert read(tree, "crlf2.txt", streamed, offset=-2) == "   -2\tb\n   -1\tc"
    (tree / "empty.txt").write_bytes(b"")
    assert read(tree, "empty.txt", streamed, offset=-5) == "empty.txt: (empty file)"


@pytest.mark.parametrize("streamed", [False, True])
def test_offset_zero_names_no_line(tree, streamed):
    (tree / "f.txt").write_text(TEN)
    with pytest.raises(ToolError, match="field 'offset': 0 is not a line number"):
        read(tree, "f.txt", streamed, offset=0)


@pytest.mark.parametrize("streamed", [False, True])
def test_a_last_line_longer_than_the_block_is_cut_like_any_other(tree, streamed):
    from omp_a2a_bridge.server.tools.read import BLOCK

    long = "é" * (BLOCK + 1000)  # over a block in bytes, and in characters
    (tree / "f.txt").write_text("first\nshort\n" + long + "\n")
    inline = {} if streamed else {"inline_read_max_bytes": 1 << 20}  # else on the loop
    text = read(tree, "f.txt", streamed, offset=-2, read_line_max_chars=10, **inline)
    first, second = text.split("\n")
    assert first == "   -2\tshort"
    assert second.startswith("   -1\téééééééééé… [line cut: ")
    text = read(tree, "f.txt", streamed, offset=-1, **inline)
    assert text.startswith("   -1\téé") and "[line cut: " in text


def test_a_tail_within_the_last_block_is_read_on_the_loop_and_a_deeper_one_in_a_thread(tree):
    """Like a small file, the tail of a large one is read on the loop when the lines asked for
    lie within ``inline_read_max_bytes`` (or the one block read) of the end; further back,
    or an image, it moves to a worker (run_now answers None), with the same answer."""
    (tree / "big.log").write_text("".join(f"entry {i:06d}\n" for i in range(20000)))  # 260 KB
    tool, c = ReadTool(), ctx(tree, inline_read_max_bytes=4096)
    near = tool.run_now({"path": "big.log", "offset": -3}, c)
    assert near is not None
    assert (
        near.content[0]["text"] == "   -3\tentry 019997\n   -2\tentry 019998\n   -1\tentry 019999"
    )
    args = {"path": "big.log", "offset": -6000, "limit": 1}  # 78 KB back: past a block
    assert tool.run_now(args, c) is None
    far = asyncio.run(tool.run(args, c)).content[0]["text"]
    assert far == "-6000\tentry 014000\n… more lines follow; continue with offset=-5999"
    assert (
        tool.run_now({"path": "big.log", "offset": -3}, ctx(tree, inline_read_max_bytes=0)) is None
    )
    (tree / "big.png").write_bytes(PNG + b"\n" * 10000)
    assert tool.run_now({"path": "big.png", "offset": -1}, c) is None


def test_the_unread_rest_of_the_last_line_says_nothing_follows(tree, monkeypatch):
    from omp_a2a_bridge.server.tools import read as files

    monkeypatch.setattr(files, "SKIP_BUDGET", 32)
    (tree / "f.txt").write_text("a\n" + "z" * 5000)
    text = read(tree, "f.txt", True, offset=-1, read_line_max_chars=10)
    assert text == (
        "   -1\tzzzzzzzzzz… [line cut: over 42 characters]\n"
        "… the rest of line -1 (the last line) was not read"
    )


def test_multibyte_characters_split_across_blocks_come_back_whole(tree, monkeypatch):
    """Tiny blocks put block boundaries inside 2-, 3- and 4-byte characters: the backwards
    scan only looks for newlines, and each line is decoded whole."""
    from omp_a2a_bridge.server.tools import read as files

    monkeypatch.setattr(files, "BLOCK", 5)
    lines = [f"{i} é€𝄞 ü" * (i % 3 + 1) for i in range(40)]
    (tree / "u.txt").write_text("\n".join(lines) + "\n")
    text = read(tree, "u.txt", True, offset=-7)
    assert text.splitlines() == [f"{n - 40:5d}\t{lines[n]}" for n in range(33, 40)]
    assert "\ufffd" not in text


def buffered(data: bytes) -> io.BufferedReader:
    return io.BufferedReader(io.BytesIO(data), buffer_size=16)


@pytest.mark.parametrize(
    ("data", "n", "passed", "rest"),
    [
        (b"a\nb\nc\n", 2, 2, b"c\n"),
        (b"a\nb\nc", 5, 3, b""),  # a last line without a newline counts
        (b"a\nb\n", 5, 2, b""),
        (b"", 3, 0, b""),
        (b"a\n" * 1000, 999, 999, b"a\n"),
    ],
)
def test_skip_lines(data, n, passed, rest):
    f = buffered(data)
    assert _skip_lines(f, n) == passed
    assert f.read() == rest


@pytest.mark.parametrize(
    ("data", "k", "start", "whole"),
    [
        (b"a\nb\nc\n", 1, 4, False),
        (b"a\nb\nc\n", 2, 2, False),
        (b"a\nb\nc\n", 3, 0, True),  # exactly as many lines: from the start
        (b"a\nb\nc", 1, 4, False),  # no final newline
        (b"a\nb\nc", 9, 0, True),
        (b"", 1, 0, True),
        (b"\n", 1, 0, True),
        (b"\n\n", 1, 1, False),  # two empty lines: the last starts at 1
        (b"x" * 100 + b"\n" + b"y" * 100, 1, 101, False),  # lines longer than the block
        (b"a\n" * 50, 20, 60, False),
    ],
)
def test_line_start_from_end(data, k, start, whole, monkeypatch):
    from omp_a2a_bridge.server.tools import read as files

    monkeypatch.setattr(files, "BLOCK", 8)  # many blocks, boundaries everywhere
    assert _line_start_from_end(buffered(data), k) == (start, whole)


def test_bounded_lines_cuts_a_line_over_budget_and_skips_its_rest():
    f = buffered(b"short\n" + b"y" * 100 + b"\nnext\n")
    got = list(_bounded_lines(f, 1, 10))
    assert got[0] == (1, "short\n")
    number, cut = got[1]
    assert number == 2 and cut.text == "y" * 10 and cut.text_len == 10
    assert got[2] == (3, "next\n") and len(got) == 3


def test_bounded_lines_stops_when_the_rest_of_a_line_is_too_far(monkeypatch):
    from omp_a2a_bridge.server.tools import read as files

    monkeypatch.setattr(files, "SKIP_BUDGET", 32)
    got = list(_bounded_lines(buffered(b"z" * 1000 + b"\nlater\n"), 7, 10))
    assert got[0][0] == 7 and got[1] == (8, STOP) and len(got) == 2


@pytest.mark.parametrize(
    ("head", "mime"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0", "image/jpeg"),
        (b"GIF89a..", "image/gif"),
        (b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp"),
        (b"RIFF\x00\x00\x00\x00WAVE", None),
        (b"plain", None),
    ],
)
def test_image_type(head, mime):
    assert image_type(head) == mime


def test_is_binary_and_io_error_texts():
    assert is_binary(b"a\x00") and not is_binary("é".encode())
    assert str(io_error(OSError(errno.EACCES, "x"), "a.txt")) == "a.txt: permission denied"
    assert str(io_error(OSError(errno.EIO, "Input/output error"), "b")) == "b: input/output error"


@pytest.mark.parametrize(
    ("pattern", "path", "hit"),
    [
        ("*.py", "a.py", True),
        ("*.py", "deep/er/a.py", True),  # no slash: any depth
        ("*.py", "a.pyc", False),
        ("src/*.py", "src/a.py", True),
        ("src/*.py", "src/x/a.py", False),
        ("src/**/*.py", "src/x/y/a.py", True),
        ("src/**/*.py", "src/a.py", True),
        ("?.txt", "a.txt", True),
        ("?.txt", "ab.txt", False),
        ("[!a]*.md", "b.md", True),
        ("[!a]*.md", "a.md", False),
        ("[abc.txt", "[abc.txt", True),  # an unclosed bracket is literal
        # What an agent may send in a class: each a clear match or not, never an error.
        ("[]x]", "]", True),  # a ] first is a member
        ("[]x]", "x", True),
        ("[!]x]", "y", True),
        ("[!]x]", "]", False),
        ("[z-a]", "z", False),  # a reversed range matches nothing
        ("[z-a]x", "x", False),
        ("[^]x]", "^]x", False),  # ^ is a member, then a literal "x]"
        ("[^]x]", "^x]", True),
        ("[[:alpha:]]", "[]", True),  # no POSIX classes: members [ : a l p h, then a literal ]
        ("[a&&b]", "&", True),  # regex set operators are plain members
        ("[\\]", "\\", True),
        ("a[!x]b", "a/b", False),  # a class never matches the separator
        ("[]", "[]", True),  # no members: literal
    ],
)
def test_glob_regex(pattern, path, hit):
    assert (glob_regex(pattern).match(path) is not None) is hit


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from(["", "a", "abc\r", "x" * 9, "é\r\r", "long line " * 2]), max_size=12),
    st.integers(1, 14),
    st.integers(1, 14),
    st.integers(1, 12),
    st.integers(1, 120),
)
def test_the_plain_take_is_the_loop_take_whenever_it_answers(lines, offset, limit, chars, cap):
    """The small file's fast path (docs/design/performance.md): the same lines, numbers and
    continuation as the loop that checks every cap on every line."""
    limits = replace(Limits(), read_line_max_chars=chars, read_max_bytes=cap)
    returns = any("\r" in line for line in lines)
    plain = _take_plain(lines, offset, limit, limits, returns)
    if plain is not None:
        loop = ReadTool._take(enumerate(lines, 1), offset, limit, limits)  # noqa: SLF001
        assert plain == loop
    if lines[offset - 1 : offset - 1 + limit] and chars >= 20 and cap >= 120 * 12:
        assert plain is not None  # no cap in reach: the fast path answers

"""server/upstream/stdio.py: the stdout line splitter (linear, capped)."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.upstream.stdio import LineSplitter, LineTooLong


def test_lines_split_across_and_within_chunks():
    s = LineSplitter(100)
    assert s.feed(b'{"a":') == []
    assert s.feed(b'1}\n{"b":2}\n{"c"') == [b'{"a":1}', b'{"b":2}']
    assert s.feed(b":3}\n") == [b'{"c":3}']
    assert s.feed(b"\n\n") == [b"", b""]


@pytest.mark.parametrize(
    "chunks", [[b"x" * 101], [b"x" * 60, b"x" * 41], [b"x" * 60, b"x" * 41 + b"\n"]]
)
def test_a_line_over_the_limit_raises_before_its_newline_or_at_it(chunks):
    s = LineSplitter(100)
    with pytest.raises(LineTooLong):
        for c in chunks:
            s.feed(c)


def test_a_line_at_the_limit_passes():
    s = LineSplitter(100)
    assert s.feed(b"x" * 60) == []
    assert s.feed(b"x" * 40 + b"\nrest") == [b"x" * 100]


def test_a_32_mib_message_in_64_kib_chunks_is_one_join():
    """Linear: the old append-and-resplit spent seconds here (not timed; counts the work)."""
    s = LineSplitter(32 << 20)
    chunk = b"x" * 65536
    for _ in range(480):
        assert s.feed(chunk) == []
    [line] = s.feed(b"\n")
    assert len(line) == 480 * 65536

"""server/infra/auditread.py: reading the log's lines backwards in blocks (pure, in memory;
the files, rotation and pairing are tested in tests/integration/test_sessions_and_audit.py)."""

from __future__ import annotations

import io

import pytest

from omp_a2a_bridge.server.infra.auditread import _lines_backwards


@pytest.mark.parametrize("block", [1, 3, 7, 64 * 1024])
@pytest.mark.parametrize(
    ("data", "lines"),
    [
        (b"a\nbb\nccc\n", [b"ccc", b"bb", b"a"]),
        (b"a\nbb\nccc", [b"ccc", b"bb", b"a"]),  # an unfinished last line comes out too
        (b"\n\na\n\n", [b"a"]),  # empty lines are skipped
        (b"", []),
        (b"x" * 50 + b"\n" + b"y" * 20 + b"\n", [b"y" * 20, b"x" * 50]),  # lines over a block
        ("é€\n𝄞\n".encode(), ["𝄞".encode(), "é€".encode()]),  # blocks split characters
    ],
)
def test_lines_backwards_returns_every_line_last_first(data, lines, block):
    assert list(_lines_backwards(io.BytesIO(data), len(data), block)) == lines


def test_lines_backwards_stops_at_the_given_end():
    data = b"one\ntwo\nthree\n"
    assert list(_lines_backwards(io.BytesIO(data), 8, 2)) == [b"two", b"one"]

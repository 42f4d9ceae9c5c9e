"""The fast paths of ``find``'s parser decide exactly as the glob regex they stand in for."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.tools.fileio import glob_regex
from omp_a2a_bridge.server.tools.searchout import name_filter

# Few characters, so that names collide with patterns often; '\udc80' is an undecodable byte.
CHARS = st.sampled_from(list("ab.py_-/ *?é\n\udc80"))
PATHS = st.lists(st.text(CHARS, min_size=1, max_size=12), max_size=30)


@settings(max_examples=400, deadline=None)
@given(st.text(CHARS, min_size=1, max_size=6), PATHS)
def test_name_filter_equals_glob_regex(pattern, paths):
    match = glob_regex(pattern).match
    assert name_filter(pattern)(paths) == [p for p in paths if match(p)]


@settings(max_examples=200, deadline=None)
@given(st.text(st.sampled_from(list("ab.py_-é\udc80")), max_size=5), PATHS)
def test_suffix_and_plain_name_shapes(tail, paths):
    for pattern in ("*" + tail, tail or "x"):
        match = glob_regex(pattern).match
        assert name_filter(pattern)(paths) == [p for p in paths if match(p)], pattern

"""The schema fast path never accepts what jsonschema rejects (property-based)."""

from __future__ import annotations

import functools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from omp_a2a_bridge.server.tools.builtin import builtin_tools
from omp_a2a_bridge.server.tools.fastcheck import compile_check

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=5,
)


def arg_dicts(schema):
    keys = [*schema.get("properties", {}), "bogus"]
    return st.dictionaries(st.sampled_from(keys), json_values, max_size=5)


def test_every_builtin_schema_has_a_fast_path():
    for tool in builtin_tools():
        assert compile_check(tool.input_schema) is not None, tool.name


def test_unsupported_keywords_mean_no_fast_path():
    assert compile_check({"type": "object", "properties": {"x": {"type": "array"}}}) is None
    assert compile_check({"type": "object", "patternProperties": {}}) is None
    assert compile_check({"type": "string"}) is None
    assert compile_check({"type": "object", "additionalProperties": {"type": "string"}}) is None


@functools.cache
def _checks() -> list[tuple[str, Any, Any, Draft202012Validator]]:
    """Per built-in tool: name, the strategy for its arguments, its fast path and its validator
    (built once: the examples vary the arguments, not the schemas)."""
    out = []
    for tool in builtin_tools():
        schema = tool.input_schema
        out.append(
            (tool.name, arg_dicts(schema), compile_check(schema), Draft202012Validator(schema))
        )
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fast_path_agrees_with_jsonschema(data):
    for name, strategy, fast, validator in _checks():
        args = data.draw(strategy)
        valid = validator.is_valid(args)
        if fast(args):
            assert valid, (name, args)  # never accepts what jsonschema rejects
        elif valid:
            # Conservative misses are allowed only for jsonschema's lenient integers (1.0).
            assert any(type(v) is float for v in args.values()), (name, args)

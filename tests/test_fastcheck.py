"""The schema fast path never accepts what jsonschema rejects (property-based)."""

from __future__ import annotations

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


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fast_path_agrees_with_jsonschema(data):
    for tool in builtin_tools():
        schema = tool.input_schema
        fast = compile_check(schema)
        args = data.draw(arg_dicts(schema))
        valid = Draft202012Validator(schema).is_valid(args)
        if fast(args):
            assert valid, (tool.name, args)  # never accepts what jsonschema rejects
        elif valid:
            # Conservative misses are allowed only for jsonschema's lenient integers (1.0).
            assert any(type(v) is float for v in args.values()), (tool.name, args)

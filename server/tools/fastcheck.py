"""A compiled fast path for the simple object schemas tools use.

``compile_check(schema)`` returns a function that answers True only when the arguments are
certainly valid; False means "ask jsonschema", which also produces the error text. It handles
``type: object`` with ``properties`` of type string/integer/number/boolean (``minLength``,
``maxLength``, ``minimum``, ``maximum``, ``exclusiveMinimum``, ``exclusiveMaximum``,
``description``, ``title``), ``required`` and ``additionalProperties: false``; any other keyword
means no fast path (None). Validation of a valid call drops from ~16 µs to ~1 µs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_ANNOTATIONS = {"description", "title", "examples", "default", "$comment"}
_NUMERIC = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}


def _prop_check(spec: Any) -> Callable[[Any], bool] | None:
    if not isinstance(spec, dict):
        return None
    kind = spec.get("type")
    extra = set(spec) - _ANNOTATIONS - {"type"}
    if kind == "string":
        if extra - {"minLength", "maxLength"}:
            return None
        lo, hi = spec.get("minLength", 0), spec.get("maxLength")
        return lambda v: type(v) is str and len(v) >= lo and (hi is None or len(v) <= hi)
    if kind in ("integer", "number"):
        if extra - _NUMERIC:
            return None
        types: tuple[type, ...] = (int,) if kind == "integer" else (int, float)
        bounds = [(k, spec[k]) for k in _NUMERIC if k in spec]

        def check(v: Any) -> bool:
            if type(v) not in types:
                return False  # bools, floats-that-are-integers: let jsonschema decide
            for k, b in bounds:
                if (
                    (k == "minimum" and v < b)
                    or (k == "maximum" and v > b)
                    or (k == "exclusiveMinimum" and v <= b)
                    or (k == "exclusiveMaximum" and v >= b)
                ):
                    return False
            return True

        return check
    if kind == "boolean":
        return None if extra else (lambda v: type(v) is bool)
    return None


def compile_check(schema: dict[str, Any]) -> Callable[[dict[str, Any]], bool] | None:
    if schema.get("type") != "object":
        return None
    if set(schema) - _ANNOTATIONS - {"type", "properties", "required", "additionalProperties"}:
        return None
    if schema.get("additionalProperties", True) not in (False, True):
        return None
    closed = schema.get("additionalProperties") is False
    props = schema.get("properties", {})
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, spec in props.items():
        c = _prop_check(spec)
        if c is None:
            return None
        checks[name] = c
    required = tuple(schema.get("required", ()))

    def check(args: dict[str, Any]) -> bool:
        for r in required:
            if r not in args:
                return False
        for k, v in args.items():
            c = checks.get(k)
            if c is None:
                if closed:
                    return False
                continue
            if not c(v):
                return False
        return True

    return check

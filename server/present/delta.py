"""Snapshot diffs for the events socket: what changed between two JSON snapshots, and how a
client applies it (pure functions; ``assets/page.js`` carries the same ``apply`` in JS).

Why: with 64 sessions and 32 waiting calls a snapshot is ~30 KB, and under traffic only a
session's ``last_seen`` and ``calls_total`` change between two of them. A client that asks for
diffs (``/api/events?diff=1``) gets one full snapshot, then only what changed:

``{"version": 8, "base": 7, "diff": {"set": {...}, "unset": [...], "lists": {...}}}``

- ``set``: top-level keys whose value changed (the whole new value), ``unset``: keys gone;
- ``lists``: the keyed lists (``sessions`` by ``sid``, ``pending`` by ``id``, ``servers`` by
  ``name``) as ``{"key": field, "remove": [keys], "upsert": [items], "last": [keys]}``: remove
  those keys, put each upserted item in its place (a new one at the end), then move the
  ``last`` keys to the end in that order (the session table is most-recently-used first, so a
  call moves its session to the end; ``last`` names only what moved).

Only non-empty parts are present. A diff whose ``base`` is not the client's version means the
client missed one: it asks for a full snapshot instead (sending ``full`` on the socket).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KEYED: Mapping[str, str] = {"sessions": "sid", "pending": "id", "servers": "name"}
"""The snapshot's lists whose items have a unique key: diffed item by item."""

FULL_REQUEST = "full"
"""What a diff client sends on the socket to get the whole state again."""


def same(a: Any, b: Any) -> bool:
    """JSON equality: Python's ``==`` also calls ``1``, ``1.0`` and ``True`` equal, which
    would hide a change of type from a client."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(same, a, b))
    return bool(a == b)


def _keys(items: Any, field: str) -> list[str] | None:
    """The items' keys in order, or None when this is not a list of uniquely keyed objects
    (then the whole list is sent)."""
    if not isinstance(items, list):
        return None
    keys = []
    for item in items:
        key = item.get(field) if isinstance(item, dict) else None
        if not isinstance(key, str):
            return None
        keys.append(key)
    return keys if len(set(keys)) == len(keys) else None


def list_diff(old: Any, new: Any, field: str) -> dict[str, Any] | None:
    """What turns the list ``old`` into ``new`` (``{}``: nothing), or None when either is not
    a list of objects with unique string keys in ``field``."""
    old_keys, new_keys = _keys(old, field), _keys(new, field)
    if old_keys is None or new_keys is None:
        return None
    before = dict(zip(old_keys, old, strict=True))
    kept = set(new_keys)
    remove = [k for k in old_keys if k not in kept]
    upsert = [
        item
        for key, item in zip(new_keys, new, strict=True)
        if key not in before or not same(before[key], item)
    ]
    # The order apply() gives without "last": old order minus the removed, new ones appended.
    order = [k for k in old_keys if k in kept] + [k for k in new_keys if k not in before]
    at = {k: i for i, k in enumerate(order)}
    prefix = 1
    while prefix < len(new_keys) and at[new_keys[prefix]] > at[new_keys[prefix - 1]]:
        prefix += 1
    out: dict[str, Any] = {}
    if remove:
        out["remove"] = remove
    if upsert:
        out["upsert"] = upsert
    if prefix < len(new_keys):
        out["last"] = new_keys[prefix:]
    if out:
        out["key"] = field
    return out


def diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What turns the snapshot ``old`` into ``new`` (``{}``: nothing changed)."""
    changed: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    for key, value in new.items():
        if key in old:
            before = old[key]
            if before is value:
                continue
            field = KEYED.get(key)
            if field is not None:
                part = list_diff(before, value, field)
                if part is not None:
                    if part:
                        lists[key] = part
                    continue
            if same(before, value):
                continue
        changed[key] = value
    out: dict[str, Any] = {}
    if changed:
        out["set"] = changed
    unset = [key for key in old if key not in new]
    if unset:
        out["unset"] = unset
    if lists:
        out["lists"] = lists
    return out


def apply_list(old: list[Any], part: Mapping[str, Any]) -> list[Any]:
    field = part["key"]
    items = {item[field]: item for item in old}
    for key in part.get("remove", ()):
        items.pop(key, None)
    for item in part.get("upsert", ()):
        items[item[field]] = item  # in place when known, else at the end
    for key in part.get("last", ()):
        items[key] = items.pop(key)
    return list(items.values())


def patch(old: Mapping[str, Any], d: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` with the diff ``d`` applied (a new dict; ``old`` is not changed)."""
    new = dict(old)
    for key in d.get("unset", ()):
        new.pop(key, None)
    new.update(d.get("set", {}))
    for key, part in d.get("lists", {}).items():
        new[key] = apply_list(new.get(key, []), part)
    return new


def apply_event(
    state: Mapping[str, Any] | None, message: Mapping[str, Any]
) -> dict[str, Any] | None:
    """One events-socket message applied to the client's state: a full snapshot replaces it,
    a diff patches it. None: the diff does not follow the client's version (ask for
    :data:`FULL_REQUEST`)."""
    if "diff" not in message:
        return dict(message)
    if state is None or message.get("base") != state.get("version"):
        return None
    new = patch(state, message["diff"])
    new["version"] = message["version"]
    return new

"""The pure menu model as a DBusMenu layout: ids, properties, and what changed between two.

Ids are the contract with the desktop: the host shows the layout it read and later sends
``Event(id, "clicked")``. An id is therefore bound to *what the item does*, never to its
position: an item with an action keeps the id of that action (``("decide", "a3", "approve")``)
for as long as it is in the menu, and a freed id is never handed out again. A click on a menu
the human opened before a call was decided can only do what that human saw — approve *that*
call while it still waits, or nothing — and never lands on whatever moved into its place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .menu import Action, Item

ROOT = 0
Key = tuple[Any, ...]
Props = dict[str, Any]  # plain Python values; the D-Bus side wraps them in Variants


@dataclass(frozen=True, slots=True)
class Node:
    id: int
    props: Props
    children: tuple[int, ...] = ()
    action: Action | None = None
    enabled: bool = True


@dataclass
class Layout:
    nodes: dict[int, Node] = field(default_factory=dict)
    default: Action | None = None  # what a plain click on the icon does

    def shape(self) -> dict[int, tuple[int, ...]]:
        return {i: n.children for i, n in self.nodes.items()}


class IdTable:
    """Stable ids keyed by meaning; ids of keys that left the menu are retired for good."""

    def __init__(self) -> None:
        self._ids: dict[Key, int] = {}
        self._next = ROOT + 1

    def get(self, key: Key) -> int:
        found = self._ids.get(key)
        if found is None:
            found = self._ids[key] = self._next
            self._next += 1
        return found

    def keep_only(self, keys: set[Key]) -> None:
        self._ids = {k: v for k, v in self._ids.items() if k in keys}


def escape_label(text: str) -> str:
    """DBusMenu labels use ``_`` for mnemonics; a literal underscore is written ``__``."""
    return text.replace("_", "__")


def _props(it: Item) -> Props:
    if it.separator:
        return {"type": "separator"}
    props: Props = {"label": escape_label(it.text), "enabled": it.enabled}
    if it.checked is not None:
        props["toggle-type"] = "checkmark"
        props["toggle-state"] = 1 if it.checked else 0
    if it.submenu is not None:
        props["children-display"] = "submenu"
    return props


def build(model: Sequence[Item], ids: IdTable) -> Layout:
    """The layout for one menu model, with ids from ``ids`` (which it updates)."""
    layout = Layout()
    used: set[Key] = set()

    def walk(items: Sequence[Item], parent: Key) -> tuple[int, ...]:
        seen: dict[Key, int] = {}
        out: list[int] = []
        for it in items:
            if it.action is not None and not it.separator:
                key: Key = ("act", *it.action)
            else:
                # No action: named by its parent and its text with the counters blanked
                # ("Sessions (#)"), numbered when the same text repeats.
                base = (parent, re.sub(r"\d+", "#", it.text))
                n = seen.get(base, 0)
                seen[base] = n + 1
                key = ("text", *base, n)
            if key in used:  # the same action twice in one menu: keep both, distinct ids
                key = (*key, len(used))
            used.add(key)
            node_id = ids.get(key)
            children = walk(it.submenu, key) if it.submenu is not None else ()
            layout.nodes[node_id] = Node(
                node_id, _props(it), children, None if it.separator else it.action, it.enabled
            )
            if it.default and it.action is not None and layout.default is None:
                layout.default = it.action
            out.append(node_id)
        return tuple(out)

    top = walk(model, ("root",))
    layout.nodes[ROOT] = Node(ROOT, {"children-display": "submenu"}, top)
    ids.keep_only(used)
    return layout


@dataclass(frozen=True, slots=True)
class Change:
    """How to tell the host about a new layout: a new revision, or just changed properties."""

    relayout: bool
    updated: tuple[tuple[int, Props], ...] = ()
    removed: tuple[tuple[int, tuple[str, ...]], ...] = ()

    @property
    def empty(self) -> bool:
        return not self.relayout and not self.updated and not self.removed


def diff(old: Layout | None, new: Layout) -> Change:
    """Same tree of ids: only ``ItemsPropertiesUpdated``; otherwise ``LayoutUpdated``."""
    if old is None or old.shape() != new.shape():
        return Change(relayout=True)
    updated: list[tuple[int, Props]] = []
    removed: list[tuple[int, tuple[str, ...]]] = []
    for node_id, node in new.nodes.items():
        before = old.nodes[node_id].props
        changed = {k: v for k, v in node.props.items() if before.get(k) != v}
        gone = tuple(k for k in before if k not in node.props)
        if changed:
            updated.append((node_id, changed))
        if gone:
            removed.append((node_id, gone))
    return Change(False, tuple(updated), tuple(removed))

"""Turn the menu model into pystray objects (the only module that builds pystray menus)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from .menu import Action, Item


def _callback(perform: Callable[[Action], None], action: Action) -> Callable[[Any, Any], None]:
    return lambda icon, item: perform(action)


def _fixed(value: bool) -> Callable[[Any], bool]:
    return lambda item: value


def to_pystray(
    pystray: ModuleType, items: Sequence[Item], perform: Callable[[Action], None]
) -> list[Any]:
    out: list[Any] = []
    for it in items:
        if it.separator:
            out.append(pystray.Menu.SEPARATOR)
            continue
        if it.submenu is not None:
            action: Any = pystray.Menu(*to_pystray(pystray, it.submenu, perform))
        elif it.action is not None:
            action = _callback(perform, it.action)
        else:
            action = None
        out.append(
            pystray.MenuItem(
                it.text,
                action,
                checked=_fixed(it.checked) if it.checked is not None else None,
                enabled=it.enabled,
                default=it.default,
            )
        )
    return out

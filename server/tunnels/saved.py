"""Tunnels in the config file: add or replace one entry of ``tunnels``, remove one.

The config is re-read and validated before it is written (:func:`~server.infra.config.edit_config`),
so a hand edit made since the start survives and a bad entry is never saved. Blocks on the
file: the bridge runs it in a worker, the CLI on its own thread.
"""

from __future__ import annotations

from typing import Any

from ..infra.config import Config, edit_config
from .plan import TunnelSpec


def save_tunnel(config_path: str, spec: TunnelSpec) -> Config:
    """Add ``spec`` to the saved tunnels, replacing the one of the same name."""

    def edit(raw: dict[str, Any]) -> None:
        kept = [
            t for t in _entries(raw) if not (isinstance(t, dict) and t.get("name") == spec.name)
        ]
        raw["tunnels"] = [*kept, spec.to_json()]

    return edit_config(config_path, edit)


def forget_tunnel(config_path: str, name: str) -> bool:
    """Remove the saved tunnel ``name``; False when there was none."""
    found = [False]

    def edit(raw: dict[str, Any]) -> None:
        entries = _entries(raw)
        kept = [t for t in entries if not (isinstance(t, dict) and t.get("name") == name)]
        found[0] = len(kept) != len(entries)
        if kept:
            raw["tunnels"] = kept
        else:
            raw.pop("tunnels", None)

    edit_config(config_path, edit)
    return found[0]


def _entries(raw: dict[str, Any]) -> list[Any]:
    entries = raw.get("tunnels", [])
    return list(entries) if isinstance(entries, list) else []

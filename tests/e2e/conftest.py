"""The e2e layer: real processes of ours (serve, tray, CLI), desktops, browsers, D-Bus.

Every test collected under this folder carries the ``e2e`` marker:
``pytest -m e2e``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Hooks in a conftest see every collected item, not only this folder's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)

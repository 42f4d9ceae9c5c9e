"""The security layer: attacker suites, one file per surface attacked.

Every test collected under this folder carries the ``security`` marker:
``pytest -m security``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ..support.control_client import Api

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Hooks in a conftest see every collected item, not only this folder's.
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.security)


@pytest.fixture
def ctl(start_bridge):
    """A bridge with the control API: bash boxed, writes asked (the self-approval attacks)."""
    tiers = {"bash": "box", "write": "prompt"}
    running = start_bridge({"approval": {"tiers": tiers, "timeout_s": 60}}, control=True)
    running.info = running.runner.control
    running.api = Api(running.info)
    return running

"""server/infra/locations.py: where the config, the audit log and the bridge's own log live.

Every other test points these at a temporary folder through the environment; this one checks
the defaults a real user gets: the platform's config and log folders (issue 27: "a log file
under the platform's log dir", next to the audit log)."""

from __future__ import annotations

import os

import platformdirs
import pytest

from omp_a2a_bridge.server import APP_NAME
from omp_a2a_bridge.server.infra import locations


@pytest.fixture
def defaults(monkeypatch):
    for var in ("A2A_BRIDGE_CONFIG", "A2A_BRIDGE_AUDIT", "A2A_BRIDGE_LOG"):
        monkeypatch.delenv(var, raising=False)


def test_without_overrides_the_logs_go_to_the_platforms_log_folder(defaults):
    logs = platformdirs.user_log_dir(APP_NAME, appauthor=False)
    assert locations.log_path() == os.path.join(logs, "bridge.log")
    assert locations.audit_path() == os.path.join(logs, "audit.jsonl")
    config = platformdirs.user_config_dir(APP_NAME, appauthor=False)
    assert locations.config_path() == os.path.join(config, "config.json")


def test_the_environment_moves_each_file(defaults, monkeypatch, tmp_path):
    for var, fn in (
        ("A2A_BRIDGE_CONFIG", locations.config_path),
        ("A2A_BRIDGE_AUDIT", locations.audit_path),
        ("A2A_BRIDGE_LOG", locations.log_path),
    ):
        monkeypatch.setenv(var, str(tmp_path / var))
        assert fn() == str(tmp_path / var)

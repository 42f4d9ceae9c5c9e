"""server/infra/childenv.py: the environment the bridge and its children run with (pure parts)."""

from __future__ import annotations

import os

from omp_a2a_bridge.server.infra.childenv import absolute_path, keep_absolute_path


def test_path_keeps_only_absolute_entries():
    value = ":/usr/bin::.:bin:/bin:node_modules/.bin:/opt/x/"
    assert absolute_path(value) == "/usr/bin:/bin:/opt/x/"
    assert absolute_path("/usr/bin:/bin") == "/usr/bin:/bin"
    assert absolute_path("") == ""


def test_the_bridges_own_path_loses_its_relative_entries(monkeypatch):
    monkeypatch.setenv("PATH", ".:/usr/bin::bin")
    keep_absolute_path()
    assert os.environ["PATH"] == "/usr/bin"

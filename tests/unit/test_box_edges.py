"""server/box/edges.py: the plans of the other boxes (rg walks, stdio servers), without bwrap.

``gather`` looks at a made-up home on the disk; nothing is started.
"""

from __future__ import annotations

import os
import sys

import pytest

from omp_a2a_bridge.server.box import edges
from omp_a2a_bridge.server.box.bwrap import BwrapHost
from omp_a2a_bridge.server.box.policy import BoxConfig
from omp_a2a_bridge.server.box.run import BoxRequest

FAKE_HOST = BwrapHost("/usr/bin/bwrap", "/nonexistent/empty")  # render() only reads it
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths")


@pytest.fixture
def home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("k")
    (home / "proj" / "sub").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    edges.forget_plans()
    return home


def _request(home) -> BoxRequest:
    return BoxRequest(BoxConfig(), (str(home),), ())


def test_a_walk_plan_writes_nothing_has_no_network_and_masks_the_home(home):
    plan = edges.walk_plan(_request(home), str(home / "proj"))
    assert plan.write == () and plan.write_protected == () and plan.network is False
    assert str(home / ".ssh") in plan.read_private
    assert plan.cwd == str(home / "proj")
    assert edges.walk_plan(_request(home), str(home / "proj")) is plan  # cached


def test_a_walk_base_that_became_a_symlink_is_refused_not_planned_for_its_target(home):
    (home / "proj" / "sub").rmdir()
    os.symlink(home / ".ssh", home / "proj" / "sub")
    with pytest.raises(edges.BaseMoved):
        edges.walk_plan(_request(home), str(home / "proj" / "sub"))


def test_a_server_writes_its_cwd_inside_a_root_else_nothing(home, monkeypatch):
    monkeypatch.setattr(edges.probe, "host", lambda: FAKE_HOST)
    argv = [sys.executable, "-c", "1"]
    plan = edges.server_box(_request(home), str(home / "proj"), argv).plan
    assert plan.write == (str(home / "proj"),) and plan.network is True
    plan = edges.server_box(_request(home), str(home / "proj" / "sub"), argv, False).plan
    assert plan.write == (str(home / "proj" / "sub"),) and plan.network is False
    assert edges.server_box(_request(home), str(home), argv).plan.write == ()


def test_a_program_under_a_private_folder_is_reopened_with_its_install_tree(home, monkeypatch):
    monkeypatch.setattr(edges.probe, "host", lambda: FAKE_HOST)
    tree = home / ".tools" / "py"
    (tree / "bin").mkdir(parents=True)
    (tree / "bin" / "srv").write_text("#!/bin/sh\n")
    os.chmod(tree / "bin" / "srv", 0o700)
    key = str(home / ".ssh" / "id_rsa")
    plan = edges.server_box(_request(home), str(home / "proj"), [str(tree / "bin" / "srv"), key])
    assert str(tree) in plan.plan.read_allow
    assert key not in plan.plan.read_allow  # a data path in the arguments stays private
    assert edges.program_tree("no-such-program-anywhere") is None

"""Scoped "Allow for this session" over real HTTP: a grant covers the call's program +
subcommand (bash) or its project (write/edit), never the whole tool, and its label says so.

A private HOME is the only root (the default root is the home), so ``rm -rf ~/Documents``
is inside the roots and nothing but the grant's scope stands between it and the folder.
"""

from __future__ import annotations

import pytest

from ..support.control_client import Api
from ..support.helpers import asks, held


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / "Documents").mkdir(parents=True)
    (h / "Documents" / "keep.txt").write_text("precious\n")
    for name in ("projA", "projB"):
        (h / name / "src").mkdir(parents=True)
        (h / name / ".git").mkdir()  # a git top-level (only its presence matters here)
    (h / "notes").mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture
def bridge(start_bridge, home):
    # bash at prompt (its default is the box, which runs these unasked): grants are what decide
    approval = {"timeout_s": 20, "tiers": {"bash": "prompt"}}
    running = start_bridge({"roots": [str(home)], "approval": approval}, control=True)
    running.api = Api(running.runner.control)
    handle = running.runner.attach_approver("pytest")
    yield running
    running.runner.detach_approver(handle)


def _runs_unattended(bridge, c, tool, args):
    r = c.call(tool, args)
    done = [x for x in bridge.audit() if x["phase"] == "done"][-1]
    assert done["decided_by"] == "session_rule", (args, done)
    return r


def _grant(bridge, c, tool, args, label, ok=True):
    p, t, out = held(bridge, c, tool, args)
    assert p.grant_label == label
    listed = bridge.api.call("GET", f"/api/pending/{p.id}").json
    assert listed["session_grant"] == label  # what the page and watch show
    assert bridge.runner.decide(p.id, "allow_session")
    t.join(60)
    assert out[0].result["isError"] is not ok, out[0].text
    return p


def test_allow_echo_one_for_the_session_does_not_run_rm(bridge, home):
    c = bridge.client("agent")
    _grant(bridge, c, "bash", {"command": "echo one"}, "Allow `echo one …` for this session")
    assert "one again" in _runs_unattended(bridge, c, "bash", {"command": "echo one again"}).text
    asks(bridge, c, "bash", {"command": "rm -rf ~/Documents"})
    asks(bridge, c, "bash", {"command": "echo one && rm -rf ~/Documents"})
    asks(bridge, c, "bash", {"command": "echo two"})
    assert (home / "Documents" / "keep.txt").read_text() == "precious\n"
    grants = bridge.api.call("GET", "/api/grants").json["grants"]
    assert [(g["tool"], g["scope"]) for g in grants] == [("bash", "`echo one …`")]
    assert grants[0]["label"] == "Allow `echo one …` for this session"


def test_allow_git_commit_for_the_session_does_not_run_git_push(bridge, home):
    c = bridge.client("agent")
    args = {"command": "git commit -m x", "cwd": str(home / "projA")}
    # (projA's .git is a bare folder: git fails, and the grant stands all the same)
    _grant(bridge, c, "bash", args, "Allow `git commit …` for this session", ok=False)
    _runs_unattended(bridge, c, "bash", {**args, "command": "git commit --amend -m y"})
    asks(bridge, c, "bash", {**args, "command": "git push"})
    asks(bridge, c, "bash", {**args, "command": "git commit -m z; git push"})


def test_a_write_grant_covers_its_project_only(bridge, home):
    c = bridge.client("agent")
    a, b = home / "projA", home / "projB"
    first = {"path": str(a / "src" / "one.py"), "content": "1\n"}
    _grant(bridge, c, "write", first, "Allow writes in ~/projA for this session")
    _runs_unattended(bridge, c, "write", {"path": str(a / "two.txt"), "content": "2\n"})
    assert (a / "two.txt").read_text() == "2\n"
    asks(bridge, c, "write", {"path": str(b / "src" / "x.py"), "content": "x\n"})
    asks(bridge, c, "write", {"path": str(home / "top.txt"), "content": "x\n"})
    assert not (b / "src" / "x.py").exists()
    # Edits are their own grant: "writes in ~/projA" does not let the agent edit there.
    asks(bridge, c, "edit", {"path": str(a / "two.txt"), "old_string": "2", "new_string": "3"})


def test_outside_a_git_project_a_write_grant_is_the_files_folder(bridge, home):
    c = bridge.client("agent")
    args = {"path": str(home / "notes" / "a.md"), "content": "a\n"}
    _grant(bridge, c, "write", args, "Allow writes in ~/notes for this session")
    _runs_unattended(bridge, c, "write", {"path": str(home / "notes" / "b.md"), "content": "b"})
    asks(bridge, c, "write", {"path": str(home / "c.md"), "content": "c\n"})


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("bash", {"command": "rm -rf build"}),
        ("bash", {"command": "git push --force"}),
        ("bash", {"command": "echo x > out.txt"}),  # a redirect: no rule could cover it
        ("write", {"path": "~/top.txt", "content": "the home itself is no project"}),
        ("write", {"path": "~/.bashrc", "content": "persistence"}),
    ],
)
def test_no_grant_is_offered_where_none_can_apply(bridge, home, tool, args):
    c = bridge.client("agent")
    p, t, _out = held(bridge, c, tool, args)
    assert p.grant_label is None
    listed = bridge.api.call("GET", f"/api/pending/{p.id}").json
    assert listed["session_grant"] is None
    r = bridge.api.call("POST", f"/api/pending/{p.id}", {"decision": "allow_session"})
    assert r.status == 400 and "approve it once" in r.json["error"], r.json
    assert bridge.runner.decide(p.id, "deny")
    t.join(60)
    assert bridge.runner.snapshot().grants == ()

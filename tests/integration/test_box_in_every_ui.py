"""The box over the control API and the CLI, against a live bridge: the status says what the box
is, a waiting bash call says where it runs, and "Run outside the box" is a decision every front
end can send (and only for a call that would run in the box)."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server import box
from omp_a2a_bridge.server.cli.watch import PROMPT

from ..support.control_client import Api, WsApprover
from ..support.helpers import Watch, in_thread, wait_for


@pytest.fixture
def ctl(start_bridge):
    tiers = {"bash": "prompt", "write": "prompt"}
    running = start_bridge({"approval": {"tiers": tiers, "timeout_s": 60}}, control=True)
    running.info = running.runner.control
    running.api = Api(running.info)
    wait_for(lambda: running.runner.snapshot().box is not None)
    return running


def test_status_json_and_text_show_the_box(ctl, cli):
    got = ctl.api.call("GET", "/api/status").json["box"]
    known = box.check()
    assert got["available"] is known.available and got["detail"] == known.detail
    assert got["mechanism"] == known.mechanism.value
    assert got["text"].startswith("box: ")
    r = cli("status")
    assert r.returncode == 0 and got["text"] in r.stdout, r.stdout


def test_run_outside_the_box_over_the_api_and_the_cli(ctl, env, cli):
    if not box.check().available:
        pytest.skip(f"no box here: {box.check().detail}")
    approver = WsApprover(ctl.info)
    try:
        c = ctl.client("agent")
        thread, out = in_thread(c.call, "bash", {"command": "echo ran"})
        [p] = wait_for(lambda: ctl.api.call("GET", "/api/pending").json["pending"] or None)
        assert p["box"]["inside"] and p["box"]["can_run_outside"], p
        assert p["box"]["text"] == "runs in the box"
        r = ctl.api.call("POST", f"/api/pending/{p['id']}", {"decision": "run_outside_box"})
        assert r.status == 200 and r.json["decision"] == "run_outside_box"
        thread.join(60)
        assert out[0].text == "ran"

        # Not a bash call: refused, and the call still waits; then the CLI's flag decides.
        target = os.path.join(env["root"], "f.txt")
        thread, out = in_thread(c.call, "write", {"path": target, "content": "x"})
        [w] = wait_for(lambda: ctl.api.call("GET", "/api/pending").json["pending"] or None)
        assert w["box"] is None
        r = ctl.api.call("POST", f"/api/pending/{w['id']}", {"decision": "run_outside_box"})
        assert r.status == 400 and "only for a bash call" in r.json["error"]
        assert cli("approve", w["id"], "--outside-box").returncode != 0
        assert cli("approve", w["id"]).returncode == 0
        thread.join(60)
        assert not out[0].result["isError"]

        thread, out = in_thread(c.call, "bash", {"command": "echo again"})
        [b] = wait_for(lambda: ctl.api.call("GET", "/api/pending").json["pending"] or None)
        r = cli("approve", b["id"], "--outside-box")
        assert r.returncode == 0 and "approved to run outside the box" in r.stdout, r
        thread.join(60)
        assert out[0].text == "again"
    finally:
        approver.close()


def test_watch_shows_the_box_and_runs_a_call_outside_it_with_o(ctl):
    if not box.check().available:
        pytest.skip(f"no box here: {box.check().detail}")
    w = Watch()
    try:
        wait_for(lambda: "terminal (watch)" in ctl.runner.snapshot().approvers)
        c = ctl.client("agent")
        t, out = in_thread(c.call, "bash", {"command": "echo via-watch"})
        w.wait_out(PROMPT)
        assert "runs in the box ([o] runs it outside the box instead)" in w.out
        w.send("o")
        t.join(60)
        assert out[0].text == "via-watch"
        w.wait_out("→ run outside box")
        # A write has no box: "o" is not an answer there, the prompt comes again.
        t, out = in_thread(c.call, "write", {"path": "w.txt", "content": "x"})
        w.wait_out(PROMPT, 2)
        w.send("o")
        w.wait_out(PROMPT, 3)
        w.send("d")
        w.wait_out("reason (optional")
        w.send("")
        t.join(60)
        assert out[0].result["isError"]
    finally:
        w.close()


def test_the_probe_says_why_there_is_no_box(monkeypatch, tmp_path):
    """No bwrap anywhere: "not installed" and how to get it; a bwrap that fails: its error."""
    from omp_a2a_bridge.server.box import probe

    monkeypatch.setattr(probe, "BWRAP_PATHS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    missing, _ = probe.find_out()  # uncached (probe() caches)
    assert not missing.available and "apt-get install bubblewrap" in missing.detail
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    broken, _ = probe.find_out()
    assert not broken.available and "No permissions to create new namespace" in broken.detail
    assert str(fake) in broken.detail

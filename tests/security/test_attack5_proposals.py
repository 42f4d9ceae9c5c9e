"""Outside review (attack5): "Always allow" on a write straight in the home proposed the home.

A write of ``~/notes.txt`` (inside the default root, no escalation) waits on the prompt tier.
Its "Always allow" proposal was ``write(~/**)``: saved, every later write anywhere in the
home's visible tree ran unasked (``~/Documents``, every project's sources), far wider than
the call the human was shown. A session grant never names the home; the proposal now names the
file. Real bridge, real HTTP, the pending call as the control API hands it to every UI.
"""

from __future__ import annotations

import os

from ..support.control_client import with_control
from ..support.helpers import in_thread, wait_for


def test_always_allow_on_a_write_in_the_home_names_only_that_file(start_bridge, env, monkeypatch):
    monkeypatch.setenv("HOME", env["root"])  # the root is the home, as by default
    running = with_control(start_bridge, 30)
    human = running.runner.attach_approver("test human")
    agent = running.client("agent")
    target = os.path.join(env["root"], "notes.txt")
    thread, _ = in_thread(agent.call, "write", {"path": target, "content": "x"})
    try:
        wait_for(lambda: running.runner.snapshot().pending, 30)
        listed = running.api.call("GET", "/api/pending").json
        [call] = listed if isinstance(listed, list) else listed["pending"]
        assert call["proposed_rule"] is not None, call
        texts = str(call["proposed_rule"])
        assert "~/notes.txt" in texts and "**" not in texts, texts
    finally:
        for p in running.runner.snapshot().pending:
            running.runner.decide(p.id, "deny")
        thread.join(30)
        running.runner.detach_approver(human)

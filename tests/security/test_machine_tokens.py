"""A machine's token stays secret: an agent that echoes it (its own, or one it read) finds it
scrubbed from the audit and every UI; no log line, no listing, no snapshot carries it."""

from __future__ import annotations

import json
import logging

from omp_a2a_bridge.server.infra.audit import read_records
from omp_a2a_bridge.server.present.views import snapshot_json

from ..support.helpers import Mcp


def test_an_echoed_machine_token_is_scrubbed_everywhere(start_bridge, cli, memory_keyring, caplog):
    running = start_bridge({"approval": {"tiers": {"bash": "prompt"}}}, control=True)
    caplog.set_level(logging.DEBUG)
    r = cli("machines", "add", "laptop", "--json")
    token = json.loads(r.stdout)["token"]
    c = Mcp(running.port, token=token, client=token)  # even as its clientInfo name
    c.initialize()
    handle = running.runner.attach_approver("pytest")
    try:
        from ..support.helpers import in_thread

        t, _ = in_thread(c.call, "bash", {"command": f"echo {token} {token[:20]}"})
        [p] = running.pending(1)
        # "Always allow" never saves the token in a rule (a rule that generalises it away may
        # be offered: bash(echo *))
        rule = p.proposed_rule or ""
        assert token not in rule and token[:20] not in rule
        shown = json.dumps(snapshot_json(running.runner.snapshot()))
        assert token not in shown and token[:20] not in shown
        assert running.runner.decide(p.id, "deny")
        t.join(60)
    finally:
        running.runner.detach_approver(handle)
    running.runner.bridge.audit.flush(30)
    audit = json.dumps(read_records(running.env["audit"]))
    assert token not in audit and token[:20] not in audit
    assert '"machine": "laptop"' in audit
    assert all(token not in m for m in caplog.messages)
    listed = cli("machines", "list", "--json")
    assert token not in listed.stdout
    # the audit CLI (what a human reads back) never shows it either
    tail = cli("audit", "--json")
    assert token not in tail.stdout

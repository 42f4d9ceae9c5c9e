"""Outside review (attack5): one machine's agent fills the approval queue for every machine.

The queue of calls waiting for a human is capped for all sessions together
(``approval.max_pending``, 32) and per session (8), but not per machine. The sessions table
was made fair for this very reason (a flood from one machine never evicts another's sessions);
the queue was not: an agent on ``default`` opens sessions and keeps 32 cheap calls waiting
(each re-sent when it times out), and every other machine's call that needs a human is refused
at once with "too many calls waiting for approval" for as long as it likes. The human is
locked out of approving the work they want. Real bridge, real HTTP, a second machine's token.
"""

from __future__ import annotations

import json
import os

from omp_a2a_bridge.server.core.approvals import DISPLACED_TEXT

from ..support.helpers import Mcp, in_thread, wait_for


def test_a_flood_from_one_machine_does_not_refuse_another_machines_calls(
    start_bridge, cli, memory_keyring, env
) -> None:
    approval = {"tiers": {"write": "prompt"}, "timeout_s": 60}
    running = start_bridge({"approval": approval}, control=True)
    token = json.loads(cli("machines", "add", "laptop", "--json").stdout)["token"]
    human = running.runner.attach_approver("test human")
    threads = []
    try:
        for i in range(32):  # 32 sessions of one machine, one waiting call each
            args = {"path": os.path.join(env["root"], f"f{i}.txt"), "content": "x"}
            threads.append(in_thread(running.client(f"flood-{i}").call, "write", args))
        wait_for(lambda: len(running.runner.snapshot().pending) >= 32, 60)
        laptop = Mcp(running.port, token=token, client="laptop-agent")
        laptop.initialize()
        args = {"path": os.path.join(env["root"], "wanted.txt"), "content": "x"}
        t, out = in_thread(laptop.call, "write", args)
        waiting = wait_for(
            lambda: out or [p for p in running.runner.snapshot().pending if p.machine == "laptop"],
            30,
        )
        assert not out, f"laptop's call was refused: {out[0].text if out else ''}"
        assert waiting
        threads.append((t, out))
        # The flood's newest call gave up its place, and its agent is told why.
        given_up = wait_for(lambda: [o[0] for _, o in threads[:32] if o], 30)
        assert [r.text for r in given_up] == [DISPLACED_TEXT], given_up
        assert len(running.runner.snapshot().pending) == 32
    finally:
        for p in running.runner.snapshot().pending:
            running.runner.decide(p.id, "deny")
        for t, _ in threads:
            t.join(30)
        running.runner.detach_approver(human)

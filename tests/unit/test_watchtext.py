"""server/present/watchtext.py: a waiting call names its machine (from the token) beside what
the client calls itself, both rendered safe."""

from __future__ import annotations

from omp_a2a_bridge.server.present.views import pending_json
from omp_a2a_bridge.server.present.watchtext import describe
from omp_a2a_bridge.server.types import PendingCall

NOW = 1_000_000.0


def _call(client: str, machine: str) -> dict:
    p = PendingCall(
        "a1", "s" * 32, client, "bash", {"command": "ls"}, "bash: ls", NOW - 3, machine=machine
    )
    return pending_json(p, now=NOW)


def test_the_machine_comes_after_the_client_s_claim():
    head = describe(_call("claude-code", "laptop"), now=NOW).splitlines()[0]
    assert "from claude-code on laptop (session" in head


def test_a_claim_with_controls_is_escaped_and_the_machine_stays():
    head = describe(_call("evil\x1b[2J\u202e", "desk"), now=NOW).splitlines()[0]
    assert "\x1b" not in head and "\u202e" not in head and " on desk (" in head


def test_older_records_without_a_machine_read_as_before():
    data = _call("x", "laptop")
    del data["machine"]
    assert " on " not in describe(data, now=NOW).splitlines()[0]

"""One identity per remote machine, over real HTTP against a real bridge: each machine's own
token, its name on sessions and audit records whatever ``clientInfo`` says, revocation at once
(and for good, across a restart), rules scoped to a machine, grants that never cross machines.
"""

from __future__ import annotations

import json

import pytest

from omp_a2a_bridge.server.infra.config import load_config
from omp_a2a_bridge.server.present import clientconfig

from ..support.helpers import TOKEN, Mcp, wait_for


def added(cli, name: str) -> str:
    """``machines add NAME --json`` against the running bridge: the new machine's token."""
    r = cli("machines", "add", name, "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"name", "token", "config"} and data["name"] == name
    token = data["token"]
    server = data["config"]["mcpServers"][clientconfig.SERVER_NAME]
    assert server["headers"]["Authorization"] == f"Bearer {token}"
    return token


@pytest.fixture
def live(start_bridge, memory_keyring):
    """A bridge with the control API (the CLI reaches it), bash asking, a keyring that works."""
    return start_bridge({"approval": {"tiers": {"bash": "prompt"}}}, control=True)


def session(port: int, token: str, claims: str) -> Mcp:
    c = Mcp(port, token=token, client=claims)
    c.initialize()
    return c


def test_two_machines_get_their_own_names_whatever_client_info_says(live, cli, memory_keyring):
    laptop = added(cli, "laptop")
    desk = added(cli, "desk")
    assert len({laptop, desk, TOKEN}) == 3
    # each secret sits in the keyring under its own entry, the config keeps only a digest
    assert memory_keyring.store[("omp-a2a-bridge", "machine:laptop")] == laptop
    raw = open(live.env["config"]).read()
    assert laptop not in raw and desk not in raw
    cfg = load_config(live.env["config"])
    assert {m.name for m in cfg.machines} == {"laptop", "desk"}

    a = session(live.port, laptop, claims="desk")  # lies about itself
    b = session(live.port, desk, claims="default")
    d = session(live.port, TOKEN, claims="laptop")
    for c in (a, b, d):
        assert c.call("ls", {"path": live.env["root"]}).status == 200

    by_sid = {s.sid: s.machine for s in live.runner.snapshot().sessions}
    assert by_sid == {a.sid: "laptop", b.sid: "desk", d.sid: "default"}
    listed = json.loads(cli("sessions", "--json").stdout)["sessions"]
    assert sorted((s["client"], s["machine"]) for s in listed) == [
        ("default", "desk"),
        ("desk", "laptop"),
        ("laptop", "default"),
    ]
    done = [r for r in live.audit() if r["phase"] == "done"]
    assert sorted((r["client"], r["machine"]) for r in done) == [
        ("default", "desk"),
        ("desk", "laptop"),
        ("laptop", "default"),
    ]
    machines = {m.name: m for m in live.runner.snapshot().machines}
    assert list(machines) == ["default", "desk", "laptop"]
    assert machines["laptop"].sessions == 1 and machines["laptop"].calls == 1
    assert machines["laptop"].last_seen is not None and machines["laptop"].created is not None


def test_rm_ends_the_machine_at_once_and_leaves_the_others(live, cli):
    laptop, desk = added(cli, "laptop"), added(cli, "desk")
    a = session(live.port, laptop, claims="pytest")
    b = session(live.port, desk, claims="pytest")
    d = session(live.port, TOKEN, claims="pytest")
    r = cli("machines", "rm", "laptop")
    assert r.returncode == 0, r.stderr
    assert "laptop removed" in r.stderr
    assert a.rpc("tools/list").status == 401  # its open session's next request
    assert [s.machine for s in live.runner.snapshot().sessions].count("laptop") == 0
    assert b.rpc("tools/list").status == 200
    assert d.rpc("tools/list").status == 200
    fresh = Mcp(live.port, token=laptop)
    assert fresh.rpc("initialize", {"protocolVersion": "2025-11-25"}).status == 401
    assert "laptop" not in [m.name for m in load_config(live.env["config"]).machines]
    again = cli("machines", "rm", "laptop")
    assert again.returncode == 1 and "no machine named laptop" in again.stderr

"""One identity per remote machine, over real HTTP against a real bridge: each machine's own
token, its name on sessions and audit records whatever ``clientInfo`` says, revocation at once
(and for good, across a restart), rules scoped to a machine, grants that never cross machines.
"""

from __future__ import annotations

import hashlib
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
    with open(live.env["config"]) as f:
        raw = f.read()
    assert laptop not in raw and desk not in raw
    for token in (laptop, desk):  # ... the digest the bridge checks a request against
        assert hashlib.sha256(token.encode()).hexdigest() in raw
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


def test_list_never_prints_a_token(live, cli):
    laptop = added(cli, "laptop")
    session(live.port, laptop, claims="pytest").call("ls", {"path": live.env["root"]})
    plain = cli("machines", "list")
    as_json = cli("machines", "list", "--json")
    api = live.runner.control
    assert api is not None
    for out in (plain, as_json):
        assert out.returncode == 0, out.stderr
        for secret in (laptop, TOKEN, api.secret):
            assert secret not in out.stdout + out.stderr
    rows = json.loads(as_json.stdout)["machines"]
    assert [r["name"] for r in rows] == ["default", "laptop"]
    assert set(rows[1]) == {"name", "created", "last_seen", "calls", "sessions", "tunnel"}
    assert rows[1]["calls"] == 1 and rows[1]["sessions"] == 1 and rows[1]["tunnel"] is None
    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ADDED", "LAST", "SEEN", "CALLS", "SESSIONS", "TUNNEL"]
    assert lines[2].split()[0] == "laptop"
    # nor does the API the CLI reads (the CLI's own filter is not what keeps it out)
    from ..support.control_client import Api

    raw = Api(api).call("GET", "/api/machines")
    assert raw.status == 200 and "laptop" in raw.raw.decode()
    assert laptop not in raw.raw.decode() and TOKEN not in raw.raw.decode()
    # the status snapshot (what the page and the tray read) never carries one either
    from omp_a2a_bridge.server.present.views import snapshot_json

    assert laptop not in json.dumps(snapshot_json(live.runner.snapshot()))


def test_a_removed_token_never_works_again_across_a_restart(env, serve_process, cli):
    """A real ``serve`` process: added, removed, stopped, started again: still a 401."""
    from ..conftest import write_config

    write_config(env["config"], {"roots": [env["root"]], "token_store": "file"})
    proc, port = serve_process()
    laptop, desk = added(cli, "laptop"), added(cli, "desk")
    session(port, desk, claims="pytest")
    a = session(port, laptop, claims="pytest")
    assert a.rpc("tools/list").status == 200
    assert cli("machines", "rm", "laptop").returncode == 0
    assert a.rpc("tools/list").status == 401
    from ..support.helpers import stop_process

    stop_process(proc)
    wait_for(lambda: cli("machines", "list").stderr.startswith("a2a-bridge: no bridge"), 30)
    # when desk was last seen outlives the process (saved at its stop)
    listed = cli("machines", "list", "--json")
    offline = json.loads(listed.stdout)["machines"]
    # token_store "file": desk's secret sits in the config the offline listing reads, and
    # still never reaches its output (nor the plain table's)
    with open(env["config"]) as f:
        assert desk in f.read()
    for out in (listed, cli("machines", "list")):
        assert desk not in out.stdout + out.stderr and TOKEN not in out.stdout + out.stderr
    assert [m["name"] for m in offline] == ["default", "desk"]
    assert offline[1]["last_seen"] is not None
    _, port2 = serve_process()
    assert Mcp(port2, token=laptop).rpc("initialize", {}).status == 401
    assert session(port2, desk, claims="pytest").rpc("tools/list").status == 200
    assert session(port2, TOKEN, claims="pytest").rpc("tools/list").status == 200
    # token_store "file": the secret sat in the 0600 config, and went with the record
    with open(env["config"]) as f:
        assert laptop not in f.read()


def test_rules_scoped_to_a_machine_apply_only_to_it(live, cli):
    laptop = added(cli, "laptop")
    r = cli("rules", "add", "--machine", "laptop", "bash(echo scoped *)")
    assert r.returncode == 0, r.stderr
    assert "@laptop bash(echo scoped *)" in live.runner.rules().to_json()["allow"]
    assert "no machine named" not in r.stderr
    typo = cli("rules", "add", "--ask", "--machine", "lapotp", "bash(echo x)")
    assert typo.returncode == 0 and "no machine named lapotp yet" in typo.stderr
    assert cli("rules", "rm", "--ask", "--machine", "lapotp", "bash(echo x)").returncode == 0
    handle = live.runner.attach_approver("pytest")  # no approver: a prompt call is refused
    try:
        a = session(live.port, laptop, claims="pytest")
        d = session(live.port, TOKEN, claims="laptop")  # claims the name; its token says no
        ran = a.call("bash", {"command": "echo scoped one", "box": True})
        assert "scoped one" in ran.text
        done = [x for x in live.audit() if x["phase"] == "done"][-1]
        assert done["decided_by"] == "rule" and done["machine"] == "laptop"
        assert done["rule"] == "@laptop bash(echo scoped *)"
        from ..support.helpers import in_thread

        t, out = in_thread(d.call, "bash", {"command": "echo scoped two"})
        [p] = live.pending(1)
        assert p.machine == "default"
        assert live.runner.decide(p.id, "deny")
        t.join(60)
        assert "denied by the user" in out[0].text
    finally:
        live.runner.detach_approver(handle)
    # rules test answers for the machine asked about
    as_laptop = json.loads(
        cli("rules", "test", "--machine", "laptop", "--json", "echo scoped x").stdout
    )
    as_default = json.loads(cli("rules", "test", "--json", "echo scoped x").stdout)
    assert as_laptop["decided_by"] == "rule" and as_default["decided_by"] != "rule"
    assert cli("rules", "rm", "--machine", "laptop", "bash(echo scoped *)").returncode == 0
    assert live.runner.rules().to_json()["allow"] == []


def test_grants_and_session_ids_never_cross_machines(live, cli):
    laptop, desk = added(cli, "laptop"), added(cli, "desk")
    a = session(live.port, laptop, claims="pytest")
    handle = live.runner.attach_approver("pytest")
    try:
        from ..support.helpers import in_thread

        t, _ = in_thread(a.call, "bash", {"command": "echo granted"})
        [p] = live.pending(1)
        assert p.machine == "laptop" and p.grant is not None
        assert live.runner.decide(p.id, "allow_session")
        t.join(60)
        [g] = live.runner.grants()
        assert g.machine == "laptop"
        # desk presents laptop's session id with its own token: no such session for desk
        stolen = Mcp(live.port, token=desk)
        stolen.sid = a.sid
        r = stolen.call("bash", {"command": "echo granted"})
        assert r.status == 404
        assert stolen.rpc("tools/list").status == 404
        # nor can it end laptop's session
        assert stolen.request("DELETE", headers={"mcp-session-id": a.sid}).status == 204
        assert a.sid in [s.sid for s in live.runner.snapshot().sessions]
        # laptop's own later call still rides on its grant
        assert "granted" in a.call("bash", {"command": "echo granted"}).text
    finally:
        live.runner.detach_approver(handle)


def test_rotating_the_default_token_cuts_no_other_machine(start_bridge, keyring_token, cli):
    running = start_bridge(control=True)
    laptop = added(cli, "laptop")
    a = session(running.port, laptop, claims="pytest")
    d = session(running.port, TOKEN, claims="pytest")
    assert cli("token", "rotate").returncode == 0
    assert d.rpc("tools/list").status == 401
    assert a.rpc("tools/list").status == 200
    assert keyring_token.store[("omp-a2a-bridge", "machine:laptop")] == laptop


def test_names_are_checked_and_default_is_kept(live, cli):
    for bad in ("Laptop", "_x", "a b", "x" * 33, "café", ""):
        r = cli("machines", "add", bad)
        assert r.returncode in (1, 2) and "machine name" in r.stderr, (bad, r.stderr)
    r = cli("machines", "add", "default")
    assert r.returncode == 1 and "token rotate" in r.stderr
    r = cli("machines", "rm", "default")
    assert r.returncode == 1 and "token rotate" in r.stderr
    added(cli, "laptop")
    r = cli("machines", "add", "laptop")
    assert r.returncode == 1 and "exists" in r.stderr
    # over the control API too: a clear 400, never a 500
    from ..support.control_client import Api

    api = Api(live.runner.control)
    assert api.call("POST", "/api/machines", {"name": "Bad Name"}).status == 400
    assert api.call("POST", "/api/machines", {"name": 7}).status == 400
    assert api.call("DELETE", "/api/machines/nobody").status == 404
    assert api.call("DELETE", "/api/machines/%E2%80%AE").status == 400


def test_offline_add_and_rm_write_the_config(env, cli, memory_keyring):
    from ..conftest import write_config

    write_config(env["config"], {"roots": [env["root"]], "port": 4321})
    r = cli("machines", "add", "laptop")
    assert r.returncode == 0, r.stderr
    config = json.loads(r.stdout)
    token = memory_keyring.store[("omp-a2a-bridge", "machine:laptop")]
    server = config["mcpServers"][clientconfig.SERVER_NAME]
    assert server["url"] == "http://127.0.0.1:4321/"
    assert server["headers"]["Authorization"] == f"Bearer {token}"
    assert [m.name for m in load_config(env["config"]).machines] == ["laptop"]
    listed = cli("machines", "list", "--json")
    assert [m["name"] for m in json.loads(listed.stdout)["machines"]] == ["default", "laptop"]
    assert "no bridge is running" in listed.stderr
    assert cli("machines", "rm", "laptop").returncode == 0
    assert load_config(env["config"]).machines == ()
    assert ("omp-a2a-bridge", "machine:laptop") not in memory_keyring.store


def test_an_unusable_keyring_is_said_and_the_token_kept_in_the_config(start_bridge, cli):
    from omp_a2a_bridge.server.infra.tokens import KeyringStore, KeyringUnavailable

    class Locked(KeyringStore):
        def get(self, user="token"):
            raise KeyringUnavailable("the collection is locked")

        def set(self, token, user="token"):
            raise KeyringUnavailable("the collection is locked")

    running = start_bridge(control=True, keyring_store=Locked())
    r = cli("machines", "add", "laptop", "--json")
    assert r.returncode == 0
    assert "keyring unavailable (the collection is locked)" in r.stderr
    token = json.loads(r.stdout)["token"]
    assert [m.token for m in load_config(running.env["config"]).machines] == [token]
    assert any("machine laptop" in w for w in running.runner.snapshot().warnings)
    assert session(running.port, token, claims="pytest").rpc("tools/list").status == 200


def test_the_2026_era_names_the_machine_and_keeps_its_tasks_to_it(live, cli):
    """A stateless 2026-07-28 request carries no session: the token alone names the machine,
    and a task it started answers no other machine."""
    from ..support.helpers import Http
    from .test_modern_era import TASKS_META, V

    laptop, desk = added(cli, "laptop"), added(cli, "desk")

    def modern(token: str, method: str, params: dict) -> object:
        msg = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": method,
            "params": {**params, "_meta": TASKS_META},
        }
        h = {"MCP-Protocol-Version": V, "Mcp-Method": method}
        if method == "tools/call":
            h["Mcp-Name"] = params["name"]
        return Http(live.port, token=token).request(body=msg, headers=h)

    handle = live.runner.attach_approver("pytest")
    try:
        r = modern(laptop, "tools/call", {"name": "bash", "arguments": {"command": "echo t"}})
        assert r.status == 200 and r.result["resultType"] == "task", r
        task = {"taskId": r.result["taskId"]}
        [p] = live.pending(1)
        assert p.machine == "laptop"
        other = modern(desk, "tasks/get", task)
        assert other.json["error"]["message"] == "unknown or expired taskId"
        assert modern(desk, "tasks/cancel", task).json["error"]["message"].startswith("unknown")
        assert modern(laptop, "tasks/get", task).result["status"] == "working"
        assert live.runner.decide(p.id, "approve")
    finally:
        live.runner.detach_approver(handle)
    wait_for(lambda: [x for x in live.audit() if x["phase"] == "done"])
    done = [x for x in live.audit() if x["phase"] == "done"][-1]
    assert (done["machine"], done["era"]) == ("laptop", V)


def test_always_allow_is_no_wider_than_the_machine_that_asked(live, cli):
    """ "Always allow" on a call from ``laptop`` proposes and saves ``@laptop …``: the same
    command from another machine still asks. Once a second machine exists, ``default``'s
    proposals name it too (before that, they read as they always did)."""
    from ..support.helpers import in_thread

    handle = live.runner.attach_approver("pytest")
    try:
        d = session(live.port, TOKEN, claims="pytest")
        t, _ = in_thread(d.call, "bash", {"command": "echo hello"})
        [p] = live.pending(1)
        base = p.proposed_rule
        assert base is not None and base.startswith("bash(echo hello")  # only default: as before
        assert live.runner.decide(p.id, "deny")
        t.join(60)

        laptop = added(cli, "laptop")
        a = session(live.port, laptop, claims="pytest")
        t, out = in_thread(a.call, "bash", {"command": "echo hello"})
        [p] = live.pending(1)
        assert p.machine == "laptop" and p.proposed_rule == f"@laptop {base}"
        assert live.runner.decide(p.id, "allow_always")
        t.join(60)
        assert "hello" in out[0].text
        assert live.runner.rules().to_json()["allow"] == [f"@laptop {base}"]
        assert "hello" in a.call("bash", {"command": "echo hello"}).text  # the rule

        t, out = in_thread(d.call, "bash", {"command": "echo hello"})
        [p] = live.pending(1)  # default's same command still asks
        assert p.machine == "default" and p.proposed_rule == f"@default {base}"
        assert live.runner.decide(p.id, "deny")
        t.join(60)
        assert "denied by the user" in out[0].text
    finally:
        live.runner.detach_approver(handle)


def test_a_machine_opening_sessions_in_a_loop_evicts_only_its_own(live, cli):
    """The table holds 64 sessions; 80 initializes from ``laptop`` leave ``default``'s open
    session alone (it used to be the least recently seen one, and the first to go)."""
    d = session(live.port, TOKEN, claims="pytest")
    laptop = added(cli, "laptop")
    for _ in range(80):
        session(live.port, laptop, claims="flood")
    assert d.rpc("ping").status == 200
    sessions = live.runner.snapshot().sessions
    assert d.sid in [s.sid for s in sessions] and len(sessions) == 64


def test_a_name_added_again_gets_a_new_token_and_the_removed_one_stays_dead(live, cli):
    """Revoked for good means also after the same name comes back: ``machines add laptop``
    again mints a new secret (the keyring entry of the old one is not reused), so a copy of the
    old token, still in a client config on the old laptop, is a 401."""
    old = added(cli, "laptop")
    a = session(live.port, old, claims="pytest")
    assert cli("machines", "rm", "laptop").returncode == 0
    new = added(cli, "laptop")
    assert new != old
    assert a.rpc("tools/list").status == 401
    assert Mcp(live.port, token=old).rpc("initialize", {}).status == 401
    b = session(live.port, new, claims="pytest")
    assert b.rpc("tools/list").status == 200
    assert [s.machine for s in live.runner.snapshot().sessions] == ["laptop"]


def test_watch_names_the_machine_from_the_token_beside_the_claim(live, cli):
    """``a2a-bridge watch`` (a real process, as a user runs it) says which machine a waiting
    call comes from: the token's name, whatever ``clientInfo`` claims; deciding it there
    answers that machine's call."""
    from omp_a2a_bridge.server.cli.watch import PROMPT

    from ..support.helpers import Watch, in_thread

    laptop = added(cli, "laptop")
    w = Watch()
    try:
        wait_for(lambda: "terminal (watch)" in live.runner.snapshot().approvers, 30)
        a = session(live.port, laptop, claims="desk")  # lies about itself
        t, out = in_thread(a.call, "bash", {"command": "echo from-laptop"})
        text = w.wait_out(PROMPT, timeout=30)
        assert "from desk on laptop (session" in text, text
        w.send("a")
        t.join(30)
        assert "from-laptop" in out[0].text
    finally:
        w.close()
    done = [r for r in live.audit() if r["phase"] == "done"][-1]
    assert (done["machine"], done["client"], done["decided_by"]) == ("laptop", "desk", "user")

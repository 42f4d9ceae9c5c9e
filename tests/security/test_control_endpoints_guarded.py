"""Every control endpoint, the newest included (batch decisions, machines, tunnels, logs), goes
through the same gate: a loopback ``Host``, no foreign ``Origin``, the secret or the page's
cookie, and the CSRF token on a cookie request that changes state. Walked from the route table
itself, so an endpoint added tomorrow is attacked too."""

from __future__ import annotations

import re
import urllib.parse

import pytest
from tornado import web

from omp_a2a_bridge.server.control.endpoints import ROUTES, EventsHandler

from ..support.control_client import Api

SAMPLES = {
    r"([A-Za-z0-9_-]+)": "a1",
    r"([a-z0-9_]+)": "docs",
    r"([a-z]+)": "allow",
    r"(.+)": "bash%28%2A%29",
    r"([^/]+)": "laptop",
    r"([A-Za-z0-9._-]+)": "box",
    r"([A-Za-z0-9_.-]+)": "bash",
    r"(reconnect|install)": "install",
}
BODIES = {
    "/api/batch": {"ids": ["a1", "a2"], "decision": "approve"},
    "/api/machines": {"name": "evil"},
    "/api/tunnels": {"name": "evil", "target": "evil@example.com", "install": True},
    "/api/rules": {"list": "allow", "rule": "bash(*)"},
    "/api/pause": {"paused": True},
}


def _path(pattern: str) -> str:
    out = pattern
    for group in re.findall(r"\([^)]*\)", pattern):
        out = out.replace(group, SAMPLES[group], 1)
    return out


def _requests() -> list[tuple[str, str]]:
    found = []
    for pattern, handler in ROUTES:
        if handler is EventsHandler:
            continue  # the websocket: its own origin check, tested with the page
        for method in ("get", "post", "delete"):
            if getattr(handler, method) is not getattr(web.RequestHandler, method):
                found.append((method.upper(), _path(pattern)))
    return found


REQUESTS = _requests()


def test_the_walk_covers_the_new_endpoints():
    paths = {p for _, p in REQUESTS}
    assert {"/api/batch", "/api/machines", "/api/machines/laptop", "/api/tunnels"} <= paths
    assert "/api/tunnels/box/install" in paths and "/api/logs" in paths


@pytest.fixture
def ctl(start_bridge, memory_keyring):
    running = start_bridge({"approval": {"tiers": {"bash": "prompt"}}}, control=True)
    running.info = running.runner.control
    running.api = Api(running.info)
    return running


def _login(ctl) -> tuple[Api, str]:
    page = Api(ctl.info, secret=None)
    code = ctl.api.call("POST", "/api/login-code").json["code"]
    r = page.call("GET", "/login?code=" + urllib.parse.quote(code))
    assert r.status == 303, r
    return page, r.headers["Set-Cookie"].split(";", 1)[0]


def test_every_endpoint_refuses_what_is_not_the_human(ctl):
    page, cookie = _login(ctl)
    rules_before = [r.text for r in ctl.runner.rules().allow]
    nobody = Api(ctl.info, secret=None)
    wrong = Api(ctl.info, secret="not-the-secret")
    for method, path in REQUESTS:
        body = BODIES.get(path, {})
        where = (method, path)
        r = nobody.call(method, path, body)
        assert r.status == 401, (where, r)
        r = wrong.call(method, path, body)
        assert r.status == 401, (where, r)
        r = ctl.api.call(method, path, body, headers={"Origin": "http://evil.example"})
        assert (r.status, r.json) == (403, {"error": "forbidden origin"}), (where, r)
        r = ctl.api.call(method, path, body, headers={"Host": "evil.example"})
        assert (r.status, r.json) == (403, {"error": "forbidden host"}), (where, r)
        # a rebinding name that resolves to loopback is still not a loopback *name*
        r = ctl.api.call(method, path, body, headers={"Host": "127.0.0.1.nip.io"})
        assert r.status == 403, (where, r)
        if method != "GET":
            r = page.call(method, path, body, headers={"Cookie": cookie})
            assert (r.status, r.json) == (403, {"error": "missing or wrong CSRF token"}), (
                where,
                r,
            )
            r = page.call(method, path, body, headers={"Cookie": cookie, "X-CSRF-Token": ""})
            assert r.status == 403, (where, r)
    # nothing any of them asked for happened
    snap = ctl.runner.snapshot()
    assert snap.paused is False
    assert [m.name for m in ctl.runner.machines()] == ["default"]
    assert ctl.runner.tunnels() == ()
    assert [r.text for r in ctl.runner.rules().allow] == rules_before


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"null",
        b'"ids"',
        b"{not json",
        b'{"ids": "a1", "decision": "approve"}',
        b'{"ids": [1, 2], "decision": "approve"}',
        b'{"ids": [], "decision": "approve"}',
        b'{"ids": [["a1"]], "decision": "approve"}',
        b'{"ids": ["a1"], "decision": "always"}',
        b'{"ids": ["a1"], "decision": "allow_session"}',
        b'{"ids": ["a1"], "decision": null}',
        b'{"ids": ["a1", "a1"], "decision": "approve"}',
        b'{"ids": ["a1"], "decision": "approve", "reason": 5}',
        ('{"ids": [' + ",".join(f'"a{i}"' for i in range(65)) + '], "decision": "deny"}').encode(),
    ],
)
def test_a_malformed_batch_is_a_clear_400(ctl, body):
    r = ctl.api.call("POST", "/api/batch", body)
    assert r.status == 400, r
    assert isinstance(r.json.get("error"), str) and r.json["error"], r


@pytest.mark.parametrize(
    "body",
    [
        {"ids": ["a" * 10_000], "decision": "deny"},
        {"ids": ["\ud800"], "decision": "deny"},
        {"ids": ["a1"], "decision": "approve", "by": {"x": 1}},
    ],
)
def test_a_batch_naming_nothing_waiting_decides_nothing(ctl, body):
    r = ctl.api.call("POST", "/api/batch", body)
    assert r.status == 200, r
    assert r.json["decided"] == [] and r.json["gone"] == body["ids"], r

"""The security checklist that is not covered elsewhere: constant-time compare, 0600 files.

The token-leak scan runs for every test (``no_token_leaks`` in conftest.py).
"""

from __future__ import annotations

import hmac
import os
import stat

from omp_a2a_bridge.server import protocol

from .conftest import write_config
from .control_helpers import Api
from .helpers import TOKEN, Http, Mcp


def test_token_compare_is_constant_time(start_bridge, monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((type(a), type(b)))
        return real(a, b)

    monkeypatch.setattr(protocol.hmac, "compare_digest", spy)
    running = start_bridge()
    assert Http(running.port, token="x" * 10).request(body={"jsonrpc": "2.0"}).status == 401
    assert running.client().rpc("ping").status == 200
    assert calls and all(t == (bytes, bytes) for t in calls)


def test_every_file_the_bridge_creates_is_private(start_bridge, env, monkeypatch):
    monkeypatch.delenv("A2A_BRIDGE_TOKEN")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    import keyring.core

    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    running = start_bridge(
        {"approval": {"tiers": {"ls": "allow"}}, "audit": {"max_bytes": 4096, "keep": 3}},
        control=True,
    )
    c = Mcp(running.port, token=running.runner.token)
    c.initialize()
    for _ in range(40):  # enough to rotate the audit log
        c.call("ls", {})
    running.runner.bridge.audit.flush()
    created = []
    for base in (env["config"], env["audit"], os.path.join(env["runtime"], "control.json")):
        directory = os.path.dirname(base)
        created += [os.path.join(directory, f) for f in os.listdir(directory)]
    assert any(p.endswith(".jsonl.1") for p in created)  # a rotated generation exists
    assert any(p.endswith("control.json") for p in created)
    for path in created:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_no_secret_in_the_control_file_listing_or_status(start_bridge):
    running = start_bridge(control=True)
    status = Api(running.runner.control).call("GET", "/api/status")
    assert (
        TOKEN not in status.raw.decode()
        and running.runner.control.secret not in status.raw.decode()
    )


def test_config_written_by_the_bridge_is_private_even_if_loose_before(env):
    write_config(env["config"], {"roots": [env["root"]]})
    os.chmod(env["config"], 0o644)
    from omp_a2a_bridge.server.config import update_config

    update_config(env["config"], {"port": 1234})
    assert stat.S_IMODE(os.stat(env["config"]).st_mode) == 0o600

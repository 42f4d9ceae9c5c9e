"""Smoke test: the real ``a2a-bridge tray`` on a virtual X display with a tray host."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from server.controlfile import read_control

from .conftest import require_system, write_config
from .helpers import Mcp, read_text, wait_for
from .xsession import XSession


@pytest.fixture
def xsession():
    require_system("Xvfb", "trayer", packages="xvfb trayer")
    x = XSession()
    yield x
    x.close()


def test_tray_starts_serves_and_exits_cleanly_on_sigterm(xsession, env):
    write_config(env["config"], {"roots": [env["root"]]})
    e = dict(os.environ, DISPLAY=xsession.display)
    e["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    e.pop("A2A_BRIDGE_TOKEN", None)
    e.pop("PYSTRAY_BACKEND", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tray", "tray"],
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        info = wait_for(read_control, timeout=20)
        assert info.pid == proc.pid
        token = __import__("json").loads(read_text(env["config"]))["token"]
        port = int(info.mcp_url.rsplit(":", 1)[1].strip("/"))
        c = Mcp(port, token=token)
        c.initialize()
        assert c.rpc("ping").status == 200
        assert next(t["name"] for t in c.rpc("tools/list").result["tools"]) == "read"
        # A second instance says so and leaves the first alone.
        second = subprocess.run(
            [sys.executable, "-m", "tray", "tray"],
            env=e,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 0 and "already running" in second.stderr
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=15)
        assert time.monotonic() - t0 < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "a2a-bridge tray (" in err and "Traceback" not in err
    assert not os.path.exists(os.path.join(env["runtime"], "control.json"))

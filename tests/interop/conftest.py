"""Fixtures for the interop suite: the cached real clients and a bridge for them on port 0."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..conftest import Running
from . import tools


@dataclass
class Peers:
    """Where the installed clients are, and how to run them in an isolated home."""

    home: Path
    env: dict[str, str]

    def run(self, argv: list[str], timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess:
        return subprocess.run(
            argv,
            env=kw.pop("env", self.env),
            cwd=kw.pop("cwd", self.home),
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            **kw,
        )

    def json_line(self, argv: list[str], timeout: float = 240) -> dict[str, Any]:
        """Run a client script that prints one JSON line last; fail with its stderr otherwise."""
        r = self.run(argv, timeout=timeout)
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        assert r.returncode == 0 and lines, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
        return json.loads(lines[-1])

    def json_lines_at_once(
        self, argv: Callable[[int], list[str]], runs: int, procs: int = 4
    ) -> dict[str, Any]:
        """`runs` sessions split over `procs` client processes started together (``argv(n)`` is
        the command for n of them); their outputs merged (results, crashes and logged lines
        concatenated).

        Each process still runs its sessions one after another, so each teardown race is the
        same as in one long run; the processes only overlap the clients' timeouts.
        """
        from concurrent.futures import ThreadPoolExecutor

        shares = [runs // procs + (i < runs % procs) for i in range(procs)]
        with ThreadPoolExecutor(procs) as pool:
            outs = list(pool.map(lambda n: self.json_line(argv(n)), shares))
        merged = dict(outs[0])
        for key in ("results", "crashes", "logged"):
            merged[key] = [x for out in outs for x in out.get(key, [])]
        return merged


@pytest.fixture(scope="session")
def installed() -> None:
    """The cached clients; ``.ci/run`` installs them. Missing under CI: fail loudly."""
    missing = tools.missing()
    if missing:
        message = f"interop clients not installed ({', '.join(missing)}): run {tools.INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def peers(installed, tmp_path) -> Peers:
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        PATH=os.pathsep.join([tools.node_bin_dir(), env.get("PATH", "")]),
        NO_COLOR="1",
        CI="1",  # the CLIs stay non-interactive
        DISABLE_AUTOUPDATER="1",
        NO_UPDATE_NOTIFIER="1",
        npm_config_update_notifier="false",
    )
    for var in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER"):
        env.pop(var, None)
    return Peers(home, env)


@pytest.fixture
def peer_bridge(start_bridge) -> Running:
    """A bridge as a desktop runs it: read/ls allowed, write asks, an approver attached."""
    running = start_bridge(
        {"approval": {"timeout_s": 3, "tiers": {"read": "allow", "ls": "allow"}}}
    )
    with open(os.path.join(running.env["root"], "hello.txt"), "w") as f:
        f.write("hello from the bridge\n")
    running.runner.attach_approver("interop human")
    return running


HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under this folder carries the ``interop`` marker (``pytest -m interop``).

    Hooks in a conftest see every collected item, not only this folder's."""
    for item in items:
        if HERE in item.path.resolve().parents:
            item.add_marker(pytest.mark.interop)

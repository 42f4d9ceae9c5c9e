"""A bridge as a real process in a made-up home with planted fake secrets: the box's test world.

The home lives under ``/var/tmp`` (not ``/tmp``): every box gets a private ``/tmp``, so a home
under it would be hidden wholesale and prove nothing. The bridge runs with its default config
location (``~/.config/omp-a2a-bridge/config.json``), its runtime dir outside the home, a fake
session-bus socket file in ``XDG_RUNTIME_DIR``, and ``roots`` = the home (the default).

``as_user=True`` runs the bridge as an unprivileged user in a user namespace (root can do
things in a sandbox that a desktop user cannot), the way
``tests/security/test_child_environment.py`` does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from omp_a2a_bridge.server.infra.childenv import looks_secret

from .helpers import TOKEN, Mcp, read_text

SECRETS = {
    ".ssh/id_rsa": "FAKESECRET-ssh-7a1f",
    ".aws/credentials": "[default]\naws_secret_access_key = FAKESECRET-aws-93b2",
    ".netrc": "machine x login y password FAKESECRET-netrc-11c4",
    ".config/gh/hosts.yml": "oauth_token: FAKESECRET-gh-5d0e",
    ".bash_history": "export API_KEY=FAKESECRET-history-0f3a",
    # secret-looking files in the home's visible tree, outside the call's project: private too
    "otherproj/.env": "DB_PASSWORD=FAKESECRET-otherproj-2b7c",
    "notes/keys/id_ed25519": "FAKESECRET-notes-key-6d3e",
    "work/clients/acme/infra/terraform.tfstate": '{"secret": "FAKESECRET-tfstate-81aa"}',
}
MARKER = "FAKESECRET"
BASHRC = "# the user's own bashrc\n"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def desktop_user() -> list[str]:
    """Root: run as uid 1000 in a user namespace (as on a desktop); else as itself."""
    if os.geteuid() != 0:
        return []
    argv = ["unshare", "--user", "--map-user=1000", "--map-group=1000"]
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        if os.environ.get("CI"):
            pytest.fail("running as root and 'unshare --user' does not work here")
        pytest.skip("running as root and 'unshare --user' does not work here")
    return argv


def put(path: str, text: str) -> str:
    """Write ``text`` (and a newline) to ``path``, its folders made: a file the human has."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text + "\n")
    return path


@contextlib.contextmanager
def top_level_folder(prefix: str) -> Iterator[str]:
    """A folder made at ``/`` (as ``/srv`` or a mounted disk is), readable by everyone, removed
    after. Needs root: CI runs as root; elsewhere the test is skipped."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("this test makes a top-level folder: CI runs as root")
        pytest.skip("makes a top-level folder: needs root")
    top = tempfile.mkdtemp(prefix=prefix, dir="/")
    try:
        os.chmod(top, 0o755)  # noqa: S103 - readable by the desktop user, as /srv is
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)


def box_home(tmp_path: Any, monkeypatch: Any, files: dict[str, str]) -> Any:
    """An in-process test's home with ``files`` (relative path -> text) that only a working box
    can serve (skipped where this machine cannot box, failed under CI without bwrap); walk
    plans forgotten (they are kept per base for a few seconds)."""
    from omp_a2a_bridge.server.box import edges
    from omp_a2a_bridge.server.box import probe as box_probe

    require_bwrap()
    if not box_probe.probe().available:
        pytest.skip(f"no box here: {box_probe.status().detail}")
    home = tmp_path / "home"
    for rel, text in files.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    monkeypatch.setenv("HOME", str(home))
    edges.forget_plans()
    return home


def require_bwrap() -> None:
    if not os.access("/usr/bin/bwrap", os.X_OK) and shutil.which("bwrap") is None:
        message = "needs bwrap: apt-get install bubblewrap"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@dataclass
class World:
    base: str
    home: str
    project: str
    runtime: str
    config: str
    xdg: str
    proc: subprocess.Popen | None = None
    port: int = 0
    log: str = ""
    files: dict[str, str] = field(default_factory=dict)  # persistence path -> content before

    def client(self) -> Mcp:
        c = Mcp(self.port)
        c.initialize()
        return c

    def bash(self, command: str, cwd: str | None = None, **extra: Any) -> tuple[bool, str]:
        """(isError, text) of one bash call; fails the test if the call waited for a human."""
        c = self.client()
        try:
            r = c.call("bash", {"command": command, "cwd": cwd or self.project, **extra})
        finally:
            c.close()
        assert r.status == 200, r
        text = r.text
        assert "approval" not in text.split("\n", 1)[0], f"asked a human: {text[:300]}"
        return r.result["isError"], text

    def control_secret(self) -> str:
        with open(os.path.join(self.runtime, "control.json"), encoding="utf-8") as f:
            return str(json.load(f).get("secret", ""))

    def leaks(self, text: str) -> list[str]:
        found = [MARKER] if MARKER in text else []
        if TOKEN in text:
            found.append("token")
        secret = self.control_secret()
        if secret and secret in text:
            found.append("control secret")
        return found

    def snapshot(self) -> dict[str, str | None]:
        """Every persistence file an attack may try to write, and its content now."""
        paths = [
            f"{self.home}/.bashrc",
            f"{self.home}/.profile",
            f"{self.home}/.config/autostart/evil.desktop",
            f"{self.home}/.local/bin/git",
            f"{self.home}/.local/bin/evil",
            f"{self.project}/.git/hooks/pre-commit",
            f"{self.project}/.git/config",
            f"{self.project}/.vscode/settings.json",
            f"{self.project}/.envrc",
            f"{self.project}/.git/commondir",
            f"{self.project}/.idea/workspace.xml",
            f"{self.home}/.config/git/config",
            self.config,
            f"{self.runtime}/control.json",
            f"{self.home}/Documents/keep.txt",
        ]
        out: dict[str, str | None] = {}
        for p in paths:
            try:
                out[p] = read_text(p)
            except OSError:
                out[p] = None
        return out


def _plant(world: World) -> None:
    for rel, text in SECRETS.items():
        path = os.path.join(world.home, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, 0o600)
    with open(os.path.join(world.home, ".bashrc"), "w") as f:
        f.write(BASHRC)
    with open(os.path.join(world.home, ".gitconfig"), "w") as f:
        f.write("[user]\n\tname = Box Test\n\temail = box@example.invalid\n")
    os.makedirs(os.path.join(world.home, ".local", "bin"))
    os.makedirs(os.path.join(world.home, "Documents"))
    with open(os.path.join(world.home, "Documents", "keep.txt"), "w") as f:
        f.write("the user's document\n")
    # The interpreter the tests run may live in the real user's ~/.pyenv (here /root/.pyenv,
    # another user's home for this made-up one): link it, as if pyenv lived in this home.
    real_python = os.path.realpath(sys.executable)
    if "/.pyenv/" in real_python:
        pyenv = real_python.split("/.pyenv/", 1)[0] + "/.pyenv"
        os.symlink(pyenv, os.path.join(world.home, ".pyenv"))
    os.makedirs(world.xdg, mode=0o700)
    with open(os.path.join(world.xdg, "bus"), "w") as f:
        f.write("FAKESECRET-dbus-socket-stand-in\n")
    os.makedirs(world.project)
    env = {**os.environ, "HOME": world.home}
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "--allow-empty", "-m", "init"],
    ):
        subprocess.run(argv, cwd=world.project, env=env, check=True, capture_output=True)
    with open(os.path.join(world.project, ".env"), "w") as f:  # untracked, secret-looking
        f.write("DATABASE_PASSWORD=FAKESECRET-dotenv-44e1\n")


def make_world(config: dict[str, Any] | None = None) -> World:
    base = tempfile.mkdtemp(prefix="a2a-box-", dir="/var/tmp")
    home = os.path.join(base, "home")
    os.makedirs(home)
    world = World(
        base=base,
        home=home,
        project=os.path.join(home, "proj"),
        runtime=os.path.join(base, "run"),
        config=os.path.join(home, ".config", "omp-a2a-bridge", "config.json"),
        xdg=os.path.join(base, "xdg"),
        log=os.path.join(base, "serve.log"),
    )
    _plant(world)
    os.makedirs(os.path.dirname(world.config), exist_ok=True)
    fd = os.open(world.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"roots": [home], "approval": {"timeout_s": 0.5}, **(config or {})}, f)
    return world


def serve(world: World, as_user: bool, wrap: Sequence[str] = ()) -> None:
    """Start the bridge for ``world`` (as the desktop user, or root), its argv after ``wrap``
    (a program that runs it in another setting: a user namespace that may not make another)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("A2A_BRIDGE_")}
    env = {k: v for k, v in env.items() if not looks_secret(k)}
    env.update(
        HOME=world.home,
        XDG_RUNTIME_DIR=world.xdg,
        A2A_BRIDGE_TOKEN=TOKEN,
        A2A_BRIDGE_RUNTIME_DIR=world.runtime,
        A2A_BRIDGE_AUDIT=os.path.join(world.home, ".local", "state", "a2a", "audit.jsonl"),
        A2A_BRIDGE_LOG=os.path.join(world.home, ".local", "state", "a2a", "bridge.log"),
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PYTHONPATH=REPO,
    )
    env.pop("A2A_BRIDGE_CONFIG", None)
    argv = [*wrap, *(desktop_user() if as_user else []), sys.executable, "-m"]
    argv.append("omp_a2a_bridge.server")
    with open(world.log, "w") as err:
        world.proc = subprocess.Popen(
            [*argv, "serve", "--port", "0"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            cwd=world.home,
        )
    assert world.proc.stdout is not None
    line = world.proc.stdout.readline()
    assert "listening on" in line, (line, read_text(world.log))
    world.port = int(line.strip().rsplit(":", 1)[1].strip("/").split("/")[0])
    world.files = {k: v for k, v in world.snapshot().items() if v is not None}


def stop(world: World) -> None:
    if world.proc is not None:
        world.proc.send_signal(signal.SIGTERM)
        try:
            world.proc.wait(10)
        except subprocess.TimeoutExpired:
            world.proc.kill()
            world.proc.wait(5)
    shutil.rmtree(world.base, ignore_errors=True)


def world_fixture(as_user: bool, config: dict[str, Any] | None = None) -> Iterator[World]:
    require_bwrap()
    world = make_world(config)
    try:
        serve(world, as_user)
        yield world
    finally:
        stop(world)

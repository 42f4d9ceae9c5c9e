"""The box's other edges (issue 22 item 4), over real HTTP: ``grep``/``find`` walk in a
read-only, offline box, and stdio upstream servers run in a box of their own.

A temp HOME with planted fake secrets is the only root (as with the default config). The walk
tests force the race the bridge cannot win by checking alone: the walked folder is swapped for a
symlink to ~/.ssh after every check the bridge makes, right as rg starts, so only the box's masks
stand between rg and the key. The same race without the box leaks (the control), which shows
the tests can fail.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from omp_a2a_bridge.server.box import edges
from omp_a2a_bridge.server.tools import grep as grep_tool
from omp_a2a_bridge.server.tools import search as search_tool

from ..integration.test_upstream_servers import ready
from ..support.boxworld import box_home, world_fixture
from ..support.helpers import wait_for

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the box is Linux-only")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEY = "PLANTED-SSH-PRIVATE-KEY"


@pytest.fixture
def home(tmp_path, monkeypatch, env):
    files = {
        ".ssh/id_rsa": f"{KEY}\n",
        ".ssh/plain.txt": "PLANTED-SSH-PLAIN needle\n",
        ".bashrc": "# PLANTED-BASHRC\n",
        "project/sub/plain.txt": "PUBLIC needle\n",
    }
    return box_home(tmp_path, monkeypatch, files)


@pytest.fixture
def agent(home, start_bridge):
    return start_bridge({"roots": [str(home)]}).client()


def _spy_popen(monkeypatch, swap, back=None) -> list[list[str]]:
    """Run ``swap()`` as the bridge spawns rg (after the plan, before rg's first look); with
    ``back``, wait until rg has walked and run ``back()`` before the bridge judges a line
    of its output (the swap-and-back an attacker times)."""
    real = subprocess.Popen
    seen: list[list[str]] = []

    def popen(argv, *a, **kw):
        if isinstance(argv, list) and any(os.fsdecode(x) in ("--files", "--regexp") for x in argv):
            seen.append([os.fsdecode(x) for x in argv])
            swap()
            proc = real(argv, *a, **kw)
            if back is not None:
                proc.wait(30)  # its output (a few lines) waits in the pipe
                back()
            return proc
        return real(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return seen


def _no_path_check(monkeypatch) -> None:
    """Take away the bridge's own after-start check (path still names the opened folder):
    what remains is the box (or, without one, nothing)."""
    real = search_tool.start_rg

    def start(run, shown=""):
        fd, run.dir_fd = run.dir_fd, None
        try:
            real(run, shown)
        finally:
            run.dir_fd = fd

    monkeypatch.setattr(search_tool, "start_rg", start)
    monkeypatch.setattr(grep_tool, "start_rg", start)


def _swap(home) -> None:
    sub = home / "project" / "sub"
    os.rename(sub, home / "project" / ".parked")
    os.symlink(home / ".ssh", sub)


def _back(home) -> None:
    sub = home / "project" / "sub"
    os.unlink(sub)
    os.rename(home / "project" / ".parked", sub)


CALLS = {
    "grep": {"pattern": "needle", "path": "project/sub", "hidden": True},
    "find": {"pattern": "*", "path": "project/sub", "hidden": True},
}


@pytest.mark.parametrize("tool", list(CALLS))
def test_a_walk_runs_read_only_offline_and_masked(agent, home, monkeypatch, tool):
    seen = _spy_popen(monkeypatch, lambda: None)
    r = agent.call(tool, {**CALLS[tool], "path": "project"})
    assert not r.result["isError"], r.text
    assert "plain.txt" in r.text and "PLANTED" not in r.text, r.text
    argv = seen[-1]
    assert os.path.basename(argv[0]) == "bwrap", argv
    assert "--unshare-net" in argv and "--bind" not in argv  # offline, nothing writable
    assert argv[argv.index("--chdir") + 1] == str(home / "project")  # by path, not an fd
    assert ["--tmpfs", str(home / ".ssh")] == argv[argv.index(str(home / ".ssh")) - 1 :][:2]


@pytest.mark.parametrize("tool", list(CALLS))
def test_a_folder_swapped_for_a_symlink_to_ssh_mid_walk_shows_nothing(
    agent, home, monkeypatch, tool
):
    """Every check the bridge makes has passed; the swap wins the race, and is undone before
    the bridge judges rg's output. In the box the walk goes through the symlink by path and
    meets the mask over ~/.ssh: an empty folder."""
    _no_path_check(monkeypatch)
    seen = _spy_popen(monkeypatch, lambda: _swap(home), lambda: _back(home))
    r = agent.call(tool, CALLS[tool])
    assert seen and not os.path.islink(home / "project" / "sub")  # swapped and back
    assert "PLANTED" not in r.text and "id_rsa" not in r.text, r.text
    assert "plain.txt" not in r.text, r.text  # ~/.ssh/plain.txt: masked, not just filtered


@pytest.mark.parametrize("tool", list(CALLS))
def test_control_without_the_box_the_same_race_leaks(agent, home, monkeypatch, tool):
    """The control: no box, and rg started by path (as where a descriptor cannot be a cwd):
    the same race reads ~/.ssh/plain.txt: swapped back, the name it is judged by is harmless."""
    _no_path_check(monkeypatch)
    monkeypatch.setattr(edges.probe, "host", lambda: None)
    monkeypatch.setattr("omp_a2a_bridge.server.tools.rg.FD_CWD", False)
    monkeypatch.setattr(search_tool, "FD_CWD", False)
    _spy_popen(monkeypatch, lambda: _swap(home), lambda: _back(home))
    r = agent.call(tool, CALLS[tool])
    assert "plain.txt" in r.text, r.text  # what was in ~/.ssh came back: the box matters
    if tool == "grep":
        assert "PLANTED-SSH-PLAIN" in r.text, r.text


# -- stdio upstream servers ---------------------------------------------------------------------


def _hex(path) -> str:
    return str(path).encode().hex()


def _fs_server(home, **extra) -> dict:
    spec = {
        "command": sys.executable,
        # by its path: a script named in the arguments is shown to the boxed server (a clone
        # under /tmp is hidden behind the box's private /tmp otherwise)
        "args": [os.path.join(REPO, "tests", "security", "fs_server.py")],
        "cwd": str(home / "project"),
    }
    return {**spec, **extra}


def _upstream(start_bridge, home, **extra):
    tiers = {"mcp__fs__read_file": "allow", "mcp__fs__append": "allow"}
    tiers["mcp__fs__connect"] = "allow"
    running = start_bridge(
        {
            "roots": [str(home)],
            "mcp_servers": {"fs": _fs_server(home, **extra)},
            "approval": {"tiers": tiers},
        }
    )
    view = ready(running, "fs")
    where = "in the box (network on" if extra.get("box", True) else 'outside the box ("box": false)'
    assert view.box.startswith(where), view  # what status, the page and the tray show
    return running.client()


def test_a_boxed_server_cannot_read_ssh_nor_write_bashrc(home, start_bridge):
    c = _upstream(start_bridge, home)
    r = c.call("mcp__fs__read_file", {"hex": _hex(home / ".ssh" / "id_rsa")})
    assert KEY not in r.text, r.text
    r = c.call("mcp__fs__append", {"hex": _hex(home / ".bashrc"), "text": "evil\n"})
    assert r.text.startswith("ERROR"), r.text
    assert (home / ".bashrc").read_text() == "# PLANTED-BASHRC\n"
    r = c.call("mcp__fs__append", {"hex": _hex(home / ".profile"), "text": "evil\n"})
    assert r.text.startswith("ERROR") and not (home / ".profile").exists(), r.text
    # Its project (its cwd, inside a root) is writable; it works.
    r = c.call("mcp__fs__append", {"hex": _hex(home / "project" / "out.txt"), "text": "ok"})
    assert r.text == "WROTE" and (home / "project" / "out.txt").read_text() == "ok"
    r = c.call("mcp__fs__read_file", {"hex": _hex(home / "project" / "sub" / "plain.txt")})
    assert r.text == "CONTENT:PUBLIC needle\n", r.text


def test_a_boxed_server_installed_in_a_top_level_data_folder_still_runs(home, start_bridge):
    """Outside the roots the box hides top-level folders no OS makes (``/srv``...), but never
    the program the human configured: a server whose script lies in one runs, and its
    neighbour files stay hidden."""
    import shutil

    from ..support.boxworld import top_level_folder

    with top_level_folder("a2a-srv-") as top:
        script = os.path.join(top, "tools", "fs_server.py")
        os.makedirs(os.path.dirname(script))
        shutil.copy(os.path.join(REPO, "tests", "security", "fs_server.py"), script)
        other = os.path.join(top, "data", "report.txt")
        os.makedirs(os.path.dirname(other))
        with open(other, "w") as f:
            f.write("PLANTED-DATA-DISK\n")
        venv = os.path.join(top, "tools", ".venv")  # its own venv: packages beside it
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", venv],
            check=True,
        )
        import sysconfig

        here = sysconfig.get_paths()["purelib"]  # the SDK the test server imports
        ours = subprocess.run(
            [
                os.path.join(venv, "bin", "python"),
                "-c",
                "import site; print(site.getsitepackages()[0])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        with open(os.path.join(ours, "deps.pth"), "w") as f:  # read from the venv, in the box
            f.write(here + "\n")
        python = os.path.join(venv, "bin", "python")
        c = _upstream(start_bridge, home, command=python, args=[script])
        r = c.call("mcp__fs__read_file", {"hex": _hex(home / "project" / "sub" / "plain.txt")})
        assert r.text == "CONTENT:PUBLIC needle\n", r.text
        r = c.call("mcp__fs__read_file", {"hex": _hex(other)})
        assert "PLANTED-DATA-DISK" not in r.text, r.text


def test_a_boxed_server_cannot_reach_an_abstract_socket_outside(home, start_bridge):
    """A stdio server's box has network by default, so it shares the bridge's network
    namespace, where X11's ``@/tmp/.X11-unix/X0`` and an abstract session bus live: the box
    starts under Landlock's abstract-socket scope (``server/box/scope.py``)."""
    import secrets
    import socket
    import threading

    from omp_a2a_bridge.server.box import scope

    if scope.abi() < scope.SCOPE_ABI:
        message = f"Landlock scopes need Linux 6.12 (ABI 6); this kernel has {scope.abi()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    name = f"a2a-x11-{secrets.token_hex(4)}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(4)
    listener.settimeout(0.5)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"PLANTED-ABSTRACT-SOCKET\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        c = _upstream(start_bridge, home)
        r = c.call("mcp__fs__connect", {"hex": name.encode().hex()})
        assert "PLANTED-ABSTRACT-SOCKET" not in r.text and r.text.startswith("ERROR"), r.text
    finally:
        done.set()
        thread.join(5)
        listener.close()


def test_control_a_server_outside_the_box_can(home, start_bridge):
    c = _upstream(start_bridge, home, box=False)
    r = c.call("mcp__fs__read_file", {"hex": _hex(home / ".ssh" / "id_rsa")})
    assert KEY in r.text, r.text
    r = c.call("mcp__fs__append", {"hex": _hex(home / ".bashrc"), "text": "evil\n"})
    assert r.text == "WROTE" and (home / ".bashrc").read_text().endswith("evil\n")


def test_a_server_in_the_home_writes_only_its_tmpdir(home, start_bridge):
    c = _upstream(start_bridge, home, cwd=str(home))
    r = c.call("mcp__fs__append", {"hex": _hex(home / "project" / "x.txt"), "text": "no"})
    assert r.text.startswith("ERROR") and not (home / "project" / "x.txt").exists(), r.text
    r = c.call("mcp__fs__append", {"hex": _hex("/tmp/scratch.txt"), "text": "yes"})
    assert r.text == "WROTE", r.text


def test_a_server_that_cannot_start_in_the_box_says_how_to_run_it_outside(home, start_bridge):
    key = str(home / ".ssh" / "id_rsa")
    needs_key = (  # a masked folder looks empty in the box: no key file, or an empty one
        f"import os, sys; os.path.isfile({key!r}) and open({key!r}).read() "
        f"or sys.exit('no key at {key}')"
    )
    running = start_bridge(
        {
            "roots": [str(home)],
            "mcp_servers": {"gone": {"command": sys.executable, "args": ["-c", needs_key]}},
        }
    )

    def failed():
        views = [s for s in running.runner.snapshot().servers if s.name == "gone"]
        view = views[0] if views else None
        return view and view.state == "failed" and "no key at" in (view.last_error or "") and view

    view = wait_for(failed, 60)
    assert view.last_error.endswith(f"no key at {key}"), view  # its own words, as outside
    assert view.box.startswith("in the box") and '"box": false' in view.box, view


# -- the same as a desktop user (uid 1000 in a user namespace) and as root, in a bridge process --

WORLD_CONFIG = {
    "approval": {
        "timeout_s": 0.5,
        "tiers": {"mcp__fs__read_file": "allow", "mcp__fs__append": "allow"},
    },
    "mcp_servers": {
        "fs": {
            "command": sys.executable,
            "args": [os.path.join(REPO, "tests", "security", "fs_server.py")],
            "cwd": "~/proj",
        }
    },
}


@pytest.fixture(scope="module", params=["root", "user"])
def world(request):
    yield from world_fixture(request.param == "user", WORLD_CONFIG)


def test_walks_and_a_boxed_server_in_a_bridge_process(world):
    c = world.client()
    for tool, args in (
        ("grep", {"pattern": "FAKESECRET|user's document", "path": "~", "hidden": True}),
        ("find", {"pattern": "*", "path": "~", "hidden": True, "no_ignore": True}),
    ):
        r = c.call(tool, {**args, "no_ignore": True})
        assert world.leaks(r.text) == [] and "id_rsa" not in r.text, (tool, r.text)
        assert "Documents/keep.txt" in r.text, (tool, r.text)  # the box walked, as this user
    wait = wait_for(lambda: _fs_ready(c), 30)
    assert wait
    r = c.call("mcp__fs__read_file", {"hex": _hex(os.path.join(world.home, ".ssh", "id_rsa"))})
    assert world.leaks(r.text) == [], r.text
    before = world.snapshot()
    # (A persistence path that does not exist yet in its project, e.g. proj/.envrc, cannot be
    # masked: it is removed when the server stops, as after a bash call; docs/security/box.md.)
    for target in (".bashrc", ".profile", ".local/bin/evil", "proj/.git/config",
                   "proj/.git/hooks/pre-commit", ".config/omp-a2a-bridge/config.json"):  # fmt: skip
        path = os.path.join(world.home, target)
        r = c.call("mcp__fs__append", {"hex": _hex(path), "text": "evil\n"})
        # Refused, or written into the tmpfs that masks a private folder (gone with the box).
        assert r.text.startswith("ERROR") or target.startswith(".config/"), (target, r.text)
    assert world.snapshot() == before  # nothing changed on the disk
    r = c.call("mcp__fs__append", {"hex": _hex(os.path.join(world.project, "o.txt")), "text": "x"})
    assert r.text == "WROTE", r.text


def _fs_ready(c) -> bool:
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    return "mcp__fs__append" in names

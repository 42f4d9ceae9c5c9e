"""grep/find on ripgrep, ls, and the worker pools: behaviour through the real HTTP endpoint.

The processes are real (the wheel's ``rg``); "gone" is checked in /proc, not by a mock.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import time

import pytest

from omp_a2a_bridge.server.tools.fileio import glob_regex, is_binary, walk_files
from omp_a2a_bridge.server.tools.rg import rg_path

from ..support.helpers import err, in_thread, ok, process_gone, put, wait_for

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process checks")


def rg_children() -> list[int]:
    """Pids of rg processes whose parent is this test process (the bridge runs in it)."""
    me = os.getpid()
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == me and os.readlink(f"/proc/{name}/exe") == rg_path():
                pids.append(int(name))
        except OSError:
            continue
    return pids


def twin(running, c):
    """Another HTTP connection in the same MCP session (one connection carries one call)."""
    other = running.client()
    other.sid = c.sid
    return other


def sparse(root: str, name: str = "huge.log", size: int = 1 << 40) -> str:
    """A huge sparse file: rg reads zeros for minutes when it is named directly."""
    path = os.path.join(root, name)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


# -- the binary --------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_the_wheels_rg_is_the_one_used(bridge, root):
    wheel_rg = os.path.join(sysconfig.get_path("scripts"), "rg")
    assert os.path.isfile(wheel_rg), "pip install should have put the ripgrep wheel's rg here"
    assert rg_path() == wheel_rg
    sparse(root)
    c = bridge.client()
    _t, _out = in_thread(c.call, "grep", {"pattern": "zzz", "path": "huge.log"}, 5)
    pids = wait_for(rg_children, timeout=60)
    assert os.readlink(f"/proc/{pids[0]}/exe") == wheel_rg
    other = bridge.client()
    other.sid = c.sid
    other.rpc("notifications/cancelled", {"requestId": 5}, req_id=None)
    _t.join(10)


# -- cancel, timeout, shutdown -----------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_cancel_of_a_running_grep_kills_rg(bridge, root):
    sparse(root)
    c = bridge.client()
    t, out = in_thread(c.call, "grep", {"pattern": "zzz", "path": "huge.log"}, 77)
    pids = wait_for(rg_children, timeout=60)
    other = bridge.client()
    other.sid = c.sid
    assert other.rpc("notifications/cancelled", {"requestId": 77}, req_id=None).status == 202
    t.join(60)
    assert out[0].status == 202 and out[0].raw == b""  # cancelled: no JSON-RPC response
    for pid in pids:
        wait_for(lambda pid=pid: process_gone(pid), timeout=30)
    # The 202 goes out first; the done record is queued when the cancelled task unwinds, just
    # after it kills rg: a loaded machine can run this thread in between (audit() flushes only
    # what is already queued).
    done = wait_for(
        lambda: [r for r in bridge.audit() if r["phase"] == "done" and r["tool"] == "grep"]
    )
    assert done[-1]["outcome"] == "cancelled"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_timeout_kills_rg_and_says_so(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"grep": "allow"}}, "limits": {"search_timeout_s": 0.5}}
    )
    sparse(running.env["root"])
    put(running.env["root"], "small.txt", "zzz\n")
    text = ok(running.client().call("grep", {"pattern": "zzz", "path": "huge.log"}))
    assert "search stopped after 0.5 s" in text
    wait_for(lambda: not rg_children(), timeout=30)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_shutdown_kills_running_rg(start_bridge):
    running = start_bridge({"approval": {"tiers": {"grep": "allow"}}})
    sparse(running.env["root"])
    c = running.client()
    _t, _out = in_thread(c.call, "grep", {"pattern": "zzz", "path": "huge.log"})
    pids = wait_for(rg_children, timeout=60)
    running.runner.stop()
    for pid in pids:
        wait_for(lambda pid=pid: process_gone(pid), timeout=30)


def test_pathological_regex_cannot_block_ping(bridge, root):
    put(root, "underline.md", "Title\n" + "=" * 200_000 + "\n")
    put(root, "long.log", "x" * 100_000 + " error " + "y" * 100_000 + "\n")
    c = bridge.client()
    calls = [
        in_thread(twin(bridge, c).call, "grep", {"pattern": "(=+)+$x"}),
        in_thread(twin(bridge, c).call, "grep", {"pattern": ".*error.*timeout"}),
        in_thread(twin(bridge, c).call, "grep", {"pattern": "(x+x+)+y"}),
    ]
    pinger = bridge.client()
    worst = 0.0
    for _ in range(20):
        t0 = time.monotonic()
        assert pinger.rpc("ping").status == 200
        worst = max(worst, time.monotonic() - t0)
    assert worst < 3.0  # generous: Python's re froze the whole process for 8.6 s here
    for t, out in calls:
        t.join(30)
        assert out and out[0].status == 200
    assert "no matches" in calls[0][1][0].text


# -- same matches and line numbers as rg -------------------------------------------------------


def _fixture_tree(root: str) -> None:
    put(root, "ff.txt", "one\n\x0cneedle after form feed\nthree needle\n")
    put(root, "crlf.txt", "a\r\nneedle crlf\r\nb\r\nneedle again\r\n")
    put(root, "ls.txt", "first\u2028needle on same line\nnext needle\n")
    put(root, "vt.txt", "x\x0bneedle\x1c\x1d\x1eneedle\x85z\nneedle\n")
    put(root, "long.txt", "a" * 50_000 + "needle" + "b" * 50_000 + "\nshort needle\n")
    put(root, "bin.dat", b"needle\x00\x01\x02needle\n")
    put(root, "late_bin.dat", b"needle\n" * 3 + b"\x00" + b"needle\n")
    put(root, "u16.txt", "\ufeffline\nneedle utf16\n".encode("utf-16-le"))
    put(root, "latin1.txt", "caf\xe9 needle\n".encode("latin-1"))
    put(root, ".gitignore", "ignored/\n*.skip\n")
    put(root, "ignored/x.txt", "needle ignored\n")
    put(root, "a.skip", "needle skipped\n")
    put(root, ".hidden/h.txt", "needle hidden\n")
    put(root, ".dot.txt", "needle dotfile\n")
    put(root, "src/deep/d.py", "# needle\n" * 5)


def _plain_rg(root: str, *flags: str) -> set[tuple[str, int]]:
    argv = [rg_path(), "--no-config", "--no-require-git", "-n", "-H", "--null", "--no-heading"]
    argv += ["--glob", "!.git", *flags, "needle", "."]
    out = subprocess.run(argv, cwd=root, capture_output=True, check=False).stdout
    found = set()
    for rec in out.split(b"\n"):
        if b"\0" in rec:
            path, _, rest = rec.partition(b"\0")
            found.add((path.decode().removeprefix("./"), int(rest.split(b":", 1)[0])))
    return found


def _ours(text: str) -> set[tuple[str, int]]:
    found = set()
    for line in text.splitlines():
        m = re.match(r"^(.*?):(\d+):", line)
        if m:
            found.add((m.group(1), int(m.group(2))))
    return found


@pytest.mark.parametrize(
    ("args", "flags"),
    [({}, ()), ({"hidden": True}, ("--hidden",)), ({"no_ignore": True}, ("--no-ignore",))],
)
def test_matches_and_line_numbers_equal_plain_rg(c, root, args, flags):
    _fixture_tree(root)
    text = ok(c.call("grep", {"pattern": "needle", **args}))
    expected = _plain_rg(root, *flags)
    assert _ours(text) == expected
    assert ("ff.txt", 2) in expected and ("crlf.txt", 4) in expected
    assert ("ls.txt", 2) in expected and ("vt.txt", 2) in expected
    assert ("u16.txt", 2) in expected  # UTF-16 with a BOM is searched as text
    assert not any(p == "bin.dat" for p, _ in expected)  # binary file skipped
    lines = text.splitlines()
    assert "crlf.txt:2:needle crlf" in lines  # no trailing \r
    assert "u16.txt:2:needle utf16" in lines
    assert "latin1.txt:1:caf\ufffd needle" in lines
    long_line = next(ln for ln in lines if ln.startswith("long.txt:1:"))
    assert long_line.endswith("…") and len(long_line) < 400
    if "hidden" in args:
        assert ".hidden/h.txt:1:needle hidden" in lines
    else:
        assert not any(".hidden" in ln or ".dot" in ln for ln in lines)
    if "no_ignore" in args:
        assert "ignored/x.txt:1:needle ignored" in lines
    else:
        assert not any("ignored/" in ln or "a.skip" in ln for ln in lines)


def test_find_honours_ignore_and_hidden_switches(c, root):
    _fixture_tree(root)
    default = ok(c.call("find", {"pattern": "*.txt"})).splitlines()
    assert "ignored/x.txt" not in default and ".hidden/h.txt" not in default
    assert "ff.txt" in default and "u16.txt" in default
    assert ".hidden/h.txt" in ok(c.call("find", {"pattern": "*.txt", "hidden": True}))
    assert "ignored/x.txt" in ok(c.call("find", {"pattern": "*.txt", "no_ignore": True}))
    assert ok(c.call("find", {"pattern": "deep"})) == "src/deep/"


def _old_grep(root: str, pattern: str, file_glob: str | None = None) -> list[str]:
    """The pre-ripgrep algorithm (Python re, line by line), for the "same as before" pin."""
    rx = re.compile(pattern)
    grx = glob_regex(file_glob) if file_glob else None
    out = []
    for rel, path, is_dir in walk_files(root, 100_000):
        if is_dir or (grx is not None and not grx.match(rel)):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if is_binary(data[:8192]):
            continue
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            if rx.search(line):
                out.append(f"{rel}:{n}:{line}")
    return sorted(out)


def _old_find(root: str, pattern: str) -> list[str]:
    rx = glob_regex(pattern)
    return sorted(r + "/" if d else r for r, _p, d in walk_files(root, 100_000) if rx.match(r))


def test_grep_and_find_over_a_normal_project_return_the_same_as_before(c, root):
    files = {
        "README.md": "# Demo\n\nRun `make test`.\n",
        "pyproject.toml": '[project]\nname = "demo"\nversion = "0.1"\n',
        "src/demo/__init__.py": "from .core import run\n\n__all__ = ['run']\n",
        "src/demo/core.py": "import os\n\n\ndef run(x):\n    # TODO: speed up\n    return x * 2\n",
        "src/demo/util/io.py": "def read(path):\n    with open(path) as f:\n        return f.read()\n",  # noqa: E501
        "tests/test_core.py": "from demo import run\n\n\ndef test_run():\n    assert run(2) == 4\n",
        "docs/guide.md": "See `run` in core.py. TODO: more docs\n",
        "node_modules/lib/index.js": "function run() {}\n",
        "src/demo/__pycache__/core.cpython-311.pyc": b"\x00\x01run",
        "logo.png": b"\x89PNG\r\n\x1a\n\x00\x00run",
    }
    for rel, data in files.items():
        put(root, rel, data)
    for pattern, glob in [("run", None), ("TODO", None), (r"def \w+\(", "*.py"), ("x", "src/**")]:
        args = {"pattern": pattern, **({"glob": glob} if glob else {})}
        text = ok(c.call("grep", args))
        assert text.splitlines() == _old_grep(root, pattern, glob), (pattern, glob)
    for pattern in ("*.py", "src/**/*.py", "demo", "*.md", "**"):
        text = ok(c.call("find", {"pattern": pattern}))
        assert text.splitlines() == _old_find(root, pattern), pattern


# -- bad input ---------------------------------------------------------------------------------


def test_bad_patterns_globs_and_paths_are_short_errors(c, root):
    put(root, "a.txt", "x\n")
    assert err(c.call("grep", {"pattern": "("})).startswith("invalid regex '(':")
    assert err(c.call("grep", {"pattern": "x", "glob": "["})).startswith("invalid glob '[':")
    assert "NUL" in err(c.call("grep", {"pattern": "a\x00b"}))
    assert "NUL" in err(c.call("find", {"pattern": "a\x00b"}))
    assert "NUL" in err(c.call("grep", {"pattern": "x", "glob": "a\x00"}))
    for tool in ("grep", "find", "ls"):
        args = {"pattern": "x"} if tool != "ls" else {}
        r = c.call(tool, {**args, "path": "bad\x00path"})
        assert r.status == 200 and r.result["isError"] is True
        assert "Traceback" not in r.text
    os.mkfifo(os.path.join(root, "pipe"))
    assert err(c.call("grep", {"pattern": "x", "path": "pipe"})) == "pipe: not a regular file"
    assert "look-around" in err(c.call("grep", {"pattern": "(?=x)"}))  # rg says why


@pytest.mark.skipif(sys.platform == "darwin", reason="macOS refuses non-UTF-8 names")
def test_non_utf8_names_are_shown_escaped_never_a_500(c, root):
    raw = os.path.join(os.fsencode(root), b"caf\xe9.txt")
    with open(raw, "wb") as f:
        f.write(b"needle\n")
    os.mkdir(os.path.join(os.fsencode(root), b"d\xff"))
    assert ok(c.call("grep", {"pattern": "needle"})) == "caf\\xe9.txt:1:needle"
    assert "caf\\xe9.txt" in ok(c.call("find", {"pattern": "*.txt"}))
    listing = ok(c.call("ls", {}))
    assert "caf\\xe9.txt" in listing and "d\\xff/" in listing
    # The shown name works as a path again.
    assert ok(c.call("grep", {"pattern": "needle", "path": "caf\\xe9.txt"})).endswith(":1:needle")
    assert "needle" in ok(c.call("read", {"path": "caf\\xe9.txt"}))
    assert "(empty directory)" in ok(c.call("ls", {"path": "d\\xff"}))


# -- pools -------------------------------------------------------------------------------------


def test_queued_work_shows_in_the_audit_and_ls_is_not_starved_by_greps(bridge, root):
    """Eight greps that run until cancelled fill the search pool and its queue; an ls of a
    small directory still answers (it has its own pool), and a cancelled queued grep never
    starts rg."""
    from omp_a2a_bridge.server.tools import pools

    sparse(root)
    os.mkdir(os.path.join(root, "small"))
    put(root, "small/a.txt", "a")
    c = bridge.client()
    n = pools.SIZES[pools.Pool.SEARCH] + 2
    runs = [
        in_thread(twin(bridge, c).call, "grep", {"pattern": "zzz", "path": "huge.log"}, 1000 + i)
        for i in range(n)
    ]
    wait_for(lambda: len(rg_children()) >= pools.SIZES[pools.Pool.SEARCH], timeout=60)
    assert "a.txt" in ok(bridge.client().call("ls", {"path": "small"}))
    assert len(rg_children()) == pools.SIZES[pools.Pool.SEARCH]  # the rest are queued
    other = bridge.client()
    other.sid = c.sid
    for i in range(n):
        other.rpc("notifications/cancelled", {"requestId": 1000 + i}, req_id=None)
    for t, out in runs:
        t.join(60)
        assert out[0].status == 202 and out[0].raw == b""  # cancelled: no JSON-RPC response
    wait_for(lambda: not rg_children(), timeout=30)
    ls_done = [r for r in bridge.audit() if r["phase"] == "done" and r["tool"] == "ls"]
    assert ls_done[-1]["queue_ms"] >= 0 and ls_done[-1]["outcome"] == "ok"


def test_queue_wait_is_recorded(start_bridge, monkeypatch):
    """With a one-worker search pool, a second find waits for the first: its queue_ms > 0."""
    from omp_a2a_bridge.server.tools import pools

    running = start_bridge({"approval": {"tiers": {"grep": "allow", "find": "allow"}}})
    sparse(running.env["root"])
    c = running.client()
    size = pools.SIZES[pools.Pool.SEARCH]
    blockers = [
        in_thread(twin(running, c).call, "grep", {"pattern": "zzz", "path": "huge.log"}, 2000 + i)
        for i in range(size)
    ]
    wait_for(lambda: len(rg_children()) >= size, timeout=60)
    queued = in_thread(twin(running, c).call, "find", {"pattern": "*.log"}, 3000)
    time.sleep(0.3)  # let it sit in the queue: the amount waited is what is measured
    other = running.client()
    other.sid = c.sid
    for i in range(size):
        other.rpc("notifications/cancelled", {"requestId": 2000 + i}, req_id=None)
    for t, _ in blockers:
        t.join(60)
    queued[0].join(10)
    assert queued[1][0].result["isError"] is False
    done = [r for r in running.audit() if r["phase"] == "done" and r["tool"] == "find"]
    assert done[-1]["queue_ms"] >= 200

"""Built-in tools through the real HTTP endpoint: happy paths, refusals, caps, escalation."""

from __future__ import annotations

import base64
import io
import os
import signal
import stat
import time

import pytest
from PIL import Image

from ..support.helpers import (
    STOP_LIMIT_S,
    err,
    in_thread,
    ok,
    process_gone,
    put,
    read_text,
    wait_for,
)

# -- catalogue -------------------------------------------------------------------------------


def test_tools_list_schemas_and_annotations(c):
    r = c.rpc("tools/list", {"cursor": "ignored"})
    tools = r.result["tools"]
    assert "nextCursor" not in r.result
    by = {t["name"]: t for t in tools}
    assert list(by) == ["read", "ls", "find", "grep", "write", "edit", "bash"]
    for t in tools:
        s = t["inputSchema"]
        assert s["type"] == "object" and s["additionalProperties"] is False
        assert all(p.get("description") for p in s["properties"].values()), t["name"]
        assert t["description"]
    assert by["read"]["annotations"]["readOnlyHint"] is True
    assert by["read"]["annotations"]["openWorldHint"] is False
    assert by["bash"]["annotations"]["destructiveHint"] is True
    assert by["bash"]["annotations"]["openWorldHint"] is True
    assert by["write"]["annotations"]["readOnlyHint"] is False


def test_deny_lists_and_deny_tier_hide_tools(start_bridge):
    running = start_bridge({"deny": ["bash"], "approval": {"tiers": {"write": "deny"}}})
    c = running.client()
    names = [t["name"] for t in c.rpc("tools/list").result["tools"]]
    assert "bash" not in names and "write" not in names and "read" in names
    for name in ("bash", "write", "xd://bash", "mcp__x__y", "nope"):
        assert err(c.call(name, {})) == f"tool '{name}' is not exposed by this bridge"
    assert err(c.rpc("tools/call", {"arguments": {}})) == "tool '' is not exposed by this bridge"


def test_schema_failures_name_the_field(c):
    assert err(c.call("read", {})) == "invalid arguments for 'read': 'path' is a required property"
    assert "field 'offset'" in err(c.call("read", {"path": "x", "offset": 0}))
    assert "field 'limit'" in err(c.call("read", {"path": "x", "limit": "ten"}))
    assert "'bogus' was unexpected" in err(c.call("ls", {"bogus": 1}))
    assert err(c.call("ls", [1, 2])) == "invalid arguments for 'ls': arguments must be an object"


# -- read ------------------------------------------------------------------------------------


def test_read_numbers_lines_and_pages(c, root):
    put(root, "a.txt", "".join(f"line {i}\n" for i in range(1, 11)))
    assert ok(c.call("read", {"path": "a.txt", "limit": 2})) == (
        "    1\tline 1\n    2\tline 2\n… more lines follow; continue with offset=3"
    )
    assert ok(c.call("read", {"path": "a.txt", "offset": 9})) == "    9\tline 9\n   10\tline 10"
    assert "offset 20 is past the end" in err(c.call("read", {"path": "a.txt", "offset": 20}))
    put(root, "empty.txt", "")
    assert "(empty file)" in ok(c.call("read", {"path": "empty.txt"}))


def test_read_cuts_long_lines_and_replaces_bad_utf8(c, root):
    put(root, "long.txt", "x" * 5000 + "\n")
    text = ok(c.call("read", {"path": "long.txt"}))
    assert "[line cut: 5000 characters]" in text and len(text) < 2200
    put(root, "latin.txt", b"caf\xe9\n")
    assert ok(c.call("read", {"path": "latin.txt"})) == "    1\tcaf\ufffd"


def test_read_size_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"read": "allow"}}, "limits": {"read_max_bytes": 1000}}
    )
    put(running.env["root"], "big.txt", "y" * 50 + "\n" * 1 + ("z" * 50 + "\n") * 100)
    text = ok(running.client().call("read", {"path": "big.txt"}))
    assert len(text) < 1200 and "more lines follow" in text


def test_read_refusals(c, root):
    put(root, "bin.dat", b"\x00\x01\x02binary")
    assert "binary file" in err(c.call("read", {"path": "bin.dat"}))
    os.mkdir(os.path.join(root, "d"))
    assert "is a directory" in err(c.call("read", {"path": "d"}))
    assert err(c.call("read", {"path": "missing.txt"})) == "missing.txt: not found"


def test_read_image_round_trip(c, root):
    buf = io.BytesIO()
    Image.new("RGB", (4, 3), (255, 0, 0)).save(buf, "PNG")
    put(root, "pic.png", buf.getvalue())
    r = c.call("read", {"path": "pic.png"})
    [block] = r.result["content"]
    assert block["type"] == "image" and block["mimeType"] == "image/png"
    img = Image.open(io.BytesIO(base64.b64decode(block["data"])))
    assert img.size == (4, 3) and img.getpixel((0, 0)) == (255, 0, 0)
    buf = io.BytesIO()
    Image.new("RGB", (2, 2)).save(buf, "JPEG")
    put(root, "pic.jpg", buf.getvalue())
    assert c.call("read", {"path": "pic.jpg"}).result["content"][0]["mimeType"] == "image/jpeg"


def test_read_image_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"read": "allow"}}, "limits": {"image_max_bytes": 100}}
    )
    buf = io.BytesIO()
    Image.effect_noise((64, 64), 50).convert("RGB").save(buf, "PNG")
    put(running.env["root"], "big.png", buf.getvalue())
    assert "over the 100-byte limit" in err(running.client().call("read", {"path": "big.png"}))


# -- write / edit ------------------------------------------------------------------------------


def test_write_creates_parents_and_keeps_mode(c, root):
    assert ok(c.call("write", {"path": "new/deep/f.txt", "content": "héllo"})) == (
        "wrote 6 bytes to new/deep/f.txt (created)"
    )
    path = os.path.join(root, "new/deep/f.txt")
    assert read_text(path) == "héllo"
    os.chmod(path, 0o751)  # noqa: S103 - any distinctive mode
    assert "(replaced)" in ok(c.call("write", {"path": path, "content": "x"}))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o751


def test_write_is_atomic_no_partial_file_on_failure(c, root):
    put(root, "keep.txt", "original")
    os.mkdir(os.path.join(root, "adir"))
    # Target is a directory: refused, nothing else touched, no temp file left behind.
    assert "is a directory" in err(c.call("write", {"path": "adir", "content": "x"}))
    # Parent is a file: refused.
    assert "keep.txt/child" in err(c.call("write", {"path": "keep.txt/child", "content": "x"}))
    assert read_text(os.path.join(root, "keep.txt")) == "original"
    leftovers = [f for _, _, fs in os.walk(root) for f in fs if f.startswith(".a2a-")]
    assert leftovers == []


def test_write_size_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"write": "allow"}}, "limits": {"write_max_bytes": 10}}
    )
    text = err(running.client().call("write", {"path": "f", "content": "x" * 11}))
    assert "over the 10-byte limit" in text
    assert not os.path.exists(os.path.join(running.env["root"], "f"))


def test_edit_uniqueness_and_replace_all(c, root):
    path = put(root, "e.py", "a = 1\nb = 1\nc = 2\n")
    os.chmod(path, 0o640)
    assert err(c.call("edit", {"path": "e.py", "old_string": "= 1", "new_string": "= 3"})) == (
        "old_string occurs 2 times in e.py; add surrounding context to make it unique, "
        "or set replace_all to replace every occurrence"
    )
    assert read_text(path) == "a = 1\nb = 1\nc = 2\n"
    assert ok(c.call("edit", {"path": "e.py", "old_string": "c = 2", "new_string": "c = 9"})) == (
        "replaced 1 occurrence in e.py"
    )
    args = {"path": "e.py", "old_string": "= 1", "new_string": "= 0", "replace_all": True}
    assert ok(c.call("edit", args)) == "replaced 2 occurrences in e.py"
    assert read_text(path) == "a = 0\nb = 0\nc = 9\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert err(c.call("edit", {"path": "e.py", "old_string": "zzz", "new_string": "y"})) == (
        "old_string not found in e.py"
    )
    assert "same" in err(c.call("edit", {"path": "e.py", "old_string": "a", "new_string": "a"}))
    put(root, "b.bin", b"\x00abc")
    assert "binary" in err(c.call("edit", {"path": "b.bin", "old_string": "a", "new_string": "b"}))


# -- ls / find / grep --------------------------------------------------------------------------


def test_ls(c, root):
    put(root, "b.txt", "12345")
    os.mkdir(os.path.join(root, "adir"))
    os.symlink("b.txt", os.path.join(root, "link"))
    lines = ok(c.call("ls", {})).splitlines()
    assert lines == [
        f"dir   {'-':>10}  adir/",
        f"file  {5:>10}  b.txt",
        f"link  {'-':>10}  link -> b.txt",
    ]
    assert "not a directory" in err(c.call("ls", {"path": "b.txt"}))
    assert "(empty directory)" in ok(c.call("ls", {"path": "adir"}))


def test_ls_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"ls": "allow"}}, "limits": {"list_max_entries": 3}}
    )
    for i in range(5):
        put(running.env["root"], f"f{i}", "")
    text = ok(running.client().call("ls", {}))
    assert text.splitlines()[-1] == "… 2 more entries not shown" and "f3" not in text


def test_find_globs_and_skips(c, root):
    for rel in ("src/a.py", "src/pkg/b.py", "src/c.txt", ".git/x.py", "node_modules/m.py",
                "__pycache__/p.py", ".venv/v.py", "top.py"):  # fmt: skip
        put(root, rel, "")
    assert ok(c.call("find", {"pattern": "*.py"})).splitlines() == [
        "src/a.py",
        "src/pkg/b.py",
        "top.py",
    ]
    assert ok(c.call("find", {"pattern": "src/**/*.py"})).splitlines() == [
        "src/a.py",
        "src/pkg/b.py",
    ]
    assert ok(c.call("find", {"pattern": "*.py", "path": "src/pkg"})) == "b.py"
    assert ok(c.call("find", {"pattern": "pkg"})) == "src/pkg/"
    assert "no paths" in ok(c.call("find", {"pattern": "*.rs"}))


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        ("[]x]", "]"),
        ("[z-a]", "no paths"),
        ("[^]x]", "no paths"),
        ("[]", "no paths"),
        ("*[]x]*a*b*", "]ab"),  # many stars: the linear matcher takes the same classes
    ],
)
def test_find_takes_any_bracket_expression(c, root, pattern, found):
    """Odd classes an agent may send are globs like any other, never 'failed: error'."""
    put(root, "]", "")
    put(root, "]ab", "")
    assert found in ok(c.call("find", {"pattern": pattern})).splitlines()[0]


def test_find_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"find": "allow"}}, "limits": {"find_max_results": 2}}
    )
    for i in range(5):
        put(running.env["root"], f"f{i}.txt", "")
    text = ok(running.client().call("find", {"pattern": "*.txt"}))
    assert text.splitlines()[-1] == "… 3 more matches not shown; narrow the pattern"


def test_grep(c, root):
    put(root, "a.py", "def foo():\n    return 1\n")
    put(root, "sub/b.py", "FOO = 2\n")
    put(root, "sub/c.txt", "foo in text\n")
    put(root, "bin.dat", b"foo\x00")
    put(root, ".git/config", "foo\n")
    assert ok(c.call("grep", {"pattern": "foo"})).splitlines() == [
        "a.py:1:def foo():",
        "sub/c.txt:1:foo in text",
    ]
    assert ok(
        c.call("grep", {"pattern": "foo", "ignore_case": True, "glob": "*.py"})
    ).splitlines() == [
        "a.py:1:def foo():",
        "sub/b.py:1:FOO = 2",
    ]
    assert ok(c.call("grep", {"pattern": r"return \d", "path": "a.py"})) == "a.py:2:    return 1"
    assert err(c.call("grep", {"pattern": "("})).startswith("invalid regex '(':")
    assert "no matches" in ok(c.call("grep", {"pattern": "nothing-here"}))


def test_grep_cap(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"grep": "allow"}}, "limits": {"grep_max_matches": 3}}
    )
    put(running.env["root"], "m.txt", "hit\n" * 10)
    text = ok(running.client().call("grep", {"pattern": "hit"}))
    assert text.splitlines()[-1] == "… 7 more matches not shown; narrow the pattern or path"


# -- bash --------------------------------------------------------------------------------------


def test_bash_runs_in_root_and_merges_output(c, root):
    out = ok(c.call("bash", {"command": "pwd; echo out; echo err >&2; echo out2"}))
    assert out == f"{os.path.realpath(root)}\nout\nerr\nout2"
    os.mkdir(os.path.join(root, "sub"))
    assert ok(c.call("bash", {"command": "pwd", "cwd": "sub"})).endswith("/sub")
    assert ok(c.call("bash", {"command": "true"})) == "(no output)"


def test_bash_nonzero_exit(c):
    assert err(c.call("bash", {"command": "echo oops; exit 3"})) == "oops\n[exit code 3]"


def test_bash_output_cap_keeps_head_and_tail(start_bridge):
    running = start_bridge(
        {"approval": {"tiers": {"bash": "allow"}}, "limits": {"output_max_bytes": 1000}}
    )
    text = ok(running.client().call("bash", {"command": "seq 1 20000"}))
    assert text.startswith("1\n2\n3\n") and text.endswith("19999\n20000")
    assert "bytes of output elided" in text and len(text) < 1200


def _descends_from_me(pid: int) -> bool:
    """``pid`` is below this test process (the bridge runs in it): another suite's box on the
    same machine numbers its processes from 1 too."""
    me = os.getpid()
    for _ in range(64):
        if pid == me:
            return True
        if pid <= 1:
            return False
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


def _host_pid(pidfile: str) -> int:
    """The host's pid of the process whose pid inside the box is in ``pidfile`` (bash runs in
    the box's own PID namespace since issue 22: ``$!`` is the box's number)."""
    inner = read_text(pidfile).strip()

    def find() -> int | None:
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/status") as f:
                    ns = next(x for x in f if x.startswith("NSpid:")).split()[1:]
            except (OSError, StopIteration):
                continue
            if len(ns) > 1 and ns[-1] == inner and _descends_from_me(int(entry)):
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if f.read().startswith(b"sleep"):
                        return int(entry)
        return None

    return wait_for(find, timeout=30)


def test_bash_timeout_kills_the_process_group(c, root):
    pidfile = os.path.join(root, "pid")
    t0 = time.monotonic()
    args = {"command": f"(sleep 30 & echo $! > {pidfile}; wait)", "timeout_s": 2}
    t, out = in_thread(c.call, "bash", args)
    wait_for(lambda: os.path.exists(pidfile) and read_text(pidfile).strip())
    pid = _host_pid(pidfile)
    t.join(60)
    # Well before the sleep's own 30 s: the 2 s limit ended it. (It was 7 s: the box's start
    # under CI load takes seconds of its own before the limit starts counting.)
    assert time.monotonic() - t0 < 25
    assert "[timed out after 2 s; the process group was killed]" in err(out[0])
    wait_for(lambda: process_gone(pid), timeout=30)


def test_bash_cancel_via_notification_kills_the_child(bridge, root):
    c = bridge.client()
    pidfile = os.path.join(root, "pid2")
    t, out = in_thread(c.call, "bash", {"command": f"sleep 30 & echo $! > {pidfile}; wait"}, 99)
    wait_for(lambda: os.path.exists(pidfile) and read_text(pidfile).strip())
    pid = _host_pid(pidfile)
    other = bridge.client()
    other.sid = c.sid
    assert other.rpc("notifications/cancelled", {"requestId": 99}, req_id=None).status == 202
    t.join(60)
    assert (out[0].status, out[0].raw) == (202, b"")  # the client cancelled: no response
    wait_for(lambda: process_gone(pid), timeout=30)
    # The 202 goes out at once; the call's done record follows when the kill has finished.
    done = wait_for(lambda: [r for r in bridge.audit() if r["phase"] == "done"])
    assert done[-1]["outcome"] == "cancelled"


def test_bash_shutdown_kills_running_command(start_bridge):
    running = start_bridge({"approval": {"tiers": {"bash": "allow"}}})
    c = running.client()
    pidfile = os.path.join(running.env["root"], "pid3")
    _t, _out = in_thread(c.call, "bash", {"command": f"sleep 30 & echo $! > {pidfile}; wait"})
    wait_for(lambda: os.path.exists(pidfile) and read_text(pidfile).strip())
    pid = _host_pid(pidfile)
    t0 = time.monotonic()
    running.runner.stop()
    assert time.monotonic() - t0 < STOP_LIMIT_S
    wait_for(lambda: process_gone(pid), timeout=30)


def test_bash_bad_cwd_and_timeout_cap(c):
    assert "not a directory" in err(c.call("bash", {"command": "true", "cwd": "nope"}))
    assert "at most" in err(c.call("bash", {"command": "true", "timeout_s": 99999}))


# -- escalation --------------------------------------------------------------------------------


@pytest.fixture
def guarded(start_bridge, tmp_path):
    """Default tiers (read allow), no approver: an escalated call is refused at once."""
    return start_bridge()


def test_escalation_outside_roots_dotdot_symlink_and_own_files(guarded, tmp_path):
    root = guarded.env["root"]
    secret = tmp_path / "outside-secret.txt"
    secret.write_text("TOP-SECRET")
    os.symlink(secret, os.path.join(root, "innocent.txt"))
    c = guarded.client()
    put(root, "fine.txt", "fine")
    assert ok(c.call("read", {"path": "fine.txt"})) == "    1\tfine"
    cases = [
        str(secret),
        "../outside-secret.txt",
        "innocent.txt",
        guarded.env["config"],
        guarded.env["audit"],
        "~/.ssh/id_rsa",
    ]
    for path in cases:
        r = c.call("read", {"path": path})
        assert "no approver is available" in err(r), path
        assert "TOP-SECRET" not in r.raw.decode()


def test_escalated_call_shows_why_to_the_approver(guarded, tmp_path):
    guarded.runner.attach_approver("pytest")
    outside = tmp_path / "o.txt"
    outside.write_text("data")
    c = guarded.client()
    t, out = in_thread(c.call, "read", {"path": str(outside)})
    [p] = guarded.pending()
    assert p.escalation.text == f"{outside} is outside the configured roots"
    guarded.runner.decide(p.id, "approve")
    t.join(60)
    assert ok(out[0]) == "    1\tdata"


def test_sensitive_paths_extendable_in_config(start_bridge):
    running = start_bridge({"sensitive_paths": ["~/private-notes"]})
    root = running.env["root"]
    secret_dir = os.path.join(root, "vault")
    os.mkdir(secret_dir)
    running2 = start_bridge({"sensitive_paths": [secret_dir]})
    put(root, "vault/k.txt", "k")
    assert err(running2.client().call("read", {"path": "vault/k.txt"})).startswith("approval")
    assert ok(running.client().call("read", {"path": "vault/k.txt"})) == "    1\tk"


def test_bash_cwd_outside_root_escalates(start_bridge, tmp_path):
    running = start_bridge({"approval": {"tiers": {"bash": "allow"}}})
    c = running.client()
    assert ok(c.call("bash", {"command": "echo hi"})) == "hi"
    r = c.call("bash", {"command": "echo hi", "cwd": str(tmp_path)})
    text = err(r)  # says why and what the agent can do instead
    assert text.startswith("approval required but no approver is available: ")
    assert f"{tmp_path} is outside the configured roots; outside the allowed roots: " in text
    assert f"add the folder to roots, or use a path under {running.env['root']}" in text


def test_io_errors_are_short_texts_and_fifos_never_block(c, root):
    os.mkfifo(os.path.join(root, "pipe"))
    put(root, "f.txt", "hit\n")
    os.mkdir(os.path.join(root, "d"))
    texts = [
        err(c.call("read", {"path": "pipe"})),
        err(c.call("edit", {"path": "pipe", "old_string": "a", "new_string": "b"})),
        err(c.call("edit", {"path": "d", "old_string": "a", "new_string": "b"})),
        err(c.call("ls", {"path": "missing"})),
        err(c.call("write", {"path": "f.txt/x", "content": "x"})),
    ]
    assert texts[0] == "pipe: not a regular file"
    assert texts[3] == "missing: not found"
    assert texts[4] == "f.txt/x: a parent is not a directory"
    assert ok(c.call("grep", {"pattern": "hit"})) == "f.txt:1:hit"  # the FIFO is skipped
    for t in texts:
        assert "Traceback" not in t and "Errno" not in t


def test_signal_module_constants_present():
    # The kill path relies on these on POSIX.
    assert signal.SIGTERM and signal.SIGKILL


def test_read_large_file_streams_in_a_worker(c, root):
    """Over inline_read_max_bytes (64 KiB) the read runs in a thread and streams lines."""
    put(root, "big.log", "".join(f"entry {i:06d}\r\n" for i in range(20000)))  # ~300 KiB, CRLF
    text = ok(c.call("read", {"path": "big.log", "offset": 15000, "limit": 2}))
    assert text == (
        "15000\tentry 014999\n15001\tentry 015000\n… more lines follow; continue with offset=15002"
    )
    tail = ok(c.call("read", {"path": "big.log", "offset": 20000}))
    assert tail == "20000\tentry 019999"


def test_read_from_the_end_over_http(c, root):
    """A negative offset reads the tail of a large file (streamed, in a worker) and of a small
    one (on the loop) alike: numbered from the end, continuation offsets counting back."""
    put(root, "big.log", "".join(f"entry {i:06d}\n" for i in range(50000)))  # ~650 KiB
    assert ok(c.call("read", {"path": "big.log", "offset": -2})) == (
        "   -2\tentry 049998\n   -1\tentry 049999"
    )
    text = ok(c.call("read", {"path": "big.log", "offset": -30000, "limit": 1}))
    assert text == "-30000\tentry 020000\n… more lines follow; continue with offset=-29999"
    put(root, "small.txt", "a\nb\nc")
    assert ok(c.call("read", {"path": "small.txt", "offset": -1})) == "   -1\tc"
    assert ok(c.call("read", {"path": "small.txt", "offset": -3})) == "    1\ta\n    2\tb\n    3\tc"
    assert "offset': 0 is not a line number" in err(c.call("read", {"path": "x", "offset": 0}))


def test_read_write_edit_run_in_the_file_pool(start_bridge, root):
    """read (off the loop), write and edit wait for a FILE-pool worker like ls: a flood of them
    cannot take the default executor the control API and the keyring use, and the audit shows
    how long each waited (``queue_ms``)."""
    import threading

    from omp_a2a_bridge.server.tools import pools

    running = start_bridge({"approval": {"tiers": {"write": "allow", "edit": "allow"}}})
    put(root, "big.txt", "x\n" * 300_000)  # past the inline limit: read goes to a worker
    put(root, "e.txt", "before")
    gate = threading.Event()
    held = [pools.executor(pools.Pool.FILE).submit(gate.wait, 30)]
    held += [
        pools.executor(pools.Pool.FILE).submit(gate.wait, 30)
        for _ in range(pools.SIZES[pools.Pool.FILE] - 1)
    ]
    calls = [
        in_thread(running.client().call, "read", {"path": "big.txt", "limit": 1}),
        in_thread(running.client().call, "write", {"path": "w.txt", "content": "new"}),
        in_thread(
            running.client().call,
            "edit",
            {"path": "e.txt", "old_string": "before", "new_string": "after"},
        ),
    ]
    time.sleep(0.3)  # the stimulus: the calls sit in the FILE queue while every worker is held
    gate.set()
    for t, out in calls:
        t.join(60)
        assert out and out[0].result["isError"] is False, out
    assert read_text(os.path.join(root, "w.txt")) == "new"
    assert read_text(os.path.join(root, "e.txt")) == "after"
    done = {r["tool"]: r for r in running.audit() if r["phase"] == "done"}
    for tool in ("read", "write", "edit"):
        assert done[tool]["queue_ms"] >= 200, (tool, done[tool])
    for f in held:
        f.result(5)

"""The walking tools (grep, find, ls) played as an attacker, over real HTTP.

A temp HOME full of planted fake secrets is the only root, as with the default config; the
bridge's own config and audit log live in it too. No call is approved by anyone (no approver is
attached), so every answer is what an agent gets unattended: no planted secret string and no
protected name may ever appear in it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from omp_a2a_bridge.server.box import probe as box_probe
from omp_a2a_bridge.server.tools.search import CHANGED

from ..support.helpers import in_thread

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX links and modes")

SECRETS = {
    ".ssh/id_rsa": "PLANTED-SSH-PRIVATE-KEY",
    ".ssh/config": "PLANTED-SSH-CONFIG",
    ".aws/credentials": "PLANTED-AWS-SECRET",
    ".netrc": "PLANTED-NETRC-PASSWORD",
    ".password-store/bank.gpg": "PLANTED-PASS-STORE",
    ".gnupg/private-keys-v1.d/k.key": "PLANTED-GPG-KEY",
    ".config/gcloud/credentials.db": "PLANTED-GCLOUD",
    ".kube/config": "PLANTED-KUBECONFIG",
    "project/.env": "PLANTED-DOTENV-TOKEN",
    "project/.env.local": "PLANTED-DOTENV-LOCAL",
    "project/certs/server.pem": "PLANTED-PEM-KEY",
    "project/deploy/id_ed25519": "PLANTED-DEPLOY-KEY",
}
# Names that must never be listed (they sit under a protected dir or are secret-looking).
PROTECTED_NAMES = (
    ".ssh", "id_rsa", ".aws", "credentials", ".netrc", ".password-store", "bank.gpg",
    ".gnupg", "gcloud", ".kube", ".env", "server.pem", "id_ed25519",
)  # fmt: skip
MARKER = "PLANTED-"


@pytest.fixture
def home(tmp_path, monkeypatch, env):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for rel, secret in SECRETS.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{secret}\nneedle\n")
    project = home / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "app.py").write_text("needle = 1\n")
    (project / "README.md").write_text("needle in the readme\n")
    os.symlink(home / ".ssh" / "id_rsa", project / "key_link")  # symlink to a secret file
    os.symlink(home / ".ssh", project / "ssh_link")  # symlink to a protected dir
    os.symlink(home / ".aws" / "gone", project / "dangling")  # dangling, into a protected dir
    os.link(home / ".ssh" / "id_rsa", project / "notes.txt")  # hard link to the key
    # The bridge's own files inside HOME: config and audit (which records our patterns).
    env["config"] = str(home / ".config" / "a2a-bridge" / "config.json")
    env["audit"] = str(home / ".local" / "state" / "a2a-bridge" / "audit.jsonl")
    monkeypatch.setenv("A2A_BRIDGE_CONFIG", env["config"])
    monkeypatch.setenv("A2A_BRIDGE_AUDIT", env["audit"])
    return home


@pytest.fixture
def agent(home, start_bridge):
    running = start_bridge({"roots": [str(home)]})  # default tiers: walkers are allow-tier
    return running.client()


def calls(home) -> list[tuple[str, dict]]:
    h = str(home)
    out: list[tuple[str, dict]] = []
    for path in ("~", h, "project", "~/project", f"{h}/project/../", "."):
        for extra in (
            {},
            {"hidden": True},
            {"no_ignore": True},
            {"hidden": True, "no_ignore": True},
        ):
            out.append(("grep", {"pattern": "PLANTED|needle", "path": path, **extra}))
            out.append(("find", {"pattern": "**", "path": path, **extra}))
            out.append(("find", {"pattern": "*", "path": path, **extra}))
        out.append(("ls", {"path": path}))
    for glob in (".ssh/*", "**/*", "*", ".ssh/**", "**/.ssh/**", "*id_rsa*", "**/.env*", "*.pem"):
        out.append(("grep", {"pattern": ".", "path": "~", "glob": glob, "hidden": True}))
        out.append(("grep", {"pattern": ".", "glob": glob, "hidden": True, "no_ignore": True}))
        out.append(("find", {"pattern": glob, "path": "~", "hidden": True, "no_ignore": True}))
    for name in ("key_link", "notes.txt", "ssh_link", "dangling", ".env", "certs/server.pem"):
        out.append(("grep", {"pattern": ".", "path": f"~/project/{name}"}))
        out.append(("ls", {"path": f"~/project/{name}"}))
        out.append(("find", {"pattern": "*", "path": f"~/project/{name}", "hidden": True}))
    out.append(("grep", {"pattern": ".", "path": "project/ssh_link/"}))
    out.append(("ls", {"path": "project/ssh_link/"}))
    out.append(("grep", {"pattern": "PLANTED", "path": "~/.local", "hidden": True}))
    out.append(("grep", {"pattern": "PLANTED", "path": "~/.config", "hidden": True}))
    return out


def test_no_planted_secret_or_protected_name_ever_leaves(agent, home):
    agent.call("grep", {"pattern": "PLANTED-SSH-PRIVATE-KEY"})  # lands in the audit log
    shown = 0
    for tool, args in calls(home):
        r = agent.call(tool, args)
        assert r.status == 200, (tool, args, r)
        text = r.text
        assert "Traceback" not in text
        assert MARKER not in text, (tool, args, text)
        echoed = text
        for key in ("pattern", "glob", "path"):  # the agent's own words may be echoed back
            if key in args:
                echoed = echoed.replace(args[key], " ")
        words = set(echoed.replace("/", " ").replace(":", " ").split())
        for name in PROTECTED_NAMES:
            assert not any(w == name or w.startswith(name + ".") for w in words), (
                tool, args, name, text,
            )  # fmt: skip
        assert "audit.jsonl" not in text and "config.json" not in text, (tool, args, text)
        shown += "needle" in text
    assert shown > 10  # the legitimate files were searched all along


def test_left_out_entries_are_counted(agent, home):
    text = agent.call("ls", {"path": "~/project"}).text
    assert "notes.txt" not in text and "key_link" not in text and "ssh_link" not in text
    assert text.splitlines()[-1].endswith("entries in protected locations not shown)")
    assert "src/" in text and "README.md" in text
    text = agent.call("grep", {"pattern": "needle", "path": "~", "hidden": True}).text
    assert "project/src/app.py:1:needle = 1" in text
    assert text.splitlines()[-1].endswith("in protected locations not shown)")
    text = agent.call("find", {"pattern": "**", "path": "~", "hidden": True}).text
    assert "project/README.md" in text
    assert "notes.txt" not in text  # the hard link to the SSH key is left out, as in ls
    assert text.splitlines()[-1].endswith("in protected locations not shown)")


def test_a_protected_or_outside_base_escalates_as_a_whole(agent, home, tmp_path):
    for tool, args in (
        ("grep", {"pattern": ".", "path": "~/.ssh"}),
        ("find", {"pattern": "*", "path": "~/.ssh"}),
        ("ls", {"path": "~/.ssh"}),
        ("ls", {"path": str(tmp_path)}),
        ("grep", {"pattern": ".", "path": "/etc"}),
    ):
        r = agent.call(tool, args)
        assert r.result["isError"] is True, (tool, args)
        assert "approv" in r.text, r.text  # it needs a human; none is attached


def _swap_when_rg_starts(monkeypatch, swap, flag: str = "--regexp") -> list[list[str]]:
    """Run ``swap()`` at the moment the bridge spawns ``rg`` (the OS edge between the path
    policy's verdict and rg's own open): the attacker always wins the race, deterministically."""
    real_popen = subprocess.Popen
    spawned: list[list[str]] = []

    def popen(argv, *a, **kw):
        if isinstance(argv, list) and flag in argv:
            spawned.append([os.fsdecode(x) for x in argv])
            swap()
        return real_popen(argv, *a, **kw)

    monkeypatch.setattr(subprocess, "Popen", popen)
    return spawned


@pytest.mark.parametrize("swap_to", ["symlink", "hard link"])
def test_grep_on_one_file_reads_the_file_that_was_judged(agent, home, monkeypatch, swap_to):
    """grep on one file, swapped for a symlink (or hard link) to the SSH key after the call was
    judged and before rg opens it: rg used to open the name itself and follow the symlink, and
    the after-the-fact check lstat'ed the link, so the key's content came back. The bridge now
    opens the file (no symlink at any component) and judges what it opened before rg starts;
    rg reads that descriptor, so the swap changes nothing."""
    target = home / "project" / "swap.txt"
    target.write_text("PUBLIC-swap needle\n")
    staged = home / "project" / ".staged"

    def swap() -> None:
        if swap_to == "symlink":
            os.symlink(home / ".ssh" / "id_rsa", staged)
        else:
            os.link(home / ".ssh" / "id_rsa", staged)
        os.replace(staged, target)

    spawned = _swap_when_rg_starts(monkeypatch, swap)
    r = agent.call("grep", {"pattern": ".", "path": "project/swap.txt"})
    assert spawned, "rg was not started"
    assert not r.result["isError"], r.text
    assert MARKER not in r.text, r.text
    assert r.text == "swap.txt:1:PUBLIC-swap needle", r.text
    assert os.path.islink(target) == (swap_to == "symlink")  # the swap did happen


@pytest.mark.parametrize("tool", ["grep", "find"])
def test_a_walked_directory_swapped_for_a_symlink_is_not_walked(agent, home, monkeypatch, tool):
    """The directory a grep or find walks, swapped for a symlink to ~/.ssh after the call was
    judged and before rg starts in it. rg used to chdir through the symlink and walk ~/.ssh;
    the after-the-fact check then judged ``sub/plain.txt`` by name (harmless) and identity
    (unknown: a key made after the scan of the protected files), so a new key leaked. rg now
    starts in the directory the bridge opened (no symlink at any component): the one judged."""
    sub = home / "project" / "sub"
    sub.mkdir()
    (sub / "plain.txt").write_text("PUBLIC-sub plain\n")
    # Met in a walk, the hard link project/notes.txt waits for the scan of the protected
    # files; a key made after it is known by no list (by path only, which the swap defeats).
    agent.call("grep", {"pattern": "needle", "path": "~/project"})
    (home / ".ssh" / "plain.txt").write_text("PLANTED-SSH-PLAIN\n")
    (home / ".ssh" / "other.txt").write_text("PLANTED-SSH-OTHER\n")
    parked = home / "project" / ".parked"

    def swap() -> None:
        os.rename(sub, parked)
        os.symlink(home / ".ssh", sub)

    flag = "--regexp" if tool == "grep" else "--files"
    spawned = _swap_when_rg_starts(monkeypatch, swap, flag=flag)
    args = {"pattern": "." if tool == "grep" else "*", "path": "project/sub", "hidden": True}
    r = agent.call(tool, args)
    assert spawned, "rg was not started"
    assert os.path.islink(sub)  # the swap did happen
    assert MARKER not in r.text, r.text
    assert "other.txt" not in r.text and "id_rsa" not in r.text, r.text
    if box_probe.status().available:  # rg walks by path in the box: the swap is seen
        assert r.text == "project/sub: " + CHANGED, r.text
    elif sys.platform == "linux":  # rg ran in the judged directory (FD_CWD)
        # find lists what rg listed there; grep's match is left out all the same: the name
        # it is judged by now goes through a symlink (see the next test).
        assert r.text == ("no matches for '.' in project/sub" if tool == "grep" else "plain.txt")


@pytest.mark.parametrize("tool", ["grep", "find"])
def test_without_fd_cwd_a_swapped_walk_base_is_refused(agent, home, monkeypatch, tool):
    """Where a descriptor cannot be a working directory (macOS, Windows: ``FD_CWD`` off, as
    forced here), rg starts in the path and the bridge checks that the path still names the
    directory it opened: the swap is seen, rg is killed and nothing it printed is used."""
    from omp_a2a_bridge.server.tools import rg, search

    monkeypatch.setattr(rg, "FD_CWD", False)
    monkeypatch.setattr(search, "FD_CWD", False)
    sub = home / "project" / "sub"
    sub.mkdir()
    (sub / "plain.txt").write_text("PUBLIC-sub plain\n")
    (home / ".ssh" / "other.txt").write_text("PLANTED-SSH-OTHER\n")
    parked = home / "project" / ".parked"
    pattern = "." if tool == "grep" else "*"
    r = agent.call(tool, {"pattern": pattern, "path": "project/sub"})  # unswapped: it works
    assert r.text == ("plain.txt:1:PUBLIC-sub plain" if tool == "grep" else "plain.txt"), r.text

    def swap() -> None:
        os.rename(sub, parked)
        os.symlink(home / ".ssh", sub)

    flag = "--regexp" if tool == "grep" else "--files"
    spawned = _swap_when_rg_starts(monkeypatch, swap, flag=flag)
    r = agent.call(tool, {"pattern": pattern, "path": "project/sub"})
    assert spawned and os.path.islink(sub)
    assert r.result["isError"] is True, r.text
    assert "changed after it was checked" in r.text, r.text
    assert MARKER not in r.text and "other.txt" not in r.text


@pytest.mark.parametrize("swap_to", ["symlink", "fifo", "gone", "hard link"])
def test_a_walked_file_changed_after_rg_read_it_is_left_out(agent, home, monkeypatch, swap_to):
    """rg opens the files of a walk by path and follows symlinks, so what it read is only
    known by what the name is when its output is judged: a name that is by then a symlink
    (rg may have read the key through it), a FIFO, gone, or a hard link to the key is left
    out. Here the swap comes right after rg exits, so the judging deterministically sees it.
    Before, only the hard link was caught (lstat of a symlink or FIFO judged just its name)."""
    sub = home / "project" / "sub"
    sub.mkdir()
    (sub / "a.txt").write_text("PUBLIC-a\n")
    swapped = sub / "b.txt"
    swapped.write_text("PUBLIC-b\n")
    staged = home / "project" / ".staged"
    real_popen = subprocess.Popen
    swaps: list[str] = []

    def popen(argv, *a, **kw):
        proc = real_popen(argv, *a, **kw)
        if isinstance(argv, list) and "--regexp" in argv and not swaps:
            swaps.append(swap_to)
            proc.wait()  # its few lines fit the pipe
            if swap_to == "symlink":
                os.symlink(home / ".ssh" / "id_rsa", staged)
                os.replace(staged, swapped)
            elif swap_to == "fifo":
                os.mkfifo(staged)
                os.replace(staged, swapped)
            elif swap_to == "gone":
                os.unlink(swapped)
            else:
                os.link(home / ".ssh" / "id_rsa", staged)
                os.replace(staged, swapped)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen)
    r = agent.call("grep", {"pattern": ".", "path": "project/sub"})
    assert swaps == [swap_to]
    assert r.text == "a.txt:1:PUBLIC-a", r.text
    r = agent.call("grep", {"pattern": ".", "path": "project/sub/a.txt"})  # still searched
    assert r.text == "a.txt:1:PUBLIC-a", r.text


def test_ls_lists_the_directory_that_was_judged(agent, home, monkeypatch):
    """ls of a directory swapped for a symlink to ~/.ssh after the call was judged, right
    before it is listed: ``scandir`` of the path followed the symlink and listed the names in
    ~/.ssh that no rule knows (a key made after the scan). ls now lists the directory it
    opened with no symlink at any component."""
    sub = home / "project" / "sub"
    sub.mkdir()
    (sub / "plain.txt").write_text("PUBLIC-sub plain\n")
    (home / ".ssh" / "other-secret.txt").write_text("PLANTED-SSH-OTHER\n")
    parked = home / "project" / ".parked"
    real_scandir = os.scandir
    swaps: list[object] = []

    def scandir(arg=".", *a, **kw):  # the OS edge: ls listing a directory
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        by_ls = caller is not None and caller.f_code.co_name == "_ls"  # not the bridge's scans
        if by_ls and not swaps and (arg == str(sub) or isinstance(arg, int)):
            swaps.append(arg)
            os.rename(sub, parked)
            os.symlink(home / ".ssh", sub)
        return real_scandir(arg, *a, **kw)

    monkeypatch.setattr(os, "scandir", scandir)
    r = agent.call("ls", {"path": "project/sub"})
    assert swaps and os.path.islink(sub)
    assert "other-secret" not in r.text, r.text
    assert r.text.endswith("plain.txt"), r.text


def test_every_path_tool_under_a_swapping_directory_never_leaks_nor_writes_through(
    home, start_bridge
):
    """A thread swaps project/tog between the real directory and a symlink to ~/.ssh while
    every path tool works in it (read at an offset, write, edit, ls, find, grep on one file
    and on the directory), read, write and edit unattended. Whichever side of the swap a
    call meets, it answers from the judged directory or refuses: never a planted secret,
    never a file written or changed in ~/.ssh."""
    running = start_bridge(
        {
            "roots": [str(home)],
            "approval": {"tiers": {"read": "allow", "write": "allow", "edit": "allow"}},
        }
    )
    agent = running.client()
    ssh = home / ".ssh"
    tog = home / "project" / "tog"
    tog.mkdir()
    (tog / "plain.txt").write_text("PUBLIC-1\nPUBLIC-2 EDITME-a\nPUBLIC-3\n")
    (ssh / "plain.txt").write_text("PLANTED-1\nPLANTED-2 EDITME-a\nPLANTED-3\n")
    before = {p.name: p.read_bytes() for p in ssh.iterdir() if p.is_file()}
    parked = home / "project" / ".tog-parked"
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            try:
                os.rename(tog, parked)
            except OSError:
                continue
            with contextlib.suppress(OSError):
                os.symlink(ssh, tog)
                os.unlink(tog)
            while True:  # put it back; a write may have made a fresh 'tog' (it makes parents)
                try:
                    os.rename(parked, tog)
                    break
                except OSError:
                    if os.path.islink(tog):
                        os.unlink(tog)
                    else:
                        shutil.rmtree(tog, ignore_errors=True)
            time.sleep(0.0002)  # the real side needs some time too, or no call ever meets it

    edit = ["EDITME-a", "EDITME-b"]
    calls = [
        ("read", lambda: {"path": "project/tog/plain.txt", "offset": 2, "limit": 1}),
        ("write", lambda: {"path": "project/tog/new.txt", "content": "PUBLIC-new\n"}),
        ("edit", lambda: {"path": "project/tog/plain.txt", "old_string": edit[0],
                          "new_string": edit[1]}),
        ("ls", lambda: {"path": "project/tog"}),
        ("find", lambda: {"pattern": "*", "path": "project/tog"}),
        ("grep", lambda: {"pattern": "-[0-9]", "path": "project/tog/plain.txt"}),
        ("grep", lambda: {"pattern": "-[0-9]", "path": "project/tog"}),
    ]  # fmt: skip
    ok: dict[str, int] = {}
    swapper = threading.Thread(target=swap, daemon=True)
    swapper.start()
    rounds = 0
    try:
        while rounds < 50 or (len(ok) < 6 and rounds < 400):
            rounds += 1
            for tool, args in calls:
                r = agent.call(tool, args())
                assert r.status == 200 and "Traceback" not in r.text, (tool, r)
                assert MARKER not in r.text, (tool, r.text)
                assert "other" not in r.text and "id_rsa" not in r.text, (tool, r.text)
                if not r.result["isError"]:
                    ok[tool] = ok.get(tool, 0) + 1
                    if tool == "edit":
                        edit.reverse()
    finally:
        stop.set()
        swapper.join(60)
    after = {p.name: p.read_bytes() for p in ssh.iterdir() if p.is_file()}
    assert after == before  # nothing written, edited or left behind in ~/.ssh
    assert set(ok) == {"read", "write", "edit", "ls", "find", "grep"}, ok  # both sides met
    print(f"\nswapping directory: {rounds} rounds, successes {ok}")


@pytest.mark.parametrize("tool", ["write", "edit"])
def test_write_and_edit_never_write_through_a_directory_swapped_for_a_symlink(
    home, start_bridge, monkeypatch, tool
):
    """The parent directory swapped for a symlink to ~/.ssh right when the write looks at the
    file (its first ``stat``, the OS edge). ``WRITE_AT_SUPPORTED`` tested ``os.replace`` in
    ``os.supports_dir_fd``, which CPython never lists (only ``rename``), so every write took the
    path-based fallback meant for Windows: the check passed, then the temp file and the rename
    went through the symlink into ~/.ssh. Now the parent is opened first (no symlink at any
    component) and the file is replaced inside that descriptor: the judged directory."""
    running = start_bridge(
        {"roots": [str(home)], "approval": {"tiers": {"write": "allow", "edit": "allow"}}}
    )
    agent = running.client()
    ssh = home / ".ssh"
    sub = home / "project" / "sub"
    sub.mkdir()
    (sub / "f.txt").write_text("PUBLIC-old\n")
    (ssh / "f.txt").write_text("PLANTED-f\n")
    before = {p.name: p.read_bytes() for p in ssh.iterdir()}
    parked = home / "project" / ".parked"
    real_stat = os.stat
    swaps: list[object] = []

    def stat(path, *a, **kw):  # the OS edge: the writer's look at the file, after the checks
        caller = inspect.currentframe().f_back  # type: ignore[union-attr]
        writer = caller is not None and caller.f_code.co_name in ("atomic_write", "replace_in")
        if writer and not swaps and os.fspath(path) in ("f.txt", str(sub / "f.txt")):
            swaps.append(path)
            os.rename(sub, parked)
            os.symlink(ssh, sub)
        return real_stat(path, *a, **kw)

    args = (
        {"path": "project/sub/f.txt", "content": "PUBLIC-new\n"}
        if tool == "write"
        else {"path": "project/sub/f.txt", "old_string": "old", "new_string": "new"}
    )
    monkeypatch.setattr(os, "stat", stat)
    r = agent.call(tool, args)
    monkeypatch.undo()
    assert swaps, "the write never looked at the file"
    assert {p.name: p.read_bytes() for p in ssh.iterdir()} == before, r.text
    assert (parked / "f.txt").read_text() == "PUBLIC-new\n", r.text  # the judged directory
    assert not r.result["isError"], r.text


def test_grep_refuses_a_file_swapped_in_after_approval(start_bridge, tmp_path):
    """As ``read``: the human approved searching one file outside the roots; a different file
    put at that path before the search runs is not searched."""
    running = start_bridge()
    outside = tmp_path / "o.txt"
    outside.write_text("approved content\n")
    running.runner.attach_approver("pytest")
    c = running.client()
    t, out = in_thread(c.call, "grep", {"pattern": "content", "path": str(outside)})
    [p] = running.pending()
    replacement = tmp_path / "o.new"
    replacement.write_text("other content\n")
    os.replace(replacement, outside)
    running.runner.decide(p.id, "approve")
    t.join(60)
    assert out[0].text == f"{outside}: changed after it was approved; nothing was done (call again)"
    # Unswapped, the approved search runs.
    t, out = in_thread(c.call, "grep", {"pattern": "content", "path": str(outside)})
    [p] = running.pending()
    running.runner.decide(p.id, "approve")
    t.join(60)
    assert out[0].text == "o.txt:1:other content"

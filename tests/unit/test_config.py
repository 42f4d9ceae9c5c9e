"""server/infra/config.py: validation of a loaded document (parse_config), no file, no bridge."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.infra.config import (
    KNOWN_KEYS,
    TOKEN_MIN_LENGTH,
    ConfigError,
    Limits,
    Named,
    parse_config,
    unknown_key,
    valid_token,
)

PATH = "/cfg/config.json"
TOKEN = "t" * TOKEN_MIN_LENGTH


def test_an_empty_document_gives_the_documented_defaults():
    c = parse_config(PATH, {})
    assert (c.host, c.port, c.token_store, c.token) == ("127.0.0.1", 0, "keyring", None)
    assert c.roots == (os.path.expanduser("~"),)
    assert (c.default_tier, c.approval_timeout_s) == ("prompt", 55.0)
    assert (c.max_pending, c.max_pending_per_session) == (32, 8)
    assert (c.audit_max_bytes, c.audit_keep) == (10 * 1024 * 1024, 5)
    assert (c.log_max_bytes, c.log_keep, c.picked_port) == (1024 * 1024, 3, None)
    assert c.limits == Limits() and c.deny == frozenset() and c.deny_mcp_tools is False


def test_values_are_normalized():
    c = parse_config(
        PATH,
        {
            "host": " 127.0.0.1 ",
            "allowed_origins": ["HTTPS://App.Example/ "],
            "roots": ["/srv/a", "/srv/b"],
            "approval": {"timeout_s": 0, "tiers": {"bash": "allow"}},
            "token": TOKEN,
        },
    )
    assert c.host == "127.0.0.1" and c.allowed_origins == frozenset({"https://app.example"})
    assert c.roots == ("/srv/a", "/srv/b") and c.tiers == {"bash": "allow"}
    assert c.approval_timeout_s == 0.0 and c.token == TOKEN


@pytest.mark.parametrize(
    ("raw", "field", "what"),
    [
        ({"host": ""}, "host", "a non-empty string"),
        ({"host": 5}, "host", "a non-empty string"),
        ({"port": 70000}, "port", "an integer in [0, 65535]"),
        ({"port": True}, "port", "an integer in [0, 65535]"),  # a bool is no integer
        ({"port": 1.0}, "port", "an integer in [0, 65535]"),
        ({"token_store": "disk"}, "token_store", "one of 'keyring', 'file'"),
        ({"token": "short"}, "token", f"at least {TOKEN_MIN_LENGTH} characters"),
        ({"token": "t" * 20 + " " + "t" * 20}, "token", "no whitespace"),
        ({"deny": ["ok", ""]}, "deny", "an array of non-empty strings"),
        ({"roots": "/srv"}, "roots", "an array of non-empty strings"),
        ({"deny_mcp_tools": "yes"}, "deny_mcp_tools", "a boolean"),
        ({"approval": []}, "approval", "an object"),
        ({"approval": {"tiers": {"bash": "maybe"}}}, "approval.tiers", "allow|box|prompt|deny"),
        ({"approval": {"default_tier": "ask"}}, "approval.default_tier", "one of 'allow'"),
        ({"approval": {"timeout_s": "soon"}}, "approval.timeout_s", "a number >= 0"),
        ({"approval": {"timeout_s": -1}}, "approval.timeout_s", "a number >= 0"),
        ({"approval": {"timeout_s": float("nan")}}, "approval.timeout_s", "a number >= 0"),
        ({"approval": {"timeout_s": float("inf")}}, "approval.timeout_s", "a number >= 0"),
        ({"approval": {"max_pending": 0}}, "approval.max_pending", "an integer in [1, 10000]"),
        (
            {"approval": {"max_pending_per_session": 10001}},
            "approval.max_pending_per_session",
            "an integer in [1, 10000]",
        ),
        ({"audit": {"max_bytes": 4095}}, "audit.max_bytes", "an integer >= 4096"),
        ({"audit": {"keep": 0}}, "audit.keep", "an integer in [1, 100]"),
        ({"limits": []}, "limits", "an object"),
        ({"limits": {"max_connections": -1}}, "limits.max_connections", "a positive integer"),
        ({"protected": {"add": ["rel/path"]}}, "protected.add", "paths starting with ~/"),
        # The older key is the same list of additions: a relative entry is refused the same way
        # (it used to become a path under the bridge's working directory).
        ({"sensitive_paths": ["rel/path"]}, "sensitive_paths", "('rel/path' is relative)"),
        ({"sensitive_paths": "~/x"}, "sensitive_paths", "an array of non-empty strings"),
        ({"roots": ["src"]}, "roots", "absolute paths or paths starting with ~/ ('src'"),
        ({"roots": ["/srv", "./x"]}, "roots", "('./x' is not)"),
        ({"roots": ["~nosuchuser9/x"]}, "roots", "absolute paths or paths starting with ~/"),
        (
            {"limits": {"bash_timeout_s": 4000}},
            "limits.bash_timeout_s",
            "at most limits.bash_max_timeout_s (3600)",
        ),
        (
            {"limits": {"bash_timeout_s": 60, "bash_max_timeout_s": 30}},
            "limits.bash_timeout_s",
            "at most limits.bash_max_timeout_s (30)",
        ),
        ({"protected": {"remove": ["~/nonsense"]}}, "protected.remove", "'~/nonsense'"),
        ({"protected": ["~/x"]}, "protected", 'an object {"add"'),
    ],
)
def test_the_first_bad_field_is_named_with_what_it_must_be(raw, field, what):
    with pytest.raises(ConfigError) as e:
        parse_config(PATH, raw)
    text = str(e.value)
    assert text.startswith(f"invalid config at {PATH}: field '{field}' must be ")
    assert what in text


def test_a_document_that_is_no_object_is_refused():
    with pytest.raises(ConfigError, match="expected a JSON object"):
        parse_config(PATH, ["roots"])


def test_limits_zero_is_allowed_only_where_it_means_something():
    c = parse_config(PATH, {"limits": {"max_connections": 0, "inline_read_max_bytes": 0}})
    assert c.limits.max_connections == 0 and c.limits.inline_read_max_bytes == 0
    float_keys = [k for k, v in vars(Limits()).items() if isinstance(v, float)]
    int_keys = [
        k
        for k, v in vars(Limits()).items()
        if isinstance(v, int) and k not in ("max_connections", "inline_read_max_bytes")
    ]
    for key in float_keys:
        with pytest.raises(ConfigError, match=f"limits.{key}' must be a positive number"):
            parse_config(PATH, {"limits": {key: 0}})
    for key in int_keys:
        with pytest.raises(ConfigError, match=f"limits.{key}' must be a positive integer"):
            parse_config(PATH, {"limits": {key: 0}})


@pytest.mark.parametrize(
    ("raw", "key", "hint"),
    [
        ({"aproval": {}}, "aproval", "approval"),
        ({"root": ["/srv"]}, "root", "roots"),
        ({"tier": {"bash": "allow"}}, "tier", "approval.tiers"),  # a key at the wrong level
        ({"approval": {"tier": {}}}, "approval.tier", "approval.tiers"),
        ({"limits": {"read_max_byte": 5}}, "limits.read_max_byte", "limits.read_max_bytes"),
        (
            {"mcp_servers": {"gh": {"command": "x", "netwrok": "off"}}},
            "mcp_servers.gh.netwrok",
            "mcp_servers.gh.network",
        ),
        ({"bash": {"env": {"pas": []}}}, "bash.env.pas", "bash.env.pass"),
    ],
)
def test_an_unknown_key_stops_with_a_suggestion(raw, key, hint):
    with pytest.raises(ConfigError) as e:
        parse_config(PATH, raw)
    assert str(e.value) == (
        f"invalid config at {PATH}: unknown key '{key}' (did you mean '{hint}'?)"
    )


def test_an_unknown_key_without_a_near_one_is_named_alone():
    with pytest.raises(ConfigError, match=r"unknown key 'xyzzy' \(not a setting"):
        parse_config(PATH, {"xyzzy": 1, "aproval": {}})  # the first one, in the file's order


def test_names_the_user_picks_are_not_keys():
    c = parse_config(PATH, {"approval": {"tiers": {"mcp__gh__issue": "allow"}}})
    assert c.tiers == {"mcp__gh__issue": "allow"} and c.limits == Limits()


def test_every_key_the_bridge_writes_itself_is_known():
    """port and picked_port (first start), token (file store), rules (Always allow)."""
    raw = {
        "port": 4242,
        "picked_port": 4242,
        "token": TOKEN,
        "rules": {"allow": ["bash(git status)"], "ask": [], "deny": []},
        "approval": {"tiers": {"bash": "allow"}},
    }
    assert unknown_key(raw) is None
    assert parse_config(PATH, raw).picked_port == 4242


def test_the_schema_walk_leaves_wrongly_typed_values_to_their_field():
    assert unknown_key({"approval": ["tiers"], "limits": 5}) is None
    with pytest.raises(ConfigError, match="field 'approval' must be an object"):
        parse_config(PATH, {"approval": ["tiers"]})


def test_a_new_setting_is_one_entry_in_known_keys():
    """How another setting (``machines``, ``tunnels``) is registered: one line in KNOWN_KEYS."""
    schema = {**KNOWN_KEYS, "tunnels": Named({"host": None, "remote_port": None})}
    assert unknown_key({"tunnels": {"box": {"host": "me@box"}}}, schema) is None
    assert unknown_key({"tunnels": {"box": {"hots": "x"}}}, schema) == (
        "unknown key 'tunnels.box.hots' (did you mean 'tunnels.box.host'?)"
    )


@pytest.mark.parametrize(
    ("token", "ok"),
    [(TOKEN, True), ("t" * (TOKEN_MIN_LENGTH - 1), False), (TOKEN + "\n", False), (None, False)],
)
def test_valid_token(token, ok):
    assert valid_token(token) is ok


def test_good_roots_sensitive_paths_and_bash_timeouts_pass():
    c = parse_config(
        PATH,
        {
            "roots": ["~", "~/src", "/srv/a"],
            "sensitive_paths": ["~/work/x", "/abs", "*.secret", "**/deploy/creds"],
            "limits": {"bash_timeout_s": 4000, "bash_max_timeout_s": 5000},
        },
    )
    assert c.roots == ("~", "~/src", "/srv/a")
    assert c.limits.bash_timeout_s == 4000.0

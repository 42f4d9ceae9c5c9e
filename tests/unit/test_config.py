"""server/infra/config.py: validation of a loaded document (parse_config), no file, no bridge."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.infra.config import (
    TOKEN_MIN_LENGTH,
    ConfigError,
    Limits,
    parse_config,
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
        ({"protected": {"other": []}}, "protected", 'an object {"add"'),
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


def test_unknown_keys_are_kept_in_raw_and_ignored():
    raw = {"future_key": 1, "limits": {"future_limit": 5}}
    c = parse_config(PATH, raw)
    assert c.raw is raw and c.limits == Limits()


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

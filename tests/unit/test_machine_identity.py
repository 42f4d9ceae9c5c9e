"""server/machines/identity.py: names, digests, the per-request lookup, the config records."""

from __future__ import annotations

import hashlib

import pytest

from omp_a2a_bridge.server.errors import ConfigError
from omp_a2a_bridge.server.infra.config import parse_config
from omp_a2a_bridge.server.infra.tokens import generate_token
from omp_a2a_bridge.server.machines.identity import (
    DEFAULT,
    MachineIndex,
    MachineNameError,
    MachineRecord,
    check_name,
    digest,
    parse_machines,
)

MAIN = "main-token-" + "m" * 40


def record(name: str, token: str, created: float = 1.0) -> MachineRecord:
    return MachineRecord(name, created, digest(token).hex())


@pytest.mark.parametrize("name", ["laptop", "a", "ci-runner_2", "0box", "x" * 32])
def test_good_names(name):
    assert check_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "Laptop", "-x", "_x", "a b", "a/b", "x" * 33, "café", "a\u202eb", "lap\n", None, 7],
)
def test_bad_names_say_what_a_name_may_be(name):
    with pytest.raises(MachineNameError, match="lowercase letters, digits"):
        check_name(name)


def test_a_bad_name_is_shown_escaped():
    with pytest.raises(MachineNameError) as e:
        check_name("a\u202eb\x1b[2J")
    assert "\u202e" not in str(e.value) and "\x1b" not in str(e.value)


def test_digest_is_sha256_of_the_token():
    assert digest("abc") == hashlib.sha256(b"abc").digest()


def test_index_names_the_machine_of_a_token():
    laptop, desk = generate_token(), generate_token()
    index = MachineIndex([record("laptop", laptop), record("desk", desk)])
    assert index.identify(laptop, MAIN) == "laptop"
    assert index.identify(desk, MAIN) == "desk"
    assert index.identify(MAIN, MAIN) == DEFAULT
    for wrong in (None, "", laptop[:-1], laptop + " ", laptop.upper(), MAIN + "x"):
        assert index.identify(wrong, MAIN) is None


def test_index_follows_a_rotated_main_token_and_keeps_the_others():
    laptop = generate_token()
    index = MachineIndex([record("laptop", laptop)])
    assert index.identify(MAIN, MAIN) == DEFAULT
    rotated = generate_token()
    assert index.identify(MAIN, rotated) is None
    assert index.identify(rotated, rotated) == DEFAULT
    assert index.identify(laptop, rotated) == "laptop"


def test_add_and_remove():
    a, b = generate_token(), generate_token()
    index = MachineIndex()
    index.add(record("laptop", a))
    assert index.identify(a, MAIN) == "laptop" and len(index) == 1
    index.add(record("laptop", b))  # the same name again: the old token is gone
    assert index.identify(a, MAIN) is None and index.identify(b, MAIN) == "laptop"
    assert index.remove("laptop") and not index.remove("laptop")
    assert index.identify(b, MAIN) is None and index.names() == ()


def test_parse_machines_round_trip():
    token = generate_token()
    recs = (
        record("laptop", token, 12.5),
        MachineRecord("desk", 3.0, digest("d" * 43).hex(), "d" * 43),
    )
    raw = {r.name: r.to_json() for r in recs}
    assert parse_machines(raw) == recs
    assert "token" not in raw["laptop"]  # only the keyring fallback keeps the secret here


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ([], "'machines'"),
        ({"Bad": {"created": 1, "sha256": "0" * 64}}, "'machines'"),
        ({"default": {"created": 1, "sha256": "0" * 64}}, "'machines.default'"),
        ({"laptop": []}, "'machines.laptop'"),
        ({"laptop": {"created": "x", "sha256": "0" * 64}}, "'machines.laptop.created'"),
        ({"laptop": {"created": 1, "sha256": "abc"}}, "'machines.laptop.sha256'"),
        (
            {"laptop": {"created": 1, "sha256": "0" * 64, "token": "x" * 43}},
            "machines.laptop.token",
        ),
    ],
)
def test_a_bad_machines_entry_names_its_field(raw, field):
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse_config("/c.json", {"machines": raw})


def test_an_old_config_migrates_silently_to_the_default_machine():
    """Today's config (one token, no machines key) is machine ``default``, unchanged."""
    cfg = parse_config("/c.json", {"token": MAIN, "port": 5})
    assert cfg.machines == ()
    assert MachineIndex(cfg.machines).identify(MAIN, cfg.token or "") == DEFAULT

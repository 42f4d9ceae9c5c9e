"""server/present/exposure.py: what is exposed, as every UI says it, and the start text."""

from __future__ import annotations

from omp_a2a_bridge.server.box.plan import BoxStatus, Mechanism
from omp_a2a_bridge.server.present.exposure import (
    APPROVE_HINT,
    denied_tools,
    exposure_json,
    roots_text,
    start_lines,
    tier_changes,
)
from omp_a2a_bridge.server.types import Exposure, TierChange
from omp_a2a_bridge.server.vocab import Tier

HOME = "/home/ada"
BOX = BoxStatus(True, Mechanism.BWRAP, "bubblewrap 0.8.0, user namespaces, no network")
NO_BOX = BoxStatus(False, Mechanism.NONE, "bubblewrap is missing: install bubblewrap")
DEFAULTS = {"read": Tier.ALLOW, "bash": Tier.BOX, "write": Tier.PROMPT, "plugin": None}


def test_only_tiers_that_differ_from_the_tools_own_default_are_changes():
    configured = {"read": Tier.ALLOW, "bash": Tier.PROMPT, "write": Tier.ALLOW, "plugin": "prompt"}
    assert tier_changes(configured, Tier.PROMPT, DEFAULTS) == (
        TierChange("bash", Tier.PROMPT, Tier.BOX),
        TierChange("write", Tier.ALLOW, Tier.PROMPT),
    )


def test_an_unregistered_tool_defaults_to_prompt_and_the_default_tier_is_a_change():
    changes = tier_changes({"mcp__gh__issue": Tier.ALLOW}, Tier.ALLOW, DEFAULTS)
    assert changes == (
        TierChange("*", Tier.ALLOW, Tier.PROMPT),
        TierChange("mcp__gh__issue", Tier.ALLOW, Tier.PROMPT),
    )


def test_roots_are_said_with_tilde_and_the_whole_home_is_called_so():
    assert roots_text((HOME,), HOME).startswith("~ (your whole home;")
    assert roots_text((f"{HOME}/code", "/srv/data"), HOME) == "~/code, /srv/data"
    many = tuple(f"/r{i}" for i in range(5))
    assert roots_text(many, HOME) == "/r0, /r1, /r2 and 2 more"


def test_a_root_with_a_control_character_is_shown_escaped():
    assert roots_text(("/srv/\x1b[2Jx",), HOME) == "/srv/\\x1b[2Jx"


def test_the_start_text_is_three_lines_exposed_approve_log():
    exposure = Exposure(
        (f"{HOME}/code",),
        (TierChange("write", Tier.ALLOW, Tier.PROMPT),),
        denied_tools(["bash"], deny_mcp_tools=True),
    )
    exposed, approve, log = start_lines(
        exposure, BOX, f"{HOME}/.local/state/omp-a2a-bridge/log/bridge.log", HOME
    )
    assert exposed == (
        "exposed: ~/code · tiers changed: write=allow · not exposed: bash, mcp__* · "
        "box: bubblewrap (bash runs in it)"
    )
    assert approve == APPROVE_HINT and "a2a-bridge watch" in approve and "open" in approve
    assert log == "log: ~/.local/state/omp-a2a-bridge/log/bridge.log ('a2a-bridge logs')"


def test_without_a_box_or_a_log_file_the_start_text_says_so():
    exposed, _, log = start_lines(Exposure((HOME,)), NO_BOX, None, HOME)
    assert exposed.endswith("box: none, so bash asks every time ('a2a-bridge status' says why)")
    assert log.startswith("log: none")


def test_the_json_form_carries_real_roots_display_and_tiers():
    exposure = Exposure((f"{HOME}/code",), (TierChange("bash", Tier.PROMPT, Tier.BOX),))
    data = exposure_json(exposure, HOME)
    assert data == {
        "roots": [f"{HOME}/code"],
        "roots_display": ["~/code"],
        "tiers": [{"tool": "bash", "tier": "prompt", "default": "box"}],
        "denied": [],
        "text": "exposed: ~/code · tiers changed: bash=prompt",
    }
    assert exposure_json(None)["roots"] == []


def test_machines_are_listed_with_their_sessions_and_tunnels_and_counted_past_six():
    from omp_a2a_bridge.server.present.exposure import machines_text

    rows = [("default", 1, None), ("laptop", 0, "up"), ("desk", 2, "down")]
    assert machines_text(rows) == (
        "machines: default (1 session), laptop (tunnel up), desk (2 sessions, tunnel down)"
    )
    many = [(f"m{i}", 0, None) for i in range(8)]
    assert machines_text(many) == "machines: m0, m1, m2, m3, m4, m5 and 2 more"
    assert "\\u202e" in machines_text([("a\u202eb", 0, None)])  # rendered like agent text

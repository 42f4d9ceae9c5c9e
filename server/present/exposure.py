"""What the bridge exposes, in the words every UI uses: the start text, ``status``, the page
header and the tray tooltip.

Why one module: a newcomer's first question after the URL is "what can the agent reach, and how
do I approve?", and a config typo used to leave the whole home exposed unnoticed. So the roots,
the tiers that differ from the defaults and the box are said the same way everywhere, and the
headless start says them in three short lines after the URL. Pure: the caller passes the facts.
Roots and tool names come from the user's config, not an agent, but they reach a terminal: they
are rendered by :mod:`server.present.textsafe` all the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from ..box.plan import BoxStatus
from ..types import Exposure, TierChange
from ..vocab import Tier
from .textsafe import safe, shorten

ROOTS_SHOWN = 3  # roots named in one line; the rest are counted
MACHINES_SHOWN = 6  # machines named in one line; the rest are counted
DEFAULT_TIER = Tier.PROMPT  # approval.default_tier when the config says nothing
ALL_DEFAULT = "*"  # TierChange.tool for approval.default_tier
APPROVE_HINT = (
    "approve: 'a2a-bridge watch' in a terminal or 'a2a-bridge open' in the browser; "
    "until one is open, calls that need you are refused"
)


def tier_changes(
    configured: Mapping[str, Tier],
    default_tier: Tier,
    defaults: Mapping[str, Tier | None],
) -> tuple[TierChange, ...]:
    """The tiers the config changed: ``configured`` (``approval.tiers``) against each tool's
    own default (``defaults``: the registered tools' ``default_tier``; a tool not registered,
    e.g. an upstream one, defaults to prompt), plus ``default_tier`` when it is not prompt."""
    changes = []
    if default_tier != DEFAULT_TIER:
        changes.append(TierChange(ALL_DEFAULT, default_tier, DEFAULT_TIER))
    for tool in sorted(configured):
        try:
            own = Tier(defaults.get(tool) or DEFAULT_TIER)  # a plugin may write a plain string
        except ValueError:
            own = DEFAULT_TIER
        if configured[tool] != own:
            changes.append(TierChange(tool, configured[tool], own))
    return tuple(changes)


def denied_tools(deny: Iterable[str], deny_mcp_tools: bool) -> tuple[str, ...]:
    return tuple(sorted(deny)) + (("mcp__*",) if deny_mcp_tools else ())


def display_path(path: str, home: str | None = None) -> str:
    """``~/code`` for a path in the home, the path itself elsewhere (rendered safe)."""
    home = os.path.expanduser("~") if home is None else home
    if path == home:
        return "~"
    if home and path.startswith(home.rstrip(os.sep) + os.sep):
        return "~" + os.sep + path[len(home.rstrip(os.sep)) + 1 :]
    return safe(path)


def roots_text(roots: tuple[str, ...], home: str | None = None) -> str:
    """``~/code, ~/notes`` (at most :data:`ROOTS_SHOWN`, then ``and N more``); the home alone
    is called what it is: the whole home."""
    shown = [safe(display_path(r, home)) for r in roots[:ROOTS_SHOWN]]
    if shown == ["~"] and len(roots) == 1:
        return "~ (your whole home; set 'roots' in the config to narrow it)"
    more = len(roots) - ROOTS_SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def tiers_text(changes: tuple[TierChange, ...]) -> str:
    """``write=allow, bash=prompt`` (``*`` is the default tier of tools that declare none)."""
    return ", ".join(f"{shorten(c.tool, 60).text}={c.tier.value}" for c in changes)


def box_short(status: BoxStatus | None) -> str:
    if status is None:
        return "box: being checked"
    if status.available:
        return f"box: {status.mechanism.value} (bash runs in it)"
    return "box: none, so bash asks every time ('a2a-bridge status' says why)"


def exposed_line(exposure: Exposure, box: BoxStatus | None, home: str | None = None) -> str:
    """``exposed: ~/code (roots) · tiers: write=allow · box: bubblewrap (bash runs in it)``."""
    parts = [f"exposed: {roots_text(exposure.roots, home)}"]
    if exposure.tiers:
        parts.append(f"tiers changed: {tiers_text(exposure.tiers)}")
    if exposure.denied:
        parts.append("not exposed: " + ", ".join(shorten(t, 60).text for t in exposure.denied))
    parts.append(box_short(box))
    return " · ".join(parts)


def start_lines(
    exposure: Exposure, box: BoxStatus | None, log_path: str | None, home: str | None = None
) -> list[str]:
    """The three lines a headless start prints after its URL: what is exposed, how to
    approve, where the log is."""
    log = (
        f"log: {display_path(log_path, home)} ('a2a-bridge logs')"
        if log_path
        else "log: none (the log file could not be opened, see above)"
    )
    return [exposed_line(exposure, box, home), APPROVE_HINT, log]


def machine_text(name: str, sessions: int, tunnel: str | None) -> str:
    """``laptop (2 sessions, tunnel up)``; just ``default`` when it has neither."""
    notes = [f"{sessions} session{'s' if sessions != 1 else ''}"] if sessions else []
    if tunnel:
        notes.append(f"tunnel {safe(tunnel)}")
    return safe(name) + (f" ({', '.join(notes)})" if notes else "")


def machines_text(rows: Iterable[tuple[str, int, str | None]]) -> str:
    """``machines: default (1 session), laptop (tunnel down)`` from (name, sessions, tunnel
    state) rows, at most :data:`MACHINES_SHOWN` named: for ``status``'s text and the tray's
    tooltip."""
    listed = list(rows)
    shown = [machine_text(*r) for r in listed[:MACHINES_SHOWN]]
    more = len(listed) - MACHINES_SHOWN
    return "machines: " + ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def exposure_json(exposure: Exposure | None, home: str | None = None) -> dict[str, Any]:
    """``roots`` (real paths), ``roots_display``, ``tiers`` (tool, tier, default), ``denied``
    and ``text`` (the exposed line without the box): for ``status --json``, the page, the tray."""
    if exposure is None:
        return {"roots": [], "roots_display": [], "tiers": [], "denied": [], "text": ""}
    return {
        "roots": [safe(r) for r in exposure.roots],
        "roots_display": [display_path(r, home) for r in exposure.roots],
        "tiers": [
            {"tool": safe(c.tool), "tier": c.tier.value, "default": c.default.value}
            for c in exposure.tiers
        ],
        "denied": [safe(t) for t in exposure.denied],
        "text": exposed_line(exposure, None, home).rsplit(" · ", 1)[0],
    }

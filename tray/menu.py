"""The tray menu as data: ``menu_model(snapshot) -> items``, a pure function.

Rendering into pystray objects happens elsewhere (:mod:`tray.render`), so the layout, the
texts and the actions are unit-tested without a display. Actions are plain tuples the
controller interprets, e.g. ``("decide", "a3", "approve")``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from server.bridge import Snapshot
from server.rules import RuleList

Action = tuple[str, ...]
DETAIL_MAX = 60


@dataclass(frozen=True)
class Item:
    text: str
    action: Action | None = None
    enabled: bool = True
    checked: bool | None = None  # None: not a checkbox
    submenu: tuple[Item, ...] | None = None
    default: bool = False  # the action of a plain click, where the backend has one

    @property
    def separator(self) -> bool:
        return self.text == "-"


SEPARATOR = Item("-", enabled=False)


def ago(seconds: float) -> str:
    seconds = max(seconds, 0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def _shorten(text: str, limit: int = DETAIL_MAX) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pending_label(tool: str, summary: str, client: str, waited: float) -> str:
    """``bash — git push origin main (claude-code, 12 s)``."""
    detail = summary.split(": ", 1)[1] if summary.startswith(f"{tool}: ") else ""
    head = f"{tool} — {_shorten(detail)}" if detail else tool
    return f"{head} ({client}, {ago(waited)})"


TITLE_MAX = 127  # Windows' tooltip buffer is WCHAR[128]


def title(snap: Snapshot) -> str:
    """Tooltip/title: where it listens and what is going on (never the token).

    Latin-1 only (the xorg backend stores it as an X ``STRING`` property) and short enough
    for the Windows tooltip.
    """
    where = snap.url.removeprefix("http://").rstrip("/")
    parts = [f"omp A2A bridge - {where}", f"{len(snap.sessions)} session(s)"]
    if snap.pending:
        parts.append(f"{len(snap.pending)} waiting for approval")
    if snap.paused:
        parts.append("paused")
    text = " · ".join(parts)
    return text.encode("latin-1", "replace").decode("latin-1")[:TITLE_MAX]


def menu_model(
    snap: Snapshot,
    *,
    now: float | None = None,
    autostart: bool | None = None,
    error: str | None = None,
) -> tuple[Item, ...]:
    """The whole menu for one snapshot; never empty, pending approvals first."""
    now = time.time() if now is None else now
    where = snap.url.removeprefix("http://").rstrip("/")
    n = len(snap.sessions)
    header = f"omp A2A bridge — {where} · {n} session{'s' if n != 1 else ''}"
    if snap.paused:
        header += " · paused"
    items: list[Item] = [Item(header, enabled=False)]
    if error:
        items.append(Item(f"Error: {_shorten(error, 80)}", enabled=False))
    items.append(SEPARATOR)

    for p in snap.pending:
        decisions = (
            Item("Approve", ("decide", p.id, "approve")),
            Item("Allow for this session", ("decide", p.id, "allow_session")),
            *always_allow_items(p.id, p.proposed_rule),
            Item("Deny", ("decide", p.id, "deny")),
        )
        label = pending_label(p.tool, p.summary, p.client, now - p.arrived)
        items.append(Item(f"Approve: {label}", submenu=decisions))
    if len(snap.pending) > 1:
        items.append(Item(f"Deny all ({len(snap.pending)})", ("deny_all",)))
    if snap.pending:
        items.append(SEPARATOR)

    sessions = tuple(
        Item(
            f"{s.client} {s.version}".strip()
            + f" · {s.calls} call{'s' if s.calls != 1 else ''} · {ago(now - s.last_seen)} ago",
            submenu=(Item("End session", ("end_session", s.sid)),),
        )
        for s in snap.sessions
    ) or (Item("No live sessions", enabled=False),)
    items.append(Item(f"Sessions ({n})", submenu=sessions))
    items.append(rules_menu(snap))
    if snap.control_url:
        items.append(Item("Open approval page", ("open_page",), default=True))
    items += [
        SEPARATOR,
        Item("Copy connection URL", ("copy_url",)),
        Item("Copy client config (includes the token)", ("copy_config",)),
        Item("Copy token", ("copy_token",)),
        SEPARATOR,
        Item("Pause bridge", ("pause", "off" if snap.paused else "on"), checked=snap.paused),
    ]
    if autostart is not None:
        items.append(
            Item("Start at login", ("autostart", "off" if autostart else "on"), checked=autostart)
        )
    items += [
        Item("Rotate token", ("rotate",)),
        Item("Open audit log", ("open_audit",)),
        Item("Open config folder", ("open_config",)),
        SEPARATOR,
        Item("Quit", ("quit",)),
    ]
    return tuple(items)


RULE_MAX = 70


def always_allow_items(call_id: str, proposal: str | None) -> tuple[Item, ...]:
    """ "Always allow: bash(git log *)" — the rule it saves, or nothing when no rule could apply
    (an escalated call that always asks)."""
    if not proposal:
        return ()
    label = _shorten(" + ".join(proposal.splitlines()), RULE_MAX)
    return (Item(f"Always allow: {label}", ("decide", call_id, "allow_always")),)


def rules_menu(snap: Snapshot) -> Item:
    """ "Rules (n)": each rule with Remove, then the live "Allow for this session" grants."""
    entries: list[Item] = []
    for which in ("deny", "ask", "allow"):
        for rule in snap.rules.get(RuleList(which)):
            entries.append(
                Item(
                    f"{which}: {_shorten(rule.text, RULE_MAX)}",
                    submenu=(Item("Remove", ("rule_remove", which, rule.text)),),
                )
            )
    for g in snap.grants:
        entries.append(
            Item(
                f"session: {g.tool} for {_shorten(g.client, 30)}",
                submenu=(Item("Revoke", ("grant_revoke", g.sid, g.tool)),),
            )
        )
    n = len(entries)
    if not entries:
        entries.append(Item("No rules: every call follows its tool's tier", enabled=False))
    return Item(f"Rules ({n})", submenu=tuple(entries))


def notification_for(new: list[tuple[str, str, str]], total: int) -> str | None:
    """The text for newly pending calls ``[(tool, summary, client)]``; coalesced when several."""
    if not new:
        return None
    if len(new) == 1 and total == 1:
        tool, summary, client = new[0]
        detail = summary.split(": ", 1)[1] if summary.startswith(f"{tool}: ") else ""
        what = f"{tool} — {_shorten(detail, 80)}" if detail else tool
        return f"{what} ({client}) is waiting for approval"
    return f"{total} tool calls waiting for approval"

"""The tray menu as data: ``menu_model(snapshot) -> items``, a pure function.

Rendering into pystray objects happens elsewhere (:mod:`tray.render`), so the layout, the
texts and the actions are unit-tested without a display. Actions are plain tuples the
controller interprets, e.g. ``("decide", "a3", "approve")``.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

from omp_a2a_bridge.server.api import (
    Decision,
    Exposure,
    MachineView,
    PendingCall,
    RuleList,
    Snapshot,
    TunnelView,
)
from omp_a2a_bridge.server.present.batch import Batch, batches
from omp_a2a_bridge.server.present.boxview import placement_json, status_text
from omp_a2a_bridge.server.present.diffview import diff_summary, diff_text_lines
from omp_a2a_bridge.server.present.exposure import (
    box_short,
    exposed_line,
    machines_text,
    roots_text,
    start_lines,
    tiers_text,
)
from omp_a2a_bridge.server.present.preview import (
    call_hidden,
    escalation_json,
    more_arguments,
    short_session,
    shows_arguments,
)
from omp_a2a_bridge.server.present.risk import short_text
from omp_a2a_bridge.server.present.textsafe import HIDDEN_WARNING, safe, shorten
from omp_a2a_bridge.server.present.timefmt import ago


class ActionKind(enum.StrEnum):
    """What a menu item does: the first element of its :data:`Action` (the rest are its
    arguments, e.g. ``(DECIDE, "a3", "approve")``); :meth:`tray.actions.MenuActions.run`
    interprets them."""

    DECIDE = "decide"  # call id, decision
    DENY_ALL = "deny_all"
    BATCH = "batch"  # decision, then the ids it covers (as listed when the menu was built)
    END_SESSION = "end_session"  # sid
    RESTART_SERVER = "restart_server"  # server name
    RULE_REMOVE = "rule_remove"  # list, rule text
    GRANT_REVOKE = "grant_revoke"  # sid, tool
    PAUSE = "pause"  # "on" / "off"
    AUTOSTART = "autostart"  # "on" / "off"
    COPY_URL = "copy_url"
    COPY_CONFIG = "copy_config"
    COPY_TOKEN = "copy_token"
    ROTATE = "rotate"
    OPEN_AUDIT = "open_audit"
    OPEN_CONFIG = "open_config"
    OPEN_PAGE = "open_page"
    OPEN_CALL = "open_call"  # call id
    SHOW_LOGS = "show_logs"
    REVOKE_MACHINE = "revoke_machine"  # machine name (only from the confirming submenu)
    RECONNECT_TUNNEL = "reconnect_tunnel"  # tunnel (= machine) name
    QUIT = "quit"


Action = tuple[str, ...]  # (ActionKind, *arguments); a StrEnum, so plain tuples compare equal
DETAIL_MAX = 70  # head + "…" + tail, then the total length: the end is never cut off


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


def _shorten(text: str, limit: int = DETAIL_MAX) -> str:
    """Agent or error text for a menu item: safe (no controls, bidi, invisible), head…tail."""
    return shorten(text, limit).text


def _detail(p: PendingCall, limit: int = DETAIL_MAX) -> str:
    """What the call does, from the raw arguments: head…tail and length, safe."""
    args = p.arguments if isinstance(p.arguments, dict) else {}
    if shows_arguments(p.tool):
        # An upstream tool: its arguments mean what its server makes of them, so the detail
        # is the summary of all of them (never just a ``command`` next to an unseen ``env``).
        prefix = f"{safe(p.tool)}: "
        body = p.summary[len(prefix) :] if p.summary.startswith(prefix) else p.summary
        return _shorten(body, limit)
    for key in ("command", "path", "pattern"):
        v = args.get(key)
        if isinstance(v, str) and v.strip():
            return _shorten(v, limit)
    prefix = f"{p.tool}: "
    return _shorten(p.summary[len(prefix) :], limit) if p.summary.startswith(prefix) else ""


def countdown(p: PendingCall, now: float) -> str:
    """``auto-deny in 41 s`` (or nothing when calls wait until decided): for notifications,
    which are read when they arrive."""
    if p.deadline is None:
        return ""
    return f"auto-deny in {ago(max(p.deadline - now, 0))}"


def deadline_text(p: PendingCall, now: float) -> str:
    """``auto-deny in 41 s, at 10:05:31`` for menu labels.

    A menu is rebuilt only when the state changes (a periodic rebuild would close an open
    AppIndicator menu), so the label also carries the wall-clock time, which stays true
    however long the menu sits unchanged.
    """
    if p.deadline is None:
        return ""
    at = time.strftime("%H:%M:%S", time.localtime(p.deadline))
    return f"{countdown(p, now)}, at {at}"


def pending_label(p: PendingCall, now: float) -> str:
    """``bash — git push origin main (claude-code, 12 s, auto-deny in 43 s)``.

    The detail shows its head, ``…``, its tail and its length when long, and the label carries
    the hidden-character warning: a blank-looking padding cannot make a dangerous tail vanish.
    """
    tool = _shorten(p.tool, 40)
    detail = _detail(p)
    head = f"{tool} — {detail}" if detail else tool
    when = ", ".join(x for x in (ago(now - p.arrived), deadline_text(p, now)) if x)
    label = f"{head} ({_shorten(p.client, 24)}, {when})"
    if p.box is not None and not p.box.inside:
        label += f" · ⚠ {OUTSIDE_LABEL}"
    risks = (p.preview or {}).get("risks")
    if isinstance(risks, list) and risks and isinstance(risks[0], dict):
        label += f" · ⚠ {', '.join(short_text(r) for r in risks if isinstance(r, dict))}"
    return f"⚠ {HIDDEN_WARNING} · {label}" if call_hidden(p) else label


def risk_texts(p: PendingCall) -> list[str]:
    """The call's risk cues (server/present/risk.py): hints shown first, never a decision."""
    risks = (p.preview or {}).get("risks")
    if not isinstance(risks, list):
        return []
    return [str(r.get("text")) for r in risks if isinstance(r, dict) and r.get("text")]


DIFF_MENU_LINES = 12  # diff lines in a call's submenu (the page shows all of it)


def diff_lines_for_menu(p: PendingCall) -> list[str]:
    """``Change: +3 −1 lines`` and the first diff lines of a write/edit, each one line."""
    change = (p.preview or {}).get("change")
    if not isinstance(change, dict):
        return []
    lines = [f"Change: {_shorten(diff_summary(change) or '', 80)}"]
    lines += [_shorten(x, 90) for x in diff_text_lines(change, DIFF_MENU_LINES)]
    return lines


def call_context(p: PendingCall) -> tuple[str, ...]:
    """Disabled info lines in a call's submenu: why it needs a human, where, how big, who."""
    lines: list[str] = []
    if call_hidden(p):
        lines.append(f"⚠ {HIDDEN_WARNING} (shown escaped)")
    lines += [f"⚠ Risk: {_shorten(t, 90)}" for t in risk_texts(p)]
    esc = escalation_json(p.escalation)
    if esc is not None:
        what = f"{esc['category']}: {esc['path']}" if esc.get("category") else esc["text"]
        lines.append(f"Why: {_shorten(what or '', 90)}")
    pv = p.preview or {}
    lines += _argument_lines(p)
    if p.tool == "bash":
        lines.append(f"In: {pv.get('cwd') or '(first root)'}")
    box = placement_json(p.box)
    if box is not None:
        text = _shorten(box["text"], 90)
        lines.append(f"Box: {text}" if box["inside"] else f"⚠ Runs {text}")
    size = pv.get("size")
    if isinstance(size, dict) and "chars" in size:
        lines.append(f"Writes {size['chars']} characters, {size['lines']} lines")
    diff = diff_lines_for_menu(p)
    if diff:
        lines += diff
    elif isinstance(size, dict) and "old" in size:
        lines.append(
            f"Replaces {size['old']['chars']} characters with {size['new']['chars']}"
            + (" (every occurrence)" if pv.get("replace_all") else "")
        )
        lines.append(f"Old: {_shorten(pv.get('old', ''), 60)}")
        lines.append(f"New: {_shorten(pv.get('new', ''), 60)}")
    lines.append(f"From: {_shorten(p.client, 40)} · session {short_session(p.sid)}")
    return tuple(lines)


def _argument_lines(p: PendingCall) -> list[str]:
    """An upstream call's arguments, one line each (from the bounded preview), and how many
    more there are: the submenu never drops one without saying so."""
    if not shows_arguments(p.tool):
        return []
    pv = p.preview or {}
    listed = pv.get("arguments")
    if not isinstance(listed, list):
        return []
    if not listed:
        return ["Arguments: none"]
    lines = [f"Arguments ({len(listed) + int(pv.get('more_arguments') or 0)}):"]
    for a in listed:
        lines.append(f"  {_shorten(str(a.get('name')), 30)} = {_shorten(str(a.get('value')), 80)}")
    more = int(pv.get("more_arguments") or 0)
    if more:
        lines.append(f"  {more_arguments(more)} (Show full call…)")
    return lines


TITLE_MAX = 127  # Windows' tooltip buffer is WCHAR[128]
TITLE_ROOTS_MAX = 40  # the roots and the changed tiers in the one-line title, each at most
TOOLTIP_LINE_MAX = 160  # a line of the StatusNotifierItem tooltip


def _latin1(text: str, limit: int) -> str:
    """Latin-1 (an X ``STRING`` property), cut to ``limit`` with ``...`` when longer."""
    text = text.encode("latin-1", "replace").decode("latin-1")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _status_parts(snap: Snapshot) -> list[str]:
    parts = [f"{len(snap.sessions)} session(s)"]
    if snap.pending:
        parts.append(f"{len(snap.pending)} waiting for approval")
    if snap.paused:
        parts.append("paused")
    return parts


def _machine_rows(snap: Snapshot) -> list[tuple[str, int, str | None]]:
    return [(m.name, m.sessions, m.tunnel) for m in snap.machines]


def title(snap: Snapshot) -> str:
    """Tooltip/title of the pystray backends: where it listens, what is going on, and what is
    exposed (the roots, the tiers changed from the defaults, the box, the machines), never the
    token. One line, Latin-1 only (the xorg backend stores it as an X ``STRING`` property) and
    short enough for the Windows tooltip: the counts first, what is exposed as room allows."""
    where = snap.url.removeprefix("http://").rstrip("/")
    parts = [f"omp A2A bridge - {where}", *_status_parts(snap)]
    if snap.exposure is not None:
        parts.append(_latin1(roots_text(snap.exposure.roots), TITLE_ROOTS_MAX))
        if snap.exposure.tiers:
            parts.append(_latin1(f"tiers: {tiers_text(snap.exposure.tiers)}", TITLE_ROOTS_MAX))
    if snap.box is not None:
        parts.append(f"box: {snap.box.mechanism.value}" if snap.box.available else "no box")
    if len(snap.machines) > 1 or snap.tunnels:
        machines = f"{len(snap.machines)} machines"
        down = sum(1 for t in snap.tunnels if t.state.value == "down")
        parts.append(machines + (f", {down} tunnel{'s' if down != 1 else ''} down" if down else ""))
    return _latin1(" · ".join(parts), TITLE_MAX)


def tooltip(snap: Snapshot) -> str:
    """The StatusNotifierItem tooltip's text (under its heading "omp A2A bridge"), one fact a
    line: where and the counts; what is exposed (the start's words,
    :mod:`server.present.exposure`); the box; the machines with their tunnels."""
    where = snap.url.removeprefix("http://").rstrip("/")
    lines = [" · ".join([where, *_status_parts(snap)])]
    if snap.exposure is not None:
        lines.append(exposed_line(snap.exposure, snap.box).rsplit(" · ", 1)[0])
    if snap.exposure is not None or snap.box is not None:
        lines.append(box_short(snap.box))
    if snap.machines:
        lines.append(machines_text(_machine_rows(snap)))
    return "\n".join(_shorten(line, TOOLTIP_LINE_MAX) for line in lines)


TRAY_APPROVE_HINT = "approve: from this icon's menu, or 'a2a-bridge open' in the browser"
NO_MENU_APPROVE_HINT = "approve: click the icon (the approval page) or run 'a2a-bridge watch'"


def first_run_text(snap: Snapshot, has_menu: bool = True) -> str:
    """The tray's first start ever: what a headless start prints (what is exposed, how to
    approve, where the log is), with the tray's own way to approve."""
    lines = start_lines(snap.exposure or Exposure(()), snap.box, snap.log_path or None)
    exposed, _, log_line = lines
    approve = TRAY_APPROVE_HINT if has_menu else NO_MENU_APPROVE_HINT
    head = [exposed] if snap.exposure is not None else []
    return "\n".join([*head, approve, log_line])


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
    items += pending_items(snap, now)
    items.append(sessions_menu(snap, now))
    machines = machines_menu(snap, now)
    if machines is not None:
        items.append(machines)
    servers = servers_menu(snap)
    if servers is not None:
        items.append(servers)
    items.append(rules_menu(snap))
    items.append(Item(_shorten(status_text(snap.box), 90), enabled=False))
    if snap.control_url:
        items.append(Item("Open approval page", (ActionKind.OPEN_PAGE,), default=True))
    items += bridge_items(snap, autostart)
    return tuple(items)


def pending_items(snap: Snapshot, now: float) -> list[Item]:
    """One submenu per waiting call (its context and the decisions), then "Deny all"."""
    items: list[Item] = []
    for p in snap.pending:
        info = tuple(Item(line, enabled=False) for line in call_context(p))
        show = (Item("Show full call…", (ActionKind.OPEN_CALL, p.id)),) if snap.control_url else ()
        decisions = (
            *info,
            *show,
            SEPARATOR,
            Item("Approve", (ActionKind.DECIDE, p.id, Decision.APPROVE)),
            *session_items(p),
            *always_allow_items(p.id, p.proposed_rule, (p.preview or {}).get("no_rule")),
            *run_outside_items(p),
            Item("Deny", (ActionKind.DECIDE, p.id, Decision.DENY)),
        )
        label = pending_label(p, now)
        if p.upstream is not None and p.upstream.changed:
            label += " · changed since approved"
        items.append(Item(f"Approve: {label}", submenu=decisions))
    items += [batch_item(b) for b in batches(snap.pending)]
    if len(snap.pending) > 1:
        items.append(Item(f"Deny all ({len(snap.pending)})", (ActionKind.DENY_ALL,)))
    if snap.pending:
        items.append(SEPARATOR)
    return items


def batch_item(b: Batch) -> Item:
    """ "All 3 of this kind: 3 × read ~/other/** (claude-code)": the calls it covers (their
    summaries, safe), then *Approve all 3* / *Deny all 3*, which name exactly those ids."""
    n = len(b.ids)
    covered = tuple(
        Item(f"{cid}: {_shorten(summary, 80)}", enabled=False)
        for cid, summary in zip(b.ids, b.summaries, strict=True)
    )
    return Item(
        f"All {n} of this kind: {_shorten(b.label, 80)}",
        submenu=(
            *covered,
            SEPARATOR,
            Item(f"Approve all {n}", (ActionKind.BATCH, Decision.APPROVE, *b.ids)),
            Item(f"Deny all {n}", (ActionKind.BATCH, Decision.DENY, *b.ids)),
        ),
    )


def sessions_menu(snap: Snapshot, now: float) -> Item:
    """The "Sessions" submenu: each live session, with "End session". The label starts with
    the machine (from its token; the client's name and version are only its claim)."""
    sessions = tuple(
        Item(
            f"{safe(s.machine)} · "
            + f"{safe(s.client)} {safe(s.version)}".strip()
            + f" · {s.calls} call{'s' if s.calls != 1 else ''} · {ago(now - s.last_seen)} ago",
            submenu=(Item("End session", (ActionKind.END_SESSION, s.sid)),),
        )
        for s in snap.sessions
    ) or (Item("No live sessions", enabled=False),)
    return Item(f"Sessions ({len(snap.sessions)})", submenu=sessions)


# -- machines, their tunnels, and the confirmations (issue 25) ----------------------------------

DEFAULT_MACHINE = "default"  # the bridge's own token: rotated, never revoked
CANCEL = Item("Cancel")  # closes the menu; does nothing (a confirmation's way out)


def _sessions(n: int) -> str:
    return f"{n} session{'s' if n != 1 else ''}"


def _end(n: int) -> str:
    """``2 sessions end`` / ``1 session ends``."""
    return f"{_sessions(n)} {'ends' if n == 1 else 'end'}"


def tunnel_label(t: TunnelView | None, state: str | None) -> str:
    """``tunnel up`` / ``tunnel down`` (ssh's last error is the first line of its submenu)."""
    return f"tunnel {t.state.value if t is not None else state}"


def machine_label(m: MachineView, t: TunnelView | None) -> str:
    """``laptop — 2 sessions · tunnel down``."""
    label = f"{safe(m.name)} — {_sessions(m.sessions)}"
    if t is not None or m.tunnel is not None:
        label += f" · {tunnel_label(t, m.tunnel)}"
    return label


def tunnel_items(name: str, t: TunnelView | None, state: str | None) -> tuple[Item, ...]:
    """Where the tunnel goes, its state with ssh's last error, and *Reconnect*."""
    lines: list[Item] = []
    if t is not None:
        lines.append(
            Item(
                f"Tunnel {t.state.value}: {_shorten(t.target, 40)}, remote port {t.remote_port}",
                enabled=False,
            )
        )
        if t.last_error and t.state.value != "up":
            lines.append(Item(f"Last error: {_shorten(t.last_error, 80)}", enabled=False))
    else:
        lines.append(Item(f"Tunnel {state}", enabled=False))
    lines.append(Item("Reconnect", (ActionKind.RECONNECT_TUNNEL, name)))
    return tuple(lines)


def revoke_question(m: MachineView) -> str:
    """``Revoke laptop: its 2 sessions end and its token stops working for good``."""
    cut = f"its {_end(m.sessions)} and " if m.sessions else ""
    return f"Revoke {safe(m.name)}: {cut}its token stops working for good"


def revoke_items(m: MachineView, has_tunnel: bool) -> tuple[Item, ...]:
    """*Revoke…* opens a question that says what it cuts, then *Revoke* / *Cancel*: a
    confirmation both DBusMenu hosts and pystray draw (a submenu, no dialog). ``default`` is
    the bridge's own token: a disabled hint points at *Rotate token…* instead."""
    if m.name == DEFAULT_MACHINE:
        return (
            Item(
                "default is this bridge's own token: it is rotated (Rotate token…), not revoked",
                enabled=False,
            ),
        )
    question = [Item(revoke_question(m), enabled=False)]
    if has_tunnel:
        question.append(
            Item(f"Its tunnel stays: 'a2a-bridge tunnels --rm {m.name}' removes it", enabled=False)
        )
    confirm = (
        *question,
        SEPARATOR,
        Item("Revoke", (ActionKind.REVOKE_MACHINE, m.name)),
        CANCEL,
    )
    return (Item("Revoke…", submenu=confirm),)


def machines_menu(snap: Snapshot, now: float) -> Item | None:
    """The "Machines" submenu: each machine (name from its token) with its sessions, its
    tunnel's state and last error, *Reconnect*, *Revoke…*; tunnels of no machine after them.
    None when the snapshot knows no machine (a bridge always has ``default``)."""
    if not snap.machines and not snap.tunnels:
        return None
    tunnels = {t.name: t for t in snap.tunnels}
    entries: list[Item] = []
    for m in snap.machines:
        t = tunnels.pop(m.name, None)
        has_tunnel = t is not None or m.tunnel is not None
        seen = f"last seen {ago(now - m.last_seen)} ago" if m.last_seen is not None else "not seen"
        sub = [Item(f"{m.calls} call{'s' if m.calls != 1 else ''} · {seen}", enabled=False)]
        if has_tunnel:
            sub += tunnel_items(m.name, t, m.tunnel)
        sub += [SEPARATOR, *revoke_items(m, has_tunnel)]
        entries.append(Item(machine_label(m, t), submenu=tuple(sub)))
    for t in tunnels.values():  # a tunnel whose clients use another machine's token
        entries.append(
            Item(
                f"{safe(t.name)} — {tunnel_label(t, None)} (no machine of that name)",
                submenu=tunnel_items(t.name, t, None),
            )
        )
    down = sum(1 for t in snap.tunnels if t.state.value == "down")
    head = f"Machines ({len(snap.machines)})" + (f" · {down} tunnel(s) down" if down else "")
    return Item(head, submenu=tuple(entries))


def rotate_menu(snap: Snapshot) -> Item:
    """*Rotate token…* asks first and names what it cuts: machine ``default``'s sessions are
    refused until their clients have the new token (a session is kept for a client that
    presents it), and its waiting calls end; the other machines have their own tokens."""
    n = sum(1 for s in snap.sessions if s.machine == DEFAULT_MACHINE)
    others = sum(1 for m in snap.machines if m.name != DEFAULT_MACHINE)
    verb = "is" if n == 1 else "are"
    keep = (
        f"the other {others} machine(s) keep working"
        if others
        else "other machines (machines add) would keep working"
    )
    return Item(
        "Rotate token…",
        submenu=(
            Item(
                f"The {_sessions(n)} of machine default {verb} refused until their clients have "
                f"the new token, and its waiting calls end; {keep}"
                if n
                else f"Machine default has no session open; {keep}",
                enabled=False,
            ),
            Item("Its clients need the new token (Copy client config)", enabled=False),
            SEPARATOR,
            Item("Rotate", (ActionKind.ROTATE,)),
            CANCEL,
        ),
    )


def show_logs_item(snap: Snapshot) -> Item:
    """*Show logs* opens the bridge's log file (what it printed on stderr), like the audit."""
    if not snap.log_path:
        return Item("Show logs: no log file (it could not be opened)", enabled=False)
    return Item("Show logs", (ActionKind.SHOW_LOGS,))


def bridge_items(snap: Snapshot, autostart: bool | None) -> list[Item]:
    """The bridge's own actions: copy, pause, start at login, rotate, open, quit."""
    items = [
        SEPARATOR,
        Item("Copy connection URL", (ActionKind.COPY_URL,)),
        Item("Copy client config (includes the token)", (ActionKind.COPY_CONFIG,)),
        Item("Copy token", (ActionKind.COPY_TOKEN,)),
        SEPARATOR,
        Item(
            "Pause bridge", (ActionKind.PAUSE, "off" if snap.paused else "on"), checked=snap.paused
        ),
    ]
    if autostart is not None:
        items.append(
            Item(
                "Start at login",
                (ActionKind.AUTOSTART, "off" if autostart else "on"),
                checked=autostart,
            )
        )
    items += [
        rotate_menu(snap),
        Item("Open audit log", (ActionKind.OPEN_AUDIT,)),
        show_logs_item(snap),
        Item("Open config folder", (ActionKind.OPEN_CONFIG,)),
        SEPARATOR,
        Item("Quit", (ActionKind.QUIT,)),
    ]
    return items


def server_label(name: str, state: str, tools: int, changed: int) -> str:
    """``github — ready · 12 tools`` / ``db — failed``; changed tools are called out."""
    label = f"{name} — {state}"
    if state == "ready":
        label += f" · {tools} tool{'s' if tools != 1 else ''}"
    if changed:
        label += f" · {changed} changed since approved"
    return label


def servers_menu(snap: Snapshot) -> Item | None:
    """The "Servers" submenu (upstream MCP servers), or None when none are configured."""
    if not snap.servers:
        return None
    entries = []
    for s in snap.servers:
        sub = []
        if s.last_error and s.state != "ready":
            sub.append(Item(f"Last error: {_shorten(s.last_error, 80)}", enabled=False))
        sub.append(Item("Restart", (ActionKind.RESTART_SERVER, s.name)))
        entries.append(
            Item(server_label(s.name, s.state, s.tools, len(s.changed)), submenu=tuple(sub))
        )
    down = sum(1 for s in snap.servers if s.state != "ready")
    head = f"Servers ({len(snap.servers)})" + (f" · {down} down" if down else "")
    return Item(head, submenu=tuple(entries))


RULE_MAX = 70


OUTSIDE_LABEL = "outside the box"


def run_outside_items(p: PendingCall) -> tuple[Item, ...]:
    """ "Run outside the box" on a bash call that would run in it: approves this one call
    to run without the sandbox (``Decision.RUN_OUTSIDE_BOX``)."""
    if p.box is None or not p.box.can_run_outside:
        return ()
    return (Item("Run outside the box", (ActionKind.DECIDE, p.id, Decision.RUN_OUTSIDE_BOX)),)


NO_ALWAYS = "Always allow: not offered (no rule can name exactly this call)"


NO_SESSION_ITEM = "Allow for this session: not offered (no grant as narrow as this call)"


def session_items(p: PendingCall) -> tuple[Item, ...]:
    """ "Allow `git commit …` for this session": the label names the scope the bridge chose
    (agent words in it are rendered); a disabled line where no grant applies."""
    label = p.grant_label
    if label is None:
        return (Item(NO_SESSION_ITEM, enabled=False),)
    return (Item(shorten(label, 120).text, (ActionKind.DECIDE, p.id, Decision.ALLOW_SESSION)),)


def always_allow_items(
    call_id: str, proposal: str | None, why: str | None = None
) -> tuple[Item, ...]:
    """ "Always allow: bash(git log *)" — the rule it saves; a disabled line saying why not when
    there is no proposal, with the bridge's reason for this call (``why``: an escalation that
    always asks, a redirect, an ask rule, hidden characters — server.policy.proposals)."""
    if not proposal:
        text = f"Always allow: not offered ({_shorten(why, 90)})" if why else NO_ALWAYS
        return (Item(text, enabled=False),)
    label = _shorten(" + ".join(proposal.splitlines()), RULE_MAX)
    return (Item(f"Always allow: {label}", (ActionKind.DECIDE, call_id, Decision.ALLOW_ALWAYS)),)


def rules_menu(snap: Snapshot) -> Item:
    """ "Rules (n)": each rule with Remove, then the live "Allow for this session" grants."""
    entries: list[Item] = []
    for which in (RuleList.DENY, RuleList.ASK, RuleList.ALLOW):
        for rule in snap.rules.get(which):
            shown = shorten(rule.text, RULE_MAX)  # may hold a path or value an agent wrote
            warn = f"⚠ {HIDDEN_WARNING} · " if shown.hidden else ""
            entries.append(
                Item(
                    f"{warn}{which}: {shown.text}",
                    submenu=(Item("Remove", (ActionKind.RULE_REMOVE, which, rule.text)),),
                )
            )
    for g in snap.grants:
        entries.append(
            Item(
                f"session: {g.tool} {_shorten(g.scope, 60)}".rstrip()
                + f" for {_shorten(g.client, 30)}",
                submenu=(Item("Revoke", (ActionKind.GRANT_REVOKE, g.sid, g.tool)),),
            )
        )
    n = len(entries)
    if not entries:
        entries.append(Item("No rules: every call follows its tool's tier", enabled=False))
    return Item(f"Rules ({n})", submenu=tuple(entries))


def notification_for(new: list[PendingCall], total: int, now: float | None = None) -> str | None:
    """The text for newly pending calls; coalesced when several.

    Safe and head…tail like the menu, with the reason (escalation) and the countdown.
    """
    if not new:
        return None
    now = time.time() if now is None else now
    if len(new) == 1 and total == 1:
        p = new[0]
        detail = _detail(p, 56)
        tool = _shorten(p.tool, 20)
        what = f"{tool} — {detail}" if detail else tool
        parts = [f"{what} ({_shorten(p.client, 20)}) is waiting"]
        esc = escalation_json(p.escalation)
        if esc is not None:
            why = f"{esc['category']}: {esc['path']}" if esc.get("category") else esc["text"]
            parts.append(f"why: {_shorten(why or '', 56)}")
        if p.box is not None and not p.box.inside:
            parts.append(f"⚠ {OUTSIDE_LABEL}")
        parts += [f"⚠ {_shorten(t, 56)}" for t in risk_texts(p)[:2]]
        change = diff_summary((p.preview or {}).get("change"))
        if change:
            parts.append(_shorten(change, 56))
        if p.deadline is not None:
            parts.append(countdown(p, now))
        if shows_arguments(p.tool):
            n = len(p.arguments) if isinstance(p.arguments, dict) else 0
            parts.append(f"{n} argument{'s' if n != 1 else ''}")
        text = " · ".join(parts)
        return f"⚠ {HIDDEN_WARNING}: {text}" if call_hidden(p) else text
    kinds = batches([*new]) if len(new) > 1 else []
    if kinds:
        return f"{total} tool calls waiting for approval ({kinds[0].label}: approve or deny all)"
    return f"{total} tool calls waiting for approval"

"""The data types every UI sees: immutable pictures of the bridge, safe to hand to any thread.

The tray, the control API, ``a2a-bridge watch`` and the tests read the bridge only through these
records (and :class:`Snapshot` above all): plain frozen dataclasses with no behaviour beyond a
JSON form, so a front end can import them without pulling in the bridge's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .box.plan import BoxStatus
from .errors import BridgeError
from .policy.rules import RuleSet
from .vocab import Decision, Tier, TunnelState

if TYPE_CHECKING:
    from .policy.grants import Grant
    from .policy.paths import Escalation


@dataclass(frozen=True, slots=True)
class HumanDecision:
    """One human decision on one waiting call: what every front end (tray, page, ``watch``,
    the CLI) hands the core, as one record from the API down to the approval broker.

    ``rule``: for "Always allow", the rule to save (the proposal, possibly edited); ``approver``:
    who decided (``ApproverKind`` for the bridge's own UIs), for the audit.
    """

    call_id: str
    decision: Decision
    reason: str | None = None
    approver: str | None = None
    rule: str | None = None


class DecisionError(BridgeError, ValueError):
    """A decision that cannot be applied as asked (e.g. an invalid edited rule)."""


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """What one *Approve all N* / *Deny all N* did: the ids it decided, and the ids that had
    stopped waiting (decided elsewhere, timed out, withdrawn) before it applied."""

    decided: tuple[str, ...]
    gone: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class UpstreamInfo:
    """What an approver sees about an upstream tool (its description and annotations are the
    upstream's words: shown, never used to decide)."""

    server: str
    tool: str  # the upstream's own name for it
    description: str
    annotations: dict[str, Any]
    changed: bool  # its definition changed since a human (or a tier) approved it

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "tool": self.tool,
            "description": self.description,
            "annotations": dict(self.annotations),
            "changed": self.changed,
        }


@dataclass(frozen=True, slots=True)
class BoxPlacement:
    """Where a waiting ``bash`` call runs once approved: in the box, or outside it (the agent
    asked with ``"box": false``, or this machine has no box). Outside is shown in the warning
    colour by every UI; "Run outside the box" is offered only on a call that would run in it."""

    inside: bool
    why: str = ""  # outside: the agent's ``reason`` (raw agent text), or why there is no box
    by_agent: bool = False  # the agent asked to run outside

    @property
    def can_run_outside(self) -> bool:
        return self.inside


@dataclass(frozen=True, slots=True)
class PendingCall:
    """What an approver sees: immutable, safe to hand to another thread."""

    id: str
    sid: str
    client: str
    tool: str
    arguments: dict[str, Any]
    summary: str
    arrived: float  # wall clock
    escalation: Escalation | None = None  # why the call needs a human (category, real path)
    deadline: float | None = None  # wall clock of the auto-deny; None: waits until decided
    preview: dict[str, Any] = field(default_factory=dict)  # bounded safe context (preview.py)
    hidden: bool = False  # the agent's text carried bidi/invisible/control characters
    upstream: UpstreamInfo | None = None  # an upstream MCP server's tool: server, description…
    proposed_rule: str | None = None  # "Always allow calls like this": one rule per line
    # "Allow … for this session" as narrow as the call; None: not offered (escalated, rm...)
    grant: Grant | None = None
    machine: str = "default"  # the session's machine (from its token): approvals group by it

    @property
    def grant_label(self) -> str | None:
        """The button's text ("Allow `git commit …` for this session"), or None."""
        return None if self.grant is None else self.grant.label

    box: BoxPlacement | None = None  # bash only: in the box or outside it (present/boxview.py)


@dataclass(frozen=True, slots=True)
class ServerView:
    """One upstream server for the UIs (immutable, safe on other threads)."""

    name: str
    kind: str  # "stdio" | "http"
    target: str  # command line, or the URL without query/credentials
    state: str
    last_error: str | None
    tools: int
    restarts: int
    changed: tuple[str, ...]  # tools whose definition changed since approved
    skipped: tuple[str, ...]  # upstream tools not exposed, with why
    stderr: tuple[str, ...]  # the last lines the child wrote to stderr
    # stdio: "in the box", "outside the box (\"box\": false)" or why there is no box; http: ""
    box: str = ""


@dataclass(frozen=True, slots=True)
class SessionView:
    """A live MCP session as the UIs see it: which client, since when, how busy."""

    sid: str
    client: str
    version: str
    created: float
    last_seen: float
    calls: int
    pending: int
    protocol: str = "2025-11-25"  # the MCP revision negotiated in initialize
    machine: str = "default"  # whose token opened it (server/machines), not clientInfo


@dataclass(frozen=True, slots=True)
class GrantView:
    """An "Allow for this session" grant: this session's calls of ``tool`` within ``scope``
    (``git commit …``, ``~/proj``) run unattended; ``label`` is what every UI shows."""

    sid: str
    client: str
    tool: str
    scope: str = ""
    label: str = ""
    machine: str = "default"  # the session's machine: a grant never crosses machines


@dataclass(frozen=True, slots=True)
class MachineView:
    """A remote machine as every UI lists it (``machines list``, the page, the tray's
    *Machines* menu): its name (from its token, never from ``clientInfo``), when it was added,
    what this run saw of it, and its tunnel's state when the app keeps one up. Never a token.
    """

    name: str
    created: float | None  # wall clock; None for ``default`` (the bridge's own token)
    last_seen: float | None  # wall clock of its last request in this run; None: not seen
    calls: int  # tools/call requests in this run
    sessions: int  # live sessions it opened
    tunnel: str | None = None  # the tunnel's state (server/tunnels fills it); None: no tunnel


@dataclass(frozen=True, slots=True)
class TunnelView:
    """A tunnel the app keeps up (``ssh -N -R``) as the UIs see it: which machine, where, and
    whether it is up (with ssh's last error, made one safe line, when it is not)."""

    name: str  # the machine's name
    target: str  # user@host (or a Host alias of the user's ssh config)
    remote_port: int  # the port on the remote machine: its clients use http://127.0.0.1:P/
    local_port: int  # the bridge's live port the forward reaches (0: not started yet)
    client: str | None  # the client whose config ``--install`` writes there, if any
    state: TunnelState
    last_error: str | None
    since: float  # wall clock of the last state change
    attempts: int  # ssh runs since the app started (the first included)
    retry_in: float | None = None  # down: seconds until the next try

    @property
    def remote_url(self) -> str:
        return f"http://127.0.0.1:{self.remote_port}/"


@dataclass(frozen=True, slots=True)
class TierChange:
    """A tool whose tier the config changed from its default (``tool`` ``*``: the tools that
    declare none, i.e. ``approval.default_tier``)."""

    tool: str
    tier: Tier
    default: Tier


@dataclass(frozen=True, slots=True)
class Exposure:
    """What the bridge exposes, as every UI states it (the start text, ``status``, the page
    header, the tray tooltip): the roots (real paths), the tiers that differ from the
    defaults, the tools never exposed. The box's state is :attr:`Snapshot.box`."""

    roots: tuple[str, ...]
    tiers: tuple[TierChange, ...] = ()
    denied: tuple[str, ...] = ()  # config ``deny`` (and ``mcp__*`` for ``deny_mcp_tools``)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable picture of the bridge for UIs on other threads."""

    seq: int
    url: str
    control_url: str
    host: str
    port: int
    paused: bool
    running: bool
    sessions: tuple[SessionView, ...]
    pending: tuple[PendingCall, ...]
    approvers: tuple[str, ...]
    token_source: str
    warnings: tuple[str, ...]
    calls_total: int
    servers: tuple[ServerView, ...] = ()  # upstream MCP servers (server.upstream.manager)
    rules: RuleSet = field(default_factory=RuleSet)
    grants: tuple[GrantView, ...] = ()
    box: BoxStatus | None = None  # None until the probe has run (server.box.known)
    tunnels: tuple[TunnelView, ...] = ()  # tunnels the app keeps up (server.tunnels)
    exposure: Exposure | None = None  # roots, changed tiers, withheld tools
    log_path: str = ""  # the bridge's log file (what it prints on stderr)
    machines: tuple[MachineView, ...] = ()  # "default" first (server/machines)


@dataclass(frozen=True, slots=True)
class NewMachine:
    """A machine just added: its token, shown this once, and the MCP client config that
    carries it. ``warning``: the keyring was unusable, so the token is in the config file."""

    name: str
    token: str
    config: dict[str, Any]
    warning: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "token": self.token, "config": self.config}
        if self.warning is not None:
            out["warning"] = self.warning
        return out

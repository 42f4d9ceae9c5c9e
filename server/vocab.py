"""The core's closed vocabularies, as :class:`enum.StrEnum` so JSON and audit text stay the
plain strings they always were (``json.dumps(Tier.ALLOW) == '"allow"'``).

Each value is part of a public format: the config (``approval.tiers``), the audit log
(``phase``, ``outcome``, ``decided_by``) and the control API's JSON. Adding a member is a
format change; docs/reference/audit.md lists them.
"""

from __future__ import annotations

import enum


class Tier(enum.StrEnum):
    """What happens to a call of a tool no rule decides (``approval.tiers``)."""

    ALLOW = "allow"  # runs unattended (unless its path escalates)
    BOX = "box"  # bash: runs in the kernel sandbox unattended; prompt where no box exists
    PROMPT = "prompt"  # waits for a human
    DENY = "deny"  # not exposed at all


class Decision(enum.StrEnum):
    """What a human decided about one waiting call (the control API's ``decision``)."""

    APPROVE = "approve"
    ALLOW_SESSION = "allow_session"
    ALLOW_ALWAYS = "allow_always"
    RUN_OUTSIDE_BOX = "run_outside_box"  # bash only: this one call runs without the box
    DENY = "deny"


class ApproverKind(enum.StrEnum):
    """The built-in approvers, as the audit's ``approver`` and the snapshot's ``approvers``
    name them. An events socket may name itself (``?as=``) and a bearer request may pass
    ``by``, so the field stays a string; these are the names the bridge's own UIs use."""

    TRAY = "tray"
    PAGE = "approval page"
    WATCH = "terminal (watch)"
    CONTROL_API = "control API"  # a bearer request that did not say who it is


class TokenSource(enum.StrEnum):
    """Where the live token comes from (``token_source`` in snapshots and the rotate reply)."""

    ENV = "env"  # $A2A_BRIDGE_TOKEN: this process only, never rotated by the bridge
    KEYRING = "keyring"
    FILE = "file"  # the config file (token_store "file", or a keyring fallback)


class ServerState(enum.StrEnum):
    """Where an upstream MCP server is in its life (:class:`~server.types.ServerView`'s
    ``state``)."""

    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"
    STOPPED = "stopped"


class CallOutcome(enum.StrEnum):
    """How a tools/call ended: the audit ``outcome`` of its done record."""

    OK = "ok"
    ERROR = "error"  # the tool (or its arguments) failed
    DENIED = "denied"  # by the user, a deny rule, or the shutdown
    PAUSED = "paused"
    NOT_EXPOSED = "not_exposed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    NO_APPROVER = "no_approver"
    LIMIT = "limit"  # the pending caps were reached


class DecidedBy(enum.StrEnum):
    """Who decided that a call runs or not: the audit ``decided_by``."""

    POLICY = "policy"  # the tier, or a refusal by the bridge itself
    RULE = "rule"  # an allow/ask/deny rule
    SESSION_RULE = "session_rule"  # an "Allow for this session" grant
    USER = "user"  # a human, on this very call


class AuditPhase(enum.StrEnum):
    """The two records every tools/call writes, paired by their ``id``."""

    START = "start"
    DONE = "done"


class Ruling(enum.StrEnum):
    """What the one judge (:func:`server.policy.judge.judge`) rules for a call."""

    RUN = "run"  # runs unattended, as the bridge runs tools today
    RUN_IN_BOX = "run_in_box"  # runs unattended inside the kernel sandbox
    ASK = "ask"  # waits for a human decision on this very call
    REFUSE = "refuse"  # ends without running (a deny rule, the pause, the shutdown, bad input)
    NOT_EXPOSED = "not_exposed"  # no such tool, or its tier is deny


class Ground(enum.StrEnum):
    """Why the judge ruled as it did: the control API's ``decided_by`` of ``rules/test``.

    The first five values are the strings that field always had; the UIs print them.
    """

    RULE = "rule"  # an allow, ask or deny rule
    TIER = "tier"  # the tool's tier (no rule matched)
    ESCALATION = "escalation"  # the path needs a human (outside the roots, protected, ...)
    GUARD = "guard"  # deny rules exist and the bash command cannot be read
    NOT_EXPOSED = "not exposed"
    SUSPENDED = "suspended"  # an upstream tool changed since it was approved
    GRANT = "grant"  # an "Allow for this session" grant
    NO_BOX = "no box"  # a box-tier tool where no box is available: asks as a prompt tier
    OUTSIDE_BOX = "outside the box"  # the agent asked to run bash outside the box
    PAUSED = "paused"
    SHUTDOWN = "shutdown"
    INVALID = "invalid arguments"  # not an object, against the schema, an unnameable path


class TunnelState(enum.StrEnum):
    """A tunnel the app keeps up (server/tunnels): what every UI shows next to its machine."""

    CONNECTING = "connecting"  # ssh started, the remote forward not confirmed yet
    UP = "up"  # the remote forward is listening on the remote machine
    DOWN = "down"  # ssh exited (last_error says why); it is tried again after a back-off

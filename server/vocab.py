"""The core's closed vocabularies, as :class:`enum.StrEnum` so JSON and audit text stay the
plain strings they always were (``json.dumps(Tier.ALLOW) == '"allow"'``).

Each value is part of a public format: the config (``approval.tiers``), the audit log
(``phase``, ``outcome``, ``decided_by``) and the control API's JSON. Adding a member is a
format change; the README's audit section lists them.
"""

from __future__ import annotations

import enum


class Tier(enum.StrEnum):
    """What happens to a call of a tool no rule decides (``approval.tiers``)."""

    ALLOW = "allow"  # runs unattended (unless its path escalates)
    BOX = "box"  # bash: runs in the kernel sandbox unattended; prompt where no box exists
    PROMPT = "prompt"  # waits for a human
    DENY = "deny"  # not exposed at all


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

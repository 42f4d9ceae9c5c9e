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

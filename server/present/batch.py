"""Batch decisions: which waiting calls one *Approve all N* / *Deny all N* may cover.

Calls of "the same kind" share a :class:`BatchKey`:

- the same **origin**: the machine (from the token, once sessions carry one) and the client's
  name — a batch never spans machines or clients (:func:`origin_of` is the one place that
  says so);
- the same **tool**;
- the same **scope**: the rule "Always allow calls like this" would save for the call (for a
  path tool the real folder, ``read(~/other/**)``; for bash the program and subcommand,
  ``bash(git commit *)``; for another tool its exact arguments), and the same escalation
  kind (outside the roots, or none).

Never batched (no key): a call with no proposed rule (nothing names its scope: a redirect, a
computed word, hidden characters), a call whose escalation always asks (protected, persistence,
the bridge's own files), a bash call that would run **outside the box**, an upstream tool whose
definition changed. Each of those is decided on its own.

A batch decision names the calls by id, as listed when the human clicked: a call that arrives
later is never covered, even with the same key (the bridge re-checks every id's key).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .preview import call_hidden
from .textsafe import shorten

if TYPE_CHECKING:
    from ..types import PendingCall

BATCH_MIN = 2  # a batch of one is an ordinary decision
BATCH_MAX = 64  # ids one batch decision may name (the pending cap is lower)


@dataclass(frozen=True, slots=True)
class BatchKey:
    """Calls with equal keys may be decided together (see the module docstring)."""

    origin: tuple[str, ...]
    tool: str
    scope: str
    escalation: str | None

    @property
    def id(self) -> str:
        """A short stable handle for UIs and the API (never shown as the scope itself)."""
        raw = "\x00".join([*self.origin, self.tool, self.scope, self.escalation or ""])
        return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def origin_of(p: PendingCall) -> tuple[str, ...]:
    """Who the call comes from, for batching: the machine (``machine`` once sessions carry
    it; ``default`` until then, as every session shares the one token) and the client name."""
    return (str(getattr(p, "machine", None) or "default"), p.client)


def batch_key(p: PendingCall) -> BatchKey | None:
    """The call's key, or None when it is never part of a batch."""
    if p.proposed_rule is None or call_hidden(p):
        return None
    esc = p.escalation
    kind = None if esc is None else str(getattr(esc, "kind", "")) or "other"
    if esc is not None and bool(getattr(esc, "always_asks", True)):
        return None
    if p.tool == "bash" and (p.box is None or not p.box.inside):
        return None  # a call outside the box: only ever decided on its own
    if p.upstream is not None and p.upstream.changed:
        return None
    return BatchKey(origin_of(p), p.tool, p.proposed_rule, kind)


@dataclass(frozen=True, slots=True)
class Batch:
    key: BatchKey
    ids: tuple[str, ...]
    summaries: tuple[str, ...]  # safe one-liners of the covered calls, in order
    label: str  # "3 × read ~/other/** (claude-code)"

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key.id,
            "tool": self.key.tool,
            "scope": shorten(self.key.scope, 200).text,
            "client": shorten(self.key.origin[-1], 80).text,
            "machine": shorten(self.key.origin[0], 80).text,
            "ids": list(self.ids),
            "count": len(self.ids),
            "summaries": list(self.summaries),
            "label": self.label,
        }


def _scope_words(key: BatchKey) -> str:
    scope = " + ".join(key.scope.splitlines())
    inner = scope[len(key.tool) + 1 : -1] if scope.startswith(f"{key.tool}(") else scope
    return shorten(inner, 60).text


def batches(pending: Sequence[PendingCall]) -> list[Batch]:
    """Groups of at least :data:`BATCH_MIN` waiting calls with one key, in arrival order."""
    groups: dict[BatchKey, list[PendingCall]] = {}
    for p in pending:
        k = batch_key(p)
        if k is not None:
            groups.setdefault(k, []).append(p)
    out: list[Batch] = []
    for k, calls in groups.items():
        if len(calls) < BATCH_MIN:
            continue
        calls = calls[:BATCH_MAX]
        client = shorten(k.origin[-1], 30).text
        label = f"{len(calls)} × {shorten(k.tool, 40).text} {_scope_words(k)} ({client})"
        out.append(
            Batch(
                k,
                tuple(p.id for p in calls),
                tuple(shorten(p.summary, 120).text for p in calls),
                label,
            )
        )
    return out


def batch_of(pending: Sequence[PendingCall], call_id: str) -> Batch | None:
    """The batch the call belongs to, or None."""
    return next((b for b in batches(pending) if call_id in b.ids), None)


class BatchRefused(ValueError):
    """A batch decision that may not apply: the words say why (nothing was decided)."""


def check_batch(pending: Sequence[PendingCall], ids: Sequence[str]) -> tuple[list[str], list[str]]:
    """Which of ``ids`` a batch decision applies to now, and which no longer wait.

    Raises :class:`BatchRefused` when the ids still waiting are not all of one key (or one of
    them may never be batched): nothing is decided then. Ids that stopped waiting since the
    human clicked are returned apart (their calls ended on their own).
    """
    if not ids:
        raise BatchRefused("no calls named")
    if len(ids) > BATCH_MAX or len(set(ids)) != len(ids):
        raise BatchRefused(f"a batch names at most {BATCH_MAX} distinct calls")
    by_id = {p.id: p for p in pending}
    live = [i for i in ids if i in by_id]
    gone = [i for i in ids if i not in by_id]
    keys = {batch_key(by_id[i]) for i in live}
    if None in keys:
        raise BatchRefused("a call in the batch must be decided on its own (see `batch_key`)")
    if len(keys) > 1:
        raise BatchRefused("the calls are not of one kind (tool, scope, machine and client)")
    return live, gone

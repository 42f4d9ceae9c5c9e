"""The rules in force, and how they change: "Always allow" from a prompt, ``rules add``, edits.

A change is effective at once in memory and then saved to the config file in a worker thread
(re-read, unknown keys kept); once every pending save has landed, the file's rules replace the
in-memory ones, so edits made by hand are picked up too. Everything here runs on the bridge
thread except the file write. Parsing and matching rules is :mod:`server.policy.rules`' job; the
pipeline reads :attr:`RuleBook.rules` for every call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..infra.config import edit_config
from ..types import DecisionError, PendingCall
from .proposals import savable
from .rules import Kind, RuleError, RuleList, RuleSet, edit_raw_rules, parse_rule_lines

log = logging.getLogger(__name__)

NO_RULE = (
    "no rule can allow calls like this one (it always asks a human, or a rule cannot name "
    "exactly its arguments): approve it once or for the session instead"
)


class RuleBook:
    def __init__(
        self,
        rules: RuleSet,
        config_path: str,
        base: str,
        publish: Callable[[RuleSet], None],
    ) -> None:
        self.rules = rules
        self.config_path = config_path
        self.base = base  # where relative paths in rules are anchored: the first root
        self._publish = publish  # sets the rules and tells the UIs (Bridge.set_rules)
        self._saves = 0  # saves still being written

    def rule_to_save(self, p: PendingCall, edited: str | None) -> str:
        """The rule(s) "Always allow calls like this" saves for ``p``: ``edited`` or the proposal.

        Raises :class:`DecisionError` when there is no rule to save (the call always asks) or
        the edited rule is invalid or not about calls like this one.
        """
        if p.proposed_rule is None or savable(p.proposed_rule) is not None:
            raise DecisionError(NO_RULE)
        text = edited if isinstance(edited, str) and edited.strip() else p.proposed_rule
        problem = savable(text)  # the one check, whichever UI sent the decision
        if problem is not None:
            raise DecisionError(f"rule not saved: {problem}")
        try:
            parsed = parse_rule_lines(text, base=self.base)
        except RuleError as e:
            raise DecisionError(f"rule not saved: {e}") from None
        problem = None if text.strip() == p.proposed_rule else _not_like_this(p.tool, parsed)
        if problem is not None:
            raise DecisionError(f"rule not saved: {problem}")
        return "\n".join(r.text for r in parsed)

    def add(
        self, which: RuleList, texts: list[str], loop: asyncio.AbstractEventLoop | None
    ) -> None:
        """Effective at once in memory, then saved to the config (re-read, unknown keys kept)."""
        texts = [t.strip() for t in texts if t.strip()]
        current = self.rules.get(which)
        known = {r.text for r in current}
        parsed = parse_rule_lines("\n".join(texts), base=self.base)
        new = tuple(r for r in parsed if r.text not in known)
        self._publish(RuleSet(**{**_lists(self.rules), which.value: current + new}))
        path = self.config_path
        self._saves += 1

        def saved(rules: RuleSet | None) -> None:
            self._saves -= 1
            if rules is not None and self._saves == 0:
                self._publish(rules)  # the file's rules: picks up edits made by hand too

        def persist() -> None:
            rules = None
            try:
                rules = edit_config(path, lambda raw: edit_raw_rules(raw, which, add=texts)).rules
            except Exception as e:
                log.warning("could not save the rule(s) %s to %s: %s", texts, path, e)
            if loop is not None:
                loop.call_soon_threadsafe(saved, rules)

        assert loop is not None
        loop.run_in_executor(None, persist)


def _not_like_this(tool: str, parsed: list[Any]) -> str | None:
    """Why an edited "Always allow calls like this" rule is not about calls like this one.

    It must name the call's own tool and must not be a catch-all (``bash``, ``bash(*)``): a
    click on one prompt never widens to another tool or to every call of it. A deliberate
    broad rule is added from the Rules section or ``a2a-bridge rules add`` instead. (The
    bridge's own proposal is taken as it is: for a tool without string arguments it is the
    tool alone.)
    """
    for r in parsed:
        if r.tool != tool:
            return f"{r.text} is not a rule for {tool}; add it from the Rules section instead"
        if r.kind is Kind.ANY or (r.kind is Kind.BASH and set(r.words) <= {"*"}):
            return (
                f"{r.text} would allow every {tool} call; add a broad rule from the Rules "
                "section or `a2a-bridge rules add` instead"
            )
    return None


def _lists(rules: RuleSet) -> dict[str, tuple[Any, ...]]:
    return {k.value: rules.get(k) for k in RuleList}

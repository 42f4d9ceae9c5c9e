"""``a2a-bridge rules list|add|rm|test``: read and change the rules, live.

With a bridge running, everything goes through its control API, so a change takes effect at
once (and is saved to the config by the bridge). Without one, ``list``/``add``/``rm`` edit the
config file directly (atomically, other keys kept) and ``test`` judges with the saved rules
and the live bridge's judgement (paths, escalations, tiers: the same function).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..control.client import ControlClient
from ..control.controlfile import read_control
from ..infra.config import audit_path, edit_config, load_config
from ..policy.judge import Judgement
from ..policy.rules import RuleError, RuleList, edit_raw_rules, scoped
from ..present.textsafe import safe
from ..present.views import judgement_json, without_session_ids
from ..vocab import Ground, Ruling


def _client() -> ControlClient | None:
    return ControlClient.connect() if read_control() is not None else None


def _print(data: Any, as_json: bool, text: str) -> None:
    # ASCII JSON: an agent-named path in a rule never reaches the terminal as a raw C1 or bidi
    # and session ids only as their hash (the grants), as every UI shows them
    print(json.dumps(without_session_ids(data), indent=2, ensure_ascii=True) if as_json else text)


def _offline_rules() -> dict[str, Any]:
    data: dict[str, Any] = load_config().rules.to_json()
    data["grants"] = []
    return data


def _listing(data: dict[str, Any]) -> str:
    from ..present.textsafe import HIDDEN_WARNING, render  # (kept apart from the module's imports)

    lines: list[str] = []
    for which in (RuleList.DENY, RuleList.ASK, RuleList.ALLOW):
        for i, text in enumerate(data.get(which.value, [])):
            shown = render(text)  # may hold a path or a value an agent wrote
            warn = f"  ⚠ {HIDDEN_WARNING}" if shown.hidden else ""
            lines.append(f"{which.value}[{i}]  {shown.text}{warn}")
    if not lines:
        lines.append("no rules (every call follows its tool's tier)")
    for g in data.get("grants", []):
        lines.append(
            f"session grant  {safe(g['tool'])}  {safe(g.get('scope', ''))}  "
            f"for {safe(g['client'])} "
            f"(session {safe(g.get('session', ''))})"
        )
    return "\n".join(lines)


def cmd_rules(args: argparse.Namespace) -> int:
    client = _client()
    action = args.action
    if action == "list":
        data = client.listing("rules") if client else _offline_rules()
        _print(data, args.json, _listing(data))
        return 0
    which = RuleList(args.list)
    if action in ("add", "rm") and not args.rule.isdigit():
        args.rule = scoped(args.rule, args.machine)  # --machine NAME: "@NAME rule"
    if action == "add" and args.machine is not None:
        known = {"default", *(m.name for m in load_config().machines)}
        if args.machine not in known:  # a typo would leave the rule applying to no one
            print(
                f"a2a-bridge: note: no machine named {args.machine} yet; the rule applies "
                "once one is added ('a2a-bridge machines list')",
                file=sys.stderr,
            )
    if action == "add":
        if not args.json:  # what the rule means, before it is saved (JSON output stays JSON)
            print(_examples(which, args.rule))
        if client:
            client.add_rules(which, [args.rule])
            data = client.listing("rules")
        else:
            cfg = edit_config(
                load_config().path, lambda raw: edit_raw_rules(raw, which, add=[args.rule])
            )
            data = cfg.rules.to_json()
        _print(data, args.json, f"added to rules.{which.value}: {args.rule}")
        return 0
    if action == "rm":
        if client:
            client.remove_rule(which, args.rule)
            data = client.listing("rules")
        else:
            text = args.rule
            if text.isdigit():
                current = load_config().rules.to_json()[which.value]
                if int(text) >= len(current):
                    raise RuleError(f"rules.{which.value} has no entry {text}")
                text = current[int(text)]
            cfg = edit_config(
                load_config().path, lambda raw: edit_raw_rules(raw, which, remove=[text])
            )
            data = cfg.rules.to_json()
        _print(data, args.json, f"removed from rules.{which.value}: {args.rule}")
        return 0
    # test
    name, arguments = "bash", {"command": args.rule}
    parsed: Any = None
    if args.tool:
        try:
            parsed = json.loads(args.rule) if args.rule.strip().startswith("{") else None
        except ValueError:
            parsed = None
        name, arguments = args.tool, parsed if isinstance(parsed, dict) else {"path": args.rule}
    note = None
    if client:
        judged = client.test_rule(name, arguments, args.machine)
    else:
        from ..core.bridge import offline_explain  # builds the tools and the path policy

        judged = offline_explain(load_config(), audit_path(), name, arguments, args.machine)
        note = (
            "the bridge is not running: judged with the saved config (no session grants, "
            "no upstream MCP tools)"
        )
    result = judgement_json(judged)
    if note:
        result["note"] = note
    text = _explain(judged, note)
    if args.tool and isinstance(parsed, dict):
        # The types the rules compare (7, "7", false, "false"), as the bridge read them.
        text += f"\n(arguments as JSON: {safe(json.dumps(arguments, ensure_ascii=True))})"
    _print(result, args.json, text)
    return 0


def _examples(which: RuleList, text: str) -> str:
    """Two calls the rule matches and one it does not (``bash(echo forbidden*)`` matches
    ``echo forbidden now``), so a glob that means something else than meant shows itself."""
    from ..policy.examples import example_lines
    from ..policy.rules import parse_rule

    try:
        rule = parse_rule(text, allow=which is RuleList.ALLOW)
    except RuleError:
        return ""  # saving it says why
    return "\n".join(f"  {safe(line)}" for line in example_lines(rule, which))


_RULINGS = {
    Ruling.RUN: "runs unattended",
    Ruling.RUN_IN_BOX: "runs unattended in the box",
    Ruling.ASK: "asks a human",
    Ruling.REFUSE: "is refused",
    Ruling.NOT_EXPOSED: "is refused",
}


def _explain(j: Judgement, note: str | None = None) -> str:
    """The judgement in one line; a rule may hold an agent's path: never raw to the terminal."""
    outcome, m = _RULINGS[j.ruling], j.match
    if m.rule and j.ground in (Ground.RULE, Ground.SUSPENDED, Ground.ESCALATION):
        rule = safe(m.rule)
        line = f"{outcome}: rules.{m.decision}[{m.index}] {rule}"
        if j.ground is Ground.ESCALATION:
            line = f"asks a human: {rule} matches, but the path always asks"
        elif j.ground is Ground.SUSPENDED:
            line = f"asks a human: {rule} matches, but {j.text}"
    elif m.unsafe and j.ground in (Ground.GUARD, Ground.TIER, Ground.NO_BOX):
        line = f"{outcome}: no allow rule can cover it: {safe(m.unsafe)}"
    elif j.ground is Ground.INVALID and j.invalid:
        line = f"{outcome}: {safe(j.invalid)}"
    else:
        line = f"{outcome} (no rule matches; {j.text})"
    if note:
        line += f"\n({note})"
    return line


def add_rules_parser(sub: argparse._SubParsersAction) -> None:
    r = sub.add_parser(
        "rules",
        help="list, add, remove or test rules (e.g. bash(git status))",
        description="Rules decide per call: deny, then ask, then allow; no match: the tier.",
    )
    actions = r.add_subparsers(dest="action", required=True)
    specs = {
        "list": None,
        "add": "the rule, e.g. 'bash(git diff *)' or 'read(~/proj/**)'",
        "rm": "the rule's text, or its index in the list",
        "test": "a bash command (with --tool: a path, or a JSON object of arguments)",
    }
    for action, what in specs.items():
        a = actions.add_parser(action, help=what or "show the rules and session grants")
        if what is not None:
            a.add_argument("rule", nargs="+", help=what)
        if action in ("add", "rm"):
            g = a.add_mutually_exclusive_group()
            for name in ("ask", "deny"):
                g.add_argument(
                    f"--{name}",
                    dest="list",
                    action="store_const",
                    const=name,
                    help=f"the {name} list (default: allow)",
                )
        if action == "test":
            a.add_argument("--tool", help="the tool to test (default: bash)")
        if action != "list":
            a.add_argument(
                "--machine",
                metavar="NAME",
                help=(
                    "as if called from this machine"
                    if action == "test"
                    else "the rule applies only to calls from this machine (saved as @NAME rule)"
                ),
            )
        a.add_argument("--json", action="store_true", help="print the API's JSON")
        a.set_defaults(func=_run, list="allow", rule=[], tool=None, machine=None)


def _run(args: argparse.Namespace) -> int:
    args.rule = " ".join(args.rule)  # one quoted argument, or the words of a command
    return cmd_rules(args)  # a RuleError is a BridgeError: main prints it (exit 1)

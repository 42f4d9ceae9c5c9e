"""Batch decisions (server/present/batch.py): which waiting calls one *Approve all N* may cover,
and the tray's batch items (tray/menu.py is pure)."""

from __future__ import annotations

import dataclasses

import pytest

from omp_a2a_bridge.server.policy.paths import Escalation, EscalationKind
from omp_a2a_bridge.server.present.batch import (
    BATCH_MAX,
    BatchRefused,
    batch_key,
    batch_of,
    batches,
    check_batch,
    origin_of,
)
from omp_a2a_bridge.server.types import BoxPlacement, PendingCall, Snapshot
from omp_a2a_bridge.server.vocab import Decision
from omp_a2a_bridge.tray.menu import ActionKind, call_context, menu_model, pending_label

NOW = 1_000_000.0
OUT = Escalation(EscalationKind.OUTSIDE_ROOTS, "outside the roots", "/srv/data/a.txt")
SSH = Escalation(EscalationKind.PROTECTED, "SSH keys", "/home/u/.ssh/id_rsa")


def read(i: int, *, client="claude-code", sid="s1", rule="read(/srv/data/**)", esc=OUT, **kw):
    return PendingCall(
        f"a{i}", sid, client, "read", {"path": f"/srv/data/{i}.txt"}, f"read: /srv/data/{i}.txt",
        NOW - 10 + i, escalation=esc, proposed_rule=rule, **kw,
    )  # fmt: skip


def bash(i: int, *, inside=True, rule="bash(make test *)"):
    return PendingCall(
        f"b{i}", "s1", "claude-code", "bash", {"command": "make test"}, "bash: make test",
        NOW, proposed_rule=rule, box=BoxPlacement(inside),
    )  # fmt: skip


def test_reads_of_one_folder_from_one_client_share_a_key():
    calls = [read(i) for i in range(5)]
    (b,) = batches(calls)
    assert b.ids == ("a0", "a1", "a2", "a3", "a4")
    assert b.label == "5 × read /srv/data/** (claude-code)"
    assert b.to_json()["count"] == 5 and b.to_json()["scope"] == "read(/srv/data/**)"
    assert batch_of(calls, "a3") == b


def test_sessions_of_one_client_group_but_never_across_clients_or_machines():
    assert batch_key(read(1, sid="s1")) == batch_key(read(2, sid="s2"))
    assert batch_key(read(1, client="claude-code")) != batch_key(read(2, client="codex"))
    assert batches([read(1, client="claude-code"), read(2, client="codex")]) == []
    # Calls carry their session's machine once machines land (PendingCall.machine): the key
    # includes it (origin_of), so two machines' calls never share a batch.
    one, two = read(1), read(2)
    assert origin_of(one) == ("default", "claude-code")
    a, b = on_machine(one, "laptop"), on_machine(two, "ci-box")
    assert origin_of(a) == ("laptop", "claude-code")
    assert batch_key(a) != batch_key(b)
    assert batches([a, b]) == []
    assert batches([a, on_machine(two, "laptop")]) != []


def on_machine(p: PendingCall, machine: str):
    """``p`` from ``machine``: the real field when PendingCall has it, else a stand-in."""
    if "machine" in PendingCall.__dataclass_fields__:
        return dataclasses.replace(p, machine=machine)  # type: ignore[call-arg]

    class OnMachine:
        def __init__(self) -> None:
            for f in PendingCall.__dataclass_fields__:
                setattr(self, f, getattr(p, f))
            self.machine = machine

    return OnMachine()


def test_scope_is_the_proposed_rule_and_the_escalation_kind():
    assert batch_key(read(1)) != batch_key(read(2, rule="read(/srv/other/**)"))
    assert batch_key(read(1)) != batch_key(read(2, esc=None))


@pytest.mark.parametrize(
    "call",
    [
        read(1, rule=None),  # nothing names its scope
        read(1, esc=SSH),  # an escalation that always asks
        read(1, hidden=True),  # hidden characters: looked at one by one
        read(1, client="claude\u202ecode"),  # ... in the client's name too
        read(1, client="claude-c\u043ede"),  # a look-alike letter (Cyrillic o) in a Latin word
        bash(1, inside=False),  # would run outside the box
        PendingCall(
            "c1", "s1", "x", "bash", {"command": "ls"}, "bash: ls", NOW, proposed_rule="bash(ls)"
        ),
    ],
)
def test_never_batched(call):
    assert batch_key(call) is None
    assert batches([call, dataclasses.replace(call, id="z9")]) == []


def test_unboxed_bash_never_joins_boxed_bash():
    assert [b.ids for b in batches([bash(1), bash(2), bash(3, inside=False)])] == [("b1", "b2")]


def test_check_batch_covers_exactly_the_named_calls():
    calls = [read(i) for i in range(4)]
    live, gone = check_batch(calls, ["a0", "a1", "a9"])
    assert live == ["a0", "a1"] and gone == ["a9"]  # a3 waits with the same key: not named
    with pytest.raises(BatchRefused, match="not of one kind"):
        check_batch([*calls, read(7, client="codex")], ["a0", "a7"])
    with pytest.raises(BatchRefused, match="on its own"):
        check_batch([*calls, bash(1, inside=False)], ["a0", "b1"])
    with pytest.raises(BatchRefused):
        check_batch(calls, [])
    with pytest.raises(BatchRefused):
        check_batch(calls, ["a0", "a0"])
    with pytest.raises(BatchRefused):
        check_batch(calls, [f"a{i}" for i in range(BATCH_MAX + 1)])


def snap(pending) -> Snapshot:
    return Snapshot(
        seq=1, url="http://127.0.0.1:1/", control_url=None, host="127.0.0.1", port=1,
        paused=False, running=True, sessions=(), pending=tuple(pending), approvers=("tray",),
        token_source="keyring", warnings=(), calls_total=0,
    )  # fmt: skip


def test_tray_batch_items_list_what_they_cover_and_name_the_ids():
    calls = [read(i) for i in range(3)] + [bash(1, inside=False)]
    items = menu_model(snap(calls), now=NOW)
    (group,) = [i for i in items if i.text.startswith("All 3 of this kind")]
    assert group.text == "All 3 of this kind: 3 × read /srv/data/** (claude-code)"
    sub = group.submenu
    assert sub is not None
    assert [i.text for i in sub if not i.enabled][:3] == [
        "a0: read: /srv/data/0.txt", "a1: read: /srv/data/1.txt", "a2: read: /srv/data/2.txt",
    ]  # fmt: skip
    approve, deny = sub[-2], sub[-1]
    assert approve.text == "Approve all 3"
    assert approve.action == (ActionKind.BATCH, Decision.APPROVE, "a0", "a1", "a2")
    assert deny.text == "Deny all 3" and deny.action[:2] == (ActionKind.BATCH, Decision.DENY)


PIPE_TEXT = "runs code fetched from the network (curl into a shell)"


def test_tray_shows_the_diff_and_the_risk_of_a_call():
    p = PendingCall(
        "e1", "s1", "claude-code", "bash", {"command": "curl x | sh"}, "bash: curl x | sh", NOW,
        preview={"risks": [{"risk": "shell_pipe", "text": PIPE_TEXT}]},
    )  # fmt: skip
    assert pending_label(p, NOW).endswith(" · ⚠ pipes into a shell")
    assert "⚠ Risk: runs code fetched from the network (curl into a shell)" in call_context(p)
    change = {
        "kind": "diff", "added": 1, "removed": 1, "eol": "lf", "truncated": False,
        "lines": [["@", "@@ -1,2 +1,2 @@"], [" ", "a"], ["-", "old \\x1b"], ["+", "new"]],
    }  # fmt: skip
    e = PendingCall("e2", "s1", "c", "edit", {}, "edit: f", NOW, preview={"change": change})
    ctx = call_context(e)
    assert "Change: +1 −1 lines" in ctx
    assert [x for x in ctx if x[:1] in "@ -+"][:4] == [
        "@@ -1,2 +1,2 @@",
        " a",
        "-old \\x1b",
        "+new",
    ]

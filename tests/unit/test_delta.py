"""server/present/delta.py: a diff applied to the previous snapshot is the new snapshot."""

from __future__ import annotations

import itertools
import json
import random
import subprocess
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from omp_a2a_bridge.server.present import delta

from ..conftest import require_system

ASSETS = Path(__file__).resolve().parents[2] / "assets"

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-2, 2, allow_nan=False).map(lambda f: round(f, 1)),
    st.text(alphabet="ab1", max_size=3),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet="xyz", max_size=2), inner, max_size=3)
    ),
    max_leaves=8,
)
KEYS = st.sampled_from(["a", "b", "c", "d", "e", "f", "g"])


def keyed_items(field: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of objects keyed by ``field`` (unique keys, or now and then a duplicate or a
    missing key: then the whole list is sent)."""
    item = st.fixed_dictionaries({field: KEYS}, optional={"v": SCALARS, "w": JSON})
    unique = st.lists(item, max_size=7, unique_by=lambda x: x[field])
    return st.one_of(unique, unique, unique, st.lists(item | JSON, max_size=4))


SNAPSHOT = st.fixed_dictionaries(
    {},
    optional={
        "sessions": keyed_items("sid"),
        "pending": keyed_items("id"),
        "servers": keyed_items("name"),
        "paused": st.booleans(),
        "calls_total": st.integers(0, 3) | st.booleans(),
        "counts": JSON,
        "other": JSON,
    },
)


def evolve(old: dict[str, Any], data: st.DataObject) -> dict[str, Any]:
    """A next snapshot that shares most of the old one (as real ones do): items kept, moved,
    changed, dropped or added."""
    new = dict(old)
    for key, field in delta.KEYED.items():
        if key not in old or not isinstance(old[key], list) or not data.draw(st.booleans()):
            continue
        items = [x for x in old[key] if data.draw(st.integers(0, 5)) > 0]  # some dropped
        items = data.draw(st.permutations(items)) if data.draw(st.booleans()) else items
        items = [
            dict(x, v=data.draw(SCALARS)) if isinstance(x, dict) and data.draw(st.booleans()) else x
            for x in items
        ]
        items += data.draw(keyed_items(field))
        new[key] = items
    if data.draw(st.booleans()):
        new.update(data.draw(SNAPSHOT))
    for key in list(new):
        if data.draw(st.integers(0, 9)) == 0:
            del new[key]
    return new


def wire(x: Any) -> Any:
    """Through JSON and back, as the client gets it."""
    return json.loads(json.dumps(x))


@settings(max_examples=200, deadline=None)
@given(SNAPSHOT, st.data())
def test_a_diff_applied_to_the_previous_snapshot_is_the_new_one(old, data):
    new = evolve(old, data)
    d = delta.diff(old, new)
    patched = delta.patch(wire(old), wire(d))
    assert json.dumps(patched, sort_keys=True) == json.dumps(new, sort_keys=True)
    for key in delta.KEYED:  # the lists' order too, not only their content
        # (sort_keys: an item's key order means nothing to a JSON reader; the list order does)
        assert json.dumps(patched.get(key), sort_keys=True) == json.dumps(
            new.get(key), sort_keys=True
        )


@settings(max_examples=100, deadline=None)
@given(SNAPSHOT, st.data())
def test_a_chain_of_diffs_ends_at_the_last_state(first, data):
    """A client that got the first state in full and every diff after it holds the last."""
    states = [first]
    for _ in range(data.draw(st.integers(1, 5))):
        states.append(evolve(states[-1], data))
    client = delta.apply_event(None, wire({**first, "version": 0}))
    for version, (old, new) in enumerate(itertools.pairwise(states), start=1):
        msg = {"version": version, "base": version - 1, "diff": delta.diff(old, new)}
        client = delta.apply_event(client, wire(msg))
        assert client is not None
    assert client is not None and client.pop("version") == len(states) - 1
    assert json.dumps(client, sort_keys=True) == json.dumps(states[-1], sort_keys=True)


def test_nothing_changed_is_an_empty_diff():
    snap = {"sessions": [{"sid": "a", "calls": 1}], "paused": False}
    assert delta.diff(snap, json.loads(json.dumps(snap))) == {}


def test_a_change_of_type_is_a_change():
    """1 == True == 1.0 in Python; a client reading JSON sees three different values."""
    assert delta.diff({"x": 1}, {"x": True}) == {"set": {"x": True}}
    assert delta.diff({"x": [1]}, {"x": [1.0]}) == {"set": {"x": [1.0]}}


def test_a_used_session_moves_to_the_end_and_only_it_is_sent():
    """The session table is most-recently-used first: one call sends one session, not the
    order of all 64."""
    old = {"sessions": [{"sid": f"s{i}", "calls": 0} for i in range(64)]}
    used = dict(old["sessions"][10], calls=1)
    new = {"sessions": [*old["sessions"][:10], *old["sessions"][11:], used]}
    d = delta.diff(old, new)
    assert d == {"lists": {"sessions": {"key": "sid", "upsert": [used], "last": ["s10"]}}}
    assert delta.patch(old, d) == new


def test_a_new_waiting_call_is_sent_alone():
    calls = [{"id": f"c{i}", "tool": "ls", "summary": "x" * 200} for i in range(31)]
    arriving = {"id": "c31", "tool": "write", "summary": "y"}
    d = delta.diff({"pending": calls}, {"pending": [*calls, arriving]})
    assert d == {"lists": {"pending": {"key": "id", "upsert": [arriving]}}}


def test_a_diff_that_does_not_follow_asks_for_the_whole_state():
    state = delta.apply_event(None, {"version": 3, "paused": False})
    assert state == {"version": 3, "paused": False}
    gap = {"version": 5, "base": 4, "diff": {"set": {"paused": True}}}
    assert delta.apply_event(state, gap) is None
    assert delta.apply_event(None, gap) is None
    follows = {"version": 4, "base": 3, "diff": {"set": {"paused": True}}}
    assert delta.apply_event(state, follows) == {"version": 4, "paused": True}


def test_lists_without_unique_keys_are_sent_whole():
    old = {"sessions": [{"sid": "a"}, {"sid": "a"}]}
    new = {"sessions": [{"sid": "a"}]}
    assert delta.diff(old, new) == {"set": {"sessions": [{"sid": "a"}]}}
    assert delta.diff({"pending": "x"}, {"pending": []}) == {"set": {"pending": []}}


def test_the_page_applies_diffs_as_this_module_does():
    """assets/page.js's applyEvent (run by node) gives the same states, lists' order included,
    on diffs of random session and waiting-call lists."""
    node = require_system("node", packages="nodejs")["node"]
    page = (ASSETS / "page.js").read_text()
    code = page[page.index("function applyList") : page.index("function connect()")]
    rng = random.Random(26)

    def items(field: str) -> list[dict[str, Any]]:
        return [
            {field: k, "v": rng.randint(0, 3)} for k in rng.sample("abcdefghij", rng.randint(0, 8))
        ]

    cases = []
    for _ in range(300):
        old = {
            "sessions": items("sid"),
            "pending": items("id"),
            "paused": rng.random() < 0.5,
            "x": 1,
        }
        new = dict(old)
        for key, field in (("sessions", "sid"), ("pending", "id")):
            kept = [dict(x, v=rng.randint(0, 3)) if rng.random() < 0.3 else x for x in old[key]]
            kept = [x for x in kept if rng.random() < 0.8]
            if rng.random() < 0.3:
                rng.shuffle(kept)
            elif kept and rng.random() < 0.5:
                kept.append(kept.pop(rng.randrange(len(kept))))  # one used: moves to the end
            known = {x[field] for x in kept}
            new[key] = kept + [x for x in items(field) if x[field] not in known][:2]
        if rng.random() < 0.3:
            new["paused"] = not old["paused"]
        if rng.random() < 0.2:
            del new["x"]
        msg = {"version": 2, "base": 1, "diff": delta.diff(old, new)}
        cases.append([{**old, "version": 1}, msg, {**new, "version": 2}])
    cases.append([{"version": 1}, {"version": 3, "base": 2, "diff": {}}, None])  # a gap
    script = code + (
        "const cases = JSON.parse(require('fs').readFileSync(0, 'utf8'));\n"
        "process.stdout.write(JSON.stringify(cases.map(([o, m]) => applyEvent(o, m))));\n"
    )
    out = subprocess.run(
        [node, "-e", script], input=json.dumps(cases), capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    for (_, _, want), state in zip(cases, got, strict=True):
        assert json.dumps(state, sort_keys=True) == json.dumps(want, sort_keys=True)

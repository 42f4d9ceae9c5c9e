"""tray/sni_dbus.py, pure part: the bus daemon calls the tray makes and the signal it waits for."""

from __future__ import annotations

import pytest
from dbus_fast import Message, MessageType

from omp_a2a_bridge.tray.sni_dbus import WATCHER, WATCHER_OWNER_RULE, bus_call, watcher_arrived


def _owner_changed(name: str, old: str, new: str) -> Message:
    return Message(
        message_type=MessageType.SIGNAL,
        path="/org/freedesktop/DBus",
        interface="org.freedesktop.DBus",
        member="NameOwnerChanged",
        signature="sss",
        body=[name, old, new],
    )


@pytest.mark.parametrize(
    ("msg", "arrived"),
    [
        (_owner_changed(WATCHER, "", ":1.42"), True),  # the panel started
        (_owner_changed(WATCHER, ":1.7", ":1.42"), True),  # the panel restarted
        (_owner_changed(WATCHER, ":1.42", ""), False),  # the panel went away
        (_owner_changed("org.example.Other", "", ":1.42"), False),
    ],
)
def test_only_a_new_owner_of_the_watcher_name_is_an_arrival(msg, arrived):
    assert watcher_arrived(msg) is arrived


def test_the_match_rule_and_calls_go_to_the_bus_daemon():
    call = bus_call("AddMatch", WATCHER_OWNER_RULE)
    assert (call.destination, call.member, call.signature) == (
        "org.freedesktop.DBus",
        "AddMatch",
        "s",
    )
    assert call.body == [WATCHER_OWNER_RULE]
    assert "member='NameOwnerChanged'" in WATCHER_OWNER_RULE
    assert f"arg0='{WATCHER}'" in WATCHER_OWNER_RULE

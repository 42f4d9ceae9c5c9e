"""server/mcp/netlimits.py, pure part: how the descriptor limit is shared between the listeners."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server.mcp.netlimits import (
    CONTROL_MAX_CONNECTIONS,
    cap_clamped,
    connection_caps,
)


@pytest.mark.parametrize(
    ("nofile", "mcp", "control"),
    [
        (1024, 1024 - 128 - 64, 64),  # an eighth kept back (128), the control share (64)
        (256, 256 - 64 - 16, 16),  # the reserve is at least 64; control gets a sixteenth
        (128, 128 - 64 - 8, 8),
        (32, 16, 4),  # tiny limits: never under 16 / 4
        (None, 65536 - 8192 - 64, 64),  # no limit (Windows): as if 65536
        (1 << 20, (1 << 20) - (1 << 17) - CONTROL_MAX_CONNECTIONS, CONTROL_MAX_CONNECTIONS),
    ],
)
def test_automatic_caps_leave_a_reserve_and_the_control_share(nofile, mcp, control):
    assert connection_caps(0, nofile) == (mcp, control)


def test_an_explicit_cap_is_used_up_to_what_the_descriptor_limit_allows():
    assert connection_caps(5000, 128) == (56, 8)
    assert connection_caps(50, 128) == (50, 8)
    assert connection_caps(3, None) == (3, 64)
    assert cap_clamped(50, 128) is None and cap_clamped(0, 128) is None
    said = cap_clamped(5000, 256)
    assert said is not None and "5000" in said and "256" in said and "using 176" in said


@pytest.mark.parametrize("nofile", [64, 128, 256, 1024, 4096, 65536])
def test_automatic_caps_never_reach_the_descriptor_limit(nofile):
    mcp, control = connection_caps(0, nofile)
    assert mcp + control + 64 <= nofile or mcp == 16

"""server/infra/logs.py: every log line is rendered safe, the bridge's own and the SDK's."""

from __future__ import annotations

import logging

import pytest

from omp_a2a_bridge.server.infra.logs import (
    PACKAGE_LOGGER,
    PEER_LOGGERS,
    BridgeLogHandler,
    SafeFormatter,
)


def test_the_formatter_escapes_controls_and_keeps_lines():
    text = "a\x1b[2Jb\nc\u202ed"
    record = logging.LogRecord(PACKAGE_LOGGER, logging.WARNING, "", 0, text, (), None)
    assert SafeFormatter().format(record) == "[a2a-bridge] a\\x1b[2Jb\nc\\u202ed"


@pytest.mark.parametrize("name", [*PEER_LOGGERS, PACKAGE_LOGGER])
def test_peer_library_warnings_go_through_the_safe_handler(name, capsys, monkeypatch):
    from omp_a2a_bridge.server.infra import logs as logsetup

    for n in (name, PACKAGE_LOGGER):  # a fresh logger state for this test
        logger = logging.getLogger(n)
        monkeypatch.setattr(logger, "handlers", [])
        monkeypatch.setattr(logger, "propagate", True)
    logsetup.setup_logging()
    logging.getLogger(f"{name}.sub").warning("Unknown SSE event: %s", "\x1b]0;PWNED\x07")
    err = capsys.readouterr().err
    assert "\x1b" not in err and "PWNED" in err
    assert any(isinstance(h, BridgeLogHandler) for h in logging.getLogger(name).handlers)

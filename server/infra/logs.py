"""The bridge's own log: stderr, one prefix, never a secret (callers never pass one), and never
a raw control character.

Log lines carry text the bridge does not control: an upstream server's stderr and exit reason,
its tool names, the SDK's messages (which quote server headers). The formatter renders every
line through :mod:`textsafe`, so an escape sequence in any of them cannot retitle, recolour or
rewrite the user's terminal — whoever wrote the ``log`` call.

Every module logs to ``logging.getLogger(__name__)``: all of them sit under one package logger,
:data:`PACKAGE_LOGGER`, which alone has the handler, the level and ``propagate = False`` (set
here, once). The record's name is not printed: every line still reads ``[a2a-bridge] …``.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

from ..present.textsafe import render

# The parent of every module's logger (``omp_a2a_bridge.server.core.bridge``, ``...tray.app``).
PACKAGE_LOGGER = "omp_a2a_bridge"

# Loggers of the libraries the bridge runs in-process whose messages can quote a peer's text.
PEER_LOGGERS = ("mcp", "httpx2")


class BridgeLogHandler(logging.StreamHandler[TextIO]):
    """Ours, by its class: set up once however often :func:`setup_logging` runs."""


class SafeFormatter(logging.Formatter):
    """``[a2a-bridge] message``, each line rendered safe (a traceback keeps its lines)."""

    def __init__(self, prefix: str = "[a2a-bridge] ") -> None:
        super().__init__(prefix + "%(message)s")

    def format(self, record: logging.LogRecord) -> str:
        return render(super().format(record), multiline=True).text


def _attach(logger: logging.Logger, level: int, prefix: str) -> None:
    if any(isinstance(h, BridgeLogHandler) for h in logger.handlers):
        return
    handler = BridgeLogHandler(sys.stderr)
    handler.setFormatter(SafeFormatter(prefix))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def setup_logging(level: int = logging.INFO) -> None:
    _attach(logging.getLogger(PACKAGE_LOGGER), level, "[a2a-bridge] ")
    # Without a handler of their own, Python's last-resort handler would print their warnings
    # raw; they go through the same safe formatter, named.
    for name in PEER_LOGGERS:
        _attach(logging.getLogger(name), logging.WARNING, f"[a2a-bridge] {name}: ")
    # Tornado's own access/app logs would otherwise print request lines or tracebacks.
    logging.getLogger("tornado").setLevel(logging.CRITICAL)


def stderr_handlers() -> list[logging.Handler]:
    """The handlers :func:`setup_logging` attached (the log file copies what they write)."""
    names = (PACKAGE_LOGGER, *PEER_LOGGERS)
    return [
        h
        for name in names
        for h in logging.getLogger(name).handlers
        if isinstance(h, BridgeLogHandler)
    ]

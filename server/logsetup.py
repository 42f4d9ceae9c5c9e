"""The bridge's own log: stderr, one prefix, never a secret (callers never pass one)."""

from __future__ import annotations

import logging
import sys
from typing import TextIO


class BridgeLogHandler(logging.StreamHandler[TextIO]):
    """Ours, by its class: set up once however often :func:`setup_logging` runs."""


def setup_logging(level: int = logging.INFO) -> None:
    logger = logging.getLogger("a2a-bridge")
    if any(isinstance(h, BridgeLogHandler) for h in logger.handlers):
        return
    handler = BridgeLogHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[a2a-bridge] %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # Tornado's own access/app logs would otherwise print request lines or tracebacks.
    logging.getLogger("tornado").setLevel(logging.CRITICAL)

"""The bridge's own log: stderr, one prefix, never a secret (callers never pass one)."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: int = logging.INFO) -> None:
    logger = logging.getLogger("a2a-bridge")
    if any(getattr(h, "_a2a", False) for h in logger.handlers):
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[a2a-bridge] %(message)s"))
    handler._a2a = True  # type: ignore[attr-defined]  # our marker on a stdlib handler
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    # Tornado's own access/app logs would otherwise print request lines or tracebacks.
    logging.getLogger("tornado").setLevel(logging.CRITICAL)

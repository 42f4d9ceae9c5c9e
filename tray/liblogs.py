"""Log records of the libraries the tray uses, as single lines in our own log."""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class OneLine(logging.Handler):
    """A library's log records as one line in our log (no tracebacks on the user's terminal)."""

    def __init__(self, level: int = logging.INFO) -> None:
        super().__init__(logging.DEBUG)
        self.to_level = level

    def emit(self, record: logging.LogRecord) -> None:
        log.log(self.to_level, "%s: %s", record.name, record.getMessage())


def quiet_library_logs() -> None:
    """pystray logs "Failed to dock icon" with a traceback on every retry; desktop-notifier
    logs failed sends with one; dbus-fast logs a reply it could not send while stopping. Keep
    them as single lines at debug/info level instead."""
    libraries = (
        ("pystray", logging.DEBUG),
        ("desktop_notifier", logging.INFO),
        ("dbus_fast", logging.DEBUG),  # e.g. a host's request answered while we disconnect
    )
    for name, level in libraries:
        lib = logging.getLogger(name)
        if not any(isinstance(h, OneLine) for h in lib.handlers):
            lib.addHandler(OneLine(level))
        lib.propagate = False

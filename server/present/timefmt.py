"""The one way every UI writes a stretch of time ("12 s", "5 min", "3 h").

The tray, ``a2a-bridge status``/``watch`` and the approval page (``assets/page.js`` has the same
cut-offs in JavaScript) all show ages and countdowns this way, so one call reads the same
everywhere.
"""

from __future__ import annotations


def ago(seconds: float) -> str:
    """``seconds`` (clamped at 0) in the largest unit that keeps it readable: s, min or h."""
    seconds = max(seconds, 0)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"

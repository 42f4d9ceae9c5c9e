"""The tray's first start ever, remembered in a small private file beside the config.

Why: the first time the tray starts, the human has not seen what a headless start prints (what
is exposed, how to approve, where the log is), so the tray says it once as a notification; on
every later start it would be noise. Why a file of the tray's own and not a config key: the
config is the user's (hand-edited, its unknown keys stop the start); this is the app's memory,
like a window position. 0600, written whole (a temporary file replaced), so a crash never
leaves half of it.
"""

from __future__ import annotations

import json
import logging
import os
import time

log = logging.getLogger(__name__)

STATE_FILE = "tray-state.json"
SHOWN_KEY = "first_run_shown"  # wall clock of when the first-run notification was shown


class FirstRun:
    """``due()`` until ``mark()`` has written the state file in ``folder``."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, STATE_FILE)

    def due(self) -> bool:
        """True when no earlier start showed the text; an unreadable file counts as shown
        (a broken file must not make every start repeat it)."""
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return True
        except (OSError, ValueError) as e:
            log.info("tray state %s unreadable (%s): the first-run text is not shown", self.path, e)
            return False
        return not (isinstance(data, dict) and data.get(SHOWN_KEY))

    def mark(self) -> None:
        """Remember that the text was shown (0600, atomic); a failure is logged, not raised."""
        tmp = self.path + ".tmp"
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                if hasattr(os, "fchmod"):
                    os.fchmod(f.fileno(), 0o600)  # an old temporary file keeps its mode
                json.dump({SHOWN_KEY: time.time()}, f)
            os.replace(tmp, self.path)
        except OSError as e:
            log.info("tray state %s not written: %s", self.path, e)

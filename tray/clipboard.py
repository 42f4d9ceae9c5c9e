"""Copy text with pyperclip in a worker thread with a timeout (``wl-copy`` can hang)."""

from __future__ import annotations

import threading
from collections.abc import Callable

HINT = "install xclip or wl-clipboard"


def _default_copier(text: str) -> None:
    import pyperclip

    pyperclip.copy(text)


def copy_text(
    text: str, timeout: float = 2.0, copier: Callable[[str], None] | None = None
) -> str | None:
    """None on success, else why it failed (a sentence for the user, without the text)."""
    copier = copier or _default_copier
    result: list[BaseException | None] = []

    def work() -> None:
        try:
            copier(text)
            result.append(None)
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=work, name="a2a-clipboard", daemon=True)
    t.start()
    t.join(timeout)
    if not result:
        return f"the clipboard did not answer within {timeout:g} s"
    err = result[0]
    if err is None:
        return None
    name = type(err).__name__
    if name == "PyperclipException" or "copy/paste mechanism" in str(err):
        return f"no clipboard tool found ({HINT})"
    return f"{name}: {err}"

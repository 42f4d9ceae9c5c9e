"""A throwaway X display (Xvfb) with a tray host (trayer), for tests and the screenshot script."""

from __future__ import annotations

import os
import subprocess
import time


class XSession:
    def __init__(self, size: str = "900x600x24", tray_host: bool = True) -> None:
        r, w = os.pipe()
        self.xvfb = subprocess.Popen(
            ["Xvfb", "-displayfd", str(w), "-screen", "0", size, "-nolisten", "tcp"],
            pass_fds=(w,),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(w)
        with os.fdopen(r) as f:
            number = f.readline().strip()
        if not number:
            raise RuntimeError("Xvfb did not start")
        self.display = f":{number}"
        self.env = dict(os.environ, DISPLAY=self.display)
        self.env.pop("WAYLAND_DISPLAY", None)
        self.tray = None
        if tray_host:
            self.tray = subprocess.Popen(
                [
                    "trayer",
                    "--edge",
                    "top",
                    "--align",
                    "right",
                    "--widthtype",
                    "request",
                    "--height",
                    "40",
                    "--iconspacing",
                    "4",
                    "--transparent",
                    "false",
                    "--tint",
                    "0x303030",
                ],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            self._wait_for_tray_host(self.tray)

    def _wait_for_tray_host(self, tray: subprocess.Popen, timeout: float = 10.0) -> None:
        """Until trayer owns the system-tray selection: icons docked before that are lost."""
        from Xlib import X, display

        conn = display.Display(self.display)
        try:
            selection = conn.intern_atom("_NET_SYSTEM_TRAY_S0")
            deadline = time.monotonic() + timeout
            while conn.get_selection_owner(selection) == X.NONE:
                if time.monotonic() > deadline or tray.poll() is not None:
                    raise RuntimeError("trayer did not take the system tray")
                time.sleep(0.02)
        finally:
            conn.close()

    def close(self) -> None:
        for p in (self.tray, self.xvfb):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()

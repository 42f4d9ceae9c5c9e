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
            time.sleep(0.5)

    def close(self) -> None:
        for p in (self.tray, self.xvfb):
            if p is not None and p.poll() is None:
                p.terminate()
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    p.kill()

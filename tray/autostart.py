"""Start the tray at login: XDG autostart (Linux), a LaunchAgent (macOS), the Run key (Windows).

Each writes an absolute path to the installed entry point, enabling and disabling are
idempotent, and :meth:`Autostart.status` says what the OS will actually do (a ``Hidden=true``
desktop file or a Task-Manager-disabled Run entry count as off). The home directory, the
platform and the Windows registry are injectable so all three are tested on any OS.
"""

from __future__ import annotations

import configparser
import io
import os
import plistlib
import shutil
import sys
from collections.abc import Sequence
from typing import Protocol

APP_ID = "omp-a2a-bridge"
LAUNCHD_LABEL = "dev.omp.a2a-bridge"
RUN_KEY = r"Software\Microsoft\Windows\CurrentVersion\Run"
APPROVED_KEY = r"Software\Microsoft\Windows\CurrentVersion\Explorer\StartupApproved\Run"


class Registry(Protocol):
    """The few HKCU operations autostart needs (``winreg`` in production, a dict in tests)."""

    def get(self, key: str, name: str) -> object | None: ...
    def set(self, key: str, name: str, value: str) -> None: ...
    def delete(self, key: str, name: str) -> None: ...


class WinRegistry:
    def get(self, key: str, name: str) -> object | None:
        import winreg

        if sys.platform != "win32":  # never: the import failed; mypy checks the rest as win32
            raise ImportError("winreg")
        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, key) as k:
                return winreg.QueryValueEx(k, name)[0]
        except OSError:
            return None

    def set(self, key: str, name: str, value: str) -> None:
        import winreg

        if sys.platform != "win32":  # never: the import failed; mypy checks the rest as win32
            raise ImportError("winreg")
        with winreg.CreateKey(winreg.HKEY_CURRENT_USER, key) as k:
            winreg.SetValueEx(k, name, 0, winreg.REG_SZ, value)

    def delete(self, key: str, name: str) -> None:
        import winreg

        if sys.platform != "win32":  # never: the import failed; mypy checks the rest as win32
            raise ImportError("winreg")
        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, key, 0, winreg.KEY_SET_VALUE) as k:
                winreg.DeleteValue(k, name)
        except OSError:
            pass


def launch_command() -> list[str]:
    """Absolute command that starts the tray: the installed script, else ``python -m tray``."""
    bindir = os.path.dirname(os.path.abspath(sys.executable))
    for name in ("a2a-bridge", "a2a-bridge.exe"):
        candidate = os.path.join(bindir, name)
        if os.path.exists(candidate):
            return [candidate, "tray"]
    found = shutil.which("a2a-bridge")
    if found:
        return [os.path.abspath(found), "tray"]
    exe = sys.executable
    if sys.platform == "win32" and exe.lower().endswith("python.exe"):
        exe = exe[: -len("python.exe")] + "pythonw.exe"  # no console window at login
    return [os.path.abspath(exe), "-m", "omp_a2a_bridge.tray"]


def _quote(arg: str) -> str:
    return f'"{arg}"' if (" " in arg or '"' in arg) else arg


class Autostart:
    """ "Start at login" for this OS: enable, disable, and what the OS will actually do."""

    def __init__(
        self,
        platform: str | None = None,
        home: str | None = None,
        registry: Registry | None = None,
        command: Sequence[str] | None = None,
        config_home: str | None = None,
    ) -> None:
        self.platform = platform or sys.platform
        self.home = home or os.path.expanduser("~")
        default_config = None if home else os.environ.get("XDG_CONFIG_HOME")
        self.config_home = config_home or default_config or os.path.join(self.home, ".config")
        self.registry = registry
        self.command = list(command or launch_command())

    # -- where -------------------------------------------------------------------------------

    @property
    def path(self) -> str | None:
        if self.platform.startswith(("linux", "freebsd")):
            return os.path.join(self.config_home, "autostart", f"{APP_ID}.desktop")
        if self.platform == "darwin":
            return os.path.join(self.home, "Library", "LaunchAgents", f"{LAUNCHD_LABEL}.plist")
        return None

    def _registry(self) -> Registry:
        if self.registry is None:
            self.registry = WinRegistry()
        return self.registry

    # -- contents ------------------------------------------------------------------------------

    def desktop_entry(self) -> str:
        cp = configparser.ConfigParser(interpolation=None)
        cp.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case (stdlib idiom)
        cp["Desktop Entry"] = {
            "Type": "Application",
            "Name": "omp A2A bridge",
            "Comment": "Expose this machine's tools to remote agents, with approvals",
            "Exec": " ".join(_quote(a) for a in self.command),
            "TryExec": self.command[0],
            "Terminal": "false",
            "NoDisplay": "true",
            "X-GNOME-Autostart-enabled": "true",
            "Hidden": "false",
        }
        buf = io.StringIO()
        cp.write(buf, space_around_delimiters=False)
        return buf.getvalue()

    def launch_agent(self) -> bytes:
        return plistlib.dumps(
            {
                "Label": LAUNCHD_LABEL,
                "ProgramArguments": self.command,
                "RunAtLoad": True,
                "ProcessType": "Interactive",
                "LimitLoadToSessionType": "Aqua",
                # Restart after a crash, but let "Quit" stay quit (no plain KeepAlive).
                "KeepAlive": {"SuccessfulExit": False},
            }
        )

    def run_value(self) -> str:
        return " ".join(f'"{a}"' for a in self.command)

    # -- operations ------------------------------------------------------------------------------

    def enable(self) -> None:
        if self.platform == "win32":
            self._registry().set(RUN_KEY, APP_ID, self.run_value())
            return
        path = self.path
        assert path is not None
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = self.launch_agent() if self.platform == "darwin" else self.desktop_entry().encode()
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)

    def disable(self) -> None:
        if self.platform == "win32":
            self._registry().delete(RUN_KEY, APP_ID)
            return
        path = self.path
        if path and os.path.exists(path):
            os.unlink(path)

    def status(self) -> tuple[bool, str]:
        """(enabled, what the OS will do) — enabled means the app really starts at login."""
        if self.platform == "win32":
            value = self._registry().get(RUN_KEY, APP_ID)
            if value is None:
                return False, "no Run entry"
            approved = self._registry().get(APPROVED_KEY, APP_ID)
            if isinstance(approved, bytes | bytearray) and approved[:1] == b"\x03":
                return False, "disabled in Task Manager (StartupApproved)"
            return True, f"Run entry: {value}"
        path = self.path
        if not path or not os.path.exists(path):
            return False, f"no {path}"
        if self.platform == "darwin":
            with open(path, "rb") as f:
                data = plistlib.load(f)
            if not data.get("RunAtLoad"):
                return False, f"{path} has RunAtLoad off"
            return True, f"{path} ({' '.join(data.get('ProgramArguments', []))})"
        cp = configparser.ConfigParser(interpolation=None)
        cp.optionxform = str  # type: ignore[assignment,method-assign]  # keep key case (stdlib idiom)
        cp.read(path)
        entry = cp["Desktop Entry"] if cp.has_section("Desktop Entry") else {}
        if entry.get("Hidden", "false").lower() == "true":
            return False, f"{path} is Hidden=true"
        if entry.get("X-GNOME-Autostart-enabled", "true").lower() == "false":
            return False, f"{path} has X-GNOME-Autostart-enabled=false"
        return True, f"{path} ({entry.get('Exec', '')})"

    @property
    def enabled(self) -> bool:
        return self.status()[0]

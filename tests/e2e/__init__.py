"""tests/e2e: real processes of ours (serve, tray, CLI), desktops, browsers, D-Bus."""

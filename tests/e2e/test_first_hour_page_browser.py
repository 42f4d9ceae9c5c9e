"""The page header in a real browser: what is exposed in one line, and *Show logs* showing the
log file's last lines as text (an escape sequence in them stays visible, never interpreted)."""

from __future__ import annotations

import os

import pytest

from ..support.helpers import wait_for
from .test_approval_page_browser import _wait, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("browser")


def test_the_header_says_what_is_exposed_and_shows_the_log(start_bridge, env, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    os.makedirs(os.path.dirname(env["log"]), exist_ok=True)
    with open(env["log"], "w", encoding="utf-8") as f:
        f.write("[a2a-bridge] upstream x: <b>bold</b> \x1b[31mred\n")
    running = start_bridge({"approval": {"tiers": {"write": "allow"}}}, control=True)
    wait_for(lambda: running.runner.snapshot().box is not None)
    browser.get(running.runner.login_url())
    exposed = _wait(browser, lambda d: d.find_element(By.ID, "exposed").text or None)
    assert exposed.startswith(f"exposed: {os.path.realpath(env['root'])}")
    assert "tiers changed: write=allow" in exposed
    assert browser.find_element(By.ID, "logs-section").is_displayed() is False
    browser.find_element(By.ID, "show-logs").click()
    text = _wait(browser, lambda d: d.find_element(By.ID, "log-lines").text or None)
    assert text == "[a2a-bridge] upstream x: <b>bold</b> \\x1b[31mred"
    assert browser.find_elements(By.CSS_SELECTOR, "#log-lines b") == []  # text, not markup
    assert browser.find_element(By.ID, "log-path").text == env["log"]
    assert browser.find_element(By.ID, "show-logs").text == "Hide logs"

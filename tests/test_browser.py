"""The approval page in a real browser (Debian's Chromium driven by Selenium).

Log in through a one-time ``/login?code=...``, see a pending ``bash`` call with its full command,
click Approve and get the command's output over MCP; deny another with a reason. With
``A2A_UPDATE_SCREENSHOTS=1`` the screenshot is written to ``docs/approval-page.png``.
"""

from __future__ import annotations

import os

import pytest

from .conftest import require_system
from .helpers import in_thread

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


@pytest.fixture
def browser():
    paths = require_system("chromium", "chromedriver", packages="chromium chromium-driver")
    os.environ.setdefault("SE_AVOID_STATS", "true")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = paths["chromium"]
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1100,1000",
    ):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=paths["chromedriver"]))
    driver.implicitly_wait(0)
    yield driver
    driver.quit()


def _wait(driver, predicate, timeout=10):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: predicate(d))


def test_approve_and_deny_from_the_page(start_bridge, browser, tmp_path):
    from selenium.webdriver.common.by import By

    running = start_bridge({"approval": {"timeout_s": 30}}, control=True)
    info = running.runner.control
    browser.get(running.runner.login_url())  # a one-time code, not the secret
    _wait(browser, lambda d: "Pause bridge" in d.page_source and "session(s)" in d.page_source)
    assert browser.current_url == info.url  # the secret is gone from the address bar
    assert info.secret not in browser.page_source
    assert running.runner.snapshot().approvers == ("approval page",)

    agent = running.client("claude-code")
    command = "echo approved-in-the-browser\nprintf 'second line'"
    t, out = in_thread(agent.call, "bash", {"command": command})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    assert card.find_element(By.CSS_SELECTOR, "pre.command").text == command
    assert "claude-code" in card.text
    shot = os.path.join(
        DOCS if os.environ.get("A2A_UPDATE_SCREENSHOTS") else str(tmp_path), "approval-page.png"
    )
    browser.save_screenshot(shot)
    assert os.path.getsize(shot) > 10_000
    card.find_element(By.XPATH, ".//button[text()='Approve']").click()
    t.join(10)
    assert out[0].text == "approved-in-the-browser\nsecond line"
    _wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#pending .card"))

    t, out = in_thread(agent.call, "write", {"path": "x.txt", "content": "hello"})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    assert card.find_element(By.CSS_SELECTOR, "pre.content").text == "hello"
    card.find_element(By.CSS_SELECTOR, "input[type=text]").send_keys("wrong folder")
    card.find_element(By.XPATH, ".//button[text()='Deny']").click()
    t.join(10)
    assert out[0].text == "denied by the user: wrong folder"
    assert not os.path.exists(os.path.join(running.env["root"], "x.txt"))
    # The audit trail on the page shows both calls.
    _wait(browser, lambda d: "denied" in d.find_element(By.ID, "audit").text)
    browser.quit()
    # Closing the page detaches the approver.
    from .helpers import wait_for

    wait_for(lambda: running.runner.snapshot().approvers == ())

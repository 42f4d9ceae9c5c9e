"""The box on the approval page, in a real browser: the header says what the box is, a waiting
bash call says "Runs in the box" and offers "Run outside the box", which approves it."""

from __future__ import annotations

import pytest

from omp_a2a_bridge.server import box

from ..support.helpers import in_thread, wait_for
from .test_approval_page_browser import _wait, browser  # noqa: F401 - the fixture

pytestmark = pytest.mark.usefixtures("browser")


def test_the_page_shows_the_box_and_runs_a_call_outside_it(start_bridge, browser):  # noqa: F811
    from selenium.webdriver.common.by import By

    # bash at prompt, so a human sees the call (at its default tier, the box, it runs unasked)
    approval = {"timeout_s": 30, "tiers": {"bash": "prompt"}}
    running = start_bridge({"approval": approval}, control=True)
    wait_for(lambda: running.runner.snapshot().box is not None)
    status = box.check()
    browser.get(running.runner.login_url())
    header = _wait(browser, lambda d: d.find_element(By.ID, "box").text or None)
    assert header.startswith("box: ") and status.detail in header
    warn = "nobox" in (browser.find_element(By.ID, "box").get_attribute("class") or "")
    assert warn is (not status.available)  # no box: the warning colour

    t, out = in_thread(running.client("agent").call, "bash", {"command": "echo outside"})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    line = card.find_element(By.CSS_SELECTOR, "p.box")
    buttons = card.find_elements(By.XPATH, ".//button[text()='Run outside the box']")
    if status.available:
        assert line.text == "Runs in the box" and "inside" in line.get_attribute("class")
        buttons[0].click()
    else:
        assert line.text.startswith("⚠ Runs outside the box: no box on this machine")
        assert "outside" in line.get_attribute("class") and buttons == []
        card.find_element(By.XPATH, ".//button[text()='Approve']").click()
    t.join(60)
    assert out[0].text == "outside"

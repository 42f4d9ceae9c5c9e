"""The page's Machines section in real Chromium: every machine with what this run saw of it,
and *Revoke…* that asks first (Cancel keeps it; Revoke cuts its session at once)."""

from __future__ import annotations

from ..support.helpers import Mcp
from .test_approval_page_browser import _wait
from .test_approval_page_browser import browser as browser  # the Chromium fixture


def test_page_lists_machines_and_revoke_asks_first(start_bridge, browser, memory_keyring):
    from selenium.webdriver.common.by import By

    running = start_bridge(control=True)
    laptop = running.runner.add_machine("laptop").token
    agent = Mcp(running.port, token=laptop, client="claims-to-be-desk")
    agent.initialize()
    browser.get(running.runner.login_url())

    def row(name):
        rows = browser.find_elements(By.CSS_SELECTOR, f"#machines tr[data-machine='{name}']")
        return rows[0] if rows else None

    _wait(browser, lambda d: row("laptop") is not None and "1" in row("laptop").text)
    assert browser.find_element(By.ID, "machine-count").text == "2"
    assert row("default").find_elements(By.TAG_NAME, "button") == []  # rotated, not revoked
    cells = [c.text for c in row("laptop").find_elements(By.TAG_NAME, "td")]
    assert cells[0] == "laptop" and cells[4] == "1" and cells[5] == "—"
    # the session row names the machine from the token, not the client's claim
    sessions = browser.find_element(By.ID, "sessions").text
    assert "laptop" in sessions and "claims-to-be-desk" in sessions
    assert laptop not in browser.page_source

    row("laptop").find_element(By.XPATH, ".//button[text()='Revoke…']").click()
    question = _wait(browser, lambda d: row("laptop").find_elements(By.CSS_SELECTOR, ".confirm"))
    assert "Its 1 session(s) end" in question[0].text
    row("laptop").find_element(By.XPATH, ".//button[text()='Cancel']").click()
    _wait(browser, lambda d: row("laptop").find_elements(By.XPATH, ".//button[text()='Revoke…']"))
    assert agent.rpc("tools/list").status == 200  # nothing was cut

    row("laptop").find_element(By.XPATH, ".//button[text()='Revoke…']").click()
    _wait(browser, lambda d: row("laptop").find_elements(By.XPATH, ".//button[text()='Revoke']"))
    row("laptop").find_element(By.XPATH, ".//button[text()='Revoke']").click()
    _wait(browser, lambda d: row("laptop") is None)
    assert agent.rpc("tools/list").status == 401
    assert [m.name for m in running.runner.snapshot().machines] == ["default"]

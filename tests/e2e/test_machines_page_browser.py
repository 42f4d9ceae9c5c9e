"""The page's Machines section in real Chromium: every machine with what this run saw of it,
and *Revoke…* that asks first (Cancel keeps it; Revoke cuts its session at once)."""

from __future__ import annotations

from ..support.helpers import Mcp
from .test_approval_page_browser import _wait
from .test_approval_page_browser import browser as browser  # the Chromium fixture


def test_page_lists_machines_and_revoke_asks_first(start_bridge, browser, memory_keyring):
    from selenium.common.exceptions import (
        NoSuchElementException,
        StaleElementReferenceException,
    )
    from selenium.webdriver.common.by import By

    running = start_bridge(control=True)
    laptop = running.runner.add_machine("laptop").token
    agent = Mcp(running.port, token=laptop, client="claims-to-be-desk")
    agent.initialize()
    browser.get(running.runner.login_url())

    def row(name):
        rows = browser.find_elements(By.CSS_SELECTOR, f"#machines tr[data-machine='{name}']")
        return rows[0] if rows else None

    def click(name, label):
        """Click a row's button; a snapshot may rebuild the row meanwhile: then again."""

        def attempt(d):
            try:
                row(name).find_element(By.XPATH, f".//button[text()='{label}']").click()
            except (StaleElementReferenceException, NoSuchElementException, AttributeError):
                return False
            return True

        _wait(browser, attempt)

    def cells(name):
        """A row's cell texts, read in one go in the page (a rebuild cannot interleave)."""
        return browser.execute_script(
            "const r = document.querySelector(`#machines tr[data-machine='${arguments[0]}']`);"
            "return r ? [...r.cells].map((c) => c.textContent) : null;",
            name,
        )

    laptop_row = _wait(browser, lambda d: (c := cells("laptop")) and c[4] == "1" and c)
    assert laptop_row[0] == "laptop" and laptop_row[5] == "—"
    assert browser.find_element(By.ID, "machine-count").text == "2"
    assert cells("default")[6] == "the bridge's own token"  # rotated, not revoked
    # the session row names the machine from the token, not the client's claim
    sessions = browser.find_element(By.ID, "sessions").text
    assert "laptop" in sessions and "claims-to-be-desk" in sessions
    assert laptop not in browser.page_source

    click("laptop", "Revoke…")
    question = _wait(browser, lambda d: d.find_element(By.CSS_SELECTOR, "#machines .confirm").text)
    assert "Revoke laptop? Its 1 session(s) end" in question
    click("laptop", "Cancel")
    _wait(browser, lambda d: not d.find_elements(By.CSS_SELECTOR, "#machines .confirm"))
    assert agent.rpc("tools/list").status == 200  # nothing was cut

    click("laptop", "Revoke…")
    click("laptop", "Revoke")
    _wait(browser, lambda d: row("laptop") is None)
    assert agent.rpc("tools/list").status == 401
    assert [m.name for m in running.runner.snapshot().machines] == ["default"]

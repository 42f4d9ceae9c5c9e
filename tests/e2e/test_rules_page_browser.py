"""The page's Rules section and "Always allow calls like this" in real Chromium."""

from __future__ import annotations

import json

from ..support.helpers import in_thread, read_text, wait_for
from .test_approval_page_browser import _wait
from .test_approval_page_browser import browser as browser  # the Chromium fixture


def test_page_adds_tests_and_removes_a_rule(start_bridge, browser, env):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    running = start_bridge(
        {
            "approval": {"timeout_s": 30, "tiers": {"bash": "prompt"}},
            "rules": {"deny": ["bash(rm -rf *)"]},
        },
        control=True,
    )
    browser.get(running.runner.login_url())
    _wait(browser, lambda d: d.find_element(By.ID, "rule-count").text == "1")
    assert "bash(rm -rf *)" in browser.find_element(By.ID, "rules").text

    # Add.
    Select(browser.find_element(By.ID, "rule-list")).select_by_visible_text("allow")
    browser.find_element(By.ID, "rule-text").send_keys("bash(git status)")
    browser.find_element(By.XPATH, "//form[@id='rule-add']/button").click()
    # First what it means (two matches, one miss), before anything is saved; Add again saves.
    shown = _wait(browser, lambda d: d.find_element(By.ID, "rule-examples").text)
    assert "matches: git status" in shown and "does not match: git status extra" in shown
    assert running.runner.snapshot().rules.allow == ()
    browser.find_element(By.XPATH, "//form[@id='rule-add']/button").click()
    _wait(browser, lambda d: d.find_element(By.ID, "rule-count").text == "2")
    assert running.runner.snapshot().rules.to_json()["allow"] == ["bash(git status)"]
    assert json.loads(read_text(env["config"]))["rules"]["allow"] == ["bash(git status)"]
    # An invalid one is refused with the reason.
    browser.find_element(By.ID, "rule-text").send_keys("bash(git status; rm x)")
    browser.find_element(By.XPATH, "//form[@id='rule-add']/button").click()
    _wait(browser, lambda d: "one simple command" in d.find_element(By.ID, "toast").text)

    # Test a command against the rules.
    def tested(command):
        box = browser.find_element(By.ID, "rule-test-command")
        box.clear()
        box.send_keys(command)
        browser.find_element(By.XPATH, "//form[@id='rule-test']/button").click()
        return _wait(
            browser,
            lambda d: (t := d.find_element(By.ID, "rule-test-result").text) != tested.last and t,
        )

    tested.last = ""
    tested.last = tested("git status")
    assert tested.last == "runs unattended: rules.allow[0] bash(git status)"
    tested.last = tested("git status && rm -rf ~")
    assert tested.last == "is refused: rules.deny[0] bash(rm -rf *)"
    tested.last = tested("git status > out")
    assert "asks a human" in tested.last and "redirection > out" in tested.last

    # Remove.
    row = browser.find_element(By.CSS_SELECTOR, "#rules li[data-rule='bash(git status)']")
    row.find_element(By.XPATH, ".//button[text()='Remove']").click()
    _wait(browser, lambda d: d.find_element(By.ID, "rule-count").text == "1")
    assert running.runner.snapshot().rules.allow == ()
    assert json.loads(read_text(env["config"]))["rules"]["allow"] == []


def test_page_always_allow_saves_the_edited_rule(start_bridge, browser, env):
    from selenium.webdriver.common.by import By

    running = start_bridge(
        {"approval": {"timeout_s": 30, "tiers": {"bash": "prompt"}}}, control=True
    )
    browser.get(running.runner.login_url())
    _wait(browser, lambda d: "session(s)" in d.find_element(By.ID, "status").text)
    agent = running.client("claude-code")
    t, out = in_thread(agent.call, "bash", {"command": "echo one two"})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    editor = card.find_element(By.CSS_SELECTOR, "textarea.rule-edit")
    assert editor.get_attribute("value") == "bash(echo one *)"
    editor.clear()
    editor.send_keys("bash(echo one two)")
    card.find_element(By.XPATH, ".//button[text()='Always allow calls like this']").click()
    t.join(60)
    assert out[0].text == "one two"
    wait_for(lambda: running.runner.snapshot().rules.to_json()["allow"] == ["bash(echo one two)"])
    _wait(browser, lambda d: "bash(echo one two)" in d.find_element(By.ID, "rules").text)
    assert agent.call("bash", {"command": "echo one two"}).text == "one two"  # unattended


def test_page_shows_rules_rendered_and_says_when_always_allow_is_not_offered(
    start_bridge, browser, env
):
    from selenium.webdriver.common.by import By

    # A rule may hold a path an agent wrote: the page shows it escaped, with the warning, and
    # can still remove it (by its raw text).
    bad = "read(**/a\u202eb.txt)"
    running = start_bridge(
        {
            "approval": {"timeout_s": 30, "tiers": {"bash": "prompt"}},
            "rules": {"deny": [bad, "bash(rm -rf *)"]},
        },
        control=True,
    )
    browser.get(running.runner.login_url())
    _wait(browser, lambda d: d.find_element(By.ID, "rule-count").text == "2")
    rules = browser.find_element(By.ID, "rules").text
    assert "\u202e" not in rules and "read(**/a\\u202eb.txt)" in rules
    assert "contains hidden characters" in rules
    row = browser.find_elements(By.CSS_SELECTOR, "#rules li.rule")[0]
    row.find_element(By.XPATH, ".//button[text()='Remove']").click()
    _wait(browser, lambda d: d.find_element(By.ID, "rule-count").text == "1")
    assert running.runner.snapshot().rules.to_json()["deny"] == ["bash(rm -rf *)"]
    toast = _wait(browser, lambda d: d.find_element(By.ID, "toast").text)
    assert "\u202e" not in toast

    # A call no rule can cover says so where the "Always allow" button would be.
    agent = running.client("claude-code")
    t, out = in_thread(agent.call, "bash", {"command": "git log > out.txt"})
    card = _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pending .card"))[0]
    assert not card.find_elements(By.CSS_SELECTOR, "textarea.rule-edit")
    note = card.find_element(By.CSS_SELECTOR, ".no-always").text
    # This call's own reason: deny rules exist and a redirect hides what the command writes.
    assert note == (
        "No \u201cAlways allow\u201d for this call: deny rules exist and the command cannot "
        "be fully read (redirection > out.txt): it always asks"
    )
    card.find_element(By.XPATH, ".//button[text()='Deny']").click()
    t.join(60)
    assert out[0].text == "denied by the user"

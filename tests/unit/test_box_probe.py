"""The box probe's retry (``server/box/probe.py``): a probe that only timed out is tried again
later, a bounded number of times; a real answer (success, or user namespaces off) stays.

``bwrap`` itself is the OS edge replaced here (``_try``); the clock is the module's own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from omp_a2a_bridge.server.box import probe

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="box: Linux")


class Fake:
    """``bwrap`` that times out ``slow`` times, then answers ``code``; a clock we move."""

    def __init__(self, slow: int, code: int = 0) -> None:
        self.slow = slow
        self.code = code
        self.runs = 0
        self.now = 1000.0

    def run(
        self, bwrap: str, disable_userns: bool, prefix: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[bytes] | probe.TimedOut:
        if prefix:  # the Landlock scope's own try: no scope here
            return subprocess.CompletedProcess([], 1, b"", b"")
        self.runs += 1
        if self.slow > 0:
            self.slow -= 1
            return probe.TimedOut()
        return subprocess.CompletedProcess([], self.code, b"", b"no user namespaces")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    f = Fake(slow=0)
    monkeypatch.setattr(probe, "_result", None)
    monkeypatch.setattr(probe, "_retry", None)
    monkeypatch.setattr(probe, "_try", f.run)
    monkeypatch.setattr(probe, "_clock", lambda: f.now)
    monkeypatch.setattr(probe, "BWRAP_PATHS", (sys.executable,))  # any executable: not run
    monkeypatch.setattr(probe, "_version", lambda bwrap: "bwrap 0.0")
    yield f


def test_a_probe_that_timed_out_is_tried_again_and_then_boxes(fake: Fake) -> None:
    fake.slow = 2  # both tries of the first probe (with and without --disable-userns)
    first = probe.probe()
    assert not first.available and "did not answer" in first.detail
    assert probe.probe() == first  # not due yet: the cached answer, no bwrap run
    assert fake.runs == 2
    fake.now += probe.RETRY_AFTER_S[0]
    assert probe.probe().available
    assert probe.host() is not None


def test_status_starts_the_due_retry_in_a_thread(fake: Fake) -> None:
    fake.slow = 2
    probe.probe()
    fake.now += probe.RETRY_AFTER_S[0]
    probe.status()  # never blocks: the retry runs in a thread it starts
    with probe._kick:  # noqa: SLF001 - held by the retry thread until its probe is done
        pass
    known = probe.known()  # the cache alone (it starts nothing)
    assert known is not None and known.available


def test_the_retries_are_bounded(fake: Fake) -> None:
    fake.slow = 10**6  # bwrap never answers
    probe.probe()
    for wait in probe.RETRY_AFTER_S:
        fake.now += wait
        assert not probe.probe().available
    runs = fake.runs
    fake.now += 10**6
    assert not probe.probe().available
    assert fake.runs == runs  # the failure stands now


def test_a_real_failure_is_not_tried_again(fake: Fake) -> None:
    fake.code = 1  # bwrap answers: it cannot make a box here
    status = probe.probe()
    assert not status.available and "user namespaces" in status.detail
    fake.now += 10**6
    probe.probe()
    assert fake.runs == 2

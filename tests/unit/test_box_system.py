"""The system folders' walk (server/box/system.py): secret-looking names, by a bounded walk."""

from __future__ import annotations

import os
import time

from omp_a2a_bridge.server.box.host import _name_matcher
from omp_a2a_bridge.server.box.system import holds_key, walk


def _is_secret(path: str) -> bool:
    return _name_matcher().secret_path(path)


def _put(path, text: str = "x") -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_secret_looking_files_are_found_and_code_beside_them_is_not(tmp_path):
    etc, opt = tmp_path / "etc", tmp_path / "opt"
    env = _put(opt / "app" / ".env")
    creds = _put(opt / "app" / "config" / "credentials.json")
    key = _put(etc / "app" / "secret.key")
    _put(opt / "app" / "bin" / "tool")
    _put(opt / "app" / "node_modules" / "x" / ".env")  # a dependency tree: skipped
    found, complete = walk(_is_secret, [str(etc), str(opt)])
    assert sorted(found) == sorted([env, creds, key]) and complete


def test_a_pem_is_masked_only_when_it_holds_a_private_key(tmp_path):
    """CA certificates (one, or a bundle) are what TLS in the box reads; a key is a secret."""
    ca = _put(tmp_path / "ca.pem", "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n")
    chain = _put(
        tmp_path / "server.pem",
        "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n"
        "-----BEGIN EC PRIVATE KEY-----\nMHc\n-----END EC PRIVATE KEY-----\n",
    )
    assert not holds_key(ca) and holds_key(chain)
    found, _ = walk(_is_secret, [str(tmp_path)])
    assert found == (chain,)


def test_symlinks_are_not_followed_nor_masked(tmp_path):
    """``/etc/ssl/certs/*.pem`` are links to ``/usr/share``: a mask would follow the link."""
    target = _put(tmp_path / "share" / "cert.crt", "-----BEGIN PRIVATE KEY-----")
    (tmp_path / "etc").mkdir()
    os.symlink(target, tmp_path / "etc" / "Root_CA.pem")
    os.symlink(tmp_path / "share", tmp_path / "etc" / "linked")
    _put(tmp_path / "share" / ".env")
    found, _ = walk(_is_secret, [str(tmp_path / "etc")])
    assert found == ()


def test_the_walk_is_bounded_and_breadth_first(tmp_path):
    """Past the budget the walk stops and says so; the shallow folders come first."""
    shallow = _put(tmp_path / "app" / ".env")
    deep = tmp_path / "deep"
    for i in range(5):
        deep = deep / f"d{i}"
    _put(deep / ".env")
    found, complete = walk(_is_secret, [str(tmp_path)], max_dirs=3)
    assert found == (shallow,) and not complete


def test_the_answer_is_kept_and_walked_again_in_a_thread_when_old(monkeypatch):
    """Calls never wait for a walk after the first: past REWALK_S they get the last answer
    while a thread walks again, and the next call after it gets the fresh one."""
    import threading

    from omp_a2a_bridge.server.box import system
    from omp_a2a_bridge.server.box.system import _Kept

    kept = _Kept()
    monkeypatch.setattr(system, "_KEPT", kept)
    answers = iter([("/opt/a/.env",), ("/opt/a/.env", "/opt/b/.env")])
    release = threading.Event()
    walks = []

    def fake_walk(is_secret):
        walks.append(1)
        if len(walks) == 2:
            release.wait(60)  # the second walk runs while a call is served
        return next(answers), True

    monkeypatch.setattr(system, "walk", fake_walk)
    now = [1000.0]
    assert system.found(_is_secret, lambda: now[0]) == ("/opt/a/.env",)
    assert system.found(_is_secret, lambda: now[0]) == ("/opt/a/.env",) and len(walks) == 1
    now[0] += system.REWALK_S
    assert system.found(_is_secret, lambda: now[0]) == ("/opt/a/.env",)  # not waited for
    release.set()
    deadline = time.monotonic() + 60  # wait for the condition, not for a time
    while kept.walking and time.monotonic() < deadline:
        time.sleep(0.01)
    assert system.found(_is_secret, lambda: now[0]) == ("/opt/a/.env", "/opt/b/.env")
    assert len(walks) == 2

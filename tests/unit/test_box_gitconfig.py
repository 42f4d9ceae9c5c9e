"""The box's redacted git config copies: which files, where the copies live, what is re-read."""

from __future__ import annotations

import os
import stat

from omp_a2a_bridge.server.box import gitconfig
from omp_a2a_bridge.server.box.bwrap import BwrapHost, render
from omp_a2a_bridge.server.box.plan import BoxPlan
from omp_a2a_bridge.server.box.policy import BoxConfig, HostEntry, HostView, build_plan
from omp_a2a_bridge.server.box.seatbelt import profile
from omp_a2a_bridge.server.policy.gitsecrets import PLACEHOLDER


def _put(path, text: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_copies_of_the_files_that_hold_a_credential_and_their_includes(tmp_path, monkeypatch):
    monkeypatch.setattr(gitconfig, "RACY_NS", 0)  # the files are not changing as they are read
    home = tmp_path / "home"
    included = _put(home / "dot" / "work.inc", "[github]\n\ttoken = FAKESECRET-inc\n")
    gc = _put(home / ".gitconfig", "[user]\n\tname = A\n[include]\n\tpath = ~/dot/work.inc\n")
    plain = _put(home / "p" / ".git" / "config", "[core]\n\tbare = false\n")
    leaky = _put(home / "q" / ".git" / "config", '[remote "o"]\n\turl = https://u:FAKESECRET@h/r\n')
    pairs = dict(gitconfig.redacted([gc, plain, leaky, str(home / "absent")], str(home)))
    assert set(pairs) == {os.path.realpath(included), os.path.realpath(leaky)}
    for copy in pairs.values():
        text = _text(copy)
        assert "FAKESECRET" not in text and PLACEHOLDER in text
        assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(os.path.dirname(copy)).st_mode) == 0o700
    # An unchanged file is not read again (its answer is kept by identity)...
    reads = []
    real_open = open

    def counting_open(path, *a, **kw):
        reads.append(path)
        return real_open(path, *a, **kw)

    monkeypatch.setattr("builtins.open", counting_open)
    assert dict(gitconfig.redacted([gc, leaky], str(home))) == pairs
    assert reads == []
    # ...a changed one is.
    _put(home / "q" / ".git" / "config", "[core]\n\tbare = true\n")
    assert dict(gitconfig.redacted([leaky], str(home))) == {}
    assert os.path.realpath(leaky) in reads


def test_a_config_too_big_to_read_whole_is_not_shown(tmp_path):
    big = _put(tmp_path / ".gitconfig", "# x\n" * (gitconfig.MAX_BYTES // 4 + 1))
    [(path, copy)] = gitconfig.redacted([big], str(tmp_path))
    assert path == os.path.realpath(big) and _text(copy) == gitconfig.TOO_BIG


def test_the_plan_binds_a_copy_over_each_shown_file_only():
    h = "/home/u"
    v = HostView(
        cwd=f"{h}/proj",
        home=h,
        roots=(h,),
        git_top=f"{h}/proj",
        git_dirs=(f"{h}/proj/.git",),
        existing=frozenset({f"{h}/proj/.git/config"}),
        git_redacted=(
            (f"{h}/proj/.git/config", "/c/1"),  # read-only persistence: covered by the copy
            (f"{h}/.config/git/config", "/c/2"),  # in ~/.config (hidden), re-opened
            (f"{h}/.secret/gitconfig", "/c/3"),  # hidden and not re-opened: stays hidden
        ),
        hidden=(HostEntry(f"{h}/.config", True), HostEntry(f"{h}/.secret", True)),
        allowed=(f"{h}/.config/git",),
    )
    plan = build_plan(v, BoxConfig())
    assert plan.redacted == ((f"{h}/.config/git/config", "/c/2"), (f"{h}/proj/.git/config", "/c/1"))
    argv = render(plan, BwrapHost("/usr/bin/bwrap", "/x/empty"), ["git", "log"])
    i = argv.index("/c/1")
    assert argv[i - 1] == "--ro-bind" and argv[i + 1] == f"{h}/proj/.git/config"
    protected = [j for j, a in enumerate(argv) if a == f"{h}/proj/.git/config"]
    assert protected[-1] == i + 1  # the copy is the last mount on that path
    j = argv.index("/c/2")
    assert argv.index(f"{h}/.config/git") < j  # over the re-opened folder


def test_seatbelt_denies_reading_what_it_cannot_cover():
    plan = BoxPlan(
        cwd="/p",
        read_private=(),
        write=(),
        write_protected=(),
        tmpdir="/tmp",
        redacted=(("/p/.git/config", "/c/1"),),
    )
    assert '(deny file-read* (literal "/p/.git/config"))' in profile(plan)

"""server/tunnels/sshconfig.py: the copy of the user's ssh config the app's ssh reads (forwards
and widening switches out, everything else line for line), and the check of ``ssh -G``'s
answer (tests/security/test_tunnel_forwards.py runs both against a real sshd)."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from omp_a2a_bridge.server.tunnels import sshconfig
from omp_a2a_bridge.server.tunnels.sshconfig import (
    DROPPED,
    SshConfigError,
    confine,
    filter_text,
    include_args,
    keyword,
    parse_effective,
    widened,
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("LocalForward 1 h:2\n", ("localforward", "LocalForward", "1 h:2")),
        ("  localforward=1 h:2", ("localforward", "localforward", "1 h:2")),
        ("\tLOCALFORWARD  =  1 h:2\r\n", ("localforward", "LOCALFORWARD", "1 h:2")),
        ('"DynamicForward" 1080', ("dynamicforward", "DynamicForward", "1080")),
        ("Host a b", ("host", "Host", "a b")),
        ("ForwardAgent", ("forwardagent", "ForwardAgent", "")),
        ("# LocalForward 1 h:2", None),
        ("   ", None),
        ("", None),
    ],
)
def test_a_line_is_read_as_ssh_reads_its_keyword(line, expected):
    assert keyword(line) == expected


def _no_include(args: list[str]) -> list[str]:
    raise AssertionError(args)


def test_forwards_and_widening_switches_are_commented_out_line_for_line():
    text = (
        "Host dev\n"
        "  HostName 10.0.0.5\n"
        "  User me\n"
        "  LocalForward 5432 db:5432\n"
        '  "DynamicForward" 1080\n'
        "  RemoteForward=8080 localhost:80\n"
        "  ForwardAgent yes\n"
        "  ProxyJump bastion\n"
        "  IdentityFile ~/.ssh/id_dev\n"
        "  LocalCommand notify-send hi\n"
        "  PermitLocalCommand yes\n"
        "  ControlMaster auto\n"
        "  UserKnownHostsFile ~/.ssh/known_dev\n"
    )
    copy, dropped = filter_text(text, _no_include)
    lines = copy.splitlines()
    assert len(lines) == len(text.splitlines())  # ssh's "line N" still names the user's line
    kept = [x.strip() for x in lines if not x.startswith("#")]
    assert kept == [
        "Host dev",
        "HostName 10.0.0.5",
        "User me",
        "ProxyJump bastion",
        "IdentityFile ~/.ssh/id_dev",
        "UserKnownHostsFile ~/.ssh/known_dev",
    ]
    assert dropped == [
        "LocalForward",
        "DynamicForward",
        "RemoteForward",
        "ForwardAgent",
        "LocalCommand",
        "PermitLocalCommand",
        "ControlMaster",
    ]
    assert "5432" not in copy and "1080" not in copy and "notify-send" not in copy


def test_what_is_dropped_is_what_widens_never_what_connects():
    for connects in ("hostname", "user", "port", "identityfile", "proxyjump", "proxycommand",
                     "userknownhostsfile", "certificatefile", "identityagent", "match", "host",
                     "include", "hostkeyalias", "stricthostkeychecking"):  # fmt: skip
        assert connects not in DROPPED
    assert {"localforward", "remoteforward", "dynamicforward", "forwardagent"} <= DROPPED


def test_includes_point_to_the_copies_in_place():
    seen: list[list[str]] = []

    def include(args: list[str]) -> list[str]:
        seen.append(args)
        return ["/private/001.conf", "/private/00 2.conf"] if args != ["none.conf"] else []

    text = 'Host x\n  Include conf.d/*.conf "my dir/b"\nInclude none.conf\n'
    copy, _ = filter_text(text, include)
    assert seen == [["conf.d/*.conf", "my dir/b"], ["none.conf"]]
    assert copy.splitlines() == [
        "Host x",
        'Include "/private/001.conf" "/private/00 2.conf"',
        "#",
    ]


def test_include_arguments_are_split_as_ssh_does():
    assert include_args('a "b c" d # e') == ["a", "b c", "d"]
    with pytest.raises(SshConfigError, match="unbalanced"):
        include_args('"a')


def test_the_check_names_what_ssh_would_open_beyond_the_one_forward():
    out = (
        "remoteforward [127.0.0.1]:43000 [127.0.0.1]:53917\n"
        "forwardagent no\nforwardx11 no\ncontrolmaster false\ntunnel false\n"
        "permitlocalcommand no\nclearallforwardings no\nexitonforwardfailure yes\n"
        "batchmode yes\nsessiontype none\n"
    )
    assert widened(parse_effective(out)) == []
    more = out + "localforward [127.0.0.1]:5432 [db]:5432\nremoteforward 8080 [localhost]:80\n"
    assert widened(parse_effective(more)) == [
        "localforward [127.0.0.1]:5432 [db]:5432",
        "remoteforward 8080 [localhost]:80",
    ]
    bad = out.replace("forwardagent no", "forwardagent yes").replace(
        "controlmaster false", "controlmaster auto"
    )
    assert widened(parse_effective(bad)) == ["forwardagent yes", "controlmaster auto"]
    # an option this ssh does not print (older OpenSSH) is not required
    assert widened(parse_effective("remoteforward 1 [h]:2\n")) == []


def test_the_copy_is_private_and_names_the_users_files_in_errors(tmp_path):
    user = tmp_path / "ssh_config"
    inc = tmp_path / "conf.d"
    inc.mkdir()
    (inc / "b.conf").write_text("Host b\n  DynamicForward 1080\n")
    (inc / "a.conf").write_text("Host a\n  User alice\n")
    user.write_text(f"Include {inc}/*.conf\nHost *\n  ForwardAgent yes\n")
    folder = tmp_path / "private"
    c = confine(str(folder), str(user))
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    for copy, _ in c.sources:
        assert stat.S_IMODE(os.stat(copy).st_mode) == 0o600
    originals = [o for _, o in c.sources]
    assert originals == [str(inc / "a.conf"), str(inc / "b.conf"), str(user)]  # glob sorted
    assert c.dropped == ("DynamicForward", "ForwardAgent")
    top = Path(c.path).read_text()
    assert f'Include "{c.sources[-1][0]}"' in top
    copy_of_user = c.sources[-1][0]
    assert c.explain(f"{copy_of_user}: line 3: Bad configuration option: x") == (
        f"{user}: line 3: Bad configuration option: x"
    )


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX modes")
def test_a_config_others_may_write_is_refused_as_ssh_refuses_it(tmp_path):
    user = tmp_path / "ssh_config"
    user.write_text("Host a\n")
    os.chmod(user, 0o666)  # noqa: S103 - what is refused
    with pytest.raises(SshConfigError, match="Bad owner or permissions"):
        confine(str(tmp_path / "p"), str(user))


def test_an_include_loop_is_refused(tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    a.write_text(f"Include {b}\n")
    b.write_text(f"Include {a}\n")
    with pytest.raises(SshConfigError, match="nested too deeply"):
        confine(str(tmp_path / "p"), str(a))


def test_without_a_file_both_default_sources_are_read(tmp_path, monkeypatch):
    user, system = tmp_path / "user", tmp_path / "system"
    user.write_text("Host u\n  LocalForward 1 h:2\n")
    system.write_text("Host *\n  SendEnv LANG\n")
    monkeypatch.setattr(sshconfig, "default_sources", lambda: (str(user), str(system)))
    c = confine(str(tmp_path / "p"), None)
    top = Path(c.path).read_text().splitlines()
    # the user's file first, then the system's, each from a clean "Match all"
    assert top[1:] == [
        "Match all",
        f'Include "{c.sources[0][0]}"',
        "Match all",
        f'Include "{c.sources[1][0]}"',
    ]
    assert [o for _, o in c.sources] == [str(user), str(system)]

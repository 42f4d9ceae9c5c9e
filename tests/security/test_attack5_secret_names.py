"""Outside review (attack5): files whose one purpose is to hold secrets, under the names their
frameworks and vendors give them, are not "secret-looking" (a closed list of names), so the
built-in ``read`` (allow tier) hands them over and the box shows them. A real bridge process, the
default config, fake secrets in the project and in another project of the home.

Each name here is where a tool's own documentation tells the user to put credentials:
Cloudflare Workers' ``.dev.vars``, Streamlit's ``.streamlit/secrets.toml``, Apple's
``AuthKey_<id>.p8`` (App Store Connect / APNs private key), Google's OAuth
``client_secret_<id>.apps.googleusercontent.com.json`` and a service account's key file,
s3cmd's ``.s3cfg``, a ``kubeconfig`` copied into a project, Azure Functions'
``local.settings.json``, the ``secrets.yaml`` of many deploy tools, the ``*.env`` files docker
compose's ``env_file`` and systemd's ``EnvironmentFile`` read (``prod.env``) and
cookiecutter-django's ``.envs/.production/.django``; and the home's own
credential stores under their usual relative names inside a project (kubectl's ``.kube/config``,
Docker's ``.docker/config.json``, Bundler's ``.bundle/config``, Composer's ``auth.json``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from ..support.boxworld import World, make_world, put, require_bwrap, serve, stop

NAMES = [
    ".dev.vars",
    ".streamlit/secrets.toml",
    "AuthKey_ABC123DEF4.p8",
    "client_secret_1234-abcd.apps.googleusercontent.com.json",
    "gcp-service-account.json",
    ".s3cfg",
    "kubeconfig",
    "local.settings.json",
    "secrets.yaml",
    # docker compose's ``env_file`` and systemd's ``EnvironmentFile`` convention (``*.env``),
    # and cookiecutter-django's ``.envs/.production/.django``
    "prod.env",
    "docker/app.env",
    ".envs/.production/.django",
    # the home's credential stores, copied into a project (a devcontainer's, a cluster repo's):
    # the table knows ``~/.kube`` and ``~/.docker/config.json``, not the same file elsewhere
    ".kube/config",
    ".docker/config.json",
    ".bundle/config",
    "auth.json",
]


def _secret(where: str, name: str) -> str:
    return f"FAKESECRET-{where}-{name}"


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    require_bwrap()
    world = make_world()
    try:
        for name in NAMES:
            put(os.path.join(world.project, name), _secret("proj", name))
            put(os.path.join(world.home, "otherapp", name), _secret("other", name))
        serve(world, False)
        yield world
    finally:
        stop(world)


@pytest.mark.parametrize("name", NAMES)
def test_the_read_tool_does_not_hand_over_a_vendors_secrets_file(world: World, name: str) -> None:
    c = world.client()
    try:
        r = c.call("read", {"path": os.path.join(world.project, name)})
    finally:
        c.close()
    assert r.status == 200, r
    assert "FAKESECRET" not in r.raw.decode(), r.text[:200]


@pytest.mark.parametrize("name", NAMES)
def test_the_box_hides_a_vendors_secrets_file(world: World, name: str) -> None:
    """In the call's project and in another project of the home (the roots' index)."""
    _, text = world.bash(f"cat {name!r} ../otherapp/{name!r} 2>&1; true")
    assert world.leaks(text) == [], text

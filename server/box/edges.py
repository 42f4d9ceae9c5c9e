"""Boxes for the other processes the bridge starts: ``rg`` walks and stdio upstream servers.

Same policy as bash's box (:func:`server.box.policy.build_plan`, the same private masks), with
the writes and network each kind needs:

* an ``rg`` walk (``grep``/``find``): read-only (nothing writable at all), no network. It walks
  by *path* inside the box, never from a descriptor the bridge opened: a descriptor opened
  outside the box's mount namespace sees the host's mounts, not the masks. By path, whatever
  is swapped in mid-walk (a symlink to ``~/.ssh``) resolves inside the box, where it is empty.
* a stdio upstream server: reads as bash, writes its cwd when that lies inside a root and is
  not the home (else only its private ``TMPDIR``), network on unless its config says ``off``.

Blocking (the plan looks at the disk): call from a worker thread, never the event loop.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import threading
import time
from collections.abc import Sequence

from . import probe
from .bwrap import render
from .host import PrivateCwd, TooManySecrets, gather
from .plan import BoxPlan
from .policy import BOX_TMP, build_plan, missing_persistence, project_of, within
from .run import BoxRequest, NoBox, Prepared, watch_of

# A walk's plan is reused for this long per base: ``gather`` scans the project for secret-looking
# files (up to 20,000 entries), and an agent often greps the same tree many times in a row. The
# masks are a second line here: every result is still judged by the path policy.
WALK_PLAN_TTL_S = 5.0
_WALK_CACHE_MAX = 64
_cache: dict[tuple[object, ...], tuple[float, BoxPlan]] = {}
_cache_lock = threading.Lock()


def program_tree(program: str) -> str | None:
    """The install tree of a program (the folder above its ``bin/``: an interpreter needs its
    library beside it), else the program's own real path; None when it is not found."""
    found = program if os.sep in program else shutil.which(program)
    if found is None:
        return None
    real = os.path.realpath(found)
    if not os.path.exists(real):
        return None
    folder = os.path.dirname(real)
    return os.path.dirname(folder) if os.path.basename(folder) == "bin" else real


def _venv_of(program: str) -> str | None:
    """The virtual environment a program is named in (``/srv/x/.venv/bin/python``, whose real
    path is the base interpreter elsewhere): its packages lie there, not beside the real
    interpreter."""
    if os.sep not in program:
        return None
    folder = os.path.dirname(os.path.abspath(program))
    venv = os.path.dirname(folder)
    if os.path.basename(folder) == "bin" and os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return venv
    return None


def _reopen(plan: BoxPlan, paths: Sequence[str]) -> BoxPlan:
    """Re-open read-only what the box must run when a private mask hides it (an ``rg`` or a
    server installed under ``~/.local/share``, ``~/.cache`` or ``~/.pyenv``). Only what the
    human configured to run, never a folder that holds the home or a root."""
    extra = []
    for path in paths:
        real = os.path.realpath(path)
        if not os.path.exists(real) or not any(within(real, p) for p in plan.read_private):
            continue
        if not any(within(real, p) and real != p for p in plan.read_private):
            continue  # a whole private folder (``~/.ssh``) is never re-opened
        extra.append(real)
    if not extra:
        return plan
    return dataclasses.replace(plan, read_allow=tuple(sorted({*plan.read_allow, *extra})))


def _visible(plan: BoxPlan, path: str) -> BoxPlan:
    """A folder under /tmp that is not a root (a walk a human approved outside the roots)
    would vanish under the box's private /tmp: bind it read-only like the roots."""
    if not within(path, BOX_TMP) or any(within(path, v) for v in plan.read_visible):
        return plan
    return dataclasses.replace(plan, read_visible=(*plan.read_visible, path))


class BaseMoved(Exception):
    """The walk's base no longer is the real path the bridge judged (a symlink swapped in)."""


def forget_plans() -> None:
    """Drop the cached walk plans (a test that changes the disk under a cached base)."""
    with _cache_lock:
        _cache.clear()


def forget_plan(request: BoxRequest | None, base: str) -> None:
    """Drop the cached plan of a walk from ``base``: its box could not be set up (a path it
    masks went away since), so the next walk plans again from the disk as it is."""
    with _cache_lock:
        _cache.pop((os.path.normpath(base), request), None)


def walk_plan(request: BoxRequest, base: str) -> BoxPlan:
    """The read-only, offline plan for a walk from ``base`` (cached ``WALK_PLAN_TTL_S``).

    ``base`` is the real path the bridge judged and opened. The plan is built for that path,
    never for what it resolves to now: a base swapped for a symlink to ``~/.ssh`` would make
    ``~/.ssh`` the box's cwd, and the box never hides the folder it works in."""
    base = os.path.normpath(base)
    key = (base, request)
    now = time.monotonic()
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None and now - hit[0] < WALK_PLAN_TTL_S:
            return hit[1]
    try:
        view = gather(base, request.roots, request.config, request.own, request.named_roots)
    except PrivateCwd:
        if os.path.realpath(base) != base:
            raise BaseMoved(base) from None  # swapped for a link into the hidden tree
        raise
    if view.cwd != base:
        raise BaseMoved(base)
    plan = build_plan(view, request.config)
    plan = dataclasses.replace(plan, write=(), write_protected=(), pinned=(), network=False)
    plan = _visible(plan, base)
    with _cache_lock:
        if len(_cache) >= _WALK_CACHE_MAX:
            _cache.clear()
        _cache[key] = (now, plan)
    return plan


def walk_argv(request: BoxRequest | None, base: str, argv: Sequence[str]) -> list[str] | None:
    """``argv`` (an ``rg`` walk) wrapped in a read-only box started in ``base``, or None where
    no box can be made (no bubblewrap, no request, a project with more secret-looking files
    than the box can mask): the walk then runs as before the box, every result still judged.
    Raises :class:`BaseMoved` when ``base`` is no longer the real path it was."""
    host = probe.host()
    if request is None or host is None:
        return None
    try:
        plan = walk_plan(request, base)
    except (TooManySecrets, PrivateCwd, OSError):
        return None  # the walk's base was judged (a private one asks); each result still is
    return render(_reopen(plan, [t for t in [program_tree(argv[0])] if t]), host, argv)


def server_box(
    request: BoxRequest, cwd: str, argv: Sequence[str], network: bool = True
) -> Prepared:
    """A stdio upstream server's box: reads as bash's; writes its cwd when that is inside a
    root and not the home (its project), else only ``TMPDIR``; network as configured.

    Raises :class:`NoBox` when no box can be made here (the server is then not started: a
    server configured ``"box": true`` never runs unboxed unasked)."""
    host = probe.host()
    if host is None:
        raise NoBox(probe.status().detail)
    try:
        view = gather(cwd, request.roots, request.config, request.own, request.named_roots)
    except TooManySecrets as e:
        raise NoBox(f"{e} holds more secret-looking files than the box hides") from None
    except PrivateCwd as e:
        raise NoBox(
            f"its folder {e} is in the home's hidden tree (or ~/snap), which the box hides"
        ) from None
    if view.git_top != view.cwd:  # the cwd is the project, never the repository around it
        # ...but the repositories nested in the cwd stay protected like any other.
        nested = tuple(d for d in view.git_dirs if within(d, view.cwd))
        view = dataclasses.replace(view, git_top=None, git_file=None, git_dirs=nested)
    plan = build_plan(view, request.config)
    plan = dataclasses.replace(plan, network=network)
    programs = [t for t in [program_tree(argv[0]), _venv_of(argv[0])] if t]
    plan = _reopen(plan, programs + _scripts(argv[1:]) + _packages(argv))
    missing = missing_persistence(view, project_of(view))
    return Prepared(plan, tuple(render(plan, host, argv)), missing, watch_of(view))


SCRIPT_SUFFIXES = (".js", ".mjs", ".cjs", ".ts", ".py", ".rb", ".pl", ".sh", ".jar")


def _scripts(args: Sequence[str]) -> list[str]:
    """Script files named by absolute path in the arguments (``node /x/server.js``): the
    program's code, never a data path (``--key ~/.ssh/id_rsa`` stays private)."""
    return [a for a in args if os.path.isabs(a) and a.endswith(SCRIPT_SUFFIXES)]


def _packages(argv: Sequence[str]) -> list[str]:
    """The ``node_modules`` tree a script argument lies in (``node …/node_modules/x/index.js``
    needs its dependencies beside it), re-opened read-only with it."""
    out = []
    for arg in argv:
        head, sep, _ = arg.partition(f"{os.sep}node_modules{os.sep}")
        if sep and os.path.isabs(arg):
            out.append(head + os.sep + "node_modules")
    return out

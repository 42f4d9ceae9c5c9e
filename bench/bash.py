"""What one ``bash echo hi`` costs: the bridge (boxed and unboxed) beside Desktop Commander.

One run, interleaved rounds, medians. Each contender gets ``--calls`` calls per round:

* ``bash`` in the box (the default tier), through ``a2a-bridge serve`` over HTTP;
* ``bash`` with ``"box": false``, approved over the control API (the human's part, in a loop):
  the bridge's CPU then includes one approval (a pending call, a GET and a POST);
* Desktop Commander's ``start_process`` with the same command, over stdio, from npm
  (``@wonderwhy-er/desktop-commander``, installed offline into the interop cache, see
  :data:`DC_PACKAGE`; its telemetry off in a throwaway home).

Server CPU per call is utime + stime of the server process and of *every live process below
it*, plus what each of them reaped (``/proc/PID/stat``): bash's supervisors are children of a
resident helper, not of the bridge, so the bridge's own ``cutime`` alone would miss them.
Clock ticks are 10 ms, so only sums over many calls mean anything. Load on the shared machine
inflates wall times much more than CPU times; both are printed.

    .venv/bin/python -m bench.bash [--rounds 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

DC_PACKAGE = "@wonderwhy-er/desktop-commander@0.2.52"
DC_PREFIX = os.path.join(
    os.environ.get("A2A_INTEROP_CACHE", os.path.expanduser("~/.cache/omp-a2a-bridge-interop")),
    "npm",
    "desktop-commander",
)
TCK = os.sysconf("SC_CLK_TCK")
COMMAND = "echo hi"


# -- CPU of a process tree ------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            continue
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and every live process below it, each with what it reaped.

    A process is counted once: a live one by its own utime + stime, a dead one in the cutime +
    cstime of the live ancestor that reaped it."""
    total = 0
    todo, seen = [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])
        todo += _children(p)
    return total / TCK


def own_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` alone (no children), for the breakdown."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


# -- the contenders ------------------------------------------------------------------------


@dataclass
class Contender:
    name: str
    call: Callable[[], str]
    pid: int
    walls: list[float] = field(default_factory=list)  # ms, every call
    cpu: list[float] = field(default_factory=list)  # ms per call, per round
    own: list[float] = field(default_factory=list)  # the server process alone, per round


class StdioClient:
    """Newline-delimited JSON-RPC over a child's stdin/stdout (the MCP stdio transport)."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
        )
        self.next_id = 0
        self.buf = b""
        self.rpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "bench", "version": "1"},
            },
        )
        self.notify("notifications/initialized")

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(msg).encode() + b"\n")
        self.proc.stdin.flush()

    def notify(self, method: str) -> None:
        self._send({"jsonrpc": "2.0", "method": method})

    def rpc(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        self._send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                if not line.strip():
                    continue
                msg = json.loads(line)
                if msg.get("id") == self.next_id:
                    return msg
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"{method}: no answer")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"{method}: the server exited")
            self.buf += chunk

    def call(self, name: str, args: dict[str, Any]) -> str:
        msg = self.rpc("tools/call", {"name": name, "arguments": args})
        res = msg["result"]
        return "".join(c.get("text", "") for c in res["content"])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def desktop_commander(home: str, project: str) -> StdioClient | None:
    """Desktop Commander from the interop cache (installed once, offline afterwards), with its
    telemetry off and bash as its shell, in a throwaway home."""
    main = os.path.join(
        DC_PREFIX, "node_modules", "@wonderwhy-er", "desktop-commander", "dist", "index.js"
    )
    if not os.path.exists(main):
        os.makedirs(DC_PREFIX, exist_ok=True)
        with open(os.path.join(DC_PREFIX, "package.json"), "w") as f:
            f.write('{"private": true}\n')
        # --ignore-scripts: its postinstall reports the install home, puppeteer's fetches a
        # browser; neither is needed to run the server.
        done = subprocess.run(
            ["npm", "install", "--ignore-scripts", "--no-audit", "--no-fund", DC_PACKAGE],
            cwd=DC_PREFIX,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0 or not os.path.exists(main):
            return None
    node = shutil.which("node")
    if node is None:
        return None
    conf = os.path.join(home, ".claude-server-commander")
    os.makedirs(conf, exist_ok=True)
    with open(os.path.join(conf, "config.json"), "w") as f:
        json.dump(
            {
                "telemetryEnabled": False,
                # Its default where SHELL is unset; with bash it runs ``bash -l -c`` (a login
                # shell reads /etc/profile and more: 186 ms CPU a call on the bench machine).
                "defaultShell": "/bin/sh",
                "allowedDirectories": [project],
                "pendingWelcomeOnboarding": False,
                "welcomeOnboardingEligible": False,
            },
            f,
        )
    # Even with telemetry off, 0.2.52 builds each event's properties, which runs
    # ``python3 --version`` (three times a start_process): a pyenv shim made that ~50 ms each
    # here. A plain python3 first on PATH, so the row measures Desktop Commander, not pyenv.
    plain = os.path.dirname(os.path.realpath(sys.executable))
    path = [plain] + [
        p for p in os.environ.get("PATH", "").split(os.pathsep) if "shims" not in p.split(os.sep)
    ]
    env = {
        "PATH": os.pathsep.join(path),
        "HOME": home,
        "LANG": "C.UTF-8",
        "DESKTOP_COMMANDER_DISABLE_TELEMETRY": "1",
    }
    return StdioClient([node, main], env, project)


class Approver:
    """The human, in a loop: an events WebSocket (so the bridge has an approver attached) that
    approves every pending call it is shown, on its own thread and loop. The bench's way to run
    ``"box": false``; the bridge's CPU then includes pushing the snapshot and the decision."""

    def __init__(self, control: dict[str, Any]) -> None:
        import asyncio

        self.control = control
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        if not self.ready.wait(30) or self.error is not None:
            raise RuntimeError(f"no approver: {self.error}")

    async def _run(self) -> None:
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest
        from tornado.websocket import websocket_connect

        auth = {"Authorization": f"Bearer {self.control['secret']}"}
        url = self.control["url"]
        try:
            ws = await websocket_connect(
                HTTPRequest("ws" + url[4:] + "api/events?as=bench", headers=auth)
            )
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ws = ws
        self.ready.set()
        client = AsyncHTTPClient()
        done: set[str] = set()
        while (msg := await ws.read_message()) is not None:
            for p in json.loads(msg).get("pending", []):
                if p["id"] in done:
                    continue
                done.add(p["id"])
                body = json.dumps({"decision": "approve"})
                await client.fetch(
                    HTTPRequest(f"{url}api/pending/{p['id']}", "POST", auth, body),
                    raise_error=False,
                )

    def close(self) -> None:
        if hasattr(self, "ws"):
            self.loop.call_soon_threadsafe(self.ws.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


def _copy_of_this_repository(dest: str) -> None:
    """This repository's tracked files (``git archive HEAD``) as a project of its own, with a
    git repository: the size of a real project (the box scans the project for secrets)."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(dest)
    archive = subprocess.run(
        ["git", "-C", here, "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    subprocess.run(["git", "init", "-q", dest], check=True)


def _files(top: str) -> int:
    return sum(len(files) for _, _, files in os.walk(top))


def _bridge(work: str, project: str, baseline: str | None = None) -> tuple[Any, Any, Approver]:
    """``a2a-bridge serve`` on ``project`` (from ``baseline`` when given: a folder holding an
    ``omp_a2a_bridge`` package, e.g. another commit's ``git archive``), a client, an approver."""
    from bench.__main__ import TOKEN, Server, bench_env, free_port, open_session
    from bench.tools import Client

    env = bench_env(work, {"roots": [project]})  # bash at its default tier: box
    if baseline is not None:
        env["PYTHONPATH"] = os.path.abspath(baseline)
    port = free_port()
    argv = [sys.executable, "-m", "omp_a2a_bridge.server", "serve", "--port", str(port)]
    server = Server.start("bridge", argv, env, port)
    client = Client(port, open_session(port, {"Authorization": f"Bearer {TOKEN}"}))
    with open(os.path.join(work, "run", "control.json")) as f:
        approver = Approver(json.load(f))
    return server, client, approver


class Launcher:
    """``bench/launcher.py`` as a child: ``run(argv)`` returns what the command printed."""

    def __init__(self) -> None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        )

    def run(self, argv: list[str]) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        return str(json.loads(self.proc.stdout.readline()))

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(10)


def _box_alone(work: str, root: str, project: str) -> Contender | None:
    """The box with no bridge: bubblewrap and the shell, with the plan the bridge makes for
    the same call (same project, the bridge's files private), started by a bare launcher. What
    no bridge can go under while it boxes with this bubblewrap."""
    from omp_a2a_bridge.server.box import run
    from omp_a2a_bridge.server.box.policy import BoxConfig
    from omp_a2a_bridge.server.tools.shell import shell_argv

    try:
        request = run.BoxRequest(BoxConfig(), (root,), (work,))
        argv = list(run.prepare(request, project, shell_argv(COMMAND)).argv)
    except run.NoBox:
        return None
    launcher = Launcher()
    _LAUNCHERS.append(launcher)
    return Contender(
        "the box alone (bwrap + bash, no bridge)", lambda: launcher.run(argv), launcher.proc.pid
    )


_LAUNCHERS: list[Launcher] = []


def _measure(contenders: list[Contender], rounds: int, calls: int) -> None:
    for c in contenders:  # warm-up: the bridge starts its supervisor helper on the first call
        for _ in range(3):
            assert c.call().strip().endswith("hi"), c.name
    time.sleep(0.5)
    for _ in range(rounds):
        for c in contenders:
            cpu0, own0 = tree_cpu_s(c.pid), own_cpu_s(c.pid)
            for _ in range(calls):
                t0 = time.perf_counter()
                c.call()
                c.walls.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.3)  # the last call's supervisor finishes after its answer
            c.cpu.append((tree_cpu_s(c.pid) - cpu0) * 1000 / calls)
            c.own.append((own_cpu_s(c.pid) - own0) * 1000 / calls)


def section(rounds: int = 5, calls: int = 20, baseline: str | None = None) -> list[str]:
    """The ``bash echo hi`` rows for ``python -m bench``, as markdown lines; with ``baseline``
    (see :func:`_bridge`) that bridge's rows too, in the same rounds."""
    from omp_a2a_bridge.server.box import probe

    status = probe.probe()
    work = tempfile.mkdtemp(prefix="a2a-bench-bash-")
    home = os.path.join(work, "dc-home")
    shared = tempfile.mkdtemp(prefix="bench-bash-", dir=os.path.expanduser("~"))
    project = os.path.join(shared, "empty")  # an empty repository
    big = os.path.join(shared, "repo")  # this repository's files: a real project's size
    subprocess.run(["git", "init", "-q", project], check=True)
    _copy_of_this_repository(big)
    server = dc = approver = None
    before: tuple[Any, Any, Approver] | None = None
    try:
        server, client, approver = _bridge(work, shared)
        if baseline is not None:
            before = _bridge(os.path.join(work, "baseline"), shared, baseline)

        def unboxed() -> str:
            args = {"command": COMMAND, "box": False, "reason": "bench", "cwd": project}
            return client.call("bash", args)

        contenders = [
            Contender(
                "bridge, boxed (default), in an empty repository",
                lambda: client.call("bash", {"command": COMMAND, "cwd": project}),
                server.proc.pid,
            ),
            Contender(
                f"bridge, boxed, in a project of {_files(big):,} files",
                lambda: client.call("bash", {"command": COMMAND, "cwd": big}),
                server.proc.pid,
            ),
            Contender("bridge, unboxed (+ one approval)", unboxed, server.proc.pid),
        ]
        if before is not None:
            old_server, old_client, _ = before
            contenders += [
                Contender(
                    "baseline bridge, boxed, in the empty repository",
                    lambda: old_client.call("bash", {"command": COMMAND, "cwd": project}),
                    old_server.proc.pid,
                ),
                Contender(
                    "baseline bridge, boxed, in the same project",
                    lambda: old_client.call("bash", {"command": COMMAND, "cwd": big}),
                    old_server.proc.pid,
                ),
                Contender(
                    "baseline bridge, unboxed (+ one approval)",
                    lambda: old_client.call(
                        "bash",
                        {"command": COMMAND, "box": False, "reason": "bench", "cwd": project},
                    ),
                    old_server.proc.pid,
                ),
            ]
        alone = _box_alone(work, shared, project)
        if alone is not None:
            contenders.append(alone)
        dc = desktop_commander(home, project)
        if dc is not None:
            args = {"command": COMMAND, "timeout_ms": 10000}
            contenders.append(
                Contender(
                    "Desktop Commander (start_process)",
                    lambda: dc.call("start_process", args),
                    dc.proc.pid,
                )
            )
        _measure(contenders, rounds, calls)
    finally:
        if approver is not None:
            approver.close()
        if before is not None:
            before[2].close()
            before[0].stop()
        if server is not None:
            server.stop()
        if dc is not None:
            dc.stop()
        while _LAUNCHERS:
            _LAUNCHERS.pop().stop()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(shared, ignore_errors=True)
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    out = [
        f"## bash start: `bash {COMMAND}` (median of {rounds} rounds x {calls} calls)",
        "",
        f"Box: {status.detail}. Load average at the end: {load} (1/5/15 min) on "
        f"{os.cpu_count()} cores.",
        "",
        "| contender | wall p50 ms | server CPU ms/call (tree) | of which the server process |",
        "|---|---|---|---|",
    ]
    for c in contenders:
        out.append(
            f"| {c.name} | {statistics.median(c.walls):.1f} | {statistics.median(c.cpu):.1f} "
            f"| {statistics.median(c.own):.1f} |"
        )
    if dc is None:
        out.append(f"| Desktop Commander | - | - | not installed ({DC_PACKAGE}: npm offline?) |")
    out += [
        "",
        "Tree: the server and every live process below it, with what each reaped (/proc). "
        "The bridge's tree holds its resident supervisor helper, the per-call supervisors, "
        "bwrap and the shell; Desktop Commander's holds node and its shell; the box alone's "
        "holds a bare launcher (its own column), bwrap and the shell.",
    ]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bash")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument(
        "--baseline",
        help="also run a bridge from this folder (it holds an omp_a2a_bridge package: "
        "mkdir -p b/src && git archive main | tar -x -C b/src && ln -s src b/omp_a2a_bridge)",
    )
    args = ap.parse_args()
    print("\n".join(section(args.rounds, args.calls, args.baseline)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

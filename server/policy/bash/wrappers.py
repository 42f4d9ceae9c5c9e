"""Programs that run other programs: wrappers (``timeout``, ``xargs``, ``find -exec``...) and
options with which an ordinary program runs code (``rg --pre``, ``git -c``, ``tar
--to-command``).

Why a module of its own: these are tables about the outside world (what each program's options
mean), kept apart from the bash grammar walk in :mod:`server.policy.bash.parse` that consults them.
The
command a wrapper runs is one more simple command of the call, so a deny rule sees
``timeout 5 git push`` and an allow rule must cover what ``xargs`` runs; a code-running option
makes the call unallowable by any rule, like ``sh -c``. The global options before a subcommand
(``git -C . push``) are skipped for deny and ask rules only (:data:`GLOBAL_OPTIONS`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .words import Word

# Programs that run the command given in their arguments: the options that take a separate
# value, and how many positional words come before the command (timeout's DURATION).
WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "gtimeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),  # macOS coreutils
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "nohup": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "gstdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), 0),
    "gnice": (frozenset({"-n", "--adjustment"}), 0),
    "gnohup": (frozenset(), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u", "--class", "--classdata"}), 0),
    "setsid": (frozenset(), 0),
    "time": (frozenset({"-f", "-o", "--format", "--output"}), 0),
    "caffeinate": (frozenset({"-t", "-w"}), 0),
    "sudo": (
        frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user",
                   "--group", "--close-from", "--chdir", "--host", "--prompt", "--role",
                   "--type", "--other-user", "--command-timeout", "-R", "--chroot"}),
        0,
    ),
    "doas": (frozenset({"-u", "-C"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "xargs": (
        frozenset({"-I", "-n", "-P", "-d", "-E", "-L", "-s", "-a", "--arg-file", "--delimiter",
                   "--max-args", "--max-procs", "--max-lines", "--max-chars", "--eof",
                   "--process-slot-var"}),
        0,
    ),
    # The command word hidden behind a builtin, a multi-call binary or a helper that only
    # changes the environment it runs in (an outside review found these ran past deny rules).
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-a", "--argv0", "-P"}), 0),
    "command": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "busybox": (frozenset(), 0),
    "toybox": (frozenset(), 0),
    "fakeroot": (frozenset({"-l", "--lib", "--faked", "-s", "-i"}), 0),
    "eatmydata": (frozenset(), 0),
    "nocache": (frozenset({"-n"}), 0),
    "chronic": (frozenset(), 0),
    "ifne": (frozenset(), 0),
    "catchsegv": (frozenset(), 0),
    "numactl": (
        frozenset({"-N", "-m", "-C", "-p", "-i", "--cpunodebind", "--membind", "--physcpubind",
                   "--preferred", "--interleave"}),
        0,
    ),
    "setarch": (frozenset(), 1),
    "linux32": (frozenset(), 0),
    "linux64": (frozenset(), 0),
    "prlimit": (frozenset({"-p", "--pid"}), 0),
    "setpriv": (frozenset(), 0),
    "trickle": (frozenset({"-u", "-d", "-w", "-t", "-l", "-n"}), 0),
    "proxychains": (frozenset({"-f"}), 0),
    "proxychains4": (frozenset({"-f"}), 0),
    "torsocks": (frozenset({"-u", "-p", "-a", "-P"}), 0),
    "dbus-run-session": (frozenset(), 0),
    # Issue 23: more programs that run the command after their options (all their options
    # are ``--opt=value`` or flags unless listed).
    "dbus-launch": (frozenset(), 0),
    "systemd-inhibit": (frozenset(), 0),
    "ssh-agent": (frozenset({"-a", "-E", "-P", "-t"}), 0),
    "rlwrap": (frozenset({"-f", "-H", "-l", "-P", "-S", "-z", "-e", "-g", "-p", "-q", "-C"}), 0),
    "cgexec": (frozenset({"-g"}), 0),
    "aa-exec": (frozenset({"-p", "--profile", "-n", "--namespace"}), 0),
    "sandbox-exec": (frozenset({"-f", "-p", "-n", "-D"}), 0),
    "arch": (frozenset({"-arch", "-e"}), 0),
    "chpst": (frozenset({"-u", "-U", "-e", "-/", "-n", "-l", "-L", "-m", "-d", "-o", "-p",
                         "-f", "-c", "-r", "-t"}), 0),
    "setuidgid": (frozenset(), 1),
    "envuidgid": (frozenset(), 1),
    "envdir": (frozenset(), 1),
    "softlimit": (frozenset({"-m", "-a", "-d", "-o", "-p", "-f", "-c", "-r", "-t", "-s",
                             "-l"}), 0),
    "setlock": (frozenset(), 1),
    "lckdo": (frozenset({"-w"}), 1),
    "valgrind": (frozenset(), 0),
    "flatpak-spawn": (frozenset({"--env", "--directory", "--forward-fd"}), 0),
    "xvfb-run": (frozenset({"-n", "-s", "-f", "-e", "-p", "-w", "--server-num",
                            "--server-args", "--auth-file", "--error-file"}), 0),
}  # fmt: skip
# Wrappers whose command is a string for ``sh -c`` (or that cannot be read reliably).
_SHELL_WRAPPERS = frozenset(
    {"watch", "script", "parallel", "su", "runuser", "pkexec", "systemd-run", "nsenter",
     "unshare", "firejail", "bwrap", "chroot", "strace", "ltrace", "unbuffer", "entr",
     "sg", "hyperfine", "watchexec", "nix-shell", "xterm", "konsole", "gnome-terminal",
     "tmux", "screen", "byobu", "dtach", "abduco"}
)  # fmt: skip
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Tools whose subcommand runs a command: ``uv run rm x`` runs ``rm x`` (the options of that
# subcommand that take a separate value, and positional words before the command).
_RUN_SUBCOMMANDS: dict[tuple[str, str], tuple[frozenset[str], int]] = {
    ("uv", "run"): (frozenset({"--with", "--python", "-p", "--project", "--directory",
                               "--package", "--extra", "--group", "--env-file", "--index",
                               "--with-requirements", "--with-editable"}), 0),
    ("poetry", "run"): (frozenset({"-C", "--directory", "-P", "--project"}), 0),
    ("pipenv", "run"): (frozenset(), 0),
    ("pdm", "run"): (frozenset({"-p", "--project"}), 0),
    ("hatch", "run"): (frozenset(), 0),
    ("rye", "run"): (frozenset(), 0),
    ("pixi", "run"): (frozenset({"-e", "--environment", "--manifest-path"}), 0),
    ("conda", "run"): (frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}), 0),
    ("mamba", "run"): (frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}), 0),
    ("bundle", "exec"): (frozenset(), 0),
    ("mise", "exec"): (frozenset({"-C", "--cd", "-j", "--jobs"}), 0),
    ("mise", "x"): (frozenset({"-C", "--cd", "-j", "--jobs"}), 0),
    ("asdf", "exec"): (frozenset(), 0),
    ("rbenv", "exec"): (frozenset(), 0),
    ("pyenv", "exec"): (frozenset(), 0),
    ("direnv", "exec"): (frozenset(), 1),
    ("devbox", "run"): (frozenset({"-c", "--config", "-e", "--env"}), 0),
}  # fmt: skip


# Options with which an ordinary program runs another program or shell code (``rg --pre sh``,
# ``tar --to-command``, ``git -c core.pager=…``): a call that uses one is never allowed by a
# rule, like ``sh -c``; ``bash(rg TODO *)`` must not run ``rg TODO --pre sh notes.txt``.
_VIM = ("-c", "--cmd", "-S", "+")
_CODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "rg": ("--pre", "--hostname-bin"),
    "fd": ("-x", "--exec", "-X", "--exec-batch"),
    "fdfind": ("-x", "--exec", "-X", "--exec-batch"),
    "tar": ("--to-command", "--checkpoint-action", "--use-compress-program", "-I",
            "--info-script", "-F", "--new-volume-script", "--rmt-command", "--rsh-command"),
    "sort": ("--compress-program",),
    "zip": ("-TT", "--unzip-command"),
    "scp": ("-S", "-F"),
    "sftp": ("-S", "-F"),
    "ssh": ("-F",),
    "rsync": ("--rsync-path",),
    "man": ("-P", "--pager", "-H", "--html"),
    "vim": _VIM, "nvim": _VIM, "vi": _VIM, "view": _VIM, "ex": _VIM,
    "git": ("-c", "--config-env", "--exec-path"),
}  # fmt: skip
_GIT_CODE_OPTIONS: dict[str, tuple[str, ...]] = {
    "grep": ("-O", "--open-files-in-pager"),
    "rebase": ("-x", "--exec"),
    "difftool": ("-x", "--extcmd", "-t", "--tool"),
    "mergetool": ("-t", "--tool"),
    "submodule": ("foreach",),
    "bisect": ("run",),
    "clone": ("-u", "--upload-pack"),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "ls-remote": ("--upload-pack",),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
    "filter-branch": ("",),
}
_SSH_CODE_KEYS = re.compile(
    r"^(?:proxycommand|localcommand|permitlocalcommand|knownhostscommand|match)\b", re.I
)


def _uses(word: str, opt: str) -> bool:
    if opt == "" or word == opt:
        return True
    if opt.startswith("--"):
        return word.startswith(opt + "=")
    if opt == "+":
        return word.startswith("+")
    return opt.startswith("-") and len(opt) == 2 and word.startswith(opt)  # -Ixz, -oKey=v


_GIT_VALUED = frozenset({"-c", "-C", "--config-env", "--git-dir", "--work-tree", "--namespace"})


def _git_subcommand_at(texts: Sequence[str]) -> int:
    """Index of git's subcommand: after the global options and their values."""
    n = 0
    while n < len(texts) and texts[n].startswith("-"):
        n += 2 if texts[n] in _GIT_VALUED else 1
    return n


def code_option(base: str, rest: Sequence[Word]) -> str | None:
    """The first option in ``rest`` with which ``base`` runs another program, or None."""
    texts = [w.text for w in rest if w.literal]
    opts = _CODE_OPTIONS.get(base, ())
    sub_at = _git_subcommand_at(texts) if base == "git" else -1
    sub_opts = _GIT_CODE_OPTIONS.get(texts[sub_at], ()) if 0 <= sub_at < len(texts) else ()
    for n, t in enumerate(texts):
        if base == "git":  # -c/--exec-path before the subcommand, its own options after it
            opts = _CODE_OPTIONS["git"] if n < sub_at else sub_opts
        for opt in opts:
            if _uses(t, opt) and (opt != "" or n == sub_at):
                return opt or t
        if base in ("ssh", "scp", "sftp", "rsync") and t.startswith("-o"):
            value = t[2:] or (texts[n + 1] if n + 1 < len(texts) else "")
            if _SSH_CODE_KEYS.match(value.lstrip()):
                return "-o " + value.split("=", 1)[0].split(" ", 1)[0]
        if base == "rsync" and (t == "-e" or t.startswith("--rsh")):
            value = t.split("=", 1)[1] if "=" in t else (texts[n + 1] if n + 1 < len(texts) else "")
            if value != "ssh":
                return "-e"
    return None


# Programs whose global options come before a subcommand (``git -C . push``, ``kubectl -n ns
# delete``): the options that take a separate value, and those that take none. A deny or ask
# rule ``bash(git push *)`` is also matched against the command with these skipped; allow rules
# stay literal (``-C /elsewhere`` changes what the subcommand acts on). An option in neither set
# is read both ways (a flag, or one taking the next word), as a deny rule asks "may it match?".
_GIT_FLAGS = frozenset(
    {"-p", "-P", "--paginate", "--no-pager", "--bare", "--no-replace-objects",
     "--literal-pathspecs", "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs",
     "--no-optional-locks", "--no-advice", "--no-lazy-fetch", "--exec-path"}
)  # fmt: skip
GLOBAL_OPTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "git": (_GIT_VALUED | {"--super-prefix", "--attr-source", "--list-cmds"}, _GIT_FLAGS),
    "docker": (
        frozenset({"-H", "--host", "-c", "--context", "--config", "-l", "--log-level",
                   "--tlscacert", "--tlscert", "--tlskey"}),
        frozenset({"-D", "--debug", "--tls", "--tlsverify"}),
    ),
    "podman": (
        frozenset({"-c", "--connection", "--url", "--identity", "--root", "--runroot",
                   "--storage-driver", "--log-level", "--cgroup-manager", "--module"}),
        frozenset({"-r", "--remote", "--syslog"}),
    ),
    "kubectl": (
        frozenset({"-n", "--namespace", "--context", "--cluster", "--user", "--kubeconfig",
                   "-s", "--server", "--token", "--as", "--as-group", "--as-uid",
                   "--request-timeout", "--certificate-authority", "--client-certificate",
                   "--client-key", "--tls-server-name", "--cache-dir", "-v", "--v",
                   "--username", "--password", "--profile", "--profile-output"}),
        frozenset({"--insecure-skip-tls-verify", "--match-server-version", "--warnings-as-errors"}),
    ),
    "helm": (
        frozenset({"-n", "--namespace", "--kube-context", "--kubeconfig", "--kube-apiserver",
                   "--kube-as-user", "--kube-as-group", "--kube-token", "--kube-ca-file",
                   "--registry-config", "--repository-cache", "--repository-config",
                   "--burst-limit", "--qps"}),
        frozenset({"--debug", "--kube-insecure-skip-tls-verify"}),
    ),
    "npm": (
        frozenset({"-C", "--prefix", "--registry", "--userconfig", "--globalconfig", "--cache",
                   "--loglevel", "-w", "--workspace", "--otp", "--tag", "--access"}),
        frozenset({"-g", "--global", "-s", "--silent", "-q", "--quiet", "-d", "-dd", "-ddd",
                   "--verbose", "-y", "--yes", "-f", "--force", "--dry-run", "-ws",
                   "--workspaces", "--include-workspace-root", "--no-workspaces"}),
    ),
    "pnpm": (
        frozenset({"-C", "--dir", "--filter", "-F", "--reporter", "--loglevel",
                   "--workspace-dir", "--store-dir"}),
        frozenset({"-r", "--recursive", "-w", "--workspace-root", "-g", "--global",
                   "-s", "--silent"}),
    ),
    "yarn": (frozenset({"--cwd", "--registry", "--cache-folder"}), frozenset({"-s", "--silent"})),
    "cargo": (
        frozenset({"-Z", "--config", "--color", "-C"}),
        frozenset({"-v", "-vv", "--verbose", "-q", "--quiet", "--frozen", "--locked",
                   "--offline"}),
    ),
    "rustup": (frozenset(), frozenset({"-v", "--verbose", "-q", "--quiet"})),
    "systemctl": (
        frozenset({"-H", "--host", "-M", "--machine", "-t", "--type", "-s", "--signal",
                   "-p", "--property", "--state", "-o", "--output", "--root", "--image",
                   "-n", "--lines", "--kill-whom", "--job-mode", "--what", "--timestamp",
                   "--message", "--when", "--kill-value", "--reboot-argument"}),
        frozenset({"--user", "--system", "--global", "--now", "-q", "--quiet", "--no-block",
                   "--no-pager", "-f", "--force", "-a", "--all", "-l", "--full", "-r",
                   "--recursive", "-i", "--ignore-inhibitors", "--dry-run", "--no-reload",
                   "--no-ask-password", "--runtime", "--no-wall", "--failed", "--no-legend",
                   "--plain", "--wait", "--show-types", "--reverse"}),
    ),
    "aws": (
        frozenset({"--profile", "--region", "--endpoint-url", "--output", "--query",
                   "--cli-read-timeout", "--cli-connect-timeout", "--ca-bundle", "--color",
                   "--cli-binary-format"}),
        frozenset({"--debug", "--no-verify-ssl", "--no-paginate", "--no-cli-pager",
                   "--no-sign-request", "--cli-auto-prompt", "--no-cli-auto-prompt"}),
    ),
    "gcloud": (
        frozenset({"--project", "--account", "--configuration", "--verbosity", "--format",
                   "--impersonate-service-account", "--billing-project", "--flags-file",
                   "--flatten", "--trace-token"}),
        frozenset({"-q", "--quiet", "--log-http", "--no-user-output-enabled"}),
    ),
    "terraform": (frozenset(), frozenset({"-help", "-version"})),  # -chdir=DIR
    "hg": (
        frozenset({"-R", "--repository", "--cwd", "--config", "--encoding", "--color",
                   "--pager"}),
        frozenset({"-y", "--noninteractive", "-q", "--quiet", "-v", "--verbose", "--debug",
                   "--traceback", "--time", "--profile"}),
    ),
    "pip": (
        frozenset({"--python", "--log", "--proxy", "--retries", "--timeout", "--exists-action",
                   "--trusted-host", "--cert", "--client-cert", "--cache-dir"}),
        frozenset({"-v", "--verbose", "-q", "--quiet", "--isolated", "--require-virtualenv",
                   "--no-cache-dir", "--disable-pip-version-check", "--no-color", "--no-input"}),
    ),
    "docker-compose": (
        frozenset({"-f", "--file", "-p", "--project-name", "--profile", "--env-file",
                   "--project-directory", "--ansi", "--progress", "--parallel", "-H", "--host",
                   "-c", "--context"}),
        frozenset({"--compatibility", "--dry-run", "--all-resources", "--verbose"}),
    ),
    "make": (  # -j and -l take an optional value: read both ways
        frozenset({"-C", "--directory", "-f", "--file", "--makefile", "-I", "--include-dir",
                   "-o", "--old-file", "--assume-old", "-W", "--what-if", "--new-file",
                   "--assume-new"}),
        frozenset({"-k", "--keep-going", "-s", "--silent", "--quiet", "-n", "--dry-run",
                   "--just-print", "-B", "--always-make", "-i", "--ignore-errors", "-q",
                   "--question", "-r", "-R", "-e", "-t", "--touch", "--no-print-directory",
                   "-w", "--print-directory", "-O", "--output-sync"}),
    ),
}  # fmt: skip
GLOBAL_OPTIONS["pip3"] = GLOBAL_OPTIONS["pip"]
GLOBAL_OPTIONS["gmake"] = GLOBAL_OPTIONS["make"]
_SUBCOMMAND_FORMS_MAX = 8


def subcommand_starts(base: str, rest: Sequence[Word]) -> list[int]:
    """Deny/ask: where in ``rest`` (the words after program ``base``) its subcommand may start
    once the global options before it are skipped (``git -C . push`` → 2), leaving out 0."""
    spec = GLOBAL_OPTIONS.get(base)
    if spec is None:
        return []
    valued, flags = spec
    out: list[int] = []
    todo, seen = [0], set()
    while todo and len(out) < _SUBCOMMAND_FORMS_MAX:
        n = todo.pop()
        if n in seen or n >= len(rest):
            continue
        seen.add(n)
        w = rest[n]
        option = (
            w.literal
            and len(w.text) > 1
            and (w.text.startswith("-") or (base in ("cargo", "rustup") and w.text.startswith("+")))
        )
        if not option or w.text == "--":
            start = n + 1 if w.text == "--" else n
            if start:
                out.append(start)
            continue
        t = w.text
        if "=" in t or t in flags or t.startswith("+"):
            todo.append(n + 1)
        elif t in valued or _cluster_ends_valued(t, valued):
            todo.append(n + 2)
        elif any(t.startswith(v) and len(v) == 2 and not v.startswith("--") for v in valued):
            todo.append(n + 1)  # -C. -nprod: the value in the same word
        else:
            todo.extend((n + 2, n + 1))
    return sorted(set(out))


def _cluster_ends_valued(opt: str, valued: frozenset[str]) -> bool:
    """``sudo -iu root rm``: in a cluster of short options the first one that takes a value
    takes the rest of the word (``-uroot``) or, when it is the last letter, the next word."""
    if opt.startswith("--") or len(opt) < 3:
        return False
    for n, c in enumerate(opt[1:], start=1):
        if "-" + c in valued:
            return n == len(opt) - 1
    return False


def wrapped(words: Sequence[Word], i: int | None) -> tuple[list[tuple[Word, ...]], str | None]:
    """The commands a wrapper (``timeout``, ``xargs``, ``find -exec``...) runs, and a reason
    when it runs one that cannot be told from its words; ``i`` is the program's index."""
    if i is None or not words[i].literal:
        return [], None
    base = words[i].text.rsplit("/", 1)[-1]
    rest = list(words[i + 1 :])
    if base == "find":
        out: list[tuple[Word, ...]] = []
        for j, w in enumerate(rest):
            if w.literal and w.text in _FIND_EXEC:
                end = next(
                    (k for k in range(j + 1, len(rest)) if rest[k].text in (";", "+")), len(rest)
                )
                if end > j + 1:
                    out.append(tuple(rest[j + 1 : end]))
        return out, None
    if base in _SHELL_WRAPPERS and rest:
        return [], f"{base} runs a command this check cannot read"
    if base == "flock" and any(w.text in ("-c", "--command") for w in rest):
        return [], "flock -c runs a string as shell code"
    if base == "env" and any(w.text.startswith(("-S", "--split-string")) for w in rest):
        return [], "env -S splits a string into a command"
    if base == "coreutils" and rest and rest[0].text.startswith("--coreutils-prog"):
        # The multi-call binary: ``coreutils --coreutils-prog=rm x`` runs ``rm x``; the
        # ``-shebang=`` form skips the script's name after it (both read, for a deny rule).
        prog = dataclasses.replace(rest[0], text=rest[0].text.split("=", 1)[-1])
        forms = [(prog, *rest[1:])]
        if rest[0].text.startswith("--coreutils-prog-shebang=") and len(rest) > 1:
            forms.append((prog, *rest[2:]))
        return forms, None
    spec = WRAPPERS.get(base)
    j = 0
    if spec is None and rest and (base, rest[0].text) in _RUN_SUBCOMMANDS:
        spec, j = _RUN_SUBCOMMANDS[(base, rest[0].text)], 1
    if spec is None:
        return [], None
    valued, positional = spec
    while j < len(rest) and rest[j].text.startswith("-") and (rest[j].text != "-" or base == "env"):
        opt = rest[j].text
        j += 1
        if opt == "--":
            break
        if opt in valued or _cluster_ends_valued(opt, valued):
            j += 1
    j += positional
    if j >= len(rest):
        return [], None
    return [tuple(rest[j:])], None

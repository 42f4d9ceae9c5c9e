"""The box on macOS: a :class:`~server.box.plan.BoxPlan` as a Seatbelt profile (sandbox-exec).

Why ``(allow default)`` and not ``(deny default)``: a deny-everything profile must then list
every Mach service, sysctl and dylib path a compiler, ``git`` or ``npm`` touches, and breaks
with each macOS release. Codex and Claude Code's open-source sandboxes keep the same promise
the other way round, and so does this: everything is allowed except what the plan takes away —
reading private paths, writing anywhere but the project and the private ``TMPDIR`` (minus the
persistence paths inside the project), the network (unless the plan allows it), and signals
to processes outside the box.

Seatbelt applies the *last* rule that matches an operation, so each narrowing rule comes after
the broader one it narrows. Paths are quoted as SBPL (TinyScheme) string literals: ``"`` and
``\\`` escaped, every control character as ``\\xHH``, so a hostile path (quotes, backslashes,
newlines, parentheses) stays one literal. This module is pure text: it is tested here as text
and has never run (these machines have no macOS), which the README says.
"""

from __future__ import annotations

from .plan import BoxPlan

# Device files an ordinary shell writes to (redirections, `>/dev/null`, `2>&1` via /dev/fd).
_DEVICE_WRITES = ('(literal "/dev/null")', '(literal "/dev/zero")', '(subpath "/dev/fd")')


def sbpl_string(path: str) -> str:
    """``path`` as one SBPL string literal. NUL cannot be in a path or an argv: refused."""
    if "\0" in path:
        raise ValueError("a path cannot contain NUL")
    out = ['"']
    for ch in path:
        if ch in ('"', "\\"):
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _subpaths(paths: tuple[str, ...]) -> str:
    return " ".join(f"(subpath {sbpl_string(p)})" for p in paths)


def profile(plan: BoxPlan) -> str:
    """The Seatbelt profile text for ``sandbox-exec -p`` that keeps ``plan``."""
    lines = [
        "(version 1)",
        "; omp A2A bridge: the box (generated from a BoxPlan; last matching rule wins)",
        "(allow default)",
    ]
    if plan.read_private:
        lines.append(f"(deny file-read* {_subpaths(plan.read_private)})")
    if plan.redacted:
        # Seatbelt cannot show a copy in a file's place: a git config file holding a
        # credential is not readable at all (git then stops with an error, never leaks).
        literals = " ".join(f"(literal {sbpl_string(p)})" for p, _ in plan.redacted)
        lines.append(f"(deny file-read* {literals})")
    writable = (*plan.write, plan.tmpdir) if plan.tmpdir else plan.write
    lines.append("(deny file-write*)")
    allowed = " ".join((*(f"(subpath {sbpl_string(p)})" for p in writable), *_DEVICE_WRITES))
    lines.append(f"(allow file-write* {allowed})")
    protected = (*plan.write_protected, *plan.read_private)
    if protected:
        # Persistence inside the project, and nothing private is written either.
        lines.append(f"(deny file-write* {_subpaths(protected)})")
    if not plan.network:
        lines.append("(deny network*)")
    lines += ["(deny signal)", "(allow signal (target same-sandbox))"]
    return "\n".join(lines) + "\n"

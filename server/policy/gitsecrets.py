"""Credentials in git's config files: find them, and a copy of the file without them (pure).

Why: git needs its config files (``~/.gitconfig``, ``~/.config/git/config``, a repository's
``.git/config``), so the box shows them and ``private.allow`` opens them to the built-in tools;
but git's own documentation puts secrets there: ``sendemail.smtpPass``, an
``http.<url>.extraHeader`` with a bearer token, a ``url.<base>.insteadOf`` whose base holds
``user:token@``, a remote cloned as ``https://x-access-token:<token>@github.com/...``, a
``[github] token``, a credential helper with the password inline (an outside review,
2026-12-05). :func:`redact` finds them and returns the same text with each secret part replaced
by :data:`PLACEHOLDER`, line for line, so git still parses the copy (``git log``, ``git remote
-v`` work in the box, and show the placeholder).

What counts as a secret (a plain reading of git's syntax, no I/O):

- a variable whose name contains ``pass``, ``token``, ``secret``, ``extraheader`` or
  ``apikey`` (any case): its whole value;
- a ``credential.helper`` value (or a ``credential.<url>.helper``) that names one of those
  words: a shell snippet with the password inline;
- in any value and in any section's subsection (``[url "https://u:t@h/"]``): the password of a
  URL's userinfo (``scheme://user:PASSWORD@host``), and a long user name alone on an ``http``
  URL (``https://<token>@github.com/...``: forges take a token as the user name).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MAX_BYTES",
    "PLACEHOLDER",
    "Finding",
    "Redaction",
    "holds_secret",
    "is_git_config",
    "redact",
]

PLACEHOLDER = "REDACTED-by-a2a-bridge"
# Config files are small; a reader reads at most this much (a bigger one is judged by its head,
# and the box hides a bigger one whole: see server.box.gitconfig).
MAX_BYTES = 256 * 1024

_SECRET_NAME = re.compile(r"pass|token|secret|extraheader|apikey|api-key", re.IGNORECASE)
# ``[section]``, ``[section "sub"]``, ``[section.sub]``, and what may follow on the same line.
_SECTION = re.compile(r'^(\s*\[\s*)([A-Za-z0-9.-]+)(?:(\s+")((?:[^"\\\n]|\\.)*)("))?(\s*\])(.*)$')
_ENTRY = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9-]*)(\s*=\s*)(.*)$")
# scheme://user:password@  (the password may be empty: ``user:@``)
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^/@\s:\"\\]*):([^/@\s\"\\]*)@")
# https://<token>@host: a user name alone, long enough to be a token rather than a login.
_TOKEN_USER = re.compile(r"((?:https?|ftps?)://)([^/@\s:\"\\]{16,})@", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Finding:
    """One secret in a config text: the 1-based line and what holds it (``sendemail.smtppass``,
    ``url.<subsection>``, ``remote.origin.url``), never the secret itself."""

    line: int
    what: str


@dataclass(frozen=True, slots=True)
class Redaction:
    """The text with every secret replaced (same lines), and what was replaced."""

    text: str
    findings: tuple[Finding, ...]

    @property
    def changed(self) -> bool:
        return bool(self.findings)


def _urls(value: str) -> tuple[str, bool]:
    """``value`` with the secret parts of every URL in it replaced; whether any was."""
    out = _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:{PLACEHOLDER}@", value)
    out = _TOKEN_USER.sub(lambda m: f"{m.group(1)}{PLACEHOLDER}@", out)
    return out, out != value


def _continues(raw: str) -> bool:
    """A value line that ends in an odd number of backslashes goes on on the next line."""
    stripped = raw.rstrip("\r\n")
    return (len(stripped) - len(stripped.rstrip("\\"))) % 2 == 1


def redact(text: str) -> Redaction:
    """``text`` (a git config file) with its secrets replaced by :data:`PLACEHOLDER`."""
    lines = text.split("\n")
    findings: list[Finding] = []
    section, sub = "", ""
    i = 0
    while i < len(lines):
        line = lines[i]
        number = i + 1
        head = _SECTION.match(line)
        if head is not None:
            section = head.group(2).lower()
            sub = head.group(4) or ""
            if head.group(4) is not None:
                clean, hit = _urls(head.group(4))
                sub = clean  # a finding names the subsection, never its secret
                if hit:
                    findings.append(Finding(number, f"{section}.<subsection>"))
                    line = (
                        head.group(1) + head.group(2) + head.group(3) + clean + head.group(5)
                        + head.group(6) + head.group(7)
                    )  # fmt: skip
            rest = head.group(7)
            prefix = line[: len(line) - len(rest)]
        else:
            rest, prefix = line, ""
        entry = _ENTRY.match(rest)
        if entry is None:
            lines[i] = line
            i += 1
            continue
        name = entry.group(2)
        value = entry.group(4)
        what = ".".join(p for p in (section, sub, name.lower()) if p)
        # The physical lines this value spans (a backslash at the end continues it).
        last = i
        while _continues(lines[last]) and last + 1 < len(lines):
            last += 1
        secret_name = _SECRET_NAME.search(name) is not None
        helper = section == "credential" and name.lower() == "helper"
        whole = " ".join([value, *lines[i + 1 : last + 1]])
        if secret_name or (helper and _SECRET_NAME.search(whole) is not None):
            if value.strip() or last > i:
                findings.append(Finding(number, what))
                lines[i] = prefix + entry.group(1) + name + entry.group(3) + PLACEHOLDER
                for j in range(i + 1, last + 1):
                    lines[j] = ""  # the continued lines: blank, so the line count stays
            else:
                lines[i] = line
            i = last + 1
            continue
        changed = False
        for j in range(i, last + 1):
            target = value if j == i else lines[j]
            clean, hit = _urls(target)
            if hit:
                changed = True
                if j == i:
                    line = prefix + entry.group(1) + name + entry.group(3) + clean
                else:
                    lines[j] = clean
        if changed:
            findings.append(Finding(number, what))
        lines[i] = line
        i = last + 1
    return Redaction("\n".join(lines), tuple(findings))


def holds_secret(text: str) -> bool:
    """Whether a git config text holds a credential :func:`redact` would replace."""
    return redact(text).changed


def is_git_config(real: str) -> bool:
    """Whether the real path has the shape of a git config file (pure, by name only): a name
    holding ``gitconfig`` (``~/.gitconfig``, ``/etc/gitconfig``, an included
    ``~/.gitconfig-work``), any file in a ``git`` folder of a hidden one
    (``~/.config/git/config`` and the files it includes beside it; a project's ``src/git/`` is
    code), and ``config`` or
    ``config.worktree`` in a git dir (``.git/config``, ``.git/modules/x/config``,
    ``app.git/config``). What has the shape is read (bounded) to find out whether it holds a
    credential; nothing is refused for its name alone."""
    parts = real.replace("\\", "/").lower().split("/")
    name, folders = parts[-1], parts[:-1]
    if "gitconfig" in name or (
        len(folders) > 1 and folders[-1] == "git" and folders[-2][:1] == "."
    ):
        return True  # also ``work.gitconfig``, and what ``~/.config/git`` holds (included files)
    if name not in ("config", "config.worktree"):
        return False
    return any(p == ".git" or p.endswith(".git") for p in folders)

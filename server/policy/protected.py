"""The protected-location table: every place a tool must not touch without a human, with why.

One data table (:data:`TABLE`) lists each location with the category the approval UIs show.
A pattern is one of:

- ``~/x/y`` or ``/x/y``: that location and everything below it. ``*`` and ``?`` match inside
  one path component (``~/.var/app/*/.mozilla``).
- a bare name without ``/`` (``*.pem``, ``.env.*``): a file with that name anywhere, except
  the names in ``unless`` (``.env.example``, ``id_rsa.pub``).
- ``**/a/b``: the components ``a/b`` anywhere, and everything below (``**/.git/hooks``).
- ``a/b`` (relative, no ``~``, ``/`` or ``**/``): a *file* whose path ends with those
  components, wherever it is (``.kube/config``): a bare name that needs its folder's name to
  be recognised. Matched like a name (files only), so walks keep their per-folder fast path.

Matching is case-insensitive and Unicode-compatibility-folded on every OS (so ``~/.SSH`` on a
case-insensitive disk and a full-width look-alike are caught; over-protecting a distinct
directory on Linux costs one question, never a leak). :class:`Matcher` compiles the table once:
a tuple ``startswith`` for plain locations, one regex for names, guarded regexes for globs.

Over 400 lines for a reason: two thirds of it is the table itself, which is read (and
reviewed) best as one list; the compiler below it is the only code that reads it.
"""

from __future__ import annotations

import enum
import os
import re
import unicodedata
import warnings
from collections.abc import Iterable
from dataclasses import dataclass

import platformdirs

from .. import APP_NAME


class EscalationKind(enum.StrEnum):
    """Why a path needs a human; only ``OUTSIDE_ROOTS`` may ever be covered by a rule."""

    OUTSIDE_ROOTS = "outside_roots"  # a rule may allow it
    PROTECTED = "protected"  # secrets; nothing but a human decision covers it
    PERSISTENCE = "persistence"  # write/edit there: always asks; no grant/rule/always
    OWN_FILE = "own_file"  # the bridge's own config, audit, control file, autostart
    UNCHECKED = "unchecked"  # too large to judge (a command, an upstream's arguments): asks


P = EscalationKind.PROTECTED
W = EscalationKind.PERSISTENCE
O = EscalationKind.OWN_FILE  # noqa: E741


@dataclass(frozen=True, slots=True)
class Location:
    pattern: str
    category: str
    kind: EscalationKind = EscalationKind.PROTECTED
    unless: tuple[str, ...] = ()  # name patterns that are exempt (bare-name entries only)


def _many(category: str, kind: EscalationKind, *patterns: str) -> list[Location]:
    return [Location(p, category, kind) for p in patterns]


SSH = "SSH keys"
GPG = "GnuPG keys"
CLOUD = "cloud and cluster credentials"
FORGE = "package-manager and forge credentials"
KEYRING = "keyrings and wallets"
PASSWORDS = "password stores"
BROWSER = "browser profiles"
MAIL = "mail and chat profiles"
HISTORY = "shell and REPL histories"
SECRET_FILE = "secret-looking file"
HOOK_MANAGER = "git hook manager config (runs at commit)"
AGENT_SETTINGS = "coding-agent settings that can run commands"
OWN = "bridge data"
AGENTS = "coding-agent credentials"
APPS = "app credentials and sessions"
SYSTEM = "system secrets"
# A private path with no entry of its own in the table gets one of these (see PathPolicy).
HIDDEN_HOME = "private: hidden file in your home"
OTHER_HOME = "private: another user's home"
ENV_TEMPLATES = ("*.example", "*.sample", "*.template", "*.dist")
# File names that look like credentials but are source code or docs: never secret by name.
SOURCE_EXTS = (
    "*.py", "*.pyi", "*.js", "*.mjs", "*.cjs", "*.ts", "*.tsx", "*.jsx", "*.go", "*.rs",
    "*.java", "*.kt", "*.rb", "*.php", "*.c", "*.h", "*.cc", "*.cpp", "*.hpp", "*.cs",
    "*.swift", "*.scala", "*.md", "*.rst", "*.html", "*.css", "*.vue", "*.svelte",
)  # fmt: skip
# ``private.allow`` when the config names none: git needs its own config to work.
DEFAULT_PRIVATE_ALLOW = ("~/.gitconfig", "~/.config/git")
# Templates of a secrets data file (``secrets.example.yaml``, ``credentials-sample.json``).
DATA_TEMPLATES = ("*example*", "*sample*", "*template*")
# ``*.env`` files that are templates (``example.env``, ``app.sample.env``).
ENV_FILE_TEMPLATES = ("*example.env", "*sample.env", "*template.env", "*.dist.env")

# Project files that make a command run later, outside any box, with nobody asked: the hook
# managers' config (the hook ``pre-commit install`` / ``lefthook install`` left in .git/hooks
# reads it at every ``git commit``), and coding agents' and editors' project settings (hooks
# and MCP servers started when the human next opens the project with that tool, as a
# ``.vscode`` task is). Paths relative to a project; the box (``server/box/policy.py``) keeps
# them read-only and sweeps those a call made, the table makes writing them always ask.
_LEFTHOOK_EXTS = ("yml", "yaml", "toml", "json", "jsonc")
HOOK_MANAGER_FILES: tuple[str, ...] = (
    ".pre-commit-config.yaml",
    ".pre-commit-config.yml",
    *(
        f"{where}{name}.{ext}"
        for where, name in (
            ("", "lefthook"),
            ("", ".lefthook"),
            (".config/", "lefthook"),
            ("", "lefthook-local"),
            ("", ".lefthook-local"),
            (".config/", "lefthook-local"),
        )
        for ext in _LEFTHOOK_EXTS
    ),
    ".lefthook",  # lefthook's ``source_dir``: scripts its config runs
    ".lefthook-local",
)
AGENT_SETTINGS_FILES = (
    ".claude/settings.json",  # Claude Code: hooks
    ".claude/settings.local.json",
    ".mcp.json",  # Claude Code: the project's MCP servers
    ".cursor/mcp.json",
    ".cursor/hooks.json",
    ".gemini/settings.json",  # Gemini CLI: MCP servers
)
# Zed starts the language and MCP servers ``.zed/settings.json`` names once the worktree is
# trusted (trust is kept per folder, not per content); a dev container's ``initializeCommand``
# runs on the host when the human reopens the project in its container.
EDITOR_RUNS_LATER = (".zed", ".devcontainer", ".devcontainer.json")

_BROWSER_DIRS = (
    "google-chrome*",
    "chromium",
    "BraveSoftware",
    "microsoft-edge*",
    "vivaldi*",
    "opera*",
)

TABLE: tuple[Location, ...] = (
    # -- secrets ---------------------------------------------------------------------------------
    *_many(SSH, P, "~/.ssh", "~/AppData/Roaming/ssh"),
    *_many(GPG, P, "~/.gnupg", "~/AppData/Roaming/gnupg"),
    *_many(
        CLOUD,
        P,
        "~/.aws",
        "~/.azure",
        "~/.config/gcloud",
        "~/AppData/Roaming/gcloud",
        "~/.kube",
        "~/.docker/config.json",
        "~/.dockercfg",
        "~/.config/containers/auth.json",
        "~/.minikube",
        "~/.oci",
        "~/.config/doctl",
        "~/.config/hcloud",
        "~/.config/openstack",
        "~/.s3cfg",
        "~/.boto",
        "~/.databrickscfg",
        "~/.fly",
        "~/.config/flyctl",
        "~/.talos",
    ),
    *_many(
        FORGE,
        P,
        "~/.netrc",
        "~/_netrc",
        "~/.git-credentials",
        "~/.config/git/credentials",
        "~/.npmrc",
        "~/.yarnrc.yml",
        "~/.pypirc",
        "~/.config/pip",
        "~/.pip",
        "~/.cargo/credentials",
        "~/.cargo/credentials.toml",
        "~/.gem/credentials",
        "~/.local/share/gem/credentials",
        "~/.m2/settings.xml",
        "~/.m2/settings-security.xml",
        "~/.m2/settings*.xml",
        "~/.gradle/gradle.properties",
        "~/.config/gh",
        "~/.config/hub",
        "~/.config/glab-cli",
        "~/.pgpass",
        "~/AppData/Roaming/postgresql/pgpass.conf",
        "~/.my.cnf",
        "~/.vault-token",
        "~/.config/rclone",
        "~/.terraform.d/credentials.tfrc.json",
        "~/.terraformrc",
        "~/AppData/Roaming/terraform.rc",
        "~/.config/op",
        "~/.op",
        "~/.composer/auth.json",
        "~/.config/composer/auth.json",
        "~/.nuget/NuGet/NuGet.Config",
        "~/AppData/Roaming/NuGet/NuGet.Config",
        "~/.config/configstore",
    ),
    *_many(
        KEYRING,
        P,
        "~/.local/share/keyrings",
        "~/.gnome2/keyrings",
        "~/.local/share/kwalletd",
        "~/.kde/share/apps/kwallet",
        "~/.kde4/share/apps/kwallet",
        "~/.local/share/python_keyring",
        "~/.config/python_keyring",
        "~/AppData/Local/Python Keyring",
        "~/Library/Keychains",
        "~/AppData/Roaming/Microsoft/Credentials",
        "~/AppData/Local/Microsoft/Credentials",
        "~/AppData/Roaming/Microsoft/Protect",
        "~/AppData/Local/Microsoft/Vault",
        "~/AppData/Roaming/Microsoft/Vault",
        "~/.config/1Password",
        "~/Library/Group Containers/*.com.1password",
        "~/.config/Bitwarden",
        "~/.config/Bitwarden CLI",
        "~/.bitcoin/wallet.dat",
        "~/.bitcoin/wallets",
        "~/.electrum",
        "~/.ethereum/keystore",
    ),
    *_many(
        AGENTS,
        P,
        "~/.claude/.credentials.json",
        "~/.claude.json",
        "~/.codex/auth.json",
        "~/.config/github-copilot",
        "~/.gemini/oauth_creds.json",
        "~/.gemini/google_accounts.json",
        "~/.local/share/opencode/auth.json",
        "~/.config/opencode/auth.json",
        "~/.cursor/mcp.json",
        "~/.codeium",
        "~/.continue/config.json",
        "~/.continue/config.yaml",
        "~/.aider.conf.yml",
        "~/.config/goose",
        "~/.kiro/settings/mcp.json",
        "~/.cline/data/secrets.json",
        "~/.claude-server-commander",
        "~/.mcpproxy",
        "~/.docker/mcp",
        "~/.config/litellm",
        "~/.openai",
        "~/.config/openai",
        "~/.anthropic",
        "~/.ollama/id_ed25519",
    ),
    *_many(
        APPS,
        P,
        "~/.config/sops",
        "~/.sops",
        "~/.config/age",
        "~/.cache/huggingface/token",
        "~/.cache/huggingface/stored_tokens",
        "~/.huggingface/token",
        "~/.kaggle",
        "~/.config/kaggle",
        "~/.pulumi/credentials.json",
        "~/.config/ngrok",
        "~/.ngrok2",
        "~/Library/Application Support/ngrok",
        "~/.authinfo",
        "~/.authinfo.gpg",
        "~/.msmtprc",
        "~/.config/msmtp",
        "~/.mbsyncrc",
        "~/.fetchmailrc",
        "~/.muttrc",
        "~/.config/mutt",
        "~/.local/share/remmina",
        "~/.config/remmina",
        "~/.config/filezilla",
        "~/.filezilla",
        "~/.config/Code/User/globalStorage",
        "~/.config/Code - Insiders/User/globalStorage",
        "~/.config/VSCodium/User/globalStorage",
        "~/.config/Cursor/User/globalStorage",
        "~/Library/Application Support/Code/User/globalStorage",
        "~/AppData/Roaming/Code/User/globalStorage",
        "~/.local/share/atuin",
        "~/.config/atuin/key",
        "~/.local/share/tailscale",
        "~/.config/ntfy",
        "~/.config/heroku",
        "~/.netlify",
        "~/.config/netlify",
        "~/.vercel",
        "~/.config/vercel",
        "~/.wrangler",
        "~/.config/.wrangler",
        "~/.supabase",
        "~/.config/stripe",
        "~/.twilio-cli",
        "~/.config/twilio-cli",
        "~/.circleci/cli.yml",
        "~/.travis",
        "~/.config/helm",
        "~/.config/argocd",
        "~/.config/doppler",
        "~/.doppler",
        "~/.infisical",
        "~/.snowflake",
        "~/.dbt/profiles.yml",
        "~/.config/spotify-tui",
        "~/.config/transmission",
        "~/.wakatime.cfg",
        "~/.local/share/keybase",
        "~/.config/keybase",
        "~/.cert",
        "~/.pki",
        "~/.subversion/auth",
        "~/.linode-cli",
        "~/.config/linode-cli",
        "~/.config/scaleway",
        "~/.config/exoscale",
        "~/.config/yandex-cloud",
        "~/.aliyun",
        "~/.tccli",
        "~/.bluemix",
        "~/.ibmcloud",
        "~/.ovh.conf",
        "~/.config/teleport",
        "~/.tsh",
        "~/.config/tsh",
        "~/.boundary",
        "~/.nomad-token",
        "~/.consul-token",
        "~/.jfrog",
        "~/.sonar",
        "~/.config/jira",
        "~/.jira.d",
        "~/.config/linear",
        "~/.config/sentry",
        "~/.sentryclirc",
        "~/.config/wireguard",
        "~/.cloudflared",
        "~/.config/tea",
        "~/.config/gitea",
        "~/.bluesky",
        "~/.local/share/signal-cli",
        "~/.purple",
        "~/.irssi",
        "~/.weechat",
        "~/.config/weechat",
        "~/.local/share/weechat",
    ),
    *_many(PASSWORDS, P, "~/.password-store", "~/.local/share/gopass", "~/.config/gopass"),
    Location("*.kdbx", PASSWORDS),
    Location("*.kdb", PASSWORDS),
    *_many(
        BROWSER,
        P,
        # Linux, including beta/dev/unstable channels
        "~/.mozilla",
        "~/.librewolf",
        "~/.waterfox",
        *(f"~/.config/{d}" for d in _BROWSER_DIRS),
        "~/.config/epiphany",
        "~/.local/share/epiphany",
        # Flatpak (any app id) and the usual browser apps as a whole
        "~/.var/app/*/.mozilla",
        *(f"~/.var/app/*/config/{d}" for d in _BROWSER_DIRS),
        "~/.var/app/*/data/keyrings",
        "~/.var/app/org.mozilla.firefox",
        "~/.var/app/com.google.Chrome*",
        "~/.var/app/org.chromium.Chromium",
        "~/.var/app/com.brave.Browser",
        "~/.var/app/com.microsoft.Edge*",
        "~/.var/app/com.vivaldi.Vivaldi",
        "~/.var/app/com.opera.Opera*",
        "~/.var/app/io.gitlab.librewolf-community",
        "~/.var/app/org.gnome.Epiphany",
        # Snap
        "~/snap/firefox",
        "~/snap/chromium",
        "~/snap/brave",
        "~/snap/opera*",
        "~/snap/vivaldi*",
        "~/snap/microsoft-edge*",
        "~/snap/*/*/.mozilla",
        # macOS
        "~/Library/Application Support/Google/Chrome*",
        "~/Library/Application Support/Chromium",
        "~/Library/Application Support/BraveSoftware",
        "~/Library/Application Support/Microsoft Edge*",
        "~/Library/Application Support/Vivaldi*",
        "~/Library/Application Support/com.operasoftware.Opera*",
        "~/Library/Application Support/Firefox",
        "~/Library/Safari",
        "~/Library/Cookies",
        "~/Library/Containers/com.apple.Safari",
        # Windows
        "~/AppData/Roaming/Mozilla",
        "~/AppData/Local/Mozilla",
        "~/AppData/Local/Google/Chrome*",
        "~/AppData/Local/Chromium",
        "~/AppData/Local/BraveSoftware",
        "~/AppData/Local/Microsoft/Edge*",
        "~/AppData/Local/Vivaldi",
        "~/AppData/Roaming/Opera Software",
    ),
    *_many(
        MAIL,
        P,
        "~/.thunderbird",
        "~/.var/app/*/.thunderbird",
        "~/.var/app/org.mozilla.Thunderbird",
        "~/snap/thunderbird",
        "~/.local/share/evolution",
        "~/.config/evolution",
        "~/Library/Thunderbird",
        "~/Library/Mail",
        "~/Library/Containers/com.apple.mail",
        "~/Library/Messages",
        "~/AppData/Roaming/Thunderbird",
        "~/.config/Slack",
        "~/.config/discord",
        "~/.config/Signal",
        "~/.local/share/TelegramDesktop",
    ),
    *_many(
        HISTORY,
        P,
        "~/.bash_history",
        "~/.zsh_history",
        "~/.zhistory",
        "~/.histfile",
        "~/.sh_history",
        "~/.local/share/fish/fish_history",
        "~/.python_history",
        "~/.node_repl_history",
        "~/.psql_history",
        "~/.mysql_history",
        "~/.sqlite_history",
        "~/.irb_history",
        "~/.rediscli_history",
        "~/.lesshst",
        "~/.viminfo",
        "~/.local/share/nvim/shada",
        "~/.ipython/profile_default/history.sqlite",
        "~/.julia/logs/repl_history.jl",
        "~/.Rhistory",
        "~/AppData/Roaming/Microsoft/Windows/PowerShell/PSReadLine",
    ),
    Location(".*_history", HISTORY),
    *_many(
        "process memory and environment",
        P,
        "/proc/*/environ",
        "/proc/*/mem",
        "/proc/*/task/*/environ",
        "/proc/*/task/*/mem",
        "/dev/mem",
        "/dev/kmem",
    ),
    *_many(
        SYSTEM,
        P,
        "/etc/shadow",
        "/etc/shadow-",
        "/etc/gshadow",
        "/etc/gshadow-",
        "/etc/master.passwd",
        "/etc/security/opasswd",
        "/etc/sudoers",
        "/etc/sudoers.d",
        "/etc/ssh/ssh_host_*_key",
        "/etc/krb5.keytab",
        "/etc/NetworkManager/system-connections",
        "/etc/wpa_supplicant",
        "/var/lib/iwd",
        "/etc/letsencrypt",
        "/etc/ssl/private",
        "/var/lib/sss",
        "/var/db/sudo",
    ),
    # Sockets that act with the user's keys: bash gets no SSH_AUTH_SOCK or session bus address
    # (server/infra/childenv.py), so a command that names one by path always asks.
    *_many(
        "agent and session sockets",
        P,
        "/tmp/ssh-*",  # noqa: S108 - OpenSSH ssh-agent
        "/tmp/com.apple.launchd.*",  # noqa: S108 - macOS SSH_AUTH_SOCK
        "/private/tmp/com.apple.launchd.*",
        "/run/user/*/keyring",  # gnome-keyring: its ssh agent and control sockets
        "/run/user/*/gcr",  # gcr-ssh-agent (GNOME 46+)
        "/run/user/*/gnupg",  # gpg-agent, also as an ssh agent
        "/run/user/*/ssh-agent.socket",
        "/run/user/*/openssh_agent",
        "/run/user/*/bus",  # the D-Bus session bus: the Secret Service keyring
        "/run/user/*/docker.sock",  # rootless Docker
        "/run/docker.sock",  # Docker: root on this machine
        "/var/run/docker.sock",
        "~/.1password/agent.sock",
        "~/.bitwarden-ssh-agent.sock",
    ),
    # -- secret-looking files, wherever they are --------------------------------------------------
    Location(".env", SECRET_FILE),
    *(Location(p, SECRET_FILE, unless=ENV_TEMPLATES) for p in (".env.*", ".env-*", ".env_*")),
    Location(".envrc", SECRET_FILE),
    Location("*.tfstate", SECRET_FILE),
    Location("*.tfstate.*", SECRET_FILE),
    Location("*.tfvars", SECRET_FILE, unless=ENV_TEMPLATES),
    Location("credentials", SECRET_FILE),
    Location("credentials*", SECRET_FILE, unless=SOURCE_EXTS),
    Location("*.ppk", SECRET_FILE),
    Location("*.keytab", SECRET_FILE),
    Location("*.ovpn", SECRET_FILE),
    Location(".authinfo", SECRET_FILE),
    Location(".authinfo.gpg", SECRET_FILE),
    Location(".msmtprc", SECRET_FILE),
    Location(".npmrc", SECRET_FILE),
    Location(".pypirc", SECRET_FILE),
    Location(".dockercfg", SECRET_FILE),
    Location("*.pem", SECRET_FILE),
    Location("*.key", SECRET_FILE),
    Location("*.p12", SECRET_FILE),
    Location("*.pfx", SECRET_FILE),
    Location("*.jks", SECRET_FILE),
    Location("*.keystore", SECRET_FILE),
    Location("id_*", SECRET_FILE, unless=("*.pub", *SOURCE_EXTS)),
    Location(".netrc", SECRET_FILE),
    Location(".pgpass", SECRET_FILE),
    Location(".git-credentials", SECRET_FILE),
    Location(".vault-token", SECRET_FILE),
    Location(".htpasswd", SECRET_FILE),
    # Vendors' and frameworks' own names for a secrets file (attack5): Cloudflare Workers'
    # ``.dev.vars``, docker compose's ``env_file`` and systemd's ``EnvironmentFile``
    # (``prod.env``), Streamlit's ``secrets.toml``, Google's ``client_secret_*.json`` and
    # service-account keys, Apple's ``AuthKey_*.p8``, s3cmd, kubectl, Azure Functions,
    # Composer, cookiecutter-django's ``.envs/.production/.django``. Data-file extensions
    # only: ``secret_santa.md``, ``credentials.py`` and ``tokenizer.json`` stay ordinary.
    Location(".dev.vars", SECRET_FILE),
    Location(".dev.vars.*", SECRET_FILE, unless=ENV_TEMPLATES),
    Location("*.env", SECRET_FILE, unless=ENV_FILE_TEMPLATES),
    *(
        Location(f"*{infix}*.{ext}", SECRET_FILE, unless=DATA_TEMPLATES)
        for infix, exts in (
            ("secret", ("json", "yaml", "yml", "toml")),
            ("credential", ("json", "yaml", "yml", "toml", "ini")),
            ("service-account", ("json",)),
            ("service_account", ("json",)),
            ("serviceaccount", ("json",)),
        )
        for ext in exts
    ),
    Location("AuthKey_*.p8", SECRET_FILE),
    Location("SubscriptionKey_*.p8", SECRET_FILE),
    Location(".s3cfg", SECRET_FILE),
    Location("kubeconfig", SECRET_FILE),
    Location("kubeconfig*", SECRET_FILE, unless=(*SOURCE_EXTS, *DATA_TEMPLATES)),
    Location("*.kubeconfig", SECRET_FILE),
    Location("local.settings.json", SECRET_FILE),
    Location("auth.json", SECRET_FILE),
    # The home's credential stores under their own relative names, copied into a project.
    Location(".kube/config", SECRET_FILE),
    Location(".docker/config.json", SECRET_FILE),
    Location(".bundle/config", SECRET_FILE),
    Location(".envs/*/.*", SECRET_FILE),
    # -- the bridge's own files (the per-run paths are added by PathPolicy) ---------------------
    *_many(
        OWN,
        O,
        "~/.config/omp-a2a-bridge",
        "~/.local/state/omp-a2a-bridge",
        "~/.cache/omp-a2a-bridge",
        "~/Library/Application Support/omp-a2a-bridge",
        "~/Library/Logs/omp-a2a-bridge",
        "~/AppData/Local/omp-a2a-bridge",
        "~/AppData/Roaming/omp-a2a-bridge",
    ),
    *_many(
        "bridge autostart entry",
        O,
        "~/.config/autostart/omp-a2a-bridge.desktop",
        "~/Library/LaunchAgents/dev.omp.a2a-bridge.plist",
    ),
    # -- persistence: reading is fine, writing there can make programs run later ----------------
    *_many(
        "shell startup file",
        W,
        "~/.bashrc",
        "~/.bash_profile",
        "~/.bash_login",
        "~/.bash_logout",
        "~/.profile",
        "~/.zshrc",
        "~/.zprofile",
        "~/.zshenv",
        "~/.zlogin",
        "~/.zlogout",
        "~/.config/fish",
        "~/.xprofile",
        "~/.xinitrc",
        "~/.xsession",
        "~/.xsessionrc",
        "~/.pam_environment",
        "~/.config/environment.d",
        "~/.config/plasma-workspace/env",
        "~/.config/powershell",
        "~/Documents/PowerShell",
        "~/Documents/WindowsPowerShell",
        "~/.bash_aliases",
        "~/.bashrc.d",
        "~/.kshrc",
        "~/.mkshrc",
        "~/.tcshrc",
        "~/.cshrc",
        "~/.login",
        "~/.xonshrc",
        "~/.config/xonsh",
        "~/.config/nushell",
        "~/.config/direnv",
        "~/.inputrc",
        "~/.vimrc",
        "~/.vim",
        "~/.config/nvim",
        "~/.local/share/nvim/site",
        "~/.emacs",
        "~/.emacs.d",
        "~/.config/emacs",
        "~/.ipython/profile_default/startup",
        "~/.pythonrc",
        "~/.pythonstartup",
        "~/.local/lib/python*/site-packages",
    ),
    *_many(
        "autostart folder",
        W,
        "~/.config/autostart",
        "~/.config/autostart-scripts",
        "~/.config/plasma-workspace/shutdown",
        "~/.local/share/applications",
        "~/.local/share/dbus-1",
        "~/.config/i3",
        "~/.config/sway",
        "~/.config/hypr",
        "~/.config/openbox/autostart",
        "~/Library/LaunchAgents",
        "~/AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup",
        "/etc/xdg/autostart",
    ),
    *_many(
        "systemd user units",
        W,
        "~/.config/systemd/user",
        "~/.local/share/systemd/user",
        "~/.config/containers/systemd",
    ),
    *_many(
        "crontab",
        W,
        "/var/spool/cron",
        "/etc/crontab",
        "/etc/cron.d",
        "/usr/lib/cron/tabs",
        "/var/at/tabs",
    ),
    *_many("program folder on PATH", W, "~/.local/bin", "~/bin", "~/.cargo/bin", "~/go/bin"),
    *_many(
        "SSH login access",
        W,
        "~/.ssh/authorized_keys",
        "~/.ssh/authorized_keys2",
        "~/.ssh/rc",
        "~/.ssh/config",
    ),
    Location("**/.git/hooks", "git hooks", W),
    Location("**/.husky", "git hooks", W),
    Location("**/.githooks", "git hooks", W),
    Location("**/.vscode/tasks.json", "editor task that can run on folder open", W),
    Location("**/*.git/hooks", "git hooks", W),
    Location("**/.git/config", "git config", W),
    Location("**/.git/modules/*/config", "git config", W),
    Location("**/.git/modules/*/hooks", "git hooks", W),
    Location("**/.git/worktrees/*/config.worktree", "git config", W),
    Location("**/*.git/config", "git config", W),
    *_many("git config", W, "~/.gitconfig", "~/.config/git"),
    # Anywhere: the rest of a git dir (a .git FILE pointing elsewhere included), editor and
    # direnv folders, Python's start-up hooks. The path policy adds folders that *are* git
    # dirs (HEAD + objects + refs) whatever their name.
    Location("**/.git", "git metadata", W),
    Location("**/.vscode", "editor settings that can run code", W),
    Location("**/.idea", "editor settings that can run code", W),
    Location("**/.direnv", "direnv script (runs on cd)", W),
    Location(".envrc", "direnv script (runs on cd)", W),
    *_many(HOOK_MANAGER, W, *(f"**/{n}" for n in HOOK_MANAGER_FILES)),
    *_many(AGENT_SETTINGS, W, *(f"**/{n}" for n in AGENT_SETTINGS_FILES)),
    *_many("editor settings that can run code", W, *(f"**/{n}" for n in EDITOR_RUNS_LATER)),
    Location("*.code-workspace", "editor settings that can run code", W),
    Location("*.pth", "Python start-up hook", W),
    Location("sitecustomize.py", "Python start-up hook", W),
    Location("usercustomize.py", "Python start-up hook", W),
)


# -- compiling --------------------------------------------------------------------------------


def fold(path: str) -> str:
    """The key every comparison uses: ``/`` separators, case and compatibility folded."""
    if os.sep != "/":
        path = path.replace(os.sep, "/")
    if path.isascii():
        return path.lower()
    return unicodedata.normalize("NFKC", path).casefold()


def _glob_rx(glob: str, *, component: bool = True) -> str:
    """Regex text for a glob where ``*``/``?`` stay inside one component."""
    out = []
    for c in glob:
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        else:
            out.append(re.escape(c))
    return "".join(out)


def _has_glob(s: str) -> bool:
    return "*" in s or "?" in s


def expand(pattern: str, home: str) -> str:
    """A location pattern as a real absolute path (``~`` = the real home); globs kept."""
    if pattern == "~" or pattern.startswith("~/"):
        pattern = home + pattern[1:]
    head, sep, tail = pattern.partition("*")
    # Resolve the literal part's symlinks (e.g. /var -> /private/var on macOS); keep the glob.
    literal_dir = os.path.dirname(head) if sep else head
    real = os.path.realpath(literal_dir) if literal_dir else literal_dir
    if sep:
        return real + head[len(literal_dir) :] + sep + tail
    return real


@dataclass(frozen=True, slots=True)
class Hit:
    category: str
    kind: EscalationKind
    location: str  # the table pattern as expanded (for messages and tests)


_GLOB_CHARS = re.compile(r"[*?\[]")
_INFIX = re.compile(r"\*\.[^*?\[/.]+\.\*")
_EXT_INFIX = re.compile(r"\*([^*?\[/]+)\*\.([^*?\[/.]+)")  # ``*secret*.json``


def is_name_pattern(pattern: str) -> bool:
    """A pattern that names files wherever they are (``.env``, ``*.pem``, ``.kube/config``),
    judged by the path's last components alone: no home, no disk needed to compile it."""
    return not pattern.startswith(("~", "/", "**/"))


def _literal_parts(glob: str) -> list[str]:
    return [p for p in _GLOB_CHARS.split(glob) if p]


_Entry = tuple[int, str, "re.Pattern[str] | None", "Hit"]


class Matcher:
    """The table compiled for one home directory; every method takes a folded key.

    Built for the per-entry hot path of walks: locations are bucketed by their first component
    below the home (or below ``/``), so a path meets only the few entries that could hold it;
    names go through a set of exact names, a set of extensions, and one regex only for the
    few patterns left; ``**/`` patterns are guarded by a substring test.
    """

    def __init__(self, locations: Iterable[Location], home: str) -> None:
        self.home = home
        self._fhome = fold(home).rstrip("/")
        self._fhome_below = self._fhome + "/"
        self.locations: list[tuple[str, Hit]] = []  # (expanded real pattern, hit)
        buckets: dict[str, list[tuple[int, str, re.Pattern[str] | None, Hit]]] = {}
        wild: list[tuple[int, str, re.Pattern[str] | None, Hit]] = []
        exact: dict[str, list[tuple[tuple[re.Pattern[str], ...], Hit]]] = {}
        exts: dict[str, list[tuple[tuple[re.Pattern[str], ...], Hit]]] = {}
        infixes: list[tuple[str, tuple[re.Pattern[str], ...], Hit]] = []
        names: list[tuple[re.Pattern[str], tuple[re.Pattern[str], ...], Hit, str]] = []
        ext_infixes: dict[str, list[tuple[str, tuple[re.Pattern[str], ...], Hit]]] = {}
        tails: dict[str, list[tuple[re.Pattern[str], re.Pattern[str], Hit]]] = {}
        tail_globs: list[tuple[str, re.Pattern[str], re.Pattern[str], re.Pattern[str], Hit]] = []
        anywhere: list[tuple[re.Pattern[str], tuple[str, ...], Hit]] = []
        for loc in locations:
            pattern = loc.pattern
            if "/" in pattern and is_name_pattern(pattern):  # ``.kube/config``: a file's tail
                key = fold(pattern)
                parent, _, last = key.rpartition("/")
                full = re.compile("(?:^|/)" + _glob_rx(key) + r"\Z")
                above = re.compile("(?:^|/)" + _glob_rx(parent) + r"\Z")
                hit = Hit(loc.category, loc.kind, pattern)
                if not _has_glob(last):
                    tails.setdefault(last, []).append((full, above, hit))
                else:
                    head = parent.split("/", 1)[0]
                    guard = "" if _has_glob(head) else "/" + head + "/"
                    last_rx = re.compile(_glob_rx(last) + r"\Z")
                    tail_globs.append((guard, full, above, last_rx, hit))
            elif pattern.startswith("**/"):
                body = fold(pattern[3:])
                rx = re.compile("/" + _glob_rx(body) + "(?:/|$)")
                lits = tuple(_literal_parts(body)) or ("",)
                anywhere.append((rx, lits, Hit(loc.category, loc.kind, pattern)))
            elif "/" not in pattern:
                key = fold(pattern)
                unless = tuple(re.compile(_glob_rx(fold(u)) + r"\Z") for u in loc.unless)
                hit = Hit(loc.category, loc.kind, pattern)
                if not _has_glob(key):
                    exact.setdefault(key, []).append((unless, hit))
                elif key.startswith("*.") and not _has_glob(key[2:]) and "." not in key[2:]:
                    exts.setdefault(key[2:], []).append((unless, hit))
                elif _INFIX.fullmatch(key):  # ``*.tfstate.*``: a substring test, no regex
                    infixes.append((key[1:-1], unless, hit))
                elif m := _EXT_INFIX.fullmatch(key):  # ``*secret*.json``: by extension, then
                    ext_infixes.setdefault(m[2], []).append((m[1], unless, hit))
                else:
                    guard = _GLOB_CHARS.split(key, 1)[0]  # the literal head, e.g. "id_rsa"
                    names.append((re.compile(_glob_rx(key) + r"\Z"), unless, hit, guard))
            else:
                real = expand(pattern, home)
                hit = Hit(loc.category, loc.kind, real)
                self.locations.append((real, hit))
                key = fold(real).rstrip("/") or "/"
                key_rx = re.compile(_glob_rx(key) + "(?:/|$)") if _has_glob(key) else None
                literal = len(_GLOB_CHARS.split(key, 1)[0])
                entry = (literal, key, key_rx, hit)
                bucket = self._bucket(key)
                if bucket is None or _has_glob(bucket) or self._fhome.startswith(key):
                    wild.append(entry)
                else:
                    buckets.setdefault(bucket, []).append(entry)
        # Most specific first, so ~/.ssh/config (persistence) wins over ~/.ssh in its matcher.
        self._buckets = {b: tuple(sorted(es, key=lambda e: -e[0])) for b, es in buckets.items()}
        self._wild = tuple(sorted(wild, key=lambda e: -e[0]))
        self._exact = exact
        self._exts = exts
        self._infixes = tuple(infixes)
        self._ext_infixes = ext_infixes
        self._tails = tails
        self._tail_globs = tuple(tail_globs)
        self._names = tuple(names)
        self._name_guards = tuple(g for *_, g in names) if names else ("\0",)
        self._anywhere = tuple(anywhere)
        self._anywhere_lits = tuple({lit for _, lits, _ in anywhere for lit in lits})

    def _bucket(self, key: str) -> str | None:
        if key.startswith(self._fhome_below):
            rest = key[len(self._fhome_below) :]
            return "~" + rest.split("/", 1)[0]
        if key.startswith("/"):
            return "/" + key[1:].split("/", 1)[0]
        return None

    @staticmethod
    def _match(
        entries: tuple[tuple[int, str, re.Pattern[str] | None, Hit], ...], key: str
    ) -> Hit | None:
        for _, loc, rx, hit in entries:
            if rx is None:
                if key == loc or (key.startswith(loc) and key[len(loc) : len(loc) + 1] == "/"):
                    return hit
            elif rx.match(key):
                return hit
        return None

    def location(self, key: str) -> Hit | None:
        """The table location ``key`` is (or is below), most specific first."""
        bucket = self._bucket(key)
        if bucket is not None:
            entries = self._buckets.get(bucket)
            if entries is not None:
                hit = self._match(entries, key)
                if hit is not None:
                    return hit
        if self._wild:
            return self._match(self._wild, key)
        return None

    @property
    def has_anywhere(self) -> bool:
        """Some ``**/`` pattern is compiled in (only a user's addition puts one here)."""
        return bool(self._anywhere)

    def children(self, below: str) -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
        """For the folder whose folded key plus ``/`` is ``below`` (itself no location): the
        child names that are a plain location, and patterns for child names a glob location
        may be. A superset for walks (:mod:`server.policy.entries`); :meth:`location` decides.

        A location matches a child when it is the child or one of its ancestors; an ancestor
        would match the folder too, so only locations exactly one component below count."""
        child_bucket = self._bucket(below + "x")  # every child's, unless below is ~ or /
        if below in (self._fhome_below, "/") or child_bucket is None:
            groups: list[tuple[_Entry, ...]] = [*self._buckets.values(), self._wild]
        else:
            groups = [self._buckets.get(child_bucket, ()), self._wild]
        names: set[str] = set()
        patterns: list[re.Pattern[str]] = []
        parent_key = below[:-1]
        for group in groups:
            for _, key, rx, _hit in group:
                if rx is None:
                    rest = key[len(below) :]
                    if key.startswith(below) and rest and "/" not in rest:
                        names.add(rest)
                    continue
                parent, _, last = key.rpartition("/")
                if parent == parent_key or (
                    _has_glob(parent) and re.fullmatch(_glob_rx(parent), parent_key)
                ):
                    patterns.append(re.compile(_glob_rx(last) + r"\Z"))
        return frozenset(names), tuple(patterns)

    def anywhere(self, key: str) -> Hit | None:
        """Components matched anywhere in the path (``**/.git/hooks``)."""
        for lit in self._anywhere_lits:
            if lit in key:
                for rx, _, hit in self._anywhere:
                    if rx.search(key):
                        return hit
                return None
        return None

    def name(self, name_key: str) -> Hit | None:
        """A secret-looking file name (already folded)."""
        for unless, hit in self._exact.get(name_key, ()):
            if not any(u.match(name_key) for u in unless):
                return hit
        dot = name_key.rfind(".")
        if dot >= 0:
            ext = name_key[dot + 1 :]
            for unless, hit in self._exts.get(ext, ()):
                if not any(u.match(name_key) for u in unless):
                    return hit
            for infix, unless, hit in self._ext_infixes.get(ext, ()):
                if infix in name_key[:dot] and not any(u.match(name_key) for u in unless):
                    return hit
        for infix, unless, hit in self._infixes:
            if infix in name_key and not any(u.match(name_key) for u in unless):
                return hit
        if not name_key.startswith(self._name_guards):
            return None
        for rx, unless, hit, guard in self._names:
            if (
                name_key.startswith(guard)
                and rx.match(name_key)
                and not any(u.match(name_key) for u in unless)
            ):
                return hit
        return None

    def tail(self, key: str) -> Hit | None:
        """A file named by its last components (``.kube/config``, ``.envs/*/.*``); ``key`` is
        a folded path (the more of it, the more components can match)."""
        return self._tail(key, key[key.rfind("/") + 1 :])

    def _tail(self, key: str, last: str) -> Hit | None:
        entries = self._tails.get(last)
        if entries is not None:
            for full, _, hit in entries:
                if full.search(key):
                    return hit
        for guard, full, _, _, hit in self._tail_globs:
            if guard in key and full.search(key):
                return hit
        return None

    def file(self, key: str) -> Hit | None:
        """A file's path (folded) by its name (:meth:`name`) or its last components
        (:meth:`tail`): what "secret-looking" means for a file, wherever it is."""
        last = key[key.rfind("/") + 1 :]
        return self.name(last) or self._tail(key, last)

    def secret_file(self, key: str) -> bool:
        """The file at the folded path ``key`` looks secret: a hit that is not persistence
        (an ``.envrc`` is both; an ``x.pth`` only persistence). The one test every scan of the
        box and the hard-link index make."""
        hit = self.file(key)
        return hit is not None and hit.kind is not EscalationKind.PERSISTENCE

    def secret_path(self, path: str) -> bool:
        """:meth:`secret_file` of a path as the disk spells it (folded here)."""
        return self.secret_file(fold(path))

    def tail_children(self, dir_key: str) -> tuple[frozenset[str], tuple[re.Pattern[str], ...]]:
        """For the folder ``dir_key`` (folded, no trailing ``/``): the child names and name
        patterns a tail pattern may match (``config`` in any ``.kube``): walks suspect them."""
        names = frozenset(
            last
            for last, entries in self._tails.items()
            if any(above.search(dir_key) for _, above, _ in entries)
        )
        patterns = tuple(
            last_rx for _, _, above, last_rx, _ in self._tail_globs if above.search(dir_key)
        )
        return names, patterns


def own_default_locations() -> list[str]:
    """The platform's own dirs for this app (config, logs, runtime), as this OS names them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            platformdirs.user_config_dir(APP_NAME, appauthor=False),
            platformdirs.user_log_dir(APP_NAME, appauthor=False),
            platformdirs.user_state_dir(APP_NAME, appauthor=False),
            platformdirs.user_runtime_dir(APP_NAME, appauthor=False),
        ]


def removable(entry: str, loc: Location) -> bool:
    """A ``protected.remove`` entry names this location (its pattern or its category).

    The bridge's own files cannot be removed: they hold the token and the approval settings.
    """
    return loc.kind is not O and entry in (loc.pattern, loc.category)


def known_removals() -> frozenset[str]:
    """Every name ``protected.remove`` accepts: table patterns and category names."""
    return frozenset(e for loc in TABLE if loc.kind is not O for e in (loc.pattern, loc.category))

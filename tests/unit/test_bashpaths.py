"""server/policy/bash/paths.py: which protected locations a shell command names, on a tmp home."""

from __future__ import annotations

import os

import pytest

from omp_a2a_bridge.server.policy.bash.paths import (
    MAX_ARGUMENT_CHARS,
    MAX_COMMAND_CHARS,
    MAX_STRINGS,
    MAX_VALUES,
    arguments_escalation,
    command_escalation,
    tokens,
)
from omp_a2a_bridge.server.policy.paths import EscalationKind, PathPolicy


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    (h / ".ssh" / "id_rsa").write_text("KEY")
    (h / ".aws").mkdir()
    (h / ".aws" / "credentials").write_text("AWS")
    (h / "proj" / "sub").mkdir(parents=True)
    (h / "proj" / "notes.txt").write_text("ok")
    monkeypatch.setenv("HOME", str(h))  # "~" in a command is this home
    monkeypatch.setenv("SECRET_DIR", str(h / ".ssh"))
    return h


@pytest.fixture
def policy(home) -> PathPolicy:
    return PathPolicy([str(home / "proj")], home=str(home), scan_identities=False)


def test_tokens_split_unquote_expand_braces_and_sub_words(monkeypatch):
    monkeypatch.setenv("D", "/etc")
    found = tokens("cat 'a b'|grep x; cp {one,two}.txt --out=dir/f $D/passwd file:///x/y")
    for t in ("cat", "a", "b", "grep", "one.txt", "two.txt", "--out", "dir/f", "/x/y"):
        assert t in found, t
    assert "/etc/passwd" in found and "$D/passwd" in found  # as written and expanded
    assert len(found) == len(set(found))  # no duplicates, first-seen order
    assert tokens("") == []


@pytest.mark.parametrize(
    "command",
    [
        "cat ~/.ssh/id_rsa",
        "cat ../.ssh/id_rsa",
        "cat $SECRET_DIR/id_rsa",
        'cat "$HOME"/.aws/credentials',
        "cat ~/.s{s,x}h/id_rsa",
        "cat ~/.ssh/id_*",
        "cd .. && cat .aws/credentials",
        "cd ~/.ssh; cat id_rsa",
        "git -C ~/.ssh status",
        "cp x file://localhost" + "{home}/.ssh/id_rsa",
        "echo k >> ~/.ssh/authorized_keys",
        "cat ~/.bashrc",  # persistence counts for bash: a command may write
    ],
)
def test_commands_that_name_a_protected_location_escalate(home, policy, command):
    esc = command_escalation(command.replace("{home}", str(home)), str(home / "proj"), policy)
    assert esc is not None and esc.always_asks, command


@pytest.mark.parametrize(
    "command",
    ["ls", "cat notes.txt", "cd sub && ls", "grep -r TODO .", "echo .ssh is a folder name"],
)
def test_ordinary_commands_do_not(home, policy, command):
    assert command_escalation(command, str(home / "proj"), policy) is None


def test_a_command_too_long_to_check_always_asks(home, policy):
    esc = command_escalation("x" * (MAX_COMMAND_CHARS + 1), str(home / "proj"), policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED and esc.always_asks
    assert "too long to check" in esc.category
    assert esc.text.startswith("the call was not checked for protected paths (command of")


def test_arguments_of_unknown_tools_are_judged_from_the_first_root(home, policy):
    assert arguments_escalation({"q": "hello", "n": [1, "notes.txt"]}, policy) is None
    esc = arguments_escalation({"opts": {"files": ["ok", "../.aws/credentials"]}}, policy)
    assert esc is not None and esc.always_asks
    assert arguments_escalation({"deep": [[[["~/.ssh/id_rsa"]]]]}, policy) is not None


@pytest.mark.parametrize(
    "args",
    [
        {"env": {f"k{i}": "v" for i in range(MAX_STRINGS)}, "command": "cat ~/.ssh/id_rsa"},
        {"fill": ["x"] * MAX_STRINGS + ["~/.ssh/id_rsa"]},
        {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"p": "~/.ssh/id_rsa"}}}}}}}}}},
        {"env": {"~/.ssh/id_rsa": "x"}},  # a key names it
        {"deep": [[[[[[[[[[[[[[[[[[[[["../.aws/credentials"]]]]]]]]]]]]]]]]]]]]]},
    ],
)
def test_no_argument_escapes_the_check_by_count_depth_or_being_a_key(home, policy, args):
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.always_asks


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({f"k{i}": "v" for i in range(MAX_STRINGS)}, "names and strings, too many to check"),
        ({"a": ["x" * 16000, "y" * 16000, "z" * 1000]}, f"over {MAX_ARGUMENT_CHARS} characters"),
        ({"n": list(range(MAX_VALUES + 1))}, f"over {MAX_VALUES} values, too many to check"),
    ],
)
def test_arguments_too_many_to_check_always_ask_and_say_why(home, policy, args, why):
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED and esc.always_asks
    assert why in esc.category


def test_ordinary_arguments_below_the_limits_do_not_ask(home, policy):
    args = {"rows": [{"name": f"n{i}", "note": "hello world"} for i in range(100)], "n": 3}
    assert arguments_escalation(args, policy) is None


def test_relative_names_of_an_unsure_upstream_are_judged_from_every_plausible_base(
    home, policy, monkeypatch
):
    # From the first root (~/proj) ".aws/config" is nothing; from home it is the key.
    assert arguments_escalation({"path": ".aws/config"}, policy) is None
    assert arguments_escalation({"path": ".aws/config"}, policy, str(home)) is not None
    esc = arguments_escalation({"path": ".aws/config"}, policy, unsure=True)
    assert esc is not None and esc.always_asks
    assert arguments_escalation({"path": "./config"}, policy, unsure=True) is None
    monkeypatch.chdir(home / ".aws")  # the bridge's own working directory counts too
    assert arguments_escalation({"path": "./config"}, policy, unsure=True) is not None
    monkeypatch.chdir(home / "proj")
    assert arguments_escalation({"path": "notes.txt"}, policy, unsure=True) is None


# -- caps that used to mean "not checked" (siblings of the outside review) -------------------


def test_a_command_with_more_words_than_the_cap_asks_instead_of_judging_a_prefix(home, policy):
    b = "{a,b,c,d,e,f,g,h}"  # 64 distinct words per word below: 12,800 in all
    command = "echo " + " ".join(f"p{j}{b}{b}" for j in range(200)) + " ; cat ~/.ssh/id_rsa"
    esc = command_escalation(command, str(home / "proj"), policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED, esc
    assert "over 10000 words" in esc.category


def test_a_long_name_is_judged_as_a_program_would_normalise_it(home, policy):
    long = "/." * 2100 + f"{home}/.ssh/id_rsa"  # over PATH_MAX, but path.resolve() shortens it
    assert arguments_escalation({"path": long}, policy) is not None
    assert command_escalation(f"cat {long}", str(home / "proj"), policy) is not None


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("cd / ; " * 17 + "cd .aws; cat credentials", "changes directory over 16 times"),
        (
            "cd a; cd b; cd c; cd d; cd e; cd f; cd g; cd ~; cd .aws; cat credentials",
            "working directories, too many to check",
        ),
    ],
)
def test_a_command_that_moves_too_often_asks(home, policy, command, why):
    esc = command_escalation(command, str(home / "proj"), policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED, esc
    assert why in esc.category


def test_a_few_moves_are_still_judged_and_ordinary_ones_pass(home, policy):
    assert command_escalation("cd sub && ls && cd .. && ls", str(home / "proj"), policy) is None
    esc = command_escalation("cd a; cd ~; cd .aws; cat credentials", str(home / "proj"), policy)
    assert esc is not None and esc.kind is EscalationKind.PROTECTED


@pytest.mark.parametrize(
    "text",
    [
        '["{home}/.aws/credentials"]',
        '{{"path": "..\\/.aws\\/credentials"}}',
        '["\\u002e\\u002e/.aws/credentials"]',
        "['{home}/.aws/credentials']",
    ],
)
def test_json_or_a_list_inside_a_string_argument_is_judged_too(home, policy, text):
    esc = arguments_escalation({"files": text.format(home=home)}, policy)
    assert esc is not None and esc.always_asks, text


# -- one-word names (attack review F1) and recursive globs (F3) ---------------------------------


@pytest.mark.parametrize(
    "command", ["cat creds", "cat < creds", "grep -r key creds", "git commit -m fix the creds"]
)
def test_a_one_word_symlink_to_a_secret_is_judged_where_it_lands(home, policy, command):
    (home / "proj" / "creds").symlink_to("../.aws/credentials")
    esc = command_escalation(command, str(home / "proj"), policy)
    assert esc is not None and esc.always_asks, command
    assert esc.path == str(home / ".aws" / "credentials")


def test_a_one_word_symlink_is_judged_in_every_base_of_an_unsure_upstream(home, policy):
    (home / "keys").symlink_to(".ssh")  # in the home, not in the root
    esc = arguments_escalation({"path": "keys"}, policy, unsure=True)
    assert esc is not None and esc.always_asks
    assert arguments_escalation({"path": "keys"}, policy) is None  # stdio: only its cwd


def test_a_one_word_hard_link_to_a_secret_is_that_secret(home):
    policy = PathPolicy([str(home / "proj")], home=str(home))
    assert policy.wait_scanned()
    (home / "proj" / "notes2").hardlink_to(home / ".ssh" / "id_rsa")
    esc = command_escalation("cat notes2", str(home / "proj"), policy)
    assert esc is not None and esc.always_asks and "hard link" in esc.category
    esc = arguments_escalation({"path": "notes2"}, policy)
    assert esc is not None and esc.always_asks


def test_plain_words_that_name_nothing_or_harmless_files_pass(home, policy):
    (home / "proj" / "fix").write_text("ordinary")
    (home / "proj" / "link").symlink_to("notes.txt")
    for command in ("git commit -m fix the thing", "cat link fix", "echo id_rsa credentials"):
        assert command_escalation(command, str(home / "proj"), policy) is None, command


@pytest.fixture
def gh(home):
    (home / ".config" / "gh").mkdir(parents=True)
    (home / ".config" / "gh" / "hosts.yml").write_text("oauth_token: x")
    return home


@pytest.mark.parametrize(
    "args",
    [
        {"pattern": "~/**/hosts.yml"},
        {"pattern": "$HOME/**/hosts.yml"},
        {"pattern": "{home}/**/*.yml"},
        {"pattern": "~/.config/**"},
        {"pattern": "~/**/.ssh/id_rsa"},
    ],
)
def test_a_recursive_glob_in_upstream_arguments_reaches_any_depth(gh, policy, args):
    args = {k: v.replace("{home}", str(gh)) for k, v in args.items()}
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.always_asks, args


def test_a_relative_recursive_glob_of_an_unsure_upstream_asks(gh, policy):
    esc = arguments_escalation({"root": "~", "glob": "**/hosts.yml"}, policy, unsure=True)
    assert esc is not None and esc.always_asks


def test_a_recursive_glob_over_a_clean_folder_passes(gh, policy):
    (gh / "proj" / "sub" / "a.py").write_text("x")
    assert arguments_escalation({"pattern": "**/*.py"}, policy) is None
    assert arguments_escalation({"pattern": "~/proj/**/*.py"}, policy) is None


def test_bash_reads_double_star_as_one_level(gh, policy):
    # globstar is off in ``bash -c``: ``**`` is ``*``, one level; the home's top has no secret.
    assert command_escalation("ls ~/**/hosts.yml", str(gh / "proj"), policy) is None
    assert command_escalation("cat ~/.config/**/hosts.yml", str(gh / "proj"), policy) is not None


@pytest.mark.parametrize(
    "args",
    [
        {"path": "{home}/%2essh/%69d_rsa"},
        {"uri": "file://{home}/%2Eaws/credentials"},
        {"url": "http://127.0.0.1:9/read?p=%2F{home_q}%2F.aws%2Fcredentials"},
        {"path": "{home}/%252essh/id_rsa"},
    ],
)
def test_percent_encoded_paths_in_upstream_arguments_are_judged_decoded(home, policy, args):
    args = {
        k: v.replace("{home_q}", str(home).lstrip("/").replace("/", "%2F")).replace(
            "{home}", str(home)
        )
        for k, v in args.items()
    }
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.always_asks, args


@pytest.mark.parametrize(
    "args",
    [
        {"cwd": "{home}", "files": ".aws/credentials"},
        {"cwd": "~", "files": ["x", "proj/../.aws/credentials"]},
        {"root": "~", "glob": "**/credentials"},
    ],
)
def test_a_folder_in_one_argument_is_a_base_for_the_others(home, policy, args):
    args = {k: v.replace("{home}", str(home)) if isinstance(v, str) else v for k, v in args.items()}
    esc = arguments_escalation(args, policy)
    assert esc is not None and esc.always_asks, args


def test_ordinary_folder_and_encoded_arguments_pass(home, policy):
    args = {"cwd": str(home / "proj"), "files": "notes.txt", "q": "a%20b", "dir": "sub"}
    assert arguments_escalation(args, policy) is None
    many = {f"d{i}": str(home / "proj" / f"f{i}") for i in range(17)}
    for d in many.values():
        os.mkdir(d)
    esc = arguments_escalation(many, policy)
    assert esc is not None and esc.kind is EscalationKind.UNCHECKED and "folders" in esc.category


# Attack review round: paths with spaces, -C bases, cd options ----------------------------------


@pytest.fixture
def spaced(home):
    """Protected locations whose names hold spaces (Chrome's cookies, the Startup folder)."""
    chrome = home / "Library" / "Application Support" / "Google" / "Chrome" / "Default"
    chrome.mkdir(parents=True)
    (chrome / "Cookies").write_text("COOKIES")
    (home / ".docker").mkdir()
    (home / ".docker" / "config.json").write_text("{}")
    (home / "proj" / "my key").symlink_to(home / ".ssh" / "id_rsa")
    return home


def test_a_quoted_word_with_spaces_is_judged_whole(spaced, policy):
    cwd = str(spaced / "proj")
    assert command_escalation("cat 'my key'", cwd, policy) is not None
    assert command_escalation('cat "my key"', cwd, policy) is not None
    assert command_escalation("cat my\\ key", cwd, policy) is not None
    assert command_escalation("cat < 'my key'", cwd, policy) is not None
    assert command_escalation("cat<'my key'", cwd, policy) is not None
    assert command_escalation('tool --file="my key"', cwd, policy) is not None
    assert command_escalation("cat my' 'key", cwd, policy) is not None
    cookies = '"../Library/Application Support/Google/Chrome/Default/Cookies"'
    assert command_escalation(f"cat {cookies}", cwd, policy) is not None
    startup = "AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup/a.bat"
    assert command_escalation(f'cp x "$HOME/{startup}"', cwd, policy) is not None
    assert command_escalation("cat 'notes.txt'", cwd, policy) is None


def test_an_upstream_string_with_spaces_is_judged_whole(spaced, policy):
    cookies = str(spaced / "Library/Application Support/Google/Chrome/Default/Cookies")
    assert arguments_escalation({"path": cookies}, policy, None) is not None
    assert arguments_escalation({"path": "file://" + cookies}, policy, None) is not None
    assert arguments_escalation({"path": "my key"}, policy, None) is not None
    assert arguments_escalation({"text": "hello world"}, policy, None) is None


@pytest.mark.parametrize(
    "command",
    [
        "tar -C ../.docker -cf - config.json | tar -xOf -",
        "tar -cf - -C ../.docker config.json",
        "tar --directory=../.docker -cf - config.json",
        "tar --directory ../.docker -cf - config.json",
        "git -C ../.docker diff --no-index /dev/null config.json",
        "git --work-tree=../.docker show HEAD:config.json",
        "make -C ../.docker config.json",
        "tar -xOC ../.docker -f - config.json",
        "make -C../.docker config.json",
        "npm --prefix x --cwd ../.docker cat config.json",
        "cd -P ../.docker && cat config.json",
        "cd -L ../.docker && cat config.json",
        "cd -- ../.docker && cat config.json",
        "pushd -n ../.docker && cat config.json",
        "cd '../Library/Application Support/Google' && cat Chrome/Default/Cookies",
    ],
)
def test_directory_options_and_cd_options_make_bases(spaced, policy, command):
    assert command_escalation(command, str(spaced / "proj"), policy) is not None


def test_directory_options_into_harmless_folders_stay_quiet(spaced, policy):
    cwd = str(spaced / "proj")
    assert command_escalation("make -C sub all", cwd, policy) is None
    assert command_escalation("cd -P sub && cat notes.txt", cwd, policy) is None


def test_a_folder_argument_is_found_percent_decoded_and_from_every_base(spaced, policy):
    uri = "file://" + str(spaced) + "/.dock%65r"
    assert arguments_escalation({"uri": uri, "name": "config.json"}, policy, None) is not None
    args = {"dir": ".docker", "file": "config.json"}
    assert arguments_escalation(args, policy, None, unsure=True) is not None
    assert arguments_escalation({"dir": "sub", "file": "config.json"}, policy, None) is None
    assert arguments_escalation({"dir": "..", "file": ".ssh/id_rsa"}, policy, None) is not None


def test_folded_listings_of_settled_folders_are_kept_until_the_folder_changes(
    tmp_path, monkeypatch
):
    """A base's folded names are listed once while its (device, inode, mtime, ctime) stay the
    same, but only once it has been still for a while (the kernel's time stamps are coarse);
    a new entry shows at once, even when its mtime is set back (``touch -d``: ctime moves)."""
    import time

    from omp_a2a_bridge.server.policy.bash import paths

    listed: list[str] = []
    real_scandir = os.scandir

    def scandir(path):  # the OS edge: count the listings
        listed.append(path)
        return real_scandir(path)

    monkeypatch.setattr(paths.os, "scandir", scandir)
    d = tmp_path / "base"
    d.mkdir()
    (d / "Alpha").touch()
    base = str(d)
    assert paths.folded_listing(base) == (1, frozenset({"alpha"}))
    assert paths.folded_listing(base) == (1, frozenset({"alpha"}))
    assert len(listed) == 2  # just changed: not kept
    later = time.time_ns() + 10 * paths.SETTLED_NS  # as if listed once it had settled

    def settled() -> int:
        return later

    assert paths.folded_listing(base, settled) == (1, frozenset({"alpha"}))
    assert paths.folded_listing(base, settled) == (1, frozenset({"alpha"}))
    assert len(listed) == 3  # kept
    time.sleep(0.05)  # past the coarse clock's tick, so the change below moves ctime
    st = os.stat(base)
    (d / "beta").touch()
    os.utime(base, ns=(st.st_atime_ns, st.st_mtime_ns))  # mtime set back; ctime cannot be
    assert paths.folded_listing(base, settled) == (2, frozenset({"alpha", "beta"}))
    assert len(listed) == 4

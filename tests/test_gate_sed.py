"""sed read once (approval/sed.py): its command line, its scripts, and the verdicts that rest on them."""

from __future__ import annotations

import pytest
from executor.approval import Decision, analyze, interactive_risk
from executor.approval.sed import commands_anywhere, read_script, sed_args


@pytest.mark.parametrize(
    ("args", "scripts", "from_file"),
    [
        (["s/a/b/", "f"], ("s/a/b/",), False),
        (["-n", "p", "f"], ("p",), False),
        (["-e", "p", "-e", "s/a/b/e", "f"], ("p", "s/a/b/e"), False),
        (["--expression=s/a/b/e", "f"], ("s/a/b/e",), False),
        (["--expression", "p", "f"], ("p",), False),
        (["--expr=p", "--exp", "s/a/b/e", "f"], ("p", "s/a/b/e"), False),  # getopt prefixes
        (["-ne", "s/a/b/e", "f"], ("s/a/b/e",), False),
        (["-nes/a/b/e", "f"], ("s/a/b/e",), False),
        (["-E", "-e", "s/(a)/\\1/", "f"], ("s/(a)/\\1/",), False),
        (["-i.bak", "s/a/b/", "f"], ("s/a/b/",), False),
        (["-i.fix", "s/a/b/e", "f"], ("s/a/b/e",), False),  # the suffix holds an f: no -f
        (["-ie", "s/a/b/", "f"], ("s/a/b/",), False),  # -i with the suffix "e"
        (["--in-place=.bak", "s/a/b/", "f"], ("s/a/b/",), False),
        (["-s", "s/a/b/e", "f"], ("s/a/b/e",), False),  # -s takes no argument
        (["-l", "5", "s/a/b/", "f"], ("s/a/b/",), False),
        (["--line-length=5", "s/a/b/", "f"], ("s/a/b/",), False),
        (["-f", "x.sed", "f"], (), True),
        (["-nf", "x.sed", "f"], (), True),
        (["--file=x.sed", "-e", "p", "f"], ("p",), True),
        (["--fi", "x.sed", "f"], (), True),
        (["--follow-symlinks", "p", "f"], ("p",), False),
    ],
)
def test_sed_args(args: list[str], scripts: tuple[str, ...], from_file: bool) -> None:
    parsed = sed_args(args)
    assert (parsed.scripts, parsed.from_file) == (scripts, from_file)


def test_sed_args_sandbox() -> None:
    assert sed_args(["--sandbox", "s/a/b/e"]).sandbox
    assert not sed_args(["s/a/b/e"]).sandbox


@pytest.mark.parametrize(
    "script",
    [
        "e",
        "e date",
        "1e date",
        "$e",
        "/x/e",
        "/x/I,+3e",
        "\\%x%e",
        "0~2e",
        "1!e",
        "p;e",
        "p\ne",
        "1{e\n}",
        "s/a/b/e",
        "s/a/b/gpe",
        "s|a|b|e",
        "s/a\\/b/c/e",
        "s/x/y/;s/a/b/e",
        "bx;e",  # a label ends at ;
        "y/abc/xyz/;e",
        "s/a/b",  # unterminated: fail closed
        "/x",
    ],
)
def test_read_script_executes(script: str) -> None:
    assert read_script(script).executes


@pytest.mark.parametrize(
    "script",
    [
        "p",
        "s/a/b/g",
        "s/e/E/",
        "y/e/f/",
        "/e/d",
        "s/a/b/w out.e",  # a w flag's file name
        "a e",  # a's text
        "r /etc/e",
        "# e",
        "$!N;s/\\n/ /",
        ":a;N;$!ba;s/\\n/ /g",
    ],
)
def test_read_script_does_not_execute(script: str) -> None:
    sc = read_script(script)
    assert sc.complete and not sc.executes


def test_read_script_commands() -> None:
    sc = read_script("1e date\ns|x|y\\|z|ge;y/a/b/")
    assert [(c.letter, c.text, c.regex, c.replacement, c.flags) for c in sc.commands] == [
        ("e", " date", "", "", ""),
        ("s", "", "x", "y|z", "ge"),
    ]


def test_commands_anywhere_is_a_superset() -> None:
    # sed reads "x;e reboot" as a's text; the judge also sees the e that looks like a command
    assert [c.letter for c in read_script("a x;e reboot").commands] == []
    assert [(c.letter, c.text) for c in commands_anywhere("a x;e reboot")] == [("e", " reboot")]
    for script in ("1e date", "s/a/b/e;p", "p;1!s/.*/id/e", "r f;s/.*/id/e"):
        anywhere = {c.at for c in commands_anywhere(script)}
        assert {c.at for c in read_script(script).commands} <= anywhere


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("sed -e 's/.*/reboot/e' f", "power"),
        ("sed --expression='s/.*/reboot/e' f", "power"),
        ("sed --expr=p --expr='s/.*/reboot/e' f", "power"),  # was allowed: --expr not read
        ("sed -i.fix 's/.*/reboot/e' f", "power"),  # was allowed: the suffix's f read as -f
        ("sed -nes/.*/reboot/e f", "power"),
        ("sed -E -n '/x/,$ s/.*/reboot/e' f", "power"),
        ("sed '1e reboot' f", "power"),
        ("sed -n 'p;e reboot' f", "power"),
        ("sed 's/a/b/;s/x/y/e' f", "code_handoff"),
        ("sed -i.bak 'e' f", "code_handoff"),
        ("sed -f x.sed -e 's/x/y/e' f", "code_handoff"),
    ],
)
def test_handoff_verdicts(command: str, rule: str) -> None:
    v = analyze(command)
    assert v.decision is not Decision.ALLOW and v.rule == rule, v


@pytest.mark.parametrize(
    "command",
    [
        "sed -n p f",
        "sed -i.bak 's/a/b/' f",
        "sed -E 's/(a)/\\1/g' f",
        "sed -f x.sed f",
        "sed --sandbox 's/x/y/e' f",
        "sed 's/a/b/w out.txt' f",
        "sed -s -e p -e 's/a/b/' f",
    ],
)
def test_handoff_allows(command: str) -> None:
    assert analyze(command).decision is Decision.ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "sed e",
        "sed -s 's/x/y/e' f",  # was missed: -s was read as taking an argument
        "sed -nes/^/echo/e",
        "sed --expr=1e",
        "sed -E -i.bak -e 's/(.*)/\\1/e' f",
        "sed 'bx;e'",
    ],
)
def test_interactive_sees_sed_running_input(command: str) -> None:
    assert interactive_risk(command, terminal=False) is not None


@pytest.mark.parametrize(
    "command",
    ["sed -n p", "sed 's/e/E/g'", "sed -s -e p -e 's/a/b/' f", "sed -f x.sed", "sed --sandbox e", "sed 'a e'"],
)
def test_interactive_sed_quiet(command: str) -> None:
    assert interactive_risk(command, terminal=False) is None


def test_interactive_sed_script_file_with_terminal() -> None:
    assert interactive_risk("sed -f x.sed", terminal=True) is not None

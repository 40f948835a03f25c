"""xargs' command line is read once (approval/xargs.py), as GNU findutils reads it, by every part of
the gate that follows what xargs runs. Spellings of options the three earlier readers each got wrong
in their own way: ``-e``/``-i``/``-l`` take a value only when attached, ``--replace``/``--eof``/
``--max-lines`` only with ``=``, short options cluster, long ones abbreviate, ``-a -`` is the input."""

from __future__ import annotations

import pytest

from executor.approval import Decision, analyze, interactive_risk
from executor.approval.xargs import parse_xargs


@pytest.mark.parametrize("args, command, replace", [
    (["rm", "-rf"], ["rm", "-rf"], None),
    (["-e", "rm", "-rf"], ["rm", "-rf"], None),  # -e[EOF]: nothing attached, so rm is the command
    (["-eEND", "rm"], ["rm"], None),
    (["-E", "END", "rm"], ["rm"], None),
    (["-i", "rm", "{}"], ["rm", "{}"], "{}"),
    (["-i@", "rm", "@"], ["rm", "@"], "@"),
    (["--replace", "rm", "{}"], ["rm", "{}"], "{}"),
    (["--replace=@", "rm", "@"], ["rm", "@"], "@"),
    (["--repl=@", "rm", "@"], ["rm", "@"], "@"),
    (["-I", "X", "rm", "X"], ["rm", "X"], "X"),
    (["-0rI{}", "rm", "{}"], ["rm", "{}"], "{}"),
    (["-l", "rm"], ["rm"], None),
    (["--max-lines", "rm"], ["rm"], None),
    (["-n", "1", "-P", "4", "--", "rm", "-f"], ["rm", "-f"], None),
    (["--max-args", "1", "rm"], ["rm"], None),
    (["-t", "-x"], [], None),
])
def test_the_command_line_reads_as_findutils_does(args, command, replace):
    call = parse_xargs(args)
    assert call.command == command and call.replace == replace


def test_what_the_options_say():
    call = parse_xargs(["-0rP0", "-a", "-", "-o", "vim"])
    assert call.null and call.no_run_if_empty and call.max_procs == "0" and call.open_tty and call.reads_input
    assert not parse_xargs(["--arg-file=list", "rm"]).reads_input
    assert parse_xargs(["--max-procs", "0", "x"]).max_procs == "0"
    assert parse_xargs(["-d", "\n", "wc"]).whole_lines and not parse_xargs(["wc"]).whole_lines


@pytest.mark.parametrize("command", [
    "echo / | xargs -e rm -rf",
    "echo / | xargs --replace rm -rf {}",
    "echo / | xargs -i rm -rf {}",
    "echo / | xargs -0r rm -rf",
    "echo / | xargs -l rm -rf",
    "echo / | xargs --max-lines rm -rf",
    "xargs -a /dev/stdin rm -rf <<< '/'",
    "yes | xargs -P 0 -n1 sleep 9",
    "yes | xargs --max-procs 0 -n1 sleep 9",
    "yes | xargs --max-p=0 -n1 sleep 9",
    "echo 'rm -rf /' | xargs -a - -0 sh -c",
    "echo 'rm -rf /' | xargs -0e sh -c",
])
def test_dangerous_spellings_are_caught(command):
    assert analyze(command).decision is not Decision.ALLOW, command


def test_items_from_a_file_are_not_the_piped_text():
    # -a: the items come from the file; the piped "." is the command's stdin, not its argument
    verdict = analyze("echo . | xargs -a paths.txt rm -rf")
    assert verdict.decision is Decision.ASK and verdict.rule == "rm_unresolved_path"


@pytest.mark.parametrize("command", [
    "find . -name '*.pyc' | xargs rm -f",
    "git ls-files | xargs -d '\\n' wc -l",
    "ls *.txt | xargs -n1 -I{} cp {} backup/",
    "echo a b c | xargs -n1 echo",
    "find . -type f -print0 | xargs -0 -P4 gzip",
    "xargs -a urls.txt -n1 curl -sO",
    "printf '%s\\n' 1 2 3 | xargs -e echo",
    "seq 3 | xargs -i echo item {}",
])
def test_everyday_uses_stay_allowed(command):
    assert analyze(command).decision is Decision.ALLOW, (command, analyze(command))


def test_an_opened_terminal_is_told_by_the_same_reading():
    assert interactive_risk("ls | xargs -o vim", terminal=True) is not None
    assert interactive_risk("ls | xargs -ro vim", terminal=True) is not None

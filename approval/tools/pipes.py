"""Program text reaching a shell by a road other than ``-c`` or a named script: through pass-through
filters in a pipe (``echo … | cat | sh``, ``| tee f | sh``), through a path that is the shell's own
input (``bash /dev/stdin``, ``sh /proc/self/fd/0``, ``source /dev/stdin``), through a process
substitution (``bash <(…)``, ``source <(…)``, ``sh < <(…)``), from a file redirected into it
(``sh < x.sh``), and from the words ``xargs`` or ``parallel`` read (``… | xargs -0 sh -c``,
``xargs -I{} sh -c '{}'``, ``parallel ::: 'cmd'``).

The rule is one: a shell's program is either text the gate can read exactly, and then it is judged
as a command, or it is not, and then the command asks (``code_handoff``: it runs code the gate
cannot see).  Only filters whose output equals their input are followed (``cat``, ``cat -``,
``tee``, ``dd`` without ``if=``/``of=``); anything else in between is unknown text.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from ..commands import SHELLS, base_name, classify, unwrap
from ..model import UNKNOWN, Cmd, Kinds
from ..parser import parse
from ..words import echo_output
from ..xargs import parse_xargs
from .base import Ctx, Examples, also
from ..shells import shell_program
from .remote import _judge_stdin_source, _stdin_kinds, _stdin_texts, judge_script

if TYPE_CHECKING:
    from ..detect import Detector

# paths through which a process reads its own standard input
_STDIN_PATH = re.compile(r"^(?:-|/dev/stdin|/dev/fd/0|/proc/(?:self|thread-self|\d+|\x00[^/]*)/fd/0)$")
# paths that are some other open descriptor (a process substitution's /dev/fd/63)
_FD_PATH = re.compile(r"^(?:/dev/fd/\d+|/proc/(?:self|thread-self|\d+|\x00[^/]*)/fd/\d+)$")

def _program(name: str, args: list[str]) -> tuple[str, str | None, int]:
    """Where a shell takes its program from: ("c", code), ("file", path) or ("stdin", None), and the
    index of the operand."""
    if name in ("source", "."):
        ops = [a for a in args if a != "--"]
        return ("file", ops[0], args.index(ops[0])) if ops else ("stdin", None, len(args))
    program = shell_program(name, args)
    return (program.mode, program.operand(args) if program.mode != "stdin" else None, program.index)


def _passes_through(argv: list[str]) -> bool:
    """A filter whose output is exactly its input."""
    if not argv:
        return False
    name = base_name(argv[0])
    rest = argv[1:]
    if name == "cat":
        return all(a == "-" or re.fullmatch(r"-[u]+", a) for a in rest)
    if name == "tee":
        return True
    if name == "dd":
        return not any(a.startswith(("if=", "of=", "conv=", "cbs=", "skip=", "count=")) for a in rest)
    return False


def _producer_text(d: Detector, src: Cmd, cmd: Cmd, ctx: Ctx) -> str | None:
    """The text a pipeline stage prints, when the gate can know it: echo/printf of literal words, a
    heredoc through cat; ``cat FILE`` has its file judged as the script it is (returns "")."""
    argv = unwrap(src.argv)[0] if src.argv else []
    if not argv:
        return None
    text = echo_output(argv)
    if text is not None:
        return text
    name = base_name(argv[0])
    if name == "cat" and src.stdin_text is not None and all(a.startswith("-") for a in argv[1:]):
        return src.stdin_text
    files = [a for a in argv[1:] if not a.startswith("-")]
    if name == "cat" and files and all(UNKNOWN not in f and not f.startswith(("/dev/", "/proc/")) for f in files):
        for f in files:
            judge_script(d, f, frozenset(), cmd, ctx, "sh")
        return ""
    return None


def _piped_text(d: Detector, cmd: Cmd, ctx: Ctx, depth: int = 0) -> str | None:
    """The program text a command reads from its pipe, through pass-through filters; None if unknown
    ("" for a tool's shell integration)."""
    groups = cmd.upstream
    for k in range(len(groups) - 1, -1, -1):
        group = groups[k]
        if len(group) != 1:
            return None
        stage = group[0]
        argv = unwrap(stage.argv)[0] if stage.argv else []
        if argv and _integration(argv):
            return ""
        if not _passes_through(argv):
            return _producer_text(d, stage, cmd, ctx)
        if stage.stdin_text is not None:
            return stage.stdin_text
        if k == 0:  # the filter's own input: a pipeline the parser nested (heredoc on its first stage)
            return _piped_text(d, stage, ctx, depth + 1) if stage.upstream and depth < 8 else None
    return None


_SHELL_WORDS = frozenset({"bash", "zsh", "fish", "sh", "ksh", "--bash", "--zsh", "--fish", "-s"})


def _integration(argv: list[str]) -> bool:
    """A tool printing its own shell integration (``kubectl completion bash``, ``fzf --zsh``,
    ``brew shellenv``, ``direnv hook zsh``): the everyday reason to source a program's output."""
    words = set(argv[1:])
    if words & {"completion", "completions", "shellenv", "--completion", "__complete"}:
        return True
    return (
        bool(words & {"init", "hook", "activate", "env"})
        and bool(words & _SHELL_WORDS)
        or bool(words & {"--bash", "--zsh", "--fish"})
    )


def _procsub_cmds(cmd: Cmd) -> list[Cmd]:
    try:
        sc = parse(cmd.text, env={}, classify=classify, cwd=None)
    except Exception:  # noqa: BLE001 - unparsable: unknown
        return []
    return [c for c in sc.cmds if c.procsub == "<"]


def _procsub_text(cmd: Cmd) -> str | None:
    """What the ``<( … )`` of ``cmd``'s text prints, when every command inside is a literal echo/printf;
    "" for a tool's shell integration (completions), None when unknown."""
    inner = _procsub_cmds(cmd)
    if not inner:
        return None
    if any(_integration(unwrap(c.argv)[0]) for c in inner if c.argv):
        return ""
    out = []
    for c in inner:
        argv = unwrap(c.argv)[0] if c.argv else []
        text = echo_output(argv) if argv else None
        if text is None and argv and base_name(argv[0]) == "cat" and c.stdin_text is not None and len(argv) == 1:
            text = c.stdin_text
        if text is None:
            return None
        out.append(text)
    return "".join(out)


def _judge_program(d: Detector, ctx: Ctx, cmd: Cmd, text: str | None, name: str, where: str) -> None:
    if text is None or UNKNOWN in text:
        d.add(ctx, "code_handoff", cmd.text, f"{name} runs code it reads from {where}, which the gate cannot see.")
        if text is None:
            return
    d.payload(ctx, text, frozenset(), cmd.segment)


def _in_xargs(cmd: Cmd) -> bool:
    return any(base_name(a) in ("xargs", "parallel") for a in cmd.argv[: max(len(cmd.argv) - 1, 0)][:8])


@also(*SHELLS, "source", ".")
def _h_shell_input(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """A shell whose program is its standard input, a descriptor path or a process substitution."""
    if _in_xargs(cmd):
        return  # xargs/parallel feed their words, not the shell's input (below)
    how, operand, i = _program(name, args)
    opkind = kinds[i] if i < len(kinds) else frozenset()
    if how == "c":
        if operand is not None and operand.strip() == UNKNOWN and not ({"download", "decode"} & opkind):
            d.add(ctx, "code_handoff", cmd.text, f"{name} -c runs code computed when it runs; the gate cannot see it.")
        return
    if how == "file" and operand is not None:
        if "procsub" in opkind or (_FD_PATH.match(operand) and not _STDIN_PATH.match(operand)):
            if {"download", "decode"} & opkind:
                return  # judged as downloaded/decoded code already
            _judge_program(d, ctx, cmd, _procsub_text(cmd), name, "a process substitution")
            return
        if not _STDIN_PATH.match(operand):
            return  # a named script: read by the shell handler
    # the program is the shell's standard input
    for op, target in cmd.redirects:
        if op == "<":
            if target.startswith(("/dev/tcp/", "/dev/udp/")):
                return
            if _FD_PATH.match(target) or UNKNOWN in target:
                _judge_program(d, ctx, cmd, _procsub_text(cmd), name, "a process substitution")
            elif target not in ("/dev/null",):
                judge_script(d, target, frozenset(), cmd, ctx, "sh")
            return
    if {"download", "decode"} & _stdin_kinds(cmd):
        if how == "file":  # bash /dev/stdin: the shell handler took the path for a script
            _judge_stdin_source(d, cmd, ctx)
        return  # pipe_to_shell / decode_to_shell
    if cmd.stdin_text is not None:
        if how == "file":  # bash /dev/stdin <<< …: the shell handler took the path for a script
            d.payload(ctx, cmd.stdin_text, frozenset(), cmd.segment)
        return
    if not cmd.upstream:
        return  # an interactive shell (judged as a terminal elsewhere)
    direct = _stdin_texts(cmd)
    if direct:
        if how == "file":
            for t in direct:
                d.payload(ctx, t, frozenset(), cmd.segment)
        return
    _judge_program(d, ctx, cmd, _piped_text(d, cmd, ctx), name, "a pipe")


# -- xargs / parallel: shell code assembled from the words they read


def _items(text: str) -> list[str]:
    """Candidate units of input: the whole text and each non-empty line (over-approximates how xargs
    cuts its input; the gate judges every candidate)."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    whole = text.strip("\n")
    return list(dict.fromkeys([whole, *lines]))[:8] if whole.strip() else []


@also("xargs")
def _h_xargs_code(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``xargs sh -c`` whose code is the input it reads (no code operand, or code that is the replace
    string): the input is judged as that code when the gate can read it, else the command asks."""
    call = parse_xargs(args)
    replace = call.replace
    sub = unwrap(call.command)[0] if call.command else []
    if not sub:
        return
    prog = base_name(sub[0])
    how = ""
    template: str | None = None
    if prog in SHELLS:
        how, code, _ = _program(prog, sub[1:])
        if how != "c":
            return
        template = code
    elif replace and sub[0].startswith(replace):  # the program itself comes from input
        template = " ".join(shlex.quote(a) if replace not in a else a for a in sub)
    else:
        return
    if template is not None and not (replace and replace in template and template.strip().startswith(replace)):
        if not (replace and template.strip() == replace):
            return  # the code is written on the command line (judged by the xargs handler)
    text: str | None = None
    if call.reads_input:
        texts = _stdin_texts(cmd)
        text = texts[-1] if texts else (_piped_text(d, cmd, ctx) if cmd.upstream else None)
    if text is None:
        d.add(ctx, "code_handoff", cmd.text, "xargs runs as shell code the input it reads, which the gate cannot see.")
        return
    for item in _items(text):
        code = template.replace(replace, item) if (template is not None and replace) else item
        d.payload(ctx, code, frozenset(), cmd.segment)


_PAR_SEPS = (":::", "::::", ":::+", "::::+")


@also("parallel")
def _h_parallel_code(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """GNU ``parallel`` with no command runs each argument as a command line; ``parallel sh -c ::: …``
    runs each argument as shell code; arguments read from files or input the gate cannot see ask."""
    j = next((k for k, a in enumerate(args) if a in _PAR_SEPS), len(args))
    k = 0
    head = args[:j]
    while k < len(head) and head[k].startswith("-"):
        k += (
            2
            if head[k] in ("-j", "-S", "--sshlogin", "-a", "--arg-file", "-d", "--delimiter", "-I", "-N", "-n", "-L")
            else 1
        )
    template = head[k:]
    values: list[str] = []
    unknown = False
    m = j
    while m < len(args):
        sep = args[m]
        m += 1
        while m < len(args) and args[m] not in _PAR_SEPS:
            if sep.startswith("::::"):
                unknown = True
            else:
                values.append(args[m])
            m += 1
    if j == len(args):  # arguments come from stdin
        texts = _stdin_texts(cmd)
        if texts:
            values = [ln for t in texts for ln in t.split("\n") if ln.strip()]
        elif cmd.upstream:
            unknown = True
    code_from_input = not template or (
        base_name(template[0]) in SHELLS and _program(base_name(template[0]), template[1:])[:2] == ("c", None)
    )
    if not code_from_input:
        return
    if unknown or any(UNKNOWN in v for v in values):
        d.add(ctx, "code_handoff", cmd.text, "parallel runs as shell code arguments the gate cannot see.")
    for v in values[:8]:
        d.payload(ctx, v, frozenset(), cmd.segment)


EXAMPLES = (
    Examples(
        "code_handoff",
        match=(
            "some_tool | sh",
            "bash <(some_tool)",
            'sh -c "$(cat)" <<< x',
            "find . | xargs -I{} sh -c '{}'",
            'parallel ::: "$(cat cmds)"',
            "awk '{system($0)}' cmds.txt",
            'awk \'{print "rm -rf " $1 | "sh"}\' list',
        ),
        no_match=(
            "echo 'ls -la' | cat | sh",
            "bash <(echo 'echo hi')",
            "echo hi | bash /dev/stdin",
            "find . -name '*.py' | xargs -I{} sh -c 'black {}'",
            "parallel gzip ::: a b",
            "bash -c 'echo hi'",
            "awk '{ print $1 | \"sort -u\" }' f",
            "awk 'BEGIN { \"date +%s\" | getline t; print t }'",
        ),
    ),
)

"""How a shell's command line says where its program comes from, read once for every rule that
needs it (``interactive``: what live input runs; ``tools.pipes``: what text reaches a shell)."""

from __future__ import annotations

from dataclasses import dataclass

#: Options whose value is the next word (``bash -o pipefail``, ``--rcfile f``, fish's ``-C cmd``).
_WITH_VALUE = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})
_FISH_WITH_VALUE = frozenset({"-C", "--init-command"})


@dataclass(frozen=True)
class ShellProgram:
    """``mode``: ``c`` (the code is the operand at ``index``), ``file`` (a script path there) or
    ``stdin`` (the program is read from standard input: no operand, ``-s``, or ``-``/``--`` first)."""

    mode: str
    index: int

    def operand(self, args: list[str]) -> str | None:
        return args[self.index] if self.index < len(args) else None


def shell_program(name: str, args: list[str]) -> ShellProgram:
    """Read ``name``'s options as bash, sh, dash, zsh, ksh and fish do: ``-c`` anywhere in a cluster
    takes the first operand as code, ``-s`` reads the program from stdin, ``-``/``--`` end the options,
    ``-o``/``-O`` (alone or in a cluster: ``-eo pipefail``) take the next word."""
    i = 0
    c_flag = read_stdin = False
    while i < len(args):
        a = args[i]
        if a in ("--", "-"):
            read_stdin = read_stdin or a == "-"
            i += 1
            break
        if a in _WITH_VALUE or (name == "fish" and a in _FISH_WITH_VALUE):
            i += 2
            continue
        if a.startswith("--"):
            c_flag = c_flag or a == "--command"
            i += 1
            continue
        if a.startswith(("-", "+")) and len(a) > 1:
            c_flag = c_flag or "c" in a[1:]
            read_stdin = read_stdin or "s" in a[1:]
            # each ``o``/``O`` of a cluster takes the next word as its value (``bash -euxo pipefail -c …``)
            i += 1 + (sum(ch in "oO" for ch in a[1:]) if name != "fish" else 0)
            continue
        break
    if c_flag:
        return ShellProgram("c", i)
    if i < len(args) and not read_stdin:
        return ShellProgram("file", i)
    return ShellProgram("stdin", i)


__all__ = ["ShellProgram", "shell_program"]

"""xargs, read once: the command it runs and how it cuts its input into arguments.

Three parts of the gate follow what xargs runs: the handler that judges the command it builds
(``tools/remote.py``: ``find … | xargs rm -r``), the one that judges input handed to a shell as
code (``tools/pipes.py``: ``… | xargs -0 sh -c``) and the interactive-program check
(``interactive.py``: ``xargs -o vim``). They read the command line here, the way GNU findutils
does: getopt with ``+0a:E:e::i::I:l::L:n:prs:txP:d:`` (options end at the first operand, short
options cluster, ``-e``/``-i``/``-l`` take a value only when attached) and the long options, any
unique prefix, ``--eof``/``--replace``/``--max-lines`` with ``=value`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .commands import getopt

_SHORT_WITH_ARG = "aEIdLnPs"
_SHORT_OPTIONAL = "eil"
_LONG_WITH_ARG = ("--arg-file", "--delimiter", "--max-args", "--max-chars", "--max-procs", "--process-slot-var")
_STDIN_NAMES = frozenset({"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"})
_LONG = ("--null", "--eof", "--replace", "--max-lines", "--interactive", "--no-run-if-empty", "--verbose",
         "--show-limits", "--exit", "--open-tty", "--version", "--help")


@dataclass(frozen=True, slots=True)
class Xargs:
    """What an xargs command line says."""

    command: list[str]  # the command it runs (``[]``: none given, xargs runs ``echo``)
    options: list[tuple[str, str | None]]  # canonical names: ``-I``, ``--replace``, ...
    replace: str | None  # the replace string (``-I R``, ``-i[R]``, ``--replace[=R]``; ``{}`` by default)
    null: bool  # ``-0``/``--null``: items end at NUL
    delimiter: str | None  # ``-d D``/``--delimiter=D``
    arg_file: str | None  # ``-a F``/``--arg-file=F``: items come from that file, not the input
    max_procs: str | None  # ``-P N``/``--max-procs=N`` (``0``: as many at once as it can)
    max_args: int | None  # ``-n N``/``--max-args=N``: items per run of the command
    no_run_if_empty: bool  # ``-r``: an empty input runs nothing (GNU runs the command once otherwise)
    open_tty: bool  # ``-o``: the command's stdin is the terminal

    @property
    def reads_input(self) -> bool:
        """Its items come from its standard input (no ``-a``, or ``-a`` naming the input itself)."""
        return self.arg_file is None or self.arg_file in _STDIN_NAMES

    @property
    def whole_lines(self) -> bool:
        """An item is a whole line or field (``-I``, ``-0``, ``-d``), not a blank-separated word."""
        return self.replace is not None or self.null or self.delimiter is not None


def parse_xargs(args: list[str]) -> Xargs:
    """``args``: xargs' arguments (without the program name)."""
    opts, command = getopt(args, _SHORT_WITH_ARG, _LONG, _LONG_WITH_ARG, permute=False,
                           short_optional_arg=_SHORT_OPTIONAL)
    replace = delimiter = arg_file = max_procs = None
    max_args: int | None = None
    null = no_run = tty = False
    for name, value in opts:
        if name == "-I":
            replace = value
        elif name in ("-i", "--replace"):
            replace = value or "{}"
        elif name in ("-0", "--null"):
            null = True
        elif name in ("-d", "--delimiter"):
            delimiter = value
        elif name in ("-a", "--arg-file"):
            arg_file = value
        elif name in ("-P", "--max-procs"):
            max_procs = value
        elif name in ("-n", "--max-args"):
            max_args = int(value) if value is not None and value.isdigit() and int(value) > 0 else None
        elif name in ("-r", "--no-run-if-empty"):
            no_run = True
        elif name in ("-o", "--open-tty"):
            tty = True
    return Xargs(command, opts, replace, null, delimiter, arg_file, max_procs, max_args, no_run, tty)

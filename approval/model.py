"""What the parser produces: simple commands (:class:`Cmd`) and the facts that travel with them.

Kept apart from the tree walk so the rules (``tools/``), the detector and the fallback lexer can
speak of commands without the tree-sitter machinery.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

UNKNOWN = "\x00"  # stands for text the gate cannot know (NUL never survives normalisation)
ARGSEP = "\x01"  # between the words of ``$@`` (``"$@"`` keeps ``'DELETE FROM t'`` one word)

MAX_NODES = 20_000
MAX_TREE_DEPTH = 120
MAX_FIELDS = 64  # brace expansion cap
MAX_VALUE = 16_384  # longest variable value tracked

Kinds = frozenset[str]
NOKINDS: Kinds = frozenset()

# the environment the gate assumes before a command assigns anything
DEFAULT_ENV = {
    "HOME": "~",
    "IFS": " ",
    "PWD": ".",
    "USER": "user",
    "LOGNAME": "user",
    "SHELL": "/bin/bash",
    "TMPDIR": "/tmp",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


class TooComplex(Exception):
    """The input is too large or too deeply nested to analyse within bounds."""


@dataclass(slots=True, eq=False)
class Cmd:
    """One simple command as bash would run it."""

    argv: list[str]
    kinds: list[Kinds]  # per argument: provenance of its value ("download", "decode", "procsub")
    text: str  # the segment: the command's own text
    redirects: list[tuple[str, str]] = field(default_factory=list)  # (operator, resolved target)
    stdin_text: str | None = None  # heredoc / here-string content fed to it
    stdin_kinds: Kinds = frozenset()  # provenance of a here-string (``<<< "$(curl ...)"``)
    upstream: list[list["Cmd"]] = field(default_factory=list)  # pipeline predecessors, nearest last
    pipe_text: str = ""
    background: bool = False
    cwd: str | None = None
    function: str = ""  # name of the function whose body holds it
    loop_forever: bool = False
    loop: int = 0  # id of the innermost endless loop holding it (0: none)
    fallback: bool = False  # produced by the error-tolerant tokenizer
    procsub: str = ""  # "<" or ">": it runs inside a process substitution of that direction
    env: dict[str, str] | None = None  # the line's variables when it runs (code it hands on sees them)

    @property
    def segment(self) -> str:
        return self.pipe_text or self.text


@dataclass(slots=True)
class Script:
    cmds: list[Cmd]
    functions: set[str]
    has_error: bool
    bodies: dict[str, str] = field(default_factory=dict)  # functions defined in the text: name -> body


Classifier = Callable[[Cmd], Kinds]
Reader = Callable[[str, "str | None"], "str | None"]
"""The text of a task's file (path, working directory), as the core read it; None when unknown."""

"""What a makefile can run, read as text: its recipe lines and ``$(shell …)`` calls with its own simple
variables put in. Pure text, shared by the handlers of ``make`` fed a makefile (tools.handoff) and
of scripts read from the task's backend (tools.remote)."""

from __future__ import annotations

import re

_MAKE_VAR = re.compile(r"^([A-Za-z_][A-Za-z0-9_.-]*)\s*(?::{1,3}|\?|\+|!)?=\s*(.*)$")
_MAKE_REF = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_.-]*)[)}]")


def makefile_recipes(text: str) -> list[str]:
    """The shell lines a makefile can run: recipe lines (tab-indented or after ``target: ;``) and
    ``$(shell …)``, with the makefile's own simple variables put in (``$(RM) $(BUILD)``), ``$$`` as
    ``$`` and automatic variables (``$@``, ``$<``…) as a plain word."""
    text = text.replace("\\\n", " ")
    variables = {"RM": "rm -f", "MAKE": "make", "CC": "cc", "CXX": "c++", "SHELL": "/bin/sh"}
    for line in text.split("\n"):
        m = _MAKE_VAR.match(line)
        if m and not line.startswith("\t"):
            variables[m.group(1)] = m.group(2).strip()

    def expand(s: str) -> str:
        for _ in range(4):
            new = _MAKE_REF.sub(lambda m: variables.get(m.group(1), "$" + m.group(1)), s)
            if new == s:
                break
            s = new
        s = re.sub(r"\$[@<^?*%+|]|\$[({][@<^?*%][DF]?[)}]", "target", s)
        return s.replace("$$", "$")

    return [expand(r) for r in makefile_lines(text)]


def makefile_lines(text: str) -> list[str]:
    out: list[str] = []
    for line in text.split("\n"):
        if line.startswith("\t"):
            out.append(line[1:].lstrip("@-+ "))
            continue
        m = re.match(r"^[^:=#\t][^:=#]*::?[^=;]*;(.*)$", line)
        if m:
            out.append(m.group(1).lstrip("@-+ "))
        for sm in re.finditer(r"\$\((?:shell)\s+([^)]*)\)", line):
            out.append(sm.group(1))
    return [r for r in out if r.strip()]

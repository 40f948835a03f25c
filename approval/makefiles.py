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
    # a recipe line continued on the next (``r\<NL><TAB>m -rf /``): make drops the tab, the shell the
    # backslash-newline, so the command is the two halves joined
    text = re.sub(r"\\\n\t", "", text)
    text = text.replace("\\\n", " ")
    variables = {"RM": "rm -f", "MAKE": "make", "CC": "cc", "CXX": "c++", "SHELL": "/bin/sh"}
    # ``define NAME … endef``: a multi-line variable (a canned recipe)
    for dm in re.finditer(
        r"(?m)^define\s+([A-Za-z_][A-Za-z0-9_.-]*)\s*(?:[:?+!]?=)?\s*\n(.*?)\n\s*endef\b", text, re.S
    ):
        variables[dm.group(1)] = dm.group(2).strip().replace("\n", "; ")
    for line in text.split("\n"):
        m = _MAKE_VAR.match(line)
        if m and not line.startswith("\t"):
            variables[m.group(1)] = m.group(2).strip()
        # ``$(eval NAME=value)`` anywhere (also inside a recipe) sets a variable
        for em in re.finditer(r"\$\(eval\s+([A-Za-z_][A-Za-z0-9_.-]*)\s*(?::{1,3}|\?|\+|!)?=\s*([^)]*)\)", line):
            variables[em.group(1)] = em.group(2).strip()

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

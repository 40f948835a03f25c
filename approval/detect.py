"""Detection entry point (placeholder until the parser-based detector lands)."""

from __future__ import annotations

import re

from .rules import RULES
from .verdict import Decision, Verdict

_SIMPLE = [
    (re.compile(r"\brm\s+-[a-zA-Z]*[rR][a-zA-Z]*\s+(/|~)\s*$"), "rm_recursive_root"),
    (re.compile(r"\b(shutdown|reboot|halt|poweroff)\b"), "power"),
    (re.compile(r"\bgit\s+push\b.*(-f\b|--force)"), "git_force_push"),
    (re.compile(r"\b(curl|wget)\b.*\|\s*(sudo\s+)?(ba|z|da)?sh\b"), "pipe_to_shell"),
]


def findings(command: str) -> list[Verdict]:
    """Every dangerous thing found in ``command`` (decision ASK, hardline per default floor)."""
    out: list[Verdict] = []
    for rx, rule in _SIMPLE:
        if rx.search(command):
            r = RULES[rule]
            out.append(Verdict(Decision.ASK, rule, r.reason, command, r.hardline))
    return out


def split_segments(command: str) -> list[str]:
    """The texts of the simple commands / pipelines of ``command`` (placeholder)."""
    return [s.strip() for s in re.split(r"[;&|\n]+", command) if s.strip()]

"""The gate's vocabulary: a decision and the verdict that carries it.

Kept in its own module so the parser, the rules and the policy can all speak it
without importing each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Decision(enum.Enum):
    """What the gate says about a command."""

    ALLOW = "allow"
    ASK = "ask"
    DENY = "deny"


# Severity order used when several findings disagree: the strictest wins.
SEVERITY = {Decision.ALLOW: 0, Decision.ASK: 1, Decision.DENY: 2}


@dataclass(frozen=True)
class Verdict:
    """A decision and why.

    ``rule`` is a stable snake_case id (``rm_recursive_root``...), ``reason`` one plain
    sentence, ``segment`` the text of the simple command or pipeline that decided, and
    ``hardline`` whether the decision comes from the floor no approval can lift.
    """

    decision: Decision
    rule: str = ""
    reason: str = ""
    segment: str = ""
    hardline: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW


ALLOW = Verdict(Decision.ALLOW)

"""The rules' own examples, checked when the rules load.

Every family module of ``approval/tools/`` carries ``EXAMPLES``: for each of its rules, commands
that must raise the rule (``match``) and near misses that must not (``no_match``), the way codex's
execpolicy carries ``match``/``not_match`` next to each rule.  ``check()`` runs them through the
detector and returns what fails; ``verify()`` raises ``RuleExamplesError`` on any failure and is
called when a ``GateConfig`` loads (once per process for the built-in rules), so a daemon whose
rules have drifted from their own examples refuses to start instead of judging with them.  Every
rule id in ``rules.RULES`` must have at least one ``match`` example, except the few whose trigger
is not a command text (``NOT_TEXT``).

Operator rules may carry examples too (``match``/``not_match`` in the config); ``GateConfig``
checks them at load with ``check_operator_rule``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from .rules import RULES
from .tools import FAMILIES, Examples

# Rules raised by something other than the text of a command: the size and nesting limits, an
# internal error in a rule, and live input to an interactive program (the terminal/stdin the
# caller declares).  Their tests live in tests/test_gate_detect.py and tests/test_gate_interactive.py.
NOT_TEXT = frozenset({"too_complex", "analysis_error", "interactive_shell"})


class RuleExamplesError(ValueError):
    """A rule's examples disagree with what the gate does: the rules do not load."""


@dataclass(frozen=True)
class Failure:
    rule: str
    command: str
    expected: bool  # True: should have matched; False: should not have
    got: tuple[str, ...]  # the rule ids the command raised

    def __str__(self) -> str:
        want = "must raise" if self.expected else "must not raise"
        return f"{self.rule}: {self.command!r} {want} it (raised: {', '.join(self.got) or 'nothing'})"


def all_examples() -> list[tuple[str, Examples]]:
    """(family module, examples) for every rule that carries them, in family order."""
    return [(m.__name__.rsplit(".", 1)[-1], ex) for m in FAMILIES for ex in getattr(m, "EXAMPLES", ())]


def check() -> list[Failure]:
    """Every example of every rule judged by the detector; the ones that disagree."""
    from .detect import findings  # the detector imports the handlers: import it when checking

    failures: list[Failure] = []
    seen: set[str] = set()
    for _module, ex in all_examples():
        if ex.rule not in RULES:
            failures.append(Failure(ex.rule, "<unknown rule id>", True, ()))
            continue
        seen.add(ex.rule)
        for cmd in ex.match:
            got = tuple(sorted({f.rule for f in findings(cmd, ex.context)}))
            if ex.rule not in got:
                failures.append(Failure(ex.rule, cmd, True, got))
        for cmd in ex.no_match:
            got = tuple(sorted({f.rule for f in findings(cmd, ex.context)}))
            if ex.rule in got:
                failures.append(Failure(ex.rule, cmd, False, got))
    for rule_id in RULES:
        if rule_id not in seen and rule_id not in NOT_TEXT:
            failures.append(Failure(rule_id, "<no examples>", True, ()))
    return failures


@functools.cache
def verify() -> int:
    """Check the built-in rules' examples once per process; the number checked, or raise."""
    failures = check()
    if failures:
        lines = "\n  ".join(str(f) for f in failures[:20])
        more = f"\n  … and {len(failures) - 20} more" if len(failures) > 20 else ""
        raise RuleExamplesError(f"{len(failures)} rule example(s) fail, the gate's rules do not load:\n  {lines}{more}")
    return sum(len(ex.match) + len(ex.no_match) for _m, ex in all_examples())


def check_operator_rule(rule_id: str | None, pattern: re.Pattern[str] | None, match: list[str], not_match: list[str]) -> list[str]:
    """An operator rule's examples: by rule id they must (not) raise it; by pattern the pattern
    must (not) be found in the command or one of its segments.  Returns what disagrees."""
    from .detect import findings, split_segments
    from .normalize import normalize

    def hits(cmd: str) -> bool:
        if rule_id is not None:
            return rule_id in {f.rule for f in findings(cmd)}
        assert pattern is not None
        text = normalize(cmd)
        return any(pattern.search(s) for s in [text, *split_segments(text)])

    bad = [f"{cmd!r} must match" for cmd in match if not hits(cmd)]
    bad += [f"{cmd!r} must not match" for cmd in not_match if hits(cmd)]
    return bad

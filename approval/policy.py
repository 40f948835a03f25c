"""Policy: detector findings + config + approvals -> one verdict.

Pure functions, no I/O: the broker (executor.approvals) owns the state and passes the
approved rule ids in.
"""

from __future__ import annotations

from collections.abc import Iterable

from .config import GateConfig, Mode
from .context import GateContext
from .detect import findings, split_segments
from .rules import DEFAULT_HARDLINE, reason_for
from .verdict import SEVERITY, Decision, Verdict


def _strictest(verdicts: Iterable[Verdict]) -> Verdict | None:
    best: Verdict | None = None
    for v in verdicts:
        if (
            best is None
            or SEVERITY[v.decision] > SEVERITY[best.decision]
            or (v.decision is best.decision and v.hardline and not best.hardline)
        ):
            best = v
    return best


def _with_floor(found: list[Verdict], floor: frozenset[str]) -> list[Verdict]:
    """Mark findings on the (configured) floor as hardline DENY, others as ASK."""
    out = []
    for f in found:
        on_floor = f.rule in floor
        out.append(Verdict(Decision.DENY if on_floor else Decision.ASK, f.rule, f.reason, f.segment, on_floor))
    return out


def analyze(command: str, *, context: GateContext | None = None) -> Verdict:
    """Detection only, with the default floor: ALLOW, ASK (dangerous) or DENY (hardline)."""
    verdict = _strictest(_with_floor(findings(command, context), DEFAULT_HARDLINE))
    return verdict or Verdict(Decision.ALLOW)


def _apply_operator_rules(command: str, found: list[Verdict], config: GateConfig) -> list[Verdict]:
    """Operator allow/ask/deny rules on top of the detector's findings."""
    if not config.rules:
        return found
    out: list[Verdict] = []
    for f in found:
        action = None
        for r in config.rules:
            rx = r.compiled()
            if r.rule == f.rule or (rx is not None and rx.search(f.segment or command)):
                action = r
                if r.action != "allow":
                    break
        if f.hardline or action is None:
            out.append(f)
        elif action.action == "deny":
            out.append(Verdict(Decision.DENY, f.rule, action.reason or f.reason, f.segment))
        elif action.action == "ask":
            out.append(f)
        # allow: the finding is dropped
    segments: list[str] | None = None
    for r in config.rules:
        rx = r.compiled()
        if rx is None or r.action == "allow":
            continue
        if segments is None:
            segments = [command, *split_segments(command)]
        hit = next((s for s in segments if rx.search(s)), None)
        if hit is not None:
            decision = Decision.DENY if r.action == "deny" else Decision.ASK
            out.append(
                Verdict(decision, r.id, r.reason or f"Matches the operator's {r.action} rule {r.pattern!r}.", hit)
            )
    return out


def evaluate(
    command: str,
    config: GateConfig,
    *,
    backend: str = "",
    approved_rules: frozenset[str] | set[str] = frozenset(),
    interactive: str | None = None,
    interactive_pty: bool = False,
    context: GateContext | None = None,
) -> Verdict:
    """The full gate: detection, floor, operator rules, approvals and mode.

    ``approved_rules`` are the rule ids approved for this task (session) or always.
    ``interactive`` is why live input to the process could run commands the gate never sees
    (``interactive_risk(command, terminal=...)``); it adds an ASK ``interactive_shell`` unless
    ``allow_interactive_pty`` (global or for ``backend``) is set.  ``interactive_pty=True`` is the
    deprecated spelling of ``interactive="opens an interactive terminal"``.
    ``context`` is where the task runs (:class:`GateContext`: cwd, root, home, protected paths);
    relative paths, ``..``, ``$PWD`` and ``~`` are then judged as the absolute paths they name.
    """
    found = findings(command, context)
    if interactive is None and interactive_pty:
        interactive = _OPENS_TERMINAL
    if interactive and not config.interactive_allowed_for(backend):
        found.append(Verdict(Decision.ASK, "interactive_shell", _interactive_reason(interactive), command))
    found = _with_floor(found, config.hardline.floor())
    found = _apply_operator_rules(command, found, config)
    found = [f for f in found if f.decision is Decision.DENY or f.rule not in approved_rules]
    verdict = _strictest(found)
    if verdict is None:
        return Verdict(Decision.ALLOW)
    if verdict.decision is Decision.DENY:
        return verdict
    return apply_mode(verdict, config.mode_for(backend))


_OPENS_TERMINAL = "opens an interactive terminal"


def _interactive_reason(why: str) -> str:
    if why == _OPENS_TERMINAL:
        return reason_for("interactive_shell")
    why = " ".join(why.split()).rstrip(".")
    return f"What is written to it later is not judged: {why}."


def apply_mode(verdict: Verdict, mode: Mode) -> Verdict:
    """Turn an ASK into what the mode says: ask waits, deny refuses, allow runs (audited)."""
    if verdict.decision is not Decision.ASK or mode == "ask":
        return verdict
    if mode == "deny":
        return Verdict(Decision.DENY, verdict.rule, f"{verdict.reason} (approval mode is deny)", verdict.segment)
    return Verdict(Decision.ALLOW, verdict.rule, f"{verdict.reason} (allowed by approval mode allow)", verdict.segment)

"""The ``approval:`` section of the daemon config, validated when the config loads.

Unknown keys, unknown rule ids and patterns that do not compile are errors at load time,
so a typo in a deny rule can never silently weaken the gate.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .rules import DEFAULT_HARDLINE, RULES

Mode = Literal["ask", "deny", "allow"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BackendOverride(_Strict):
    """Per-backend settings, e.g. ``approval.backends.docker.mode: allow``.

    Each key is optional; an unset key means the global setting.
    """

    mode: Mode | None = None
    allow_interactive_pty: bool | None = None


def _check_rule_id(rule_id: str) -> str:
    if rule_id not in RULES:
        known = ", ".join(sorted(RULES))
        raise ValueError(f"unknown rule id {rule_id!r}; known rule ids: {known}")
    return rule_id


class OperatorRule(_Strict):
    """An operator rule: by rule id, or by a regular expression over command text.

    ``action: allow`` lifts a detector rule (never a hardline one), ``ask`` and ``deny``
    add or tighten.  A ``pattern`` is searched (``re.search``) in each simple command or
    pipeline segment and in the whole normalised command; for ``allow`` only the segment
    that triggered a finding is matched, so ``allow: ^git status`` cannot whitelist
    ``git status; rm -rf ~``.
    """

    action: Literal["allow", "ask", "deny"]
    rule: str | None = None
    pattern: str | None = None
    name: str = ""
    reason: str = ""
    # Examples checked when the config loads: commands the rule must match and must not match
    # (by id: raise that rule; by pattern: the pattern found in the command or one of its segments).
    match: list[str] = Field(default_factory=list)
    not_match: list[str] = Field(default_factory=list)

    @field_validator("rule")
    @classmethod
    def _known_rule(cls, v: str | None) -> str | None:
        return None if v is None else _check_rule_id(v)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as e:
                raise ValueError(f"pattern {v!r} is not a valid regular expression: {e}") from e
        return v

    @model_validator(mode="after")
    def _one_selector(self) -> "OperatorRule":
        if (self.rule is None) == (self.pattern is None):
            raise ValueError("an operator rule needs exactly one of `rule` (a rule id) or `pattern` (a regex)")
        if self.match or self.not_match:
            from .examples import check_operator_rule

            bad = check_operator_rule(self.rule, self.compiled(), self.match, self.not_match)
            if bad:
                raise ValueError(f"operator rule {self.id}: its examples fail: " + "; ".join(bad))
        return self

    @property
    def id(self) -> str:
        """The rule id reported when this rule decides."""
        if self.rule:
            return self.rule
        return f"operator_{self.name}" if self.name else "operator_rule"

    def compiled(self) -> re.Pattern[str] | None:
        return re.compile(self.pattern) if self.pattern is not None else None


class HardlineConfig(_Strict):
    """Operator changes to the hardline floor (rule ids to drop from it, or add to it)."""

    remove: list[str] = Field(default_factory=list)
    add: list[str] = Field(default_factory=list)

    @field_validator("remove", "add")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return [_check_rule_id(x) for x in v]

    def floor(self) -> frozenset[str]:
        """The effective set of hardline rule ids."""
        return (DEFAULT_HARDLINE | frozenset(self.add)) - frozenset(self.remove)


class GateConfig(_Strict):
    """The ``approval:`` section of the daemon config."""

    mode: Mode = "ask"
    timeout_seconds: float = Field(default=300, gt=0)
    backends: dict[str, BackendOverride] = Field(default_factory=dict)
    rules: list[OperatorRule] = Field(default_factory=list)
    hardline: HardlineConfig = Field(default_factory=HardlineConfig)
    allow_interactive_pty: bool = False

    @model_validator(mode="after")
    def _rules_hold_their_examples(self) -> "GateConfig":
        """The built-in rules load only if every one of their examples holds (once per process)."""
        from .examples import verify

        verify()
        return self

    @model_validator(mode="after")
    def _no_allow_on_floor(self) -> "GateConfig":
        floor = self.hardline.floor()
        for r in self.rules:
            if r.action == "allow" and r.rule in floor:
                raise ValueError(
                    f"rule {r.rule!r} is on the hardline floor and cannot be allowed; "
                    f"remove it from the floor first with approval.hardline.remove: [{r.rule}]"
                )
        return self

    def mode_for(self, backend: str) -> Mode:
        """The mode for a backend: its override if any, else the global mode."""
        override = self.backends.get(backend)
        return override.mode if override is not None and override.mode is not None else self.mode

    def interactive_allowed_for(self, backend: str) -> bool:
        """Whether live input to interactive programs runs unasked on a backend: its
        ``allow_interactive_pty`` override if set, else the global ``allow_interactive_pty``."""
        override = self.backends.get(backend)
        if override is not None and override.allow_interactive_pty is not None:
            return override.allow_interactive_pty
        return self.allow_interactive_pty


__all__ = ["GateConfig", "BackendOverride", "OperatorRule", "HardlineConfig", "Mode"]

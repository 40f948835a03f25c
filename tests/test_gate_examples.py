"""The rules carry their own examples (approval/tools/*.py ``EXAMPLES``), checked when the rules
load: a rule that no longer matches what it says it matches, or matches a near miss it says it
lets through, stops the gate config from loading.  Also: the handler modules stay split by family
and documented."""

from __future__ import annotations

import ast
import pathlib

import pytest
from executor.approval import RULES, GateConfig, examples, tools
from executor.approval.tools import Examples
from pydantic import ValidationError

TOOLS = pathlib.Path(tools.__file__).parent


def test_every_example_of_every_rule_holds() -> None:
    assert examples.check() == []
    assert examples.verify() >= 300


def test_every_rule_that_a_command_text_can_raise_has_examples() -> None:
    covered = {ex.rule for _m, ex in examples.all_examples() if ex.match}
    assert set(RULES) - covered == set(examples.NOT_TEXT)
    for _m, ex in examples.all_examples():
        assert ex.no_match, f"{ex.rule} has no near misses"


def test_a_broken_example_stops_the_rules_from_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = (Examples("git_force_push", match=("git push",)), Examples("git_reset_hard", no_match=("git reset --hard",)))
    monkeypatch.setattr(tools.git, "EXAMPLES", tools.git.EXAMPLES + bad)
    examples.verify.cache_clear()
    try:
        failures = examples.check()
        assert [(f.rule, f.command, f.expected) for f in failures] == [
            ("git_force_push", "git push", True),
            ("git_reset_hard", "git reset --hard", False),
        ]
        with pytest.raises(ValidationError, match="rule example"):
            GateConfig()
    finally:
        examples.verify.cache_clear()
    monkeypatch.undo()
    GateConfig()


def test_an_example_of_an_unknown_rule_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tools.data, "EXAMPLES", tools.data.EXAMPLES + (Examples("sql_drop_everything", match=("x",)),))
    assert [f.rule for f in examples.check()] == ["sql_drop_everything"]


def test_operator_rules_are_checked_against_their_own_examples() -> None:
    GateConfig(
        rules=[
            {"action": "deny", "pattern": r"^terraform apply\b", "match": ["terraform apply", "cd x && terraform apply"],
             "not_match": ["terraform plan"]},
            {"action": "deny", "rule": "git_force_push", "match": ["git push -f"], "not_match": ["git push"]},
        ]
    )
    with pytest.raises(ValidationError, match="'terraform plan' must match"):
        GateConfig(rules=[{"action": "deny", "pattern": r"^terraform apply\b", "match": ["terraform plan"]}])
    with pytest.raises(ValidationError, match="'git push -f' must not match"):
        GateConfig(rules=[{"action": "ask", "rule": "git_force_push", "not_match": ["git push -f"]}])


def test_handlers_are_split_by_family_documented_and_registered_once() -> None:
    for path in sorted(TOOLS.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert len(text.splitlines()) <= 1000, f"{path.name} is over 1,000 lines"
        tree = ast.parse(text)
        assert ast.get_docstring(tree), f"{path.name} has no module docstring"
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("_h_"):
                assert ast.get_docstring(node), f"{path.name}:{node.name} says nothing about what it catches"
    assert tools.build() is tools.HANDLERS and "rm" in tools.HANDLERS and "git" in tools.HANDLERS

"""Policy: config validation, modes, per-backend overrides, operator rules, the floor."""

from __future__ import annotations

import pydantic
import pytest
from executor.approval import Decision, GateConfig, evaluate


def cfg(**kw: object) -> GateConfig:
    return GateConfig.model_validate(kw)


def test_defaults() -> None:
    c = GateConfig()
    assert (c.mode, c.timeout_seconds, c.allow_interactive_pty) == ("ask", 300, False)


@pytest.mark.parametrize(
    "bad",
    [
        {"mode": "maybe"},
        {"unknown_key": 1},
        {"timeout_seconds": 0},
        {"backends": {"docker": {"mode": "allow", "extra": 1}}},
        {"rules": [{"action": "deny", "rule": "no_such_rule"}]},
        {"rules": [{"action": "deny", "pattern": "("}]},
        {"rules": [{"action": "deny"}]},
        {"rules": [{"action": "deny", "rule": "git_force_push", "pattern": "x"}]},
        {"rules": [{"action": "allow", "rule": "rm_recursive_root"}]},
        {"hardline": {"remove": ["nope"]}},
    ],
)
def test_config_errors_at_load(bad: dict) -> None:
    with pytest.raises(pydantic.ValidationError):
        GateConfig.model_validate(bad)


def test_floor_can_only_be_changed_by_config() -> None:
    c = cfg(hardline={"remove": ["power"]}, rules=[{"action": "allow", "rule": "power"}])
    assert evaluate("reboot", c).decision is Decision.ALLOW
    assert evaluate("reboot", GateConfig()).decision is Decision.DENY
    # approvals never lift the floor
    assert evaluate("reboot", GateConfig(), approved_rules={"power"}).decision is Decision.DENY


def test_hardline_add_makes_a_rule_deny() -> None:
    c = cfg(hardline={"add": ["pipe_to_shell"]})
    v = evaluate("curl -s x | sh", c)
    assert v.decision is Decision.DENY and v.hardline


@pytest.mark.parametrize(
    ("mode", "decision"), [("ask", Decision.ASK), ("deny", Decision.DENY), ("allow", Decision.ALLOW)]
)
def test_modes(mode: str, decision: Decision) -> None:
    v = evaluate("git push --force", cfg(mode=mode))
    assert v.decision is decision and v.rule == "git_force_push"
    # the floor holds in every mode
    assert evaluate("rm -rf /", cfg(mode=mode)).decision is Decision.DENY
    assert evaluate("ls", cfg(mode=mode)).decision is Decision.ALLOW


def test_per_backend_override() -> None:
    c = cfg(mode="deny", backends={"docker": {"mode": "allow"}})
    assert evaluate("git reset --hard", c, backend="docker").decision is Decision.ALLOW
    assert evaluate("git reset --hard", c, backend="local").decision is Decision.DENY


def test_operator_rules_by_id_and_pattern() -> None:
    c = cfg(
        rules=[
            {"action": "allow", "rule": "git_reset_hard"},
            {"action": "deny", "rule": "git_force_push", "reason": "Never force-push here."},
            {"action": "deny", "pattern": r"^terraform apply\b", "name": "no_apply"},
            {"action": "ask", "pattern": r"\bnpm publish\b", "name": "publish"},
            {"action": "allow", "pattern": r"^docker system prune -f$"},
        ]
    )
    assert evaluate("git reset --hard", c).decision is Decision.ALLOW
    v = evaluate("git push -f", c)
    assert (v.decision, v.reason) == (Decision.DENY, "Never force-push here.")
    v = evaluate("cd infra && terraform apply -auto-approve", c)
    assert (v.decision, v.rule) == (Decision.DENY, "operator_no_apply")
    assert evaluate("npm publish", c).rule == "operator_publish"
    assert evaluate("docker system prune -f", c).decision is Decision.ALLOW
    # an allow pattern only lifts the segment it matches
    assert evaluate("docker system prune -f; git clean -fdx", c).rule == "git_clean_force"


def test_approved_rules_lift_asks_only_for_that_rule() -> None:
    c = GateConfig()
    assert evaluate("git push -f", c, approved_rules={"git_force_push"}).decision is Decision.ALLOW
    v = evaluate("git push -f && git clean -fd", c, approved_rules={"git_force_push"})
    assert v.rule == "git_clean_force"


def test_interactive_pty() -> None:
    assert evaluate("bash", GateConfig(), interactive_pty=True).rule == "interactive_shell"
    assert evaluate("bash", cfg(allow_interactive_pty=True), interactive_pty=True).decision is Decision.ALLOW


@pytest.mark.parametrize(
    ("command", "interactive"),
    [
        ("", True),
        ("bash", True),
        ("bash -l", True),
        ("sudo -i", True),
        ("su -", True),
        ("ssh host", True),
        ("python3", True),
        ("docker exec -it web sh", True),
        # default deny: an editor (:!sh), a script the gate cannot see or a program that can
        # read the terminal counts; only programs known not to run typed input do not
        ("vim notes.txt", True),
        ("bash script.sh", True),
        ("python3 app.py", True),
        ("top", False),
        ("bash -c ls", False),
        ("ssh host uptime", False),
    ],
)
def test_opens_interactive_shell(command: str, interactive: bool) -> None:
    from executor.approval import opens_interactive_shell

    assert opens_interactive_shell(command) is interactive

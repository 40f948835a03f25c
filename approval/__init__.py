"""The approval gate: pure policy. Installed as ``executor.approval``.

``analyze(command)`` is detection alone; ``evaluate(command, config, ...)`` adds the
hardline floor, operator rules, approvals and the mode.  The async broker that waits for
a human lives in ``executor.approvals``.
"""

from .config import BackendOverride, GateConfig, HardlineConfig, OperatorRule
from .context import MAX_SCRIPT_BYTES, GateContext, ScriptFile
from .detect import findings, needed_files, opens_interactive_shell, split_segments
from .interactive import TERMINAL_SAFE, interactive_risk, runs_input
from .policy import analyze, apply_mode, evaluate
from .rules import DEFAULT_HARDLINE, RULES, Rule
from .state import ShellState, changes_shell_state, read_state
from .store import AlwaysStore, AuditLog
from .verdict import Decision, Verdict

__all__ = [
    "AlwaysStore",
    "AuditLog",
    "BackendOverride",
    "DEFAULT_HARDLINE",
    "Decision",
    "GateConfig",
    "GateContext",
    "MAX_SCRIPT_BYTES",
    "ScriptFile",
    "needed_files",
    "HardlineConfig",
    "OperatorRule",
    "RULES",
    "Rule",
    "ShellState",
    "TERMINAL_SAFE",
    "Verdict",
    "analyze",
    "apply_mode",
    "changes_shell_state",
    "evaluate",
    "findings",
    "interactive_risk",
    "opens_interactive_shell",
    "read_state",
    "runs_input",
    "split_segments",
]

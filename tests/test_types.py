"""mypy, strict on `executor/` (less the generated v1), `approval/` and `backends/base.py` with what
backends share (pyproject.toml [tool.mypy]; scripts/typecheck.py builds the installed layout it
needs): part of `make test`."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import typecheck  # noqa: E402


def test_mypy_strict_finds_nothing() -> None:
    result = typecheck.run()
    assert result.returncode == 0, result.stdout[-20000:] + result.stderr


def test_the_checked_set_is_what_the_issue_names() -> None:
    checked = typecheck.targets()
    assert "executor/v1" not in checked and "executor/approval" in checked
    assert "executor/backends/base.py" in checked and "executor/service.py" in checked

"""ruff over the whole tree with the project's rule set (pyproject.toml [tool.ruff.lint]: syntax
errors, undefined and unused names, import errors): part of `make test`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    assert ruff, "ruff is not installed: it is in the dev extra (make venv installs it)"
    result = subprocess.run([ruff, "check", "--no-cache", "--output-format", "concise", str(ROOT)],
                            capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr

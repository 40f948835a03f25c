"""Set-up as a newcomer meets it: what `make serve` installs, the extras' names, the distribution name."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_make_serve_installs_only_what_serving_needs(tmp_path):
    r = subprocess.run(["make", "-n", "serve", f"VENV={tmp_path}/v"], cwd=str(ROOT), capture_output=True, text=True,
                       timeout=60)
    installs = [line for line in r.stdout.splitlines() if "pip install" in line]
    assert installs and all(re.search(r"\[docker,ssh,singularity,metrics\]", line) for line in installs), installs
    assert not re.search(r"\b(dev|modal|daytona|vercel|mcp|bench)\b", " ".join(installs))
    assert "executor serve" in r.stdout
    readme = (ROOT / "README.md").read_text()
    assert "stays in the foreground" in readme and "executor start" in readme


def test_extras_are_normalised_and_the_distribution_name_is_ours():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "executor-daemon"
    for extra in project["optional-dependencies"]:
        assert extra == re.sub(r"[-_.]+", "-", extra).lower(), f"extra {extra!r} is not in normalised form"
    assert "vercel-sandbox" in project["optional-dependencies"]
    assert "import name" in (ROOT / "README.md").read_text()

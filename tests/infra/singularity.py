"""Test infrastructure for the singularity backend: a real Apptainer from scripts/apptainer.sh.

``provision()`` runs the script (a few stat calls when everything is cached, about a minute from
a bare machine), parses its two lines ``APPTAINER=...`` and ``IMAGE=...`` and returns the options
for ``backends.<name>``. When the script cannot provision Apptainer here (Debian sid moves, no
root, no network) it raises ``pytest.skip`` with the script's own explanation: never silently.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "apptainer.sh"


@functools.lru_cache(maxsize=1)
def _run_script() -> tuple[dict[str, str], str]:
    """(facts, error): the script runs at most once per test process."""
    try:
        result = subprocess.run([str(SCRIPT)], capture_output=True, text=True, timeout=1200)
    except subprocess.TimeoutExpired:
        return {}, f"{SCRIPT} did not finish within 20 minutes"
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-8:])
        return {}, f"{SCRIPT} could not provision Apptainer (exit {result.returncode}): {tail}"
    facts = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    if not {"APPTAINER", "IMAGE"} <= facts.keys():
        return {}, f"{SCRIPT} did not print APPTAINER= and IMAGE= lines: {result.stdout!r}"
    return facts, ""


def facts() -> dict[str, str]:
    """{"APPTAINER": path, "IMAGE": path}, or pytest.skip with the reason."""
    found, error = _run_script()
    if error:
        pytest.skip(f"real Apptainer unavailable: {error}")
    return found


def provision() -> dict:
    """Options for ``backends.singularity`` against the provisioned Apptainer and test SIF."""
    f = facts()
    return {"kind": "singularity", "executable": f["APPTAINER"], "image": f["IMAGE"]}

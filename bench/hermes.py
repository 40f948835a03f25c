"""The reference: hermes-agent 0.19's terminal environments, in a virtualenv of their own.

The virtualenv is created once and cached at ``/var/cache/executor-test/hermes-venv`` (built under
a temporary name and renamed, so a half-finished install is never reused). Each environment runs in
a fresh subprocess of that venv's python (``bench/hermes_runner.py``), against the same container
image and the same sshd as executor's backends. An environment that cannot run here gives a row with
no value and the reason, never a made-up number.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import CACHE, ROOT, Row, latency_rows, percentile, say, skipped

VERSION = "0.19.0"
VENV = CACHE / "hermes-venv"
RUNNER = ROOT / "bench" / "hermes_runner.py"
_CHECK = "import importlib.metadata as m; import tools.environments.local; print(m.version('hermes-agent'))"


def _usable(venv: Path) -> bool:
    python = venv / "bin" / "python"
    if not python.exists():
        return False
    result = subprocess.run([str(python), "-c", _CHECK], capture_output=True, text=True, timeout=120)
    return result.returncode == 0 and result.stdout.strip() == VERSION


def ensure_venv() -> Path:
    """The cached venv's python, creating the venv (``pip install hermes-agent==0.19.0``) if needed."""
    if _usable(VENV):
        return VENV / "bin" / "python"
    say(f"  creating {VENV} (pip install hermes-agent=={VERSION}; about a minute)")
    building = VENV.with_name(VENV.name + ".building")
    shutil.rmtree(building, ignore_errors=True)
    VENV.parent.mkdir(parents=True, exist_ok=True)
    # The base interpreter of our own venv: the same Python 3.11 the daemon runs on.
    subprocess.run([sys.executable, "-m", "venv", str(building)], check=True)
    result = subprocess.run([str(building / "bin" / "pip"), "install", "-q", f"hermes-agent=={VERSION}"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"pip install hermes-agent=={VERSION} failed: {result.stderr.strip()[-800:]}")
    shutil.rmtree(VENV, ignore_errors=True)
    building.rename(VENV)  # only bin/python is used, and it does not depend on the venv's path
    if not _usable(VENV):
        raise RuntimeError(f"{VENV} was built but `import tools.environments.local` fails there")
    return VENV / "bin" / "python"


def run_environment(python: Path, label: str, spec: dict, timeout: float) -> list[Row]:
    """Time one hermes environment in a subprocess; rows for ``true`` and ``echo hi``, or why not."""
    home = Path(tempfile.mkdtemp(prefix="bench-hermes-home-"))
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(home),
           "HERMES_HOME": str(home / ".hermes"), "LANG": "C.UTF-8", "TMPDIR": "/tmp"}
    try:
        result = subprocess.run([str(python), str(RUNNER), json.dumps(spec)], capture_output=True, text=True,
                                timeout=timeout, env=env, cwd=str(home))
    except subprocess.TimeoutExpired:
        return [skipped("hermes-agent", label, "exec_true_p50_ms", f"the runner did not finish within {timeout:.0f} s")]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    try:
        out = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        out = {"error": f"runner exit {result.returncode}: {(result.stderr or result.stdout).strip()[-600:]}"}
    if "error" in out:
        say(f"    {label:28} hermes FAILED: {out['error']}")
        return [skipped("hermes-agent", label, "exec_true_p50_ms", out["error"])]
    rows = [Row("hermes-agent", label, "init_ms", round(out["init_ms"], 1), "ms", 1, "constructing the environment")]
    note = {"local": "LocalEnvironment.execute", "docker": "DockerEnvironment.execute",
            "ssh": "SSHEnvironment.execute"}[spec["env"]] + " in its own process (hermes-agent 0.19.0)"
    for name, samples in out["samples"].items():
        rows += latency_rows("hermes-agent", label, f"exec_{name}", samples, note)
        say(f"    {label:28} hermes {name:5}  p50 {percentile(samples, .5):8.3f} ms  p99 {percentile(samples, .99):8.3f} ms")
    return rows


def sweep_containers() -> None:
    """Remove containers hermes started for the bench (its cleanup should already have)."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", "label=hermes-task-id=executor-bench"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)

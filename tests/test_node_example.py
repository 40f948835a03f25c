"""examples/node against a real daemon, with @grpc/grpc-js and @grpc/proto-loader from the npm registry
(installed by this test into examples/node/node_modules, gitignored, kept for the next run)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.daemon import DaemonProcess

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "node"
TOKEN = "node-example-token-123456"


@pytest.fixture(scope="module")
def node_modules():
    if not shutil.which("node") or not shutil.which("npm"):
        pytest.skip("node and npm are not installed (apt-get install nodejs npm)")
    stamp = EXAMPLE / "node_modules" / ".installed-from"
    wanted = (EXAMPLE / "package.json").read_text()
    if not stamp.exists() or stamp.read_text() != wanted:
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error"],
                           cwd=str(EXAMPLE), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        stamp.write_text(wanted)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "auth": {"tokens": [{"name": "node", "token": TOKEN, "roles": ["exec"]}]}},
                      state_dir=tmp_path_factory.mktemp("node") / "state").start()
    yield d
    d.kill()


def test_node_example(node_modules, daemon):
    r = subprocess.run(["node", "executor_example.js", daemon.target, "node-task"], cwd=str(EXAMPLE),
                       capture_output=True, text=True, timeout=120,
                       env={"PATH": "/usr/local/bin:/usr/bin:/bin", "EXECUTOR_TOKEN": TOKEN})
    assert r.returncode == 0, r.stdout + r.stderr
    steps = {s["step"]: s for s in map(json.loads, r.stdout.splitlines())}
    assert steps["exec"]["stdout"] == "line 1\nline 2\nline 3\n" and steps["exec"]["stderr"] == "oops\n"
    assert steps["exec"]["exit_code"] == 0 and steps["exec"]["status"] == "EXIT_STATUS_COMPLETED"
    run = steps["run"]  # snake_case fields (keepCase), the shell's state kept from the Exec
    assert run["stdout"] == f"hello from {run['cwd']}\n" and run["exit_code"] == 3
    bg = steps["background"]
    assert bg["output"] == "".join(f"tick {i}\n" for i in range(1, 6)) and bg["reads"] > 2  # 7-byte reads
    assert bg["next_offset"] == len(bg["output"]) and bg["state"] == "PROCESS_STATE_EXITED" and bg["exit_code"] == 0
    assert steps["denied"]["status"] == "EXIT_STATUS_DENIED" and steps["denied"]["message"]

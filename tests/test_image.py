"""The daemon's image (top-level Dockerfile): builds here with no registry, runs non-root, is healthy,
serves Exec through its socket, and drains on `docker stop`."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from executor.client import Client

ROOT = Path(__file__).resolve().parents[1]


def docker(*args, check=True, timeout=120):
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def image():
    if shutil.which("docker") is None or docker("version", check=False).returncode != 0:
        pytest.skip("no Docker engine answers here (make docker-up starts one)")
    r = subprocess.run([str(ROOT / "scripts" / "daemon-image.sh")], capture_output=True, text=True, timeout=900,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_image_runs_healthy_non_root_and_serves(image, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    os.chown(state, 10001, 10001)
    name = f"executor-image-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "--pull", "never", "-v", f"{state}:/var/lib/executor/state", image)
    try:
        deadline = time.monotonic() + 60
        health = ""
        while time.monotonic() < deadline:
            health = docker("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()
            if health == "healthy":
                break
            time.sleep(0.5)
        assert health == "healthy", docker("logs", name, check=False).stdout + docker("logs", name, check=False).stderr
        assert docker("exec", name, "id", "-u").stdout.strip() == "10001"
        with Client(f"unix://{state}/executor.sock") as c:
            r = c.run("in-image", "echo hi from $(id -u); cd /tmp; export A=1")
            assert r.stdout == b"hi from 10001\n"
            assert c.run("in-image", "pwd; echo $A").stdout == b"/tmp\n1\n"
        t0 = time.monotonic()
        docker("stop", "-t", "30", name)
        assert time.monotonic() - t0 < 25
        assert docker("inspect", "--format", "{{.State.ExitCode}}", name).stdout.strip() == "0"
    finally:
        docker("rm", "-f", name, check=False)

"""Infra for the docker backend's tests: a running Docker engine and the local sandbox image.

``provision()`` runs scripts/docker-up.sh and scripts/sandbox-image.sh (both idempotent and fast
when already done) and returns the options of ``backends.docker`` for the conformance suite.
"""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Label put on every container and volume the tests create, so stale ones can be swept.
TEST_LABEL = "io.executor.test"


def engine() -> None:
    """Make sure the engine answers and the image exists, or skip with the reason."""
    for script in ("docker-up.sh", "sandbox-image.sh"):
        result = subprocess.run([str(ROOT / "scripts" / script)], capture_output=True, text=True)
        if result.returncode != 0:
            if os.geteuid() != 0 and script == "docker-up.sh":
                pytest.skip("no Docker engine answers and starting one needs root: run `make docker-up` as root")
            raise RuntimeError(f"scripts/{script} failed:\n{result.stderr}")


def sweep(purpose: str, older_than: float = 900.0) -> None:
    """Remove containers and volumes that tests labelled ``purpose`` longer than ``older_than``
    seconds ago (daemons of finished test runs leave their persistent container behind)."""
    import docker

    api = docker.APIClient(version="auto")
    try:
        now = time.time()
        for c in api.containers(all=True, filters={"label": f"{TEST_LABEL}={purpose}"}):
            if now - c["Created"] > older_than:
                try:
                    api.remove_container(c["Id"], force=True)
                except docker.errors.APIError:
                    pass  # gone already, or another test session is removing it
        for v in api.volumes(filters={"label": f"{TEST_LABEL}={purpose}"}).get("Volumes") or []:
            created = datetime.fromisoformat(v["CreatedAt"].replace("Z", "+00:00")).timestamp()
            if now - created <= older_than:
                continue  # a running test's: between two containers, or about to get one
            try:
                api.remove_volume(v["Name"])
            except docker.errors.APIError:
                pass  # still in use by a live container
    finally:
        api.close()


def remove_daemons(instance_id: str) -> None:
    """Remove the containers and volumes of one backend instance (a test's, when it ends)."""
    import docker

    api = docker.APIClient(version="auto")
    try:
        for c in api.containers(all=True, filters={"label": f"io.executor.daemon={instance_id}"}):
            api.remove_container(c["Id"], force=True)
        for v in api.volumes(filters={"label": f"io.executor.daemon={instance_id}"}).get("Volumes") or []:
            api.remove_volume(v["Name"], force=True)
    finally:
        api.close()


def provision() -> dict:
    """Options for ``backends.docker`` against the local engine, with the default hardening."""
    engine()
    sweep("conformance")
    return {"kind": "docker", "labels": {TEST_LABEL: "conformance"}, "remove_on_close": True}

"""Infra for the ssh backend's tests: a real sshd on 127.0.0.1 (scripts/sshd-up.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("EXECUTOR_TEST_CACHE", "/var/cache/executor-test")) / "ssh"
FACTS = CACHE / "connection.json"


def facts() -> dict:
    """Start (or find) the test sshd and return its connection facts: host, port, user, key_file,
    known_hosts, other_key_file (a key the server does not accept), host_key_pub, sshd_config,
    sshd_pidfile."""
    result = subprocess.run([str(ROOT / "scripts" / "sshd-up.sh")], capture_output=True, text=True)
    if result.returncode != 0:
        if os.geteuid() != 0 and not FACTS.exists():
            pytest.skip("the ssh tests need a test sshd, and setting one up needs root: run scripts/sshd-up.sh as root")
        raise RuntimeError(f"scripts/sshd-up.sh failed:\n{result.stderr}")
    return json.loads(FACTS.read_text())


def provision() -> dict:
    """Options for ``backends.ssh`` against the test sshd."""
    f = facts()
    return {
        "kind": "ssh",
        "host": f["host"],
        "port": f["port"],
        "user": f["user"],
        "key_file": f["key_file"],
        "known_hosts": f["known_hosts"],
    }

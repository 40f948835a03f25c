"""Shared test fixtures. The conformance suite's per-backend daemons live in tests/conformance."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Commands must never see the test runner's cwd-relative .env (the daytona SDK reads one).
os.environ.setdefault("EXECUTOR_TEST", "1")


@pytest.fixture
def local_daemon(tmp_path):
    """A fresh daemon on the local backend, for tests that change daemon-wide state."""
    from tests.daemon import DaemonProcess

    daemon = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}}},
                           state_dir=tmp_path / "state").start()
    yield daemon
    daemon.kill()

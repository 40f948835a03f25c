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


def pytest_collection_modifyitems(config, items):
    """Grouping for pytest-xdist (`-n N --dist loadgroup`, as `make test` runs): one backend's
    conformance tests share a worker (its daemon starts once), and every other module stays on one
    worker (its module-scoped daemons and ordered checks stay together). The ssh backend's own tests
    join its conformance group: one of them stops the shared test sshd. Groups run in parallel."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        kind = callspec.params.get("daemon") if callspec else None
        module = item.nodeid.split("::")[0]
        if isinstance(kind, str):
            group = f"backend-{kind}"
        elif module.startswith("tests/test_ssh_"):
            group = "backend-ssh"  # one of them stops the shared test sshd: never beside other ssh tests
        else:
            group = module
        item.add_marker(pytest.mark.xdist_group(name=group))

"""Shared test fixtures. The conformance suite's per-backend daemons live in tests/conformance."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from executor.backends import KINDS

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


def xdist_group(nodeid: str) -> str:
    """The worker group of a test (`-n N --dist loadgroup`, as `make test` runs): one backend's
    conformance tests share a worker (its daemon starts once), and every other module stays on one
    worker (its module-scoped daemons and ordered checks stay together). The ssh backend's own tests
    join its conformance group: one of them stops the shared test sshd. Groups run in parallel."""
    module = nodeid.split("::")[0]
    if module.startswith("tests/conformance/") and "[" in nodeid:
        for part in nodeid[nodeid.index("[") + 1:].rstrip("]").split("-"):
            if part in KINDS or part.rpartition("_")[0] in KINDS:  # a kind, or a variant (local_none)
                return f"backend-{part}"
    if module.startswith("tests/test_ssh_"):
        return "backend-ssh"  # one of them stops the shared test sshd: never beside other ssh tests
    return module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` with the groups of :func:`xdist_group`, decided from node ids on the
    controller. (xdist's own loadgroup reads an `xdist_group` mark by rewriting node ids on the
    workers, which pytest 9 no longer allows: every test then ran on any worker.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_group(nodeid)

    return Groups(config, log)

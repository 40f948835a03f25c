"""The conformance suite: every test here runs against every backend.

Each backend kind has `tests/infra/<kind>.py` with `provision() -> dict` (its options,
starting what it needs). One daemon process per kind serves all of that kind's tests.
Restrict the kinds with EXECUTOR_TEST_BACKENDS=local,docker (default: all).
"""

from __future__ import annotations

import importlib
import itertools
import os
import tempfile
import uuid
from pathlib import Path

import pytest

from executor.backends import KINDS
from tests.daemon import DaemonProcess

#: Variants of a kind, run as their own parameter (tests/infra/<variant>.py names its KIND):
#: selecting the kind selects them too.
VARIANTS = {"local": ["local_none"]}
ALL_KINDS = list(KINDS)
SELECTED = [k.strip() for k in os.environ.get("EXECUTOR_TEST_BACKENDS", ",".join(ALL_KINDS)).split(",") if k.strip()]
SELECTED += [v for k in list(SELECTED) for v in VARIANTS.get(k, []) if v not in SELECTED]

_counter = itertools.count()

#: A value the conformance daemons must redact from every output (their `redaction.env` names it).
REDACT_VALUE = "xq7-" + uuid.uuid4().hex
os.environ["EXECUTOR_TEST_REDACT"] = REDACT_VALUE
#: Commands containing this are denied by an operator rule of the conformance daemons (harmless if run).
DENY_MARKER = "executor-conformance-denied"


def provision(kind: str) -> dict:
    module = importlib.import_module(f"tests.infra.{kind}")
    return module.provision()


def variant_kind(param: str) -> str:
    """The backend kind of a parameter: itself, or the KIND a variant's infra module names."""
    return getattr(importlib.import_module(f"tests.infra.{param}"), "KIND", param)


@pytest.fixture(scope="session", params=SELECTED)
def daemon(request):
    """A daemon whose default backend is the kind under test (named after the kind, also for a
    variant such as local_none; ``daemon.variant`` is the parameter)."""
    variant = request.param
    kind = variant_kind(variant)
    options = provision(variant)
    config = {
        "backend": kind,
        "backends": {kind: options},
        "limits": {"default_timeout_seconds": 60, "max_timeout_seconds": 600, "kill_grace_seconds": 2},
        "approval": {"mode": "ask", "timeout_seconds": 3,
                     "rules": [{"action": "deny", "pattern": DENY_MARKER, "name": "conformance"}]},
        "redaction": {"env": ["EXECUTOR_TEST_REDACT"]},
    }
    state = Path(tempfile.mkdtemp(prefix=f"executor-conf-{variant}-")) / "state"
    d = DaemonProcess(config, state_dir=state).start()
    d.kind = kind
    d.variant = variant
    d.options = options
    yield d
    try:
        d.stop(timeout=60)
    finally:
        d.kill()


@pytest.fixture(scope="session")
def client(daemon):
    with daemon.client() as c:
        yield c


@pytest.fixture(scope="session")
def patient_client(daemon):
    """A client of a second daemon of the kind under test whose approvals wait two minutes, for tests
    where an approver answers: the main daemon's 3 s (for tests where nobody answers) would race the
    approver on a loaded machine."""
    config = {"backend": daemon.kind, "backends": {daemon.kind: daemon.options},
              "approval": {"mode": "ask", "timeout_seconds": 120}}
    state = Path(tempfile.mkdtemp(prefix=f"executor-conf-patient-{daemon.variant}-")) / "state"
    d = DaemonProcess(config, state_dir=state).start()
    try:
        with d.client() as c:
            yield c
    finally:
        try:
            d.stop(timeout=60)
        finally:
            d.kill()


@pytest.fixture
def task(daemon, client):
    """A fresh task id, closed (files removed) after the test."""
    task_id = f"t{next(_counter)}-{uuid.uuid4().hex[:8]}"
    yield task_id
    try:
        client.close_task(task_id, remove_files=True)
    except Exception:
        pass


def capabilities(client, kind: str):
    for b in client.list_backends().backends:
        if b.name == kind:
            return b.capabilities
    raise AssertionError(f"backend {kind} not listed")


def on_this_host(prefix: str) -> int:
    """Processes on this machine's kernel whose command line starts with ``prefix`` (set with `exec
    -a`; unique per test). Counted besides what the task's shell sees: the local sandbox gives each
    spawn its own pid namespace, so a background process's tree is invisible from the task's shell,
    and a count made only there would be 0 whatever survived. (Every backend here runs its
    processes on this kernel: containers, sshd, Apptainer and the cloud fakes.)"""
    from tests.daemon import count_processes

    return count_processes(prefix)


def require(client, daemon, capability: str) -> None:
    """Skip (saying why) when the backend under test does not claim a capability."""
    caps = capabilities(client, daemon.kind)
    if not getattr(caps, capability):
        pytest.skip(f"backend {daemon.kind} does not claim the {capability!r} capability")


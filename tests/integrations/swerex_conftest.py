"""Fixtures for SWE-ReX's own runtime tests (tests/test_execution.py of its sdist), run against
executor.integrations.swerex.ExecutorRuntime instead of its RemoteRuntime. Copied next to those tests
by tests/integrations/test_swerex.py; only the fixtures are ours, the tests are SWE-ReX's unchanged.
Env: EXECUTOR_TARGET, EXECUTOR_TOKEN (a daemon on the local backend: its task directories are host
paths, so the tests' tmp_path can be one inside the runtime's task)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from swerex.runtime.abstract import BashAction, CloseBashSessionRequest, Command, CreateBashSessionRequest

from executor.integrations.swerex import ExecutorRuntime


@pytest.fixture
async def remote_runtime():
    runtime = ExecutorRuntime(target=os.environ["EXECUTOR_TARGET"], token=os.environ.get("EXECUTOR_TOKEN"))
    try:
        yield runtime
    finally:
        await runtime.close()


@pytest.fixture
async def runtime_with_default_session(remote_runtime):
    await remote_runtime.create_session(CreateBashSessionRequest())
    # SWE-ReX's tests call `python`; this machine has python3 only (an environment difference)
    await remote_runtime.run_in_session(BashAction(command='python() { python3 "$@"; }; export -f python'))
    try:
        yield remote_runtime
    finally:
        await remote_runtime.close_session(CloseBashSessionRequest())


@pytest.fixture
async def tmp_path(remote_runtime) -> Path:
    """A fresh directory inside the runtime's task (where its file calls are confined)."""
    path = Path(await remote_runtime.task_root()) / f"pytest-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


class _Action(BashAction):
    timeout: float | None = 5


class _Command(Command):
    timeout: float | None = 5

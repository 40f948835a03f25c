"""Exec's event stream in-process, on the real local backend: when `started` goes out, and that a
consumer stopping at any point (as a cancelled RPC does) still kills the command."""

from __future__ import annotations

import asyncio
import subprocess

import pytest

from executor.config import Config
from executor.events import ApprovalNeeded, Finished, Output, Started
from executor.service import ExecParams, Executor


@pytest.fixture
async def core(tmp_path):
    config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local"}},
                                    "approval": {"mode": "ask", "timeout_seconds": 1},
                                    "limits": {"kill_grace_seconds": 1}})
    core = Executor(config, tmp_path / "state")
    await core.start()
    yield core
    await core.shutdown()


async def events_of(core, task, command):
    return [e async for e in core.exec(ExecParams(task, command))]


def running(marker: str) -> bool:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return any(line.startswith(marker) for line in ps.splitlines())


async def until(predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def test_started_comes_first_then_output_then_exit(core):
    kinds = [type(e) for e in await events_of(core, "order", "echo a; echo b >&2")]
    assert kinds[0] is Started and kinds[-1] is Finished
    assert set(kinds[1:-1]) == {Output}
    # A warm task: `started` is sent once the command is in the shell; the order is the same.
    kinds = [type(e) for e in await events_of(core, "order", "true")]
    assert kinds == [Started, Finished]


async def test_stopping_right_after_started_kills_the_command(core, tmp_path):
    """On a warm task `started` is yielded after the command was handed to the shell, so a
    consumer that stops there has a running command to kill."""
    await events_of(core, "stop", "true")  # warm: the shell is up
    marker = "executor-core-stop-after-started"
    flag = tmp_path / "began"
    stream = core.exec(ExecParams("stop", f"touch {flag}; exec -a {marker} sleep 300"))
    first = await stream.__anext__()
    assert isinstance(first, Started)
    await until(lambda: running(marker))  # it was already on its way
    await stream.aclose()
    assert not running(marker)
    events = await events_of(core, "stop", "echo next")
    assert events[-1].exit.status == "completed" and events[1].data == b"next\n"


async def test_started_is_not_held_back_by_a_busy_task(core):
    """A command queued behind another hears `started` at once; it runs when the first ends."""
    await events_of(core, "busy", "true")
    marker = "executor-core-busy-first"
    first = core.exec(ExecParams("busy", f"exec -a {marker} sleep 300"))
    assert isinstance(await first.__anext__(), Started)
    await until(lambda: running(marker))
    second = core.exec(ExecParams("busy", "echo second"))
    assert isinstance(await asyncio.wait_for(second.__anext__(), 10), Started)
    assert running(marker)  # the first still holds the task
    await first.aclose()
    rest = [e async for e in second]
    assert rest[0].data == b"second\n" and rest[-1].exit.status == "completed"


async def test_a_command_that_asks_hears_started_before_the_approval(core):
    events = await events_of(core, "ask", "systemctl stop executor-test-nothing")
    assert isinstance(events[0], Started) and isinstance(events[1], ApprovalNeeded)
    assert events[-1].exit.status == "denied"  # nobody answered within the timeout

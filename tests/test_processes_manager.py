"""The process manager in-process, on the real local backend, with faults injected where
a real failure cannot be produced here: a backend that loses the process (LOST)."""

from __future__ import annotations

import asyncio

import pytest

from executor.backends.base import BackendError, ErrorKind
from executor.config import Config
from executor.errors import CoreError
from executor.admission import Caller, StartParams
from executor.processes import EXITED, KILLED, LOST
from executor.service import Executor


@pytest.fixture
async def core(tmp_path):
    config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local"}},
                                    "approval": {"mode": "allow"}, "limits": {"kill_grace_seconds": 1},
                                    "processes": {"retain_seconds": 60}})
    core = Executor(config, tmp_path / "state")
    await core.start()
    yield core
    await core.shutdown()


async def until(predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


class _FailingStream:
    """Delegates to the real stream, then fails the way a dropped connection does."""

    def __init__(self, stream, after: int) -> None:
        self.stream, self.left = stream, after

    async def read(self) -> bytes:
        if self.left <= 0:
            raise BackendError("the connection to the sandbox was lost", ErrorKind.LOST)
        self.left -= 1
        return await self.stream.read()


class _LosingSandbox:
    """The real local sandbox whose spawned processes' stdout breaks after the handshake."""

    def __init__(self, real) -> None:
        self.real = real
        self.root = real.root

    async def spawn(self, argv, **kwargs):
        proc = await self.real.spawn(argv, **kwargs)
        proc.stdout = _FailingStream(proc.stdout, after=1)
        return proc

    def __getattr__(self, name):
        return getattr(self.real, name)


async def test_lost_backend_marks_the_process_lost_and_keeps_its_output(core):
    procs = core.processes
    first = await procs.start_process(StartParams(task_id="lost", command="echo hi; sleep 30"), Caller("test"))
    await until(lambda: first.logs["stdout"].end > 0)
    task = core.tasks.get("lost")
    task.sandbox = _LosingSandbox(task.sandbox)
    mp = await procs.start_process(StartParams(task_id="lost", command="echo before; sleep 30"), Caller("test"))
    await until(lambda: not mp.running)
    assert mp.state == LOST and "lost" in mp.message
    # what still ran of it in the backend is ended, not orphaned
    from executor.backends.local import session_members
    await until(lambda: session_members(mp.pid) == [])
    assert procs.running_count("lost") == 1
    await procs.signal(first.id, "KILL")
    await until(lambda: not first.running)
    assert first.state == KILLED and first.signal == "SIGKILL"
    task.sandbox = task.sandbox.real
    assert await procs.end_task("lost") == 0


async def test_exit_codes_wait_and_retention(core):
    procs = core.processes
    mp = await procs.start_process(StartParams(task_id="codes", command="exit 5"), Caller("test"))
    done = await procs.wait(mp.id, 10)
    assert done.state == EXITED and done.exit_code == 5
    again = await procs.wait(mp.id, 0)
    assert again is done
    done.ended_at -= 120  # as if it ended long ago: past retain_seconds
    with pytest.raises(CoreError) as info:
        procs.get(mp.id)
    assert info.value.code == "NOT_FOUND"


async def test_follow_ends_with_the_process(core):
    procs = core.processes
    mp = await procs.start_process(StartParams(task_id="follow", command="printf a; sleep 0.3; printf b >&2"), Caller("test"))
    chunks = [c async for c in procs.follow(mp.id, 0, "")]
    assert b"".join(c.data for c in chunks) == b"ab"
    assert chunks[-1].exited is mp and mp.state == EXITED
    offsets = [c.offset for c in chunks]
    assert offsets == sorted(offsets) and offsets[0] == 0 and chunks[-1].next_offset == 2

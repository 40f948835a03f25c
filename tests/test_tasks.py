"""The warm shell pool's background work (executor.tasks.ShellPool): shells it stops using are ended
in tasks it holds, and closing the pool waits for them."""

from __future__ import annotations

import asyncio
import gc

from executor.backends.base import BackendError
from executor.tasks import ShellPool, Task, TaskManager


class FakeBackend:
    name = "fake"


class FakeShell:
    """What the pool needs of a shell: alive, hand_over, terminate (which waits for ``release``)."""

    def __init__(self, release: asyncio.Event, ended: list[FakeShell], *, alive: bool = True,
                 fails: bool = False) -> None:
        self.alive = alive
        self.release = release
        self.ended = ended
        self.fails = fails

    async def hand_over(self, sandbox: object, env: dict[str, str]) -> None:
        raise BackendError("the handoff failed")

    async def terminate(self) -> None:
        await self.release.wait()
        self.ended.append(self)
        if self.fails:
            raise BackendError("terminate failed")


def make_pool() -> ShellPool:
    return ShellPool(FakeBackend(), 0, env={}, kill_grace=0.1)  # size 0: no refill starts a shell


async def test_close_waits_for_the_dead_shells_take_discarded():
    pool = make_pool()
    release, ended = asyncio.Event(), []
    pool.ready = [FakeShell(release, ended, alive=False), FakeShell(release, ended, alive=False)]
    assert pool.take() is None
    gc.collect()  # the terminations are held by the pool, not left to the garbage collector
    closing = asyncio.ensure_future(pool.close())
    await asyncio.sleep(0.05)
    assert not closing.done(), "close() returned while discarded shells were still being ended"
    release.set()
    await asyncio.wait_for(closing, 5)
    assert len(ended) == 2
    assert not pool._ending


async def test_a_failed_handoff_ends_the_shell_in_the_pool(tmp_path):
    release, ended = asyncio.Event(), []
    pool = make_pool()
    shell = FakeShell(release, ended, fails=True)  # its terminate fails too: logged, not left unretrieved
    pool.ready = [shell]
    backend = FakeBackend()
    manager = TaskManager({"fake": backend}, env_base={}, max_tasks=4, kill_grace=0.1,
                          state_dir=tmp_path)
    manager.pools["fake"] = pool
    task = Task("t1", "fake", backend)
    assert await manager._from_pool(task, object(), {}) is None
    assert len(pool._ending) == 1
    closing = asyncio.ensure_future(pool.close())
    await asyncio.sleep(0.05)
    assert not closing.done()
    release.set()
    await asyncio.wait_for(closing, 5)
    assert ended == [shell]
    assert not pool._ending


async def test_close_cancelled_cancels_the_terminations():
    pool = make_pool()
    release, ended = asyncio.Event(), []
    pool.ready = [FakeShell(release, ended, alive=False)]
    pool.take()
    (ending,) = pool._ending
    closing = asyncio.ensure_future(pool.close())
    await asyncio.sleep(0.02)
    closing.cancel()
    await asyncio.gather(closing, return_exceptions=True)
    await asyncio.sleep(0)
    assert ending.cancelled()
    assert not pool._ending

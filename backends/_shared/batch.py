"""Requests asked for in one turn of the event loop, served together.

A shutdown (or many timeouts at once) ends hundreds of commands together; each kill is a walk of
the processes (a read of /proc in the daemon, or a helper command over ssh). Served one by one they
cost one walk each; ``TurnBatch`` gathers what is asked in the same turn and serves it in one go.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")


class TurnBatch(Generic[K, T]):
    """``await ask(key, item)`` returns once ``serve(key, items)`` ran for a batch holding ``item``
    (its exception, if it raised, is every asker's)."""

    def __init__(self, serve: Callable[[K, list[T]], Awaitable[None]]) -> None:
        self._serve = serve
        self._asked: dict[K, tuple[list[T], asyncio.Future[None]]] = {}
        self._running: set[asyncio.Task[None]] = set()

    async def ask(self, key: K, item: T) -> None:
        batch = self._asked.get(key)
        if batch is None:
            loop = asyncio.get_running_loop()
            batch = self._asked[key] = ([], loop.create_future())
            loop.call_soon(self._start, key)
        batch[0].append(item)
        await asyncio.shield(batch[1])

    def _start(self, key: K) -> None:
        items, done = self._asked.pop(key)
        task = asyncio.ensure_future(self._serve(key, items))
        self._running.add(task)

        def finished(t: asyncio.Task[None]) -> None:
            self._running.discard(t)
            if done.cancelled():
                return
            if t.cancelled():
                done.cancel()
            elif t.exception() is not None:
                done.set_exception(t.exception())  # type: ignore[arg-type]
            else:
                done.set_result(None)

        task.add_done_callback(finished)


__all__ = ["TurnBatch"]

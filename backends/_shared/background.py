"""Work started on the side and awaited by nobody: held until it ends, its failure logged.

The event loop keeps only a weak reference to a task; a task nobody else holds can be collected
while it waits, and then never finishes (a process whose exit is never settled, a reader left
waiting). ``detach`` keeps a strong reference until the task is done and logs what it raised, so a
failure is neither lost nor silent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger("executor.backends")

_RUNNING: set[asyncio.Task[Any]] = set()


def detach(work: Coroutine[Any, Any, Any], what: str, *, into: set[asyncio.Task[Any]] | None = None
           ) -> asyncio.Task[Any]:
    """Run ``work`` on the running loop without awaiting it; ``what`` names it in a failure's log line.
    ``into``: a set of its owner's that holds it too until it ends (an owner that awaits its
    background work when it closes)."""
    task = asyncio.ensure_future(work)
    _RUNNING.add(task)
    if into is not None:
        into.add(task)

    def ended(done: asyncio.Task[Any]) -> None:
        _RUNNING.discard(done)
        if into is not None:
            into.discard(done)
        if not done.cancelled() and (exc := done.exception()) is not None:
            log.error("%s failed: %s", what, exc, exc_info=exc)

    task.add_done_callback(ended)
    return task


def running() -> int:
    """How many detached tasks have not ended (for tests and shutdown diagnostics)."""
    return len(_RUNNING)

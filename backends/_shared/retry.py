"""One retry helper, with one definition of what is safe to repeat.

A failed call is repeated (after a pause that doubles, or grows by ``factor``) while attempts are
left and one of these holds:

* the request never reached the far side (``Failure.UNSENT``: a refused connect, a rate limit
  answered before anything ran, a connection dropped before the server's greeting): nothing
  happened, so any call may be repeated;
* the call is ``idempotent`` (a lookup, a read, a "get or create" by name, a stop) and the far side
  is unreachable or failing (``Failure.TRANSIENT``): a second run changes nothing the first did not.

A call with effects (starting a command, writing to stdin, uploading a stream) is repeated only in
the first case. What each SDK's exceptions *are* is the backend's own knowledge: it passes
``classify`` (default: a translated error of kind UNAVAILABLE is transient, everything else final)
and ``translate`` (the BackendError raised when no repeat is allowed; returning the exception
itself raises it unchanged).
"""

from __future__ import annotations

import asyncio
import enum
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from ..base import BackendError, ErrorKind

T = TypeVar("T")


class Failure(enum.Enum):
    UNSENT = "unsent"  # never reached the far side: repeatable for any call
    TRANSIENT = "transient"  # unreachable or failing now: repeatable for an idempotent call
    FINAL = "final"  # repeating would fail the same way (or repeat an effect): never


def transient_if_unavailable(err: BaseException) -> Failure:
    """The default classification, from the translated error alone."""
    return Failure.TRANSIENT if isinstance(err, BackendError) and err.kind is ErrorKind.UNAVAILABLE else Failure.FINAL


def may_repeat(failure: Failure, *, idempotent: bool) -> bool:
    """The one rule: see the module docstring."""
    return failure is Failure.UNSENT or (idempotent and failure is Failure.TRANSIENT)


async def retrying(call: Callable[[], Awaitable[T]], *, translate: Callable[[BaseException], BaseException],
                   idempotent: bool, classify: Callable[[BaseException], Failure] | None = None,
                   attempts: int = 3, delay: float = 0.2, factor: float = 2.0, jitter: bool = False,
                   timeout: float | None = None,
                   on_retry: Callable[[BaseException, float], None] | None = None) -> T:
    """``await call()``, repeated under the rule above; each attempt bounded by ``timeout`` (None:
    unbounded). When no repeat is allowed, raises ``translate(exc)`` from the last failure."""
    for attempt in range(1, attempts + 1):
        try:
            return await (asyncio.wait_for(call(), timeout) if timeout else call())
        except Exception as exc:  # noqa: BLE001 - classified, then translated
            failure = classify(exc) if classify is not None else transient_if_unavailable(translate(exc))
            if attempt >= attempts or not may_repeat(failure, idempotent=idempotent):
                err = translate(exc)
                if err is exc:
                    raise
                raise err from exc
            pause = delay * (1 + random.random()) if jitter else delay
            if on_retry is not None:
                on_retry(exc, pause)
        await asyncio.sleep(pause)
        delay *= factor
    raise AssertionError("unreachable")


async def once(call: Awaitable[T], *, translate: Callable[[BaseException], BaseException],
               timeout: float | None = None) -> T:
    """A call that is never repeated (it may have happened), its failure translated."""
    try:
        return await (asyncio.wait_for(call, timeout) if timeout else call)
    except Exception as exc:  # noqa: BLE001 - translated
        err = translate(exc)
        if err is exc:
            raise
        raise err from exc


__all__ = ["Failure", "may_repeat", "retrying", "once", "transient_if_unavailable"]

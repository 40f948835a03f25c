"""The Daytona SDK (imported only when this backend is configured) and its errors as BackendErrors; calls under the shared retry rule."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from .._shared.retry import once, retrying
from ..base import BackendError, ErrorKind
from .options import _QUOTA_WORDS

T = TypeVar("T")


def _sdk() -> Any:
    """Import the SDK and keep it from reading ``.env`` files in the daemon's working directory.

    The SDK parses ``.env``/``.env.local`` from the cwd for DAYTONA_* settings (target, OTEL,
    polling...): a daemon's behaviour must not depend on where it was started, so the reader
    it uses sees only the process environment."""
    import daytona
    from daytona._async import daytona as async_module
    from daytona._utils.env import DaytonaEnvReader

    if not getattr(async_module.DaytonaEnvReader, "_executor_no_dotenv", False):
        class _ProcessEnvOnly(DaytonaEnvReader):
            _executor_no_dotenv = True

            @staticmethod
            def _load(path: str) -> dict[str, str]:
                return {}

        async_module.DaytonaEnvReader = _ProcessEnvOnly
    return daytona


def _translate(exc: BaseException, action: str, *, key_hint: str = "") -> BackendError:
    """A Daytona/transport error as a BackendError a person can act on."""
    if isinstance(exc, BackendError):
        return exc
    import aiohttp
    from daytona.common import errors as e

    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    text = str(exc).strip() or type(exc).__name__
    message = f"daytona: {action} failed: {text}"
    if isinstance(exc, e.DaytonaAuthenticationError) or status == 401:
        return BackendError(f"{message}. The API key was refused{key_hint}.", ErrorKind.UNAUTHENTICATED)
    if isinstance(exc, e.DaytonaRateLimitError) or status == 429:
        return BackendError(f"{message}. Rate limited or out of quota: retry later or raise the limit.",
                            ErrorKind.RESOURCE_EXHAUSTED)
    if isinstance(exc, e.DaytonaForbiddenError) or status == 403:
        if any(w in text.lower() for w in _QUOTA_WORDS):
            return BackendError(f"{message}. Free sandboxes (delete stopped ones) or raise the quota.",
                                ErrorKind.RESOURCE_EXHAUSTED)
        return BackendError(message, ErrorKind.PERMISSION_DENIED)
    if isinstance(exc, e.DaytonaNotFoundError) or status == 404:
        return BackendError(message, ErrorKind.NOT_FOUND)
    if isinstance(exc, (e.DaytonaConnectionError, e.DaytonaTimeoutError, aiohttp.ClientError, OSError,
                        asyncio.TimeoutError)) or (isinstance(status, int) and status >= 500):
        return BackendError(f"{message}. The Daytona API is unreachable or failing; retry later.",
                            ErrorKind.UNAVAILABLE)
    if isinstance(status, int) and 400 <= status < 500:
        return BackendError(message, ErrorKind.FAILED_PRECONDITION)
    return BackendError(message, ErrorKind.INTERNAL)


#: Default bound (s) for one idempotent API call; backends pass their ``request_timeout``.
_CALL_TIMEOUT = 30.0


async def _retrying(action: str, make: Callable[[], Awaitable[T]], *, attempts: int = 2,
                    key_hint: str = "", timeout: float | None = None) -> T:
    """An idempotent call (bounded by ``timeout``), repeated under the shared rule (``_shared.retry``)."""
    return await retrying(make, translate=lambda exc: _translate(exc, action, key_hint=key_hint), idempotent=True,
                          attempts=attempts, timeout=timeout or _CALL_TIMEOUT)


async def _once(action: str, aw: Awaitable[T], key_hint: str = "", timeout: float | None = None) -> T:
    """A call that is not safe to repeat (it may have happened), its errors translated; bounded by
    ``timeout`` (None: the SDK's own limits, for long transfers)."""
    return await once(aw, translate=lambda exc: _translate(exc, action, key_hint=key_hint), timeout=timeout)

"""Client side of fleet routing: every call that concerns a task carries ``x-executor-task``.

A gRPC client interceptor, installed where a client creates its channel: it derives the header
from the request itself (``task_id``; the ``open`` of a Pty stream; the first chunk of PutArchive;
the task part of a process or approval id, ``<id>@<task_id>``), so a proxy routes the call to the
task's owner (executor.placement, docs/operations.md). Calls that name no task get no header.
Imports nothing of the server.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import grpc
import grpc.aio
from google.protobuf.message import Message

from executor.placement import HEADER, task_of

#: What a message field names, by kind: "task" a task id; "id" a ``<id>@<task_id>``; "open" a
#: message (the Pty stream's ``open``) that names the task itself.
_ROUTED = (("task", "task_id"), ("id", "process_id"), ("id", "approval_id"), ("open", "open"))


_FIELDS: dict[type[Message], tuple[str, str] | None] = {}


def _routing_field(message_type: type[Message]) -> tuple[str, str] | None:
    """(kind, field name) of the field that names a message type's task; None when none does."""
    if message_type in _FIELDS:
        return _FIELDS[message_type]
    names = message_type.DESCRIPTOR.fields_by_name
    how = _FIELDS[message_type] = next(((kind, name) for kind, name in _ROUTED if name in names), None)
    return how


def routing_task(request: object) -> str:
    """The task a request concerns ("" when none): what ``x-executor-task`` carries."""
    if not isinstance(request, Message):
        return ""
    how = _routing_field(type(request))
    if how is None:
        return ""
    kind, name = how
    if kind == "open":
        return routing_task(getattr(request, name)) if request.HasField(name) else ""
    value: str = getattr(request, name)  # a string field, by the name its descriptor lists
    return value if kind == "task" else task_of(value)


def _details(details: grpc.ClientCallDetails, task: str) -> grpc.ClientCallDetails:
    if not task:
        return details
    metadata = (*(details.metadata or ()), (HEADER, task))
    return _Details(details.method, details.timeout, metadata, details.credentials,
                    getattr(details, "wait_for_ready", None), getattr(details, "compression", None))


class _Details(grpc.ClientCallDetails):
    def __init__(self, method: str, timeout: float | None, metadata: tuple[tuple[str, str | bytes], ...],
                 credentials: grpc.CallCredentials | None, wait_for_ready: bool | None,
                 compression: grpc.Compression | None) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


def _peek(requests: Iterable[Message]) -> tuple[str, Iterator[Message]]:
    """The task the first request names, and all the requests still to send."""
    it = iter(requests)
    try:
        first = next(it)
    except StopIteration:
        return "", iter(())
    return routing_task(first), itertools.chain((first,), it)


# grpc-stubs make the interceptor bases generic; grpc's own classes are not subscriptable.
if TYPE_CHECKING:
    _UnaryUnary: TypeAlias = grpc.UnaryUnaryClientInterceptor[Message, Message]
    _UnaryStream: TypeAlias = grpc.UnaryStreamClientInterceptor[Message, Message]
    _StreamUnary: TypeAlias = grpc.StreamUnaryClientInterceptor[Message, Message]
    _StreamStream: TypeAlias = grpc.StreamStreamClientInterceptor[Message, Message]
    _AioUnaryUnaryBase: TypeAlias = grpc.aio.UnaryUnaryClientInterceptor[Message, Message]
    _AioUnaryStreamBase: TypeAlias = grpc.aio.UnaryStreamClientInterceptor[Message, Message]
    _AioStreamUnaryBase: TypeAlias = grpc.aio.StreamUnaryClientInterceptor[Message, Message]
    _AioStreamStreamBase: TypeAlias = grpc.aio.StreamStreamClientInterceptor[Message, Message]
else:
    _UnaryUnary, _UnaryStream = grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor
    _StreamUnary, _StreamStream = grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor
    _AioUnaryUnaryBase = grpc.aio.UnaryUnaryClientInterceptor
    _AioUnaryStreamBase = grpc.aio.UnaryStreamClientInterceptor
    _AioStreamUnaryBase = grpc.aio.StreamUnaryClientInterceptor
    _AioStreamStreamBase = grpc.aio.StreamStreamClientInterceptor

_Future: TypeAlias = "grpc.CallFuture[Message]"
_Iterator: TypeAlias = "grpc.CallIterator[Message]"
_CallT = TypeVar("_CallT")


class RoutingInterceptor(_UnaryUnary, _UnaryStream, _StreamUnary, _StreamStream):
    """For the blocking client: ``grpc.intercept_channel(channel, RoutingInterceptor())``."""

    def intercept_unary_unary(self, continuation: Callable[[grpc.ClientCallDetails, Message], _Future],
                              details: grpc.ClientCallDetails, request: Message) -> _Future:
        return continuation(_details(details, routing_task(request)), request)

    def intercept_unary_stream(self, continuation: Callable[[grpc.ClientCallDetails, Message], _Iterator],
                               details: grpc.ClientCallDetails, request: Message) -> _Iterator:
        return continuation(_details(details, routing_task(request)), request)

    def intercept_stream_unary(  # type: ignore[override]  # grpc-stubs: the continuation takes the iterator
            self, continuation: Callable[[grpc.ClientCallDetails, Iterator[Message]], _Future],
            details: grpc.ClientCallDetails, requests: Iterator[Message]) -> _Future:
        task, rest = _peek(requests)
        return continuation(_details(details, task), rest)

    def intercept_stream_stream(  # type: ignore[override]  # grpc-stubs: the continuation takes the iterator
            self, continuation: Callable[[grpc.ClientCallDetails, Iterator[Message]], _Iterator],
            details: grpc.ClientCallDetails, requests: Iterator[Message]) -> _Iterator:
        task, rest = _peek(requests)
        return continuation(_details(details, task), rest)


# -- asyncio -------------------------------------------------------------------------------------
# grpc-stubs type an aio interceptor's continuation as returning the call, and a streaming one's as
# taking one request; grpc calls a coroutine function that takes the request (or request iterator)
# and returns the call. The overrides below say what grpc does (hence their ``type: ignore[override]``).

_AioRequests: TypeAlias = "AsyncIterable[Message] | Iterable[Message] | None"
_AioCall: TypeAlias = "Callable[[grpc.aio.ClientCallDetails, Message], Awaitable[_CallT]]"
_AioStreamCall: TypeAlias = "Callable[[grpc.aio.ClientCallDetails, _AioRequests], Awaitable[_CallT]]"


def _aio_details(details: grpc.aio.ClientCallDetails, task: str) -> grpc.aio.ClientCallDetails:
    if not task:
        return details
    metadata = grpc.aio.Metadata(*(details.metadata or ()), (HEADER, task))
    return grpc.aio.ClientCallDetails(details.method, details.timeout, metadata, details.credentials,
                                      details.wait_for_ready)


async def _apeek(requests: _AioRequests) -> tuple[str, _AioRequests]:
    """The task the first request names, and all the requests still to send (sync or async)."""
    if requests is None:
        return "", None
    if not isinstance(requests, AsyncIterable):
        return _peek(requests)
    it = requests.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        return "", _empty()

    async def chained() -> AsyncIterator[Message]:
        yield first
        async for item in it:
            yield item

    return routing_task(first), chained()


async def _empty() -> AsyncIterator[Message]:
    return
    yield


class _AioUnaryUnary(_AioUnaryUnaryBase):
    async def intercept_unary_unary(  # type: ignore[override]  # see above
            self, continuation: _AioCall[grpc.aio.UnaryUnaryCall[Message, Message]],
            details: grpc.aio.ClientCallDetails, request: Message) -> grpc.aio.UnaryUnaryCall[Message, Message]:
        return await continuation(_aio_details(details, routing_task(request)), request)


class _AioUnaryStream(_AioUnaryStreamBase):
    async def intercept_unary_stream(  # type: ignore[override]  # see above
            self, continuation: _AioCall[grpc.aio.UnaryStreamCall[Message, Message]],
            details: grpc.aio.ClientCallDetails, request: Message) -> grpc.aio.UnaryStreamCall[Message, Message]:
        return await continuation(_aio_details(details, routing_task(request)), request)


class _AioStreamUnary(_AioStreamUnaryBase):
    async def intercept_stream_unary(  # type: ignore[override]  # see above
            self, continuation: _AioStreamCall[grpc.aio.StreamUnaryCall[Message, Message]],
            details: grpc.aio.ClientCallDetails, requests: _AioRequests) -> grpc.aio.StreamUnaryCall[Message, Message]:
        task, rest = await _apeek(requests)
        return await continuation(_aio_details(details, task), rest)


class _AioStreamStream(_AioStreamStreamBase):
    async def intercept_stream_stream(  # type: ignore[override]  # see above
            self, continuation: _AioStreamCall[grpc.aio.StreamStreamCall[Message, Message]],
            details: grpc.aio.ClientCallDetails, requests: _AioRequests
    ) -> grpc.aio.StreamStreamCall[Message, Message]:
        task, rest = await _apeek(requests)
        return await continuation(_aio_details(details, task), rest)


def aio_interceptors() -> list[grpc.aio.ClientInterceptor]:
    """For ``grpc.aio.*_channel(..., interceptors=aio_interceptors())``."""
    # grpc-stubs' aio.ClientInterceptor is a placeholder no interceptor class derives from.
    return [_AioUnaryUnary(), _AioUnaryStream(), _AioStreamUnary(), _AioStreamStream()]  # type: ignore[list-item]


__all__ = ["RoutingInterceptor", "aio_interceptors", "routing_task", "HEADER"]

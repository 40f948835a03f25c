"""Client side of fleet routing: every call that concerns a task carries ``x-executor-task``.

A gRPC client interceptor, installed where a client creates its channel: it derives the header
from the request itself (``task_id``; the ``open`` of a Pty stream; the first chunk of PutArchive;
the task part of a process or approval id, ``<id>@<task_id>``), so a proxy routes the call to the
task's owner (executor.placement, docs/operations.md). Calls that name no task get no header.
Imports nothing of the server.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import grpc.aio

from executor.placement import HEADER, task_of

_FIELDS: dict[Any, tuple[str, str] | None] = {}  # message descriptor -> (kind, field name)


def routing_task(request: Any) -> str:
    """The task a request concerns ("" when none): what ``x-executor-task`` carries."""
    descriptor = getattr(request, "DESCRIPTOR", None)
    if descriptor is None:
        return ""
    how = _FIELDS.get(descriptor, False)
    if how is False:
        names = descriptor.fields_by_name
        how = next(((kind, name) for kind, name in (("task", "task_id"), ("id", "process_id"), ("id", "approval_id"),
                                                     ("open", "open")) if name in names), None)
        _FIELDS[descriptor] = how
    if how is None:
        return ""
    kind, name = how
    if kind == "task":
        return getattr(request, name)
    if kind == "id":
        return task_of(getattr(request, name))
    return request.open.task_id if request.HasField("open") else ""


def _details(details: grpc.ClientCallDetails, task: str) -> grpc.ClientCallDetails:
    if not task:
        return details
    metadata = [*(details.metadata or ()), (HEADER, task)]
    return _Details(details.method, details.timeout, metadata, details.credentials,
                    getattr(details, "wait_for_ready", None), getattr(details, "compression", None))


class _Details(grpc.ClientCallDetails):
    def __init__(self, method, timeout, metadata, credentials, wait_for_ready, compression) -> None:
        self.method, self.timeout, self.metadata = method, timeout, metadata
        self.credentials, self.wait_for_ready, self.compression = credentials, wait_for_ready, compression


def _peek(requests: Iterator) -> tuple[str, Iterator]:
    it = iter(requests)
    try:
        first = next(it)
    except StopIteration:
        return "", iter(())
    return routing_task(first), itertools.chain((first,), it)


class RoutingInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
                         grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """For the blocking client: ``grpc.intercept_channel(channel, RoutingInterceptor())``."""

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(_details(details, routing_task(request)), request)

    def intercept_unary_stream(self, continuation, details, request):
        return continuation(_details(details, routing_task(request)), request)

    def intercept_stream_unary(self, continuation, details, requests):
        task, requests = _peek(requests)
        return continuation(_details(details, task), requests)

    def intercept_stream_stream(self, continuation, details, requests):
        task, requests = _peek(requests)
        return continuation(_details(details, task), requests)


async def _apeek(requests) -> tuple[str, Any]:
    if requests is None:
        return "", None
    if not hasattr(requests, "__aiter__"):
        return _peek(requests)
    it = requests.__aiter__()
    try:
        first = await it.__anext__()
    except StopAsyncIteration:
        return "", _empty()

    async def chained() -> AsyncIterator:
        yield first
        async for item in it:
            yield item

    return routing_task(first), chained()


async def _empty() -> AsyncIterator:
    return
    yield


class _AioUnaryUnary(grpc.aio.UnaryUnaryClientInterceptor):
    async def intercept_unary_unary(self, continuation, details, request):
        return await continuation(_details(details, routing_task(request)), request)


class _AioUnaryStream(grpc.aio.UnaryStreamClientInterceptor):
    async def intercept_unary_stream(self, continuation, details, request):
        return await continuation(_details(details, routing_task(request)), request)


class _AioStreamUnary(grpc.aio.StreamUnaryClientInterceptor):
    async def intercept_stream_unary(self, continuation, details, requests):
        task, requests = await _apeek(requests)
        return await continuation(_details(details, task), requests)


class _AioStreamStream(grpc.aio.StreamStreamClientInterceptor):
    async def intercept_stream_stream(self, continuation, details, requests):
        task, requests = await _apeek(requests)
        return await continuation(_details(details, task), requests)


def aio_interceptors() -> list:
    """For ``grpc.aio.*_channel(..., interceptors=aio_interceptors())``."""
    return [_AioUnaryUnary(), _AioUnaryStream(), _AioStreamUnary(), _AioStreamStream()]


__all__ = ["RoutingInterceptor", "aio_interceptors", "routing_task", "HEADER"]

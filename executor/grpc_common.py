"""What the gRPC adapters share: core types to messages, and CoreError to a status."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import grpc

from executor.approval import Decision
from executor.approvals import ApprovalDecision
from executor.errors import CoreError
from executor.events import ExitInfo
from executor.v1 import executor_pb2 as pb

EXIT_STATUS = {
    "completed": pb.EXIT_STATUS_COMPLETED,
    "timed_out": pb.EXIT_STATUS_TIMED_OUT,
    "cancelled": pb.EXIT_STATUS_CANCELLED,
    "denied": pb.EXIT_STATUS_DENIED,
    "backend_error": pb.EXIT_STATUS_BACKEND_ERROR,
}
GATE_DECISION = {Decision.ALLOW: pb.GATE_DECISION_ALLOW, Decision.ASK: pb.GATE_DECISION_ASK,
                 Decision.DENY: pb.GATE_DECISION_DENY}
APPROVAL_DECISION = {
    pb.APPROVAL_DECISION_APPROVE_ONCE: ApprovalDecision.APPROVE_ONCE,
    pb.APPROVAL_DECISION_APPROVE_SESSION: ApprovalDecision.APPROVE_SESSION,
    pb.APPROVAL_DECISION_APPROVE_ALWAYS: ApprovalDecision.APPROVE_ALWAYS,
    pb.APPROVAL_DECISION_DENY: ApprovalDecision.DENY,
}
APPROVAL_DECISION_PB = {v: k for k, v in APPROVAL_DECISION.items()}


def exit_pb(info: ExitInfo) -> pb.Exit:
    t = info.timings
    return pb.Exit(
        exit_code=info.exit_code, status=EXIT_STATUS[info.status], cwd=info.cwd, duration_seconds=info.duration,
        stdout_bytes=info.stdout_bytes, stderr_bytes=info.stderr_bytes, truncated=info.truncated,
        message=info.message, rule=info.rule, backend=info.backend,
        timings=pb.StageTimings(gate_seconds=t.gate, approval_seconds=t.approval, queue_seconds=t.queue,
                                spawn_seconds=t.spawn, first_byte_seconds=t.first_byte, run_seconds=t.run),
    )


T = TypeVar("T")


async def with_heartbeats(stream: AsyncIterator[T], seconds: float, beat: Callable[[], T]) -> AsyncIterator[T]:
    """The items of ``stream``, plus ``beat()`` whenever it has been quiet for ``seconds``: a long
    quiet command (or an approval wait) keeps a proxy's idle timer from ending the call. Closing
    this generator ends the pending read of ``stream`` (cancelled) before returning."""
    it = stream.__aiter__()
    pending: asyncio.Future | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(it.__anext__())
            done, _ = await asyncio.wait((pending,), timeout=seconds)
            if not done:
                yield beat()
                continue
            fut, pending = pending, None
            try:
                item = fut.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None and not pending.done():
            pending.cancel()
            with contextlib.suppress(BaseException):
                await pending


async def _abort(context: grpc.aio.ServicerContext, exc: CoreError) -> None:
    await context.abort(getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN), exc.message)


__all__ = ["with_heartbeats", "EXIT_STATUS", "GATE_DECISION", "APPROVAL_DECISION", "APPROVAL_DECISION_PB", "exit_pb", "_abort"]

"""What the gRPC adapters share: core types to messages, CoreError to a status, the callers' check."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
from collections.abc import AsyncIterator, Callable
from typing import NoReturn, TypeVar

import grpc

from executor.admission import Caller
from executor.approval import Decision
from executor.approvals import ApprovalDecision
from executor.config import Config
from executor.errors import CoreError
from executor.events import ExitInfo
from executor.service import Executor
from executor.v1 import executor_pb2 as pb

Req = TypeVar("Req")
Resp = TypeVar("Resp")

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
    pending: asyncio.Future[T] | None = None
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


async def _abort(context: grpc.aio.ServicerContext[Req, Resp], exc: CoreError) -> NoReturn:
    """End the call with the status ``exc.code`` names (UNKNOWN when it names none) and its message."""
    await context.abort(getattr(grpc.StatusCode, exc.code, grpc.StatusCode.UNKNOWN), exc.message)


class Auth:
    """Bearer tokens with roles. No tokens configured: the unix-socket owner holds every role."""

    def __init__(self, config: Config) -> None:
        self.tokens = [(t.secret().encode(), t.name, frozenset(t.roles)) for t in config.auth.tokens]

    @property
    def enabled(self) -> bool:
        return bool(self.tokens)

    async def caller(self, context: grpc.aio.ServicerContext[Req, Resp], role: str) -> Caller:
        """Who calls, from the ``authorization`` metadata; the call ends UNAUTHENTICATED or
        PERMISSION_DENIED unless the token holds ``role`` (or admin)."""
        if not self.tokens:
            return Caller()
        header = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization" and isinstance(value, str):  # bytes only for keys ending -bin
                header = value
        if not header.startswith("Bearer "):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "missing credentials: send metadata `authorization: Bearer <token>`")
        presented = header[len("Bearer "):].strip().encode()
        match = None
        for secret, name, roles in self.tokens:  # compare with every token: constant time overall
            if hmac.compare_digest(secret, presented):
                match = (name, roles)
        if match is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "invalid token")
        name, roles = match
        if role not in roles and "admin" not in roles:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED,
                                f"token {name!r} lacks the {role!r} role needed for this call")
        return Caller(name, roles)


class ServicerPart:
    """What every part of the daemon's servicer holds: the core, and the callers' check."""

    def __init__(self, core: Executor, auth: Auth) -> None:
        self.core = core
        self.auth = auth

    async def _abort(self, context: grpc.aio.ServicerContext[Req, Resp], exc: CoreError) -> NoReturn:
        """End the call with ``exc``'s status and its message, redacted like output: a message may
        quote what a command made (a link's target, a path, a file's words)."""
        message = self.core.redactor.scrub(exc.message.encode(errors="surrogateescape"))
        await _abort(context, CoreError(exc.code, message.decode(errors="replace")))


__all__ = ["with_heartbeats", "EXIT_STATUS", "GATE_DECISION", "APPROVAL_DECISION", "APPROVAL_DECISION_PB", "exit_pb",
           "_abort", "Auth", "ServicerPart"]

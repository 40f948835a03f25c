"""The gRPC adapter for the ``Pty`` stream.

The first message must be ``open``; then ``data``, ``resize`` and ``signal`` go to the
terminal while its output comes back as ``data`` and, last, ``exit``. The client
closing its sending side ends nothing; cancelling the call ends the program's tree.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator

import grpc
from grpc.aio import ServicerContext

from executor.admission import PtyOpenParams
from executor.errors import CoreError
from executor.events import ApprovalNeeded, Finished, Output
from executor.grpc_common import ServicerPart, exit_pb, with_heartbeats
from executor.pty import PtySession
from executor.v1 import executor_pb2 as pb

log = logging.getLogger("executor.pty")


async def _feed(session: PtySession, requests: AsyncIterator[pb.PtyInput]) -> None:
    """Apply the client's input to the terminal until its sending side closes."""
    async for msg in requests:
        kind = msg.WhichOneof("input")
        try:
            if kind == "data":
                await session.write(msg.data)
            elif kind == "resize":
                await session.resize(msg.resize.rows, msg.resize.cols)
            elif kind == "signal":
                await session.signal(msg.signal)
            elif kind == "open":
                log.info("a second `open` on a Pty stream is ignored")
        except CoreError as exc:  # a bad resize or signal name: reported, the session goes on
            log.info("terminal input refused: %s", exc.message)


class PtyServicer(ServicerPart):
    """Mixed into the daemon's servicer (``executor.server.ExecutorServicer``)."""

    async def Pty(self, request_iterator: AsyncIterable[pb.PtyInput],
                  context: ServicerContext[pb.PtyInput, pb.PtyOutput]) -> AsyncIterator[pb.PtyOutput]:
        caller = await self.auth.caller(context, "exec")
        requests = request_iterator.__aiter__()
        try:
            first = await requests.__anext__()
        except StopAsyncIteration:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of a Pty stream must be `open`")
        if first.WhichOneof("input") != "open":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the first message of a Pty stream must be `open`")
        o = first.open
        session = self.core.pty.open(PtyOpenParams(task_id=o.task_id, command=o.command, backend=o.backend,
                                                   rows=o.size.rows, cols=o.size.cols, env=dict(o.env),
                                                   workdir=o.workdir), caller)
        feeder = asyncio.ensure_future(_feed(session, requests))
        # The input side fails when the call ends (cancelled, deadline): that is not news.
        feeder.add_done_callback(lambda f: f.cancelled() or f.exception())
        events: AsyncIterator[ApprovalNeeded | Output | Finished | None] = session.run()
        beat = self.core.config.streams.heartbeat_seconds
        if beat:  # keeps a quiet terminal alive through proxies (streams.heartbeat_seconds)
            events = with_heartbeats(events, beat, lambda: None)
        try:
            async for event in events:
                if event is None:
                    yield pb.PtyOutput(heartbeat=pb.Heartbeat(sent_at=time.time()))
                elif isinstance(event, Output):
                    yield pb.PtyOutput(data=event.data)
                elif isinstance(event, ApprovalNeeded):
                    yield pb.PtyOutput(approval_required=pb.ApprovalRequired(
                        approval_id=event.approval_id, rule=event.rule, reason=event.reason, segment=event.segment,
                        timeout_seconds=event.timeout))
                elif isinstance(event, Finished):
                    yield pb.PtyOutput(exit=exit_pb(event.exit))
        except CoreError as exc:
            await self._abort(context, exc)
        finally:
            feeder.cancel()


__all__ = ["PtyServicer"]

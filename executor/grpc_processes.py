"""The gRPC adapter for background processes: StartProcess ... SignalProcess.

A thin layer: auth, request -> ``executor.processes.ProcessManager`` call -> message.
``CoreError`` becomes a status with its message (NOT_FOUND, RESOURCE_EXHAUSTED, ...).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpc.aio import ServicerContext

from executor.admission import StartParams
from executor.errors import CoreError
from executor.grpc_common import ServicerPart, with_heartbeats
from executor.processes import EXITED, KILLED, LOST, RUNNING, Chunk, ManagedProcess, ProcessManager
from executor.v1 import executor_pb2 as pb

STATE = {
    RUNNING: pb.PROCESS_STATE_RUNNING,
    EXITED: pb.PROCESS_STATE_EXITED,
    KILLED: pb.PROCESS_STATE_KILLED,
    LOST: pb.PROCESS_STATE_LOST,
}


def process_pb(mp: ManagedProcess) -> pb.ProcessInfo:
    return pb.ProcessInfo(
        process_id=mp.id, task_id=mp.task_id, command=mp.command, state=STATE[mp.state], exit_code=mp.exit_code,
        signal=mp.signal, started_at=mp.started_at, ended_at=mp.ended_at, backend=mp.backend,
        stdout_bytes=mp.logs["stdout"].end, stderr_bytes=mp.logs["stderr"].end, pty=mp.pty, message=mp.message)


class ProcessServicer(ServicerPart):
    """Mixed into the daemon's servicer (``executor.server.ExecutorServicer``)."""

    def _manager(self) -> ProcessManager:
        return self.core.processes

    async def StartProcess(self, request: pb.StartProcessRequest,
                           context: ServicerContext[pb.StartProcessRequest, pb.ProcessInfo]) -> pb.ProcessInfo:
        caller = await self.auth.caller(context, "exec")
        params = StartParams(task_id=request.task_id, command=request.command, workdir=request.workdir,
                             env=dict(request.env), backend=request.backend, pty=request.pty,
                             rows=request.size.rows, cols=request.size.cols, merge_stderr=request.merge_stderr)
        try:
            mp = await self._manager().start_process(params, caller)
        except CoreError as exc:
            await self._abort(context, exc)
        return process_pb(mp)

    async def ListProcesses(self, request: pb.ListProcessesRequest,
                            context: ServicerContext[pb.ListProcessesRequest, pb.ListProcessesResponse]
                            ) -> pb.ListProcessesResponse:
        await self.auth.caller(context, "exec")
        try:
            procs = self._manager().list(request.task_id)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.ListProcessesResponse(processes=[process_pb(p) for p in procs])

    async def GetProcess(self, request: pb.GetProcessRequest,
                         context: ServicerContext[pb.GetProcessRequest, pb.ProcessInfo]) -> pb.ProcessInfo:
        await self.auth.caller(context, "exec")
        try:
            mp = self._manager().get(request.process_id)
        except CoreError as exc:
            await self._abort(context, exc)
        return process_pb(mp)

    async def ReadProcessOutput(self, request: pb.ReadProcessOutputRequest,
                                context: ServicerContext[pb.ReadProcessOutputRequest, pb.ReadProcessOutputResponse]
                                ) -> pb.ReadProcessOutputResponse:
        await self.auth.caller(context, "exec")
        try:
            mp, chunk, eof = self._manager().read(request.process_id, request.offset, request.max_bytes,
                                                  request.stream)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.ReadProcessOutputResponse(data=chunk.data, offset=chunk.offset, next_offset=chunk.next_offset,
                                            eof=eof, rotated=chunk.rotated, state=STATE[mp.state])

    async def StreamProcessOutput(self, request: pb.StreamProcessOutputRequest,
                                  context: ServicerContext[pb.StreamProcessOutputRequest, pb.ProcessOutputChunk]
                                  ) -> AsyncIterator[pb.ProcessOutputChunk]:
        await self.auth.caller(context, "exec")
        chunks: AsyncIterator[Chunk | None] = self._manager().follow(request.process_id, request.offset,
                                                                     request.stream)
        beat = self.core.config.streams.heartbeat_seconds
        if beat:  # an empty chunk on a quiet stream keeps it alive through proxies
            chunks = with_heartbeats(chunks, beat, lambda: None)
        at = request.offset
        try:
            async for chunk in chunks:
                if chunk is None:
                    yield pb.ProcessOutputChunk(offset=at, next_offset=at, heartbeat=True)
                    continue
                at = chunk.next_offset
                msg = pb.ProcessOutputChunk(data=chunk.data, offset=chunk.offset, next_offset=chunk.next_offset,
                                            rotated=chunk.rotated)
                if chunk.exited is not None:
                    msg.exited.CopyFrom(process_pb(chunk.exited))
                yield msg
        except CoreError as exc:
            await self._abort(context, exc)

    async def WaitProcess(self, request: pb.WaitProcessRequest,
                          context: ServicerContext[pb.WaitProcessRequest, pb.ProcessInfo]) -> pb.ProcessInfo:
        await self.auth.caller(context, "exec")
        try:
            mp = await self._manager().wait(request.process_id, request.timeout_seconds)
        except CoreError as exc:
            await self._abort(context, exc)
        return process_pb(mp)

    async def WriteProcessStdin(self, request: pb.WriteProcessStdinRequest,
                                context: ServicerContext[pb.WriteProcessStdinRequest, pb.WriteProcessStdinResponse]
                                ) -> pb.WriteProcessStdinResponse:
        await self.auth.caller(context, "exec")
        try:
            n = await self._manager().write_stdin(request.process_id, request.data, request.close)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.WriteProcessStdinResponse(bytes_written=n)

    async def SignalProcess(self, request: pb.SignalProcessRequest,
                            context: ServicerContext[pb.SignalProcessRequest, pb.ProcessInfo]) -> pb.ProcessInfo:
        await self.auth.caller(context, "exec")
        try:
            mp = await self._manager().signal(request.process_id, request.signal)
        except CoreError as exc:
            await self._abort(context, exc)
        return process_pb(mp)


__all__ = ["ProcessServicer", "process_pb"]

"""The Executor service's gRPC stubs with their types: what the generated ``executor_pb2_grpc``
stub holds (grpc_tools writes no types for it), as the blocking and the asyncio channel make them.

``stub(channel)`` and ``async_stub(channel)`` build the generated ``ExecutorStub``; mypy checks that it
has every method named here. Imports nothing of the server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import grpc
import grpc.aio

from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc


class Stub(Protocol):
    """``ExecutorStub`` on a blocking channel."""

    Exec: grpc.UnaryStreamMultiCallable[pb.ExecRequest, pb.ExecEvent]
    Run: grpc.UnaryUnaryMultiCallable[pb.ExecRequest, pb.RunResult]
    CloseTask: grpc.UnaryUnaryMultiCallable[pb.CloseTaskRequest, pb.CloseTaskResponse]
    ListTasks: grpc.UnaryUnaryMultiCallable[pb.ListTasksRequest, pb.ListTasksResponse]
    ResolveApproval: grpc.UnaryUnaryMultiCallable[pb.ResolveApprovalRequest, pb.ResolveApprovalResponse]
    WatchApprovals: grpc.UnaryStreamMultiCallable[pb.WatchApprovalsRequest, pb.PendingApproval]
    CheckCommand: grpc.UnaryUnaryMultiCallable[pb.CheckCommandRequest, pb.Verdict]
    ShareApproval: grpc.UnaryUnaryMultiCallable[pb.ShareApprovalRequest, pb.ShareApprovalResponse]
    StartProcess: grpc.UnaryUnaryMultiCallable[pb.StartProcessRequest, pb.ProcessInfo]
    ListProcesses: grpc.UnaryUnaryMultiCallable[pb.ListProcessesRequest, pb.ListProcessesResponse]
    GetProcess: grpc.UnaryUnaryMultiCallable[pb.GetProcessRequest, pb.ProcessInfo]
    ReadProcessOutput: grpc.UnaryUnaryMultiCallable[pb.ReadProcessOutputRequest, pb.ReadProcessOutputResponse]
    StreamProcessOutput: grpc.UnaryStreamMultiCallable[pb.StreamProcessOutputRequest, pb.ProcessOutputChunk]
    WaitProcess: grpc.UnaryUnaryMultiCallable[pb.WaitProcessRequest, pb.ProcessInfo]
    WriteProcessStdin: grpc.UnaryUnaryMultiCallable[pb.WriteProcessStdinRequest, pb.WriteProcessStdinResponse]
    SignalProcess: grpc.UnaryUnaryMultiCallable[pb.SignalProcessRequest, pb.ProcessInfo]
    Pty: grpc.StreamStreamMultiCallable[pb.PtyInput, pb.PtyOutput]
    PutArchive: grpc.StreamUnaryMultiCallable[pb.PutArchiveChunk, pb.PutArchiveResponse]
    GetArchive: grpc.UnaryStreamMultiCallable[pb.GetArchiveRequest, pb.ArchiveChunk]
    ReadFile: grpc.UnaryStreamMultiCallable[pb.ReadFileRequest, pb.FileChunk]
    WriteFile: grpc.StreamUnaryMultiCallable[pb.WriteFileChunk, pb.WriteFileResponse]
    ListBackends: grpc.UnaryUnaryMultiCallable[pb.ListBackendsRequest, pb.ListBackendsResponse]


class AsyncStub(Protocol):
    """``ExecutorStub`` on an asyncio channel."""

    Exec: grpc.aio.UnaryStreamMultiCallable[pb.ExecRequest, pb.ExecEvent]
    Run: grpc.aio.UnaryUnaryMultiCallable[pb.ExecRequest, pb.RunResult]
    CloseTask: grpc.aio.UnaryUnaryMultiCallable[pb.CloseTaskRequest, pb.CloseTaskResponse]
    ListTasks: grpc.aio.UnaryUnaryMultiCallable[pb.ListTasksRequest, pb.ListTasksResponse]
    ResolveApproval: grpc.aio.UnaryUnaryMultiCallable[pb.ResolveApprovalRequest, pb.ResolveApprovalResponse]
    WatchApprovals: grpc.aio.UnaryStreamMultiCallable[pb.WatchApprovalsRequest, pb.PendingApproval]
    CheckCommand: grpc.aio.UnaryUnaryMultiCallable[pb.CheckCommandRequest, pb.Verdict]
    ShareApproval: grpc.aio.UnaryUnaryMultiCallable[pb.ShareApprovalRequest, pb.ShareApprovalResponse]
    StartProcess: grpc.aio.UnaryUnaryMultiCallable[pb.StartProcessRequest, pb.ProcessInfo]
    ListProcesses: grpc.aio.UnaryUnaryMultiCallable[pb.ListProcessesRequest, pb.ListProcessesResponse]
    GetProcess: grpc.aio.UnaryUnaryMultiCallable[pb.GetProcessRequest, pb.ProcessInfo]
    ReadProcessOutput: grpc.aio.UnaryUnaryMultiCallable[pb.ReadProcessOutputRequest, pb.ReadProcessOutputResponse]
    StreamProcessOutput: grpc.aio.UnaryStreamMultiCallable[pb.StreamProcessOutputRequest, pb.ProcessOutputChunk]
    WaitProcess: grpc.aio.UnaryUnaryMultiCallable[pb.WaitProcessRequest, pb.ProcessInfo]
    WriteProcessStdin: grpc.aio.UnaryUnaryMultiCallable[pb.WriteProcessStdinRequest, pb.WriteProcessStdinResponse]
    SignalProcess: grpc.aio.UnaryUnaryMultiCallable[pb.SignalProcessRequest, pb.ProcessInfo]
    Pty: grpc.aio.StreamStreamMultiCallable[pb.PtyInput, pb.PtyOutput]
    PutArchive: grpc.aio.StreamUnaryMultiCallable[pb.PutArchiveChunk, pb.PutArchiveResponse]
    GetArchive: grpc.aio.UnaryStreamMultiCallable[pb.GetArchiveRequest, pb.ArchiveChunk]
    ReadFile: grpc.aio.UnaryStreamMultiCallable[pb.ReadFileRequest, pb.FileChunk]
    WriteFile: grpc.aio.StreamUnaryMultiCallable[pb.WriteFileChunk, pb.WriteFileResponse]
    ListBackends: grpc.aio.UnaryUnaryMultiCallable[pb.ListBackendsRequest, pb.ListBackendsResponse]


# The generated class, typed: its __init__ takes either kind of channel and sets one multicallable per
# method (the channel's own kind); mypy checks its attributes against the protocols.
stub: Callable[[grpc.Channel], Stub] = pb_grpc.ExecutorStub
async_stub: Callable[[grpc.aio.Channel], AsyncStub] = pb_grpc.ExecutorStub

__all__ = ["Stub", "AsyncStub", "stub", "async_stub"]

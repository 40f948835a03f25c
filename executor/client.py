"""The Python client: talks gRPC to a daemon; imports nothing of the server.

    from executor.client import Client
    with Client("unix:///home/me/.local/state/executor/executor.sock") as c:
        result = c.run("my-task", "ls -la")
        print(result.exit.exit_code, result.stdout.decode())
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping

import grpc

from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc


class ExecutorError(Exception):
    """A call failed; ``code`` is the gRPC status, the message is the server's."""

    def __init__(self, code: grpc.StatusCode | None, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Unavailable(ExecutorError): ...
class InvalidArgument(ExecutorError): ...
class NotFound(ExecutorError): ...
class Unauthenticated(ExecutorError): ...
class PermissionDenied(ExecutorError): ...
class ResourceExhausted(ExecutorError): ...
class FailedPrecondition(ExecutorError): ...
class DeadlineExceeded(ExecutorError): ...


_ERRORS = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhausted,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
}


def error_from(exc: grpc.RpcError) -> ExecutorError:
    code = exc.code() if hasattr(exc, "code") else None
    details = exc.details() if hasattr(exc, "details") else str(exc)
    return _ERRORS.get(code, ExecutorError)(code, details or str(code))


def default_target() -> str:
    if os.environ.get("EXECUTOR_TARGET"):
        return os.environ["EXECUTOR_TARGET"]
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return f"unix://{os.path.join(base, 'executor', 'executor.sock')}"


def exec_request(task_id: str, command: str, *, timeout: float = 0.0, workdir: str = "",
                 env: Mapping[str, str] | None = None, stdin: bytes = b"", backend: str = "", pty: bool = False,
                 idempotency_key: str = "", merge_stderr: bool = False) -> pb.ExecRequest:
    return pb.ExecRequest(task_id=task_id, command=command, timeout_seconds=timeout, workdir=workdir,
                          env=dict(env or {}), stdin=stdin, backend=backend, pty=pty,
                          idempotency_key=idempotency_key, merge_stderr=merge_stderr)


class Client:
    """A synchronous client. ``deadline`` (seconds) applies to each call."""

    def __init__(self, target: str | None = None, *, token: str | None = None,
                 credentials: grpc.ChannelCredentials | None = None, deadline: float | None = None) -> None:
        self.target = target or default_target()
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
        if credentials is not None:
            self.channel = grpc.secure_channel(self.target, credentials, options=opts)
        else:
            self.channel = grpc.insecure_channel(self.target, options=opts)
        self.stub = pb_grpc.ExecutorStub(self.channel)
        self.deadline = deadline

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.channel.close()

    def _call(self, method, request, timeout: float | None = None):
        try:
            return method(request, metadata=self._metadata, timeout=timeout or self.deadline)
        except grpc.RpcError as exc:
            raise error_from(exc) from None

    def exec(self, task_id: str, command: str, *, timeout: float = 0.0, rpc_timeout: float | None = None,
             **kwargs) -> Iterator[pb.ExecEvent]:
        """Yields ExecEvents: started, stdout/stderr chunks, approval_required, and last the exit."""
        stream = self.stub.Exec(exec_request(task_id, command, timeout=timeout, **kwargs), metadata=self._metadata,
                                timeout=rpc_timeout or self.deadline)
        try:
            yield from stream
        except grpc.RpcError as exc:
            raise error_from(exc) from None
        finally:
            stream.cancel()

    def run(self, task_id: str, command: str, *, timeout: float = 0.0, rpc_timeout: float | None = None,
            **kwargs) -> pb.RunResult:
        return self._call(self.stub.Run, exec_request(task_id, command, timeout=timeout, **kwargs), rpc_timeout)

    def close_task(self, task_id: str, remove_files: bool = False) -> pb.CloseTaskResponse:
        return self._call(self.stub.CloseTask, pb.CloseTaskRequest(task_id=task_id, remove_files=remove_files))

    def list_tasks(self) -> pb.ListTasksResponse:
        return self._call(self.stub.ListTasks, pb.ListTasksRequest())

    def list_backends(self) -> pb.ListBackendsResponse:
        return self._call(self.stub.ListBackends, pb.ListBackendsRequest())

    def check_command(self, command: str, task_id: str = "", backend: str = "") -> pb.Verdict:
        return self._call(self.stub.CheckCommand, pb.CheckCommandRequest(command=command, task_id=task_id,
                                                                         backend=backend))

    def resolve_approval(self, approval_id: str, decision: int, reason: str = "") -> pb.ResolveApprovalResponse:
        return self._call(self.stub.ResolveApproval, pb.ResolveApprovalRequest(approval_id=approval_id,
                                                                               decision=decision, reason=reason))

    def watch_approvals(self, task_id: str = "") -> Iterator[pb.PendingApproval]:
        stream = self.stub.WatchApprovals(pb.WatchApprovalsRequest(task_id=task_id), metadata=self._metadata)
        try:
            yield from stream
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise error_from(exc) from None
        finally:
            stream.cancel()

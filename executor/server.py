"""The gRPC adapter: executor.v1.Executor over ``executor.service.Executor``.

Each RPC checks the caller's token and role, converts the request, calls the core, and
converts the answer; ``CoreError`` becomes a gRPC status with its message. Health and
reflection are separate services and answer without a token.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

import grpc
from google.protobuf import symbol_database
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message
from grpc.aio import ServicerContext
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from executor import files
from executor.admission import ExecParams
from executor.config import Config, ConfigError, TLSConfig, secret_paths
from executor.errors import CoreError
from executor.events import ApprovalNeeded, Event, Finished, Output, Started
from executor.grpc_common import (APPROVAL_DECISION, APPROVAL_DECISION_PB, GATE_DECISION, Auth, Req, Resp,
                                  ServicerPart, exit_pb, with_heartbeats)
from executor.grpc_processes import ProcessServicer
from executor.grpc_pty import PtyServicer
from executor.service import Executor
from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from executor.observe import Metrics

log = logging.getLogger("executor.server")


def event_pb(event: Event) -> pb.ExecEvent:
    if isinstance(event, Output):
        return pb.ExecEvent(stdout=event.data) if event.stream == "stdout" else pb.ExecEvent(stderr=event.data)
    if isinstance(event, Started):
        return pb.ExecEvent(started=pb.ExecStarted(exec_id=event.exec_id, backend=event.backend, task_id=event.task_id))
    if isinstance(event, ApprovalNeeded):
        return pb.ExecEvent(approval_required=pb.ApprovalRequired(
            approval_id=event.approval_id, rule=event.rule, reason=event.reason, segment=event.segment,
            timeout_seconds=event.timeout))
    assert isinstance(event, Finished)
    return pb.ExecEvent(exit=exit_pb(event.exit))


async def _exec_events(stream: AsyncIterator[Event]) -> AsyncIterator[pb.ExecEvent]:
    async for event in stream:
        yield event_pb(event)


def _heartbeat() -> pb.ExecEvent:
    return pb.ExecEvent(heartbeat=pb.Heartbeat(sent_at=time.time()))


def exec_params(req: pb.ExecRequest) -> ExecParams:
    return ExecParams(task_id=req.task_id, command=req.command, workdir=req.workdir, env=dict(req.env),
                      timeout_seconds=req.timeout_seconds, stdin=req.stdin, backend=req.backend, pty=req.pty,
                      idempotency_key=req.idempotency_key, merge_stderr=req.merge_stderr)


def _deadline(context: ServicerContext[Req, Resp]) -> float | None:
    remaining: float | None = context.time_remaining()  # None without a deadline (the stubs say float)
    return None if remaining is None else time.monotonic() + remaining


_F = TypeVar("_F", bound=Callable[..., object])


def _checks_its_request(method: _F) -> _F:
    """Marks a servicer method that refuses a malformed request itself, so it is served unwrapped."""
    setattr(method, "checks_its_request", True)
    return method


class Servicer(ServicerPart, pb_grpc.ExecutorServicer):
    """The RPCs of executor.v1.Executor but the processes' and the terminal's."""

    # -- Exec / Run ------------------------------------------------------------------------

    @_checks_its_request  # the hottest call: no wrapping generator layer around its stream
    async def Exec(self, request: pb.ExecRequest | _Malformed,
                   context: ServicerContext[pb.ExecRequest, pb.ExecEvent]) -> AsyncIterator[pb.ExecEvent]:
        if isinstance(request, _Malformed):  # inline, not _refuse_malformed: the hottest call
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        caller = await self.auth.caller(context, "exec")
        try:
            stream = self.core.exec(exec_params(request), caller=caller, deadline=_deadline(context))
        except CoreError as exc:
            await self._abort(context, exc)
        beat = self.core.config.streams.heartbeat_seconds
        try:
            if beat:  # opt-in (streams.heartbeat_seconds): keeps quiet calls alive through proxies
                async for msg in with_heartbeats(_exec_events(stream), beat, _heartbeat):
                    yield msg
            else:
                async for event in stream:
                    yield event_pb(event)
        except CoreError as exc:
            await self._abort(context, exc)
        finally:
            await stream.aclose()  # a call that ends early (cancelled) kills its command now, not at GC

    async def Run(self, request: pb.ExecRequest, context: ServicerContext[pb.ExecRequest, pb.RunResult]
                  ) -> pb.RunResult:
        caller = await self.auth.caller(context, "exec")
        try:
            outcome = await self.core.run(exec_params(request), caller=caller, deadline=_deadline(context))
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.RunResult(stdout=outcome.stdout, stderr=outcome.stderr, exit=exit_pb(outcome.exit))

    # -- tasks ---------------------------------------------------------------------------

    async def CloseTask(self, request: pb.CloseTaskRequest,
                        context: ServicerContext[pb.CloseTaskRequest, pb.CloseTaskResponse]) -> pb.CloseTaskResponse:
        await self.auth.caller(context, "exec")
        try:
            existed, ended = await self.core.close_task(request.task_id, request.remove_files)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.CloseTaskResponse(existed=existed, processes_ended=ended)

    async def ListTasks(self, request: pb.ListTasksRequest,
                        context: ServicerContext[pb.ListTasksRequest, pb.ListTasksResponse]) -> pb.ListTasksResponse:
        await self.auth.caller(context, "exec")
        procs = self.core.processes
        tasks = [
            pb.TaskInfo(task_id=t.id, backend=t.backend_name, cwd=self.core.redactor.text(t.cwd), root=t.root, busy=t.busy,
                        running_processes=procs.running_count(t.id), created_at=t.created_at,
                        last_used_at=t.last_used, commands_run=t.commands_run,
                        shell_alive=bool(t.shell and t.shell.alive))
            for t in self.core.list_tasks()
        ]
        return pb.ListTasksResponse(tasks=tasks, idle_reaped=self.core.tasks.reaped)

    # -- backends --------------------------------------------------------------------------

    async def ListBackends(self, request: pb.ListBackendsRequest,
                           context: ServicerContext[pb.ListBackendsRequest, pb.ListBackendsResponse]
                           ) -> pb.ListBackendsResponse:
        await self.auth.caller(context, "exec")
        out = []
        for status in await self.core.list_backends():
            caps = status.backend.capabilities
            out.append(pb.BackendInfo(
                name=status.name, kind=status.kind, available=status.health.available, reason=status.health.reason,
                is_default=status.is_default,
                capabilities=pb.Capabilities(pty=caps.pty, resize=caps.resize, signals=caps.signals, stdin=caps.stdin,
                                             background=caps.background, persistent_shell=caps.persistent_shell,
                                             file_transfer=caps.file_transfer, network_policy=caps.network_policy,
                                             streaming=caps.streaming),
                policy={k: str(v) for k, v in status.backend.policy().items()},
            ))
        return pb.ListBackendsResponse(backends=out, default_backend=self.core.config.backend)

    # -- the gate --------------------------------------------------------------------------

    async def CheckCommand(self, request: pb.CheckCommandRequest,
                           context: ServicerContext[pb.CheckCommandRequest, pb.Verdict]) -> pb.Verdict:
        await self.auth.caller(context, "exec")
        try:
            v = await self.core.check_command(request.command, request.task_id, request.backend)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.Verdict(decision=GATE_DECISION[v.decision], rule=v.rule, reason=v.reason, segment=v.segment)

    async def ResolveApproval(self, request: pb.ResolveApprovalRequest,
                              context: ServicerContext[pb.ResolveApprovalRequest, pb.ResolveApprovalResponse]
                              ) -> pb.ResolveApprovalResponse:
        caller = await self.auth.caller(context, "approve")
        decision = APPROVAL_DECISION.get(request.decision)
        if decision is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                "decision must be APPROVE_ONCE, APPROVE_SESSION, APPROVE_ALWAYS or DENY")
        try:
            self.core.resolve_approval(request.approval_id, decision, request.reason, caller)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.ResolveApprovalResponse(resolved=True)

    async def ShareApproval(self, request: pb.ShareApprovalRequest,
                            context: ServicerContext[pb.ShareApprovalRequest, pb.ShareApprovalResponse]
                            ) -> pb.ShareApprovalResponse:
        caller = await self.auth.caller(context, "approve")
        try:
            stored = self.core.share_approval(request.command, request.backend, request.rule, request.approval_id,
                                              request.reason, caller)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.ShareApprovalResponse(stored=stored)

    async def WatchApprovals(self, request: pb.WatchApprovalsRequest,
                             context: ServicerContext[pb.WatchApprovalsRequest, pb.PendingApproval]
                             ) -> AsyncIterator[pb.PendingApproval]:
        await self.auth.caller(context, "approve")
        try:
            events = self.core.watch_approvals(request.task_id)
        except CoreError as exc:
            await self._abort(context, exc)
        async for ev in events:
            p = ev.pending
            yield pb.PendingApproval(
                approval_id=p.approval_id, task_id=p.task_id, command=p.command, rule=p.rule, reason=p.reason,
                segment=p.segment, backend=p.backend, created_at=p.created_at, expires_at=p.expires_at,
                resolved=ev.resolved,
                decision=pb.APPROVAL_DECISION_UNSPECIFIED if ev.decision is None else APPROVAL_DECISION_PB[ev.decision])
        # The watch ends only when the daemon shuts down (what was pending went out denied first):
        # a status that says so, at once, instead of holding the server's stop until its grace ends.
        await context.abort(grpc.StatusCode.UNAVAILABLE, "the daemon is shutting down; watch again once it is back")

    # -- files -------------------------------------------------------------------------------

    async def PutArchive(self, request_iterator: AsyncIterator[pb.PutArchiveChunk],
                         context: ServicerContext[pb.PutArchiveChunk, pb.PutArchiveResponse]) -> pb.PutArchiveResponse:
        await self.auth.caller(context, "exec")
        try:
            received, entries = await files.put_archive(self.core, request_iterator,
                                                        self.core.config.limits.max_message_bytes * 64)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.PutArchiveResponse(bytes_received=received, entries=entries)

    async def GetArchive(self, request: pb.GetArchiveRequest,
                         context: ServicerContext[pb.GetArchiveRequest, pb.ArchiveChunk]
                         ) -> AsyncIterator[pb.ArchiveChunk]:
        await self.auth.caller(context, "exec")
        try:
            async for chunk in files.get_archive(self.core, request.task_id, request.path, request.backend):
                yield pb.ArchiveChunk(data=chunk)
        except CoreError as exc:
            await self._abort(context, exc)

    async def ReadFile(self, request: pb.ReadFileRequest,
                       context: ServicerContext[pb.ReadFileRequest, pb.FileChunk]) -> AsyncIterator[pb.FileChunk]:
        await self.auth.caller(context, "exec")
        try:
            async for chunk in files.read_file(self.core, request.task_id, request.path, request.backend):
                yield pb.FileChunk(data=chunk)
        except CoreError as exc:
            await self._abort(context, exc)

    async def WriteFile(self, request_iterator: AsyncIterator[pb.WriteFileChunk],
                        context: ServicerContext[pb.WriteFileChunk, pb.WriteFileResponse]) -> pb.WriteFileResponse:
        await self.auth.caller(context, "exec")
        try:
            path, written = await files.write_file(self.core, request_iterator)
        except CoreError as exc:
            await self._abort(context, exc)
        return pb.WriteFileResponse(bytes_written=written, path=path)


class _Malformed:
    """What a request that fails to parse turns into; the handler answers INVALID_ARGUMENT."""

    def __init__(self, type_name: str, error: Exception) -> None:
        self.message = f"malformed {type_name} message: {error}"


#: Any method's context: the plumbing below serves every method alike.
_Context: TypeAlias = "ServicerContext[Message, Message]"
_M = TypeVar("_M", bound=Message)


def _safe_parser(cls: type[Message]) -> Callable[[bytes], Message | _Malformed]:
    """``cls.FromString``, turning a message that fails to parse into a ``_Malformed``."""
    def parse(data: bytes) -> Message | _Malformed:
        try:
            return cls.FromString(data)
        except Exception as exc:  # DecodeError, or anything a corrupt message can raise
            return _Malformed(cls.DESCRIPTOR.full_name, exc)
    return parse


async def _refuse_malformed(request: _M | _Malformed, context: ServicerContext[Req, Resp]) -> _M:
    """The request, or the call ended with INVALID_ARGUMENT when it did not parse."""
    if isinstance(request, _Malformed):
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.message)
    return request


async def _checked_stream(requests: AsyncIterable[Message | _Malformed], context: _Context
                          ) -> AsyncIterator[Message]:
    async for request in requests:
        yield await _refuse_malformed(request, context)


# Each wraps a servicer method of its kind so a malformed request is refused with INVALID_ARGUMENT.
# (Servicer methods are coroutines or async generators: no context.write.)

def _guard_unary_unary(method: Callable[[Message, _Context], Awaitable[Message]]
                       ) -> Callable[[Message | _Malformed, _Context], Awaitable[Message]]:
    """A unary call's method behind the parse check."""
    async def handler(request: Message | _Malformed, context: _Context) -> Message:
        return await method(await _refuse_malformed(request, context), context)
    return handler


def _guard_unary_stream(method: Callable[[Message, _Context], AsyncIterator[Message]]
                        ) -> Callable[[Message | _Malformed, _Context], AsyncIterator[Message]]:
    """A server-streaming method behind the parse check."""
    async def handler(request: Message | _Malformed, context: _Context) -> AsyncIterator[Message]:
        async for item in method(await _refuse_malformed(request, context), context):
            yield item
    return handler


def _guard_stream_unary(method: Callable[[AsyncIterator[Message], _Context], Awaitable[Message]]
                        ) -> Callable[[AsyncIterable[Message | _Malformed], _Context], Awaitable[Message]]:
    """A client-streaming method whose every request passes the parse check."""
    async def handler(requests: AsyncIterable[Message | _Malformed], context: _Context) -> Message:
        return await method(_checked_stream(requests, context), context)
    return handler


def _guard_stream_stream(method: Callable[[AsyncIterator[Message], _Context], AsyncIterator[Message]]
                         ) -> Callable[[AsyncIterable[Message | _Malformed], _Context], AsyncIterator[Message]]:
    """A bidirectional method whose every request passes the parse check."""
    async def handler(requests: AsyncIterable[Message | _Malformed], context: _Context) -> AsyncIterator[Message]:
        async for item in method(_checked_stream(requests, context), context):
            yield item
    return handler


def _method_handler(servicer: Servicer, m: MethodDescriptor) -> grpc.RpcMethodHandler[Message, Message]:
    """One method's handler: its servicer method behind the parse check, with a safe parser."""
    db = symbol_database.Default()
    parse = _safe_parser(db.GetSymbol(m.input_type.full_name))
    serialize = db.GetSymbol(m.output_type.full_name).SerializeToString
    method = getattr(servicer, m.name)
    if m.client_streaming and m.server_streaming:
        return grpc.stream_stream_rpc_method_handler(_guard_stream_stream(method), parse, serialize)
    if m.client_streaming:
        return grpc.stream_unary_rpc_method_handler(_guard_stream_unary(method), parse, serialize)
    if m.server_streaming:
        if getattr(method, "checks_its_request", False):
            return grpc.unary_stream_rpc_method_handler(method, parse, serialize)
        return grpc.unary_stream_rpc_method_handler(_guard_unary_stream(method), parse, serialize)
    return grpc.unary_unary_rpc_method_handler(_guard_unary_unary(method), parse, serialize)


def executor_handler(servicer: Servicer) -> grpc.GenericRpcHandler[Message, Message]:
    """The Executor service's handlers, built from the proto descriptor with safe parsers."""
    service = pb.DESCRIPTOR.services_by_name["Executor"]
    handlers = {m.name: _method_handler(servicer, m) for m in service.methods}
    return grpc.method_handlers_generic_handler(service.full_name, handlers)


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_credentials(tls: TLSConfig) -> grpc.ServerCredentials:
    """The listener's certificate and key, and the CA its clients' certificates must chain to (if any)."""
    try:
        key = Path(tls.key).read_bytes()
        cert = Path(tls.cert).read_bytes()
        ca = Path(tls.client_ca).read_bytes() if tls.client_ca else None
    except OSError as exc:
        raise ConfigError(f"tls: cannot read {exc.filename}: {exc.strerror}") from None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


class ExecutorServicer(ProcessServicer, PtyServicer, Servicer):
    """Every RPC of executor.v1.Executor."""


class Daemon:
    """A running daemon: the core plus its gRPC server."""

    def __init__(self, config: Config, state_dir: Path, listen: list[str], config_path: str | None = None) -> None:
        self.config = config
        self.state_dir = state_dir
        self.listen = listen or [f"unix://{state_dir / 'executor.sock'}"]
        self.core = Executor(config, state_dir)
        hidden = secret_paths(config, config_path, self.listen)
        for backend in self.core.backends.values():
            backend.hide(hidden)  # before start(): no command may see these (local hides them)
        self.auth = Auth(config)
        self.server: grpc.aio.Server | None = None
        self.metrics: Metrics | None = None  # kept only when something can read them (metrics.listen)
        self._gate_watch: asyncio.Future[None] | None = None
        self.health = health.aio.HealthServicer() if hasattr(health, "aio") else health.HealthServicer()
        self._check_listen()

    def _check_listen(self) -> None:
        for address in self.listen:
            if address.startswith("unix:"):
                continue
            if not _is_loopback(address) and self.config.tls is None:
                raise ConfigError(f"listen {address}: a TCP listener that is not loopback needs TLS "
                                  "(tls.cert and tls.key)")
            if not self.auth.enabled:
                # Loopback is no boundary: every local user (and every local command) could connect
                # and would hold every role, approve included.
                raise ConfigError(f"listen {address}: a TCP listener (loopback included) needs auth.tokens; "
                                  "configure tokens, or listen only on the 0600 unix socket (the default)")

    async def start(self) -> None:
        from executor.observe import Metrics, log_exec

        await self.core.start()
        self.core.listeners.append(log_exec)
        # Metrics are kept only when something can read them (the endpoint is off by default): the
        # series cost every command a few dozen microseconds.
        if self.config.metrics.listen:
            self.metrics = Metrics(self.core)
            self.metrics.serve(self.config.metrics.listen)
        limit = self.config.limits.max_message_bytes
        options = [
            ("grpc.max_receive_message_length", limit),
            ("grpc.max_send_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
        ping = self.config.streams.http2_ping_seconds
        if ping:  # HTTP/2 PINGs on every connection (streams.http2_ping_seconds)
            options += [("grpc.keepalive_time_ms", int(ping * 1000)), ("grpc.keepalive_timeout_ms", 20000),
                        ("grpc.http2.max_pings_without_data", 0), ("grpc.keepalive_permit_without_calls", 1)]
        self.server = grpc.aio.server(options=options)
        self.server.add_generic_rpc_handlers((executor_handler(ExecutorServicer(self.core, self.auth)),))
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        names = (pb.DESCRIPTOR.services_by_name["Executor"].full_name, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, self.server)
        old_umask = os.umask(0o177)  # the unix socket is born 0600
        try:
            for address in self.listen:
                if address.startswith("unix:"):
                    path = Path(address[len("unix://"):] if address.startswith("unix://") else address[len("unix:"):])
                    path.parent.mkdir(parents=True, exist_ok=True)
                    if path.exists():
                        path.unlink()
                    self.server.add_insecure_port(f"unix://{path}")
                elif self.config.tls is not None:
                    self.server.add_secure_port(address, _tls_credentials(self.config.tls))
                else:
                    self.server.add_insecure_port(address)
            await self.server.start()
        finally:
            os.umask(old_umask)
        for address in self.listen:
            if address.startswith("unix:"):
                os.chmod(address.split("://", 1)[-1] if "://" in address else address[5:], 0o600)
        await self._set_health(health_pb2.HealthCheckResponse.SERVING)
        self._gate_watch = asyncio.ensure_future(self._watch_gate())

    #: The health service name that reports whether the gate can record its decisions.
    GATE_HEALTH = "executor.v1.Executor.gate"

    async def _watch_gate(self) -> None:
        """The gate is NOT_SERVING while its audit log cannot be written (flagged commands are then
        refused); the reason goes to the log once per change."""
        problem: str | None = None
        while True:
            now = self.core.approvals.audit_problem
            if now != problem:
                problem = now
                if now:
                    log.error("the gate refuses flagged commands: %s", now)
                elif problem is not None:
                    log.info("the audit log is written again; the gate serves")
                status = health_pb2.HealthCheckResponse.NOT_SERVING if now else health_pb2.HealthCheckResponse.SERVING
                result = self.health.set(self.GATE_HEALTH, status)
                if asyncio.iscoroutine(result):
                    await result
            await asyncio.sleep(1.0)

    async def _set_health(self, status: health_pb2.HealthCheckResponse.ServingStatus.ValueType) -> None:
        for service in ("", "executor.v1.Executor"):
            result = self.health.set(service, status)
            if asyncio.iscoroutine(result):
                await result

    async def stop(self) -> None:
        """Drain: stop taking calls, give running commands ``limits.drain_seconds`` to finish, then
        end them (each running Exec and Pty still gets its Exit, CANCELLED, "the daemon is shutting
        down") and everything else, in bounded time however many tasks there are."""
        await self._set_health(health_pb2.HealthCheckResponse.NOT_SERVING)
        if self._gate_watch is not None:
            self._gate_watch.cancel()
        self.core.begin_shutdown()
        limits = self.config.limits
        # The server's own grace covers the drain plus the final Exit of every interrupted call.
        stopping = (asyncio.ensure_future(self.server.stop(limits.drain_seconds + limits.kill_grace_seconds + 10))
                    if self.server else None)
        deadline = time.monotonic() + limits.drain_seconds
        while time.monotonic() < deadline and (any(t.busy for t in self.core.list_tasks())
                                               or self.core.pty.sessions):
            await asyncio.sleep(0.05)
        await self.core.shutdown()
        if stopping is not None:
            await stopping


async def serve(config: Config, state_dir: Path, listen: list[str], ready_file: str | None = None,
                config_path: str | None = None) -> None:
    daemon = Daemon(config, state_dir, listen, config_path)
    for backend in daemon.core.backends.values():
        notice = backend.startup_notice()
        if notice:
            log.warning("%s", notice)
            print(f"executor: WARNING: {notice}", flush=True)
    await daemon.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, daemon.core.approvals.reopen_audit)  # after logrotate
    log.info("executor serving on %s (default backend %s)", ", ".join(daemon.listen), config.backend)
    print(f"executor: serving on {', '.join(daemon.listen)} (default backend {config.backend!r})", flush=True)
    if ready_file:
        Path(ready_file).write_text("\n".join(daemon.listen))
    await stop.wait()
    print("executor: draining", flush=True)
    await daemon.stop()
    print("executor: stopped", flush=True)


__all__ = ["Daemon", "Servicer", "ExecutorServicer", "serve", "exit_pb", "event_pb", "Auth"]

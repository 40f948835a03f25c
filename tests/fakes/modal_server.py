"""A local server that speaks Modal's gRPC wire protocol, for testing the modal backend.

The real ``modal`` SDK is pointed at it (``server_url=http://127.0.0.1:PORT``). It
serves both services the SDK uses for a sandbox's life cycle on ONE port:

* the control plane (``modal.client.ModalClient``): apps, images, auth tokens,
  SandboxCreateV2 / GetFromNameV2 / WaitV2 / TerminateV2 / ListV2 / GetTaskIdV2,
  SandboxGetCommandRouterAccess (which points the SDK back at this same port);
* the task command router (``modal.task_command_router.TaskCommandRouter``):
  TaskExecStart / StdioRead / StdinWrite / Wait / Poll.

Commands run FOR REAL: every sandbox gets a temporary directory (its default
working directory and HOME) and every exec is a host subprocess in its own
session (its own process group), with pipes or a pseudo-terminal, whose output is
streamed to the SDK as it is produced. There is no isolation: this is a test
double for the *protocol*, run by root on a throwaway test machine.

Every request is recorded (``server.calls``) so tests can assert on exactly what
the SDK sent, and faults can be injected (``server.fail(...)``,
``server.vanish(sandbox_id)``).

Run standalone with ``python tests/fakes/modal_server.py --port 0``: it prints
``PORT <n>`` once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import errno
import fcntl
import json
import os
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from google.protobuf.message import Message
from grpclib import GRPCError, Status
from grpclib.server import Server, Stream
from modal_proto import api_pb2
from modal_proto import task_command_router_pb2 as tcr
from modal_proto.api_grpc import ModalClientBase
from modal_proto.task_command_router_grpc import TaskCommandRouterBase

#: Environment every sandbox's processes start from (as a container image would set it),
#: plus MODAL_* markers that a real Modal container also carries.
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
}


@dataclass
class Call:
    """One recorded request."""

    method: str
    request: Message
    metadata: dict[str, str]


@dataclass
class Fault:
    status: Status
    message: str
    times: int


def _jwt(claims: dict[str, Any]) -> str:
    """An unsigned JWT: the SDK only reads ``exp`` from it; we compare it verbatim."""

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    return ".".join([b64(b'{"alg":"none","typ":"JWT"}'), b64(json.dumps(claims).encode()), b64(b"sig")])


def _new_id(prefix: str, suffix: str = "") -> str:
    # 26 hex characters: never the 22-character shape of a V1 sandbox id.
    return f"{prefix}-{secrets.token_hex(13)}{suffix}"


class _Output:
    """One output stream of an exec: every byte kept, readable from any offset."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.eof = False
        self.changed = asyncio.Event()

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        self.changed.set()

    def close(self) -> None:
        self.eof = True
        self.changed.set()

    async def follow(self, offset: int):
        """Yield chunks from ``offset`` as they arrive, until EOF."""
        while True:
            if offset < len(self.data):
                chunk = bytes(self.data[offset:])
                offset += len(chunk)
                yield chunk
                continue
            if self.eof:
                return
            self.changed.clear()
            await self.changed.wait()


MAX_CALLS = 20_000  # requests remembered for the tests to inspect
KEEP_FINISHED = 256  # finished execs (and their output) kept per sandbox


def _forget_finished(items: dict, keep: int) -> None:
    """Drop the oldest finished entries (``.done`` set) beyond ``keep``: output is not kept forever."""
    finished = [k for k, v in items.items() if v.done.is_set()]
    for k in finished[: max(0, len(finished) - keep)]:
        del items[k]


class FakeExec:
    """One process started by TaskExecStart."""

    def __init__(self, request: tcr.TaskExecStartRequest) -> None:
        self.request = request
        self.stdout = _Output()
        self.stderr = _Output()
        self.stdin_written = 0
        self.stdin_closed = False
        self.stdin_lock = asyncio.Lock()
        self.exit_code: int | None = None
        self.exit_signal: int | None = None
        self.done = asyncio.Event()
        self.pid = 0
        self.proc: asyncio.subprocess.Process | None = None
        self.master: int | None = None

    def status(self) -> dict[str, int]:
        if self.exit_signal is not None:
            return {"signal": self.exit_signal}
        if self.exit_code is not None:
            return {"code": self.exit_code}
        return {}


class FakeSandbox:
    def __init__(self, server: "FakeModalServer", request: api_pb2.SandboxCreateV2Request, app_name: str) -> None:
        self.server = server
        self.request = request
        self.definition = request.definition
        self.id = _new_id("sb")
        self.task_id = _new_id("ta", "V")
        self.name = request.definition.name
        self.app_id = request.app_id
        self.app_name = app_name
        self.tags = {t.tag_name: t.tag_value for t in request.tags}
        self.created_at = time.time()
        # Like a container's filesystem: the same paths in every sandbox of an app (so a
        # recreated sandbox has the same working directory), but nothing survives it.
        self.dir = server.root / "sandboxes" / (f"{app_name}.{self.name}" if self.name else self.id)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        self.env = dict(BASE_ENV, HOME=str(self.dir), MODAL_SANDBOX_ID=self.id, MODAL_TASK_ID=self.task_id)
        for source in request.secret_sources:
            self.env.update(source.env.contents)
        self.execs: dict[str, FakeExec] = {}
        self.entrypoint: asyncio.subprocess.Process | None = None
        self.result: api_pb2.GenericResult | None = None
        self.finished = asyncio.Event()
        self.scheduled = False  # a task was assigned (the entrypoint started)
        self.netns: str | None = None  # the network namespace of a block_network sandbox
        self._lifetime: asyncio.TimerHandle | None = None

    @property
    def running(self) -> bool:
        return self.result is None

    async def start(self) -> None:
        if not self.running:
            return
        self.scheduled = True
        if self.definition.network_access.network_access_type == api_pb2.NetworkAccess.NetworkAccessType.BLOCKED:
            await self._block_network()
        args = self.netns_prefix() + (list(self.definition.entrypoint_args) or ["sleep", "infinity"])
        self.entrypoint = await asyncio.create_subprocess_exec(
            *args, cwd=self.workdir(), env=self.env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        asyncio.get_running_loop().create_task(self._watch_entrypoint())
        if self.definition.timeout_secs:
            loop = asyncio.get_running_loop()
            self._lifetime = loop.call_later(
                self.definition.timeout_secs,
                lambda: loop.create_task(self.terminate(api_pb2.GenericResult.GENERIC_STATUS_TIMEOUT)))

    async def _block_network(self) -> None:
        """``block_network``, for real: every process of the sandbox runs in one network
        namespace of its own with only a loopback interface (as root, with iproute2)."""
        name = f"fakemodal-{self.id[3:19]}"
        for argv in (["ip", "netns", "add", name], ["ip", "-n", name, "link", "set", "lo", "up"]):
            proc = await asyncio.create_subprocess_exec(*argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise GRPCError(Status.FAILED_PRECONDITION,
                                f"the fake cannot block the network here ({' '.join(argv)}: {err.decode().strip()})")
        self.netns = name

    def netns_prefix(self) -> list[str]:
        """argv prefix that runs a process inside the sandbox's network namespace, if any
        (nsenter execs: the pid, and so the session semantics, are unchanged)."""
        return ["nsenter", f"--net=/run/netns/{self.netns}", "--"] if self.netns else []

    def workdir(self) -> str:
        return self.definition.workdir or str(self.dir)

    async def _watch_entrypoint(self) -> None:
        assert self.entrypoint is not None
        code = await self.entrypoint.wait()
        if self.running:
            await self.terminate(api_pb2.GenericResult.GENERIC_STATUS_SUCCESS if code == 0
                                 else api_pb2.GenericResult.GENERIC_STATUS_FAILURE, exitcode=code)

    async def terminate(self, status: int = api_pb2.GenericResult.GENERIC_STATUS_TERMINATED, exitcode: int = 0) -> None:
        """End the sandbox and every process that was started in it."""
        if not self.running:
            return
        self.result = api_pb2.GenericResult(status=status, exitcode=exitcode)
        if self._lifetime is not None:
            self._lifetime.cancel()
        roots = [e.pid for e in self.execs.values() if e.pid and not e.done.is_set()]
        if self.entrypoint is not None and self.entrypoint.returncode is None:
            roots.append(self.entrypoint.pid)
        for pid in _process_tree(roots):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.finished.set()
        if self.netns:
            proc = await asyncio.create_subprocess_exec("ip", "netns", "delete", self.netns,
                                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            await proc.wait()
        # Nothing of a container's filesystem outlives it.
        await asyncio.to_thread(shutil.rmtree, self.dir, True)

    async def exec(self, request: tcr.TaskExecStartRequest) -> FakeExec:
        if request.exec_id in self.execs:  # the exec id is an idempotency key
            return self.execs[request.exec_id]
        ex = FakeExec(request)
        self.execs[request.exec_id] = ex
        _forget_finished(self.execs, KEEP_FINISHED)
        env = dict(self.env)
        for source in request.secret_sources:
            env.update(source.env.contents)
        env.update(request.env)
        cwd = request.workdir if request.HasField("workdir") else self.workdir()
        argv = self.netns_prefix() + list(request.command_args)
        try:
            if request.HasField("pty_info") and request.pty_info.enabled:
                await self._spawn_pty(ex, argv, cwd, env, request.pty_info)
            else:
                await self._spawn_pipes(ex, argv, cwd, env, request)
        except OSError as exc:
            # Like a container runtime: the exec "runs" and fails with 127/126.
            ex.stderr.feed(f"exec {argv[0]!r}: {exc.strerror}\n".encode())
            ex.stdout.close()
            ex.stderr.close()
            ex.exit_code = 127 if isinstance(exc, FileNotFoundError) else 126
            ex.stdin_closed = True
            ex.done.set()
        return ex

    async def _spawn_pipes(self, ex: FakeExec, argv: list[str], cwd: str, env: dict[str, str],
                           request: tcr.TaskExecStartRequest) -> None:
        devnull_out = request.stdout_config == tcr.TASK_EXEC_STDOUT_CONFIG_DEVNULL
        devnull_err = request.stderr_config == tcr.TASK_EXEC_STDERR_CONFIG_DEVNULL
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL if devnull_out else subprocess.PIPE,
            stderr=subprocess.DEVNULL if devnull_err else subprocess.PIPE,
            start_new_session=self.server.exec_new_session)  # a process group (and session) per exec
        ex.proc, ex.pid = proc, proc.pid
        loop = asyncio.get_running_loop()
        pumps = []
        for pipe, out in ((proc.stdout, ex.stdout), (proc.stderr, ex.stderr)):
            if pipe is None:
                out.close()
            else:
                pumps.append(loop.create_task(_pump(pipe, out)))
        loop.create_task(self._reap(ex, pumps))

    async def _spawn_pty(self, ex: FakeExec, argv: list[str], cwd: str, env: dict[str, str],
                         info: api_pb2.PTYInfo) -> None:
        master, slave = os.openpty()
        rows, cols = info.winsz_rows or 24, info.winsz_cols or 80
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        if info.env_term:
            env.setdefault("TERM", info.env_term)

        def controlling_tty() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=controlling_tty)
        finally:
            os.close(slave)
        ex.proc, ex.pid, ex.master = proc, proc.pid, master
        ex.stderr.close()
        os.set_blocking(master, False)
        loop = asyncio.get_running_loop()
        eof = loop.create_future()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    return
                data = b""
            if data:
                ex.stdout.feed(data)
            else:
                loop.remove_reader(master)
                ex.stdout.close()
                if not eof.done():
                    eof.set_result(None)

        loop.add_reader(master, readable)
        loop.create_task(self._reap(ex, [eof]))

    async def _reap(self, ex: FakeExec, pumps: list[Any]) -> None:
        assert ex.proc is not None
        code = await ex.proc.wait()
        await asyncio.gather(*pumps, return_exceptions=True)
        if ex.master is not None:
            os.close(ex.master)
            ex.master = None
        if code < 0:
            ex.exit_signal = -code
        else:
            ex.exit_code = code
        ex.done.set()

    async def write_stdin(self, ex: FakeExec, offset: int, data: bytes, eof: bool) -> None:
        async with ex.stdin_lock:
            if ex.stdin_closed:
                if data[max(0, ex.stdin_written - offset):]:
                    raise GRPCError(Status.FAILED_PRECONDITION, "stdin is closed")
                return
            # Offsets make retried writes idempotent: drop what was already written.
            skip = ex.stdin_written - offset
            if skip < 0:
                raise GRPCError(Status.INVALID_ARGUMENT, f"stdin offset {offset} skips ahead of {ex.stdin_written}")
            chunk = data[skip:]
            ex.stdin_written += len(chunk)
            try:
                if ex.master is not None:
                    await _write_fd(ex.master, chunk)
                elif ex.proc is not None and ex.proc.stdin is not None and chunk:
                    ex.proc.stdin.write(chunk)
                    await ex.proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError, OSError):
                pass  # the process stopped reading; like a pipe, the bytes are lost
            if eof:
                ex.stdin_closed = True
                if ex.proc is not None and ex.proc.stdin is not None and ex.master is None:
                    ex.proc.stdin.close()


async def _pump(pipe: asyncio.StreamReader, out: _Output) -> None:
    while True:
        chunk = await pipe.read(65536)
        if not chunk:
            out.close()
            return
        out.feed(chunk)


async def _write_fd(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            await asyncio.sleep(0.002)
            continue
        view = view[n:]


def _process_tree(roots: list[int]) -> list[int]:
    """``roots`` and all their descendants, by a walk of /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        ppid = int(raw[raw.rfind(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    seen: list[int] = []
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo.extend(children.get(pid, []))
    return seen


# ---------------------------------------------------------------------------
# The two gRPC services
# ---------------------------------------------------------------------------


def _unimplemented(name: str) -> Callable[..., Any]:
    async def handler(self: "_ControlPlane", stream: Stream) -> None:
        request = await stream.recv_message()
        self.server.record(name, request, stream)
        raise GRPCError(Status.UNIMPLEMENTED, f"the fake Modal server does not implement {name}")

    handler.__name__ = name
    return handler


class _ControlPlaneBase(ModalClientBase):
    """ModalClientBase with every RPC answering UNIMPLEMENTED unless overridden."""


for _name in list(ModalClientBase.__abstractmethods__):
    setattr(_ControlPlaneBase, _name, _unimplemented(_name))
_ControlPlaneBase.__abstractmethods__ = frozenset()


class _RouterBase(TaskCommandRouterBase):
    pass


for _name in list(TaskCommandRouterBase.__abstractmethods__):
    setattr(_RouterBase, _name, _unimplemented(_name))
_RouterBase.__abstractmethods__ = frozenset()


class _ControlPlane(_ControlPlaneBase):
    def __init__(self, server: "FakeModalServer") -> None:
        self.server = server

    async def _begin(self, stream: Stream, name: str) -> Any:
        request = await stream.recv_message()
        self.server.record(name, request, stream)
        self.server.check_fault(name)
        self.server.check_token(stream)
        return request

    async def ClientHello(self, stream: Stream) -> None:
        await self._begin(stream, "ClientHello")
        await stream.send_message(api_pb2.ClientHelloResponse())

    async def AuthTokenGet(self, stream: Stream) -> None:
        await self._begin(stream, "AuthTokenGet")
        token = _jwt({"exp": int(time.time()) + 3600, "sub": "fake"})
        await stream.send_message(api_pb2.AuthTokenGetResponse(token=token))

    async def EnvironmentGetOrCreate(self, stream: Stream) -> None:
        await self._begin(stream, "EnvironmentGetOrCreate")
        await stream.send_message(api_pb2.EnvironmentGetOrCreateResponse(
            environment_id="en-fake", metadata=api_pb2.EnvironmentMetadata(
                name="main", settings=api_pb2.EnvironmentSettings(image_builder_version="2025.06"))))

    async def AppGetOrCreate(self, stream: Stream) -> None:
        request = await self._begin(stream, "AppGetOrCreate")
        app_id = self.server.apps.setdefault(request.app_name, _new_id("ap"))
        await stream.send_message(api_pb2.AppGetOrCreateResponse(app_id=app_id))

    async def ImageGetOrCreate(self, stream: Stream) -> None:
        request = await self._begin(stream, "ImageGetOrCreate")
        key = request.image.SerializeToString(deterministic=True)
        image_id = self.server.images.setdefault(key, _new_id("im"))
        await stream.send_message(api_pb2.ImageGetOrCreateResponse(
            image_id=image_id,
            result=api_pb2.GenericResult(status=api_pb2.GenericResult.GENERIC_STATUS_SUCCESS),
            metadata=api_pb2.ImageMetadata()))

    async def SandboxCreateV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxCreateV2")
        server = self.server
        app_name = next((n for n, i in server.apps.items() if i == request.app_id), "")
        name = request.definition.name
        if name and any(sb.running and sb.name == name and sb.app_id == request.app_id
                        for sb in server.sandboxes.values()):
            raise GRPCError(Status.ALREADY_EXISTS, f"a sandbox named {name!r} already exists in this app")
        if server.max_sandboxes is not None and sum(sb.running for sb in server.sandboxes.values()) >= server.max_sandboxes:
            raise GRPCError(Status.RESOURCE_EXHAUSTED, "sandbox quota exceeded for this workspace")
        sb = FakeSandbox(server, request, app_name)
        server.sandboxes[sb.id] = sb
        if server.schedule_delay:
            # Like a cold start: the answer carries no task yet; the SDK polls SandboxGetTaskIdV2.
            asyncio.get_running_loop().call_later(server.schedule_delay, lambda: asyncio.ensure_future(sb.start()))
        else:
            await sb.start()
        await stream.send_message(api_pb2.SandboxCreateV2Response(
            sandbox_id=sb.id, task_id=sb.task_id if sb.scheduled else "",
            metadata=api_pb2.SandboxHandleMetadata(app_id=sb.app_id)))

    async def SandboxGetCommandRouterAccess(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxGetCommandRouterAccess")
        sb = self.server.lookup(sandbox_id=request.sandbox_id, task_id=request.task_id)
        await stream.send_message(api_pb2.SandboxGetCommandRouterAccessResponse(
            url=self.server.url, jwt=self.server.router_jwt(sb)))

    async def SandboxGetTaskIdV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxGetTaskIdV2")
        sb = self.server.lookup(sandbox_id=request.sandbox_id)
        response = api_pb2.SandboxGetTaskIdResponse(task_id=sb.task_id if sb.scheduled else "")
        if sb.result is not None:
            response.task_result.CopyFrom(sb.result)
        await stream.send_message(response)

    async def SandboxGetFromNameV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxGetFromNameV2")
        await self._from_name(stream, request)

    async def SandboxGetFromName(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxGetFromName")
        await self._from_name(stream, request)

    async def _from_name(self, stream: Stream, request: api_pb2.SandboxGetFromNameRequest) -> None:
        for sb in sorted(self.server.sandboxes.values(), key=lambda s: -s.created_at):
            if sb.name == request.sandbox_name and sb.app_name == request.app_name and (
                    sb.running or request.include_terminated):
                await stream.send_message(api_pb2.SandboxGetFromNameResponse(
                    sandbox_id=sb.id, metadata=api_pb2.SandboxHandleMetadata(app_id=sb.app_id)))
                return
        raise GRPCError(Status.NOT_FOUND, f"no running sandbox named {request.sandbox_name!r} in app {request.app_name!r}")

    async def SandboxWaitV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxWaitV2")
        sb = self.server.lookup(sandbox_id=request.sandbox_id)
        if request.timeout and sb.running:
            try:
                await asyncio.wait_for(sb.finished.wait(), timeout=min(request.timeout, 50))
            except asyncio.TimeoutError:
                pass
        response = api_pb2.SandboxWaitResponse(metadata=api_pb2.SandboxHandleMetadata(app_id=sb.app_id))
        if sb.result is not None:
            response.result.CopyFrom(sb.result)
            response.metadata.result.CopyFrom(sb.result)
        await stream.send_message(response)

    async def SandboxTerminateV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxTerminateV2")
        sb = self.server.lookup(sandbox_id=request.sandbox_id)
        await sb.terminate()
        await stream.send_message(api_pb2.SandboxTerminateResponse())

    async def SandboxListV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxListV2")
        wanted = {t.tag_name: t.tag_value for t in request.tags}
        response = api_pb2.SandboxListResponse()
        for sb in sorted(self.server.sandboxes.values(), key=lambda s: -s.created_at):
            if request.before_timestamp and sb.created_at >= request.before_timestamp:
                continue
            if request.app_id and sb.app_id != request.app_id:
                continue
            if not sb.running and not request.include_finished:
                continue
            if any(sb.tags.get(k) != v for k, v in wanted.items()):
                continue
            info = response.sandboxes.add(id=sb.id, created_at=sb.created_at, app_id=sb.app_id, name=sb.name,
                                          metadata=api_pb2.SandboxHandleMetadata(app_id=sb.app_id))
            for k, v in sb.tags.items():
                info.tags.add(tag_name=k, tag_value=v)
        await stream.send_message(response)

    async def SandboxTagsGetV2(self, stream: Stream) -> None:
        request = await self._begin(stream, "SandboxTagsGetV2")
        sb = self.server.lookup(sandbox_id=request.sandbox_id)
        response = api_pb2.SandboxTagsGetResponse()
        for k, v in sb.tags.items():
            response.tags.add(tag_name=k, tag_value=v)
        await stream.send_message(response)


class _Router(_RouterBase):
    def __init__(self, server: "FakeModalServer") -> None:
        self.server = server

    async def _begin(self, stream: Stream, name: str) -> tuple[Any, FakeSandbox]:
        request = await stream.recv_message()
        self.server.record(name, request, stream)
        self.server.check_fault(name)
        task_id = request.task_id if hasattr(request, "task_id") else request.start.task_id
        sb = self.server.lookup(task_id=task_id)
        auth = stream.metadata.get("authorization", "")
        if auth != f"Bearer {self.server.router_jwt(sb)}":
            raise GRPCError(Status.UNAUTHENTICATED, "bad or missing command router token")
        return request, sb

    def _exec(self, sb: FakeSandbox, exec_id: str) -> FakeExec:
        ex = sb.execs.get(exec_id)
        if ex is None:
            raise GRPCError(Status.NOT_FOUND, f"exec {exec_id} not found")
        return ex

    async def TaskExecStart(self, stream: Stream) -> None:
        request, sb = await self._begin(stream, "TaskExecStart")
        if not sb.running:
            raise GRPCError(Status.NOT_FOUND, f"task {sb.task_id} has finished")
        await sb.exec(request)
        await stream.send_message(tcr.TaskExecStartResponse())

    async def TaskExecStdioRead(self, stream: Stream) -> None:
        request, sb = await self._begin(stream, "TaskExecStdioRead")
        ex = self._exec(sb, request.exec_id)
        out = ex.stdout if request.file_descriptor == tcr.TASK_EXEC_STDIO_FILE_DESCRIPTOR_STDOUT else ex.stderr
        async for chunk in out.follow(request.offset):
            await stream.send_message(tcr.TaskExecStdioReadResponse(data=chunk))

    async def TaskExecStdinWrite(self, stream: Stream) -> None:
        request, sb = await self._begin(stream, "TaskExecStdinWrite")
        ex = self._exec(sb, request.exec_id)
        await sb.write_stdin(ex, request.offset, request.data, request.eof)
        await stream.send_message(tcr.TaskExecStdinWriteResponse())

    async def TaskExecWait(self, stream: Stream) -> None:
        request, sb = await self._begin(stream, "TaskExecWait")
        ex = self._exec(sb, request.exec_id)
        await ex.done.wait()
        await stream.send_message(tcr.TaskExecWaitResponse(**ex.status()))

    async def TaskExecPoll(self, stream: Stream) -> None:
        request, sb = await self._begin(stream, "TaskExecPoll")
        ex = self._exec(sb, request.exec_id)
        await stream.send_message(tcr.TaskExecPollResponse(**ex.status()))


# ---------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------


class FakeModalServer:
    """The fake Modal API + task command router on one 127.0.0.1 port."""

    def __init__(self, *, token_id: str = "ak-fake", token_secret: str = "as-fake",
                 root: str | Path | None = None) -> None:
        self.token_id = token_id
        self.token_secret = token_secret
        self._own_root = root is None
        self.root = Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="fake-modal-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.calls: list[Call] = []
        self.apps: dict[str, str] = {}
        self.images: dict[bytes, str] = {}
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.faults: dict[str, Fault] = {}
        #: Refuse SandboxCreateV2 with RESOURCE_EXHAUSTED beyond this many running sandboxes.
        self.max_sandboxes: int | None = None
        #: Seconds between SandboxCreateV2 and the sandbox's task being scheduled.
        self.schedule_delay = 0.0
        #: Start each (pipe) exec as a session leader, as a container runtime does; False
        #: starts it inside the server's own process group instead.
        self.exec_new_session = True
        self.port = 0
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._jwts: dict[str, str] = {}

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- serving ------------------------------------------------------------

    async def start(self, port: int = 0) -> int:
        self._loop = asyncio.get_running_loop()
        self._server = Server([_ControlPlane(self), _Router(self)])
        await self._server.start("127.0.0.1", port)
        sockets = self._server._server.sockets  # type: ignore[union-attr]
        self.port = sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        for sb in list(self.sandboxes.values()):
            await sb.terminate()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def start_in_thread(self) -> "FakeModalServer":
        """Serve from a daemon thread with its own event loop (for tests)."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:  # surfaced to the caller below
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, name="fake-modal-server", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop_thread(self) -> None:
        if self._loop is not None and self._thread is not None:
            asyncio.run_coroutine_threadsafe(self.stop(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def run_sync(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the server's loop from another thread."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    # -- helpers for the services -------------------------------------------

    def record(self, method: str, request: Message, stream: Stream) -> None:
        metadata = {k: v for k, v in stream.metadata.items() if isinstance(v, str)}
        self.calls.append(Call(method, request, metadata))
        if len(self.calls) > MAX_CALLS:  # a long-lived server (the bench's) keeps the latest only
            del self.calls[: len(self.calls) - MAX_CALLS]

    def check_fault(self, method: str) -> None:
        fault = self.faults.get(method)
        if fault is not None and fault.times != 0:
            fault.times -= 1
            raise GRPCError(fault.status, fault.message)

    def check_token(self, stream: Stream) -> None:
        md = stream.metadata
        if md.get("x-modal-token-id") != self.token_id or md.get("x-modal-token-secret") != self.token_secret:
            raise GRPCError(Status.UNAUTHENTICATED, "Token is invalid")

    def lookup(self, *, sandbox_id: str = "", task_id: str = "") -> FakeSandbox:
        for sb in self.sandboxes.values():
            if (sandbox_id and sb.id == sandbox_id) or (task_id and sb.task_id == task_id):
                return sb
        raise GRPCError(Status.NOT_FOUND, f"sandbox {sandbox_id or task_id} not found")

    def router_jwt(self, sb: FakeSandbox) -> str:
        if sb.task_id not in self._jwts:
            self._jwts[sb.task_id] = _jwt({"exp": int(time.time()) + 3600, "task_id": sb.task_id})
        return self._jwts[sb.task_id]

    # -- for tests ------------------------------------------------------------

    def fail(self, method: str, status: Status, message: str, times: int = 1) -> None:
        """Make the next ``times`` calls of ``method`` fail (-1: until cleared)."""
        self.faults[method] = Fault(status, message, times)

    def clear_faults(self) -> None:
        self.faults.clear()

    def requests(self, method: str) -> list[Any]:
        return [c.request for c in self.calls if c.method == method]

    def running(self) -> list[FakeSandbox]:
        return [sb for sb in self.sandboxes.values() if sb.running]

    def vanish(self, sandbox_id: str) -> None:
        """Terminate a sandbox behind the client's back (as Modal would on a crash or timeout)."""
        sb = self.lookup(sandbox_id=sandbox_id)
        self.run_sync(sb.terminate(api_pb2.GenericResult.GENERIC_STATUS_TERMINATED))


def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--root", default=None, help="where sandbox directories are made")
    parser.add_argument("--token-id", default=os.environ.get("FAKE_MODAL_TOKEN_ID", "ak-fake"))
    parser.add_argument("--token-secret", default=os.environ.get("FAKE_MODAL_TOKEN_SECRET", "as-fake"))
    args = parser.parse_args()

    async def serve() -> None:
        server = FakeModalServer(token_id=args.token_id, token_secret=args.token_secret, root=args.root)
        port = await server.start(args.port)
        print(f"PORT {port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await server.stop()

    asyncio.run(serve())


if __name__ == "__main__":
    _main()

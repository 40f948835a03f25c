"""Processes in the container: a docker exec's hijacked socket driven by the event loop, the
spawner connection that multiplexes the task processes it forks, and the kill walk."""

from __future__ import annotations


import asyncio
import collections
import socket
from collections.abc import Callable
from typing import Any


from .._shared.background import detach
from .._shared.batch import TurnBatch
from .._spawner import Spawner, spawner_argv
from ..base import (
    BackendError,
    ByteQueue,
    ErrorKind,
    Process,
    PtySize,
    REAPER_START_FAILED,
    REAPER_START_FAILED_LINE,
)

from .options import KILLER_SCRIPT

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named in annotations
    from .container import _Container
    from .backend import DockerSandbox


#: The exec socket is not read while its streams hold more than ``HIGH`` unread bytes together,
#: and is read again once a reader brought them below ``LOW``: a slow reader never makes the
#: daemon buffer a command's whole output.
HIGH = 8 << 20
LOW = 1 << 20
#: Largest chunk one ``read()`` returns when several are waiting.
READ_SIZE = 1 << 20


class _ExecSocket:
    """The client end of a hijacked ``POST /exec/{id}/start``, driven by the event loop.

    Without a TTY the engine multiplexes stdout and stderr in frames
    (``[stream, 0, 0, 0, size32be] payload``); with a TTY the bytes are raw. Reading happens
    in an ``add_reader`` callback (one non-blocking ``recv`` per readiness event), writing
    through ``loop.sock_sendall``."""

    def __init__(self, sock: socket.socket, keepalive: Any, leftover: bytes, tty: bool,
                 on_close: Callable[[BaseException | None], object], sink: Any = None) -> None:
        self._sock = sock
        self._keepalive = keepalive  # docker-py's SocketIO/response: closing them would close the fd
        self._loop = asyncio.get_running_loop()
        self._tty = tty
        self._buf = bytearray()
        self._on_close = on_close
        # sink: stdout goes to sink.feed() as it arrives (the spawner's frames), stderr only to
        # stderr_head; nothing is buffered here, so the socket is never paused
        self._sink = sink
        self.stdout = ByteQueue(HIGH, on_read=self._maybe_resume, read_size=READ_SIZE)
        self.stderr = (None if tty or sink is not None
                       else ByteQueue(HIGH, on_read=self._maybe_resume, read_size=READ_SIZE))
        self._reading = False
        self._closed = False
        self.finished = False
        self.stderr_head = b""  # the first bytes on stderr: a reaper's start failure is told by them
        self.stdout_seen = False
        sock.setblocking(False)
        if leftover:
            self._consume(leftover)
        self._resume()

    # reading -------------------------------------------------------------
    def _resume(self) -> None:
        if not self._reading and not self.finished and not self._closed:
            self._reading = True
            self._loop.add_reader(self._sock.fileno(), self._on_readable)

    def _pause(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._sock.fileno())

    def _maybe_resume(self) -> None:
        if not self._reading and self._buffered() < LOW:
            self._resume()

    def _buffered(self) -> int:
        if self._sink is not None:
            return 0
        return len(self.stdout) + (len(self.stderr) if self.stderr is not None else 0)

    def _on_readable(self) -> None:
        try:
            data = self._sock.recv(1 << 18)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._finish(exc)
            return
        if not data:
            self._finish(None)
            return
        self._consume(data)
        if self._buffered() > HIGH:
            self._pause()

    def _consume(self, data: bytes) -> None:
        if self._tty:
            self.stdout.feed(data)
            return
        buf = self._buf
        buf += data
        pos, end = 0, len(buf)
        while end - pos >= 8:
            size = int.from_bytes(buf[pos + 4 : pos + 8], "big")
            if end - pos - 8 < size:
                break
            kind = buf[pos]
            payload = bytes(buf[pos + 8 : pos + 8 + size])
            pos += 8 + size
            if kind == 2 and (self.stderr is not None or self._sink is not None):
                if len(self.stderr_head) < 256:
                    self.stderr_head += payload[: 256 - len(self.stderr_head)]
                if self.stderr is not None:
                    self.stderr.feed(payload)
            elif self._sink is not None:
                self.stdout_seen = True
                self._sink.feed(payload)
            else:
                self.stdout_seen = self.stdout_seen or bool(payload)
                self.stdout.feed(payload)
        if pos:
            del buf[:pos]

    def _finish(self, exc: BaseException | None) -> None:
        self._pause()
        if not self.finished:
            self.finished = True
            self._on_close(exc)

    # writing -------------------------------------------------------------
    async def write(self, data: bytes) -> None:
        if self._closed:
            raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
        try:
            # The common case (a command line) fits the socket buffer: send at once, no future.
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent < len(data):
                await self._loop.sock_sendall(self._sock, memoryview(data)[sent:])
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION) from exc
        except OSError as exc:
            raise BackendError(f"writing to the process failed: {exc}", ErrorKind.LOST) from exc

    def close_write(self) -> None:
        if not self._closed:
            try:
                self._sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        if not self._closed:
            self._pause()
            self._closed = True
            try:
                self._sock.close()
            finally:
                closer = getattr(self._keepalive, "close", None)
                if closer is not None:
                    try:
                        closer()
                    except Exception:  # noqa: BLE001 - closing best effort
                        pass


def _hijacked_socket(result: Any) -> tuple[socket.socket, bytes]:
    """The plain socket under docker-py's ``exec_start(socket=True)`` result, plus any bytes the
    HTTP response reader buffered past the headers (they belong to the stream)."""
    sock = getattr(result, "_sock", result)
    if not isinstance(sock, socket.socket) or type(sock).__name__ == "SSLSocket":
        raise BackendError("the docker backend streams over unix or plain tcp engine sockets only "
                           "(TLS and ssh docker_host are not supported yet)", ErrorKind.FAILED_PRECONDITION)
    leftover = b""
    response = getattr(result, "_response", None)
    reader = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
    if reader is not None and hasattr(reader, "peek"):
        sock.setblocking(False)
        try:
            leftover = reader.read1(1 << 20) or b""
        except (BlockingIOError, InterruptedError, OSError, ValueError):
            leftover = b""
    return sock, leftover


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


class DockerProcess(Process):
    """A docker exec: the leader of its own session inside the container."""

    stdout: ByteQueue
    stderr: ByteQueue | None

    def __init__(self, sandbox: "DockerSandbox", container: "_Container", exec_id: str, result: Any,
                 tty: bool, spawned_at: float) -> None:
        self._sandbox = sandbox
        self._container = container
        self._generation = container.generation
        self._spawned_at = spawned_at
        self.exec_id = exec_id
        self._tty = tty
        self._exit: int | None = None
        self._lost: BackendError | None = None
        sock, leftover = _hijacked_socket(result)
        self._io = _ExecSocket(sock, result, leftover, tty, self._on_stream_end)
        self.stdout = self._io.stdout
        self.stderr = self._io.stderr
        self._settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # stream end: a normal exit, or the container went away under us
    def _on_stream_end(self, exc: BaseException | None) -> None:
        detach(self._settle(exc), f"settling docker exec {self.exec_id}")

    async def _settle(self, exc: BaseException | None) -> None:
        lost = await self._check_lost(exc)
        if lost is not None:
            self._lost = lost
            if lost.kind is not ErrorKind.RESOURCE_EXHAUSTED:  # a start failure: the container is fine
                self._container.invalidate(lost.message)
        for stream in (self._io.stdout, self._io.stderr):
            if stream is not None:
                stream.feed_eof(lost)
        if not self._settled.done():
            self._settled.set_result(None)

    async def _check_lost(self, exc: BaseException | None) -> BackendError | None:
        """Why the stream ended, if it was not the process finishing normally."""
        backend = self._sandbox.backend
        try:
            info = await backend.call(lambda api: api.exec_inspect(self.exec_id), "inspecting the process")
        except BackendError as err:
            if err.kind is ErrorKind.NOT_FOUND:
                reason = await self._container.describe_loss(backend)
                return BackendError(f"the process's container went away: {reason}", ErrorKind.LOST)
            return BackendError(f"lost the Docker engine while the process ran: {err.message}", ErrorKind.LOST)
        if not info.get("Running") and info.get("ExitCode") is not None:
            lost = await self._lost_by_signal(int(info["ExitCode"]))
            if lost is None:
                lost = await self._start_failure(int(info["ExitCode"]))
            if lost is None:
                self._exit = int(info["ExitCode"])
            return lost
        if exc is not None:
            return BackendError(f"the connection to the process broke: {exc}", ErrorKind.LOST)
        return None  # stdout/stderr closed, the process still runs: wait() polls

    async def _start_failure(self, code: int) -> BackendError | None:
        """The reaper could not fork the command (it says so first thing on stderr, and exits
        REAPER_START_FAILED): an error naming the cause, with the container's pids and memory."""
        head = self._io.stderr_head
        if code != REAPER_START_FAILED or not head.startswith(REAPER_START_FAILED_LINE) or self._io.stdout_seen:
            return None
        why = head[len(REAPER_START_FAILED_LINE):].split(b"\n")[0].decode(errors="replace")
        pressure = await self._container.pressure(self._sandbox.backend)
        return BackendError(f"the process could not start in container {self._container.name}: fork failed ({why})"
                            f"{'; ' + pressure if pressure else ''}", ErrorKind.RESOURCE_EXHAUSTED)

    async def _lost_by_signal(self, code: int) -> BackendError | None:
        """For an exit by signal (docker's 128+N): was it the container being killed/removed?

        The engine announces ``kill`` before signalling, and our event watcher records it;
        when no event has arrived yet the container's state is checked, then a short wait
        for a late event (only on this path: processes dying of a signal)."""
        if code <= 128:
            return None
        container, backend = self._container, self._sandbox.backend
        reason = container.event_since(self._spawned_at)
        if not reason:
            reason = await container.loss_since(backend, self._generation)
        if not reason and backend.watching:
            changed = container.changed
            try:
                await asyncio.wait_for(changed.wait(), 0.05)
            except asyncio.TimeoutError:
                pass
            reason = container.event_since(self._spawned_at)
        if not reason:
            return None
        container.invalidate(reason)
        return BackendError(f"the container went away under the process: {reason}; the next command "
                            "starts it again", ErrorKind.LOST)

    async def write(self, data: bytes) -> None:
        if self._lost is not None:
            raise self._lost
        await self._io.write(data)

    async def close_stdin(self) -> None:
        if not self._tty:
            self._io.close_write()

    async def wait(self) -> int:
        """The exit code (-N for a process killed by signal N, read from docker's 128+N).

        Normally known when the stream ends; a process that closed its output early is
        polled with a backoff (only here, never on the data path)."""
        await asyncio.shield(self._settled)
        if self._lost is not None:
            raise self._lost
        delay = 0.005
        backend = self._sandbox.backend
        while self._exit is None:
            try:
                info = await backend.call(lambda api: api.exec_inspect(self.exec_id), "inspecting the process")
            except BackendError as err:
                reason = await self._container.describe_loss(backend)
                self._lost = BackendError(f"the process's result is unknown: {err.message} ({reason})",
                                          ErrorKind.LOST)
                raise self._lost from err
            if not info.get("Running") and info.get("ExitCode") is not None:
                self._lost = await self._lost_by_signal(int(info["ExitCode"]))
                if self._lost is not None:
                    raise self._lost
                self._exit = int(info["ExitCode"])
                break
            reason = await self._container.loss_since(backend, self._generation)
            if reason:
                self._lost = BackendError(f"the container stopped under the process: {reason}", ErrorKind.LOST)
                raise self._lost
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.2)
        code = self._exit
        return -(code - 128) if 128 < code <= 128 + 64 else code

    async def why_exited(self, code: int) -> str:
        return await self._container.pressure(self._sandbox.backend)

    async def resize(self, size: PtySize) -> None:
        if not self._tty:
            raise BackendError("this process has no terminal", ErrorKind.FAILED_PRECONDITION)
        await self._sandbox.backend.call(lambda api: api.exec_resize(self.exec_id, height=size.rows,
                                                                      width=size.cols), "resizing the terminal")

    async def detach(self) -> None:
        """Close our end of the exec socket. Readers get EOF; ``wait()`` still learns the exit
        from the engine."""
        if not self._io.finished:
            self._io.close()
            await self._settle(None)
        else:
            self._io.close()


class _Killer:
    """The container's signalling helper (KILLER_SCRIPT), spawned on first use and again
    whenever it died (e.g. with its container)."""

    TIMEOUT = 15.0

    def __init__(self) -> None:
        self._proc: Process | None = None
        self._buf = b""
        self._seq = 0
        self._lock = asyncio.Lock()
        self._warming: asyncio.Future[None] | None = None
        # the sessions signalled in one turn of the loop (a shutdown's hundreds) share one walk
        self._batches: TurnBatch[int, tuple["DockerSandbox", int]] = TurnBatch(self._serve)

    async def signal(self, sandbox: "DockerSandbox", sid: int, sig: int) -> None:
        await self._batches.ask(int(sig), (sandbox, int(sid)))

    async def _serve(self, sig: int, asked: list[tuple["DockerSandbox", int]]) -> None:
        sandbox = asked[0][0]
        sids = sorted({sid for _, sid in asked})
        async with self._lock:
            for attempt in (1, 2):
                try:
                    await asyncio.wait_for(self._round_trip(sandbox, sids, sig), self.TIMEOUT)
                    return
                except (BackendError, EOFError, asyncio.TimeoutError) as exc:
                    await self.reset()
                    if attempt == 2:
                        if isinstance(exc, BackendError):
                            raise
                        what = f"session {sids[0]}" if len(sids) == 1 else f"{len(sids)} sessions"
                        raise BackendError(f"signalling {what} failed: the helper "
                                           f"{'timed out' if isinstance(exc, asyncio.TimeoutError) else 'exited'}",
                                           ErrorKind.LOST) from exc

    async def _round_trip(self, sandbox: "DockerSandbox", sids: list[int], sig: int) -> None:
        if self._proc is None:
            await self._spawn(sandbox)
        assert self._proc is not None
        # A sequence number pairs each answer with its request: the answer of a request whose
        # caller was cancelled mid-way is skipped, never taken for the next one's.
        self._seq += 1
        done = b"done %d\n" % self._seq
        await self._proc.write(b"%d %d %s\n" % (self._seq, int(sig), b" ".join(b"%d" % s for s in sids)))
        while done not in self._buf:
            chunk = await self._proc.stdout.read()
            if not chunk:
                raise EOFError
            self._buf += chunk
        self._buf = self._buf.split(done, 1)[1]

    def warm(self, sandbox: "DockerSandbox") -> None:
        """Start the helper in the background, so the first timeout does not pay for an exec."""
        if self._proc is None and (self._warming is None or self._warming.done()):
            self._warming = asyncio.ensure_future(self._warm(sandbox))

    async def _warm(self, sandbox: "DockerSandbox") -> None:
        async with self._lock:
            if self._proc is None:
                try:
                    await self._spawn(sandbox)
                except BackendError:
                    pass  # the first signal() tries again and reports

    async def _spawn(self, sandbox: "DockerSandbox") -> None:
        proc = await sandbox.spawn_helper(["/bin/sh", "-c", KILLER_SCRIPT, "executor-killer"], cwd="/",
                                   env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"})
        self._proc, self._buf = proc, b""

    async def reset(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            await proc.detach()


class _OrderedWriter:
    """Writes frames to a non-blocking socket in order, never blocking the caller: what the
    socket does not take at once is queued and sent by one flushing task."""

    def __init__(self, sock: socket.socket, on_error: Callable[[BaseException], None]) -> None:
        self._sock = sock
        self._queue: collections.deque[bytes] = collections.deque()
        self._flushing: asyncio.Task[None] | None = None
        self._on_error = on_error
        self.broken = False

    def send(self, data: bytes) -> None:
        if self.broken:
            return
        if self._flushing is None:
            try:
                sent = self._sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self.broken = True
                self._on_error(exc)
                return
            if sent == len(data):
                return
            data = data[sent:]
            self._queue.append(data)
            self._flushing = asyncio.ensure_future(self._flush())
        else:
            self._queue.append(data)

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._queue:
                await loop.sock_sendall(self._sock, self._queue.popleft())
        except OSError as exc:
            self.broken = True
            self._queue.clear()
            self._on_error(exc)
        finally:
            self._flushing = None


class _SpawnerConn:
    """The container's spawner (backends/_spawner.py): one docker exec, started on first use and
    again whenever it died; task processes are forked by it instead of one docker exec each."""

    HELLO_TIMEOUT = 30.0

    def __init__(self, container: "_Container") -> None:
        self._container = container
        self.mux: Spawner | None = None
        self._io: _ExecSocket | None = None
        self._lock = asyncio.Lock()
        self._cid: str | None = None
        self.unavailable = ""  # why this image cannot run the spawner (then: a docker exec per process)

    async def get(self, sandbox: "DockerSandbox") -> Spawner | None:
        mux = self.mux
        if mux is not None and mux.alive and self._cid == self._container.id and self._container.id is not None:
            return mux
        if self.unavailable:
            return None
        async with self._lock:
            mux = self.mux
            cid = await self._container.ensure()
            if mux is not None and mux.alive and self._cid == cid:
                return mux
            if mux is not None:
                self.close()
            return await self._start(sandbox, cid)

    async def _start(self, sandbox: "DockerSandbox", cid: str) -> Spawner | None:
        backend = self._container.backend
        user = backend.options.user
        argv = spawner_argv()

        def start(api: Any) -> tuple[str, Any]:
            exec_id = api.exec_create(cid, argv, stdin=True, stdout=True, stderr=True, tty=False,
                                      user=user, workdir="/")["Id"]
            return exec_id, api.exec_start(exec_id, tty=False, socket=True)

        try:
            async with backend.start_gate():
                exec_id, result = await backend.call(start, f"starting the process spawner in {self._container.name}")
        except BackendError as err:
            if err.kind is ErrorKind.NOT_FOUND or "is not running" in err.message or "is restarting" in err.message:
                self._container.invalidate(err.message)  # gone under us: the caller tries once more
                raise BackendError(err.message, ErrorKind.LOST) from err
            if "resource temporarily unavailable" in err.message.lower():
                pressure = await self._container.pressure(backend)
                raise BackendError(f"{err.message}{'; ' + pressure if pressure else ''}",
                                   ErrorKind.RESOURCE_EXHAUSTED) from err
            raise
        sock, leftover = _hijacked_socket(result)
        holder: dict[str, Any] = {}

        def on_error(exc: BaseException) -> None:
            io = holder.get("io")
            if io is not None:
                io.close()
                detach(self._on_close(mux, exec_id, exc), "the process spawner's end")

        writer = _OrderedWriter(sock, on_error)
        mux = Spawner(writer.send, f"container {self._container.name}",
                      explain=lambda: self._container.pressure(backend))
        io = _ExecSocket(sock, result, leftover, False, lambda exc: detach(
            self._on_close(mux, exec_id, exc), "the process spawner's end"), sink=mux)
        holder["io"] = io
        self.mux, self._io, self._cid = mux, io, cid
        try:
            await asyncio.wait_for(asyncio.shield(mux.hello), self.HELLO_TIMEOUT)
        except asyncio.TimeoutError:
            self.close()
            raise BackendError(f"the process spawner in {self._container.name} did not answer within "
                               f"{self.HELLO_TIMEOUT:.0f} s", ErrorKind.UNAVAILABLE) from None
        except BackendError:
            head = io.stderr_head.decode(errors="replace").strip()
            if "no python3" in head:
                self.unavailable = head
                return None
            raise
        return mux

    async def _on_close(self, mux: Spawner, exec_id: str, exc: BaseException | None) -> None:
        """The spawner's connection ended: every process it ran is lost, with the reason."""
        if not mux.alive:
            return
        backend = self._container.backend
        io = self._io if self.mux is mux else None
        head = io.stderr_head.decode(errors="replace").strip() if io is not None else ""
        try:
            info = await backend.call(lambda api: api.exec_inspect(exec_id), "inspecting the process spawner")
            code = info.get("ExitCode") if not info.get("Running") else None
            reason = await self._container.loss_since(backend, self._container.generation)
            if not reason and code is not None and code > 128 and backend.watching:
                changed = self._container.changed
                try:
                    await asyncio.wait_for(changed.wait(), 0.05)
                except asyncio.TimeoutError:
                    pass
                reason = self._container.event_since(0)
            if not reason:
                if code is not None and code > 128:
                    reason = (f"the process spawner in {self._container.name} was killed (signal {code - 128}), and the "
                              "processes it started lost their output with it: it runs as the sandbox user, so a "
                              "command that signals all of that user's processes (kill -9 -1, pkill -u) ends it")
                else:
                    reason = (f"the process spawner in {self._container.name} exited"
                              + (f" (exit code {code})" if code is not None else "")
                              + (f": {head}" if head else "")
                              + (f"; the connection broke: {exc}" if exc is not None else ""))
        except BackendError as err:
            reason = f"lost the Docker engine: {err.message}"
            self._container.invalidate(reason)
        if "container" in reason and "spawner" not in reason:
            self._container.invalidate(reason)
        mux.lost(BackendError(f"{reason}; the next command starts it again", ErrorKind.LOST))
        if self.mux is mux:
            self.close()

    def close(self) -> None:
        io, self._io, mux, self.mux = self._io, None, self.mux, None
        if io is not None:
            io.close()
        if mux is not None and mux.alive:
            mux.lost(BackendError("the process spawner was closed", ErrorKind.LOST))


# ---------------------------------------------------------------------------
# Containers
# ---------------------------------------------------------------------------

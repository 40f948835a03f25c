"""The docker backend: one hardened, persistent container, as fast as a local shell.

Design (issue 5):

* **One container per daemon** (or, with ``per_task: true``, one per task), created on first
  use from a local image and labelled ``io.executor.daemon=<instance id>``; a restarted daemon
  finds it again by label. If it is gone or stopped, the next ``sandbox()``/``spawn()`` recreates
  (or restarts) it and the sandbox says so through ``take_notice()``. Files live on a named
  volume at ``/workspace`` (one directory per task), so they survive a container restart.
* **Hardened by default**, every item an option: read-only root with a tmpfs ``/tmp``, all
  capabilities dropped, no-new-privileges, a non-root numeric user, pids/memory/CPU limits,
  ``network: none``, no host mounts, docker's default seccomp profile, never a pull.
* **Fast**: the Engine API through docker-py for control calls (in a worker thread), and for
  each process a docker exec whose *hijacked socket* is driven by the event loop directly
  (``add_reader`` + non-blocking ``recv``/``sock_sendall``, demultiplexed in place): a line
  written to a long-lived shell comes back with no thread hop and no polling.
* **Many new tasks at once** (issue 19): a task process is not a docker exec of its own (the
  engine runs execs one after another, ~50-100 ms of engine CPU each: 200 new tasks queued for
  15-30 s). One long-lived spawner per container (``backends/_spawner.py``, started with one
  docker exec) forks every task process, reaper included, and multiplexes their stdio over its
  exec socket; a start is a fork in the container. The backend's own helpers (kill walk, tar,
  path resolution) and images without python3 (or ``spawner: false``) keep a docker exec each.
  ``warm_shells`` pre-started shells (the core's pool, ``executor.tasks.ShellPool``) wait in
  the workspace for new tasks.
* Every spawn runs ``env -i K=V... argv`` so the process gets exactly the given environment
  (docker exec otherwise adds PATH, HOSTNAME, HOME and the image's variables). runc makes every
  exec'd process a session leader; the reaper (base.reaper_argv, the image's python3) forks the
  command as the leader of a new session and keeps everything it starts in its tree, which
  ``signal_session`` (a /proc walk inside the container) signals.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import io
import json
import re
import socket
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import field_validator

from ._spawner import Spawner, SpawnedProcess, spawner_argv
from .base import (
    Backend,
    BackendError,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    KILL_SUBREAPER_IF_PYTHON,
    KILL_TREE_FUNCTION,
    REAPER_START_FAILED,
    REAPER_START_FAILED_LINE,
    Sandbox,
    drain,
    reaper_argv,
)

LABEL_DAEMON = "io.executor.daemon"
LABEL_BACKEND = "io.executor.backend"
LABEL_SCOPE = "io.executor.scope"
LABEL_CONFIG = "io.executor.config"
SHARED = "shared"
#: The sandbox name of pre-started shells (not a valid task id: no task can have it).
POOL_TASK = ".pool"
#: Bumped when the way containers are created changes: existing ones are then replaced.
CONTAINER_RECIPE = 2

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_USER = re.compile(r"^\d+(:\d+)?$")

#: Ends every process a previous daemon left in the container: everything outside the
#: container's own init session (sid 1) except this script's own session.
CLEANUP_SCRIPT = r"""
me=$$; n=0
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = 1 ] && continue
  { read -r stat < "$d/stat"; } 2>/dev/null || continue
  rest=${stat##*) }
  set -- $rest
  [ "$4" = 1 ] && continue
  [ "$4" = "$me" ] && continue
  kill -9 "$pid" 2>/dev/null && n=$((n+1))
done
echo "$n"
"""

#: A long-lived helper per container: reads "SEQ PID SIG" lines, delivers SIG to the whole tree
#: of PID's spawn (base.KILL_TREE_FUNCTION: the reaper's descendants, `setsid` included), then
#: answers "done SEQ". It makes signal_session one round trip on an open exec socket instead of
#: a new exec (~50-100 ms), with shell builtins only (no fork per request).
KILLER_SCRIPT = KILL_TREE_FUNCTION + r"""
while read -r seq pid sig; do
  _extree "$pid" "$sig"
  echo "done $seq"
done
"""

#: Sets the terminal size before exec'ing the program: Engine API 1.41 has no size on exec
#: create, and a resize after start would race a program that reads its size at once.
PTY_WRAPPER = 'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"'

#: Creates the task's directory (as the sandbox user) and enters ``cwd`` before exec'ing the
#: command: a new task's first spawn needs no separate archive call (on Engine 20.10 an archive
#: upload costs as much as an exec, and the engine runs those one after another).
MKDIR_WRAPPER = 'mkdir -p -- "$1" && cd -- "$2" && shift 2 && exec "$@"'

#: Processes a task needs at least in the shared container: its shell and the shell's reaper.
PROCS_PER_TASK = 2
#: Processes of the container itself: docker-init, the idle command, the signal helper, the spawner.
PROCS_PER_CONTAINER = 4
#: Processes a start holds for a moment beyond what stays (runc's exec bootstrap stages, the
#: task directory's mkdir): kept free for each of the max_parallel_starts starts in flight.
PROCS_PER_START = 5


class DockerOptions(Options):
    """``backends.<name>`` options of ``kind: docker``. Defaults are the hardened policy."""

    #: The image; built locally by ``make sandbox-image``.
    image: str = "executor-sandbox:latest"
    #: Pull the image when it is missing. Off: no registry is contacted at run time.
    pull: bool = False
    #: Engine address (``unix:///var/run/docker.sock``, ``tcp://host:2375``); default: DOCKER_HOST.
    docker_host: str | None = None
    #: Seconds for Engine API control calls.
    api_timeout: float = 60.0
    #: One container per task instead of one for the whole daemon.
    per_task: bool = False
    #: Numeric ``UID:GID`` every process runs as (the container's idle init is a capless root).
    user: str = "1000:1000"
    read_only: bool = True
    #: tmpfs mounts, path -> mount options.
    tmpfs: dict[str, str] = {"/tmp": "rw,nosuid,nodev,size=512m", "/run": "rw,nosuid,nodev,size=16m"}
    cap_drop_all: bool = True
    cap_add: list[str] = []
    no_new_privileges: bool = True
    #: ``None`` keeps docker's default seccomp profile (a path to a profile JSON replaces it).
    seccomp_profile: str | None = None
    pids_limit: int | None = 512
    mem_limit: str | None = "2g"
    #: CPUs (fractional), sent as NanoCpus.
    cpus: float | None = 2.0
    #: ``none``, ``bridge``, ``host`` or a named network.
    network: str = "none"
    #: Extra bind mounts ``HOST:CONTAINER[:ro]``; none by default (no Docker socket, no host paths).
    mounts: list[str] = []
    #: Where the workspace volume is mounted; each task gets ``<workspace>/<task_id>``.
    workspace: str = "/workspace"
    #: Run docker-init (tini) as pid 1 so orphans are reaped and do not fill the pids limit.
    init: bool = True
    #: The container's main process; it only has to stay alive.
    command: list[str] = ["sleep", "infinity"]
    #: The program used to give each process exactly its environment.
    env_program: str = "/usr/bin/env"
    #: Extra labels on the containers and volumes.
    labels: dict[str, str] = {}
    #: At most this many process starts (exec create + start) in flight at once; the rest queue.
    #: The engine runs execs one after another anyway (~10-15/s on a 2-core host, however many
    #: are in flight): more parallelism only crowds out the control calls (wait, resize, files).
    max_parallel_starts: int = 4
    #: Start task processes through one long-lived spawner in the container (one docker exec per
    #: container; a process start is then a fork there, not an engine call). Off, or when the image
    #: has no python3: one docker exec per process.
    spawner: bool = True
    #: Pre-started task shells kept ready in the shared container (refilled in the background;
    #: each is handed to one new task, with its own directory and environment): a new task's first
    #: command then costs no shell start. 0 turns it off; ignored with ``per_task``.
    warm_shells: int = 2
    #: Remove this daemon's containers at an orderly shutdown (volumes, so files, are kept).
    #: For ephemeral daemons such as test runs; a crashed daemon's container still stays.
    remove_on_close: bool = False

    @field_validator("user")
    @classmethod
    def _numeric_user(cls, value: str) -> str:
        if not _USER.match(value):
            raise ValueError("user must be numeric UID or UID:GID (archive ownership is set from it)")
        return value

    @field_validator("max_parallel_starts")
    @classmethod
    def _positive_starts(cls, value: int) -> int:
        if value < 1:
            raise ValueError("max_parallel_starts must be at least 1")
        return value

    @field_validator("warm_shells")
    @classmethod
    def _pool_size(cls, value: int) -> int:
        if not 0 <= value <= 64:
            raise ValueError("warm_shells must be between 0 and 64")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        if not value:
            raise ValueError("network must be none, bridge, host or a network name")
        return value

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _docker_error(exc: BaseException, what: str) -> BackendError:
    """Turn a docker-py / requests failure into a BackendError a person can act on."""
    import docker.errors
    import requests

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, tarfile.TarError):
        return BackendError(f"{what}: the upload is not a valid tar stream: {exc}", ErrorKind.INVALID_ARGUMENT)
    if isinstance(exc, docker.errors.ImageNotFound):
        return BackendError(f"{what}: image not found in the Docker engine ({_explain(exc)}); build it with "
                            "`make sandbox-image` or set `pull: true`", ErrorKind.FAILED_PRECONDITION)
    if isinstance(exc, docker.errors.NotFound):
        return BackendError(f"{what}: {_explain(exc)}", ErrorKind.NOT_FOUND)
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code or 500
        kind = ErrorKind.FAILED_PRECONDITION if code in (400, 409) else (
            ErrorKind.PERMISSION_DENIED if code == 403 else ErrorKind.UNAVAILABLE)
        return BackendError(f"{what}: Docker engine said {code}: {_explain(exc)}", kind)
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                        docker.errors.DockerException, OSError)):
        return BackendError(f"{what}: cannot reach the Docker engine ({exc}); start dockerd "
                            "(`make docker-up`) or fix `docker_host`", ErrorKind.UNAVAILABLE)
    return BackendError(f"{what}: {exc}", ErrorKind.INTERNAL)


def _explain(exc: Any) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


# ---------------------------------------------------------------------------
# Streams and the hijacked exec socket
# ---------------------------------------------------------------------------


class _Stream:
    """One output stream of an exec: ``read()`` returns what is buffered, b"" at EOF.

    The socket reader pauses when a consumer falls behind (``HIGH`` bytes buffered) and
    resumes once it has read below ``LOW``; a slow reader never makes the daemon buffer a
    command's whole output."""

    HIGH = 8 << 20
    LOW = 1 << 20
    CHUNK = 1 << 20

    def __init__(self, on_drain: Callable[[], None]) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self.size = 0
        self._eof = False
        self._exc: BaseException | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self._on_drain = on_drain

    def feed(self, data: bytes) -> None:
        if data and not self._eof:
            self._chunks.append(data)
            self.size += len(data)
            self._wake()

    def feed_eof(self, exc: BaseException | None = None) -> None:
        if not self._eof:
            self._eof = True
            self._exc = exc
            self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def read(self) -> bytes:
        while not self._chunks:
            if self._exc is not None:
                raise self._exc
            if self._eof:
                return b""
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter
        if len(self._chunks) == 1:
            data = self._chunks.popleft()
        else:
            parts, n = [], 0
            while self._chunks and n < self.CHUNK:
                part = self._chunks.popleft()
                parts.append(part)
                n += len(part)
            data = b"".join(parts)
        self.size -= len(data)
        if self.size < self.LOW:
            self._on_drain()
        return data


class _ExecSocket:
    """The client end of a hijacked ``POST /exec/{id}/start``, driven by the event loop.

    Without a TTY the engine multiplexes stdout and stderr in frames
    (``[stream, 0, 0, 0, size32be] payload``); with a TTY the bytes are raw. Reading happens
    in an ``add_reader`` callback (one non-blocking ``recv`` per readiness event), writing
    through ``loop.sock_sendall``."""

    def __init__(self, sock: socket.socket, keepalive: Any, leftover: bytes, tty: bool,
                 on_close: Callable[[BaseException | None], None], sink: Any = None) -> None:
        self._sock = sock
        self._keepalive = keepalive  # docker-py's SocketIO/response: closing them would close the fd
        self._loop = asyncio.get_running_loop()
        self._tty = tty
        self._buf = bytearray()
        self._on_close = on_close
        # sink: stdout goes to sink.feed() as it arrives (the spawner's frames), stderr only to
        # stderr_head; nothing is buffered here, so the socket is never paused
        self._sink = sink
        self.stdout = _Stream(self._maybe_resume)
        self.stderr = None if tty or sink is not None else _Stream(self._maybe_resume)
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
        if not self._reading and self._buffered() < _Stream.LOW:
            self._resume()

    def _buffered(self) -> int:
        if self._sink is not None:
            return 0
        return self.stdout.size + (self.stderr.size if self.stderr is not None else 0)

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
        if self._buffered() > _Stream.HIGH:
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
        asyncio.ensure_future(self._settle(exc))

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

    async def signal(self, sandbox: "DockerSandbox", sid: int, sig: int) -> None:
        async with self._lock:
            for attempt in (1, 2):
                try:
                    await asyncio.wait_for(self._round_trip(sandbox, sid, sig), self.TIMEOUT)
                    return
                except (BackendError, EOFError, asyncio.TimeoutError) as exc:
                    await self.reset()
                    if attempt == 2:
                        if isinstance(exc, BackendError):
                            raise
                        raise BackendError(f"signalling session {sid} failed: the helper "
                                           f"{'timed out' if isinstance(exc, asyncio.TimeoutError) else 'exited'}",
                                           ErrorKind.LOST) from exc

    async def _round_trip(self, sandbox: "DockerSandbox", sid: int, sig: int) -> None:
        if self._proc is None:
            await self._spawn(sandbox)
        assert self._proc is not None
        # A sequence number pairs each answer with its request: the answer of a request whose
        # caller was cancelled mid-way is skipped, never taken for the next one's.
        self._seq += 1
        done = b"done %d\n" % self._seq
        await self._proc.write(b"%d %d %d\n" % (self._seq, int(sid), int(sig)))
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
        self._exec_id = ""
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
                asyncio.ensure_future(self._on_close(mux, exec_id, exc))

        writer = _OrderedWriter(sock, on_error)
        mux = Spawner(writer.send, f"container {self._container.name}",
                      explain=lambda: self._container.pressure(backend))
        io = _ExecSocket(sock, result, leftover, False, lambda exc: asyncio.ensure_future(
            self._on_close(mux, exec_id, exc)), sink=mux)
        holder["io"] = io
        self.mux, self._io, self._exec_id, self._cid = mux, io, exec_id, cid
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


class _Container:
    """One labelled container (the daemon's shared one, or a task's) and its life story."""

    def __init__(self, backend: "DockerBackend", scope: str) -> None:
        self.backend = backend
        self.scope = scope
        self.id: str | None = None
        self.started_at: str | None = None
        self.generation = 0
        self.notices: list[tuple[int, str]] = []
        self._suspect: str | None = None
        self._lock = asyncio.Lock()
        self.known_dirs: set[str] = set()
        self.events: collections.deque[tuple[float, str]] = collections.deque(maxlen=32)
        self.killer = _Killer()
        self.spawner = _SpawnerConn(self)
        self.changed = asyncio.Event()
        self.cleaned = False
        self.tasks: set[str] = set()  # tasks with a sandbox here (released ones removed)

    _WORDS = {"kill": "was sent a signal by the engine (docker kill / docker rm -f)", "die": "stopped",
              "destroy": "was removed", "oom": "ran out of memory", "stop": "was stopped",
              "pause": "was paused"}

    def on_event(self, action: str, detail: str) -> None:
        """An engine event about this container (see _EventWatcher).

        ``oom`` alone is not a loss: the kernel killed one process and the container runs on
        (the command reports -9 as it would anywhere); if pid 1 died, ``die`` follows."""
        if action in ("oom", "pause"):
            return
        words = self._WORDS.get(action, f"got '{action}'")
        self.events.append((time.monotonic(), f"container {self.name} {words}{detail}"))
        self.invalidate(f"container {self.name} {words}")
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def event_since(self, since: float) -> str:
        return "; ".join(text for at, text in self.events if at >= since)

    @property
    def name(self) -> str:
        base = f"executor-{self.backend.name}-{self.backend.instance_id[:8]}"
        return base if self.scope == SHARED else f"{base}-{self.scope}"[:120]

    @property
    def volume(self) -> str:
        base = f"executor-{self.backend.name}-{self.backend.instance_id[:8]}-workspace"
        return base if self.scope == SHARED else f"{base}-{self.scope}"[:120]

    def labels(self) -> dict[str, str]:
        return {**self.backend.options.labels, LABEL_DAEMON: self.backend.instance_id,
                LABEL_BACKEND: self.backend.name, LABEL_SCOPE: self.scope, LABEL_CONFIG: self.backend.config_hash}

    def invalidate(self, reason: str) -> None:
        """A process saw the container fail: check it again before the next use."""
        self._suspect = reason

    async def ensure(self) -> str:
        """The running container's id: found by label, started, or created."""
        if self.id is not None and self._suspect is None:
            return self.id
        self.backend.watch_events()
        async with self._lock:
            if self.id is not None and self._suspect is None:
                return self.id
            had = self.id
            cid, started, note, created = await self.backend.call(self._ensure_sync,
                                                                  f"preparing container {self.name}")
            if had is not None and cid != had:
                note = note or f"container {self.name} was gone and has been recreated"
            if had is not None and cid == had and started != self.started_at:
                note = note or f"container {self.name} had stopped and has been restarted"
            if cid != had or started != self.started_at:
                self.known_dirs.clear()
            if had is None and not self.cleaned and not created:
                # First attach in this daemon's life: end what a previous daemon left running
                # (before anything of ours runs here). Done here, not only in start(), so a
                # daemon that started while the engine was down still does it.
                self.backend.orphans_ended += await self.backend.cleanup(cid)
                self.cleaned = True
            self.id, self.started_at, self._suspect = cid, started, None
            if note:
                self.generation += 1
                self.notices.append((self.generation, note + f" (files under {self.backend.options.workspace} are kept)"))
            return cid

    def _ensure_sync(self, api: Any) -> tuple[str, str, str, bool]:
        """(id, StartedAt, a note for the tasks, whether it was created just now)."""
        import docker.errors

        note = ""
        created = False
        found = api.containers(all=True, filters={"label": [f"{LABEL_DAEMON}={self.backend.instance_id}",
                                                            f"{LABEL_SCOPE}={self.scope}",
                                                            f"{LABEL_BACKEND}={self.backend.name}"]})
        for c in found:
            if c["Labels"].get(LABEL_CONFIG) != self.backend.config_hash:
                api.remove_container(c["Id"], force=True)
                note = f"container {self.name} was replaced because the backend's options changed"
                found = []
                break
        if found:
            cid = found[0]["Id"]
            state = api.inspect_container(cid)["State"]
            if not state.get("Running"):
                api.start(cid)
                note = (f"container {self.name} had stopped ({_state_reason(state)}) and has been restarted")
        else:
            cid = self._create(api)
            created = True
            if not note and self.backend.remembered(self.scope) not in (None, cid):
                note = f"container {self.name} was gone and has been recreated"
            try:
                api.start(cid)
            except docker.errors.APIError:
                api.remove_container(cid, force=True)
                raise
        self.backend.remember(self.scope, cid)
        self._check_image_tools(api, cid)
        started = api.inspect_container(cid)["State"].get("StartedAt", "")
        return cid, started, note, created

    def _check_image_tools(self, api: Any, cid: str) -> None:
        """The programs every spawn relies on must be in the image; say so plainly if not."""
        for path in (self.backend.options.env_program, "/bin/sh"):
            res = api.head(api._url("/containers/{0}/archive", cid), params={"path": path})
            if res.status_code == 404:
                raise BackendError(f"image {self.backend.options.image} has no {path}; the docker backend runs every "
                                   "process through it (install coreutils and a POSIX sh, or set `env_program`)",
                                   ErrorKind.FAILED_PRECONDITION)

    def _give_workspace(self, api: Any, image: str) -> None:
        """Make a new volume's root belong to the sandbox user.

        A fresh named volume's root is root's; the archive API skips ``.`` entries, and no
        process in the hardened container may chown (no CAP_CHOWN, and a privileged exec is
        refused once the bounding set is empty). So a one-off container holding only
        CAP_CHOWN does it, once per volume. Without it a task's directory could be emptied
        but not removed."""
        from docker.types import Mount

        uid, gid = self.backend.options.uid_gid
        if uid == 0:
            return
        workspace = self.backend.options.workspace
        host_config = api.create_host_config(
            mounts=[Mount(target=workspace, source=self.volume, type="volume")], network_mode="none",
            cap_drop=["ALL"], cap_add=["CHOWN"], security_opt=["no-new-privileges:true"])
        helper = api.create_container(image, command=["chown", f"{uid}:{gid}", workspace], user="0:0",
                                      host_config=host_config, labels=self.labels(), entrypoint=[])["Id"]
        try:
            api.start(helper)
            result = api.wait(helper, timeout=60)
            if result.get("StatusCode") != 0:
                logs = api.logs(helper).decode(errors="replace").strip()
                raise BackendError(f"could not give {workspace} to user {uid}:{gid}: {logs}",
                                   ErrorKind.FAILED_PRECONDITION)
        finally:
            api.remove_container(helper, force=True)

    def _create(self, api: Any) -> str:
        import docker.errors

        opts = self.backend.options
        image = opts.image
        try:
            api.inspect_image(image)
        except docker.errors.ImageNotFound:
            if not opts.pull:
                raise BackendError(f"image {image} is not in the Docker engine; build it with `make sandbox-image` "
                                   "(or set `pull: true` to pull it from a registry)", ErrorKind.FAILED_PRECONDITION)
            api.pull(image)
        try:
            api.inspect_volume(self.volume)
        except docker.errors.NotFound:
            api.create_volume(self.volume, labels=self.labels())
            try:
                self._give_workspace(api, image)
            except BaseException:
                api.remove_volume(self.volume, force=True)
                raise
        host_config = api.create_host_config(**self.backend.host_config_kwargs(self.volume))
        # The idle main process (docker-init + command) runs as root *without capabilities*:
        # the sandbox user's processes (opts.user, set on every exec) cannot signal it, so
        # `kill -9 -1` or `pkill sleep` in a command cannot stop the container.
        kwargs = dict(image=image, command=list(opts.command), user="0:0", labels=self.labels(),
                      host_config=host_config, working_dir=opts.workspace, hostname="sandbox",
                      name=self.name, detach=True)
        try:
            return api.create_container(**kwargs)["Id"]
        except docker.errors.APIError as exc:
            if _status(exc) != 409:
                raise
            # A container of that name exists: ours from an older instance, or someone else's.
            other = api.inspect_container(self.name)
            if other["Config"]["Labels"].get(LABEL_BACKEND) != self.backend.name:
                raise BackendError(f"a container named {self.name} exists and is not ours; remove or rename it",
                                   ErrorKind.FAILED_PRECONDITION) from exc
            api.remove_container(self.name, force=True)
            return api.create_container(**kwargs)["Id"]

    async def describe_loss(self, backend: "DockerBackend") -> str:
        """What happened to the container, in words."""
        cid = self.id
        if cid is None:
            return "no container"

        def look(api: Any) -> str:
            import docker.errors

            try:
                state = api.inspect_container(cid)["State"]
            except docker.errors.NotFound:
                return f"container {self.name} was removed"
            if state.get("Running") and state.get("StartedAt") == self.started_at:
                return f"container {self.name} is still running"
            return f"container {self.name} stopped ({_state_reason(state)})"

        try:
            reason = await backend.call(look, "inspecting the container")
        except BackendError as err:
            reason = err.message
        if "still running" not in reason:
            self.invalidate(reason)
        return reason + "; the next command starts it again"

    async def pressure(self, backend: "DockerBackend") -> str:
        """The container's pids and memory use against its limits, from the engine (no exec: one
        may not start when the pids are exhausted), naming what is at its limit; "" if unknown."""
        cid = self.id
        if cid is None:
            return ""

        def look(api: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            stats = api.stats(cid, stream=False, one_shot=True)
            return stats, api.inspect_container(cid)["State"]

        try:
            stats, state = await backend.call(look, "reading the container's resource use")
        except BackendError:
            return ""
        parts = []
        pids = stats.get("pids_stats") or {}
        current, limit = pids.get("current"), pids.get("limit")
        if current is not None and limit:
            full = current >= limit - 1  # the failed fork itself is not counted
            parts.append(f"{'the pids limit is reached: ' if full else ''}{current} processes of pids_limit {limit}")
        memory = stats.get("memory_stats") or {}
        if memory.get("limit") and memory.get("usage") is not None:
            parts.append(f"memory {memory['usage'] >> 20} MiB of {memory['limit'] >> 20} MiB"
                         f"{', out of memory (mem_limit)' if memory.get('failcnt') else ''}")
        if state.get("OOMKilled"):
            parts.append("the container was killed for exceeding mem_limit")
        return ", ".join(parts)

    async def loss_since(self, backend: "DockerBackend", generation: int) -> str:
        """A reason if the container stopped/restarted/vanished since ``generation`` began."""
        if generation != self.generation:
            return f"container {self.name} was replaced"
        reason = await self.describe_loss(backend)
        return "" if "still running" in reason else reason


def _state_reason(state: Mapping[str, Any]) -> str:
    if state.get("OOMKilled"):
        return "killed for exceeding its memory limit"
    status = state.get("Status", "unknown")
    code = state.get("ExitCode")
    return f"{status}, exit code {code}" if code is not None else str(status)


# ---------------------------------------------------------------------------
# Tar ownership rewriting
# ---------------------------------------------------------------------------


class _AsyncReader(io.RawIOBase):
    """A blocking file object (for tarfile, in a worker thread) over an async byte iterator
    consumed on the event loop."""

    def __init__(self, data: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._it = data.__aiter__()
        self._loop = loop
        self._buf = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buf and not self._done:
            try:
                self._buf = bytes(asyncio.run_coroutine_threadsafe(self._it.__anext__(), self._loop).result())
            except StopAsyncIteration:
                self._done = True
        n = min(len(target), len(self._buf))
        target[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _owned_tar(source: io.RawIOBase, uid: int, gid: int) -> Iterator[bytes]:
    """Re-emit a tar stream with every member owned by ``uid:gid``, in constant memory.

    The engine unpacks archives as root and keeps the owners written in the headers, and it
    creates parent directories missing from the archive as root; the sandbox's processes must
    own everything a client uploads, so missing parents are added as entries too. (docker's
    ``copyUIDGID`` would look the numeric user up in the *host's* passwd file and fail.)"""
    dirs: set[str] = set()

    def header(info: tarfile.TarInfo) -> bytes:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    with tarfile.open(fileobj=io.BufferedReader(source, 1 << 16), mode="r|*") as tin:
        for member in tin:
            parts = PurePosixPath(member.name).parts
            parts = tuple(p for p in parts if p != "/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in dirs:
                    dirs.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, member.mtime
                    yield header(info)
            if member.isdir():
                dirs.add("/".join(parts))
            if member.issparse():
                member.type = tarfile.REGTYPE
            yield header(member)
            if member.isreg():
                stream = tin.extractfile(member)
                assert stream is not None
                while chunk := stream.read(1 << 20):
                    yield chunk
                if member.size % 512:
                    yield b"\0" * (512 - member.size % 512)
    yield b"\0" * 1024


def _dir_tar(names: Sequence[str], uid: int, gid: int, mode: int = 0o755) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            info.uid, info.gid = uid, gid
            tar.addfile(info)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# Container events
# ---------------------------------------------------------------------------


class _EventWatcher:
    """Follows the engine's events for our containers in a thread (docker-py streams block).

    A ``kill`` event is sent before the signal reaches the container, so when an exec dies of
    a signal we can tell "the container was killed or removed" from "someone killed this
    process" without guessing from timing. ``die``/``destroy``/``oom`` also mark the
    container for a fresh look before its next use."""

    ACTIONS = ("kill", "die", "destroy", "stop")

    def __init__(self, backend: "DockerBackend", loop: asyncio.AbstractEventLoop) -> None:
        self._backend = backend
        self._loop = loop
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"docker-events-{backend.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import docker

        while not self._stop.is_set():
            api = None
            try:
                api = self._backend.new_client(timeout=None)
                self._stream = api.events(decode=True, filters={
                    "type": "container", "label": f"{LABEL_DAEMON}={self._backend.instance_id}"})
                for event in self._stream:
                    if self._stop.is_set():
                        break
                    self._loop.call_soon_threadsafe(self._backend.on_event, event)
            except (docker.errors.DockerException, OSError, RuntimeError, Exception):  # noqa: BLE001 - reconnect
                pass  # the engine went away (or the loop closed): try again in a second
            finally:
                if api is not None:
                    api.close()
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - best effort
                pass


# ---------------------------------------------------------------------------
# Sandbox and backend
# ---------------------------------------------------------------------------


class DockerSandbox(Sandbox):
    """A task's directory in the (shared or per-task) container."""

    def __init__(self, backend: "DockerBackend", container: _Container, task_id: str) -> None:
        self.backend = backend
        self.container = container
        self.task_id = task_id
        self.root = f"{backend.options.workspace.rstrip('/')}/{task_id}"
        self._seen_generation = container.generation

    def take_notice(self) -> str | None:
        """Something the task should be told once (e.g. its container was recreated), or None."""
        del self.container.notices[:-16]
        notes = [text for gen, text in self.container.notices if gen > self._seen_generation]
        self._seen_generation = self.container.generation
        return "; ".join(notes) or None

    async def _ready(self) -> str:
        """The container id, with this task's directory present (recreating what vanished)."""
        cid = await self.container.ensure()
        if self.task_id not in self.container.known_dirs:
            await self.backend.make_task_dir(cid, self.task_id)
            self.container.known_dirs.add(self.task_id)
        return cid

    def _command(self, argv: Sequence[str], env: Mapping[str, str], pty: PtySize | None,
                 reaper: bool = True) -> list[str]:
        if not argv:
            raise BackendError("nothing to run: empty argv", ErrorKind.INVALID_ARGUMENT)
        if "=" in argv[0]:
            raise BackendError(f"cannot run {argv[0]!r}: a program name with '=' cannot follow env -i",
                               ErrorKind.INVALID_ARGUMENT)
        assignments = []
        for key, value in env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise BackendError(f"invalid environment variable {key!r}", ErrorKind.INVALID_ARGUMENT)
            assignments.append(f"{key}={value}")
        # Under the reaper (the image's python3): argv leads a new session and whatever it
        # starts stays in the reaper's tree, which signal_session reaches (setsid included).
        cmd = [self.backend.options.env_program, "-i", *assignments, *argv]
        if reaper:
            cmd = reaper_argv(cmd, pty=pty is not None)
        if pty is not None:
            cmd = ["/bin/sh", "-c", PTY_WRAPPER, "sh", str(pty.rows), str(pty.cols), *cmd]
        return cmd

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        return await self._spawn_any(argv, cwd=cwd, env=env, pty=pty)

    async def _spawn_any(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                         pty: PtySize | None = None, helper: bool = False) -> Process:
        """Through the spawner when it runs here (a fork), else a docker exec of its own."""
        if self.backend.options.spawner:
            for attempt in (1, 2):
                try:
                    mux = await self.container.spawner.get(self)
                    if mux is None:
                        break  # the image cannot run it: a docker exec per process
                    return await self._spawn_forked(mux, argv, cwd=cwd, env=env, pty=pty)
                except BackendError as err:
                    if attempt == 1 and err.kind is ErrorKind.LOST:
                        continue  # the spawner died under us (e.g. its container): once more
                    raise
        return await self._spawn(argv, cwd=cwd, env=env, pty=pty, reaper=not helper)

    async def _spawn_forked(self, mux: Spawner, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                            pty: PtySize | None) -> SpawnedProcess:
        """A process forked by the container's spawner (with the reaper, as ``_spawn`` starts it)."""
        cmd = self._command(argv, env, None, reaper=False)
        new_dir = self.task_id not in self.container.known_dirs
        proc = mux.spawn(cmd, cwd=cwd, mkdir=self.root if new_dir else None, pty=pty)
        try:
            await proc.started()
        except BackendError as err:
            if err.kind is ErrorKind.RESOURCE_EXHAUSTED:
                pressure = await self.container.pressure(self.backend)
                why = err.message.removeprefix("fork: ")
                raise BackendError(f"the process could not start in container {self.container.name}: fork failed ({why})"
                                   f"{'; ' + pressure if pressure else ''}", ErrorKind.RESOURCE_EXHAUSTED) from err
            if err.kind is ErrorKind.FAILED_PRECONDITION:
                raise BackendError(f"cannot start {argv[0]!r} in container {self.container.name}: {err.message}",
                                   ErrorKind.NOT_FOUND if "No such file" in err.message else err.kind) from err
            raise
        if new_dir:
            self.container.known_dirs.add(self.task_id)
        return proc

    async def spawn_helper(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> Process:
        """The backend's own helpers (kill walk, path resolution, tar, rm): forked by the spawner
        like any process (a fork costs far less than an exec: closing 1,000 tasks ran 1,000 `rm`
        execs one after another in the engine); with a docker exec each, without the reaper
        (nothing of theirs outlives them, and a python3 start per helper costs ~40 ms and a pid;
        runc still makes each the leader of its own session)."""
        return await self._spawn_any(argv, cwd=cwd, env=env, helper=True)

    async def _spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], pty: PtySize | None,
                     reaper: bool) -> Process:
        cmd = self._command(argv, env, pty, reaper)
        tty = pty is not None
        user = self.backend.options.user
        for attempt in (1, 2):
            cid = await self.container.ensure()
            run, workdir = cmd, cwd
            if self.task_id not in self.container.known_dirs:
                if await self.backend._stat(cid, self.root) is not None:
                    self.container.known_dirs.add(self.task_id)
                else:  # a new task (or a recreated container): the first spawn makes the directory
                    run, workdir = ["/bin/sh", "-c", MKDIR_WRAPPER, "executor-mkdir", self.root, cwd, *cmd], "/"
            spawned_at = time.monotonic()

            def start(api: Any) -> tuple[str, Any]:
                exec_id = api.exec_create(cid, run, stdin=True, stdout=True, stderr=True, tty=tty,
                                          user=user, workdir=workdir)["Id"]
                return exec_id, api.exec_start(exec_id, tty=tty, socket=True)

            try:
                async with self.backend.start_gate():
                    exec_id, result = await self.backend.call(start, f"starting {argv[0]!r} in {self.container.name}")
            except BackendError as err:
                if attempt == 1 and (err.kind is ErrorKind.NOT_FOUND or "is not running" in err.message
                                     or "is restarting" in err.message):
                    self.container.invalidate(err.message)
                    continue
                if "resource temporarily unavailable" in err.message.lower():
                    pressure = await self.container.pressure(self.backend)
                    raise BackendError(f"{err.message}{'; ' + pressure if pressure else ''}",
                                       ErrorKind.RESOURCE_EXHAUSTED) from err
                raise
            proc = DockerProcess(self, self.container, exec_id, result, tty, spawned_at)
            if pty is not None:
                try:
                    await proc.resize(pty)
                except BackendError:
                    pass  # the wrapper already set the size; the process may be gone already
            return proc
        raise AssertionError("unreachable")

    async def signal_session(self, pid: int, sig: int) -> None:
        """Signal the whole tree of ``pid``'s spawn inside the container, through the
        container's helper (one round trip); the helper is respawned if it died."""
        await self.container.killer.signal(self, pid, sig)

    # Sandbox.put_archive / get_archive resolve and check every path in the container first;
    # these only move the bytes (the engine's archive API where it is safe, else tar inside).
    async def unpack_tar(self, dest: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        cid = await self._ready()
        # the engine's unpacking replaces a symlink on a member's path with a directory: tar follows it
        if through_links or not await self.backend.native_archive_ok(cid, self.root, dest, create=True):
            await super().unpack_tar(dest, data)
            return
        await self.backend.put_archive(cid, dest, data)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        cid = await self._ready()
        if not await self.backend.native_archive_ok(cid, self.root, path, create=False):
            async for chunk in super().pack_tar(path):
                yield chunk
            return
        async for chunk in self.backend.get_archive(cid, path):
            yield chunk

    async def release(self, remove_files: bool = False) -> None:
        self.container.tasks.discard(self.task_id)
        if self.backend.options.per_task:
            self.container.spawner.close()
            await self.backend.remove_container(self.container, remove_volume=remove_files)
            return
        if remove_files:
            proc = await self.spawn_helper(["rm", "-rf", "--", self.root], cwd="/",
                                    env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
            await proc.close_stdin()
            await drain(proc)
            await proc.wait()
            await proc.detach()
            self.container.known_dirs.discard(self.task_id)


class DockerBackend(Backend):
    kind = "docker"
    Options = DockerOptions
    options: DockerOptions

    def __init__(self, name: str, options: DockerOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config_hash = hashlib.sha256(
            json.dumps([CONTAINER_RECIPE, options.model_dump(exclude={"env_passthrough", "api_timeout", "max_parallel_starts", "spawner",
                                                                       "warm_shells",
                                                                       "docker_host"})],
                       sort_keys=True).encode()).hexdigest()[:16]
        self._api: Any = None
        self._api_lock = threading.Lock()
        self._shared: _Container | None = None
        self._per_task: dict[str, _Container] = {}
        self._watcher: _EventWatcher | None = None
        # Our own workers: uploads hold one for their duration, and the loop's default
        # executor (shared with the core) must not fill up with Engine API calls.
        # Process starts take at most max_parallel_starts of them, so the rest stay free for
        # control calls (exit codes, resizes, files) during a burst of new tasks.
        self._pool = ThreadPoolExecutor(max_workers=max(16, options.max_parallel_starts + 12),
                                        thread_name_prefix=f"docker-{name}")
        self._start_gate: asyncio.Semaphore | None = None
        self.orphans_ended = 0

    # identity and small persistent state ---------------------------------
    def remembered(self, scope: str) -> str | None:
        try:
            return json.loads((self.state_dir / "containers.json").read_text()).get(scope)
        except (FileNotFoundError, ValueError):
            return None

    def remember(self, scope: str, cid: str) -> None:
        path = self.state_dir / "containers.json"
        try:
            known = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            known = {}
        if known.get(scope) != cid:
            known[scope] = cid
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(known))
            tmp.replace(path)

    # the Engine API --------------------------------------------------------
    def new_client(self, timeout: float | None) -> Any:
        """A docker-py low-level client for the configured engine (connecting costs a round trip)."""
        import docker

        kwargs: dict[str, Any] = {"version": "auto", "timeout": timeout}
        if self.options.docker_host:
            return docker.APIClient(base_url=self.options.docker_host, **kwargs)
        return docker.APIClient(**docker.utils.kwargs_from_env(), **kwargs)

    def _client(self) -> Any:
        with self._api_lock:
            if self._api is None:
                api = self.new_client(self.options.api_timeout)
                if api.base_url.startswith(("https://", "http+docker://ssh")):
                    api.close()
                    raise BackendError("the docker backend streams processes over unix or plain tcp engine sockets "
                                       "only; TLS and ssh docker_host are not supported yet", ErrorKind.FAILED_PRECONDITION)
                self._api = api
            return self._api

    @property
    def watching(self) -> bool:
        return self._watcher is not None

    def watch_events(self) -> None:
        """Start following container events (once; from the event loop)."""
        if self._watcher is None:
            self._watcher = _EventWatcher(self, asyncio.get_running_loop())

    def on_event(self, event: Mapping[str, Any]) -> None:
        action = str(event.get("Action") or event.get("status") or "")
        cid = str(event.get("id") or event.get("Actor", {}).get("ID") or "")
        if action.split(":")[0] not in _EventWatcher.ACTIONS:
            return
        attrs = event.get("Actor", {}).get("Attributes", {}) or {}
        detail = f" (signal {attrs['signal']})" if "signal" in attrs else (
            f" (exit code {attrs['exitCode']})" if "exitCode" in attrs else "")
        for container in [self._shared, *self._per_task.values()]:
            if container is not None and container.id == cid:
                container.on_event(action.split(":")[0], detail)

    async def call(self, fn: Callable[[Any], Any], what: str) -> Any:
        """Run a blocking docker-py call in a worker thread; failures become BackendError."""

        def run() -> Any:
            return fn(self._client())

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, run)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated with context
            raise _docker_error(exc, what) from exc

    def host_config_kwargs(self, volume: str) -> dict[str, Any]:
        """docker-py ``create_host_config`` arguments for the effective policy."""
        from docker.types import Mount

        o = self.options
        # no_copy: the image's directory would be copied up, with its owner, onto the empty volume
        mounts = [Mount(target=o.workspace, source=volume, type="volume", no_copy=True)]
        for spec in o.mounts:
            parts = spec.split(":")
            if len(parts) not in (2, 3):
                raise BackendError(f"mount {spec!r} is not HOST:CONTAINER[:ro]", ErrorKind.INVALID_ARGUMENT)
            mounts.append(Mount(target=parts[1], source=parts[0], type="bind",
                                read_only=len(parts) == 3 and parts[2] == "ro"))
        security_opt = []
        if o.no_new_privileges:
            security_opt.append("no-new-privileges:true")
        if o.seccomp_profile:
            try:
                profile = Path(o.seccomp_profile).expanduser().read_text()
            except OSError as exc:
                raise BackendError(f"cannot read the seccomp profile {o.seccomp_profile}: {exc.strerror}",
                                   ErrorKind.FAILED_PRECONDITION) from exc
            security_opt.append(f"seccomp={profile}")
        kwargs: dict[str, Any] = dict(
            init=o.init, read_only=o.read_only, tmpfs=dict(o.tmpfs), mounts=mounts,
            cap_drop=["ALL"] if o.cap_drop_all else None, cap_add=list(o.cap_add) or None,
            security_opt=security_opt or None, network_mode=o.network, pids_limit=o.pids_limit,
        )
        if o.mem_limit:
            kwargs["mem_limit"] = o.mem_limit
            kwargs["memswap_limit"] = o.mem_limit  # no swap beyond the limit
        if o.cpus:
            kwargs["nano_cpus"] = int(o.cpus * 1e9)
        return kwargs

    # Backend interface ------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(pty=True, resize=True, signals=True, stdin=True, background=True,
                            persistent_shell=True, file_transfer=True, network_policy=self.options.network,
                            streaming=True)

    def policy(self) -> dict[str, str]:
        o = self.options
        return {
            "isolation": "docker container" + (" per task" if o.per_task else " shared by the daemon's tasks"),
            "image": o.image,
            "pull": str(o.pull).lower(),
            "user": o.user,
            "read_only_root": str(o.read_only).lower(),
            "tmpfs": ", ".join(sorted(o.tmpfs)) or "none",
            "capabilities": ("none" if o.cap_drop_all else "docker default") + (
                f" + {', '.join(o.cap_add)}" if o.cap_add else ""),
            "no_new_privileges": str(o.no_new_privileges).lower(),
            "seccomp": "custom profile" if o.seccomp_profile else "docker default",
            "pids_limit": str(o.pids_limit) if o.pids_limit else "unlimited",
            "memory": o.mem_limit or "unlimited",
            "cpus": str(o.cpus) if o.cpus else "unlimited",
            "network": o.network,
            "host_mounts": ", ".join(o.mounts) or "none",
            "workspace": f"{o.workspace} (named volume)",
            "kill": KILL_SUBREAPER_IF_PYTHON,
        }

    async def start(self) -> None:
        """Attach to our labelled containers and end what a previous daemon left running in them."""
        try:
            found = await self.call(lambda api: api.containers(filters={"label": [
                f"{LABEL_DAEMON}={self.instance_id}", f"{LABEL_BACKEND}={self.name}"]}), "listing containers")
        except BackendError:
            return  # unreachable: health() says so; the first use retries
        for info in found:
            try:
                await self._container_for(info["Labels"].get(LABEL_SCOPE, SHARED)).ensure()  # ends leftovers
            except BackendError:
                continue

    async def cleanup(self, cid: str) -> int:
        """End every process in the container outside its init session; how many were ended."""
        def run(api: Any) -> bytes:
            exec_id = api.exec_create(cid, ["/bin/sh", "-c", CLEANUP_SCRIPT], user=self.options.user)["Id"]
            return api.exec_start(exec_id)

        out = await self.call(run, "ending processes a previous daemon left")
        try:
            return int(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    async def health(self) -> Health:
        try:
            version = await self.call(lambda api: api.version(), "asking the Docker engine for its version")
        except BackendError as err:
            return Health(False, err.message)
        image = self.options.image

        def has_image(api: Any) -> bool:
            import docker.errors

            try:
                api.inspect_image(image)
                return True
            except docker.errors.ImageNotFound:
                return False

        try:
            present = await self.call(has_image, "looking for the image")
        except BackendError as err:
            return Health(False, err.message)
        details = {"engine": str(version.get("Version", "")), "api": str(version.get("ApiVersion", "")),
                   "image": image}
        if self._shared is not None and self._shared.id:
            details["container"] = f"{self._shared.name} ({self._shared.id[:12]})"
        if self._per_task:
            details["containers"] = str(len(self._per_task))
        if not present and not self.options.pull:
            return Health(False, f"image {image} is not in the Docker engine; run `make sandbox-image` "
                                 "(or set `pull: true`)", details)
        return Health(True, "", details)

    def _container_for(self, scope: str) -> _Container:
        if scope == SHARED:
            if self._shared is None:
                self._shared = _Container(self, SHARED)
            return self._shared
        if scope not in self._per_task:
            self._per_task[scope] = _Container(self, scope)
        return self._per_task[scope]

    async def sandbox(self, task_id: str) -> DockerSandbox:
        if not _TASK_ID.match(task_id):
            raise BackendError(f"task id {task_id!r} cannot name a directory (letters, digits, . _ -)",
                               ErrorKind.INVALID_ARGUMENT)
        container = self._container_for(task_id if self.options.per_task else SHARED)
        self._admit(container, task_id)
        sb = DockerSandbox(self, container, task_id)
        await container.ensure()  # the task's directory is made by its first spawn or file transfer
        container.tasks.add(task_id)
        container.killer.warm(sb)
        return sb

    def _admit(self, container: _Container, task_id: str) -> None:
        """Refuse a task the container's pids limit cannot hold: each needs PROCS_PER_TASK processes
        at least (its shell and the shell's reaper), the container PROCS_PER_CONTAINER."""
        limit = self.options.pids_limit
        if not limit or limit < 0 or task_id in container.tasks:
            return
        headroom = PROCS_PER_START * self.options.max_parallel_starts + PROCS_PER_TASK * self.warm_shells()
        fits = max(0, (limit - PROCS_PER_CONTAINER - headroom) // PROCS_PER_TASK)
        if len(container.tasks) + 1 > fits:
            where = "its own container" if self.options.per_task else f"the shared container {container.name}"
            raise BackendError(
                f"task {task_id!r} does not fit in {where}: pids_limit {limit} holds {fits} task(s) "
                f"({PROCS_PER_TASK} processes each, its shell and the shell's reaper, plus {PROCS_PER_CONTAINER} "
                f"for the container and {headroom} kept free for starting processes and warm shells) and {len(container.tasks)} "
                "are open; close a task, or raise pids_limit (or use per_task: true)", ErrorKind.RESOURCE_EXHAUSTED)

    def warm_shells(self) -> int:
        return 0 if self.options.per_task else self.options.warm_shells

    async def pool_sandbox(self) -> DockerSandbox:
        """The workspace itself, in the shared container: pre-started shells wait there."""
        container = self._container_for(SHARED)
        await container.ensure()
        sb = DockerSandbox(self, container, POOL_TASK)
        sb.root = self.options.workspace
        container.known_dirs.add(POOL_TASK)
        container.killer.warm(sb)
        return sb

    def start_gate(self) -> asyncio.Semaphore:
        """Bounds the process starts in flight (``max_parallel_starts``)."""
        if self._start_gate is None:
            self._start_gate = asyncio.Semaphore(self.options.max_parallel_starts)
        return self._start_gate

    async def make_task_dir(self, cid: str, task_id: str) -> None:
        """Create ``<workspace>/<task_id>`` owned by the sandbox user, through the archive API
        (left alone when it exists: unpacking a directory entry would reset its mode)."""
        workspace = self.options.workspace
        if await self._stat(cid, f"{workspace.rstrip('/')}/{task_id}") is not None:
            return
        uid, gid = self.options.uid_gid
        body = _dir_tar([task_id], uid, gid)
        await self.call(lambda api: api.put_archive(cid, workspace, body), f"creating the task directory {task_id}")

    async def remove_container(self, container: _Container, remove_volume: bool) -> None:
        import docker.errors

        def run(api: Any) -> None:
            if container.id is not None:
                try:
                    api.remove_container(container.id, force=True)
                except docker.errors.NotFound:
                    pass
            if remove_volume:
                try:
                    api.remove_volume(container.volume, force=True)
                except docker.errors.NotFound:
                    pass

        await self.call(run, f"removing {container.name}")
        self._per_task.pop(container.scope, None)

    async def close(self) -> None:
        for container in [self._shared, *self._per_task.values()]:
            if container is not None:
                container.spawner.close()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self.options.remove_on_close:
            await self._remove_all_containers()
        with self._api_lock:
            api, self._api = self._api, None
        if api is not None:
            await asyncio.to_thread(api.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _remove_all_containers(self) -> None:
        import docker.errors

        def run(api: Any) -> None:
            for c in api.containers(all=True, filters={"label": [f"{LABEL_DAEMON}={self.instance_id}",
                                                                 f"{LABEL_BACKEND}={self.name}"]}):
                try:
                    api.remove_container(c["Id"], force=True)
                except docker.errors.NotFound:
                    pass
            (self.state_dir / "containers.json").unlink(missing_ok=True)

        try:
            await self.call(run, "removing this daemon's containers")
        except BackendError:
            pass  # shutting down: an unreachable engine keeps them; the next start reattaches

    # archives ----------------------------------------------------------------
    async def _stat(self, cid: str, path: str) -> dict[str, Any] | None:
        """The engine's stat of ``path`` in the container (None when missing); links not followed."""

        def run(api: Any) -> dict[str, Any] | None:
            res = api.head(api._url("/containers/{0}/archive", cid), params={"path": path})
            if res.status_code == 404:
                return None
            api._raise_for_status(res)
            header = res.headers.get("X-Docker-Container-Path-Stat")
            import base64

            return json.loads(base64.b64decode(header)) if header else {}

        return await self.call(run, f"looking at {path}")

    async def native_archive_ok(self, cid: str, root: str, path: str, *, create: bool) -> bool:
        """Whether the engine's archive endpoints may serve ``path``: it is inside the workspace
        volume and no component below the task root is a symlink (the engine resolves links as
        root; those paths go through tar run as the sandbox user instead). With ``create``,
        missing directories are made, owned by the sandbox user."""
        workspace = PurePosixPath(self.options.workspace)
        target = PurePosixPath(path)
        if target != workspace and workspace not in target.parents:
            return False
        base = PurePosixPath(root)
        if target != base and base not in target.parents:
            return False
        missing: list[str] = []
        current = base
        for part in target.relative_to(base).parts:
            current = current / part
            stat = await self._stat(cid, str(current))
            if stat is None:
                missing = list(target.relative_to(current.parent).parts)
                parent = current.parent
                break
            if stat.get("linkTarget"):
                return False
        if missing:
            if not create:
                raise BackendError(f"{path} does not exist", ErrorKind.NOT_FOUND)
            uid, gid = self.options.uid_gid
            names = ["/".join(missing[: i + 1]) for i in range(len(missing))]
            body = _dir_tar(names, uid, gid)
            await self.call(lambda api: api.put_archive(cid, str(parent), body), f"creating {path}")
        return True

    async def put_archive(self, cid: str, path: str, data: AsyncIterator[bytes]) -> None:
        source = _AsyncReader(data, asyncio.get_running_loop())
        uid, gid = self.options.uid_gid

        def run(api: Any) -> None:
            res = api.put(api._url("/containers/{0}/archive", cid), params={"path": path},
                          data=_owned_tar(source, uid, gid))
            api._raise_for_status(res)

        try:
            await self.call(run, f"unpacking into {path}")
        except BackendError as err:
            if err.kind is ErrorKind.UNAVAILABLE and "Docker engine said" in err.message:
                err.kind = ErrorKind.FAILED_PRECONDITION
            raise

    async def get_archive(self, cid: str, path: str) -> AsyncIterator[bytes]:
        stream, _stat = await self.call(lambda api: api.get_archive(cid, path, chunk_size=None),
                                        f"reading {path}")
        iterator = iter(stream)
        sentinel = object()
        while True:
            chunk = await self.call(lambda _api: next(iterator, sentinel), f"reading {path}")
            if chunk is sentinel:
                break
            if chunk:
                yield chunk


__all__ = ["DockerBackend", "DockerOptions", "DockerSandbox", "DockerProcess"]

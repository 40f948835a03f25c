"""The Backend interface: all that executor needs from a place where commands run.

Three small objects, modelled on httpx's transports:

* ``Backend``  one configured place (the host, a container engine, an ssh host, a
  cloud account). It knows its health and capabilities and hands out sandboxes.
* ``Sandbox``  one task's corner of that place: a working directory (``root``) in
  which processes are started and files moved. Created or re-attached by
  ``Backend.sandbox(task_id)``.
* ``Process``  one process started in a sandbox, with byte pipes (or a terminal).

Shell sessions, cwd/env persistence, timeouts, background processes and the
approval gate are written once, above this interface (``executor.shell``,
``executor.tasks``); a backend knows nothing of them, of gRPC or of the gate.

Contract every backend keeps:

* ``Sandbox.spawn`` starts ``argv`` as the leader of a *new session* inside the
  sandbox (so the session id equals the pid the process sees for itself, ``$$``),
  with exactly ``env`` as its environment (nothing inherited from the daemon) and
  ``cwd`` as its directory. With ``pty`` it runs on a pseudo-terminal of that size
  and ``Process.stderr`` is None.
* ``Sandbox.signal_session(pid, sig)`` delivers ``sig`` to every process in the
  session ``pid`` inside the sandbox: that is how timeouts, cancels and
  ``SignalProcess`` kill a whole process tree *in the backend*, not only the client
  side. The default walks ``/proc`` with a POSIX shell started through ``spawn``.
* Failures are ``BackendError`` with a ``kind`` that says what went wrong, never a
  silent fallback elsewhere.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import io
import shlex
import tarfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Backend",
    "BackendError",
    "ErrorKind",
    "Capabilities",
    "Health",
    "PtySize",
    "Sandbox",
    "Process",
    "ByteQueue",
    "Options",
    "KILL_SESSION_SCRIPT",
    "drain",
    "read_all",
]


class ErrorKind(enum.Enum):
    """What kind of failure a BackendError is; the daemon maps it to a status."""

    UNAVAILABLE = "unavailable"  # the backend cannot be reached now (retry later)
    FAILED_PRECONDITION = "failed_precondition"  # misconfigured: image missing, host key changed
    UNAUTHENTICATED = "unauthenticated"  # credentials refused
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"  # quota, disk full, pids limit
    NOT_FOUND = "not_found"  # a path or object that does not exist
    INVALID_ARGUMENT = "invalid_argument"
    LOST = "lost"  # the sandbox or connection vanished under a running process
    INTERNAL = "internal"


class BackendError(Exception):
    """A failure of the backend, with a message a person can act on."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.UNAVAILABLE) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class PtySize:
    rows: int = 24
    cols: int = 80


@dataclass(frozen=True)
class Capabilities:
    pty: bool = False
    resize: bool = False
    signals: bool = True
    stdin: bool = True  # Process.write works; without it no persistent shell
    background: bool = True
    persistent_shell: bool = True
    file_transfer: bool = True
    network_policy: str = "host"
    streaming: bool = True  # output arrives while the process runs


@dataclass(frozen=True)
class Health:
    available: bool
    reason: str = ""
    details: Mapping[str, str] = field(default_factory=dict)


class Options(BaseModel):
    """Base for a backend's config options: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Names of the daemon's environment variables copied into every command's
    #: environment (commands never inherit the daemon's environment otherwise).
    env_passthrough: list[str] = []


class ByteQueue:
    """An async byte stream fed by a producer: ``read()`` returns b"" at EOF.

    Backends whose SDK delivers output by callback or in frames use it to expose
    ``Process.stdout`` / ``Process.stderr``.
    """

    def __init__(self) -> None:
        self._q: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self._eof = False

    def feed(self, data: bytes) -> None:
        if data and not self._eof:
            self._q.put_nowait(bytes(data))

    def feed_eof(self) -> None:
        if not self._eof:
            self._eof = True
            self._q.put_nowait(None)

    def feed_error(self, exc: BaseException) -> None:
        if not self._eof:
            self._eof = True
            self._q.put_nowait(exc)

    async def read(self) -> bytes:
        item = await self._q.get()
        if item is None:
            self._q.put_nowait(None)  # stay at EOF for later readers
            return b""
        if isinstance(item, BaseException):
            self._q.put_nowait(item)
            raise item
        return item


class Process(abc.ABC):
    """A process started by ``Sandbox.spawn``: the leader of its own session."""

    #: stdout, or the terminal stream under a pty. ``await stdout.read()`` returns
    #: a chunk, or b"" at EOF; it raises BackendError(kind=LOST) if the transport dies.
    #: A stream may also push its chunks (``subscribe(on_data, on_eof)``, ``pause()``,
    #: ``resume()``, as ``_host.PipeReader`` does); the shell layer then uses that.
    stdout: Any
    #: stderr, or None under a pty.
    stderr: Any

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Write to stdin (the terminal's input under a pty)."""

    @abc.abstractmethod
    async def close_stdin(self) -> None:
        """Send EOF on stdin. Under a pty this is a no-op."""

    @abc.abstractmethod
    async def wait(self) -> int:
        """Wait for the exit: the exit code, or -N when killed by signal N.

        Raises BackendError(kind=LOST) when the result cannot be known."""

    async def resize(self, size: PtySize) -> None:
        raise BackendError("this backend cannot resize a terminal", ErrorKind.FAILED_PRECONDITION)

    async def detach(self) -> None:
        """Release client-side resources (sockets, channels). Does not signal."""


class Sandbox(abc.ABC):
    """One task's place in a backend: a directory where processes run."""

    #: The task's directory inside the sandbox (a POSIX path).
    root: str

    @abc.abstractmethod
    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        pty: PtySize | None = None,
    ) -> Process:
        """Start argv as a new session leader with exactly env, in cwd."""

    async def signal_session(self, pid: int, sig: int) -> None:
        """Deliver sig to every process of session ``pid`` inside the sandbox."""
        proc = await self.spawn(
            ["/bin/sh", "-c", KILL_SESSION_SCRIPT, "executor-kill", str(pid), str(sig)],
            cwd="/",
            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        await proc.close_stdin()
        await drain(proc)
        await proc.wait()

    async def put_archive(self, path: str, data: AsyncIterator[bytes]) -> None:
        """Unpack a tar stream into ``path`` (created if missing).

        The caller has validated the archive (no member leaves ``path``). The
        default pipes it through ``tar -x`` inside the sandbox."""
        proc = await self.spawn(
            ["/bin/sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', "put", path],
            cwd=self.root,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        out = asyncio.ensure_future(read_all(proc.stdout))
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        try:
            async for chunk in data:
                await proc.write(chunk)
            await proc.close_stdin()
        finally:
            code = await proc.wait()
            await out
            message = (await err).decode(errors="replace").strip() if err is not None else ""
        if code != 0:
            full = "No space left on device" in message or "Disk quota exceeded" in message
            raise BackendError(f"unpacking into {path} failed: {message or f'tar exited {code}'}",
                               ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION)

    async def get_archive(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of ``path`` (a file or a directory), its last component at the top."""
        parent, _, name = path.rstrip("/").rpartition("/")
        proc = await self.spawn(
            ["/bin/sh", "-c", 'cd -- "$1" && exec tar -c -f - -- "$2"', "get", parent or "/", name or "."],
            cwd=self.root,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        await proc.close_stdin()
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        while True:
            chunk = await proc.stdout.read()
            if not chunk:
                break
            yield chunk
        code = await proc.wait()
        if code != 0:
            message = (await err).decode(errors="replace").strip() if err is not None else ""
            raise BackendError(f"reading {path} failed: {message or f'tar exited {code}'}",
                               ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION)

    async def release(self, remove_files: bool = False) -> None:
        """The task is closed: free what the sandbox holds; remove its files if asked."""

    def take_notice(self) -> str | None:
        """A one-off note about the sandbox's life since the last call (e.g. "container X was
        gone and has been recreated; files kept"), for the core to append to the next
        Exit.message; None when there is nothing to tell. Reading it clears it."""
        return None


class Backend(abc.ABC):
    """One configured place where commands run."""

    #: The config name of this kind of backend: local, docker, ssh, ...
    kind: ClassVar[str]
    #: The pydantic model of this backend's options (``backends.<name>`` in config).
    Options: ClassVar[type[Options]] = Options

    def __init__(self, name: str, options: Options, *, state_dir: Path) -> None:
        self.name = name
        self.options = options
        self.state_dir = state_dir  # a directory of this backend's own under the daemon's state dir

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    def policy(self) -> dict[str, str]:
        """The effective sandbox policy, shown by ListBackends (no secrets)."""
        return {}

    def base_env(self, sandbox: Sandbox) -> dict[str, str]:
        """The clean environment every command starts from (never the daemon's)."""
        return {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": sandbox.root,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }

    async def start(self) -> None:
        """Connect and recover: end (or re-adopt) what a previous daemon left running.

        Must not raise because the backend is unreachable: ``health`` says so."""

    @abc.abstractmethod
    async def health(self) -> Health: ...

    @abc.abstractmethod
    async def sandbox(self, task_id: str) -> Sandbox:
        """Create, or attach to, the task's sandbox and its directory ``root``."""

    async def close(self) -> None:
        """Daemon shutdown: release connections. Running processes were ended above."""


# ---------------------------------------------------------------------------
# Helpers for backends
# ---------------------------------------------------------------------------

#: Signals every process of a session except the shell running this script.
#: $1 = session id, $2 = signal number. POSIX sh with built-ins only (no process per /proc entry);
#: reads /proc (Linux). The leader's process group is signalled first, at once; then /proc is walked
#: again until a pass finds no process it has not signalled yet (a child forked during a walk is
#: caught by the next), at most 8 passes.
KILL_SESSION_SCRIPT = r"""
sid=$1; sig=$2; me=$$; seen=" "
kill "-$sig" -- "-$sid" 2>/dev/null
pass=0
while [ $pass -lt 8 ]; do
  pass=$((pass + 1)); fresh=0
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$me" ] && continue
    case "$seen" in *" $pid "*) continue ;; esac
    read -r stat < "$d/stat" 2>/dev/null || continue
    rest=${stat##*) }
    set -- $rest
    if [ "$4" = "$sid" ]; then
      kill "-$sig" "$pid" 2>/dev/null
      seen="$seen$pid "; fresh=1
    fi
  done
  [ $fresh = 0 ] && break
done
exit 0
"""


async def read_all(stream: Any) -> bytes:
    """A stream's bytes to EOF (None reads as empty)."""
    if stream is None:
        return b""
    buf = bytearray()
    while True:
        chunk = await stream.read()
        if not chunk:
            return bytes(buf)
        buf += chunk


async def drain(proc: Process) -> tuple[bytes, bytes]:
    """Read a process's stdout and stderr to EOF, concurrently."""
    out, err = await asyncio.gather(read_all(proc.stdout), read_all(proc.stderr))
    return out, err


def shell_quote(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def tar_single_file(name: str, data: bytes, mode: int = 0o644) -> bytes:
    """A one-file tar archive (used by tests and simple callers)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()

"""The vercel_sandbox backend: commands run in Vercel Sandbox microVMs, through the vercel-sandbox SDK.

How it maps the Backend interface onto the Sandbox API (vercel-sandbox 0.10, async API only):

* One named sandbox per task (or one per daemon, ``sandbox_per: daemon``), created on first use
  with ``get_or_create_sandbox``. The name carries a per-daemon id kept in the backend's state dir,
  so a restarted daemon finds its sandboxes again by name; they are also tagged
  (``executor-daemon``, ``executor-task``) so ``start()`` can list them.
* ``spawn`` starts a *detached* command with stdin attached (``POST .../cmd``) and follows its
  output on the NDJSON logs stream while it runs; stdin writes are ``POST .../cmd/{id}/stdin``
  requests (offset-checked by the SDK, so a resent write never duplicates input). The API adds
  the request's env to the sandbox's own, so the command is wrapped in
  ``env -i K=V... setsid -w ARGV``: exactly the given environment, and a new session whose id is
  the pid the process sees as ``$$``. That is what lets the task's persistent shell live here.
* ``signal_session`` runs the /proc walk as one ``wait&logs`` command (the API's own kill reaches
  one process, not a session). It works while the shell is busy: commands run concurrently.
* Output: the API carries it as JSON strings (UTF-8 text). With ``output: exact`` (default) a small
  bash wrapper sends the command's stdout and stderr through perl/python3 encoders in the sandbox
  that write hex lines, decoded here: byte-exact and still streaming. ``output: text`` skips it.
* Terminals: the SDK's interactive sessions (a websocket carrying raw bytes), with resize.
* Files go through the API's native file endpoints (byte-exact): a tar is uploaded to a scratch
  file and unpacked with ``tar`` inside the sandbox, or packed there and downloaded.

Exit codes are what the API reports.

Faults: missing credentials FAILED_PRECONDITION; a refused token UNAUTHENTICATED; quota / rate
limits RESOURCE_EXHAUSTED; unreachable API or 5xx UNAVAILABLE; a sandbox that vanished under a
running process LOST (the next spawn creates a new sandbox). Only idempotent calls are retried.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, SecretStr

from ._shared.retry import Failure, retrying
from .base import (
    KILL_SESSION_ONLY,
    KILL_TREE_SCRIPT,
    Backend,
    BackendError,
    ByteQueue,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    Sandbox,
)

log = logging.getLogger(__name__)

DEFAULT_BASE_URL = "https://vercel.com/api"
SETSID = "/usr/bin/setsid"
ENV = "/usr/bin/env"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_T = TypeVar("_T")

#: Signal the tree of the spawn of $1 with signal $2 (base.KILL_TREE_SCRIPT: builtins only).
SIGNAL_SCRIPT = KILL_TREE_SCRIPT

#: Runs "$@" with its stdout and stderr each going through an encoder ($1: perl or python3) that
#: writes every chunk it reads as one line of hex, at once: any bytes survive the API's text-only
#: output stream, and output still streams. Exits with the command's status once all output is out.
#: The wrapper's own messages (bash reporting a killed child) go to /dev/null, not into the stream.
IO_WRAPPER = r"""
exec 3>&2 2>/dev/null
enc=$1; shift
case ${enc##*/} in
  perl*) flag=-e; code='$|=1; while (sysread(STDIN, my $b, 65536)) { syswrite(STDOUT, unpack("H*", $b) . "\n") }' ;;
  *) flag=-c; code='import os
while True:
    b = os.read(0, 65536)
    if not b:
        break
    os.write(1, b.hex().encode() + b"\n")' ;;
esac
d=$(mktemp -d /tmp/executor-io.XXXXXX) && mkfifo "$d/o" "$d/e" || {
  echo "executor: cannot make the output fifos in /tmp" >&3; exit 125; }
"$enc" "$flag" "$code" < "$d/o" 3>&- &
"$enc" "$flag" "$code" < "$d/e" >&3 3>&- &
"$@" > "$d/o" 2> "$d/e" 3>&-
rc=$?
wait
rm -rf -- "$d"
exit $rc
"""


class VercelSandboxOptions(Options):
    """``backends.<name>`` for ``kind: vercel_sandbox``. Credentials are never logged or shown."""

    #: The Sandbox API; only tests change it (a local server speaking the same API).
    base_url: str | None = None
    #: Credentials: given here, or read from the named environment variables of the daemon.
    token: SecretStr | None = None
    token_env: str = "VERCEL_TOKEN"
    team_id: str | None = None
    team_id_env: str = "VERCEL_TEAM_ID"
    project_id: str | None = None
    project_id_env: str = "VERCEL_PROJECT_ID"
    #: A Vercel Container Registry image; default: the API's (vercel/sandbox/universal).
    image: str | None = None
    vcpus: int | None = Field(default=None, ge=1)
    memory_mb: int | None = Field(default=None, ge=128)
    #: Lifetime of a sandbox session in seconds (the API stops it after that); default: the API's.
    timeout: float | None = Field(default=None, gt=0)
    ports: list[int] = []
    #: Outbound network: allow-all, deny-all, or (allow_domains non-empty) only those domains.
    network: Literal["allow-all", "deny-all"] = "allow-all"
    allow_domains: list[str] = []
    region: str | None = None
    #: One sandbox per task (default), or one shared by every task of this daemon.
    sandbox_per: Literal["task", "daemon"] = "task"
    #: What CloseTask does to a task's sandbox: stop its session (files kept, resumable), delete it,
    #: or keep it running. remove_files on CloseTask always deletes a per-task sandbox.
    on_close: Literal["stop", "delete", "keep"] = "stop"
    name_prefix: str = Field(default="executor", pattern=r"^[a-z0-9][a-z0-9-]{0,19}$")
    #: Attempts for calls that are safe to repeat (lookups, create-by-name, stop, delete).
    retries: int = Field(default=3, ge=1, le=10)
    #: Stop a sandbox's session after this many seconds without use (no spawn, input or output);
    #: its files are kept and the next use resumes it. Default: never (only the lifetime applies).
    idle_timeout: float | None = Field(default=None, gt=0)
    #: ``exact``: output bytes are carried as hex lines by a tiny perl or python3 encoder inside the
    #: sandbox (the API itself only carries UTF-8 text); the image needs perl or python3.
    #: ``text``: raw, as the API sends it (invalid UTF-8 arrives as U+FFFD); no encoder processes.
    output: Literal["exact", "text"] = "exact"
    #: HTTP connections to the API at once. Every live process holds one (its output stream) and
    #: one more while someone waits for it; the SDK's default (100) would stall ~50 processes.
    max_connections: int = Field(default=1000, ge=10)
    #: Seconds for one API call (long polls and streams are not limited).
    request_timeout: float = Field(default=60, gt=0)


# ---------------------------------------------------------------------------
# Error mapping
# ---------------------------------------------------------------------------


def _sdk() -> Any:
    """The SDK, imported only when this backend is configured."""
    try:
        import vercel.sandbox as sdk
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise BackendError("the vercel-sandbox SDK is not installed: pip install 'executor-daemon[vercel-sandbox]'",
                           ErrorKind.FAILED_PRECONDITION) from exc
    return sdk


def _is_transport_error(exc: BaseException) -> bool:
    import httpx2

    return isinstance(exc, httpx2.TransportError)


def _is_connect_error(exc: BaseException) -> bool:
    """The request never reached the server, so repeating it cannot repeat its effect."""
    import httpx2

    return isinstance(exc, httpx2.ConnectError)


def _transient(exc: BaseException) -> bool:
    """Worth another try for an idempotent call: network trouble, rate limits, server errors."""
    sdk = _sdk()
    if _is_transport_error(exc):
        return True
    if isinstance(exc, sdk.SandboxApiError):
        status: int = exc.status_code
        return status == 429 or status >= 500
    return False


def map_error(exc: BaseException, doing: str, base_url: str) -> BackendError:
    """A BackendError that says what failed, why, and what to do."""
    if isinstance(exc, BackendError):
        return exc
    sdk = _sdk()
    if isinstance(exc, sdk.SandboxCredentialsError):
        return BackendError(f"{doing}: no Vercel credentials: {exc}", ErrorKind.FAILED_PRECONDITION)
    if isinstance(exc, sdk.SandboxApiError):
        status, code = exc.status_code, exc.code or ""
        detail = f"{doing}: the Vercel Sandbox API answered {exc}"
        if status == 401:
            return BackendError(f"{detail}; check the token (VERCEL_TOKEN or backends.<name>.token)",
                                ErrorKind.UNAUTHENTICATED)
        if status == 402 or status == 429 or "quota" in code or "limit" in code:
            return BackendError(f"{detail}; a quota or rate limit was reached: wait, or raise the limit",
                                ErrorKind.RESOURCE_EXHAUSTED)
        if status == 403:
            return BackendError(f"{detail}; the token may not use this team/project",
                                ErrorKind.PERMISSION_DENIED)
        if status == 404:
            return BackendError(detail, ErrorKind.NOT_FOUND)
        if status == 410:
            return BackendError(f"{detail}; the sandbox session has stopped", ErrorKind.LOST)
        if status >= 500:
            return BackendError(f"{detail}; retry later", ErrorKind.UNAVAILABLE)
        return BackendError(detail, ErrorKind.FAILED_PRECONDITION)
    if isinstance(exc, sdk.SandboxStreamError):
        return BackendError(f"{doing}: the sandbox went away ({exc.code}: {exc})", ErrorKind.LOST)
    if isinstance(exc, sdk.SandboxTerminalStateError):
        return BackendError(f"{doing}: the sandbox ended in state {exc.status}", ErrorKind.UNAVAILABLE)
    if _is_transport_error(exc):
        return BackendError(f"{doing}: cannot reach the Vercel Sandbox API at {base_url}: "
                            f"{type(exc).__name__}: {exc}", ErrorKind.UNAVAILABLE)
    if isinstance(exc, sdk.SandboxResponseError):
        return BackendError(f"{doing}: the Vercel Sandbox API sent an unexpected answer: {exc}", ErrorKind.INTERNAL)
    if isinstance(exc, sdk.SandboxError):
        return BackendError(f"{doing}: {type(exc).__name__}: {exc}", ErrorKind.UNAVAILABLE)
    return BackendError(f"{doing}: {type(exc).__name__}: {exc}", ErrorKind.INTERNAL)


# ---------------------------------------------------------------------------
# Process
# ---------------------------------------------------------------------------


def _unhex(line: str) -> bytes:
    """One encoder line back to bytes. A line that is not hex did not come from the encoder (the
    sandbox printed it around the wrapper): pass it on as text rather than lose it."""
    try:
        return bytes.fromhex(line)
    except ValueError:
        return line.encode("utf-8", "replace") + b"\n"


class _VercelProcess(Process):
    """A detached command: stdin by API requests, output pumped from the live logs stream."""

    stdout: ByteQueue
    stderr: ByteQueue

    def __init__(self, handle: Any, service: Any, base_url: str, touch: Callable[[], None] = lambda: None,
                 hex_lines: bool = False) -> None:
        self._handle = handle
        self._touch = touch
        self._hex = hex_lines
        self._base_url = base_url
        self.id: str = handle.id
        self.stdout = ByteQueue()
        self.stderr = ByteQueue()
        self._pump = asyncio.ensure_future(self._follow(service))
        self._stdin_closed = False

    async def _follow(self, service: Any) -> None:
        """Copy the command's output into the byte queues as the API streams it."""
        pending = {"stdout": "", "stderr": ""}
        try:
            async for event in service.process_logs(session_id=self._handle.session_id, process_id=self.id):
                name = "stdout" if event.stream == "stdout" else "stderr"
                queue = self.stdout if name == "stdout" else self.stderr
                if self._hex:
                    *lines, pending[name] = (pending[name] + event.data).split("\n")
                    data = b"".join(_unhex(line) for line in lines)
                else:
                    data = event.data.encode("utf-8", "replace")
                queue.feed(data)
                self._touch()
                await queue.room()  # bounded: the log stream waits while the reader is behind
            for name, rest in pending.items():
                if rest:
                    (self.stdout if name == "stdout" else self.stderr).feed(_unhex(rest))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            err = map_error(exc, f"following the output of command {self.id}", self._base_url)
            lost = BackendError(err.message, ErrorKind.LOST)
            self.stdout.feed_error(lost)
            self.stderr.feed_error(lost)
            return
        self.stdout.feed_eof()
        self.stderr.feed_eof()

    async def write(self, data: bytes) -> None:
        import anyio

        if self._stdin_closed:
            raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
        self._touch()
        try:
            await self._handle.stdin.send(data)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION) from exc
        except Exception as exc:
            raise map_error(exc, f"writing to the stdin of command {self.id}", self._base_url) from exc

    async def close_stdin(self) -> None:
        if self._stdin_closed:
            return
        self._stdin_closed = True
        try:
            await self._handle.stdin.aclose()
        except Exception as exc:
            err = map_error(exc, f"closing the stdin of command {self.id}", self._base_url)
            if err.kind in (ErrorKind.UNAVAILABLE, ErrorKind.UNAUTHENTICATED):
                raise err from exc
            # NOT_FOUND / LOST / refused: the process is gone; wait() reports how.

    async def wait(self) -> int:
        try:
            code = await self._handle.wait()
        except Exception as exc:
            err = map_error(exc, f"waiting for command {self.id}", self._base_url)
            raise BackendError(err.message, ErrorKind.LOST if err.kind != ErrorKind.UNAVAILABLE else err.kind) from exc
        return int(code)

    async def detach(self) -> None:
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump


class _VercelPty(Process):
    """A process on a terminal, through the SDK's interactive session (a websocket).

    The SDK's session is an async context that must be entered and left in one task, so a task of
    its own holds it and this object talks to that task through a queue."""

    stdout: ByteQueue
    stderr: None

    def __init__(self, operation: Any, base_url: str, what: str, touch: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        self._base_url = base_url
        self._what = what
        self._touch = touch
        self.stdout = ByteQueue()
        self.stderr = None
        self._inbox: asyncio.Queue[tuple[str, Any, asyncio.Future[None]]] = asyncio.Queue()
        self._ready: asyncio.Future[None] = loop.create_future()
        self._exit: asyncio.Future[int] = loop.create_future()
        self._task = asyncio.ensure_future(self._hold(operation))

    async def started(self) -> None:
        await self._ready

    async def _hold(self, operation: Any) -> None:
        try:
            async with operation as pty:
                self._ready.set_result(None)
                reader = asyncio.ensure_future(self._read(pty))
                writer = asyncio.ensure_future(self._write_loop(pty))
                try:
                    code = await pty.wait()
                    await asyncio.wait_for(asyncio.shield(reader), 10)
                finally:
                    writer.cancel()
                    reader.cancel()
                self._exit.set_result(-1 if code is None else int(code))
        except asyncio.CancelledError:
            self._fail(BackendError(f"{self._what}: detached", ErrorKind.LOST))
            raise
        except Exception as exc:
            err = map_error(exc, self._what, self._base_url)
            if not self._ready.done():
                self._ready.set_exception(err)
            self._fail(BackendError(err.message, ErrorKind.LOST if self._ready.done() else err.kind))
        finally:
            self.stdout.feed_eof()
            self._fail(BackendError(f"{self._what}: the terminal session ended", ErrorKind.LOST))

    def _fail(self, err: BackendError) -> None:
        self.stdout.feed_error(err)
        if not self._exit.done():
            self._exit.set_exception(err)
            self._exit.exception()  # retrieved here: nobody may ever wait for a detached terminal
        while not self._inbox.empty():
            _, _, done = self._inbox.get_nowait()
            if not done.done():
                done.set_exception(BackendError("the terminal is closed", ErrorKind.FAILED_PRECONDITION))

    async def _read(self, pty: Any) -> None:
        import anyio

        try:
            while True:
                self.stdout.feed(await pty.stream.receive())
                self._touch()
                await self.stdout.room()
        except anyio.EndOfStream:
            self.stdout.feed_eof()
        except Exception as exc:
            self.stdout.feed_error(BackendError(f"{self._what}: the terminal connection broke: {exc}",
                                                ErrorKind.LOST))

    async def _write_loop(self, pty: Any) -> None:
        while True:
            kind, payload, done = await self._inbox.get()
            try:
                if kind == "data":
                    await pty.stream.send(payload)
                else:
                    await pty.resize(payload.cols, payload.rows)
            except Exception as exc:
                if not done.done():
                    done.set_exception(BackendError(f"the terminal is closed ({type(exc).__name__})",
                                                    ErrorKind.FAILED_PRECONDITION))
            else:
                if not done.done():
                    done.set_result(None)

    async def _send(self, kind: str, payload: Any) -> None:
        if self._task.done() or self._exit.done():
            raise BackendError("the terminal is closed", ErrorKind.FAILED_PRECONDITION)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        await self._inbox.put((kind, payload, done))
        await done

    async def write(self, data: bytes) -> None:
        self._touch()
        await self._send("data", bytes(data))

    async def close_stdin(self) -> None:
        return None

    async def resize(self, size: PtySize) -> None:
        await self._send("resize", size)

    async def wait(self) -> int:
        return await asyncio.shield(self._exit)

    async def detach(self) -> None:
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


# ---------------------------------------------------------------------------
# Sandbox
# ---------------------------------------------------------------------------


def _wrap(argv: Sequence[str], env: Mapping[str, str], *, new_session: bool = True) -> tuple[str, list[str]]:
    """``env -i K=V... setsid -w ARGV``: exactly ``env``, as the leader of a new session.

    ``setsid`` execs in place when the API did not make the command a process-group leader (so the
    pid is the session id); otherwise it forks and ``-w`` waits and passes the exit status on."""
    pairs = []
    for key, value in env.items():
        if not key or "=" in key or "\0" in key or "\0" in value:
            raise BackendError(f"invalid environment variable name {key!r}", ErrorKind.INVALID_ARGUMENT)
        pairs.append(f"{key}={value}")
    if not argv:
        raise BackendError("empty argv", ErrorKind.INVALID_ARGUMENT)
    if not new_session:
        return ENV, ["-i", *pairs, *argv]
    return ENV, ["-i", *pairs, SETSID, "-w", *argv]


class VercelSandbox(Sandbox):
    """A task's place in a Vercel sandbox: the handle is refreshed if the sandbox is recreated."""

    def __init__(self, backend: "VercelSandboxBackend", key: str, task_id: str, handle: Any, root: str) -> None:
        self._backend = backend
        self.key = key
        self.task_id = task_id
        self.handle = handle
        self.root = root

    @property
    def name(self) -> str:
        return str(self.handle.name)

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        self._backend._touch(self.key)
        if pty is not None:
            return await self._spawn_pty(argv, cwd=cwd, env=env, size=pty)
        command, args = _wrap(argv, env)
        encoder = await self._encoder() if self._backend.opts.output == "exact" else None
        if encoder is not None:
            command, args = "/bin/bash", ["--noprofile", "--norc", "-c", IO_WRAPPER, "executor-io", encoder,
                                          command, *args]
        doing = f"starting {argv[0]!r} in sandbox {self.name}"
        handle = await self._backend._start_command(self, command, args, cwd=cwd, stdin=True, doing=doing)
        return _VercelProcess(handle, self._backend._service, self._backend.base_url,
                              lambda: self._backend._touch(self.key), hex_lines=encoder is not None)

    async def _encoder(self) -> str:
        """The sandbox's perl or python3 (looked up once per sandbox) for byte-exact output."""
        found = self._backend._encoders.get(self.key)
        if found is None:
            code, out, _ = await self._run("command -v perl || command -v python3",
                                           doing=f"looking for perl or python3 in sandbox {self.name}")
            found = out.strip().splitlines()[0] if code == 0 and out.strip() else ""
            if not found.startswith("/"):
                raise BackendError(
                    f"sandbox {self.name} has neither perl nor python3, which byte-exact output needs (the "
                    f"Sandbox API carries output as text); use an image with one, or set "
                    f"backends.{self._backend.name}.output: text", ErrorKind.FAILED_PRECONDITION)
            self._backend._encoders[self.key] = found
        return found

    async def _spawn_pty(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], size: PtySize) -> Process:
        """A terminal session. The API makes the command the session leader with the terminal as
        its controlling tty, so only ``env -i`` wraps it (``setsid`` would drop the terminal)."""
        command, args = _wrap(argv, env, new_session=False)
        what = f"terminal {argv[0]!r} in sandbox {self.name}"
        proc = _VercelPty(self.handle.open_interactive(command, args, cwd=cwd, cols=size.cols, rows=size.rows),
                          self._backend.base_url, what, lambda: self._backend._touch(self.key))
        await proc.started()
        return proc

    async def _run(self, script: str, *args: str, doing: str) -> tuple[int, str, str]:
        """Run a short POSIX sh script to completion (one wait&logs request); (code, stdout, stderr)."""
        command, cmd_args = _wrap(["/bin/sh", "-c", script, "executor", *args], {"PATH": SYSTEM_PATH})

        async def run() -> Any:
            return await self.handle.run_process(command, cmd_args, cwd="/", capture_output=True)

        result = await self._backend._call(run, doing, retry_connect_only=True, sandbox=self)
        return int(result.returncode), result.stdout or "", result.stderr or ""

    async def signal_session(self, pid: int, sig: int) -> None:
        """The tree walk (base.KILL_TREE_SCRIPT), as one request; works while the shell is busy."""
        code, _, err = await self._run(SIGNAL_SCRIPT, str(pid), str(sig),
                                       doing=f"signalling session {pid} in sandbox {self.name}")
        if code != 0:
            raise BackendError(f"signalling session {pid} failed: {err.strip() or f'exit {code}'}",
                               ErrorKind.FAILED_PRECONDITION)

    def _scratch(self, what: str) -> str:
        return f"/tmp/executor-{what}-{uuid.uuid4().hex}.tar"

    async def unpack_tar(self, path: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        """Upload the tar as a scratch file (byte-exact file API), then unpack it in the sandbox
        (``Sandbox.put_archive`` has resolved and checked every path in the sandbox first)."""
        scratch = self._scratch("put")

        async def upload() -> None:
            async with self.handle.fs.open(scratch, "wb") as out:
                async for chunk in data:
                    await out.write(chunk)

        try:  # never repeated: the archive stream is consumed by the first attempt
            await upload()
        except Exception as exc:
            raise map_error(exc, f"uploading an archive to sandbox {self.name}", self._backend.base_url) from exc
        code, _, err = await self._run(
            'mkdir -p -- "$1" && tar -x -f "$2" -C "$1"; rc=$?; rm -f -- "$2"; exit $rc', path, scratch,
            doing=f"unpacking into {path} in sandbox {self.name}")
        if code != 0:
            raise BackendError(f"unpacking into {path} failed: {err.strip() or f'tar exited {code}'}",
                               ErrorKind.FAILED_PRECONDITION)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        """Pack ``path`` (resolved and checked by ``Sandbox.get_archive``) into a scratch tar in the
        sandbox, then stream it down through the file API."""
        parent, _, name = path.rstrip("/").rpartition("/")
        scratch = self._scratch("get")
        code, _, err = await self._run('cd -- "$1" && tar -c -f "$3" -- "$2"', parent or "/", name or ".", scratch,
                                       doing=f"packing {path} in sandbox {self.name}")
        try:
            if code != 0:
                message = err.strip() or f"tar exited {code}"
                kind = ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION
                raise BackendError(f"reading {path} failed: {message}", kind)
            try:
                async with self.handle.fs.open(scratch, "rb") as source:
                    while chunk := await source.read(1 << 16):
                        yield chunk
            except BackendError:
                raise
            except Exception as exc:
                raise map_error(exc, f"downloading {path} from sandbox {self.name}", self._backend.base_url) from exc
        finally:
            with contextlib.suppress(BackendError):
                await self._run('rm -f -- "$1"', scratch, doing="removing a scratch file")

    async def release(self, remove_files: bool = False) -> None:
        await self._backend._release(self, remove_files)


# ---------------------------------------------------------------------------
# Backend
# ---------------------------------------------------------------------------


def _sandbox_name(prefix: str, daemon_id: str, key: str) -> str:
    """A valid, stable sandbox name: lowercase, digits and dashes, at most 63 characters."""
    clean = re.sub(r"[^a-z0-9-]+", "-", key.lower()).strip("-") or "task"
    name = f"{prefix}-{daemon_id}-{clean}"
    if len(name) > 63 or clean != key:
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        name = f"{prefix}-{daemon_id}-{clean[: 63 - len(prefix) - len(daemon_id) - 13]}-{digest}"
    return name


class VercelSandboxBackend(Backend):
    kind = "vercel_sandbox"
    Options = VercelSandboxOptions
    options: VercelSandboxOptions

    def __init__(self, name: str, options: VercelSandboxOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.opts = options
        self.base_url = (options.base_url or DEFAULT_BASE_URL).rstrip("/")
        self._client: Any = None
        self._service: Any = None
        self._sandboxes: dict[str, VercelSandbox] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self.recovered: list[str] = []  # sandboxes of a previous daemon found by start()
        self._last_used: dict[str, float] = {}
        self._encoders: dict[str, str] = {}  # sandbox key -> perl/python3 path inside it
        self._reaper: asyncio.Task[None] | None = None
        self.reaped: list[str] = []  # sandbox names stopped for idleness (for ListBackends/tests)

    # -- configuration -------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.full(self._network_label())

    def _network_label(self) -> str:
        if self.opts.allow_domains:
            return "allowlist: " + ",".join(self.opts.allow_domains)
        return self.opts.network

    def policy(self) -> dict[str, str]:
        o = self.opts
        return {
            "isolation": "Vercel Sandbox microVM, one per " + o.sandbox_per,
            "api": self.base_url,
            "image": o.image or "API default (vercel/sandbox/universal)",
            "vcpus": str(o.vcpus) if o.vcpus else "API default",
            "memory_mb": str(o.memory_mb) if o.memory_mb else "API default",
            "lifetime": f"{o.timeout:g}s" if o.timeout else "API default",
            "network": self._network_label(),
            "ports": ",".join(map(str, o.ports)) or "none",
            "region": o.region or "API default",
            "on_close": o.on_close,
            "kill": KILL_SESSION_ONLY,
            "naming": f"{o.name_prefix}-{self.instance_id}-<task>, tagged executor-daemon/-task; "
                      "a restarted daemon re-attaches by name and stops leftover sessions at start",
            "output": ("byte-exact: hex lines from a perl/python3 encoder in the sandbox (the API carries text)"
                       if o.output == "exact" else
                       "UTF-8 text as the API sends it (invalid UTF-8 bytes arrive as U+FFFD)")
                      + "; terminals and file transfers are byte-exact",
            "pty": "through the SDK's interactive sessions (a websocket to the sandbox)",
            "idle": (f"sessions stopped after {o.idle_timeout:g}s unused (files kept)" if o.idle_timeout
                     else "no reaping"),
            "signals": "session walk through /proc inside the sandbox",
        }

    def _credentials(self) -> Any:
        """Token, team and project from the options or the environment; FAILED_PRECONDITION if missing."""
        o = self.opts
        token = o.token.get_secret_value() if o.token else os.environ.get(o.token_env, "")
        team = o.team_id or os.environ.get(o.team_id_env, "")
        project = o.project_id or os.environ.get(o.project_id_env, "")
        missing = [what for what, value in (("a token", token), ("a team id", team), ("a project id", project))
                   if not value]
        if missing:
            raise BackendError(
                f"backend {self.name!r} has no Vercel credentials: missing {', '.join(missing)}; set "
                f"{o.token_env}, {o.team_id_env} and {o.project_id_env} in the daemon's environment or "
                f"token/team_id/project_id in backends.{self.name}", ErrorKind.FAILED_PRECONDITION)
        return _sdk().SandboxCredentials(token=token, team_id=team, project_id=project)

    def daemon_id(self) -> str:
        """This daemon's id (``Backend.instance_id``): sandbox names carry it and survive a restart."""
        return self.instance_id

    def _ensure_client(self) -> None:
        if self._client is not None:
            return
        self._credentials()  # fail early and clearly
        sdk = _sdk()

        async def credentials() -> Any:
            return self._credentials()

        options = sdk.SandboxServiceOptions(base_url=self.base_url, credentials_factory=credentials,
                                            region=self.opts.region)

        def http_client() -> Any:
            import httpx2

            return httpx2.AsyncClient(timeout=httpx2.Timeout(self.opts.request_timeout), http2=False,
                                      limits=httpx2.Limits(max_connections=self.opts.max_connections,
                                                           max_keepalive_connections=32))

        self._client = sdk.SandboxClient.create(options=options, httpx_client_factory=http_client)
        # The log stream of a detached command is only reachable through the service object (the
        # public TextReader waits for whole lines or sizes, not "what has arrived"). SDK pinned ==0.10.0.
        self._service = sdk.get_sandbox_service(self._client._session)

    # -- calls with retries ----------------------------------------------------------------------

    async def _call(self, op: Callable[[], Awaitable[_T]], doing: str, *, retry_connect_only: bool = False,
                    sandbox: VercelSandbox | None = None) -> _T:
        """Run an SDK call, retrying with backoff only where a retry is safe.

        Idempotent calls retry transient faults; calls with effects (starting a command) retry only
        when the request never left (connection refused) or was rejected (429). A sandbox that
        vanished (404) is recreated once, under the same name, when ``sandbox`` is given."""
        sdk = _sdk()

        def classify(exc: BaseException) -> Failure:
            if _is_connect_error(exc) or (isinstance(exc, sdk.SandboxApiError) and exc.status_code == 429):
                return Failure.UNSENT  # never reached the API, or refused before anything ran
            return Failure.TRANSIENT if _transient(exc) else Failure.FINAL

        def translate(exc: BaseException) -> BackendError:
            return map_error(exc, doing, self.base_url)

        try:
            return await retrying(op, translate=translate, classify=classify, idempotent=not retry_connect_only,
                                  attempts=self.opts.retries)
        except BackendError as err:
            vanished = isinstance(err.__cause__, sdk.SandboxApiError) and err.__cause__.status_code == 404
            if sandbox is None or not vanished:
                raise
        await self._recreate(sandbox)
        return await retrying(op, translate=translate, classify=classify, idempotent=not retry_connect_only,
                              attempts=self.opts.retries)

    async def _start_command(self, sandbox: VercelSandbox, command: str, args: list[str], *, cwd: str,
                             stdin: bool, doing: str) -> Any:
        async def start() -> Any:
            return await sandbox.handle.create_process(
                command, args, cwd=cwd, stdin=subprocess.PIPE if stdin else None,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        return await self._call(start, doing, retry_connect_only=True, sandbox=sandbox)

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Find this daemon's sandboxes from a previous run and stop their sessions.

        Stopping ends what the previous daemon left running (its shells) but keeps the files: the
        next use resumes the sandbox. Never raises for an unreachable API: ``health`` says so."""
        if self.opts.idle_timeout and self._reaper is None:
            self._reaper = asyncio.ensure_future(self._reap_idle(self.opts.idle_timeout))
        try:
            self._ensure_client()
            sdk = _sdk()
            query = sdk.SandboxQueryByName(name_prefix=f"{self.opts.name_prefix}-{self.instance_id}-",
                                           tag=sdk.TagFilter(key="executor-daemon", value=self.instance_id))
            found = [sb async for sb in self._client.query_sandboxes(query=query)]
        except Exception as exc:
            log.warning("vercel_sandbox %s: could not list leftover sandboxes: %s", self.name,
                        map_error(exc, "listing sandboxes", self.base_url).message)
            return
        self.recovered = [sb.name for sb in found]
        for sb in found:
            if str(sb.status) == "running":
                try:
                    await self._call(sb.stop, f"stopping leftover sandbox {sb.name}")
                except BackendError as exc:
                    log.warning("vercel_sandbox %s: %s", self.name, exc.message)

    async def health(self) -> Health:
        try:
            self._credentials()
            self._ensure_client()

            async def probe() -> None:
                async for _ in self._client.query_sandboxes(page_size=1):
                    break

            await asyncio.wait_for(self._call(probe, "checking the Vercel Sandbox API"), 15)
        except BackendError as exc:
            return Health(False, exc.message, {"kind": exc.kind.value})
        except asyncio.TimeoutError:
            return Health(False, f"the Vercel Sandbox API at {self.base_url} did not answer within 15 s",
                          {"kind": ErrorKind.UNAVAILABLE.value})
        return Health(True, "", {"api": self.base_url, "sandboxes_open": str(len(self._sandboxes))})

    async def sandbox(self, task_id: str) -> VercelSandbox:
        self._ensure_client()
        key = task_id if self.opts.sandbox_per == "task" else "daemon"
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            shared = self._sandboxes.get(key)
            if shared is None:
                handle = await self._get_or_create(key, task_id)
                shared = VercelSandbox(self, key, task_id, handle, "")
                self._sandboxes[key] = shared
        if self.opts.sandbox_per == "task":
            shared.root = shared.root or self._root(shared.handle, task_id)
            return shared
        view = VercelSandbox(self, key, task_id, shared.handle, self._root(shared.handle, task_id))
        await self._mkdir(view)
        return view

    def _root(self, handle: Any, task_id: str) -> str:
        base = handle.cwd or "/vercel/sandbox"
        if self.opts.sandbox_per == "task":
            return base
        return f"{base.rstrip('/')}/tasks/{task_id}"

    async def _mkdir(self, sandbox: VercelSandbox) -> None:
        await self._call(lambda: sandbox.handle.fs.mkdir(sandbox.root, recursive=True),
                         f"creating {sandbox.root} in sandbox {sandbox.name}", sandbox=sandbox)

    async def _get_or_create(self, key: str, task_id: str) -> Any:
        sdk = _sdk()
        o = self.opts
        name = _sandbox_name(o.name_prefix, self.daemon_id(), key)
        tags = {"executor-daemon": self.daemon_id(), "executor-backend": self.name[:63],
                "executor-task": key[:63]}
        if o.allow_domains:
            policy = sdk.NetworkPolicy.custom(allow={d: () for d in o.allow_domains})
        else:
            policy = sdk.NetworkPolicy.deny_all() if o.network == "deny-all" else sdk.NetworkPolicy.allow_all()
        resources = sdk.SandboxResources(vcpus=o.vcpus, memory=o.memory_mb) if (o.vcpus or o.memory_mb) else None

        async def get_or_create() -> Any:
            handle, created = await self._client.get_or_create_sandbox(
                name=name, resume=True, image=o.image, ports=o.ports or None,
                execution_time_limit=timedelta(seconds=o.timeout) if o.timeout else None,
                resources=resources, network_policy=policy, tags=tags, region=o.region)
            log.info("vercel_sandbox %s: %s sandbox %s for %s", self.name,
                     "created" if created else "re-attached", handle.name, key)
            return handle

        def conflict_or_transient(exc: BaseException) -> bool:
            return _transient(exc) or (isinstance(exc, sdk.SandboxApiError) and exc.status_code == 409)

        def classify(exc: BaseException) -> Failure:  # a name taken meanwhile (409): get it next time
            return Failure.TRANSIENT if conflict_or_transient(exc) else Failure.FINAL

        return await retrying(get_or_create, idempotent=True, classify=classify, attempts=o.retries,
                              translate=lambda exc: map_error(exc, f"creating sandbox {name} for task {task_id}",
                                                              self.base_url))

    async def _recreate(self, sandbox: VercelSandbox) -> None:
        """The sandbox vanished (deleted, expired): make a new one under the same name.

        Processes that ran in the old one were reported LOST; its files are gone."""
        log.warning("vercel_sandbox %s: sandbox %s vanished; creating a new one (its files are lost)",
                    self.name, sandbox.name)
        lock = self._locks.setdefault(sandbox.key, asyncio.Lock())
        async with lock:
            shared = self._sandboxes.get(sandbox.key)
            if shared is not None and shared.handle is not sandbox.handle:
                sandbox.handle = shared.handle  # someone else already recreated it
                return
            handle = await self._get_or_create(sandbox.key, sandbox.task_id)
            sandbox.handle = handle
            sandbox.root = self._root(handle, sandbox.task_id)
            if shared is not None:
                shared.handle = handle
        if self.opts.sandbox_per == "daemon":
            await self._mkdir(sandbox)

    async def _release(self, sandbox: VercelSandbox, remove_files: bool) -> None:
        o = self.opts
        if o.sandbox_per == "daemon":
            if remove_files:
                with contextlib.suppress(BackendError):
                    await sandbox._run('rm -rf -- "$1"', sandbox.root, doing=f"removing {sandbox.root}")
            return
        self._sandboxes.pop(sandbox.key, None)
        self._last_used.pop(sandbox.key, None)
        handle = sandbox.handle
        action = "delete" if remove_files else o.on_close
        try:
            if action == "delete":
                await self._call(lambda: handle.stop(), f"stopping sandbox {handle.name}")
                await self._call(lambda: handle.destroy(), f"deleting sandbox {handle.name}")
            elif action == "stop":
                await self._call(lambda: handle.stop(), f"stopping sandbox {handle.name}")
        except BackendError as exc:
            if exc.kind != ErrorKind.NOT_FOUND:
                raise

    def _touch(self, key: str) -> None:
        self._last_used[key] = asyncio.get_running_loop().time()

    async def _reap_idle(self, idle: float) -> None:
        """Stop the session of every sandbox unused for ``idle`` seconds (files kept; resumed on use).

        A process still running in it is ended (and reported LOST to whoever waits for it): idle
        means nobody spawned, wrote or read anything for that long."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(idle / 4, 5.0))
            for key, sandbox in list(self._sandboxes.items()):
                last = self._last_used.get(key)
                if last is None or loop.time() - last < idle:
                    continue
                self._last_used.pop(key, None)
                try:
                    await self._call(sandbox.handle.stop, f"stopping idle sandbox {sandbox.name}")
                    self.reaped.append(sandbox.name)
                    log.info("vercel_sandbox %s: stopped idle sandbox %s", self.name, sandbox.name)
                except BackendError as exc:
                    log.warning("vercel_sandbox %s: %s", self.name, exc.message)

    async def close(self) -> None:
        """Daemon shutdown: stop the sessions of open sandboxes (files kept) unless on_close is keep."""
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(BaseException):
                await self._reaper
            self._reaper = None
        if self.opts.on_close != "keep":
            for sandbox in list(self._sandboxes.values()):
                try:
                    await self._call(sandbox.handle.stop, f"stopping sandbox {sandbox.name}")
                except BackendError as exc:
                    log.warning("vercel_sandbox %s: %s", self.name, exc.message)
        self._sandboxes.clear()
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None
            self._service = None


__all__ = ["VercelSandboxBackend", "VercelSandboxOptions", "VercelSandbox", "map_error"]

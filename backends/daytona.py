"""The daytona backend: each task in a Daytona sandbox, driven through the ``daytona`` SDK (async).

How a process runs (read ``docs/backends/daytona.md`` for the why):

* ``spawn`` opens one toolbox *session* per process and runs one ``runAsync`` command in it: a
  small POSIX-sh launcher that starts ``argv`` with ``setsid -w sh -c '... exec env -i ...'``
  (a new session leader with exactly ``env``, so ``$$`` is the session id ``signal_session``
  needs), in the foreground so its signals keep their defaults.
* Output streams over the command's log websocket while it runs. The toolbox labels each stream
  *line by line* (a partial line waits for its newline, a last one gets a newline added, some
  invalid UTF-8 is mangled), so the launcher re-frames every chunk of the process's output as a
  ``Z<base64 of gzip>`` line, reports the pid as ``S<pid>``, and we undo that here: the bytes
  come back exactly, as they are produced.
* Stdin goes through ``send_session_command_input``, which carries text and appends a newline,
  so each write travels as ``B<base64>`` lines and the end of input as ``E``: the launcher's
  reader turns those back into the exact bytes, at once, and a real EOF.
* Files move through the toolbox's file API (a tar uploaded/downloaded as one file), one-shot
  helpers (tar, the /proc walk that signals a session) through ``process.exec``.

Faults map to ``BackendError`` kinds; a sandbox that vanished is ``LOST`` and recreated on the
next use; idle sandboxes are stopped by Daytona itself (``auto_stop_interval``) and started again
on the next use. Never a fallback.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import os
import re
import shlex
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import SecretStr, model_validator

from ._shared.registry import SessionRegistry
from ._shared.retry import once, retrying
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
T = TypeVar("T")

STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"
_PREFIXES = {STDOUT_PREFIX: "stdout", STDERR_PREFIX: "stderr"}
_DEFAULT_API_URL = "https://app.daytona.io/api"
_GONE_STATES = {"destroyed", "destroying", "error", "build_failed"}
_STOPPED_STATES = {"stopped", "stopping", "archived", "archiving", "paused", "pausing"}
_QUOTA_WORDS = ("quota", "limit exceeded", "exceeded", "insufficient", "too many")


class DaytonaOptions(Options):
    """``backends.<name>`` for ``kind: daytona``."""

    #: The Daytona API; default ``$DAYTONA_API_URL`` or Daytona's cloud.
    api_url: str | None = None
    #: The API key itself (prefer ``api_key_env``); never logged or shown.
    api_key: SecretStr | None = None
    #: The daemon's environment variable holding the API key.
    api_key_env: str = "DAYTONA_API_KEY"
    #: Region; default the organization's.
    target: str | None = None
    #: A snapshot to start from, or an image to build from (mutually exclusive).
    snapshot: str | None = None
    image: str | None = None
    #: Resources (cores, GiB, GiB): Daytona honours these only when building from ``image``.
    cpu: int | None = None
    memory: int | None = None
    disk: int | None = None
    #: Minutes of inactivity after which Daytona stops the sandbox (0: never).
    auto_stop_interval: int = 15
    #: Minutes after stopping until Daytona deletes it (None: Daytona's default, never).
    auto_delete_interval: int | None = None
    #: Network policy: block all egress, or allow only these CIDRs.
    network_block_all: bool = False
    network_allow_list: list[str] = []
    #: One sandbox per task, or one for the whole daemon (tasks in subdirectories).
    sandbox_per: Literal["task", "daemon"] = "task"
    #: What CloseTask (per task) or shutdown (per daemon) does with the sandbox.
    on_close: Literal["delete", "stop", "keep"] = "delete"
    #: Extra labels on every sandbox this backend creates.
    labels: dict[str, str] = {}
    #: Seconds to wait for a sandbox to be created and started.
    create_timeout: float = 180.0
    #: Seconds for one API request.
    request_timeout: float = 30.0

    @model_validator(mode="after")
    def _check(self) -> "DaytonaOptions":
        if self.snapshot and self.image:
            raise ValueError("set either snapshot or image, not both")
        if (self.cpu or self.memory or self.disk) and not self.image:
            raise ValueError("cpu/memory/disk apply only when the sandbox is built from `image`; "
                             "a snapshot carries its own resources")
        if self.network_block_all and self.network_allow_list:
            raise ValueError("network_block_all and network_allow_list are mutually exclusive")
        return self


# ---------------------------------------------------------------------------
# The SDK, imported only when this backend is configured
# ---------------------------------------------------------------------------

def _sdk() -> Any:
    """Import the SDK and keep it from reading ``.env`` files in the daemon's working directory.

    The SDK parses ``.env``/``.env.local`` from the cwd for DAYTONA_* settings (target, OTEL,
    polling...): a daemon's behaviour must not depend on where it was started, so the reader
    it uses sees only the process environment."""
    import daytona
    from daytona._async import daytona as async_module
    from daytona._utils.env import DaytonaEnvReader

    if not getattr(async_module.DaytonaEnvReader, "_executor_no_dotenv", False):
        class _ProcessEnvOnly(DaytonaEnvReader):
            _executor_no_dotenv = True

            @staticmethod
            def _load(path: str) -> dict[str, str]:
                return {}

        async_module.DaytonaEnvReader = _ProcessEnvOnly
    return daytona


def _translate(exc: BaseException, action: str, *, key_hint: str = "") -> BackendError:
    """A Daytona/transport error as a BackendError a person can act on."""
    if isinstance(exc, BackendError):
        return exc
    import aiohttp
    from daytona.common import errors as e

    status = getattr(exc, "status_code", None) or getattr(exc, "status", None)
    text = str(exc).strip() or type(exc).__name__
    message = f"daytona: {action} failed: {text}"
    if isinstance(exc, e.DaytonaAuthenticationError) or status == 401:
        return BackendError(f"{message}. The API key was refused{key_hint}.", ErrorKind.UNAUTHENTICATED)
    if isinstance(exc, e.DaytonaRateLimitError) or status == 429:
        return BackendError(f"{message}. Rate limited or out of quota: retry later or raise the limit.",
                            ErrorKind.RESOURCE_EXHAUSTED)
    if isinstance(exc, e.DaytonaForbiddenError) or status == 403:
        if any(w in text.lower() for w in _QUOTA_WORDS):
            return BackendError(f"{message}. Free sandboxes (delete stopped ones) or raise the quota.",
                                ErrorKind.RESOURCE_EXHAUSTED)
        return BackendError(message, ErrorKind.PERMISSION_DENIED)
    if isinstance(exc, e.DaytonaNotFoundError) or status == 404:
        return BackendError(message, ErrorKind.NOT_FOUND)
    if isinstance(exc, (e.DaytonaConnectionError, e.DaytonaTimeoutError, aiohttp.ClientError, OSError,
                        asyncio.TimeoutError)) or (isinstance(status, int) and status >= 500):
        return BackendError(f"{message}. The Daytona API is unreachable or failing; retry later.",
                            ErrorKind.UNAVAILABLE)
    if isinstance(status, int) and 400 <= status < 500:
        return BackendError(message, ErrorKind.FAILED_PRECONDITION)
    return BackendError(message, ErrorKind.INTERNAL)


#: Default bound (s) for one idempotent API call; backends pass their ``request_timeout``.
_CALL_TIMEOUT = 30.0


async def _retrying(action: str, make: Callable[[], Awaitable[T]], *, attempts: int = 2,
                    key_hint: str = "", timeout: float | None = None) -> T:
    """An idempotent call (bounded by ``timeout``), repeated under the shared rule (``_shared.retry``)."""
    return await retrying(make, translate=lambda exc: _translate(exc, action, key_hint=key_hint), idempotent=True,
                          attempts=attempts, timeout=timeout or _CALL_TIMEOUT)


async def _once(action: str, aw: Awaitable[T], key_hint: str = "", timeout: float | None = None) -> T:
    """A call that is not safe to repeat (it may have happened), its errors translated; bounded by
    ``timeout`` (None: the SDK's own limits, for long transfers)."""
    return await once(aw, translate=lambda exc: _translate(exc, action, key_hint=key_hint), timeout=timeout)


# ---------------------------------------------------------------------------
# The launcher that runs inside the sandbox
# ---------------------------------------------------------------------------

#: Re-frames a byte stream as records the toolbox's *line* labeller passes on at once and
#: intact: each chunk the pipe yields (one ``read(2)``: whatever is there, up to 64 KiB) becomes
#: one line, ``Z<base64 of gzip>`` (or ``B<base64>`` without gzip). Exact bytes, NUL included,
#: and a prompt or marker that does not end in a newline is not held back. gzip because the
#: toolbox's labeller reads its FIFO a byte per syscall (~1.5 MB/s): fewer bytes, faster
#: output. (A bash ``read -t`` loop was tried: its timeout can drop a byte, and the labeller's
#: own ``read`` mangles some invalid UTF-8.) POSIX sh + dd + base64 (+ gzip).
_ENCODER = (
    'if command -v gzip >/dev/null 2>&1; then '
    'e=$(gzip -1 -n </dev/null | base64 -w0); '
    'while r=$(dd bs=65536 count=1 2>/dev/null | gzip -1 -n | base64 -w0) && [ "$r" != "$e" ]; do '
    'printf \'Z%s\\n\' "$r"; done; '
    'else while r=$(dd bs=65536 count=1 2>/dev/null | base64 -w0) && [ -n "$r" ]; do '
    'printf \'B%s\\n\' "$r"; done; fi'
)


#: POSIX sh, run as one async session command. Everything sits in a subshell so nothing leaks
#: into (or exits) the toolbox's session shell. $d holds three FIFOs: i (stdin, fed by the
#: decoder of ``B<base64>`` / ``E`` lines read from the session's stdin), o and e
#: (stdout/stderr, re-framed by _ENCODER). argv runs in the foreground (signals at their
#: defaults: a background job would ignore SIGINT) under ``setsid`` through a tiny ``sh`` that
#: reports its pid (= the new session's id, kept by ``exec``) as ``S<pid>`` on fd 4.
_LAUNCHER = r"""(
exec 3<&0 4>&1
d=%(dir)s
enc=%(encoder)s
mkdir -m 700 "$d" && mkfifo "$d/i" "$d/o" "$d/e" || exit 125
( while IFS= read -r l; do case $l in B*) printf '%%s' "${l#B}" | base64 -d || break;; *) break;; esac; done ) <&3 >"$d/i" &
ip=$!
/bin/sh -c "$enc" <"$d/o" &
op=$!
/bin/sh -c "$enc" <"$d/e" >&2 &
ep=$!
if cd -- %(cwd)s; then
  setsid -w /bin/sh -c 'printf "S%%s\n" "$$" >&4 && exec 3<&- 4>&- && exec env -i -- "$@"' executor-launch %(env)s %(argv)s <"$d/i" >"$d/o" 2>"$d/e"
  c=$?
else
  c=126; : <"$d/i" >"$d/o" 2>"$d/e"
fi
kill "$ip" 2>/dev/null
wait "$op" "$ep"
rm -rf "$d"
exit "$c"
)"""


def launcher(argv: Sequence[str], cwd: str, env: Mapping[str, str], fifo_dir: str) -> str:
    """The shell text that runs ``argv`` as a session leader with exactly ``env`` in ``cwd``."""
    for name in env:
        if not name or "=" in name:
            raise BackendError(f"invalid environment variable name {name!r}", ErrorKind.INVALID_ARGUMENT)
    return _LAUNCHER % {
        "dir": shlex.quote(fifo_dir),
        "encoder": shlex.quote(_ENCODER),
        "cwd": shlex.quote(cwd),
        "env": " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()),
        "argv": " ".join(shlex.quote(a) for a in argv),
    }


class LogDecoder:
    """Turns the toolbox's labelled log bytes back into the process's exact stdout/stderr.

    The log is a sequence of records ``PREFIX payload \\n`` (PREFIX: 3 bytes naming the
    stream); the launcher made each payload ``Z<base64 of a gzipped chunk>``, ``B<base64 of a
    chunk>`` (see ``_ENCODER``) or ``S<pid>``. Records may
    arrive split across websocket frames; a payload without our framing (a message from the
    toolbox itself) passes through as a line."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        self._buf += data
        out: list[tuple[str, bytes]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            record = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            stream = _PREFIXES.get(record[:3])
            if stream is None:  # not labelled: treat as stdout text
                out.append(("stdout", record + b"\n"))
                continue
            payload = record[3:]
            if payload[:1] == b"S" and stream == "stdout" and payload[1:].isdigit():
                out.append(("pid", payload[1:]))
            elif payload[:1] in (b"B", b"Z"):
                try:
                    data = base64.b64decode(payload[1:], validate=True)
                    out.append((stream, zlib.decompress(data, 31) if payload[:1] == b"Z" else data))
                except (binascii.Error, zlib.error):
                    out.append((stream, payload + b"\n"))
            else:
                out.append((stream, payload + b"\n"))

    def leftover(self) -> bytes:
        rest, self._buf = bytes(self._buf), bytearray()
        return rest


#: Raw bytes per stdin line (base64 grows them by 4/3).
_INPUT_CHUNK = 48 * 1024


def encode_input(data: bytes) -> str:
    """Stdin bytes as ``B<base64>`` lines: the toolbox's input API carries text only and
    appends a newline, so binary data and partial lines travel this way (decoded in the
    launcher and delivered at once, exactly)."""
    return "".join(f"B{base64.b64encode(data[i:i + _INPUT_CHUNK]).decode()}\n"
                   for i in range(0, len(data), _INPUT_CHUNK))


# ---------------------------------------------------------------------------
# Process
# ---------------------------------------------------------------------------

class DaytonaProcess(Process):
    """A process in a Daytona sandbox: one toolbox session running the launcher."""

    def __init__(self, sandbox: "DaytonaSandbox", remote: Any, session_id: str, cmd_id: str, ws: Any) -> None:
        self._sandbox = sandbox
        self._remote = remote
        self.session_id = session_id
        self.cmd_id = cmd_id
        self._ws = ws
        self.stdout = ByteQueue()
        self.stderr = ByteQueue()
        self._stdin_closed = False
        self._write_lock = asyncio.Lock()
        self._code: int | None = None
        self._pid: int | None = None
        self._started = asyncio.Event()
        self._pump: asyncio.Future[None] = asyncio.ensure_future(self._read_logs())
        self._pump.add_done_callback(lambda _: self._started.set())

    async def started(self, timeout: float) -> None:
        """Wait until the launcher reported the pid: the command runs and its stdin is open
        (input sent earlier would hit a FIFO that does not exist yet)."""
        try:
            await asyncio.wait_for(self._started.wait(), timeout)
        except asyncio.TimeoutError:
            await self.detach()
            raise BackendError(f"daytona: the command did not start within {timeout:g}s", ErrorKind.UNAVAILABLE)

    async def _read_logs(self) -> None:
        import aiohttp

        decoder = LogDecoder()
        queues = {"stdout": self.stdout, "stderr": self.stderr}
        try:
            while True:
                await self.stdout.room()  # bounded: the socket is not read while a reader is behind
                await self.stderr.room()
                msg = await self._ws.receive()
                if msg.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                    data = msg.data if isinstance(msg.data, bytes) else msg.data.encode()
                    for stream, chunk in decoder.feed(data):
                        if stream == "pid":
                            self._pid = int(chunk)
                            self._sandbox.remember(self._pid)
                            self._started.set()
                        else:
                            queues[stream].feed(chunk)
                    continue
                if msg.type == aiohttp.WSMsgType.ERROR:
                    raise BackendError(f"daytona: the output stream broke: {self._ws.exception()}", ErrorKind.LOST)
                code = self._ws.close_code
                if code not in (None, 1000):
                    raise BackendError(f"daytona: the output stream closed with code {code}", ErrorKind.LOST)
                break
            if rest := decoder.leftover():
                self.stdout.feed(rest)
            self.stdout.feed_eof()
            self.stderr.feed_eof()
        except asyncio.CancelledError:
            self.stdout.feed_eof()
            self.stderr.feed_eof()
            raise
        except Exception as exc:  # noqa: BLE001 - surfaced to the readers
            err = exc if isinstance(exc, BackendError) else BackendError(
                f"daytona: the output stream broke: {exc}", ErrorKind.LOST)
            self.stdout.feed_error(err)
            self.stderr.feed_error(err)
        finally:
            with contextlib.suppress(Exception):
                await self._ws.close()

    async def _send(self, text: str) -> None:
        try:
            await asyncio.wait_for(self._remote.process.send_session_command_input(
                self.session_id, self.cmd_id, text), self._sandbox.request_timeout)
        except Exception as exc:  # noqa: BLE001
            err = _translate(exc, "writing to stdin")
            if getattr(exc, "status_code", None) == 410 or err.kind is ErrorKind.NOT_FOUND:
                raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION) from exc
            raise err from exc

    async def write(self, data: bytes) -> None:
        async with self._write_lock:
            if self._stdin_closed:
                raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
            if data:
                await self._send(encode_input(bytes(data)))

    async def close_stdin(self) -> None:
        async with self._write_lock:
            if self._stdin_closed:
                return
            self._stdin_closed = True
            with contextlib.suppress(BackendError):  # already exited: nothing to close
                await self._send("E\n")

    async def wait(self) -> int:
        if self._code is not None:
            return self._code
        await asyncio.shield(self._pump)
        code = await self._exit_code()
        sig = self._sandbox.signalled.get(self.pid or -1)
        self._code = -sig if sig and code == 128 + sig else code
        self._sandbox.forget_session(self.session_id, self.pid)
        return self._code

    async def _exit_code(self) -> int:
        delay = 0.01
        for _ in range(60):
            try:
                cmd = await _retrying("reading the exit code", lambda: self._remote.process.get_session_command(
                    self.session_id, self.cmd_id))
            except BackendError as err:
                if err.kind is ErrorKind.NOT_FOUND:
                    await self._sandbox.check_alive()
                    raise BackendError("daytona: the process's session vanished; its exit status is unknown",
                                       ErrorKind.LOST) from err
                raise
            if cmd.exit_code is not None:
                return int(cmd.exit_code)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
        raise BackendError("daytona: the output ended but no exit status arrived", ErrorKind.LOST)

    @property
    def pid(self) -> int | None:
        """The process's pid (= its session id) inside the sandbox, once the launcher reported it."""
        return self._pid

    async def detach(self) -> None:
        self._pump.cancel()
        with contextlib.suppress(BaseException):
            await self._pump


class DaytonaPtyProcess(Process):
    """A process on a terminal: a toolbox PTY session whose shell ``exec``s argv.

    The PTY API starts the sandbox's login shell (a session leader on the terminal); we type one
    line into it that prints a marker with ``$$`` (written in octal escapes, so the echo of the
    typed line does not contain it) and ``exec``s ``env -i ... argv``: argv keeps the shell's pid,
    so it is the session leader and ``$$`` is the session id. Everything before the marker (the
    prompt, the echo) is dropped; everything after is the program's terminal output, exact."""

    def __init__(self, sandbox: "DaytonaSandbox", token: str) -> None:
        self._sandbox = sandbox
        self.stdout = ByteQueue()
        self.stderr = None
        self._marker = f"executor-pty-{token}:".encode()
        self._before = bytearray()
        self._ready = asyncio.Event()
        self._pid: int | None = None
        self._handle: Any = None
        self._code: int | None = None

    def startup_line(self, argv: Sequence[str], cwd: str, env: Mapping[str, str]) -> bytes:
        octal = "".join(f"\\{b:03o}" for b in self._marker)
        assignments = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
        return (f" cd -- {shlex.quote(cwd)} && printf '{octal}%d\\n' $$ && exec env -i -- {assignments} "
                f"{shlex.join(argv)}\n").encode()

    def on_data(self, data: bytes) -> None:
        if self._ready.is_set():
            self.stdout.feed(data)
            return
        self._before += data
        at = self._before.find(self._marker)
        if at < 0:
            return
        rest = self._before[at + len(self._marker):]
        nl = rest.find(b"\n")
        if nl < 0:
            return
        self._pid = int(rest[:nl].strip())
        self._sandbox.remember(self._pid)
        self._before.clear()
        self._ready.set()
        if tail := bytes(rest[nl + 1:]):
            self.stdout.feed(tail)

    async def attach(self, handle: Any, timeout: float) -> None:
        self._handle = handle
        waiter = asyncio.ensure_future(handle.wait())
        ready = asyncio.ensure_future(self._ready.wait())
        done, _ = await asyncio.wait({waiter, ready}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if ready not in done:
            waiter.cancel()
            await self.detach()
            raise BackendError(f"daytona: the terminal did not start the program within {timeout:g}s: "
                               f"{bytes(self._before[-200:]).decode(errors='replace')!r}", ErrorKind.UNAVAILABLE)
        waiter.add_done_callback(lambda _: self.stdout.feed_eof())

    @property
    def pid(self) -> int | None:
        return self._pid

    async def write(self, data: bytes) -> None:
        try:
            await self._handle.send_input(bytes(data))
        except Exception as exc:  # noqa: BLE001
            raise BackendError(f"the terminal is closed: {exc}", ErrorKind.FAILED_PRECONDITION) from exc

    async def close_stdin(self) -> None:
        return None

    async def resize(self, size: PtySize) -> None:
        from daytona.common.pty import PtySize as SdkPtySize

        try:
            await self._handle.resize(SdkPtySize(rows=size.rows, cols=size.cols))
        except Exception as exc:  # noqa: BLE001
            raise _translate(exc, "resizing the terminal") from exc

    async def wait(self) -> int:
        if self._code is not None:
            return self._code
        result = await self._handle.wait()
        code = result.exit_code
        sig = self._sandbox.signalled.get(self._pid or -1)
        if code is None:
            await self._sandbox.check_alive()
            raise BackendError(f"daytona: the terminal ended without an exit status: {result.error or 'unknown'}",
                               ErrorKind.LOST)
        if sig and code in (-1, 128 + sig):
            code = -sig
        self._code = code
        self._sandbox.forget_session(None, self._pid)
        return code

    async def detach(self) -> None:
        if self._handle is not None:
            with contextlib.suppress(Exception):
                await self._handle.disconnect()


# ---------------------------------------------------------------------------
# Sandbox
# ---------------------------------------------------------------------------

@dataclass
class _Remote:
    """One Daytona sandbox as the backend knows it."""

    sandbox: Any  # daytona.AsyncSandbox
    home: str
    roots: set[str] = field(default_factory=set)


class DaytonaSandbox(Sandbox):
    """A task's directory in a Daytona sandbox (its own, or the daemon's shared one)."""

    def __init__(self, backend: "DaytonaBackend", key: str, task_id: str, root: str) -> None:
        self._backend = backend
        self._key = key
        self.task_id = task_id
        self.root = root
        #: signals we delivered, by session id, so wait() can tell a kill from an exit code.
        self.signalled: dict[int, int] = {}
        self._notice_seen, _ = backend.notice_since(key, 0)

    @property
    def request_timeout(self) -> float:
        return self._backend.options.request_timeout

    def take_notice(self) -> str | None:
        self._notice_seen, note = self._backend.notice_since(self._key, self._notice_seen)
        return note

    async def _remote(self) -> Any:
        remote = await self._backend.attach(self._key, self.task_id)
        if self.root not in remote.roots:
            await _once("creating the task directory", remote.sandbox.fs.create_folder(self.root, "755"),
                        timeout=self._backend.options.request_timeout)
            remote.roots.add(self.root)
        return remote.sandbox

    async def check_alive(self) -> None:
        """After a failure: LOST if the sandbox is gone (it is recreated on next use)."""
        await self._backend.check_alive(self._key)

    async def _guard(self, action: str, aw: Awaitable[T], timeout: float | None = -1.0) -> T:
        """Run a toolbox call (bounded by ``request_timeout`` unless told otherwise); a failure
        that turns out to be a vanished or stopped sandbox is LOST."""
        if timeout is not None and timeout < 0:
            timeout = self._backend.options.request_timeout
        try:
            return await _once(action, aw, timeout=timeout)
        except BackendError as err:
            if err.kind in (ErrorKind.NOT_FOUND, ErrorKind.FAILED_PRECONDITION, ErrorKind.UNAVAILABLE):
                await self.check_alive()
            raise

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        if not argv:
            raise BackendError("empty argv", ErrorKind.INVALID_ARGUMENT)
        from daytona import SessionExecuteRequest

        remote = await self._remote()
        if pty is not None:
            return await self._spawn_pty(remote, argv, cwd, env, pty)
        session_id = f"executor-{uuid.uuid4().hex}"
        script = launcher(argv, cwd, env, f"/tmp/.{session_id}")
        await self._guard("creating a session", remote.process.create_session(session_id))
        try:
            resp = await self._guard("starting the command", remote.process.execute_session_command(
                session_id, SessionExecuteRequest(command=script, run_async=True, suppress_input_echo=True)))
            ws = await self._guard("opening the output stream", _open_log_socket(remote, session_id, resp.cmd_id))
        except BaseException:
            self._backend.background(remote.process.delete_session(session_id))
            raise
        proc = DaytonaProcess(self, remote, session_id, resp.cmd_id, ws)
        try:
            await proc.started(self._backend.options.request_timeout)
        except BaseException:
            self._backend.background(remote.process.delete_session(session_id))
            raise
        return proc

    async def _spawn_pty(self, remote: Any, argv: Sequence[str], cwd: str, env: Mapping[str, str],
                         size: PtySize) -> Process:
        from daytona.common.pty import PtySize as SdkPtySize

        token = uuid.uuid4().hex
        proc = DaytonaPtyProcess(self, token)
        handle = await self._guard("opening a terminal", remote.process.create_pty_session(
            f"executor-{token}", proc.on_data, cwd=cwd, pty_size=SdkPtySize(rows=size.rows, cols=size.cols)))
        try:
            await handle.send_input(proc.startup_line(argv, cwd, env))
        except Exception as exc:  # noqa: BLE001
            with contextlib.suppress(Exception):
                await handle.disconnect()
            raise _translate(exc, "starting the program on the terminal") from exc
        await proc.attach(handle, self._backend.options.request_timeout)
        return proc

    def remember(self, pid: int) -> None:
        """A process of ours runs as session ``pid``: on disk, so a restarted daemon ends it."""
        remote = self._backend.cached(self._key)
        if remote is not None:
            self._backend.registry.remember(pid, scope=remote.sandbox.id)

    def forget_session(self, session_id: str | None, pid: int | None) -> None:
        """The process is over: forget its pid, delete its toolbox session in the background."""
        remote = self._backend.cached(self._key)
        if remote is None:
            return
        if pid is not None:
            self._backend.registry.forget(pid, scope=remote.sandbox.id)
        if session_id is not None:
            self._backend.background(remote.sandbox.process.delete_session(session_id))

    async def run(self, command: str, action: str, timeout: int = 120) -> tuple[int, str]:
        """A one-shot helper command (``process.exec``): exit code and combined output."""
        remote = await self._remote()
        resp = await self._guard(action, remote.process.exec(command, cwd="/", timeout=timeout),
                                 timeout=timeout + self._backend.options.request_timeout)
        return int(resp.exit_code), resp.result or ""

    async def signal_session(self, pid: int, sig: int) -> None:
        """One ``process.exec`` round trip: ``pkill -s`` where the image has it (fast), else the
        generic /proc walk. Never touches other sessions, never the sandbox itself."""
        self.signalled[pid] = sig
        await self.run(kill_sessions_command([pid], sig), f"signalling session {pid}", timeout=30)

    # Sandbox.put_archive / get_archive resolve and check every path in the sandbox first;
    # these only move the bytes.
    async def unpack_tar(self, path: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        remote = await self._remote()
        tmp = f"/tmp/.executor-put-{uuid.uuid4().hex}.tar"
        await self._guard(f"uploading into {path}", remote.fs.upload_file_stream(data, tmp), timeout=None)
        code, out = await self.run(
            shlex.join(["/bin/sh", "-c", 'mkdir -p -- "$1" && tar -x -f "$2" -C "$1"; c=$?; rm -f -- "$2"; exit $c',
                        "put", path, tmp]), f"unpacking into {path}")
        if code != 0:
            raise BackendError(f"unpacking into {path} failed: {out.strip() or f'tar exited {code}'}",
                               ErrorKind.FAILED_PRECONDITION)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        remote = await self._remote()
        parent, _, name = path.rstrip("/").rpartition("/")
        tmp = f"/tmp/.executor-get-{uuid.uuid4().hex}.tar"
        code, out = await self.run(
            shlex.join(["/bin/sh", "-c", 'cd -- "$1" && tar -c -f "$3" -- "$2"', "get", parent or "/", name or ".", tmp]),
            f"packing {path}")
        try:
            if code != 0:
                message = out.strip() or f"tar exited {code}"
                raise BackendError(f"reading {path} failed: {message}",
                                   ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION)
            stream = await self._guard(f"downloading {path}", remote.fs.download_file_stream(tmp), timeout=None)
            try:
                async for chunk in stream:
                    yield chunk
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, f"downloading {path}") from exc
        finally:
            self._backend.background(self.run(f"rm -f -- {shlex.quote(tmp)}", "removing a temporary file"))

    async def release(self, remove_files: bool = False) -> None:
        await self._backend.release(self._key, self, remove_files)


def kill_sessions_command(pids: Sequence[int], sig: int) -> str:
    """A shell command delivering ``sig`` to every process of each session in ``pids``."""
    walk = shlex.join(["/bin/sh", "-c", KILL_TREE_SCRIPT, "executor-kill", "$p", str(int(sig))]).replace(
        "'$p'", '"$p"')
    script = f"for p in {' '.join(str(int(p)) for p in pids)}; do {walk}; done; exit 0"
    return shlex.join(["/bin/sh", "-c", script])


async def _open_log_socket(remote: Any, session_id: str, cmd_id: str) -> Any:
    """The command's log websocket, raw.

    The SDK's public ``get_session_command_logs_async`` decodes output as UTF-8 text (bytes that
    are not UTF-8 become U+FFFD) and only hands it to callbacks; we need the exact bytes, so we
    open the same websocket the same way the SDK does (its request serializer and its shared
    aiohttp session, so auth, headers and the connection pool are the SDK's) and demultiplex
    ourselves. Pinned to daytona==0.226.1; ``tests/test_daytona_backend.py`` breaks if it moves."""
    process = remote.process
    _, url, headers, *_ = process._api_client._get_session_command_logs_serialize(
        session_id=session_id, command_id=cmd_id, follow=True,
        _request_auth=None, _content_type=None, _headers=None, _host_index=None)
    return await process._open_ws(re.sub(r"^http", "ws", url), headers)


# ---------------------------------------------------------------------------
# Backend
# ---------------------------------------------------------------------------

class DaytonaBackend(Backend):
    kind = "daytona"
    Options = DaytonaOptions
    options: DaytonaOptions

    def __init__(self, name: str, options: DaytonaOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self._client: Any = None
        self._remotes: dict[str, _Remote] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self.adopted = 0
        self.orphans_ended = 0
        self.registry = SessionRegistry(state_dir / "pids")
        #: key -> (generation, note) about the sandbox's life (vanished and recreated, restarted).
        self._notices: dict[str, tuple[int, str]] = {}
        self._notice_seq = 0

    # -- configuration --------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return self.options.api_url or os.environ.get("DAYTONA_API_URL") or _DEFAULT_API_URL

    def _api_key(self) -> str | None:
        if self.options.api_key is not None:
            return self.options.api_key.get_secret_value() or None
        return os.environ.get(self.options.api_key_env) or None

    @property
    def _key_hint(self) -> str:
        source = "backends.%s.api_key" % self.name if self.options.api_key else f"${self.options.api_key_env}"
        return f" (key from {source}, API {self.api_url})"

    def _missing_credentials(self) -> BackendError:
        return BackendError(
            f"daytona: no API key: set the {self.options.api_key_env} environment variable of the daemon "
            f"(or backends.{self.name}.api_key_env / api_key in the config)", ErrorKind.FAILED_PRECONDITION)

    @property
    def capabilities(self) -> Capabilities:
        network = ("blocked" if self.options.network_block_all else
                   "allow_list" if self.options.network_allow_list else "open")
        return Capabilities(pty=True, resize=True, signals=True, stdin=True, background=True,
                            persistent_shell=True, file_transfer=True, network_policy=network, streaming=True)

    def policy(self) -> dict[str, str]:
        o = self.options
        policy = {
            "isolation": f"daytona sandbox per {o.sandbox_per}",
            "api_url": self.api_url,
            "credentials": f"backends.{self.name}.api_key" if o.api_key else f"${o.api_key_env}",
            "target": o.target or "(organization default)",
            "source": f"image {o.image}" if o.image else f"snapshot {o.snapshot or '(default)'}",
            "network": ("blocked" if o.network_block_all else
                        "allow " + ",".join(o.network_allow_list) if o.network_allow_list else "open"),
            "auto_stop_minutes": str(o.auto_stop_interval),
            "on_close": o.on_close,
            "kill": KILL_SESSION_ONLY,
        }
        for k, v in (("cpu", o.cpu), ("memory_gib", o.memory), ("disk_gib", o.disk)):
            if v is not None:
                policy[k] = str(v)
        return policy

    # -- lifecycle ---------------------------------------------------------------------------
    def _client_or_raise(self) -> Any:
        if self._client is None:
            key = self._api_key()
            if not key:
                raise self._missing_credentials()
            daytona = _sdk()
            config = daytona.DaytonaConfig(api_key=key, api_url=self.api_url, target=self.options.target)
            try:
                self._client = daytona.AsyncDaytona(config)
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, "configuring the client", key_hint=self._key_hint) from exc
        return self._client

    async def start(self) -> None:
        try:
            self._client_or_raise()
            found = await self._list({"executor.daemon": self.instance_id, "executor.backend": self.name})
            self.adopted = len(found)
        except BackendError as err:
            log.warning("daytona backend %s: %s", self.name, err.message)

    async def health(self) -> Health:
        try:
            self._client_or_raise()
            found = await asyncio.wait_for(
                self._list({"executor.daemon": self.instance_id, "executor.backend": self.name}),
                self.options.request_timeout)
        except asyncio.TimeoutError:
            return Health(False, f"daytona: the API at {self.api_url} did not answer in "
                                 f"{self.options.request_timeout:g}s")
        except BackendError as err:
            return Health(False, err.message, {"kind": err.kind.value})
        return Health(True, "", {"api_url": self.api_url, "sandboxes": str(len(found))})

    async def close(self) -> None:
        if self.options.sandbox_per == "daemon" and "daemon" in self._remotes:
            with contextlib.suppress(BackendError):
                await self._dispose(self._remotes.pop("daemon"))
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    def background(self, aw: Awaitable[Any]) -> None:
        """Fire-and-forget cleanup (deleting sessions, temp files); failures are only logged."""
        async def run() -> None:
            try:
                await aw
            except Exception as exc:  # noqa: BLE001
                log.debug("daytona background cleanup failed: %s", exc)
        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sandboxes ---------------------------------------------------------------------------
    def _labels(self, key: str, task_id: str) -> dict[str, str]:
        labels = {**self.options.labels, "executor.daemon": self.instance_id, "executor.backend": self.name}
        if key == "daemon":
            labels["executor.scope"] = "daemon"
        else:
            labels["executor.task"] = task_id
        return labels

    async def _list(self, labels: dict[str, str]) -> list[Any]:
        from daytona import ListSandboxesQuery

        client = self._client_or_raise()

        async def fetch() -> list[Any]:
            return [sb async for sb in client.list(ListSandboxesQuery(labels=labels))]
        return await _retrying("listing sandboxes", fetch, key_hint=self._key_hint,
                               timeout=self.options.request_timeout)

    async def sandbox(self, task_id: str) -> DaytonaSandbox:
        key = "daemon" if self.options.sandbox_per == "daemon" else task_id
        remote = await self.attach(key, task_id)
        sb = DaytonaSandbox(self, key, task_id, f"{remote.home.rstrip('/')}/tasks/{task_id}")
        await sb._remote()
        return sb

    def _notify(self, key: str, note: str) -> None:
        self._notice_seq += 1
        self._notices[key] = (self._notice_seq, note)

    def notice_since(self, key: str, seen: int) -> tuple[int, str | None]:
        """The note for ``key`` newer than generation ``seen``, if any."""
        gen, note = self._notices.get(key, (0, ""))
        return (gen, note) if gen > seen else (seen, None)

    def cached(self, key: str) -> _Remote | None:
        return self._remotes.get(key)

    async def attach(self, key: str, task_id: str) -> _Remote:
        """The sandbox for ``key``: cached, found again by its labels, started, or created."""
        remote = self._remotes.get(key)
        if remote is not None:
            return remote
        async with self._locks.setdefault(key, asyncio.Lock()):
            remote = self._remotes.get(key)
            if remote is not None:
                return remote
            labels = self._labels(key, task_id)
            found = [sb for sb in await self._list(labels) if _state(sb) not in _GONE_STATES]
            sandbox = await self._adopt(found[0]) if found else await self._create(labels)
            home = await _retrying("reading the work directory", sandbox.get_work_dir,
                                   timeout=self.options.request_timeout)
            remote = _Remote(sandbox, home or "/home/daytona")
            self._remotes[key] = remote
            return remote

    async def _adopt(self, sandbox: Any) -> Any:
        """Take over a sandbox an earlier daemon (or this one, before a vanish check) left.

        Started if Daytona stopped it. Its processes from before are ended: the sessions whose
        ids the registry kept are killed (SIGKILL, whole session), and the left toolbox
        sessions deleted."""
        left = set(self.registry.load(sandbox.id))
        if _state(sandbox) in _STOPPED_STATES:
            await _once(f"starting sandbox {sandbox.id}", sandbox.start(timeout=self.options.create_timeout))
            self.registry.clear(sandbox.id)  # a stopped sandbox ran nothing
            return sandbox
        if left:
            try:
                await sandbox.process.exec(kill_sessions_command(sorted(left), 9), cwd="/", timeout=30)
                self.orphans_ended += len(left)
                self.registry.clear(sandbox.id)
            except Exception as exc:  # noqa: BLE001 - the sandbox still works; say so
                log.warning("daytona: could not end the processes left in %s: %s", sandbox.id, exc)
        try:
            sessions = await sandbox.process.list_sessions()
            ptys = await sandbox.process.list_pty_sessions()
        except Exception as exc:  # noqa: BLE001 - best effort: the sandbox still works
            log.warning("daytona: could not list the sessions left in %s: %s", sandbox.id, exc)
            return sandbox
        for session in sessions:
            if session.session_id.startswith("executor-"):
                self.background(sandbox.process.delete_session(session.session_id))
        for pty in ptys:
            if pty.id.startswith("executor-"):
                self.background(sandbox.process.kill_pty_session(pty.id))
        return sandbox

    async def _create(self, labels: dict[str, str]) -> Any:
        daytona = _sdk()
        o = self.options
        common: dict[str, Any] = dict(
            labels=dict(labels), auto_stop_interval=o.auto_stop_interval, auto_delete_interval=o.auto_delete_interval,
            network_block_all=o.network_block_all or None,
            network_allow_list=",".join(o.network_allow_list) or None)
        if o.image:
            resources = daytona.Resources(cpu=o.cpu, memory=o.memory, disk=o.disk) if (o.cpu or o.memory or o.disk) else None
            params = daytona.CreateSandboxFromImageParams(image=o.image, resources=resources, **common)
        else:
            params = daytona.CreateSandboxFromSnapshotParams(snapshot=o.snapshot, **common)
        client = self._client_or_raise()
        # Not retried: a create that timed out may still have happened (the next use finds it by label).
        return await _once("creating a sandbox", client.create(params, timeout=o.create_timeout),
                           key_hint=self._key_hint)

    async def check_alive(self, key: str) -> None:
        """Called after a failed call: LOST if the sandbox vanished (forgotten, so the next use
        recreates it); started again if Daytona stopped it; otherwise nothing to add."""
        remote = self._remotes.get(key)
        if remote is None:
            return
        sandbox = remote.sandbox
        try:
            await _retrying("checking the sandbox", sandbox.refresh_data, timeout=self.options.request_timeout)
        except BackendError as err:
            if err.kind is not ErrorKind.NOT_FOUND:
                return
            self._remotes.pop(key, None)
            self._notify(key, f"daytona sandbox {sandbox.id} had vanished (deleted or reaped); a new one was "
                              "created: files and shell state from before are gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} vanished (deleted or reaped); "
                               "a new one is created on the next command", ErrorKind.LOST) from err
        if _state(sandbox) in _GONE_STATES:
            self._remotes.pop(key, None)
            self._notify(key, f"daytona sandbox {sandbox.id} was {_state(sandbox)}; a new one was created: "
                              "files and shell state from before are gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} is {_state(sandbox)}; "
                               "a new one is created on the next command", ErrorKind.LOST)
        if _state(sandbox) in _STOPPED_STATES:
            await self._adopt(sandbox)
            self._notify(key, f"daytona sandbox {sandbox.id} had been stopped (idle) and was started again: "
                              "files kept, running processes gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} had been stopped (idle); it was started again, "
                               "its processes are gone", ErrorKind.LOST)

    async def release(self, key: str, sb: DaytonaSandbox, remove_files: bool) -> None:
        remote = self._remotes.get(key)
        if key == "daemon" or self.options.on_close != "delete":
            if remove_files and remote is not None:
                await sb.run(f"rm -rf -- {shlex.quote(sb.root)}", f"removing {sb.root}")
                remote.roots.discard(sb.root)
        if key != "daemon":
            remote = self._remotes.pop(key, None)
            if remote is not None:
                await self._dispose(remote)

    async def _dispose(self, remote: _Remote) -> None:
        sandbox = remote.sandbox
        if self.options.on_close == "delete":
            try:
                await _retrying(f"deleting sandbox {sandbox.id}", lambda: sandbox.delete(),
                                timeout=self.options.create_timeout)
            except BackendError as err:
                if err.kind is not ErrorKind.NOT_FOUND:
                    raise
        elif self.options.on_close == "stop":
            await _once(f"stopping sandbox {sandbox.id}", sandbox.stop(timeout=self.options.create_timeout))


def _state(sandbox: Any) -> str:
    state = getattr(sandbox, "state", None)
    return str(getattr(state, "value", state) or "")

"""A process in a Daytona sandbox: a toolbox session running the launcher, or a toolbox PTY."""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Awaitable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..base import BackendError, ByteQueue, ErrorKind, Process, PtySize
from .api import _translate, _retrying
from .launcher import LogDecoder, encode_input

if TYPE_CHECKING:
    from .backend import DaytonaSandbox


class DaytonaProcess(Process):
    """A process in a Daytona sandbox: one toolbox session running the launcher."""

    stdout: ByteQueue
    stderr: ByteQueue

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

    stdout: ByteQueue
    stderr: None

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

    def on_data(self, data: bytes) -> Awaitable[None] | None:
        """The SDK's data callback. Bounded: it awaits what this returns, so while the reader is
        behind (``stdout`` full) the terminal's websocket is not read."""
        if self._ready.is_set():
            self.stdout.feed(data)
            return self.stdout.room() if self.stdout.full else None
        self._before += data
        at = self._before.find(self._marker)
        if at < 0:
            return None
        rest = self._before[at + len(self._marker):]
        nl = rest.find(b"\n")
        if nl < 0:
            return None
        self._pid = int(rest[:nl].strip())
        self._sandbox.remember(self._pid)
        self._before.clear()
        self._ready.set()
        if tail := bytes(rest[nl + 1:]):
            self.stdout.feed(tail)
            return self.stdout.room() if self.stdout.full else None
        return None

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
        code: int | None = result.exit_code
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

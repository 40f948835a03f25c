"""A remote process on its own channel, bridged to asyncio without a thread hop."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import paramiko

from ..base import BackendError, ByteQueue, ErrorKind, Process, PtySize
from .connection import _Connection
from .options import HANDSHAKE, HANDSHAKE_LIMIT, HIGH_WATER, LOW_WATER, TURN_BUDGET

if TYPE_CHECKING:
    from .backend import SSHBackend

log = logging.getLogger(__name__.rpartition('.')[0])

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Channels bridged to asyncio
# ---------------------------------------------------------------------------


class _ChannelProcess(Process):
    """A remote process on its own channel; see the package docstring (executor.backends.ssh) for the bridging."""

    stdout: ByteQueue
    stderr: ByteQueue | None

    def __init__(self, backend: "SSHBackend", conn: _Connection, chan: paramiko.Channel, *,
                 pty: bool, handshake: bool) -> None:
        self._backend = backend
        self._conn = conn
        self._chan = chan
        self._send_lock: threading.RLock = chan.executor_send_lock
        self._pty = pty
        self._loop = asyncio.get_running_loop()
        self.pid = 0
        self._forgot = False
        # Bounded by HIGH_WATER: _pump stops draining the channel there; a read resumes it.
        self.stdout = ByteQueue(HIGH_WATER, on_read=self.resume)
        self.stderr = None if pty else ByteQueue(HIGH_WATER, on_read=self.resume)
        self._handshake: asyncio.Future[None] | None = self._loop.create_future() if handshake else None
        self._head = bytearray()  # output before the handshake line
        self._fd = chan.fileno()
        chan.settimeout(0.0)  # recv/send never block the loop
        self._watching = False
        self._done = False
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._slot = True  # counts in conn.open_channels until the channel is done
        self._status: asyncio.Future[None] = self._loop.create_future()
        self._aborted = False  # we closed the channel ourselves
        self._awaiting_status = False  # EOF seen: the streams end when the exit status (or a loss) does
        chan.executor_wake = self._wake_from_thread
        transport = conn.transport
        with transport.executor_wakes_lock:
            transport.executor_wakes[id(self)] = self._wake_from_thread
        self._watch()
        self._pump()

    # -- the reader --------------------------------------------------------

    def _watch(self) -> None:
        if not self._watching and not self._done:
            self._watching = True
            self._loop.add_reader(self._fd, self._pump)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def resume(self) -> None:
        """A reader caught up: drain again if we had paused for it."""
        if not self._watching and not self._done and self._below(LOW_WATER):
            self._watch()
            self._pump()

    def _below(self, mark: int) -> bool:
        return len(self.stdout) < mark and (self.stderr is None or len(self.stderr) < mark)

    def _pump(self) -> None:
        """Drain what paramiko buffered, at most TURN_BUDGET per stream per call so that a
        fast producer cannot stall the loop (the pipe stays readable: we are called again)."""
        chan = self._chan
        more = False
        try:
            budget = TURN_BUDGET
            while len(self.stdout) < HIGH_WATER and chan.recv_ready():
                if budget <= 0:
                    more = True
                    break
                data = self._locked(chan.recv, 1 << 16)  # recv may send a window adjust
                budget -= len(data)
                self._on_stdout(data)
            budget = TURN_BUDGET
            while (self.stderr is None or len(self.stderr) < HIGH_WATER) and chan.recv_stderr_ready():
                if budget <= 0:
                    more = True
                    break
                data = self._locked(chan.recv_stderr, 1 << 16)
                budget -= len(data)
                if self.stderr is not None:  # a pty has no stderr: drop what a server sends anyway
                    self.stderr.feed(data)
        except socket.timeout:
            return
        if more:
            return
        if chan.recv_ready() or chan.recv_stderr_ready():
            self._unwatch()  # above the high-water mark: paused until a reader catches up (resume)
            return
        if chan.eof_received or chan.closed:
            self._unwatch()  # paramiko's pipe stays readable from now on
            self._settle()

    def _settle(self) -> None:
        """All output is in. The streams end once it is known how the channel ended: the exit
        status arrived (or the channel is closed) -> clean EOF; the connection was lost first ->
        LOST. Until then an EOF is held back (sshd sends the EOF and the exit status a moment
        apart; a connection dying in between must not look like a normal end)."""
        if self._done:
            return
        chan = self._chan
        if chan.closed or getattr(chan, "executor_exited", False):
            self._finish()
        else:
            self._awaiting_status = True  # woken by exit-status/-signal, CLOSE or the transport's end

    def _on_stdout(self, data: bytes) -> None:
        if self._handshake is None or self._handshake.done():
            self.stdout.feed(data)
            return
        self._head += data
        start = self._head.find(HANDSHAKE)
        end = self._head.find(b"\n", start) if start >= 0 else -1
        if end < 0:
            if len(self._head) > HANDSHAKE_LIMIT:
                self._handshake.set_exception(BackendError(
                    "the remote login shell printed too much before the command started (check its rc files)",
                    ErrorKind.FAILED_PRECONDITION))
            return
        line = bytes(self._head[start + len(HANDSHAKE):end]).rstrip(b"\r").decode(errors="replace")
        rest = bytes(self._head[end + 1:])
        if start:
            log.debug("ssh: dropped %d bytes of login-shell output before the command", start)
        self._head.clear()
        status, _, value = line.partition(":")
        if status == "ok" and value.isdigit():
            self.pid = int(value)
            self._handshake.set_result(None)
            if rest:
                self.stdout.feed(rest)
        else:
            self._handshake.set_exception(BackendError(f"the remote wrapper reported {line!r}",
                                                       ErrorKind.FAILED_PRECONDITION))

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a paramiko method that may send on this channel, under its send lock (see
        _serialized). Held for microseconds; it can stall paramiko's thread only if that
        send itself waits for a key re-exchange to finish (paramiko gives up after 30 s)."""
        with self._send_lock:
            return fn(*args)

    def _wake_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._on_status)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _on_status(self) -> None:
        if not self._status.done():
            self._status.set_result(None)
        if self._awaiting_status:
            self._settle()

    def _channel_lost(self) -> bool:
        """The channel was closed under us by the connection dying (not by the server's CLOSE,
        not by us)."""
        chan = self._chan
        return chan.closed and not getattr(chan, "executor_server_closed", False) and not self._aborted

    def _lost_error(self, what: str = "the command") -> BackendError:
        self._conn.lost = True  # do not wait for paramiko to mark the transport inactive
        return self._conn.lost_error(what)

    def _release_slot(self) -> None:
        if self._slot:
            self._slot = False
            self._conn.open_channels -= 1
            with self._conn.transport.executor_wakes_lock:
                self._conn.transport.executor_wakes.pop(id(self), None)
            self._backend._room_changed()

    def _finish(self) -> None:
        """EOF or close: end both streams, as EOF or as LOST."""
        self._unwatch()
        self._done = True
        self._awaiting_status = False
        self._release_slot()
        chan = self._chan
        exited = getattr(chan, "executor_exited", False)
        error: BackendError | None = None
        if self._channel_lost():
            if not (exited and chan.eof_received):  # else the process ended and all its output is in
                error = self._lost_error()
        elif chan.closed and not exited:
            error = BackendError(f"the ssh server {self._conn.label} closed the channel without reporting how "
                                 "the command ended (no exit status)", ErrorKind.LOST)
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(error or BackendError(
                "the remote shell ended before starting the command", ErrorKind.FAILED_PRECONDITION))
        self.stdout.feed_eof(error)
        if self.stderr is not None:
            self.stderr.feed_eof(error)
        if not self._finished.done():
            self._finished.set_result(None)
        if chan.closed:
            self._on_status()

    async def started(self, timeout: float) -> None:
        """Wait for the wrapper's handshake line (pid known, cwd entered)."""
        assert self._handshake is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._handshake), timeout)
        except TimeoutError as exc:
            raise BackendError(f"the remote command did not start within {timeout}s", ErrorKind.UNAVAILABLE) from exc

    # -- Process API -------------------------------------------------------

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        delay = 0.0002
        sent = 0
        while view:
            chan = self._chan
            if chan.closed or chan.eof_sent:
                if self._channel_lost():
                    raise self._lost_error("a write")
                raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
            try:
                n = self._locked(chan.send, view[:1 << 15])
            except socket.timeout:
                # The remote window is full: the program is not reading. Poll until the
                # window opens (paramiko offers no wakeup we could wait on).
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
                continue
            except (OSError, EOFError, paramiko.SSHException) as exc:
                if self._channel_lost() or not self._conn.alive():
                    raise self._lost_error("a write") from exc
                raise BackendError("stdin is closed: the process has ended", ErrorKind.FAILED_PRECONDITION) from exc
            view = view[n:]
            delay = 0.0002
            sent += n
            if sent >= TURN_BUDGET and view:
                sent = 0
                await asyncio.sleep(0)  # let the rest of the daemon run during a bulk write

    async def close_stdin(self) -> None:
        if not self._pty and not self._chan.closed:
            try:
                self._locked(self._chan.shutdown_write)
            except (OSError, EOFError, paramiko.SSHException):
                pass

    async def resize(self, size: PtySize) -> None:
        if not self._pty:
            raise BackendError("this process has no terminal to resize", ErrorKind.FAILED_PRECONDITION)
        try:
            self._locked(self._chan.resize_pty, size.cols, size.rows)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if self._channel_lost() or not self._conn.alive():
                raise self._lost_error("a resize") from exc
            raise BackendError("the terminal is closed: the process has ended", ErrorKind.FAILED_PRECONDITION) from exc

    async def wait(self) -> int:
        """The exit status: woken by paramiko's thread when exit-status/exit-signal arrives,
        or by the pump when the channel closes; a once-a-second check covers a close that
        nothing reported (a connection dying after the output ended)."""
        chan = self._chan
        while not chan.exit_status_ready():  # set by exit-status, exit-signal or close
            try:
                await asyncio.wait_for(asyncio.shield(self._status), 1.0)
            except TimeoutError:
                pass
        if not getattr(chan, "executor_exited", False):
            if self._channel_lost():
                raise self._lost_error()
            raise BackendError(f"the ssh channel on {self._conn.label} closed without an exit status",
                               ErrorKind.LOST)
        if self.pid and not self._forgot:
            self._forgot = True
            self._backend._forget(f"{self._conn.registry}/{self.pid}")
        status: int = chan.exit_status
        return status

    async def detach(self) -> None:
        self.abort()

    def abort(self) -> None:
        self._aborted = True
        self._unwatch()
        self._done = True
        self._awaiting_status = False
        self._release_slot()
        self._locked(self._chan.close)

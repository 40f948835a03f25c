"""Plumbing shared by backends that run processes on the daemon's host (local, and singularity,
whose `apptainer exec` runs here): output pipes read straight from the event loop, and a
non-blocking pty master reader."""

from __future__ import annotations

import asyncio
import collections
import errno
import fcntl
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence

from .base import BackendError, ByteQueue, ErrorKind

F_SETPIPE_SZ = 1031
READ_SIZE = 1 << 18
PIPE_SIZE = 1 << 20


class PipeReader:
    """The daemon's end of a child's stdout or stderr pipe, read by the event loop as data arrives.

    Two ways to consume it: ``await read()`` (a chunk, b"" at EOF), or ``subscribe(on_data, on_eof)``,
    which hands each chunk to ``on_data`` from the loop's readiness callback, with no task in
    between (the shell uses it: its end markers then reach the waiting command one loop turn
    after bash writes them). Backpressure either way: past ``limit`` unread bytes, or while a
    subscriber has called ``pause()``, the pipe is not read, so the writer blocks on a full pipe.
    ``detach()`` drops the consumer and keeps draining (and discarding) until EOF, so a background
    process that inherited the pipe never blocks on it; the fd is closed at EOF."""

    def __init__(self, fd: int, limit: int = 1 << 20) -> None:
        os.set_blocking(fd, False)
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._error: BaseException | None = None
        self._eof = False
        self._waiter: asyncio.Future | None = None
        self._on_data: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[BaseException | None], None] | None = None
        self._paused = False  # by the subscriber
        self._discard = False
        self._reading = False
        self._watch()

    # -- the loop side
    def _watch(self) -> None:
        want = not self._eof and not self._paused and (self._discard or self._on_data is not None
                                                        or self._size < self._limit)
        if want and not self._reading:
            self._loop.add_reader(self._fd, self._readable)
            self._reading = True
        elif not want and self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._finish(BackendError(f"reading the process's output failed: {exc}", ErrorKind.LOST))
            return
        if not data:
            self._finish(None)
        elif self._discard:
            pass
        elif self._on_data is not None:
            self._on_data(data)
        else:
            self._chunks.append(data)
            self._size += len(data)
            self._wake()
            if self._size >= self._limit:
                self._watch()

    def _finish(self, error: BaseException | None) -> None:
        self._eof = True
        self._error = error
        self._watch()
        os.close(self._fd)
        self._fd = -1
        self._wake()
        if self._on_eof is not None and not self._discard:
            on_eof, self._on_data, self._on_eof = self._on_eof, None, None
            on_eof(error)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- pull
    async def read(self) -> bytes:
        while not self._chunks:
            if self._eof:
                if self._error is not None:
                    raise self._error
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._chunks.popleft()
        if self._chunks and len(data) < READ_SIZE:
            parts, size = [data], len(data)
            while self._chunks and size < READ_SIZE:
                parts.append(self._chunks.popleft())
                size += len(parts[-1])
            data = b"".join(parts)
        self._size -= len(data)
        self._watch()
        return data

    # -- push
    def subscribe(self, on_data: Callable[[bytes], None], on_eof: Callable[[BaseException | None], None]) -> None:
        """Deliver what is buffered now, then every chunk as it is read; ``on_eof(None or error)`` last."""
        while self._chunks:
            data = self._chunks.popleft()
            self._size -= len(data)
            on_data(data)
        if self._eof:
            on_eof(self._error)
            return
        self._on_data, self._on_eof = on_data, on_eof
        self._watch()

    def pause(self) -> None:
        self._paused = True
        self._watch()

    def resume(self) -> None:
        self._paused = False
        self._watch()

    def detach(self) -> None:
        """No consumer any more: drain and discard until EOF (then the fd is closed)."""
        self._on_data = self._on_eof = None
        self._chunks.clear()
        self._size = 0
        self._discard = True
        self._paused = False
        self._watch()


async def spawn_piped(argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str],
                      **kwargs) -> tuple[asyncio.subprocess.Process, PipeReader, PipeReader]:
    """Start argv with a stdin pipe (asyncio's) and stdout/stderr pipes read by PipeReaders.

    The output pipes are 1 MiB (a streaming command moves in fewer, larger reads) where the
    system allows it. Raises OSError as subprocess does."""
    fds: list[int] = []
    try:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        fds += [out_r, out_w]
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        fds += [err_r, err_w]
        for fd in (out_r, err_r):
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass  # over pipe-max-size for an unprivileged user: keep the default
        proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
                                                    stdout=out_w, stderr=err_w, **kwargs)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    return proc, PipeReader(out_r), PipeReader(err_r)


class PtyReader:
    """Reads a pty master without blocking the loop; EIO (the slave side closed) is EOF."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._q = ByteQueue()
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)
        self._open = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return
            data = b""
        if data:
            self._q.feed(data)
        else:
            self.stop()

    def stop(self) -> None:
        """Stop reading (at EOF, or when the process is detached); readers then see EOF."""
        if self._open:
            self._open = False
            self._loop.remove_reader(self._fd)
        self._q.feed_eof()

    async def read(self) -> bytes:
        return await self._q.read()

"""Plumbing shared by backends that run processes on the daemon's host (local, and singularity,
whose `apptainer exec` runs here): chunked pipe reads and a non-blocking pty master reader."""

from __future__ import annotations

import asyncio
import errno
import os

from .base import ByteQueue


class ChunkReader:
    """asyncio.StreamReader.read() with no size reads to EOF; the interface wants chunks."""

    __slots__ = ("_reader",)

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    async def read(self) -> bytes:
        return await self._reader.read(1 << 18)


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

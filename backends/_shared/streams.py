"""The output streams of a ``Process``: two typed shapes, one bounded implementation to feed.

Every ``Process.stdout``/``stderr`` is a ``ByteStream`` (``await read()``: a chunk, b"" at EOF, a
``BackendError(LOST)`` when the transport died). A stream that can hand chunks over as they are
read, with no task in between, is also a ``PushStream`` (``subscribe``/``pause``/``resume``/``detach``:
``_host.PipeReader`` for host pipes); the shell layer uses that shape when it is there.

``ByteQueue`` is what a backend whose SDK, socket or channel delivers output (by callback, frame or
websocket message) exposes as a ``ByteStream``. It is bounded: past ``limit`` unread bytes it is
``full``; a producer that can wait ``await room()`` before taking more from its source, one fed by
callbacks stops reading its source and is told by ``on_read`` when the reader took data (the docker
exec socket, whose two streams share one high/low water mark), one whose remote end sends only
within a window hears of each read from a subclass (the spawner's channels).

The end of a stream: ``feed_eof()`` (or ``feed_error(exc)``) once; what was fed before is still read,
then every ``read()`` returns b"" (or raises ``exc``); data fed after the end is dropped.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Protocol, runtime_checkable

#: Unread bytes a stream keeps before its producer is held back (as a host pipe reader does).
STREAM_LIMIT = 1 << 20
#: Largest chunk one ``read()`` returns when several are waiting.
READ_SIZE = 1 << 18


@runtime_checkable
class ByteStream(Protocol):
    """Pull: ``await read()`` returns the next chunk, b"" at EOF; raises BackendError(LOST)."""

    async def read(self) -> bytes: ...


@runtime_checkable
class PushStream(ByteStream, Protocol):
    """Pull, or push: ``subscribe(on_data, on_eof)`` delivers what is buffered, then each chunk as it
    is read (``on_eof(None or the error)`` last); ``pause()``/``resume()`` hold the source back;
    ``detach()`` drops the consumer and discards what still comes."""

    def subscribe(self, on_data: Callable[[bytes], None],
                  on_eof: Callable[[BaseException | None], None]) -> None: ...

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    def detach(self) -> None: ...


def take(chunks: collections.deque[bytes], read_size: int = READ_SIZE) -> bytes:
    """The first of the waiting chunks, joined with the next ones while under ``read_size`` (fewer,
    larger reads for the consumer); ``chunks`` must not be empty."""
    data = chunks.popleft()
    if chunks and len(data) < read_size:
        parts, size = [data], len(data)
        while chunks and size < read_size:
            parts.append(chunks.popleft())
            size += len(parts[-1])
        data = b"".join(parts)
    return data


class ChunkBuffer:
    """What a buffered stream's reader side is, whatever feeds it (``ByteQueue``, ``_host.PipeReader``):
    chunks waiting, then the end (EOF, or the error the reader gets), and the readers' wait (one
    reader is the rule; a second one waiting at the same time is woken too, never left hanging)."""

    def __init__(self, read_size: int = READ_SIZE) -> None:
        self._chunks: collections.deque[bytes] = collections.deque()
        self._size = 0
        self._read_size = read_size
        self._eof = False
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: list[asyncio.Future[None]] = []  # the readers, waiting for data

    async def _next(self) -> bytes:
        """The next data (joined up to ``read_size``), b"" at the end; raises the end's error."""
        while not self._chunks:
            if self._eof:
                if self._error is not None:
                    raise self._error
                return b""
            waiter = self._new_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._waiters:  # (cancelled: not woken)
                    self._waiters.remove(waiter)
        data = take(self._chunks, self._read_size)
        self._size -= len(data)
        return data

    def _new_future(self) -> asyncio.Future[None]:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
        return self._loop.create_future()

    def _wake_reader(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)


class ByteQueue(ChunkBuffer):
    """A ``ByteStream`` fed by a producer (``feed``, ``feed_eof``, ``feed_error``), bounded by ``limit``.

    ``feed`` never drops data: the bound is kept by the producer, which waits for ``room()`` (or,
    fed by callbacks, stops its source while ``full`` and resumes it from ``on_read``)."""

    def __init__(self, limit: int = STREAM_LIMIT, on_read: Callable[[], None] | None = None,
                 read_size: int = READ_SIZE) -> None:
        super().__init__(read_size)
        self.limit = limit
        self._on_read = on_read
        self._room: asyncio.Future[None] | None = None  # the producer, waiting for room

    def __len__(self) -> int:
        return self._size

    @property
    def full(self) -> bool:
        return self._size >= self.limit

    @property
    def at_eof(self) -> bool:
        return self._eof

    def peek(self) -> bytes:
        """What is buffered now, left for the reader (e.g. for an error message about a failed start)."""
        return b"".join(self._chunks)

    # -- the producer
    def feed(self, data: bytes) -> None:
        if data and not self._eof:
            self._chunks.append(bytes(data))
            self._size += len(data)
            self._wake_reader()

    def feed_eof(self, error: BaseException | None = None) -> None:
        self.feed_error(error)

    def feed_error(self, exc: BaseException | None) -> None:
        """The end of the stream: the reader gets the buffered data, then ``exc`` raised (or EOF)."""
        if not self._eof:
            self._eof = True
            self._error = exc
            self._wake_reader()
            self._wake_producer()

    async def room(self) -> None:
        """Wait until the reader brought the buffer below ``limit`` (at once when it is, or at EOF)."""
        while self.full and not self._eof:
            self._room = self._new_future()
            try:
                await self._room
            finally:
                self._room = None

    # -- the reader
    async def read(self) -> bytes:
        data = await self._next()
        if data:  # (at the end there is nothing to make room for)
            if not self.full:
                self._wake_producer()
            if self._on_read is not None:
                self._on_read()
        return data

    # -- internals
    def _wake_producer(self) -> None:
        if self._room is not None and not self._room.done():
            self._room.set_result(None)


__all__ = ["ByteStream", "PushStream", "ChunkBuffer", "ByteQueue", "STREAM_LIMIT", "READ_SIZE", "take"]

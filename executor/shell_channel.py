"""The channel between a persistent shell's stream readers and the command that consumes its
output (``executor.shell``): backpressure for data, no waiting for control items."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Literal

from executor.shell_protocol import Done


class Interrupt(Exception):
    """Raised into a running command to stop it: timeout, cancel or task close."""

    def __init__(self, status: str, message: str = "") -> None:
        super().__init__(message or status)
        self.status = status
        self.message = message


#: A chunk of the command's output, by stream.
OutputItem = tuple[Literal["stdout", "stderr"], bytes]
#: What the channel carries: output; ("marker", b"") when a stream's end marker arrived; ("eof", error)
#: when a stream ended (error: the transport failed); ("interrupt", why) to stop the command.
ChannelItem = (OutputItem | tuple[Literal["marker"], bytes] | tuple[Literal["eof"], BaseException | None]
               | tuple[Literal["interrupt"], Interrupt])


class Channel:
    """Output of the running command, from the stream readers to its consumer.

    Data waits for space (backpressure reaches the command through the pipe): a task producer
    awaits ``put_data``; a callback producer uses ``put_now`` and, when told the channel is full,
    pauses its stream until ``when_space`` calls back. Control items (markers, EOF, interrupts)
    never wait. Closing releases a blocked producer."""

    def __init__(self, limit: int = 64) -> None:
        self.items: collections.deque[ChannelItem] = collections.deque()
        self.limit = limit
        self.closed = False
        self._reader: asyncio.Future[bool] | None = None  # the consumer, waiting for an item
        self._on_space: list[Callable[[], object]] = []  # producers waiting for room, called once there is

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(True)

    async def put_data(self, item: OutputItem) -> None:
        while len(self.items) >= self.limit and not self.closed:
            room: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def release(room: asyncio.Future[None] = room) -> None:
                if not room.done():
                    room.set_result(None)

            self.when_space(release)
            await room
        if not self.closed:
            self.items.append(item)
            self._wake()

    def put_now(self, item: OutputItem) -> bool:
        """Queue data without waiting; False when the channel is now full (pause, then ``when_space``)."""
        if self.closed:
            return True
        self.items.append(item)
        self._wake()
        return len(self.items) < self.limit

    def when_space(self, callback: Callable[[], object]) -> None:
        """Call ``callback`` once, when the channel has room again or is closed."""
        if self.closed or len(self.items) < self.limit:
            callback()
        else:
            self._on_space.append(callback)

    def _space(self) -> None:
        if self._on_space:
            callbacks, self._on_space = self._on_space, []
            for callback in callbacks:
                callback()

    def put_control(self, item: ChannelItem) -> None:
        self.items.append(item)
        self._wake()

    async def get(self, timeout: float | None) -> ChannelItem | None:
        """The next item; None when the timeout passes first. (A future and a timer: this runs
        for every command, and asyncio.wait_for would start a task per wait.)"""
        while not self.items:
            if timeout is not None and timeout <= 0:
                return None
            loop = asyncio.get_running_loop()
            self._reader = loop.create_future()
            timer = loop.call_later(timeout, self._wake) if timeout is not None else None
            try:
                await self._reader
            finally:
                self._reader = None
                if timer is not None:
                    timer.cancel()
            if not self.items and timeout is not None:
                return None  # the timer fired first
        item = self.items.popleft()
        if item[0] in ("stdout", "stderr"):
            item = self._coalesce(item)
        if len(self.items) < self.limit:
            self._space()
        return item

    def _coalesce(self, item: OutputItem) -> OutputItem:
        """``item`` joined with what is already queued for the same stream: fewer, larger messages."""
        stream, first = item
        data: bytes | bytearray = first
        while self.items and len(data) < (1 << 20):
            head = self.items[0]
            if head[0] != stream or not (head[0] == "stdout" or head[0] == "stderr"):
                break
            if not isinstance(data, bytearray):
                data = bytearray(data)
            data += head[1]
            self.items.popleft()
        return (stream, bytes(data)) if isinstance(data, bytearray) else item

    def close(self) -> None:
        self.closed = True
        self.items.clear()
        self._space()


class Running:
    """Bookkeeping for the command in flight on a persistent shell."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.channel = Channel()
        self.done: Done | None = None
        self.stderr_done = False

    def stream_done(self, name: str) -> bool:
        return self.done is not None if name == "stdout" else self.stderr_done

"""The channel between a persistent shell's stream readers and the command that consumes its
output (``executor.shell``): backpressure for data, no waiting for control items."""

from __future__ import annotations

import asyncio
import collections

from executor.shell_protocol import Done


class Channel:
    """Output of the running command, from the stream readers to its consumer.

    Data waits for space (backpressure reaches the command through the pipe): a task producer
    awaits ``put_data``; a callback producer uses ``put_now`` and, when told the channel is full,
    pauses its stream until ``when_space`` calls back. Control items (markers, EOF, interrupts)
    never wait. Closing releases a blocked producer."""

    def __init__(self, limit: int = 64) -> None:
        self.items: collections.deque = collections.deque()
        self.limit = limit
        self.closed = False
        self._reader: asyncio.Future | None = None  # the consumer, waiting for an item
        self._on_space: list = []  # producers waiting for room, called once there is

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(True)

    async def put_data(self, item) -> None:
        while len(self.items) >= self.limit and not self.closed:
            room = asyncio.get_running_loop().create_future()
            self.when_space(lambda: room.done() or room.set_result(None))
            await room
        if not self.closed:
            self.items.append(item)
            self._wake()

    def put_now(self, item) -> bool:
        """Queue data without waiting; False when the channel is now full (pause, then ``when_space``)."""
        if self.closed:
            return True
        self.items.append(item)
        self._wake()
        return len(self.items) < self.limit

    def when_space(self, callback) -> None:
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

    def put_control(self, item) -> None:
        self.items.append(item)
        self._wake()

    async def get(self, timeout: float | None):
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
            # Coalesce what is already queued for the same stream: fewer, larger messages.
            data = item[1]
            while self.items and self.items[0][0] == item[0] and len(data) < (1 << 20):
                if not isinstance(data, bytearray):
                    data = bytearray(data)
                data += self.items.popleft()[1]
            item = (item[0], bytes(data)) if isinstance(data, bytearray) else item
        if len(self.items) < self.limit:
            self._space()
        return item

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

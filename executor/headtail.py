"""The first and the last bytes of a stream and its exact size, within a bound.

Used by the core (Run's buffered output) and by the client-side terminal tool; it imports nothing
of either."""

from __future__ import annotations


class HeadTail:
    """Keeps the first ``limit // 2`` bytes and the last ``limit - limit // 2`` bytes of a stream."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit // 2 - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            del self.tail[: max(0, len(self.tail) - (self.limit - self.limit // 2))]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def value(self) -> bytes:
        return bytes(self.head + self.tail)

    def text(self) -> str:
        """Both ends as text, with a line saying how many bytes were cut between them."""
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        cut = self.total - len(self.head) - len(self.tail)
        if cut <= 0:
            return head + tail
        return f"{head}\n[… output cut: {cut} of {self.total} bytes omitted …]\n{tail}"

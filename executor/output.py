"""One output pipeline: every byte a command prints passes here on its way to a client.

Exec's stream, Run's bounded result (built from that stream), a background process's output
(redacted *before* it is stored, so reads, streams and spill files all hold the same bytes) and
a terminal's output (the Pty stream and Exec with ``pty: true``) each get an
:class:`OutputPipeline`: the daemon's secrets are masked across chunk boundaries and the bytes
that leave are counted exactly (the counts reported in Exit and ProcessInfo are of what the
client got). Redaction is a courtesy, not a control: a secret that was transformed (encoded,
split, reversed) is not recognised (docs/security.md).
"""

from __future__ import annotations

from executor.redact import Redactor, StreamRedactor

__all__ = ["OutputPipeline"]


class OutputPipeline:
    """Redaction and byte counts for the streams of one command."""

    __slots__ = ("_scrub", "counts")

    def __init__(self, redactor: Redactor, streams: tuple[str, ...] = ("stdout", "stderr")) -> None:
        self._scrub: dict[str, StreamRedactor] | None = (
            {name: redactor.stream() for name in streams} if redactor else None)
        self.counts = dict.fromkeys(streams, 0)

    def feed(self, stream: str, data: bytes) -> bytes:
        """The bytes of ``data`` that may leave now (a possible start of a secret is held back)."""
        if self._scrub is not None:
            data = self._scrub[stream].feed(data)
        self.counts[stream] += len(data)
        return data

    def flush(self) -> list[tuple[str, bytes]]:
        """What is still held back, per stream, once the command has ended."""
        if self._scrub is None:
            return []
        out = []
        for name, scrub in self._scrub.items():
            tail = scrub.flush()
            if tail:
                self.counts[name] += len(tail)
                out.append((name, tail))
        return out

"""Secrets stay out of command output.

The daemon knows secrets of its own: auth tokens, and backend credentials (pydantic
``SecretStr`` options, and the values of environment variables named by ``*_env``
options). Commands cannot read them from their environment (it is never inherited), but
a command could still print one it found elsewhere (a mounted file, a cloud metadata
service): every occurrence in streamed output is replaced, across chunk boundaries."""

from __future__ import annotations

import os
from collections.abc import Iterable

from pydantic import BaseModel, SecretStr

MASK = b"[REDACTED]"
MIN_SECRET = 8  # shorter values would mask ordinary output


def options_secrets(options: BaseModel) -> list[str]:
    """Secret values in a backend's options: SecretStr fields and the variables *_env names."""
    found = []
    for name, value in options:
        if isinstance(value, SecretStr):
            found.append(value.get_secret_value())
        elif name.endswith("_env") and isinstance(value, str) and os.environ.get(value):
            found.append(os.environ[value])
    return found


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        values = {s.encode() for s in secrets if s and len(s) >= MIN_SECRET}
        # longest first: a secret that contains another is masked whole
        self.secrets = sorted(values, key=len, reverse=True)
        self.hold = max((len(s) for s in self.secrets), default=1) - 1

    def __bool__(self) -> bool:
        return bool(self.secrets)

    def stream(self, *, same_length: bool = False) -> "StreamRedactor":
        """A redactor for one stream; ``same_length`` masks each secret with as many ``*`` as it has
        bytes, for formats whose structure counts bytes (a tar stream's members keep their sizes)."""
        return StreamRedactor(self, same_length=same_length)

    def text(self, value: str) -> str:
        """``scrub`` for a string (a cwd, a message, a command shown to an approver)."""
        if not self.secrets or not value:
            return value
        return self.scrub(value.encode(errors="surrogateescape")).decode(errors="surrogateescape")

    def scrub(self, data: bytes, *, same_length: bool = False) -> bytes:
        for secret in self.secrets:
            if secret in data:
                data = data.replace(secret, b"*" * len(secret) if same_length else MASK)
        return data


class StreamRedactor:
    """Redacts one output stream. Only a tail that could be the start of a secret is held
    back (so ordinary output is never delayed); it is released with the next chunk."""

    def __init__(self, redactor: Redactor, *, same_length: bool = False) -> None:
        self.r = redactor
        self.same_length = same_length
        self.pending = b""

    def _held(self, data: bytes) -> int:
        """Length of the longest suffix of data that is a proper prefix of some secret."""
        for k in range(min(self.r.hold, len(data)), 0, -1):
            tail = data[-k:]
            if any(secret.startswith(tail) for secret in self.r.secrets):
                return k
        return 0

    def feed(self, data: bytes) -> bytes:
        data = self.r.scrub(self.pending + data, same_length=self.same_length)
        k = self._held(data)
        self.pending = data[len(data) - k:] if k else b""
        return data[: len(data) - k]

    def flush(self) -> bytes:
        data, self.pending = self.r.scrub(self.pending, same_length=self.same_length), b""
        return data

"""Persisted "approve always" rules, and the audit log: the gate's only I/O.

Both live in the daemon's state dir with mode 0600. The approvals file is replaced
atomically (write a temp file, fsync, rename) so a crash never leaves half a file.
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import tempfile
import threading
import time
from typing import Any

APPROVALS_FILE = "approvals.json"
AUDIT_FILE = "audit.jsonl"


def _atomic_write(path: pathlib.Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


class AlwaysStore:
    """Rules approved for good on one backend each, persisted in ``state_dir/approvals.json``.

    An "approve always" holds for the rule *and the backend* it was granted on: approving a
    recursive delete on an isolating backend never opens it on ``local``. The file is written
    before memory changes, so a save that fails (disk full) raises and approves nothing.
    Version 1 files (rules without a backend) are not carried over: their entries would hold on
    every backend, so each asks again once (a warning names them)."""

    VERSION = 2

    def __init__(self, state_dir: pathlib.Path) -> None:
        self.path = pathlib.Path(state_dir) / APPROVALS_FILE
        self._rules: dict[str, dict[str, dict[str, Any]]] = {}  # backend -> rule -> record
        self._cache: dict[str, frozenset[str]] = {}
        self.dropped_v1: list[str] = []
        # A save interrupted by a crash leaves its temp file (the rename never happened): remove them.
        for leftover in self.path.parent.glob(f".{APPROVALS_FILE}.*"):
            leftover.unlink(missing_ok=True)
        self._load()

    def _load(self) -> None:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return
        try:
            doc = json.loads(raw)
            rules = doc["always"]
            if not isinstance(rules, dict):
                raise TypeError("'always' is not an object")
            version = doc.get("version", 1)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{self.path} is corrupt ({e}); fix or delete it (it only holds 'approve always' rules)"
            ) from e
        if version == 1:
            self.dropped_v1 = sorted(str(k) for k in rules)
            return
        self._rules = {
            str(backend): {str(r): dict(v) if isinstance(v, dict) else {} for r, v in per.items()}
            for backend, per in rules.items()
            if isinstance(per, dict)
        }

    def rules_for(self, backend: str) -> frozenset[str]:
        cached = self._cache.get(backend)
        if cached is None:
            cached = self._cache[backend] = frozenset(self._rules.get(backend, ()))
        return cached

    @property
    def rules(self) -> frozenset[str]:
        """Every rule approved on some backend (for display)."""
        return frozenset(r for per in self._rules.values() for r in per)

    def approval_id(self, backend: str, rule: str) -> str:
        return str(self._rules.get(backend, {}).get(rule, {}).get("approval_id", ""))

    def add(self, backend: str, rule: str, *, approval_id: str = "", by: str = "", reason: str = "",
            command: str = "") -> None:
        if rule in self._rules.get(backend, {}):
            return
        record = {"when": time.time(), "by": by, "reason": reason, "command": command, "approval_id": approval_id}
        updated = {b: dict(per) for b, per in self._rules.items()}
        updated.setdefault(backend, {})[rule] = record
        self._save(updated)  # raises OSError (ENOSPC, EROFS): nothing changed
        self._rules = updated
        self._cache.clear()

    def remove(self, backend: str, rule: str) -> None:
        if rule not in self._rules.get(backend, {}):
            return
        updated = {b: {r: v for r, v in per.items() if not (b == backend and r == rule)}
                   for b, per in self._rules.items()}
        self._save(updated)
        self._rules = updated
        self._cache.clear()

    def _save(self, rules: dict[str, dict[str, dict[str, Any]]]) -> None:
        doc = {"version": self.VERSION, "always": rules}
        _atomic_write(self.path, json.dumps(doc, indent=2, sort_keys=True).encode())


_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)


class AuditLog:
    """Append-only JSON lines: when, task, command, rule, decision, who decided.

    Inside an event loop an entry is written at the loop's next turn (one write() for all the
    entries of that turn), so the command it admits is already on its way and the write costs it
    nothing; that is before any of the command's output is relayed. Outside a loop, or with
    ``sync=True`` (what a gated decision uses), it is written at once and a failure raises, so the
    caller can refuse what it could not record. ``flush()`` writes what waits; ``close()`` flushes.

    The file is reopened when it was deleted or rotated away (checked before each write: one
    ``stat``) and on ``reopen()`` (SIGHUP). A write that fails keeps its entries (up to
    ``MAX_WAITING``) for the next attempt and sets ``broken`` to the reason; nothing is dropped
    silently."""

    MAX_WAITING = 100_000

    def __init__(self, state_dir: pathlib.Path) -> None:
        self.path = pathlib.Path(state_dir) / AUDIT_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._fd = -1
        self._ino: tuple[int, int] | None = None
        self._waiting: list[dict[str, Any]] = []
        self._scheduled = False
        self.broken = ""  # why the last write failed; "" while the log is written
        self.dropped = 0
        self._open()

    def _open(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        st = os.fstat(fd)
        old, self._fd, self._ino = self._fd, fd, (st.st_dev, st.st_ino)
        if old >= 0:
            os.close(old)

    def reopen(self) -> None:
        """Open the path again (after logrotate, or SIGHUP)."""
        with self._lock:
            try:
                self._open()
            except OSError as exc:
                self.broken = f"cannot open the audit log {self.path}: {exc.strerror}"

    def record(self, *, sync: bool = False, **fields: Any) -> None:
        entry = {"when": time.time(), **fields}
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._waiting.append(entry)
            if loop is None or sync:
                self._write_waiting(raise_errors=sync)
            elif not self._scheduled:
                self._scheduled = True
                loop.call_soon(self.flush)

    def flush(self) -> None:
        with self._lock:
            self._scheduled = False
            self._write_waiting()

    def _current(self) -> None:
        """Reopen when the file at the path is no longer the one we hold (deleted, rotated)."""
        try:
            st = os.stat(self.path)
            same = (st.st_dev, st.st_ino) == self._ino
        except FileNotFoundError:
            same = False
        if not same:
            self._open()

    def _write_waiting(self, raise_errors: bool = False) -> None:
        if not self._waiting or self._fd < 0:
            return
        data = "".join([_ENCODER.encode(e) + "\n" for e in self._waiting]).encode()
        try:
            self._current()
            written = os.write(self._fd, data)  # one write() per batch: O_APPEND keeps lines whole
            if written != len(data):
                # The disk filled mid-batch: take the part that landed back out (lines stay whole;
                # the whole batch is written again once there is room, never half of it twice).
                os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
                raise OSError(28, "short write (No space left on device?)")
        except OSError as exc:
            self.broken = f"cannot write the audit log {self.path}: {exc.strerror or exc}"
            if len(self._waiting) > self.MAX_WAITING:
                self.dropped += len(self._waiting) - self.MAX_WAITING
                del self._waiting[: len(self._waiting) - self.MAX_WAITING]
            if raise_errors:
                raise
            return
        self._waiting.clear()
        self.broken = ""

    def close(self) -> None:
        self.flush()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

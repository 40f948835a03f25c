"""The sessions a daemon started, kept on its own disk, so the next daemon ends what a crashed one
left running (a shell, a background process): never an orphan that outlives its daemon.

One directory per scope (a sandbox id; the empty scope is the directory itself), one file per
session leader, named by its pid and holding its start time (``/proc/PID/stat`` field 22, "" when
it cannot be known from the daemon's side). The start time tells a leftover from a newer process
that got the same pid. Backends whose registry lives *inside* the sandbox (ssh, modal: the
sandbox may outlive the daemon's disk) use ``kill.CLEANUP_SCRIPT`` instead.

Reads what older versions wrote too: a scope kept as one file of pids, a line each (daytona).
"""

from __future__ import annotations

import re
from pathlib import Path


class SessionRegistry:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def _scope(self, scope: str) -> Path:
        return self.dir / re.sub(r"[^A-Za-z0-9_.-]", "_", scope) if scope else self.dir

    def remember(self, pid: int, start: str = "", scope: str = "") -> None:
        directory = self._scope(scope)
        self._migrate(directory)
        directory.mkdir(parents=True, exist_ok=True)
        entry = directory / str(pid)
        try:
            entry.write_text(start)
        except OSError:  # created but not written (disk full): no half entry left behind
            entry.unlink(missing_ok=True)
            raise

    def forget(self, pid: int, scope: str = "") -> None:
        (self._scope(scope) / str(pid)).unlink(missing_ok=True)

    def load(self, scope: str = "") -> dict[int, str]:
        """The sessions remembered in ``scope``: pid -> start time ("" when unknown)."""
        directory = self._scope(scope)
        if directory.is_file():  # an older version's one-file scope
            return {int(x): "" for x in directory.read_text().split() if x.isdigit()}
        try:
            entries = list(directory.iterdir())
        except (FileNotFoundError, NotADirectoryError):
            return {}
        found = {}
        for entry in entries:
            if entry.name.isdigit():
                try:
                    found[int(entry.name)] = entry.read_text().strip()
                except FileNotFoundError:
                    continue
        return found

    def clear(self, scope: str = "") -> None:
        directory = self._scope(scope)
        if directory.is_file():
            directory.unlink(missing_ok=True)
            return
        for pid in self.load(scope):
            self.forget(pid, scope)
        if scope:
            try:
                directory.rmdir()
            except OSError:
                pass

    def _migrate(self, directory: Path) -> None:
        """An older one-file scope becomes a directory before the first new entry."""
        if directory.is_file():
            pids = self.load_file(directory)
            directory.unlink(missing_ok=True)
            directory.mkdir(parents=True, exist_ok=True)
            for pid in pids:
                (directory / str(pid)).write_text("")

    @staticmethod
    def load_file(path: Path) -> list[int]:
        try:
            return [int(x) for x in path.read_text().split() if x.isdigit()]
        except FileNotFoundError:
            return []


__all__ = ["SessionRegistry"]

"""The daemon's state directory: created private, checked writable, and held by one daemon at a time.

Two daemons on one state directory would each run their backends' crash recovery and end the other's
running commands, and interleave the approvals file and the audit log. The first daemon holds an
exclusive lock (``flock`` on ``daemon.lock``, released by the kernel when it exits, however it exits);
a second one refuses to start and names the holder's pid.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from executor.config import ConfigError

LOCK_FILE = "daemon.lock"

__all__ = ["StateDir", "LOCK_FILE"]


class StateDir:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd = -1

    def acquire(self) -> "StateDir":
        """Create (0700) and lock the directory, or raise ConfigError with one line saying what to do."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            os.chmod(self.path, 0o700)
            fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(self._unusable(exc)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise ConfigError(f"state directory {self.path} is in use by another executor daemon (pid {holder}); "
                              "stop that daemon first, or give this one another --state-dir") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def _unusable(self, exc: OSError) -> str:
        why = {errno.EROFS: "it is on a read-only file system", errno.EACCES: "permission denied",
               errno.EPERM: "permission denied", errno.ENOSPC: "the disk is full"}.get(exc.errno or 0, exc.strerror)
        return (f"state directory {self.path} cannot be used ({why}): give the daemon a writable directory with "
                "--state-dir (or state_dir: in the config), or fix its permissions")

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # the lock goes with the descriptor
            self._fd = -1

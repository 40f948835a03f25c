"""The local backend: processes on the daemon's own host, one directory per task.

No isolation beyond the directory and a clean environment: use it for trusted
work or inside a VM/container of its own. The gate still stands in front of it.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import termios
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path

from ._host import PipeReader, PtyReader, proc_table, signal_tree, spawn_piped
from .base import (
    Backend,
    BackendError,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    KILL_SUBREAPER,
    Resolved,
    Sandbox,
    reaper_argv,
    resolve_with,
)


class LocalOptions(Options):
    #: Where task directories live; default ``<state-dir>/tasks``.
    root: str | None = None


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name: state, ppid, pgrp, session, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` now (tests use it to see a session gone)."""
    return [pid for pid, entry in proc_table().items() if entry.sid == sid]


def kill_session(pid: int, sig: int) -> int:
    """Signal the whole tree that the spawn of ``pid`` started (``_host.signal_tree``: the
    reaper's descendants, ``setsid`` and double forks included); returns how many were signalled."""
    return signal_tree(pid, sig)


class _PipeProcess(Process):
    def __init__(self, proc: asyncio.subprocess.Process, stdout: PipeReader, stderr: PipeReader,
                 registry: "_PidRegistry") -> None:
        self._proc = proc
        self._registry = registry
        self.pid = proc.pid
        self.stdout = stdout
        self.stderr = stderr

    async def write(self, data: bytes) -> None:
        stdin = self._proc.stdin
        if stdin is None or stdin.is_closing():
            raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
        stdin.write(data)
        try:
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION) from exc

    async def close_stdin(self) -> None:
        stdin = self._proc.stdin
        if stdin is not None and not stdin.is_closing():
            stdin.close()

    async def wait(self) -> int:
        code = await self._proc.wait()
        self._registry.forget(self.pid)
        return code

    async def detach(self) -> None:
        self.stdout.detach()
        self.stderr.detach()


class _PtyProcess(Process):
    def __init__(self, proc: subprocess.Popen, master: int, registry: "_PidRegistry") -> None:
        self._proc = proc
        self._master = master
        self._registry = registry
        self.pid = proc.pid
        self.stdout = PtyReader(master)
        self.stderr = None
        self._closed = False

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self._master, view)
            except BlockingIOError:
                await asyncio.sleep(0.005)
                continue
            except OSError as exc:
                raise BackendError("the terminal is closed", ErrorKind.FAILED_PRECONDITION) from exc
            view = view[n:]

    async def close_stdin(self) -> None:
        return None

    async def resize(self, size: PtySize) -> None:
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", size.rows, size.cols, 0, 0))

    async def wait(self) -> int:
        loop = asyncio.get_running_loop()
        while True:
            code = self._proc.poll()
            if code is not None:
                break
            await asyncio.sleep(0.01)
        del loop
        self._registry.forget(self.pid)
        return code

    async def detach(self) -> None:
        if not self._closed:
            self._closed = True
            self.stdout.stop()
            os.close(self._master)


class _PidRegistry:
    """Session leaders this backend started, on disk, so that a restarted daemon
    can end what a crashed one left running (never leaving orphans)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.dir.mkdir(parents=True, exist_ok=True)

    def remember(self, pid: int) -> None:
        fields = _proc_stat(pid)
        start = fields[19] if fields else "0"
        (self.dir / str(pid)).write_text(start)

    def forget(self, pid: int) -> None:
        try:
            (self.dir / str(pid)).unlink()
        except FileNotFoundError:
            pass

    def leftovers(self) -> list[int]:
        alive = []
        for entry in self.dir.iterdir():
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            fields = _proc_stat(pid)
            if fields is not None and fields[19] == entry.read_text().strip() and fields[3] == str(pid):
                alive.append(pid)
            else:
                entry.unlink(missing_ok=True)
        return alive


class LocalSandbox(Sandbox):
    def __init__(self, backend: "LocalBackend", root: Path) -> None:
        self._backend = backend
        self.path = root
        self.root = str(root)

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        pty: PtySize | None = None,
    ) -> Process:
        registry = self._backend.registry
        try:
            if pty is None:
                # The reaper (the daemon's own python) starts argv as a session leader and keeps
                # everything argv starts in its tree, so signal_session reaches a `setsid` too.
                proc, stdout, stderr = await spawn_piped(reaper_argv(argv, python=sys.executable), cwd=cwd,
                                                         env=env, start_new_session=True)
                registry.remember(proc.pid)
                return _PipeProcess(proc, stdout, stderr, registry)
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", pty.rows, pty.cols, 0, 0))
            os.set_blocking(master, False)

            # The reaper makes argv a session leader with the terminal as its controlling tty
            # (setsid + TIOCSCTTY in its own single-threaded child). A Python preexec_fn cannot
            # do this safely: forking a threaded (gRPC) process and running Python in the
            # child crashes it (SIGSEGV/SIGABRT) about half the time.
            try:
                popen = subprocess.Popen(
                    reaper_argv(argv, pty=True, python=sys.executable),
                    start_new_session=True,
                    cwd=cwd,
                    env=dict(env),
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    close_fds=True,
                )
            finally:
                os.close(slave)
            registry.remember(popen.pid)
            return _PtyProcess(popen, master, registry)
        except FileNotFoundError as exc:
            raise BackendError(f"cannot start {argv[0]!r}: {exc.strerror}: {exc.filename}", ErrorKind.NOT_FOUND) from exc
        except OSError as exc:
            kind = ErrorKind.RESOURCE_EXHAUSTED if exc.errno in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE) else ErrorKind.FAILED_PRECONDITION
            raise BackendError(f"cannot start a process: {exc}", kind) from exc

    async def signal_session(self, pid: int, sig: int) -> None:
        kill_session(pid, sig)

    async def release(self, remove_files: bool = False) -> None:
        if remove_files:
            await asyncio.to_thread(shutil.rmtree, self.path, True)

    # paths and archives: in-process, on the host's filesystem -----------------------
    async def resolve_paths(self, paths: Sequence[str]) -> list[Resolved]:
        if len(paths) <= 16:
            return [resolve_with(p, _readlink) for p in paths]
        return await asyncio.to_thread(lambda: [resolve_with(p, _readlink) for p in paths])

    async def put_archive(self, path: str, data: AsyncIterator[bytes]) -> None:
        """Unpack in-process with the stdlib's ``data`` extraction filter, which resolves every
        member (and every link's target) with ``realpath`` on disk just before writing it: a
        symlink already in the task directory, or one made earlier by the same archive, that
        leads out of the destination is refused; so are devices, FIFOs and absolute names."""
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
            async for chunk in data:
                spool.write(chunk)
            spool.seek(0)
            dest = await self.resolve_path(path, what="path")
            await asyncio.to_thread(_extract, spool, dest)


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
            return None  # not a link, or missing
        raise BackendError(f"cannot look at {path}: {exc.strerror}", ErrorKind.FAILED_PRECONDITION) from exc


def _strict_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    if member.name.startswith("/"):
        raise tarfile.AbsolutePathError(member)  # the data filter would strip the slash; refuse instead
    return tarfile.data_filter(member, dest)


def _extract(spool, dest: str) -> None:
    try:
        os.makedirs(dest, exist_ok=True)
        with tarfile.open(fileobj=spool, mode="r:") as tar:
            tar.extractall(dest, filter=_strict_filter)
    except tarfile.FilterError as exc:
        raise BackendError(f"archive member refused: {exc}", ErrorKind.INVALID_ARGUMENT) from None
    except tarfile.TarError as exc:
        raise BackendError(f"not a valid tar stream: {exc}", ErrorKind.INVALID_ARGUMENT) from None
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise BackendError(f"unpacking into {dest} failed: {exc.strerror}: {exc.filename}",
                           ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION) from exc


class LocalBackend(Backend):
    kind = "local"
    Options = LocalOptions

    def __init__(self, name: str, options: LocalOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        # state_dir is <daemon state>/backends/<name>; tasks default to <daemon state>/tasks
        self.root = Path(options.root).expanduser() if options.root else state_dir.parents[1] / "tasks"
        self.registry = _PidRegistry(state_dir / "sessions")

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(pty=True, resize=True, signals=True, stdin=True, background=True,
                            persistent_shell=True, file_transfer=True, network_policy="host", streaming=True)

    def policy(self) -> dict[str, str]:
        return {"isolation": "none (host processes)", "root": str(self.root), "network": "host",
                "kill": KILL_SUBREAPER}

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        leftovers = self.registry.leftovers()
        for sid in leftovers:
            kill_session(sid, signal.SIGKILL)
        for sid in leftovers:
            self.registry.forget(sid)
        self.orphans_ended = len(leftovers)

    async def health(self) -> Health:
        if shutil.which("bash") is None:
            return Health(False, "bash is not installed on this host")
        if not os.access(self.root, os.W_OK):
            return Health(False, f"task root {self.root} is not writable")
        return Health(True)

    async def sandbox(self, task_id: str) -> LocalSandbox:
        path = self.root / task_id
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create the task directory {path}: {exc.strerror}",
                               ErrorKind.RESOURCE_EXHAUSTED if exc.errno == errno.ENOSPC else ErrorKind.FAILED_PRECONDITION) from exc
        return LocalSandbox(self, path)

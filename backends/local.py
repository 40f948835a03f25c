"""The local backend: processes on the daemon's own host, one directory per task.

``isolation: sandbox`` (the default): every spawn runs under bubblewrap, in a pid namespace of
its own, with the host's filesystem read-only, the task's directory and a private /tmp writable,
and the daemon's state, config, tokens, keys and socket hidden (``sandbox_argv``).
``isolation: none``: host processes with a directory and a clean environment, nothing more.
The gate stands in front of both.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import posixpath
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tarfile
import tempfile
import termios
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import IO, Literal

from ._host import (PipeReader, PtyReader, ns_tables, proc_stat, proc_table, signal_tree, signal_trees, spawn_piped,
                    write_master, write_stdin)
from ._shared.batch import TurnBatch
from ._shared.file_helper import FILE_HELPER
from ._shared.registry import SessionRegistry
from pydantic import model_validator

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
    _file_error,
    _pipe_through,
    _read_spool,
    read_all,
    reaper_argv,
    resolve_with,
)

log = logging.getLogger(__name__)


class LocalOptions(Options):
    #: Where task directories live; default ``<state-dir>/tasks``.
    root: str | None = None
    #: ``sandbox``: each spawn under bubblewrap (see docs/backends/local.md). ``none``: host
    #: processes that can reach whatever the daemon's user can, the daemon's secrets included.
    isolation: Literal["sandbox", "none"] = "sandbox"
    #: ``host``: the host's network. ``none``: a network namespace with only ``lo`` (sandbox only).
    network: Literal["host", "none"] = "host"
    #: Sandbox only: the host paths visible (read-only); default the whole host (``/``).
    read_only_paths: list[str] | None = None
    #: Sandbox only: host paths writable from every task, besides its directory and its /tmp.
    writable_paths: list[str] = []
    #: Sandbox only: more host paths no command may see (the daemon's own state, config, token
    #: files, TLS key and socket are hidden without being listed: the core hands them over).
    hidden_paths: list[str] = []
    #: Sandbox only: run commands as this uid/gid (the daemon must be root); default the daemon's.
    uid: int | None = None
    gid: int | None = None
    #: The bubblewrap binary.
    bwrap: str = "bwrap"

    @model_validator(mode="after")
    def _check(self) -> "LocalOptions":
        if self.isolation == "none":
            for key in ("read_only_paths", "uid", "gid"):
                if getattr(self, key) is not None:
                    raise ValueError(f"{key} needs isolation: sandbox")
            if self.writable_paths or self.hidden_paths or self.network != "host":
                raise ValueError("writable_paths, hidden_paths and network: none need isolation: sandbox "
                                 "(with isolation: none a command reaches the whole host)")
        if (self.uid is None) != (self.gid is None):
            raise ValueError("give both uid and gid, or neither")
        for key in ("read_only_paths", "writable_paths", "hidden_paths"):
            for path in getattr(self, key) or []:
                if not path.startswith("/"):
                    raise ValueError(f"{key}: {path!r} is not an absolute path")
        return self

#: Host sockets that hand out root to whoever connects (a read-only mount does not stop a connect):
#: hidden in every sandbox when they exist.
PRIVILEGED_SOCKETS = ("/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
                      "/run/podman/podman.sock", "/run/crio/crio.sock")


def session_members(sid: int) -> list[int]:
    """The processes of session ``sid`` now (tests use it to see a session gone)."""
    return [pid for pid, entry in proc_table().items() if entry.sid == sid]


def kill_session(pid: int, sig: int) -> int:
    """Signal the whole tree that the spawn of ``pid`` started (``_host.signal_tree``: the
    reaper's descendants, ``setsid`` and double forks included); returns how many were signalled."""
    return signal_tree(pid, sig)


class _KillBatch:
    """The kill walks asked for in one turn of the loop, made together (``_shared.batch``): one read
    of /proc per pass for all of them (``_host.signal_trees``, ``signal_namespaces``) instead of one
    each. A walk reads every process of the host and blocks the loop meanwhile: a SIGTERM to the
    daemon with 500 commands running made a thousand walks over some 1,500 processes, over a minute
    in which no call was answered."""

    def __init__(self) -> None:
        self._trees: TurnBatch[int, int] = TurnBatch(self._walk_trees)
        self._namespaces: TurnBatch[int, _Sandboxed] = TurnBatch(self._walk_namespaces)

    async def signal(self, pid: int, sig: int) -> None:
        """``kill_session(pid, sig)``, batched."""
        await self._trees.ask(sig, pid)

    async def signal_namespace(self, spawn: "_Sandboxed", sig: int) -> None:
        """``signal_namespace(spawn, sig)``, batched."""
        await self._namespaces.ask(sig, spawn)

    @staticmethod
    async def _walk_trees(sig: int, pids: list[int]) -> None:
        signal_trees(set(pids), sig)

    @staticmethod
    async def _walk_namespaces(sig: int, spawns: list["_Sandboxed"]) -> None:
        signal_namespaces(list(dict.fromkeys(spawns)), sig)


#: ``policy()["kill"]`` under ``isolation: sandbox``.
KILL_NAMESPACE = "pid namespace per spawn (setsid, nohup and double forks die too)"


def _depth(path: str) -> int:
    return len([c for c in path.split("/") if c])


def sandbox_argv(argv: Sequence[str], *, bwrap: str, task_dir: str, cwd: str, pty: bool, setsid: str,
                 network: str, read_only: Sequence[str] | None, writable: Sequence[str],
                 hidden: Sequence[tuple[str, bool]], block_fd: int | None = None,
                 extra_read_only: Sequence[str] = ()) -> list[str]:
    """``argv`` under bubblewrap, as one task's spawn.

    Mounts are applied shallow paths first, so a deeper one wins whatever kind it is: the hidden
    daemon state directory (an empty tmpfs) does not hide the task directory below it, and a
    hidden file inside a writable path stays hidden. At equal depth: read-only < /dev, /proc,
    /tmp < writable < hidden. ``hidden``: (path, is a directory) pairs, resolved and existing.
    Under ``pty`` the command becomes a session leader with the terminal as its controlling tty
    (``setsid -c``); otherwise bubblewrap's ``--new-session`` detaches it from any terminal.
    ``extra_read_only``: more host paths bound read-only when ``read_only`` is given (the
    interpreter of the backend's own file helper)."""
    ops: list[tuple[int, int, list[str]]] = []
    if read_only is None:
        ops.append((0, 0, ["--ro-bind", "/", "/"]))
    else:
        for path in read_only:
            ops.append((_depth(path), 0, ["--ro-bind", path, path]))
        if pty:
            ops.append((_depth(setsid), 0, ["--ro-bind", setsid, setsid]))
        for path in extra_read_only:
            ops.append((_depth(path), 0, ["--ro-bind", path, path]))
    ops += [(1, 1, ["--dev", "/dev"]), (1, 1, ["--proc", "/proc"]), (1, 1, ["--tmpfs", "/tmp"])]
    for path in (task_dir, *writable):
        ops.append((_depth(path), 2, ["--bind", path, path]))
    for path, is_dir in hidden:
        ops.append((_depth(path), 3, ["--tmpfs", path] if is_dir else ["--ro-bind", "/dev/null", path]))
    ops.sort(key=lambda op: (op[0], op[1]))
    head = [bwrap, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--cap-drop", "ALL"]
    if network == "none":
        head.append("--unshare-net")
    if not pty:
        head.append("--new-session")
    if block_fd is not None:
        head += ["--block-fd", str(block_fd)]
    for _, _, op in ops:
        head += op
    head += ["--chdir", cwd, "--"]
    return head + ([setsid, "-c"] if pty else []) + list(argv)


class _Sandboxed:
    """One live sandboxed spawn: bubblewrap's host process and, once seen, its pid namespace.

    Only spawns known here are ever signalled: the core may signal a session after it ended (a
    kill after the grace), and by then its host pid can belong to anyone (pids wrap quickly on a
    busy host: pid_max is 32768 here)."""

    def __init__(self, outer: int, alive: Callable[[], bool]) -> None:
        self.outer = outer
        self.alive = alive  # bubblewrap not yet reaped: the pid is still ours
        self.init: int | None = None
        self.ns: str | None = None

    def namespace(self) -> tuple[int, str] | None:
        """(host pid, pid namespace) of the sandbox's init, while it runs."""
        if self.ns is None:
            try:
                with open(f"/proc/{self.outer}/task/{self.outer}/children") as f:
                    children = f.read().split()
            except OSError:
                return None
            for child in children:
                try:
                    self.init, self.ns = int(child), os.readlink(f"/proc/{child}/ns/pid")
                    break
                except OSError:
                    continue
            else:
                return None
        init, ns = self.init, self.ns
        assert init is not None  # set with ns
        try:
            if os.readlink(f"/proc/{init}/ns/pid") == ns:
                return init, ns
        except OSError:
            pass
        return None  # the init is gone: so is the namespace and everything in it


def _signal_in(host: int, ns: str, sig: int) -> None:
    """Signal ``host`` only if it is still a process of namespace ``ns``: through a pidfd opened and
    then checked, so a pid that was freed (its namespace died under the walk) and reused by another
    process, a newer sandbox's shell say, is never hit."""
    try:
        fd = os.pidfd_open(host)
    except (ProcessLookupError, OSError):
        return
    try:
        if os.readlink(f"/proc/{host}/ns/pid") != ns:
            return  # the pid is someone else's now
        signal.pidfd_send_signal(fd, sig)
    except (ProcessLookupError, OSError):
        pass
    finally:
        os.close(fd)


def signal_namespace(spawn: _Sandboxed, sig: int, *, passes: int = 20) -> int:
    """Deliver ``sig`` to every process of a live sandboxed spawn, from the host: each one in its
    pid namespace but its init (bubblewrap's pid 1, which ends the namespace, and everything in
    it, when the command ends); with SIGKILL the init too, so the kernel kills whatever a walk
    could miss. Before the namespace exists, bubblewrap itself gets the signal
    (``--die-with-parent`` takes the rest). Returns how many were signalled."""
    return signal_namespaces((spawn,), sig, passes=passes)


def signal_namespaces(spawns: Collection[_Sandboxed], sig: int, *, passes: int = 20) -> int:
    """:func:`signal_namespace` for many spawns at once: one walk of /proc per pass for all of them."""
    count = 0
    found: dict[_Sandboxed, tuple[int, str]] = {}
    for spawn in spawns:
        if not spawn.alive():
            continue  # reaped: its namespace ended with it, and the pid may be someone else's now
        where = spawn.namespace()
        if where is not None:
            found[spawn] = where
        elif spawn.ns is None:  # not yet in its namespace
            try:
                os.kill(spawn.outer, sig)
                count += 1
            except (ProcessLookupError, PermissionError):
                pass
    seen: set[int] = set()
    live = dict(found)
    for n in range(passes):
        # Every pass only while the namespace is still this spawn's: once its init is gone the
        # namespace is too, and its identifier may already name a newer sandbox's namespace.
        if n:
            live = {s: w for s, w in live.items() if s.alive() and s.namespace() == w}
        if not live:
            break
        tables = ns_tables({ns for _, ns in live.values()})
        signalled = False
        for _spawn, (_init, ns) in live.items():
            # Lowest namespace pid first: the spawn's own process (the task's shell) before what it
            # started, so a shell with a pending TERM never runs its next command after its child died.
            fresh = [e.host_pid for pid, e in sorted(tables[ns].items()) if pid != 1 and e.host_pid not in seen]
            for host in fresh:
                _signal_in(host, ns, sig)
            seen.update(fresh)
            signalled = signalled or bool(fresh)
        if not signalled:
            break
    if sig == signal.SIGKILL:
        for spawn, (init, _ns) in found.items():
            if spawn.namespace() is not None:
                try:
                    os.kill(init, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
    return count + len(seen)


SETUP_ATTEMPTS = 4


_OBSERVABLE = os.path.exists("/proc/self/syscall")  # kernels without it: spawns are released at once


def _blocked_on(pid: int, fd: int) -> bool | None:
    """Whether ``pid`` sleeps reading pipe ``fd``: bubblewrap's --block-fd wait, reached only once
    every mount of the sandbox is in place. None when this cannot be seen (no permission to read the
    process's /proc/PID/syscall: an unprivileged daemon whose sandbox is not dumpable)."""
    try:
        with open(f"/proc/{pid}/syscall") as f:
            fields = f.read().split()
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read().strip()
    except PermissionError:
        return None
    except OSError:
        return False  # gone, or not started yet
    # read(2) is syscall 0 on x86_64, 63 on arm64; wchan is "0" where kernel symbols are hidden
    return (len(fields) > 1 and fields[0] in ("0", "63") and fields[1] == hex(fd)
            and ("pipe_read" in wchan or wchan in ("", "0")))


async def _setup_done(outer: int, fd: int, returncode: Callable[[], int | None], timeout: float = 30) -> bool:
    """True once the sandbox's pid 1 waits on ``fd`` (its setup done); False when bubblewrap ended
    before that (its setup failed: nothing of the command ran). True at once where the wait cannot
    be seen (the command then starts as soon as bubblewrap is done, without a second setup), and
    after ``timeout`` (the caller's own start timeout then judges a sandbox that never came up)."""
    if not _OBSERVABLE:
        return True
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    delay = 0.0002
    while loop.time() < deadline:
        if returncode() is not None:
            return False
        try:
            with open(f"/proc/{outer}/task/{outer}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        for child in children:
            seen = _blocked_on(child, fd)
            if seen is None or seen:
                return True
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.005)
    return True


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def _abandon(pid: int, wait: Callable[[], Awaitable[object]]) -> None:
    """End a spawn that cannot be recorded in the session registry (the state disk is full), and
    reap it, before the spawn fails: a crash would otherwise leave it running where the next
    daemon's recovery cannot find it, and an error must mean nothing runs. Under bubblewrap the
    command still waits on --block-fd and dies with bubblewrap (--die-with-parent); the reaper
    (isolation none) is ended with whatever it already started."""
    kill_session(pid, signal.SIGKILL)
    _kill_quietly(pid)
    await wait()


def _unrecorded(registry: "_PidRegistry", exc: OSError) -> BackendError:
    full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return BackendError(
        f"cannot start a process: its session cannot be recorded in {registry.dir} ({exc.strerror}), so a "
        f"restarted daemon could not end it; nothing was started. "
        + ("Free space on the daemon's state disk (task directories live there unless the backend sets root:)"
           if full else "Make the daemon's state directory writable"),
        ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION)


async def _said(process: Process) -> str:
    """What a spawn that failed before its command printed (bubblewrap's error), briefly."""
    try:
        data = await asyncio.wait_for(read_all(process.stderr if process.stderr is not None else process.stdout), 2)
    except (asyncio.TimeoutError, BackendError):
        data = b""
    await process.detach()
    return data.decode(errors="replace").strip()[-300:]


class _PipeProcess(Process):
    stdout: PipeReader
    stderr: PipeReader

    def __init__(self, proc: asyncio.subprocess.Process, stdout: PipeReader, stderr: PipeReader,
                 registry: "_PidRegistry", session: int | None) -> None:
        self._proc = proc
        self._registry = registry
        self.pid = proc.pid
        self.session = session
        self.stdout = stdout
        self.stderr = stderr

    async def write(self, data: bytes) -> None:
        await write_stdin(self._proc.stdin, data)

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
    stdout: PtyReader
    stderr: None

    def __init__(self, proc: subprocess.Popen[bytes], master: int, registry: "_PidRegistry", session: int | None) -> None:
        self._proc = proc
        self._master = master
        self._registry = registry
        self.pid = proc.pid
        self.session = session
        self.stdout = PtyReader(master)
        self.stderr = None
        self._closed = False

    async def write(self, data: bytes) -> None:
        await write_master(self._master, data, 0.005)

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


class _PidRegistry(SessionRegistry):
    """Session leaders this backend started (``_shared.registry``, with their start times), so that
    a restarted daemon can end what a crashed one left running (never leaving orphans)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def remember(self, pid: int, start: str = "", scope: str = "") -> None:
        fields = proc_stat(pid)
        super().remember(pid, fields[19] if fields else "0", scope)

    def leftovers(self) -> list[int]:
        """The remembered leaders still running as themselves (same start time, still session
        leaders); the others are forgotten."""
        alive = []
        for pid, start in self.load().items():
            fields = proc_stat(pid)
            if fields is not None and fields[19] == start and fields[3] == str(pid):
                alive.append(pid)
            else:
                self.forget(pid)
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
        return await self._spawn(argv, cwd=cwd, env=env, pty=pty)

    async def _spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], pty: PtySize | None = None,
                     extra_read_only: Sequence[str] = ()) -> Process:
        backend = self._backend
        # isolation none: the reaper (the daemon's own python) starts argv as a session leader and
        # keeps everything argv starts in its tree, so signal_session reaches a `setsid` too.
        # sandbox: the spawn's pid namespace does that; signal_session gets bubblewrap's pid.
        if backend.options.isolation != "sandbox":
            process, _ = await self._start(reaper_argv(argv, pty=pty is not None, python=sys.executable),
                                           cwd=cwd, env=env, pty=pty, sandboxed=False)
            return process
        # bubblewrap's setup (a recursive read-only bind of / and a remount of every mount below it)
        # fails at times when the host's mounts change under it (a container starting or stopping:
        # "Can't bind mount /oldroot/ on /newroot/: Unable to apply mount flags"). Its command
        # waits on a pipe (--block-fd) until the setup is seen done: a setup that failed ran
        # nothing, so it is set up again; the command is started exactly once.
        for attempt in range(SETUP_ATTEMPTS):
            go_read, go_write = os.pipe2(os.O_CLOEXEC)
            try:
                full = backend.sandbox_argv(argv, task_dir=self.root, cwd=cwd, pty=pty is not None,
                                            block_fd=go_read, extra_read_only=extra_read_only)
                process, returncode = await self._start(full, cwd=cwd, env=env, pty=pty, sandboxed=True,
                                                        pass_fds=(go_read,))
            except BaseException:
                os.close(go_write)
                raise
            finally:
                os.close(go_read)
            try:
                ready = await _setup_done(process.pid, go_read, returncode)
                if ready or attempt == SETUP_ATTEMPTS - 1:
                    if ready:
                        os.write(go_write, b"g")  # the command may start
                    return process  # or bubblewrap's own error, on its stderr, for the caller
            except BaseException:
                # Cancelled (or failed) while waiting: the pipe's end, once closed, would release a
                # command nobody holds. bubblewrap goes first (--die-with-parent takes its pid 1).
                _kill_quietly(process.pid)
                raise
            finally:
                os.close(go_write)
            said = await _said(process)
            log.warning("local sandbox: bubblewrap's setup failed before the command started (%s); setting up "
                        "again (attempt %d of %d)", said or f"exit code {returncode()}", attempt + 2, SETUP_ATTEMPTS)
        raise AssertionError("unreachable")

    async def _start(self, full: list[str], *, cwd: str, env: Mapping[str, str], pty: PtySize | None,
                     sandboxed: bool, pass_fds: tuple[int, ...] = ()
                     ) -> tuple[_PipeProcess | _PtyProcess, Callable[[], int | None]]:
        """Start ``full`` with pipes or a terminal; the process and how to read its exit code."""
        backend = self._backend
        registry = backend.registry
        try:
            if pty is None:
                proc, stdout, stderr = await spawn_piped(full, cwd=cwd, env=env, start_new_session=True,
                                                         pass_fds=pass_fds)
                try:
                    registry.remember(proc.pid)
                except OSError as exc:
                    await _abandon(proc.pid, proc.wait)
                    stdout.detach()
                    stderr.detach()
                    raise _unrecorded(registry, exc) from None
                if sandboxed:
                    backend.track(_Sandboxed(proc.pid, lambda: proc.returncode is None))
                return (_PipeProcess(proc, stdout, stderr, registry, proc.pid if sandboxed else None),
                        lambda: proc.returncode)
            master, slave = os.openpty()
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", pty.rows, pty.cols, 0, 0))
            os.set_blocking(master, False)

            # The reaper (none) or `setsid -c` (sandbox) makes argv a session leader with the
            # terminal as its controlling tty. A Python preexec_fn cannot do this safely: forking a
            # threaded (gRPC) process and running Python in the child crashes it (SIGSEGV/SIGABRT)
            # about half the time.
            try:
                popen = subprocess.Popen(
                    full,
                    start_new_session=True,
                    cwd=cwd,
                    env=dict(env),
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    close_fds=True,
                    pass_fds=pass_fds,
                )
            except BaseException:
                os.close(master)
                raise
            finally:
                os.close(slave)
            try:
                registry.remember(popen.pid)
            except OSError as exc:
                await _abandon(popen.pid, lambda: asyncio.to_thread(popen.wait))
                os.close(master)
                raise _unrecorded(registry, exc) from None
            if sandboxed:
                backend.track(_Sandboxed(popen.pid, lambda: popen.poll() is None))
            return _PtyProcess(popen, master, registry, popen.pid if sandboxed else None), popen.poll
        except FileNotFoundError as exc:
            raise BackendError(f"cannot start {full[0]!r}: {exc.strerror}: {exc.filename}", ErrorKind.NOT_FOUND) from exc
        except OSError as exc:
            kind = ErrorKind.RESOURCE_EXHAUSTED if exc.errno in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE) else ErrorKind.FAILED_PRECONDITION
            raise BackendError(f"cannot start a process: {exc}", kind) from exc

    async def signal_session(self, pid: int, sig: int) -> None:
        if self._backend.options.isolation == "sandbox":
            spawn = self._backend.sandboxed.get(pid)  # pid: Process.session, bubblewrap's host pid
            if spawn is not None:  # else not ours, or long gone: nothing to signal
                await self._backend.kills.signal_namespace(spawn, sig)
        else:
            await self._backend.kills.signal(pid, sig)

    async def release(self, remove_files: bool = False) -> None:
        if remove_files:
            await asyncio.to_thread(shutil.rmtree, self.path, True)

    # paths: checked in the daemon (lstat/readlink only, nothing opened); files: moved in the sandbox
    async def resolve_paths(self, paths: Sequence[str]) -> list[Resolved]:
        if len(paths) <= 16:
            return [resolve_with(p, _readlink) for p in paths]
        return await asyncio.to_thread(lambda: [resolve_with(p, _readlink) for p in paths])

    # Every read or write of the task's files (ReadFile, WriteFile and its chmod, PutArchive's
    # unpacking, GetArchive's packing) runs in a helper spawned like the task's commands: inside the
    # task's sandbox, as its user, seeing only what its commands see; never in the daemon, which may
    # be root and sees the whole host. The helper walks the path the base class resolved and checked
    # with O_NOFOLLOW, component by component (``_shared/file_helper.py``): a directory a command
    # swapped for a symlink after the check is refused, not followed. PutArchive keeps the base
    # class's checks (``plan_archive``, every member resolved here) before ``tar -x`` runs inside.

    async def spawn_helper(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> Process:
        python = self._backend._helper_python  # chosen by _file_argv before any file helper is spawned
        extra = python[1] if python is not None and argv and argv[0] == python[0] else ()
        return await self._spawn(argv, cwd=cwd, env=env, extra_read_only=extra)

    def _file_argv(self, op: str, path: str, *args: str) -> list[str]:
        root = posixpath.normpath(self.root)
        if path == root:
            rel = ""
        elif path.startswith(root + "/"):
            rel = path[len(root) + 1:]
        else:  # the base class hands over resolved, checked paths only
            raise BackendError(f"{path} is not inside the task's directory {root}", ErrorKind.INTERNAL)
        python, _ = self._backend.helper_python()
        return [python, "-I", "-S", "-c", FILE_HELPER, op, root, rel, *args]

    async def read_bytes(self, path: str) -> AsyncIterator[bytes]:
        async for chunk in self._helper_output(self._file_argv("read", path), "/",
                                               lambda code, message: _file_error(path, "reading", code, message)):
            yield chunk

    async def write_bytes(self, path: str, data: AsyncIterator[bytes], *, mode: int = 0,
                          make_parents: bool = False) -> int:
        argv = self._file_argv("write", path, f"{mode:o}" if mode else "", "1" if make_parents else "")
        proc = await self.spawn_helper(argv, cwd="/", env=_HELPER_ENV)
        code, message, written = await _pipe_through(proc, data)
        if code != 0:
            raise _file_error(path, "writing", code, message)
        return written

    async def unpack_tar(self, dest: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        """``tar -x`` inside the sandbox, in ``dest`` (made if missing, walked without following links),
        of the archive as rewritten by ``data_archive``: ``tar`` unpacks exactly the members that were
        checked, files belong to the commands' user, modes as the stdlib's ``data`` filter sets them."""
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as raw, \
                tempfile.SpooledTemporaryFile(max_size=8 << 20) as clean:
            async for chunk in data:
                raw.write(chunk)
            raw.seek(0)
            await asyncio.to_thread(data_archive, raw, clean)
            clean.seek(0)
            proc = await self.spawn_helper(self._file_argv("put", dest), cwd="/", env=_HELPER_ENV)
            code, message, _ = await _pipe_through(proc, _read_spool(clean))
        if code != 0:
            full = "No space left on device" in message or "Disk quota exceeded" in message
            kind = (ErrorKind.RESOURCE_EXHAUSTED if full else
                    ErrorKind.INVALID_ARGUMENT if code == 5 else ErrorKind.FAILED_PRECONDITION)
            raise BackendError(f"unpacking into {dest} failed: {message or f'tar exited {code}'}", kind)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        def failed(code: int, message: str) -> BackendError:
            return BackendError(f"reading {path} failed: {message or f'tar exited {code}'}",
                                ErrorKind.NOT_FOUND if code == 3 or "No such file" in message else
                                ErrorKind.INVALID_ARGUMENT if code == 5 else ErrorKind.FAILED_PRECONDITION)

        async for chunk in self._helper_output(self._file_argv("get", path), "/", failed):
            yield chunk


_HELPER_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin"}


def data_archive(src: IO[bytes], dst: IO[bytes]) -> None:
    """Rewrite the tar archive ``src`` (already checked by ``plan_archive``) into ``dst`` with plain
    headers: only files, directories, symlinks and hard links (anything else is refused), no owner,
    and the modes the stdlib's ``data`` extraction filter gives (files ``& 0o755``, owner read and
    write, executable only when the owner's bit is set; directories 0755). ``tar`` in the sandbox
    then sees exactly the members the daemon parsed and checked, nothing its own parser could read
    differently (pax or GNU extensions, sparse maps, devices)."""
    try:
        with tarfile.open(fileobj=src, mode="r:", encoding="utf-8", errors="surrogateescape") as tin, \
                tarfile.open(fileobj=dst, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                             errors="surrogateescape") as tout:
            for member in tin:
                out = tarfile.TarInfo(member.name)
                out.mtime = int(member.mtime)
                if member.isdir():
                    out.type, out.mode = tarfile.DIRTYPE, 0o755
                elif member.issym() or member.islnk():
                    out.type, out.linkname, out.mode = member.type, member.linkname, 0o777 if member.issym() else 0o644
                elif member.isfile():
                    mode = member.mode & 0o755
                    out.type, out.size = tarfile.REGTYPE, member.size
                    out.mode = (mode if mode & 0o100 else mode & ~0o111) | 0o600
                    tout.addfile(out, tin.extractfile(member))
                    continue
                else:
                    raise BackendError(f"archive member {member.name!r} is a device or FIFO; only files, "
                                       "directories and links are accepted", ErrorKind.INVALID_ARGUMENT)
                tout.addfile(out)
    except tarfile.TarError as exc:
        raise BackendError(f"not a valid tar stream: {exc}", ErrorKind.INVALID_ARGUMENT) from None


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.ENOENT, errno.ENOTDIR):
            return None  # not a link, or missing
        raise BackendError(f"cannot look at {path}: {exc.strerror}", ErrorKind.FAILED_PRECONDITION) from exc


class LocalBackend(Backend):
    kind = "local"
    Options = LocalOptions
    options: LocalOptions

    def __init__(self, name: str, options: LocalOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        # state_dir is <daemon state>/backends/<name>; tasks default to <daemon state>/tasks
        self.daemon_state = state_dir.parents[1]
        self.root = Path(options.root).expanduser() if options.root else self.daemon_state / "tasks"
        self.registry = _PidRegistry(state_dir / "sessions")
        self.kills = _KillBatch()
        self.setsid = shutil.which("setsid") or "/usr/bin/setsid"
        self.setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"
        self.sandboxed: dict[int, _Sandboxed] = {}  # live sandboxed spawns, by bubblewrap's pid
        self._probe: Health | None = None
        self._helper_python: tuple[str, list[str]] | None = None

    @property
    def capabilities(self) -> Capabilities:
        network = "none" if self.options.network == "none" else "host"
        return Capabilities.full(network)

    def policy(self) -> dict[str, str]:
        o = self.options
        if o.isolation == "none":
            return {"isolation": "NONE: host processes as the daemon's user; the host's files, processes and the "
                                 "daemon's own secrets are within a command's reach (isolation: none)",
                    "root": str(self.root), "network": "host", "kill": KILL_SUBREAPER}
        user = f"uid {o.uid} gid {o.gid}" if o.uid is not None else "the daemon's user, no capabilities"
        return {"isolation": "sandbox (bubblewrap: own pid, ipc and mount namespaces)",
                "filesystem": ("the host read-only" if o.read_only_paths is None
                               else "read-only: " + ", ".join(o.read_only_paths))
                              + "; writable: the task's directory, a private /tmp"
                              + "".join(", " + p for p in o.writable_paths),
                "hidden": "the daemon's state directory, config, token files, TLS key and socket"
                          + (", " + ", ".join(o.hidden_paths) if o.hidden_paths else ""),
                "user": user, "root": str(self.root), "network": o.network, "kill": KILL_NAMESPACE}

    def startup_notice(self) -> str | None:
        if self.options.isolation == "none":
            return (f"backend {self.name!r} (local) runs with isolation: none: commands run on this host as "
                    f"uid {os.geteuid()} and can read and change whatever that user can, the daemon's state, "
                    "config and token files included; set isolation: sandbox unless the daemon runs in a "
                    "VM or container of its own")
        return None

    def track(self, spawn: _Sandboxed) -> None:
        for outer in [o for o, known in self.sandboxed.items() if not known.alive()]:
            del self.sandboxed[outer]
        self.sandboxed[spawn.outer] = spawn

    @property
    def run_as(self) -> tuple[int, int] | None:
        """(uid, gid) when commands run as another user than the daemon's."""
        o = self.options
        if (o.isolation == "sandbox" and o.uid is not None and o.gid is not None  # (both or neither: validated)
                and (o.uid, o.gid) != (os.geteuid(), os.getegid())):
            return o.uid, o.gid
        return None

    def hidden(self) -> list[tuple[str, bool]]:
        """What no command may see, resolved, existing: (path, is a directory)."""
        wanted = [str(self.daemon_state), *self.hidden_paths, *self.options.hidden_paths, *PRIVILEGED_SOCKETS]
        out: dict[str, bool] = {}
        for path in wanted:
            real = os.path.realpath(os.path.expanduser(path))
            if os.path.lexists(real) and self._reachable(real):
                out[real] = os.path.isdir(real)
        return sorted(out.items())

    def _reachable(self, path: str) -> bool:
        """Whether the commands' user can reach ``path`` at all (search permission on every parent
        directory). Under ``uid`` bubblewrap runs as that user and cannot mount over a path it
        cannot reach; such a path needs no hiding."""
        if self.run_as is None:
            return True
        uid, gid = self.options.uid, self.options.gid
        parent = os.path.dirname(path)
        while True:
            try:
                st = os.stat(parent)
            except OSError:
                return False
            bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
            if not st.st_mode & bit:
                return False
            if parent == "/":
                return True
            parent = os.path.dirname(parent)

    def helper_python(self) -> tuple[str, list[str]]:
        """The interpreter that runs the file helper inside the sandbox, and the host paths it needs
        bound read-only there (only when ``read_only_paths`` restricts the view): the daemon's own
        interpreter when the commands' user can run it, else the host's ``python3``."""
        if self._helper_python is None:
            daemon = os.path.realpath(sys.executable)
            candidates = [(daemon, sys.base_prefix)]
            for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
                real = os.path.realpath(path)
                candidates.append((real, os.path.dirname(os.path.dirname(real))))
            for python, prefix in candidates:
                if self._can_run(python):
                    extra = [] if self.options.read_only_paths is None else [prefix]
                    self._helper_python = (python, extra)
                    break
            else:
                who = f"uid {self.options.uid}" if self.run_as is not None else "the daemon's user"
                raise BackendError(f"file operations on backend {self.name!r} run a Python helper inside the sandbox, "
                                   f"and {who} can run none of {', '.join(c for c, _ in candidates)}: install "
                                   "python3 on the host", ErrorKind.FAILED_PRECONDITION)
        return self._helper_python

    def _can_run(self, path: str) -> bool:
        if self.run_as is None:
            return os.access(path, os.X_OK)
        try:
            st = os.stat(path)
        except OSError:
            return False
        uid, gid = self.run_as
        bit = stat.S_IXUSR if st.st_uid == uid else stat.S_IXGRP if st.st_gid == gid else stat.S_IXOTH
        return bool(st.st_mode & bit) and self._reachable(path)

    def sandbox_argv(self, argv: Sequence[str], *, task_dir: str, cwd: str, pty: bool,
                     block_fd: int | None = None, extra_read_only: Sequence[str] = ()) -> list[str]:
        o = self.options
        # Another user: setpriv switches before bubblewrap starts (not Popen's user=, which forks
        # the threaded daemon instead of vfork: gRPC's fork handlers then kill the child at times).
        prefix = [] if self.run_as is None else [self.setpriv, f"--reuid={o.uid}", f"--regid={o.gid}",
                                                  "--clear-groups", "--"]
        return prefix + sandbox_argv(argv, bwrap=o.bwrap, task_dir=task_dir, cwd=cwd, pty=pty, setsid=self.setsid,
                            network=o.network, read_only=o.read_only_paths, writable=o.writable_paths,
                            hidden=self.hidden(), block_fd=block_fd, extra_read_only=extra_read_only)

    async def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        leftovers = self.registry.leftovers()
        for sid in leftovers:
            kill_session(sid, signal.SIGKILL)  # bubblewrap's or the reaper's tree, on the host
        for sid in leftovers:
            self.registry.forget(sid)
        self.orphans_ended = len(leftovers)

    async def health(self) -> Health:
        if shutil.which("bash") is None:
            return Health(False, "bash is not installed on this host")
        if not os.access(self.root, os.W_OK):
            return Health(False, f"task root {self.root} is not writable")
        if self.options.isolation == "none":
            return Health(True, details={"isolation": "none"})
        if self._probe is None or not self._probe.available:
            self._probe = await self._check_sandbox()
        return self._probe

    async def _check_sandbox(self) -> Health:
        """Fail closed: start one real sandbox; when that fails the backend is unavailable."""
        o = self.options
        fix = ("install bubblewrap (`apt-get install bubblewrap`, or `make serve` as root), allow unprivileged "
               "user namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0) when "
               "the daemon is not root, or set `isolation: none` on this backend knowingly (no isolation at all)")
        if shutil.which(o.bwrap) is None:
            return Health(False, f"isolation: sandbox needs bubblewrap, and {o.bwrap!r} is not installed: {fix}")
        if o.uid is not None and os.geteuid() != 0 and o.uid != os.geteuid():
            return Health(False, f"uid {o.uid}: running commands as another user needs the daemon to run as root")
        if self.run_as is not None and not os.access(self.setpriv, os.X_OK):
            return Health(False, f"uid {o.uid}: running commands as another user needs setpriv (util-linux)")
        for key in ("read_only_paths", "writable_paths"):
            missing = [p for p in getattr(o, key) or [] if not os.path.exists(p)]
            if missing:
                return Health(False, f"{key}: {', '.join(missing)} does not exist on this host")
        probe = self.root / ".executor-probe"  # never a task id (they start with a letter or digit)
        probe.mkdir(exist_ok=True)
        if self.run_as is not None:
            os.chown(probe, *self.run_as)
        argv = self.sandbox_argv(["/bin/sh", "-c", "exit 0"], task_dir=str(probe), cwd=str(probe), pty=False)
        try:
            proc = await asyncio.create_subprocess_exec(*argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                                        stderr=subprocess.PIPE, env={"PATH": "/usr/bin:/bin"},
                                                        start_new_session=True)
            _, err = await asyncio.wait_for(proc.communicate(), 30)
        except (OSError, asyncio.TimeoutError) as exc:
            return Health(False, f"the sandbox could not be started ({exc}): {fix}")
        if proc.returncode != 0:
            why = err.decode(errors="replace").strip()[:300] or f"bwrap exited {proc.returncode}"
            return Health(False, f"the sandbox could not be started: {why}: {fix}")
        return Health(True, details={"isolation": "sandbox"})

    async def sandbox(self, task_id: str) -> LocalSandbox:
        path = self.root / task_id
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create the task directory {path}: {exc.strerror}",
                               ErrorKind.RESOURCE_EXHAUSTED if exc.errno == errno.ENOSPC else ErrorKind.FAILED_PRECONDITION) from exc
        if self.run_as is not None:
            os.chown(path, *self.run_as)  # the task's directory is the command user's
        return LocalSandbox(self, path)

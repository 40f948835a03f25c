"""Plumbing shared by backends that run processes on the daemon's host (local, and singularity,
whose `apptainer exec` runs here): output pipes read straight from the event loop, and a
non-blocking pty master reader."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import fcntl
import os
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from ._shared.streams import READ_SIZE, ChunkBuffer
from .base import REAPER_NAME, BackendError, ByteQueue, ErrorKind

F_SETPIPE_SZ = 1031
PIPE_SIZE = 1 << 20


class PipeReader(ChunkBuffer):
    """A ``PushStream`` (``_shared.streams``): the daemon's end of a child's stdout or stderr pipe, read by the event loop as data arrives.

    Two ways to consume it: ``await read()`` (a chunk, b"" at EOF), or ``subscribe(on_data, on_eof)``,
    which hands each chunk to ``on_data`` from the loop's readiness callback, with no task in
    between (the shell uses it: its end markers then reach the waiting command one loop turn
    after bash writes them). Backpressure either way: past ``limit`` unread bytes, or while a
    subscriber has called ``pause()``, the pipe is not read, so the writer blocks on a full pipe.
    ``detach()`` drops the consumer and keeps draining (and discarding) until EOF, so a background
    process that inherited the pipe never blocks on it; the fd is closed at EOF."""

    _loop: asyncio.AbstractEventLoop  # (set at once: reading starts in the constructor)

    def __init__(self, fd: int, limit: int = 1 << 20) -> None:
        super().__init__()
        os.set_blocking(fd, False)
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._limit = limit
        self._on_data: Callable[[bytes], None] | None = None
        self._on_eof: Callable[[BaseException | None], None] | None = None
        self._paused = False  # by the subscriber
        self._discard = False
        self._reading = False
        self._watch()

    # -- the loop side
    def _watch(self) -> None:
        want = not self._eof and not self._paused and (self._discard or self._on_data is not None
                                                        or self._size < self._limit)
        if want and not self._reading:
            self._loop.add_reader(self._fd, self._readable)
            self._reading = True
        elif not want and self._reading:
            self._loop.remove_reader(self._fd)
            self._reading = False

    def _readable(self) -> None:
        try:
            data = os.read(self._fd, READ_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._finish(BackendError(f"reading the process's output failed: {exc}", ErrorKind.LOST))
            return
        if not data:
            self._finish(None)
        elif self._discard:
            pass
        elif self._on_data is not None:
            self._on_data(data)
        else:
            self._chunks.append(data)
            self._size += len(data)
            self._wake_reader()
            if self._size >= self._limit:
                self._watch()

    def _finish(self, error: BaseException | None) -> None:
        self._eof = True
        self._error = error
        self._watch()
        os.close(self._fd)
        self._fd = -1
        self._wake_reader()
        if self._on_eof is not None and not self._discard:
            on_eof, self._on_data, self._on_eof = self._on_eof, None, None
            on_eof(error)

    # -- pull
    async def read(self) -> bytes:
        data = await self._next()
        self._watch()
        return data

    # -- push
    def subscribe(self, on_data: Callable[[bytes], None], on_eof: Callable[[BaseException | None], None]) -> None:
        """Deliver what is buffered now, then every chunk as it is read; ``on_eof(None or error)`` last."""
        while self._chunks:
            data = self._chunks.popleft()
            self._size -= len(data)
            on_data(data)
        if self._eof:
            on_eof(self._error)
            return
        self._on_data, self._on_eof = on_data, on_eof
        self._watch()

    def pause(self) -> None:
        self._paused = True
        self._watch()

    def resume(self) -> None:
        self._paused = False
        self._watch()

    def detach(self) -> None:
        """No consumer any more: drain and discard until EOF (then the fd is closed)."""
        self._on_data = self._on_eof = None
        self._chunks.clear()
        self._size = 0
        self._discard = True
        self._paused = False
        self._watch()


async def spawn_piped(argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str],
                      **kwargs: Any) -> tuple[asyncio.subprocess.Process, PipeReader, PipeReader]:
    """Start argv with a stdin pipe (asyncio's) and stdout/stderr pipes read by PipeReaders.

    The output pipes are 1 MiB (a streaming command moves in fewer, larger reads) where the
    system allows it. Raises OSError as subprocess does."""
    fds: list[int] = []
    try:
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        fds += [out_r, out_w]
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        fds += [err_r, err_w]
        for fd in (out_r, err_r):
            try:
                fcntl.fcntl(fd, F_SETPIPE_SZ, PIPE_SIZE)
            except OSError:
                pass  # over pipe-max-size for an unprivileged user: keep the default
        proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, env=dict(env), stdin=subprocess.PIPE,
                                                    stdout=out_w, stderr=err_w, **kwargs)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    return proc, PipeReader(out_r), PipeReader(err_r)


class PtyReader:
    """Reads a pty master without blocking the loop; EIO (the slave side closed) is EOF. Bounded
    like a pipe: past the queue's limit the master is not read (the program blocks on its
    terminal) until the reader catches up."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._q = ByteQueue(on_read=self._caught_up)
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(fd, self._on_readable)
        self._open = True
        self._reading = True

    def _on_readable(self) -> None:
        try:
            data = os.read(self._fd, 65536)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EINTR):
                return
            data = b""
        if not data:
            self.stop()
            return
        self._q.feed(data)
        if self._q.full and self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _caught_up(self) -> None:
        if self._open and not self._reading and not self._q.full:
            self._reading = True
            self._loop.add_reader(self._fd, self._on_readable)

    def stop(self) -> None:
        """Stop reading (at EOF, or when the process is detached); readers then see EOF."""
        if self._open:
            self._open = False
            if self._reading:
                self._reading = False
                self._loop.remove_reader(self._fd)
        self._q.feed_eof()

    async def read(self) -> bytes:
        return await self._q.read()


async def write_stdin(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write to a host process's stdin pipe, waiting while the pipe is full."""
    if stdin is None or stdin.is_closing():
        raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
    stdin.write(data)
    try:
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION) from exc


async def write_master(master: int, data: bytes, pause: float) -> None:
    """Write to a non-blocking pty master, sleeping ``pause`` seconds while the terminal is full."""
    view = memoryview(data)
    while view:
        try:
            n = os.write(master, view)
        except BlockingIOError:
            await asyncio.sleep(pause)
            continue
        except OSError as exc:
            raise BackendError("the terminal is closed", ErrorKind.FAILED_PRECONDITION) from exc
        view = view[n:]


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state, ppid, pgrp, session, ...; the
    start time is [19]), or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode().split()


# ---------------------------------------------------------------------------
# Killing a spawn's whole tree, from the host (the in-sandbox twin is base.KILL_TREE_FUNCTION)
# ---------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ProcEntry:
    ppid: int  # as seen in the same view as the pid
    sid: int
    comm: str
    host_pid: int  # what os.kill takes


def proc_table(pid_ns: str | None = None) -> dict[int, ProcEntry]:
    """Every process, by pid. ``pid_ns`` (a /proc/PID/ns/pid link): only that namespace's
    processes, by the pids (and parent and session ids) they have *inside* it."""
    table: dict[int, ProcEntry] = {}
    if pid_ns is None:
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    raw = f.read()
                fields = raw[raw.rfind(b")") + 2:].split()
                comm = raw[raw.find(b"(") + 1:raw.rfind(b")")].decode(errors="replace")
                table[int(entry)] = ProcEntry(int(fields[1]), int(fields[3]), comm, int(entry))
            except (OSError, ValueError, IndexError):
                continue
        return table
    return ns_tables((pid_ns,))[pid_ns]


def ns_tables(namespaces: Collection[str]) -> dict[str, dict[int, ProcEntry]]:
    """:func:`proc_table` of each pid namespace in ``namespaces``, from one walk of /proc."""
    inner: dict[str, dict[int, int]] = {ns: {} for ns in namespaces}  # host pid -> pid inside
    rows: list[tuple[str, int, int, int, int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ns = os.readlink(f"/proc/{entry}/ns/pid")
            if ns not in inner:
                continue
            status = {}
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    key, _, value = line.partition(":")
                    status[key] = value.split()
            pid, sid = int(status["NSpid"][-1]), int(status["NSsid"][-1])
            rows.append((ns, int(entry), pid, int(status["PPid"][0]), sid, (status.get("Name") or [""])[0]))
            inner[ns][int(entry)] = pid
        except (OSError, ValueError, KeyError, IndexError):
            continue
    tables: dict[str, dict[int, ProcEntry]] = {ns: {} for ns in namespaces}
    for ns, host, pid, host_ppid, sid, comm in rows:
        tables[ns][pid] = ProcEntry(inner[ns].get(host_ppid, 0), sid, comm, host)
    return tables


def tree_members(table: Mapping[int, ProcEntry], pid: int,
                 index: tuple[Mapping[int, list[int]], Mapping[int, list[int]]] | None = None) -> tuple[int, set[int]]:
    """(the anchor, the processes to signal) for the spawn whose command runs as ``pid``: the
    anchor is the reaper that started it (``pid``'s parent, or ``pid`` itself), else ``pid``;
    the members are the anchor's descendants and ``pid``'s session, never the reaper itself.
    ``index``: the table's (ppid -> pids, sid -> pids), when the caller has made it (many roots)."""
    root = pid
    entry = table.get(pid)
    if entry is not None and entry.comm != REAPER_NAME:
        parent = table.get(entry.ppid)
        if parent is not None and parent.comm == REAPER_NAME:
            root = entry.ppid
    tree = {root}
    children, sessions = _index(table) if index is None else index
    tree.update(sessions.get(pid, ()))
    stack = list(tree)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in tree:
                tree.add(child)
                stack.append(child)
    if table.get(root) is not None and table[root].comm == REAPER_NAME:
        tree.discard(root)
    return root, tree


def _index(table: Mapping[int, ProcEntry]) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
    children: dict[int, list[int]] = {}
    sessions: dict[int, list[int]] = {}
    for p, e in table.items():
        children.setdefault(e.ppid, []).append(p)
        sessions.setdefault(e.sid, []).append(p)
    return children, sessions


def signal_tree(pid: int, sig: int, pid_ns: str | None = None, *, passes: int = 20) -> int:
    """Deliver ``sig`` to the whole tree that the spawn of ``pid`` started (see tree_members):
    ``pid``'s process group first, in one kill(2), then /proc is walked again until a pass finds
    nothing new. Each process gets the signal once. Returns how many were signalled."""
    return signal_trees((pid,), sig, pid_ns, passes=passes)


def signal_trees(pids: Collection[int], sig: int, pid_ns: str | None = None, *, passes: int = 20) -> int:
    """:func:`signal_tree` for many spawns at once, with one walk of /proc per pass for all of them
    (a walk reads every process of the host: with a thousand commands ended together, one walk
    each kept the daemon's loop busy for minutes)."""
    seen: set[int] = set()
    table = proc_table(pid_ns)
    for pid in pids:
        leader = table.get(pid)
        if leader is not None and leader.comm != REAPER_NAME:  # never the reaper's own group
            try:
                os.killpg(leader.host_pid, sig)  # pgid = pid for a session leader we started
            except (ProcessLookupError, PermissionError):
                pass
    for _ in range(passes):
        index = _index(table)
        members: set[int] = set()
        for pid in pids:
            members |= tree_members(table, pid, index)[1]
        fresh = {p for p in members if p in table} - seen
        if not fresh:
            break
        for p in fresh:
            try:
                os.kill(table[p].host_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        seen |= fresh
        table = proc_table(pid_ns)
    return len(seen)

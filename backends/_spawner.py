"""One long-lived spawner process inside a sandbox that forks every task process on request.

Why (issue 19): starting a process through a container engine costs an engine round trip each
(``docker exec``: 50-100 ms of engine CPU, run one after another by dockerd/containerd), and a
python3 start for the reaper on top. 200 new tasks at once then queue for 15-30 s. Instead one
process, started once per sandbox (one ``docker exec``), forks task processes on request and
multiplexes their stdio over its own stdin/stdout: a start is a fork (~1 ms), not an engine call.

The spawner (``SPAWNER_PY``, the sandbox's own python3) forks, per request, a child that
becomes the *reaper* of that process: it leaves the spawner's session (``setsid``), puts the
process's pipes (or a new pseudo-terminal) on its stdio, creates the task directory if asked,
enters ``cwd`` and then runs ``base.REAPER_PY`` in place (no new python3: the code is compiled
once in the spawner). So every process has the same anatomy as under a per-process exec: a reaper
named ``executor-reaper`` (a child subreaper) whose child leads a new session and ``exec``s
``env -i K=V... argv``; the kill walk (``base.KILL_TREE_FUNCTION``), exit codes (or -N for a
signal), the reaper's start-failure line and PTY behaviour are unchanged.

Wire protocol, both ways: frames ``kind (1 byte) | channel (u32 BE) | length (u32 BE) | payload``.

daemon -> spawner                          spawner -> daemon
  S spawn   JSON {argv, cwd, mkdir, pty}     H hello (channel 0), once at start
  I stdin   bytes                            P started (payload: the reaper's pid)
  E close stdin                              F failed to start (payload: why)
  R resize  JSON [rows, cols]                O stdout bytes / e stderr bytes
  A ack     u32: output bytes consumed       Z end of output (payload b"1" stdout / b"2" stderr)
  D detach  (discard output from now)        W stdin written (u32 bytes)
                                             X exit (payload: code, or -N for signal N), after Z

Flow control: the spawner stops reading a channel's output once ``WINDOW`` bytes are sent and not
yet acknowledged (a slow consumer holds back only its own process, through its pipe); the daemon
holds back a channel's stdin writes while more than ``WINDOW`` bytes are not yet written to it.
"""

from __future__ import annotations

import asyncio
import json
import struct
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from .base import (REAPER_NAME, REAPER_PY, REAPER_PYTHONS, REAPER_START_FAILED, REAPER_START_FAILED_LINE,
                   BackendError, ByteQueue, ErrorKind, Process, PtySize)

HEADER = struct.Struct(">BII")
WINDOW = 4 << 20
ACK_EVERY = 256 << 10
HELLO = b"executor-spawner 1"

#: The spawner itself: ``python3 -I -S -c SPAWNER_PY REAPER_PY`` (argv[1] is the reaper's code).
SPAWNER_PY = r"""
import ctypes, errno, fcntl, gc, json, os, selectors, signal, struct, sys, termios, time
HEADER = struct.Struct(">BII")
WINDOW = %(window)d
_libc = ctypes.CDLL(None)
_libc.prctl(15, b"executor-spawn", 0, 0, 0)  # PR_SET_NAME: not a "python3" to pkill
# PR_SET_DUMPABLE 0: /proc/<pid>/fd of the spawner (which holds every task's pipes) is root's, so a
# task's command cannot open another task's pipes through it, nor ptrace it. Its forks set it back
# (the reaper's command reads /proc/self/environ; the reaper keeps no pipe once it forked it).
_libc.prctl(4, 0, 0, 0, 0)
REAPER = compile(sys.argv[1], "executor-reaper", "exec")
sel = selectors.DefaultSelector()
chans = {}      # channel -> state dict
by_pid = {}     # reaper pid -> channel
inbuf = bytearray()

def send(kind, chan, payload=b""):
    data = HEADER.pack(kind, chan, len(payload)) + payload
    view = memoryview(data)
    while view:
        try:
            n = os.write(1, view)
        except BlockingIOError:
            time.sleep(0.001)
            continue
        view = view[n:]

def watch(fd, events, data):
    try:
        sel.modify(fd, events, data)
    except KeyError:
        sel.register(fd, events, data)

def unwatch(fd):
    try:
        sel.unregister(fd)
    except (KeyError, ValueError):
        pass

def update(c):
    # which of the channel's fds are watched, from its state
    if c["starting"] is not None:
        return
    readable = c["detached"] or c["unacked"] < WINDOW
    for fd in c["outs"]:
        if readable:
            watch(fd, selectors.EVENT_READ | (selectors.EVENT_WRITE if fd == c["in"] and c["pending"] else 0), ("out", c))
        elif fd == c["in"] and c["pending"]:
            watch(fd, selectors.EVENT_WRITE, ("out", c))
        else:
            unwatch(fd)
    fd = c["in"]
    if fd is not None and fd not in c["outs"]:
        if c["pending"]:
            watch(fd, selectors.EVENT_WRITE, ("in", c))
        else:
            unwatch(fd)

def close_in(c):
    fd = c["in"]
    if fd is not None and fd not in c["outs"]:
        unwatch(fd)
        os.close(fd)
    c["in"] = None if fd not in c["outs"] else c["in"]
    c["closing"] = False
    c["pending"] = bytearray()

def finish(c):
    if not c["outs"] and c["status"] is not None and not c["reported"] and c["starting"] is None:
        c["reported"] = True
        send(ord("X"), c["chan"], str(c["status"]).encode())
        if c["in"] is not None:
            fd = c["in"]
            unwatch(fd)
            try:
                os.close(fd)
            except OSError:
                pass
        chans.pop(c["chan"], None)

def spawn(chan, req):
    argv, cwd, mkdir, pty = req["argv"], req["cwd"], req.get("mkdir"), req.get("pty")
    fds = []
    try:
        if pty:
            master, slave = os.openpty()
            fds += [master, slave]
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", pty[0], pty[1], 0, 0))
            child_fds = (slave, slave, slave)
        else:
            in_r, in_w = os.pipe(); fds += [in_r, in_w]
            out_r, out_w = os.pipe(); fds += [out_r, out_w]
            err_r, err_w = os.pipe(); fds += [err_r, err_w]
            child_fds = (in_r, out_w, err_w)
        st_r, st_w = os.pipe(); fds += [st_r, st_w]
        pid = os.fork()
    except OSError as exc:
        for fd in fds:
            os.close(fd)
        send(ord("F"), chan, ("fork: %%s" %% exc.strerror).encode())
        return
    if pid == 0:
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            _libc.prctl(4, 1, 0, 0, 0)
            os.setsid()
            for i, fd in enumerate(child_fds):
                os.dup2(fd, i)
            try:
                if mkdir:
                    os.makedirs(mkdir, exist_ok=True)
                os.chdir(cwd)
            except OSError as exc:
                os.write(st_w, ("cannot enter the directory %%s: %%s" %% (cwd, exc.strerror)).encode())
                os._exit(1)
            os.closerange(3, 1 << 20)
            sys.argv = ["executor-reaper", "pty" if pty else "pipe"] + argv
            exec(REAPER, {"__name__": "__reaper__"})
        except BaseException:
            pass
        os._exit(126)
    for fd in (child_fds if not pty else (slave,)):
        os.close(fd)
    os.close(st_w)
    os.set_blocking(st_r, False)
    if pty:
        os.set_blocking(master, False)
        c = {"chan": chan, "outs": {master: 1}, "in": master}
    else:
        for fd in (in_w, out_r, err_r):
            os.set_blocking(fd, False)
        c = {"chan": chan, "outs": {out_r: 1, err_r: 2}, "in": in_w}
    c.update(pid=pid, pty=bool(pty), unacked=0, detached=False, pending=bytearray(), closing=False,
             status=None, reported=False, starting=st_r, why=b"")
    chans[chan] = c
    by_pid[pid] = chan
    # The child says why it could not start on the status pipe, or closes it once it runs the
    # reaper: waited for in the loop, not here (the next request's fork does not wait for it).
    watch(st_r, selectors.EVENT_READ, ("start", c))

def on_started(c):
    # the status pipe of a starting child is readable: its error, or EOF (it runs)
    st_r = c["starting"]
    try:
        part = os.read(st_r, 4096)
    except BlockingIOError:
        return
    if part:
        c["why"] += part
        return
    unwatch(st_r)
    os.close(st_r)
    c["starting"] = None
    if c["why"]:
        for fd in list(c["outs"]) + ([c["in"]] if c["in"] is not None and c["in"] not in c["outs"] else []):
            unwatch(fd)
            os.close(fd)
        c["outs"], c["in"], c["reported"] = {}, None, True
        chans.pop(c["chan"], None)
        send(ord("F"), c["chan"], bytes(c["why"]))
        return
    send(ord("P"), c["chan"], str(c["pid"]).encode())
    update(c)
    finish(c)

def on_output(c, fd):
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return
    except OSError as exc:
        if exc.errno != errno.EIO:  # EIO: a terminal whose last slave closed
            raise
        data = b""
    if data:
        if not c["detached"]:
            c["unacked"] += len(data)
            send(ord("O") if c["outs"][fd] == 1 else ord("e"), c["chan"], data)
            if c["unacked"] >= WINDOW:
                update(c)
        return
    stream = c["outs"].pop(fd)
    if fd == c["in"]:
        c["in"] = None
        c["pending"] = bytearray()
    unwatch(fd)
    os.close(fd)
    if not c["detached"]:
        send(ord("Z"), c["chan"], b"%%d" %% stream)
    finish(c)

def on_input_ready(c):
    fd = c["in"]
    if fd is None:
        return
    if c["pending"]:
        try:
            n = os.write(fd, c["pending"])
        except BlockingIOError:
            n = 0
        except OSError:  # the process no longer reads its stdin: drop what it will never read
            n = len(c["pending"])
        if n:
            del c["pending"][:n]
            send(ord("W"), c["chan"], struct.pack(">I", n))
    if not c["pending"] and c["closing"]:
        close_in(c)
    update(c)

def request(kind, chan, payload):
    if kind == ord("S"):
        spawn(chan, json.loads(payload))
        return
    c = chans.get(chan)
    if c is None:
        return
    if kind == ord("I"):
        if c["in"] is None:
            send(ord("W"), chan, struct.pack(">I", len(payload)))
            return
        c["pending"] += payload
        on_input_ready(c)
    elif kind == ord("E"):
        if not c["pty"]:
            c["closing"] = True
            if not c["pending"]:
                close_in(c)
                update(c)
    elif kind == ord("A"):
        c["unacked"] = max(0, c["unacked"] - struct.unpack(">I", payload)[0])
        update(c)
    elif kind == ord("R"):
        rows, cols = json.loads(payload)
        if c["pty"] and c["in"] is not None:
            try:
                fcntl.ioctl(c["in"], termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
            except OSError:
                pass
    elif kind == ord("D"):
        c["detached"] = True
        update(c)

def on_request_input():
    data = os.read(0, 1 << 18)
    if not data:
        sys.exit(0)  # the daemon went away: the processes keep running until their stdin ends
    inbuf.extend(data)
    pos = 0
    while len(inbuf) - pos >= HEADER.size:
        kind, chan, size = HEADER.unpack_from(inbuf, pos)
        if len(inbuf) - pos - HEADER.size < size:
            break
        payload = bytes(inbuf[pos + HEADER.size:pos + HEADER.size + size])
        pos += HEADER.size + size
        request(kind, chan, payload)
    del inbuf[:pos]

def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        chan = by_pid.pop(pid, None)
        c = chans.get(chan)
        if c is not None:
            c["status"] = os.waitstatus_to_exitcode(status)
            finish(c)

wake_r, wake_w = os.pipe()
os.set_blocking(wake_r, False)
os.set_blocking(wake_w, False)
signal.set_wakeup_fd(wake_w)
signal.signal(signal.SIGCHLD, lambda *_: None)
signal.signal(signal.SIGPIPE, signal.SIG_IGN)
sel.register(0, selectors.EVENT_READ, ("req", None))
sel.register(wake_r, selectors.EVENT_READ, ("wake", None))
gc.collect()
gc.freeze()  # forked reapers share the spawner's objects without copying their pages
send(ord("H"), 0, b"%(hello)s")
while True:
    for key, events in sel.select():
        what, c = key.data
        if what == "req":
            on_request_input()
        elif what == "start":
            if c["chan"] in chans:
                on_started(c)
        elif what == "wake":
            try:
                while os.read(wake_r, 4096):
                    pass
            except BlockingIOError:
                pass
            reap()
        else:
            if c["chan"] not in chans:
                continue
            if events & selectors.EVENT_WRITE:
                on_input_ready(c)
            if events & selectors.EVENT_READ and key.fd in c["outs"]:
                on_output(c, key.fd)
    reap()
""" % {"window": WINDOW, "hello": HELLO.decode()}

#: ``sh -c SPAWNER_SH executor-spawner SPAWNER_PY REAPER_PY``: the spawner on the sandbox's python3.
SPAWNER_SH = r"""for p in PYTHONS; do
  [ -x "$p" ] && exec "$p" -I -S -c "$1" "$2"
done
echo "executor-spawner: no python3 in the sandbox" >&2
exit 127
""".replace("PYTHONS", " ".join(REAPER_PYTHONS))


def spawner_argv() -> list[str]:
    """The argv that starts the spawner in the sandbox (through its ``/bin/sh``)."""
    return ["/bin/sh", "-c", SPAWNER_SH, "executor-spawner", SPAWNER_PY, REAPER_PY]


def _frame(kind: bytes, chan: int, payload: bytes = b"") -> bytes:
    return HEADER.pack(kind[0], chan, len(payload)) + payload


class _ChanStream(ByteQueue):
    """One output stream of a multiplexed process: ``read()`` returns what is buffered, b"" at EOF;
    what is read is acknowledged to the spawner (its window for this process). Bounded by that
    window: the spawner stops reading the process's output while ``WINDOW`` bytes are unacknowledged."""

    def __init__(self, ack: Callable[[int], None]) -> None:
        super().__init__(WINDOW, read_size=WINDOW)
        self._ack = ack
        self.head = b""  # the first bytes (a reaper's start failure is told by them)
        self.seen = False

    def feed(self, data: bytes) -> None:
        if self._eof:
            return
        self.seen = True
        if len(self.head) < 256:
            self.head += data[: 256 - len(self.head)]
        super().feed(data)

    async def read(self) -> bytes:
        data = await super().read()
        if data:
            self._ack(len(data))
        return data


class SpawnedProcess(Process):
    """A process started by the spawner: stdio through the multiplexed connection."""

    stdout: _ChanStream
    stderr: _ChanStream | None

    def __init__(self, mux: "Spawner", chan: int, tty: bool) -> None:
        self._mux = mux
        self.chan = chan
        self._tty = tty
        self.pid = 0
        self._started: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._exit: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._unacked = 0
        self._unwritten = 0
        self._room: asyncio.Future[None] | None = None
        self._detached = False
        self.stdout = _ChanStream(self._consumed)
        self.stderr = None if tty else _ChanStream(self._consumed)
        self.lost: BackendError | None = None

    def _consumed(self, n: int) -> None:
        self._unacked += n
        if self._unacked >= ACK_EVERY and not self._detached and self._mux.alive:
            self._mux.send(_frame(b"A", self.chan, struct.pack(">I", self._unacked)))
            self._unacked = 0

    # from the spawner -------------------------------------------------------
    def on_frame(self, kind: int, payload: bytes) -> None:
        if kind == 0x4F:  # O
            self.stdout.feed(payload)
        elif kind == 0x65:  # e
            (self.stderr if self.stderr is not None else self.stdout).feed(payload)  # (an empty queue is falsy)
        elif kind == 0x5A:  # Z
            (self.stdout if payload == b"1" or self.stderr is None else self.stderr).feed_eof()
        elif kind == 0x57:  # W
            self._unwritten -= struct.unpack(">I", payload)[0]
            self._wake_writer()
        elif kind == 0x50:  # P
            self.pid = int(payload)
            if not self._started.done():
                self._started.set_result(self.pid)
        elif kind == 0x46:  # F
            err = BackendError(payload.decode(errors="replace"), ErrorKind.RESOURCE_EXHAUSTED
                               if payload.startswith(b"fork:") else ErrorKind.FAILED_PRECONDITION)
            if not self._started.done():
                self._started.set_exception(err)
            self._mux.forget(self.chan)
        elif kind == 0x58:  # X
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    stream.feed_eof()
            if not self._exit.done():
                self._exit.set_result(int(payload))
            self._mux.forget(self.chan)

    def on_lost(self, err: BackendError) -> None:
        self.lost = err
        if not self._started.done():
            self._started.set_exception(err)
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                stream.feed_eof(err)
        if not self._exit.done():
            self._exit.set_exception(err)
            self._exit.exception()  # retrieved: a caller that never waits logs nothing
        self._wake_writer()

    def _wake_writer(self) -> None:
        room, self._room = self._room, None
        if room is not None and not room.done():
            room.set_result(None)

    # Process ---------------------------------------------------------------
    async def started(self) -> int:
        return await self._started

    async def write(self, data: bytes) -> None:
        if self.lost is not None:
            raise self.lost
        if self._exit.done():
            raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION)
        view = memoryview(data)
        while view:
            while self._unwritten >= WINDOW and self.lost is None and not self._exit.done():
                self._room = asyncio.get_running_loop().create_future()
                await self._room
            if self.lost is not None:
                raise self.lost
            if self._exit.done():
                raise BackendError("the process no longer reads its stdin", ErrorKind.FAILED_PRECONDITION)
            part = bytes(view[: 1 << 16])
            view = view[len(part):]
            self._unwritten += len(part)
            self._mux.send(_frame(b"I", self.chan, part))

    async def close_stdin(self) -> None:
        if not self._tty and self.lost is None and not self._exit.done():
            self._mux.send(_frame(b"E", self.chan))

    async def wait(self) -> int:
        """The exit code, or -N for signal N. A reaper that could not fork the command (it exits
        REAPER_START_FAILED, saying why first thing on stderr) is a RESOURCE_EXHAUSTED error."""
        code = await asyncio.shield(self._exit)
        head = self.stderr.head if self.stderr is not None else b""
        if code == REAPER_START_FAILED and head.startswith(REAPER_START_FAILED_LINE) and not self.stdout.seen:
            why = head[len(REAPER_START_FAILED_LINE):].split(b"\n")[0].decode(errors="replace")
            extra = await self._mux.explain_start_failure()
            raise BackendError(f"the process could not start in {self._mux.name}: fork failed ({why})"
                               f"{'; ' + extra if extra else ''}", ErrorKind.RESOURCE_EXHAUSTED)
        return code

    def tree_gone(self) -> bool:
        """The reaper exited by itself: it had ended every descendant first (a subreaper: nothing it
        started can leave its tree). Not after SIGKILL: the reaper itself may have been killed
        (it also ends that way after its command did, so that case gets the walk too)."""
        if not self._exit.done() or self._exit.cancelled() or self._exit.exception() is not None:
            return False
        return self._exit.result() != -9

    async def why_exited(self, code: int) -> str:
        return await self._mux.explain_start_failure()

    async def resize(self, size: PtySize) -> None:
        if not self._tty:
            raise BackendError("this process has no terminal", ErrorKind.FAILED_PRECONDITION)
        if self.lost is None and not self._exit.done():
            self._mux.send(_frame(b"R", self.chan, json.dumps([size.rows, size.cols]).encode()))

    async def detach(self) -> None:
        if not self._detached:
            self._detached = True
            if self.lost is None and not self._exit.done():
                self._mux.send(_frame(b"D", self.chan))
            for stream in (self.stdout, self.stderr):
                if stream is not None:
                    stream.feed_eof()


class Spawner:
    """The daemon's end of one spawner: ``spawn()`` sends a request and waits for the fork.

    ``transport``: ``send(bytes)`` (ordered, never blocking the caller) is given by the backend,
    which feeds every byte the spawner prints to ``feed()`` and calls ``lost()`` when the
    connection ends."""

    def __init__(self, send: Callable[[bytes], None], name: str,
                 explain: Callable[[], Awaitable[str]] | None = None) -> None:
        self._send = send
        self.name = name
        self._explain = explain
        self._buf = bytearray()
        self._procs: dict[int, SpawnedProcess] = {}
        self._next = 1
        self.alive = True
        self.hello: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.error: BackendError | None = None
        self.stderr = b""

    def send(self, data: bytes) -> None:
        if self.alive:
            self._send(data)

    async def explain_start_failure(self) -> str:
        """What the backend knows about why a fork failed (e.g. its pids and memory use), or ""."""
        return await self._explain() if self._explain is not None else ""

    def forget(self, chan: int) -> None:
        self._procs.pop(chan, None)

    @property
    def running(self) -> int:
        return len(self._procs)

    def feed(self, data: bytes) -> None:
        buf = self._buf
        buf += data
        pos, end, size_h = 0, len(buf), HEADER.size
        while end - pos >= size_h:
            kind, chan, size = HEADER.unpack_from(buf, pos)
            if end - pos - size_h < size:
                break
            payload = bytes(buf[pos + size_h: pos + size_h + size])
            pos += size_h + size
            if chan == 0:
                if kind == 0x48 and not self.hello.done():  # H
                    self.hello.set_result(None)
                continue
            proc = self._procs.get(chan)
            if proc is not None:
                proc.on_frame(kind, payload)
        if pos:
            del buf[:pos]

    def lost(self, err: BackendError) -> None:
        """The connection ended: every process still known is lost, with ``err``."""
        if not self.alive:
            return
        self.alive = False
        self.error = err
        if not self.hello.done():
            self.hello.set_exception(err)
            self.hello.exception()
        procs, self._procs = self._procs, {}
        for proc in procs.values():
            proc.on_lost(err)

    def spawn(self, argv: Sequence[str], *, cwd: str, mkdir: str | None, pty: PtySize | None) -> SpawnedProcess:
        """Send the request; ``await proc.started()`` for the fork's outcome."""
        if not self.alive:
            raise self.error or BackendError("the spawner is gone", ErrorKind.LOST)
        chan = self._next
        self._next += 1
        proc = SpawnedProcess(self, chan, pty is not None)
        self._procs[chan] = proc
        request: dict[str, Any] = {"argv": list(argv), "cwd": cwd, "mkdir": mkdir,
                                   "pty": [pty.rows, pty.cols] if pty is not None else None}
        self.send(_frame(b"S", chan, json.dumps(request).encode()))
        return proc


__all__ = ["Spawner", "SpawnedProcess", "spawner_argv", "SPAWNER_PY", "REAPER_NAME"]

"""Background processes: started with the task's shell state, followed by byte offset.

A background process is one ``bash -c`` spawn in the task's sandbox (its own session
there, so a signal reaches its whole tree inside the backend). Its output is kept in
three offset-addressed logs: stdout, stderr and the interleaved view (the order in
which the daemon received the chunks). Each log keeps its newest bytes in memory up
to ``processes.memory_buffer_bytes`` and spills older ones to files under
``<state_dir>/processes/<id>/``, rotating past ``processes.spill_file_bytes`` and
keeping ``processes.spill_files`` files; a reader asking for a rotated-away offset
gets the oldest kept byte and ``rotated=True``, so a client that disconnects can
always resume and knows when it lost something.

A process starts only through the core's one admission path (``executor.admission``: the
gate judges it, including whether what is written to its stdin later could run commands the gate
never sees) and ``executor.launch``; its output passes the one output pipeline
(``executor.output``: redacted before it is stored, so reads, streams and spill files agree).

The manager is transport-neutral: ``executor.grpc_processes`` adapts it to gRPC.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal as signal_mod
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from executor import launch
from executor.admission import Admission, Admitted, Caller, Refused, StartParams
from executor.backends.base import BackendError, ByteStream, Process, Sandbox
from executor.placement import with_task
from executor.config import ProcessLimits
from executor.errors import CoreError, exhausted, from_backend, invalid, not_found, precondition
from executor.events import ApprovalNeeded, Entry, ExecRecord, ExitInfo, ExitStatus, ProcessState
from executor.output import OutputPipeline
from executor.redact import Redactor
from executor.tasks import Task, TaskManager

if TYPE_CHECKING:
    from executor.pty import PtyManager

log = logging.getLogger("executor.processes")

EXIT_DRAIN_SECONDS = 1.0  # output still read after the leader exited
DEFAULT_READ_BYTES = 1 << 20

RUNNING, EXITED, KILLED, LOST = ProcessState.RUNNING, ProcessState.EXITED, ProcessState.KILLED, ProcessState.LOST


# ---------------------------------------------------------------------------
# Offset-addressed output with a memory bound and rotating spill files
# ---------------------------------------------------------------------------


@dataclass
class _SpillFile:
    start: int  # offset of its first byte
    size: int
    path: Path


class SpillBudget:
    """The bytes all processes' spill files hold, against ``processes.max_spill_bytes``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def over(self) -> bool:
        return self.used > self.limit


def spill_budget(limit: int, directory: Path) -> int:
    """The configured budget, or a quarter of the disk's free space (64 MiB .. 16 GiB)."""
    if limit:
        return limit
    try:
        st = shutil.disk_usage(directory)
        free = st.free
    except OSError:
        free = 1 << 30
    return max(64 << 20, min(16 << 30, free // 4))


class OutputLog:
    """One byte stream addressed by offset from 0: the newest bytes in memory, older ones
    in spill files, the oldest dropped by rotation.

    Memory is flushed down to half the limit at a time, so a steady stream costs one file
    write per ``limit / 2`` bytes rather than one per chunk."""

    def __init__(self, spill_dir: Path, name: str, *, memory_bytes: int, file_bytes: int, files: int,
                 budget: "SpillBudget | None" = None) -> None:
        self.spill_dir = spill_dir
        self.budget = budget
        self.lost = ""  # why output past some point was not kept (the disk is full)
        self.dropped = 0  # bytes not kept for that reason
        self.name = name
        self.memory_bytes = memory_bytes
        self.file_bytes = file_bytes
        self.max_files = files
        self.end = 0  # offset one past the newest byte
        self._mem = bytearray()
        self._mem_start = 0
        self._files: deque[_SpillFile] = deque()
        self._serial = 0
        self.closed = False

    @property
    def start(self) -> int:
        """Offset of the oldest byte still kept."""
        return self._files[0].start if self._files else self._mem_start

    @property
    def spilled_bytes(self) -> int:
        return sum(f.size for f in self._files)

    def append(self, data: bytes) -> None:
        if not data or self.closed:
            return
        if self.lost:  # the disk is full: what is kept stays readable, the rest is counted, not kept
            self.dropped += len(data)
            return
        self._mem += data
        self.end += len(data)
        if len(self._mem) > self.memory_bytes:
            try:
                self._spill(len(self._mem) - self.memory_bytes // 2)
            except OSError as exc:
                # ENOSPC, EDQUOT, EROFS: keep what memory holds, stop growing, say why.
                self.lost = (f"output after byte {self.end} was not kept: writing its spill file failed "
                             f"({exc.strerror or exc}); free space in the state directory")
                keep = self.memory_bytes
                if len(self._mem) > keep:
                    cut = len(self._mem) - keep
                    self.dropped += cut
                    self.end -= cut
                    del self._mem[keep:]

    def _spill(self, n: int) -> None:
        """Move the oldest n bytes of memory to the spill files."""
        view = memoryview(self._mem)
        try:
            pos = 0
            while pos < n:
                current = self._files[-1] if self._files else None
                if current is None or current.size >= self.file_bytes:
                    current = self._new_file()
                take = min(n - pos, self.file_bytes - current.size)
                with open(current.path, "ab") as f:
                    f.write(view[pos:pos + take])
                current.size += take
                pos += take
                if self.budget is not None:
                    self.budget.used += take
        finally:
            view.release()
        del self._mem[:n]
        self._mem_start += n

    def _new_file(self) -> _SpillFile:
        self.spill_dir.mkdir(parents=True, exist_ok=True)
        self._serial += 1
        start = self._files[-1].start + self._files[-1].size if self._files else self._mem_start
        spill = _SpillFile(start, 0, self.spill_dir / f"{self.name or 'all'}.{self._serial}")
        self._files.append(spill)
        while len(self._files) > self.max_files:
            self._drop_oldest_file()
        return spill

    def _drop_oldest_file(self) -> None:
        old = self._files.popleft()
        old.path.unlink(missing_ok=True)
        if self.budget is not None:
            self.budget.used -= old.size

    def read(self, offset: int, max_bytes: int) -> tuple[bytes, int, bool]:
        """Up to max_bytes from offset: (data, the offset data starts at, rotated).

        ``rotated`` means bytes before the requested offset were dropped: data starts at
        the oldest kept byte instead."""
        if offset < 0:
            raise invalid(f"offset must be >= 0, got {offset}")
        if offset > self.end:
            raise invalid(f"offset {offset} is past the end of the output ({self.end} bytes so far)")
        rotated = offset < self.start
        if rotated:
            offset = self.start
        out = bytearray()
        pos = offset
        for spill in list(self._files):
            if len(out) >= max_bytes:
                break
            if spill.start <= pos < spill.start + spill.size:
                take = min(max_bytes - len(out), spill.start + spill.size - pos)
                with open(spill.path, "rb") as f:
                    f.seek(pos - spill.start)
                    chunk = f.read(take)
                out += chunk
                pos += len(chunk)
        if len(out) < max_bytes and pos >= self._mem_start:
            i = pos - self._mem_start
            out += self._mem[i:i + max_bytes - len(out)]
        return bytes(out), offset, rotated

    def release_files(self) -> int:
        """Drop every spill file (the disk budget needs the room); their bytes read as rotated.
        Returns the bytes freed."""
        freed = 0
        while self._files:
            freed += self._files[0].size
            self._drop_oldest_file()
        return freed

    def close(self) -> None:
        """Forget the output and remove its files."""
        self.closed = True
        self._mem = bytearray()
        self.release_files()


# ---------------------------------------------------------------------------
# Signals
# ---------------------------------------------------------------------------


def parse_signal(name: str) -> signal_mod.Signals:
    """SIGTERM, TERM, sigterm or 15 -> the signal; anything else INVALID_ARGUMENT."""
    text = (name or "").strip()
    if not text:
        raise invalid("signal is required, e.g. SIGTERM, TERM or 15")
    try:
        if text.isdigit():
            return signal_mod.Signals(int(text))
        upper = text.upper()
        return signal_mod.Signals[upper if upper.startswith("SIG") else "SIG" + upper]
    except (KeyError, ValueError):
        raise invalid(f"unknown signal {text[:40]!r}; use a name such as SIGTERM, TERM, SIGINT, KILL, "
                      "or a number such as 15") from None


def signal_name(number: int) -> str:
    try:
        return signal_mod.Signals(number).name
    except ValueError:
        return f"SIG{number}"


async def _exit_code(proc: Process, timeout: float) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except (asyncio.TimeoutError, BackendError):
        return -1


async def end_session(sandbox: Sandbox, pid: int, grace: float, done: asyncio.Event) -> None:
    """TERM the session inside the backend, give it ``grace`` to end, then KILL it."""
    for sig, wait in ((signal_mod.SIGTERM, grace), (signal_mod.SIGKILL, 5.0)):
        try:
            await sandbox.signal_session(pid, sig)
        except BackendError as exc:
            log.warning("signalling session %s failed: %s", pid, exc.message)
        try:
            await asyncio.wait_for(done.wait(), wait)
            return
        except asyncio.TimeoutError:
            continue


# ---------------------------------------------------------------------------
# One background process
# ---------------------------------------------------------------------------


class ManagedProcess:
    """A background process and its output, alive or finished."""

    def __init__(self, manager: "ProcessManager", task: Task, admitted: Admitted, caller: str) -> None:
        req = admitted.request
        self.id = with_task("p-" + uuid.uuid4().hex[:16], task.id)  # routable: names its task
        self.task = task
        self.task_id = task.id
        self.command = req.command
        self.backend = req.backend
        self.pty = req.terminal is not None
        self.caller = caller
        self.gate = "approved" if admitted.auth.approval_id else "allow"
        self.rule = admitted.auth.verdict.rule
        self._t0 = time.monotonic()
        self._publish = manager.publish
        self._budget = manager.budget
        self._trim = manager.trim_spill
        self.state = RUNNING
        self.exit_code = 0
        self.signal = ""
        self.message = ""
        self.started_at = time.time()
        self.ended_at = 0.0
        self.pid = 0
        self.proc: Process | None = None
        self.done = asyncio.Event()
        self._changed = asyncio.Event()
        self._last_signal = 0
        self._stdin_lock = asyncio.Lock()
        self._supervisor: asyncio.Task[None] | None = None
        limits = manager.limits
        spill = manager.dir / self.id

        def new(name: str) -> OutputLog:
            return OutputLog(spill, name, memory_bytes=limits.memory_buffer_bytes,
                             file_bytes=limits.spill_file_bytes, files=limits.spill_files, budget=manager.budget)

        stdout = new("stdout")
        # Under a terminal there is one stream: the interleaved view is stdout itself.
        self.logs = {"stdout": stdout, "stderr": new("stderr"), "": stdout if self.pty else new("")}
        # Redacted before it is stored: what is read, streamed and spilled is the same.
        self.pipeline = OutputPipeline(manager.redactor)

    @property
    def running(self) -> bool:
        return self.state == RUNNING

    @property
    def sandbox(self) -> Sandbox:
        """The task's sandbox, where the process was started."""
        return self.task.open_sandbox

    def log(self, stream: str) -> OutputLog:
        if stream not in self.logs:
            raise invalid(f"stream must be '' (interleaved), 'stdout' or 'stderr', got {stream[:20]!r}")
        return self.logs[stream]

    def _notify(self) -> None:
        """Wake every follower; they re-check and wait on the fresh event."""
        self._changed.set()
        self._changed = asyncio.Event()

    def changed(self) -> asyncio.Event:
        return self._changed

    def output(self, stream: str, data: bytes) -> None:
        if data:
            self._store(stream, self.pipeline.feed(stream, data))
            if self._budget.over:
                self._trim()

    def _store(self, stream: str, data: bytes) -> None:
        if not data:
            return
        self.logs[stream].append(data)
        if not self.pty:
            self.logs[""].append(data)
        self._notify()

    def finish(self, state: ProcessState, code: int = 0, message: str = "") -> None:
        if not self.running:
            return
        for stream, tail in self.pipeline.flush():  # what redaction still held back
            self._store(stream, tail)
        lost = next((log.lost for log in self.logs.values() if log.lost), "")
        self.state = state
        self.message = f"{message}; {lost}" if message and lost else (message or lost)
        self.exit_code = code
        self.ended_at = time.time()
        self.done.set()
        self._notify()
        status = {EXITED: ExitStatus.COMPLETED, KILLED: ExitStatus.CANCELLED}.get(state, ExitStatus.BACKEND_ERROR)
        info = ExitInfo(code, status, duration=time.monotonic() - self._t0, stdout_bytes=self.logs["stdout"].end,
                        stderr_bytes=self.logs["stderr"].end, message=message, rule=self.rule, backend=self.backend)
        self._publish(self.task_id, self.backend, info, self.gate, self.caller, Entry.START_PROCESS)

    def finish_with_code(self, code: int) -> None:
        """The wrapper's exit status: -N (killed by N), or 128+N after a signal we sent."""
        if code < 0:
            self.signal = signal_name(-code)
            self.finish(KILLED, code)
        elif self._last_signal and code == 128 + self._last_signal:
            self.signal = signal_name(self._last_signal)
            self.finish(KILLED, code)
        else:
            self.finish(EXITED, code)

    def close(self) -> None:
        for output in self.logs.values():
            output.close()
        try:
            shutil.rmtree(self.logs["stderr"].spill_dir)
        except FileNotFoundError:
            pass


# ---------------------------------------------------------------------------
# The manager
# ---------------------------------------------------------------------------


@dataclass
class Chunk:
    data: bytes
    offset: int
    next_offset: int
    rotated: bool = False
    exited: ManagedProcess | None = None  # set on the last chunk


class ProcessManager:
    """Every background process of the daemon (``core.processes``), built by the core with the
    parts it uses: the one admission path, the tasks, the redactor, the listeners and the
    terminals (whose sessions count as a task's running work)."""

    def __init__(self, admission: Admission, tasks: TaskManager, redactor: Redactor,
                 publish: Callable[..., None], pty: "PtyManager", *, limits: ProcessLimits, grace: float,
                 max_queued: int, max_read_bytes: int, state_dir: Path) -> None:
        self.admission = admission
        self.tasks = tasks
        self.redactor = redactor
        self._publish_record = publish
        self.pty = pty
        self.limits = limits
        self.grace = grace
        self.max_queued = max_queued  # limits.max_queued_per_task: requests waiting for a task's turn
        self.max_read_bytes = max_read_bytes
        self.dir = Path(state_dir) / "processes"
        # Output of a previous daemon's processes is of no use: they were ended at its
        # backend's start(); remove their spill files.
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.budget = SpillBudget(spill_budget(limits.max_spill_bytes, self.dir))
        self.procs: dict[str, ManagedProcess] = {}
        self._starting: dict[str, int] = {}  # task id -> starts between the cap check and the spawn
        self._sweeper: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Begin the retention sweep (inside the daemon's event loop)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever())

    def publish(self, task_id: str, backend: str, info: ExitInfo, gate: str, caller: str, entry: Entry) -> None:
        self._publish_record(ExecRecord(task_id, backend, info, gate, caller, entry))

    def trim_spill(self) -> None:
        """Over the disk budget: drop spill files of finished processes, oldest first; then of
        running ones, oldest first (their readers see ``rotated``)."""
        finished = sorted((p for p in self.procs.values() if not p.running), key=lambda p: p.ended_at)
        running = sorted((p for p in self.procs.values() if p.running), key=lambda p: p.started_at)
        for mp in (*finished, *running):
            if not self.budget.over:
                return
            for output in {id(o): o for o in mp.logs.values()}.values():
                output.release_files()

    # -- counts (the core's contract) ---------------------------------------------------

    def running_count(self, task_id: str) -> int:
        return sum(1 for p in self.procs.values() if p.running and p.task_id == task_id)

    def tasks_with_running(self) -> set[str]:
        busy = {p.task_id for p in self.procs.values() if p.running}
        return busy | self.pty.active_tasks() | set(self._starting)

    def _check_caps(self, task_id: str) -> None:
        running = sum(1 for p in self.procs.values() if p.running) + sum(self._starting.values())
        if running >= self.limits.max_total:
            raise exhausted(f"this daemon already runs {running} background processes (processes.max_total = "
                            f"{self.limits.max_total}); wait for some to end or signal them")
        mine = self.running_count(task_id) + self._starting.get(task_id, 0)
        if mine >= self.limits.max_per_task:
            raise exhausted(f"task {task_id!r} already runs {mine} background processes (processes.max_per_task = "
                            f"{self.limits.max_per_task}); wait for some to end or signal them")

    # -- start ----------------------------------------------------------------------------

    async def start_process(self, params: StartParams, caller: Caller) -> ManagedProcess:
        """Admit (validate, judge, ask a human if the gate says so), then spawn; returns once the
        process runs in the backend. A refusal is PERMISSION_DENIED with the gate's message.

        Judged and started in the task's turn (``Task.turn``): the process starts with the state the
        gate judged it against, not one a command queued ahead of it changes in between."""
        req = self.admission.start_request(params)
        self._check_caps(req.task_id)
        task = self.tasks.get_or_create(req.task_id, req.backend)
        async with task.turn(self.max_queued):
            if task.closed:
                raise CoreError("CANCELLED", f"task {req.task_id!r} was closed while the process waited to start")
            outcome: Admitted | Refused | None = None
            async for item in self.admission.decide(req, caller):
                if not isinstance(item, ApprovalNeeded):  # approvers see it through WatchApprovals
                    outcome = item
            if not isinstance(outcome, Admitted):
                raise CoreError("PERMISSION_DENIED", outcome.message if outcome else "the approval gate refused the command")
            self._check_caps(req.task_id)
            self._starting[req.task_id] = self._starting.get(req.task_id, 0) + 1
            try:
                return await self._spawn(outcome, caller.name, task)
            finally:
                self._starting[req.task_id] -= 1
                if not self._starting[req.task_id]:
                    del self._starting[req.task_id]

    async def _spawn(self, admitted: Admitted, caller: str, task: Task) -> ManagedProcess:
        """Start an admitted process (the caller holds the task's turn)."""
        req = admitted.request
        await self.tasks.ensure_shell(task)
        task.touch()
        mp = ManagedProcess(self, task, admitted, caller)
        try:
            spawned = await launch.spawn(admitted, task, self.tasks, size=req.terminal, lock_held=True)
        except BackendError as exc:
            raise from_backend(req.backend, exc) from exc
        mp.proc, mp.pid = spawned.proc, spawned.pid
        mp.output("stdout", spawned.first)
        self.procs[mp.id] = mp
        mp._supervisor = asyncio.get_running_loop().create_task(self._supervise(mp))
        log.info("process %s started in task %s (session %s): %s", mp.id, mp.task_id, mp.pid, req.command[:200])
        return mp

    async def _supervise(self, mp: ManagedProcess) -> None:
        """Read the process's streams until it ends; record how it ended."""
        proc = mp.proc
        assert proc is not None
        pumps = [asyncio.ensure_future(self._pump(mp, proc.stdout, "stdout"))]
        if proc.stderr is not None:
            pumps.append(asyncio.ensure_future(self._pump(mp, proc.stderr, "stderr")))
        waiter = asyncio.ensure_future(proc.wait())
        try:
            # Until a stream fails, or the leader exits (FIRST_EXCEPTION alone would also wait for
            # streams that something of the session still holds open).
            pending = {waiter, *pumps}
            while pending and not waiter.done():
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if any(not f.cancelled() and f.exception() is not None for f in done):
                    break
            # Either the streams failed, or the leader ended; a leader that exited while
            # something of its session still holds the streams gets a short drain, then
            # its session is ended (no orphans).
            if waiter.done() and not waiter.exception() and not all(p.done() for p in pumps):
                await asyncio.wait(pumps, timeout=EXIT_DRAIN_SECONDS)
                if not all(p.done() for p in pumps):
                    await self._signal_quietly(mp, signal_mod.SIGKILL)
                    await asyncio.wait(pumps, timeout=2.0)
            error = next((p.exception() for p in pumps if p.done() and p.exception()), None)
            if error is None and waiter.done():
                error = waiter.exception()
            if error is not None:
                mp.finish(LOST, message=f"backend {mp.backend!r}: {getattr(error, 'message', error)}")
                # If only the connection broke, the tree may still run there: end it if we can.
                try:
                    await asyncio.wait_for(self._signal_quietly(mp, signal_mod.SIGKILL), 10)
                except asyncio.TimeoutError:
                    pass
                return
            if not waiter.done():
                code = await _exit_code(proc, 10)
            else:
                code = waiter.result()
            mp.finish_with_code(code)
        except asyncio.CancelledError:
            mp.finish(LOST, message="the daemon stopped following the process")
            raise
        except Exception as exc:  # never leave a process RUNNING forever because of a bug here
            log.exception("supervising process %s failed", mp.id)
            mp.finish(LOST, message=f"following the process failed: {exc}")
        finally:
            for fut in (waiter, *pumps):
                fut.cancel()
            try:
                await proc.detach()
            except Exception:
                pass
            log.info("process %s ended: %s %s", mp.id, mp.state, mp.signal or mp.exit_code)

    async def _pump(self, mp: ManagedProcess, stream: ByteStream, name: str) -> None:
        while True:
            data = await stream.read()
            if not data:
                return
            mp.output(name, data)

    async def _signal_quietly(self, mp: ManagedProcess, sig: int) -> None:
        try:
            await mp.sandbox.signal_session(mp.pid, sig)
        except BackendError:
            pass

    # -- queries ------------------------------------------------------------------------

    def get(self, process_id: str) -> ManagedProcess:
        self.tasks.check_owner_of_id(process_id)  # another fleet member's process: refused, not "unknown"
        self._sweep()
        mp = self.procs.get(process_id)
        if mp is None:
            raise not_found(f"no process {process_id[:80]!r}: unknown, or it ended more than "
                            f"{self.limits.retain_seconds:g} s ago (processes.retain_seconds)")
        return mp

    def list(self, task_id: str = "") -> list[ManagedProcess]:
        self.tasks.check_owner(task_id)
        self._sweep()
        return sorted((p for p in self.procs.values() if not task_id or p.task_id == task_id),
                      key=lambda p: p.started_at)

    def read(self, process_id: str, offset: int, max_bytes: int, stream: str) -> tuple[ManagedProcess, Chunk, bool]:
        """(process, chunk, eof): eof once the process ended and everything was read."""
        mp = self.get(process_id)
        output = mp.log(stream)
        if max_bytes < 0:
            raise invalid("max_bytes must be >= 0 (0 = 1 MiB)")
        limit = min(max_bytes or DEFAULT_READ_BYTES, self.max_read_bytes)
        data, start, rotated = output.read(offset, limit)
        next_offset = start + len(data)
        return mp, Chunk(data, start, next_offset, rotated), (not mp.running and next_offset >= output.end)

    async def follow(self, process_id: str, offset: int, stream: str) -> AsyncIterator[Chunk]:
        """Chunks from offset as they arrive; the last one (empty) carries the ended process."""
        mp = self.get(process_id)
        output = mp.log(stream)
        limit = min(DEFAULT_READ_BYTES, self.max_read_bytes)
        while True:
            changed = mp.changed()
            data, start, rotated = output.read(offset, limit)
            if data or rotated:
                offset = start + len(data)
                yield Chunk(data, start, offset, rotated)
                continue
            if not mp.running:
                yield Chunk(b"", offset, offset, exited=mp)
                return
            await changed.wait()

    async def wait(self, process_id: str, timeout: float) -> ManagedProcess:
        mp = self.get(process_id)
        if timeout < 0 or timeout != timeout:
            raise invalid("timeout_seconds must be >= 0 (0 = answer at once)")
        if mp.running and timeout > 0:
            try:
                await asyncio.wait_for(mp.done.wait(), timeout)
            except asyncio.TimeoutError:
                pass
        return mp

    # -- control ------------------------------------------------------------------------

    async def write_stdin(self, process_id: str, data: bytes, close: bool) -> int:
        mp = self.get(process_id)
        if not mp.task.backend.capabilities.stdin:
            raise precondition(f"backend {mp.backend!r} cannot write to a running process's stdin; "
                               "pass input in the command instead (e.g. a here-document)")
        if not mp.running or mp.proc is None:
            raise precondition(f"process {mp.id} has ended ({mp.state}); its stdin is closed")
        async with mp._stdin_lock:
            try:
                if data:
                    await mp.proc.write(data)
                if close:
                    if mp.pty:
                        await mp.proc.write(b"\x04")  # the terminal's end-of-file character
                    else:
                        await mp.proc.close_stdin()
            except BackendError as exc:
                raise precondition(f"writing to process {mp.id}'s stdin failed: {exc.message}") from exc
        return len(data)

    async def signal(self, process_id: str, name: str) -> ManagedProcess:
        sig = parse_signal(name)
        mp = self.get(process_id)
        if not mp.task.backend.capabilities.signals:
            raise precondition(f"backend {mp.backend!r} cannot deliver signals to a process")
        if not mp.running:
            return mp  # already ended: nothing to signal
        mp._last_signal = int(sig)
        try:
            await mp.sandbox.signal_session(mp.pid, int(sig))
        except BackendError as exc:
            raise from_backend(mp.backend, exc) from exc
        if sig in (signal_mod.SIGKILL, signal_mod.SIGTERM):  # answer with the outcome when it is quick
            try:
                await asyncio.wait_for(mp.done.wait(), 2.0)
            except asyncio.TimeoutError:
                pass
        return mp

    async def _end(self, mp: ManagedProcess) -> None:
        if not mp.running:
            return
        mp._last_signal = int(signal_mod.SIGTERM)
        await end_session(mp.sandbox, mp.pid, self.grace, mp.done)
        if mp.running and mp._supervisor is not None:  # the backend does not answer: stop following
            mp._supervisor.cancel()
            try:
                await mp._supervisor
            except (asyncio.CancelledError, Exception):
                pass

    async def end_task(self, task_id: str) -> int:
        """CloseTask: end the task's running processes (and its terminals); how many."""
        mine = [p for p in self.procs.values() if p.task_id == task_id and p.running]
        await asyncio.gather(*(self._end(p) for p in mine), return_exceptions=True)
        return len(mine) + await self.pty.end_task(task_id)

    async def shutdown(self) -> None:
        """Daemon shutdown: end every process, remove every spill file."""
        if self._sweeper is not None:
            self._sweeper.cancel()
        await asyncio.gather(*(self._end(p) for p in list(self.procs.values()) if p.running),
                             return_exceptions=True)
        await self.pty.shutdown()
        for mp in self.procs.values():
            mp.close()
        self.procs.clear()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- retention ------------------------------------------------------------------------

    def _sweep(self) -> None:
        """Forget processes that ended more than retain_seconds ago."""
        cutoff = time.time() - self.limits.retain_seconds
        for pid in [p.id for p in self.procs.values() if not p.running and p.ended_at <= cutoff]:
            self.procs.pop(pid).close()

    async def _sweep_forever(self) -> None:
        interval = min(60.0, max(0.5, self.limits.retain_seconds / 4))
        while True:
            await asyncio.sleep(interval)
            self._sweep()


__all__ = ["ProcessManager", "ManagedProcess", "OutputLog", "StartParams", "Chunk", "parse_signal", "end_session",
           "RUNNING", "EXITED", "KILLED", "LOST"]

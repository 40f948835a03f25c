"""Terminals: Exec with ``pty: true`` and the interactive ``Pty`` stream.

A terminal session is one ``bash -c`` spawn on a pseudo-terminal in the task's sandbox,
started with the task's shell state (cwd, exports, functions, aliases) but not changing
it: what a program does on a terminal stays there. ``TERM`` is ``xterm-256color``.
The session is its own session in the backend, so Ctrl-C (the byte ``\\x03``) reaches
the foreground program through the terminal, and ending the session (deadline, client
cancel, CloseTask, daemon shutdown) signals its whole tree inside the backend: TERM,
a grace, then KILL.

A session ends when its program exits (after a short drain of what it printed) or
when it is ended from outside. The client closing its sending side ends nothing.

A terminal starts only through the core's one admission path (``executor.admission``: a
terminal's program is judged default-deny, since what is typed into it never reaches the gate)
and ``executor.launch``; its output passes the one output pipeline (``executor.output``).
"""

from __future__ import annotations

import asyncio
import logging
import signal as signal_mod
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Literal

from executor import launch
from executor.admission import DEFAULT_SIZE, Admission, Admitted, Caller, PtyOpenParams, Refused, pty_size
from executor.backends.base import BackendError, Sandbox
from executor.errors import CoreError, from_backend
from executor.events import ApprovalNeeded, Entry, ExecRecord, ExitInfo, ExitStatus, Finished, Output, Timings
from executor.launch import Spawned
from executor.output import OutputPipeline
from executor.processes import EXIT_DRAIN_SECONDS, end_session, parse_signal
from executor.redact import Redactor
from executor.shell import CommandResult, CommandSpec
from executor.tasks import Task, TaskManager

log = logging.getLogger("executor.pty")


#: What a terminal's queue holds, in order: its output, the end of its output, the program's exit
#: code, or the backend's failure.
TermItem = (tuple[Literal["data"], bytes] | tuple[Literal["eof"], None] | tuple[Literal["exit"], int]
            | tuple[Literal["error"], BackendError])


class Terminal:
    """A spawned program on a terminal: its output and its exit, as one ordered queue.

    Reading and waiting run in tasks of their own, so a consumer can stop waiting at a
    deadline without cancelling a backend read in the middle."""

    def __init__(self, sandbox: Sandbox, spawned: Spawned, grace: float) -> None:
        self.sandbox = sandbox
        self.proc = spawned.proc
        self.pid = spawned.pid
        self.grace = grace
        self.code: int | None = None
        self.error: BackendError | None = None
        self.exited = asyncio.Event()
        self._eof = False
        self._q: asyncio.Queue[TermItem] = asyncio.Queue()
        if spawned.first:
            self._q.put_nowait(("data", spawned.first))
        self._tasks = [asyncio.ensure_future(self._read()), asyncio.ensure_future(self._wait())]

    async def _read(self) -> None:
        try:
            while True:
                data = await self.proc.stdout.read()
                if not data:
                    break
                self._q.put_nowait(("data", data))
            self._q.put_nowait(("eof", None))
        except BackendError as exc:
            self._q.put_nowait(("error", exc))

    async def _wait(self) -> None:
        try:
            code = self.code = await self.proc.wait()
        except BackendError as exc:
            self._q.put_nowait(("error", exc))
            return
        finally:
            self.exited.set()
        self._q.put_nowait(("exit", code))

    async def _get(self, until: float | None) -> TermItem | None:
        """The next queued item; None when ``until`` (monotonic) passes first."""
        if not self._q.empty():
            return self._q.get_nowait()
        timeout = None if until is None else until - time.monotonic()
        if timeout is not None and timeout <= 0:
            return None
        try:
            return await asyncio.wait_for(self._q.get(), timeout)
        except asyncio.TimeoutError:
            return None

    async def output(self, deadline: float | None) -> AsyncIterator[bytes]:
        """Terminal bytes until the program ended; raises TimeoutError at the deadline.

        After the program exits, output is read until the terminal closes, for at most
        EXIT_DRAIN_SECONDS; then whatever of its session still holds the terminal is killed."""
        got_exit = False
        drain_until: float | None = None
        while not (self._eof and got_exit):
            until = deadline if drain_until is None else min(drain_until, deadline or drain_until)
            item = await self._get(until)
            if item is None:
                if drain_until is not None and time.monotonic() >= drain_until:
                    await self._signal(signal_mod.SIGKILL)
                    return
                raise TimeoutError
            if item[0] == "data":
                yield item[1]
            elif item[0] == "eof":
                self._eof = True
            elif item[0] == "exit":
                got_exit = True
                drain_until = time.monotonic() + EXIT_DRAIN_SECONDS
            elif item[0] == "error":
                self.error = item[1]
                return

    async def stop(self) -> bytes:
        """End the session inside the backend (TERM, grace, KILL); what it printed meanwhile."""
        if not self.exited.is_set():
            await end_session(self.sandbox, self.pid, self.grace, self.exited)
        out = bytearray()
        end = time.monotonic() + 1.0
        while not self._eof:
            item = await self._get(end)
            if item is None:
                break
            if item[0] == "data":
                out += item[1]
            elif item[0] == "eof":
                self._eof = True
            elif item[0] == "error":
                self.error = item[1]
                break
        return bytes(out)

    async def _signal(self, sig: int) -> None:
        try:
            await self.sandbox.signal_session(self.pid, sig)
        except BackendError as exc:
            log.warning("signalling terminal session %s failed: %s", self.pid, exc.message)

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        try:
            await self.proc.detach()
        except Exception:
            pass

    @property
    def exit_code(self) -> int:
        return self.code if self.code is not None else -int(signal_mod.SIGKILL)


class PtySession:
    """One ``Pty`` stream: gate, spawn, then output until the program ends.

    Input (``write``/``resize``/``signal``) waits until the program runs (``ready``)."""

    def __init__(self, manager: "PtyManager", params: PtyOpenParams, caller: Caller) -> None:
        self.manager = manager
        self.params = params
        self.caller = caller
        self.ready = asyncio.Event()
        self.term: Terminal | None = None
        self.task: Task | None = None
        self.ended_by = ""  # why it was ended from outside (task closed, daemon stopping)

    async def run(self) -> AsyncIterator[ApprovalNeeded | Output | Finished]:
        manager = self.manager
        t0 = time.monotonic()
        timings = Timings()
        req = manager.admission.pty_request(self.params)
        backend_name = req.backend

        # Judged and started in the task's turn (``Task.turn``): the terminal starts with the state
        # the gate judged, not one a command queued ahead of it changes in between.
        task = manager.tasks.get_or_create(req.task_id, backend_name)
        async with task.turn(manager.max_queued):
            if task.closed:
                raise CoreError("CANCELLED", f"task {req.task_id!r} was closed while the terminal waited to open")
            outcome: Admitted | Refused | None = None
            async for item in manager.admission.decide(req, self.caller):
                if isinstance(item, ApprovalNeeded):
                    yield item
                else:
                    outcome = item
            assert outcome is not None
            auth = outcome.auth
            gate = (("approved" if auth.allowed else "denied") if auth.approval_id
                    else ("allow" if auth.allowed else "deny"))
            timings.gate = timings.approval = time.monotonic() - t0
            if isinstance(outcome, Refused):
                info = ExitInfo(0, ExitStatus.DENIED, duration=time.monotonic() - t0, message=outcome.message,
                                rule=auth.verdict.rule, backend=backend_name, timings=timings)
                manager.publish(ExecRecord(req.task_id, backend_name, info, gate, self.caller.name, Entry.PTY))
                yield Finished(info)
                return
            await manager.tasks.ensure_shell(task)
            task.touch()
            self.task = task
            s0 = time.monotonic()
            try:
                spawned = await launch.spawn(outcome, task, manager.tasks, size=req.terminal, lock_held=True)
            except BackendError as exc:
                raise from_backend(backend_name, exc) from exc
        timings.spawn = time.monotonic() - s0
        term = self.term = Terminal(task.open_sandbox, spawned, manager.grace)
        manager._register(self)
        self.ready.set()
        out = OutputPipeline(manager.redactor, ("stdout",))
        finished = False
        r0 = time.monotonic()
        try:
            async for data in term.output(None):
                if not timings.first_byte:
                    timings.first_byte = time.monotonic() - r0
                data = out.feed("stdout", data)
                if data:
                    yield Output("stdout", data)
            for _, tail in out.flush():
                yield Output("stdout", tail)
            timings.run = time.monotonic() - r0
            task.touch()
            status, message = ExitStatus.COMPLETED, ""
            if term.error is not None:
                status, message = ExitStatus.BACKEND_ERROR, f"backend {backend_name!r}: {term.error.message}"
            elif self.ended_by:
                status, message = ExitStatus.CANCELLED, self.ended_by
            finished = True
            info = ExitInfo(term.exit_code, status, cwd=task.cwd, duration=time.monotonic() - t0,
                            stdout_bytes=out.counts["stdout"], message=message, rule=auth.verdict.rule,
                            backend=backend_name, timings=timings)
            manager.publish(ExecRecord(req.task_id, backend_name, info, gate, self.caller.name, Entry.PTY))
            yield Finished(info)
        finally:
            if not finished:  # the client went away: end the program's tree in the backend
                await asyncio.shield(term.stop())
            await term.close()
            manager._unregister(self)

    async def _terminal(self) -> Terminal:
        """The session's terminal, once it is open."""
        await self.ready.wait()
        assert self.term is not None  # set before ready
        return self.term

    async def write(self, data: bytes) -> None:
        term = await self._terminal()
        if data:
            try:
                await term.proc.write(data)
            except BackendError as exc:
                log.info("terminal input dropped: %s", exc.message)

    async def resize(self, rows: int, cols: int) -> None:
        size = pty_size(rows, cols)
        term = await self._terminal()
        try:
            await term.proc.resize(size)
        except BackendError as exc:  # the backend cannot resize: the session goes on
            log.info("terminal resize ignored: %s", exc.message)

    async def signal(self, name: str) -> None:
        sig = parse_signal(name)
        term = await self._terminal()
        try:
            await term.sandbox.signal_session(term.pid, int(sig))
        except BackendError as exc:
            log.info("terminal signal failed: %s", exc.message)

    async def end(self, reason: str) -> None:
        """End the session from outside; its stream reports the exit as cancelled."""
        if self.term is None:
            return
        self.ended_by = reason
        if not self.term.exited.is_set():
            await end_session(self.term.sandbox, self.term.pid, self.manager.grace, self.term.exited)


class PtyManager:
    """Terminals of the daemon (``core.pty``), built by the core with the parts it uses."""

    def __init__(self, admission: Admission, tasks: TaskManager, redactor: Redactor,
                 publish: Callable[[ExecRecord], None], *, grace: float, max_queued: int) -> None:
        self.admission = admission
        self.max_queued = max_queued  # limits.max_queued_per_task: requests waiting for a task's turn
        self.tasks = tasks
        self.redactor = redactor
        self.publish = publish
        self.grace = grace
        self.sessions: set[PtySession] = set()

    def _register(self, session: PtySession) -> None:
        self.sessions.add(session)

    def _unregister(self, session: PtySession) -> None:
        self.sessions.discard(session)

    def active_tasks(self) -> set[str]:
        return {s.task.id for s in self.sessions if s.task is not None}

    def open(self, params: PtyOpenParams, caller: Caller) -> PtySession:
        return PtySession(self, params, caller)

    async def exec(self, admitted: Admitted, task: Task, spec: CommandSpec, deadline: float
                   ) -> AsyncGenerator[tuple[str, bytes] | CommandResult, None]:
        """An admitted Exec with pty=true (the caller holds the task's lock and passes the output
        through its pipeline): the terminal stream as stdout, then a CommandResult. At the deadline
        the session is ended in the backend and what it printed is still returned."""
        spawned = await launch.spawn(admitted, task, self.tasks, workdir=spec.workdir,
                                     size=admitted.request.terminal or DEFAULT_SIZE, lock_held=True)
        term = Terminal(task.open_sandbox, spawned, self.grace)
        finished = False
        first_byte = 0.0
        try:
            if spec.stdin:
                await term.proc.write(spec.stdin)
            status = ExitStatus.COMPLETED
            try:
                async for data in term.output(deadline):
                    first_byte = first_byte or time.monotonic()
                    yield ("stdout", data)
            except TimeoutError:
                status = ExitStatus.TIMED_OUT
                rest = await term.stop()
                if rest:
                    yield ("stdout", rest)
            finished = True
            if term.error is not None:
                yield CommandResult(0, task.cwd, ExitStatus.BACKEND_ERROR, term.error.message, first_byte)
            else:
                yield CommandResult(term.exit_code, task.cwd, status, "", first_byte)
        finally:
            if not finished:  # cancelled, or the consumer stopped reading: end the tree
                await asyncio.shield(term.stop())
            await term.close()

    async def end_task(self, task_id: str) -> int:
        mine = [s for s in self.sessions if s.task is not None and s.task.id == task_id]
        await asyncio.gather(*(s.end("the task was closed") for s in mine), return_exceptions=True)
        return len(mine)

    async def shutdown(self) -> None:
        await asyncio.gather(*(s.end("the daemon is shutting down") for s in list(self.sessions)),
                             return_exceptions=True)


__all__ = ["PtyManager", "PtySession", "PtyOpenParams", "Terminal", "pty_size"]

"""The core: everything the daemon does, independent of the transport.

``Executor.exec`` is the path of every command: validate -> gate -> the task's queue
-> the task's shell -> the backend. The gRPC servicer (``executor.server``) is a thin
adapter over this class; another transport could serve it unchanged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from pathlib import Path

from executor import launch
from executor.admission import Admission, Admitted, Caller, ExecParams, Refused, Request
from executor.approvals import Approvals, ApprovalDecision, PendingEvent
from executor.approval import Decision, Verdict
from executor.backends import backend_class
from executor.backends.base import Backend, BackendError, Health
from executor.config import Config
from executor.errors import CoreError, from_backend, invalid, not_found, precondition, unsaved
from executor.events import ApprovalNeeded, Event, ExecRecord, ExitInfo, Finished, Output, Started, Timings
from executor.headtail import HeadTail
from executor.output import OutputPipeline
from executor.processes import ProcessManager
from executor.pty import PtyManager
from executor.redact import Redactor, options_secrets
from executor.shell import SENT, CommandResult
from executor.statedir import StateDir
from executor.tasks import SHUTTING_DOWN, Task, TaskManager, check_task_id

log = logging.getLogger("executor")


@dataclass
class RunOutcome:
    stdout: bytes
    stderr: bytes
    exit: ExitInfo


@dataclass
class _ExecRun:
    """One Exec's bookkeeping, shared by the steps of ``Executor._exec``."""

    req: Request
    caller: Caller
    task: Task
    #: The Started event while it has not gone out yet (None once sent).
    started: Started | None
    t0: float
    timings: Timings = field(default_factory=Timings)
    outcome: Admitted | Refused | None = None  # the gate's, once settled
    gate: str = ""  # how the gate settled it, as ExecRecord says: allow, deny, approved or denied

    def take_started(self) -> Started | None:
        """Started, if it has not gone out yet (then it counts as sent)."""
        started, self.started = self.started, None
        return started

    def auth_rule(self) -> str:
        return self.outcome.auth.verdict.rule if self.outcome is not None else ""


class _Collector:
    """A command's events gathered into a RunOutcome: head and tail of each stream, exact byte counts."""

    def __init__(self, limit: int) -> None:
        self.out, self.err = HeadTail(limit), HeadTail(limit)
        self.exit: ExitInfo | None = None

    def add(self, event: Event) -> None:
        if isinstance(event, Output):
            (self.out if event.stream == "stdout" else self.err).add(event.data)
        elif isinstance(event, Finished):
            self.exit = event.exit

    def outcome(self) -> RunOutcome:
        exit_info, out, err = self.exit, self.out, self.err
        assert exit_info is not None
        exit_info.truncated = exit_info.truncated or out.truncated or err.truncated
        exit_info.stdout_bytes = out.total
        exit_info.stderr_bytes = err.total
        return RunOutcome(out.value(), err.value(), exit_info)


@dataclass
class BackendStatus:
    name: str
    kind: str
    health: Health
    is_default: bool
    backend: Backend


class Executor:
    """The daemon's core: tasks, backends, the gate, processes."""

    def __init__(self, config: Config, state_dir: Path) -> None:
        self.config = config
        self.state_dir = Path(state_dir)
        # First of all: one daemon per state directory (before any backend recovers anything).
        self._state_lock = StateDir(self.state_dir).acquire()
        self.backends: dict[str, Backend] = {}
        self.kinds: dict[str, str] = {}
        env_base: dict[str, dict[str, str]] = {}
        secrets: list[str] = []
        for name, (kind, options) in config.backend_options().items():
            secrets += options_secrets(options)
            bdir = self.state_dir / "backends" / name
            bdir.mkdir(parents=True, exist_ok=True)
            self.backends[name] = backend_class(kind)(name, options, state_dir=bdir)
            self.kinds[name] = kind
            env_base[name] = {k: os.environ[k] for k in options.env_passthrough if k in os.environ}
        self.tasks = TaskManager(self.backends, env_base=env_base, max_tasks=config.limits.max_tasks,
                                 kill_grace=config.limits.kill_grace_seconds, state_dir=self.state_dir,
                                 member=config.fleet.member if config.fleet else "",
                                 members=tuple(config.fleet.members) if config.fleet else ())
        secrets += [t.secret() for t in config.auth.tokens]
        secrets += [os.environ[name] for name in config.redaction.env if os.environ.get(name)]
        self.redactor = Redactor(secrets)
        self.approvals = Approvals(config.approval, self.state_dir, shown=self.redactor.text)
        #: The one admission path of every entry point (Exec, Run, StartProcess, Pty).
        self.admission = Admission(config, self.backends, self.approvals, self.tasks,
                                   protected=(str(self.state_dir),))
        self._exec_slots = asyncio.Semaphore(config.limits.max_concurrent_execs)
        self._idempotent: OrderedDict[tuple[str, str], asyncio.Future[RunOutcome]] = OrderedDict()
        self._reaper: asyncio.Task[None] | None = None
        self.started_at = time.time()
        self.listeners: list[Callable[[ExecRecord], object]] = []  # metrics, structured logs
        # The managers are the core's own parts: they get what they need, not the core.
        self.pty = PtyManager(self.admission, self.tasks, self.redactor, self.publish,
                              grace=config.limits.kill_grace_seconds, max_queued=config.limits.max_queued_per_task)
        self.processes = ProcessManager(self.admission, self.tasks, self.redactor, self.publish, self.pty,
                                        limits=config.processes, grace=config.limits.kill_grace_seconds,
                                        max_queued=config.limits.max_queued_per_task,
                                        max_read_bytes=config.limits.max_message_bytes - (64 << 10),
                                        state_dir=self.state_dir)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        async def start_one(name: str, backend: Backend) -> None:
            try:
                await asyncio.wait_for(backend.start(), 120)
            except Exception as exc:  # a backend that cannot start is shown unavailable, never fatal
                log.warning("backend %s did not start: %s", name, exc)

        await asyncio.gather(*(start_one(n, b) for n, b in self.backends.items()))
        self.processes.start()
        if self.config.limits.task_idle_seconds > 0:
            self._reaper = asyncio.create_task(self._reap_idle())

    def begin_shutdown(self) -> None:
        """The drain begins: nothing new starts (a request still waiting for its task's turn, an exec
        slot or a shell gets its Exit, CANCELLED, instead of starting now), and pending approvals
        are denied (no approver could see them through)."""
        self.tasks.closing = True
        self.approvals.close_pending()

    async def shutdown(self) -> None:
        """End everything: background processes and terminals, then the tasks' commands (each
        running Exec gets its Exit, CANCELLED) and shells, then the backends' connections. Bounded
        in time whatever the number of tasks (``limits.kill_grace_seconds`` + about 10 s)."""
        if self._reaper is not None:
            self._reaper.cancel()
        grace = self.config.limits.kill_grace_seconds
        await self.processes.shutdown()
        await self.tasks.shutdown(budget=grace + 6)
        self.approvals.close()

        async def close(backend: Backend) -> None:
            try:
                await backend.close()
            except Exception as exc:
                log.warning("backend %s did not close cleanly: %s", backend.name, exc)

        closing = [asyncio.ensure_future(close(b)) for b in self.backends.values()]
        _, late = await asyncio.wait(closing, timeout=5)
        for fut in late:
            log.warning("a backend did not close within 5 s; leaving it to the next start's recovery")
            fut.cancel()
        self._state_lock.release()

    async def _reap_idle(self) -> None:
        idle = self.config.limits.task_idle_seconds
        while True:
            await asyncio.sleep(max(1.0, idle / 4))
            busy = self.processes.tasks_with_running()
            for task_id in self.tasks.idle(idle, busy):
                log.info("reaping idle task %s", task_id)
                task = self.tasks.get(task_id)
                if task is not None and task.shell is not None:
                    try:
                        await self.tasks.save_state(task)
                    except Exception:
                        pass
                await self.tasks.close(task_id, remove_files=False, keep_state=True)
                self.tasks.reaped += 1

    # -- requests ---------------------------------------------------------------------------

    def backend_for(self, name: str) -> str:
        return self.admission.backend_for(name)

    # -- Exec ----------------------------------------------------------------------------

    def exec(self, p: ExecParams, *, caller: Caller = Caller(), deadline: float | None = None
             ) -> AsyncGenerator[Event, None]:
        """Run one command: the stream of Started, ApprovalNeeded, Output..., then Finished.

        Checks the request at once (CoreError), then returns the stream (no extra generator layer
        on the hot path). ``deadline`` (monotonic) is the transport's own deadline: a shorter one
        counts as the timeout. Closing or cancelling the stream kills the command's tree in the
        backend."""
        req = self.admission.exec_request(p)
        if p.idempotency_key:
            return self._idempotent_exec(req, p.idempotency_key, caller, deadline)
        return self._exec(req, caller, deadline)

    def publish(self, record: ExecRecord) -> None:
        """Tell the listeners (metrics, structured logs) of a finished command of any entry point."""
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # an observer never breaks a command
                log.exception("exec listener failed")

    async def _exec(self, req: Request, caller: Caller, deadline: float | None) -> AsyncGenerator[Event, None]:
        """``started`` goes out as soon as the command is in the shell, so sending it overlaps the
        command's run; before that only if something may wait (the task's queue, an approval, a
        shell to start), so a client always hears of its call before it waits.

        The steps: the task's queue (one command at a time per task, ``Task.turn``), then, in the
        task's turn, the gate (``_admit``: judged against the state the command will run in, after
        the commands queued ahead of it ran; a human's approval is waited for in the turn), an exec
        slot, then the run (``_run_admitted``)."""
        t0 = time.monotonic()
        task = self.tasks.get_or_create(req.task_id, req.backend)
        task.touch()
        run = _ExecRun(req, caller, task, Started(os.urandom(8).hex(), req.backend, req.task_id), t0)
        max_queued = self.config.limits.max_queued_per_task
        task.check_queue(max_queued)
        if (task.lock.locked() or task.waiting) and (started := run.take_started()) is not None:
            yield started
        q0 = time.monotonic()
        async with task.turn(max_queued):
            queued = time.monotonic() - q0
            if task.closed:
                if (started := run.take_started()) is not None:
                    yield started
                yield self._not_started(run, "the task was closed while the command waited")
                return
            # Admission, in the task's turn: every command passes the gate before it reaches a backend.
            async with aclosing(self._admit(run)) as gate_events:
                async for event in gate_events:
                    yield event
            outcome = run.outcome
            assert outcome is not None  # _admit settles it or raises
            if isinstance(outcome, Refused):
                info = self._refused(run, outcome)
                if (started := run.take_started()) is not None:
                    yield started
                yield Finished(info)
                return
            if run.started is not None and (self._exec_slots.locked() or task.shell is None
                                            or not task.shell.alive):
                yield run.started
                run.started = None
            s0 = time.monotonic()
            async with self._exec_slots:
                run.timings.queue = queued + time.monotonic() - s0
                if self.tasks.closing:  # it waited (its turn, a slot) while the daemon began to shut down
                    if (started := run.take_started()) is not None:
                        yield started
                    yield self._not_started(run, SHUTTING_DOWN)
                    return
                async with aclosing(self._run_admitted(run, outcome, deadline)) as run_events:
                    async for event in run_events:
                        yield event

    async def _admit(self, run: _ExecRun) -> AsyncGenerator[Event, None]:
        """The gate's part of an Exec: settles ``run.outcome`` (Admitted or Refused) and ``run.gate``.
        When a human is asked, ``started`` goes out first, then each ApprovalNeeded."""
        req = run.req
        g0 = time.monotonic()
        await self.admission.prepare(req)
        verdict = self.admission.verdict(req)
        if verdict.decision is Decision.ASK:
            if (started := run.take_started()) is not None:
                yield started
            g0 = time.monotonic()  # after `started` went out: the gate's own time
            outcome: Admitted | Refused | None = None
            async for item in self.admission.decide(req, run.caller, verdict):
                if isinstance(item, ApprovalNeeded):
                    yield item
                else:
                    outcome = item
            assert outcome is not None
        else:
            outcome = self.admission.settle_now(req, verdict, run.caller)
        run.timings.gate = time.monotonic() - g0
        auth = outcome.auth
        if auth.approval_id:
            run.timings.approval = run.timings.gate
            run.gate = "approved" if auth.allowed else "denied"
        else:
            run.gate = "allow" if auth.allowed else "deny"
        run.outcome = outcome

    def _not_started(self, run: _ExecRun, why: str) -> Finished:
        return Finished(ExitInfo(0, "cancelled", message=why, backend=run.req.backend, timings=run.timings))

    def _refused(self, run: _ExecRun, refused: Refused) -> ExitInfo:
        """The Exit of a command the gate (or a human) refused, published like any other."""
        shown = self.redactor.text
        info = ExitInfo(0, "denied", cwd=shown(run.task.cwd), duration=time.monotonic() - run.t0,
                        message=shown(refused.message),
                        rule=refused.auth.verdict.rule, backend=run.req.backend, timings=run.timings)
        self.publish(ExecRecord(run.req.task_id, run.req.backend, info, run.gate, run.caller.name))
        return info

    async def _run_admitted(self, run: _ExecRun, admitted: Admitted, deadline: float | None
                            ) -> AsyncGenerator[Event, None]:
        """An admitted command, in its task's turn and an exec slot: the task's shell (started if
        needed), the command in it (or in a terminal), its output redacted, then Finished. Closing
        this stream closes the command's, which kills its tree in the backend."""
        task, req, timings = run.task, run.req, run.timings
        s0 = time.monotonic()
        shell = await self.tasks.ensure_shell(task)
        spec = await launch.command_spec(admitted, task)
        run_deadline = time.monotonic() + req.timeout
        if deadline is not None:
            run_deadline = min(run_deadline, deadline)
        stream: AsyncGenerator[tuple[str, bytes] | CommandResult, None]
        if req.terminal is not None:
            stream = self.pty.exec(admitted, task, spec, run_deadline)
        else:
            stream = launch.run_in_shell(admitted, shell, spec, run_deadline)
        out = OutputPipeline(self.redactor)
        result: CommandResult | None = None
        timings.spawn = time.monotonic() - s0
        r0 = time.monotonic()
        try:
            async for item in stream:
                if (started := run.take_started()) is not None:  # the first item of any kind: under way
                    yield started
                if isinstance(item, CommandResult):
                    result = item
                    break
                if item is SENT:
                    continue
                kind, data = item
                data = out.feed(kind, data)
                if data:
                    yield Output(kind, data)
        except BackendError as exc:
            result = CommandResult(0, task.cwd, "backend_error", exc.message)
        finally:
            await stream.aclose()
        for kind, tail in out.flush():
            yield Output(kind, tail)
        task.commands_run += 1
        task.touch()
        info = self._finished(run, result, out, r0)
        self.publish(ExecRecord(req.task_id, req.backend, info, run.gate, run.caller.name))
        if (started := run.take_started()) is not None:
            yield started
        yield Finished(info)

    def _finished(self, run: _ExecRun, result: CommandResult | None, out: OutputPipeline, r0: float) -> ExitInfo:
        """The Exit of a command that ran (``r0``: when its run began): its timings, and a message
        that says why it ended when that was not the command's own doing."""
        task, timings, backend_name = run.task, run.timings, run.req.backend
        if result is None:
            result = CommandResult(0, task.cwd, "backend_error", "the backend ended the command without a result")
        timings.run = time.monotonic() - r0
        if result.first_byte_at:
            timings.first_byte = max(0.0, result.first_byte_at - r0)
        message = result.message
        notice = task.sandbox.take_notice() if task.sandbox is not None else None
        if notice:  # e.g. the container was gone and has been recreated
            message = f"{message}; {notice}" if message else notice
        if result.status == "timed_out" and not message:
            message = f"timed out after {run.req.timeout:g} s; the command's process tree was killed"
        if result.status == "backend_error":
            message = f"backend {backend_name!r}: {message}"
        shown = self.redactor.text  # a cwd or a message may quote what a command made
        return ExitInfo(result.exit_code, result.status, cwd=shown(result.cwd or task.cwd),
                        duration=time.monotonic() - run.t0, stdout_bytes=out.counts["stdout"],
                        stderr_bytes=out.counts["stderr"], message=shown(message), rule=run.auth_rule(),
                        backend=backend_name, timings=timings)

    async def _idempotent_exec(self, req: Request, idempotency_key: str, caller: Caller, deadline: float | None
                               ) -> AsyncGenerator[Event, None]:
        """A retried call with the same key gets the first call's result (bounded output). The first
        call's stream says what it waits for as it happens (``started``, then ``approval_required``
        while a human is asked), like a plain Exec; its output comes with the result."""
        key = (req.task_id, idempotency_key)
        fut = self._idempotent.get(key)
        started = False
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._idempotent[key] = fut
            while len(self._idempotent) > 1024:
                self._idempotent.popitem(last=False)
            collector = _Collector(self.config.limits.run_output_bytes)
            try:
                async with aclosing(self._exec(req, caller, deadline)) as events:
                    async for event in events:
                        collector.add(event)
                        if isinstance(event, Started | ApprovalNeeded):
                            started = True
                            yield event
                outcome = collector.outcome()
            except BaseException as exc:
                self._idempotent.pop(key, None)
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else CoreError("CANCELLED", "cancelled"))
                    fut.exception()  # retrieved: no warning
                raise
            fut.set_result(outcome)
        outcome = await asyncio.shield(fut)
        if not started:
            yield Started("replay", req.backend, req.task_id)
        if outcome.stdout:
            yield Output("stdout", outcome.stdout)
        if outcome.stderr:
            yield Output("stderr", outcome.stderr)
        yield Finished(outcome.exit)

    # -- Run -----------------------------------------------------------------------------

    async def run(self, p: ExecParams, *, caller: Caller = Caller(), deadline: float | None = None) -> RunOutcome:
        """The buffered form of exec: head and tail of each stream, exact byte counts."""
        return await self._collect(self.exec(p, caller=caller, deadline=deadline))

    async def _collect(self, events: AsyncIterator[Event]) -> RunOutcome:
        collector = _Collector(self.config.limits.run_output_bytes)
        async for event in events:
            collector.add(event)
        return collector.outcome()

    # -- tasks -------------------------------------------------------------------------

    async def close_task(self, task_id: str, remove_files: bool) -> tuple[bool, int]:
        check_task_id(task_id)
        self.tasks.check_owner(task_id)
        ended = await self.processes.end_task(task_id)
        task = self.tasks.get(task_id)
        if task is None and remove_files:
            # Not live in this daemon, but its files may be: open the sandbox to remove them.
            backend = self.backends[self.config.backend]
            try:
                sandbox = await backend.sandbox(task_id)
                await sandbox.release(True)
            except BackendError as exc:
                raise from_backend(backend.name, exc) from exc
        # A request waiting for a human holds the task's turn: deny it first, so closing does not wait.
        self.approvals.forget_task(task_id)
        closed = await self.tasks.close(task_id, remove_files)
        self.approvals.forget_task(task_id)
        return closed is not None, ended

    def list_tasks(self) -> list[Task]:
        return list(self.tasks.tasks.values())

    # -- backends ------------------------------------------------------------------------

    async def list_backends(self) -> list[BackendStatus]:
        async def one(name: str, backend: Backend) -> BackendStatus:
            try:
                health = await asyncio.wait_for(backend.health(), 10)
            except asyncio.TimeoutError:
                health = Health(False, "the health check did not answer within 10 s")
            except Exception as exc:
                health = Health(False, f"the health check failed: {exc}")
            return BackendStatus(name, self.kinds[name], health, name == self.config.backend, backend)

        return list(await asyncio.gather(*(one(n, b) for n, b in self.backends.items())))

    # -- the gate ------------------------------------------------------------------------

    async def check_command(self, command: str, task_id: str = "", backend: str = "") -> Verdict:
        """CheckCommand: what Exec of ``command`` on this task and backend would be judged now (the
        same admission path: the task's place, its shell's state, the scripts it runs read from it)."""
        if task_id:
            task = self.tasks.get(task_id)
            if not backend and task is not None:
                backend = task.backend_name
            req = self.admission.exec_request(ExecParams(task_id=task_id, command=command, backend=backend))
            await self.admission.prepare(req)
            return self.admission.verdict(req)
        # No task: judged as a first command on the backend (no task's session approvals).
        self.admission.exec_request(ExecParams(task_id="check", command=command, backend=backend), routed=False)
        return self.approvals.check(command, task_id="", backend=self.backend_for(backend))

    def resolve_approval(self, approval_id: str, decision: ApprovalDecision, reason: str, caller: Caller) -> None:
        if not approval_id:
            raise invalid("approval_id is required")
        self.tasks.check_owner_of_id(approval_id)
        try:
            self.approvals.resolve(approval_id, decision, reason=reason, by=caller.name)
        except KeyError:
            raise not_found(f"no pending approval {approval_id!r} (already decided, expired or unknown)") from None
        except OSError as exc:  # the approval could not be saved (disk full, read-only): nothing changed
            raise unsaved("nothing was approved and the request is still pending (or approve it once)", exc,
                          self.approvals.always_path) from None

    def share_approval(self, command: str, backend: str, rule: str, approval_id: str, reason: str,
                       caller: Caller) -> bool:
        """ShareApproval: an APPROVE_ALWAYS from another fleet member, judged again here."""
        if not command or not rule:
            raise invalid("command and rule are required")
        backend = self.backend_for(backend)
        try:
            return self.approvals.share(command, backend, rule, approval_id=approval_id, reason=reason,
                                        by=caller.name)
        except ValueError as exc:
            raise precondition(str(exc)) from None
        except OSError as exc:
            raise unsaved("nothing was stored", exc, self.approvals.always_path) from None

    def watch_approvals(self, task_id: str | None) -> AsyncIterator[PendingEvent]:
        if task_id:
            self.tasks.check_owner(task_id)
        return self.approvals.watch(task_id or None)

    # -- files ---------------------------------------------------------------------------

    async def task_for_files(self, task_id: str, backend: str) -> Task:
        check_task_id(task_id)
        self.tasks.check_owner(task_id)
        task = self.tasks.get_or_create(task_id, self.backend_for(backend))
        if task.sandbox is None:
            try:
                task.sandbox = await task.backend.sandbox(task.id)
            except BackendError as exc:
                raise from_backend(task.backend_name, exc) from exc
        task.touch()
        return task

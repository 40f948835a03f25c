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
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from executor.approvals import Approvals, ApprovalDecision, Authorization, Pending, PendingEvent
from executor.approval import Decision, Verdict
from executor.backends import backend_class
from executor.backends.base import Backend, BackendError, Health
from executor.config import Config
from executor.errors import CoreError, exhausted, from_backend, invalid, not_found
from executor.redact import Redactor, options_secrets
from executor.events import ApprovalNeeded, Event, ExitInfo, Finished, Output, Started, Timings
from executor.headtail import HeadTail
from executor.shell import SENT, CommandResult, CommandSpec, valid_env_name
from executor.tasks import Task, TaskManager, check_task_id, resolve_inside

log = logging.getLogger("executor")


@dataclass
class ExecParams:
    """An Exec/Run request, transport-neutral."""

    task_id: str
    command: str
    workdir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_seconds: float = 0.0
    stdin: bytes = b""
    backend: str = ""
    pty: bool = False
    idempotency_key: str = ""
    merge_stderr: bool = False


@dataclass
class Caller:
    name: str = "local"
    roles: frozenset[str] = frozenset({"exec", "approve", "admin"})


@dataclass
class RunOutcome:
    stdout: bytes
    stderr: bytes
    exit: ExitInfo


@dataclass
class ExecRecord:
    """What listeners (metrics, logs) learn of each finished command. Never its output."""

    task_id: str
    backend: str
    exit: ExitInfo
    gate: str  # allow | approved | denied | deny (the floor or the policy)
    caller: str


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
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
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
                                 kill_grace=config.limits.kill_grace_seconds, state_dir=self.state_dir)
        self.approvals = Approvals(config.approval, self.state_dir)
        secrets += [t.secret() for t in config.auth.tokens]
        self.redactor = Redactor(secrets)
        self._execs = 0
        self._exec_slots = asyncio.Semaphore(config.limits.max_concurrent_execs)
        self._idempotent: OrderedDict[tuple[str, str], asyncio.Future[RunOutcome]] = OrderedDict()
        self._reaper: asyncio.Task | None = None
        self.processes = None  # executor.processes.ProcessManager, attached by the daemon
        self.started_at = time.time()
        self.listeners: list = []  # callables taking an ExecRecord (metrics, structured logs)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        async def start_one(name: str, backend: Backend) -> None:
            try:
                await asyncio.wait_for(backend.start(), 120)
            except Exception as exc:  # a backend that cannot start is shown unavailable, never fatal
                log.warning("backend %s did not start: %s", name, exc)

        await asyncio.gather(*(start_one(n, b) for n, b in self.backends.items()))
        if self.config.limits.task_idle_seconds > 0:
            self._reaper = asyncio.create_task(self._reap_idle())

    async def shutdown(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
        if self.processes is not None:
            await self.processes.shutdown()
        await self.tasks.shutdown()
        self.approvals.close()
        for backend in self.backends.values():
            try:
                await asyncio.wait_for(backend.close(), 10)
            except Exception as exc:
                log.warning("backend %s did not close cleanly: %s", backend.name, exc)

    async def _reap_idle(self) -> None:
        idle = self.config.limits.task_idle_seconds
        while True:
            await asyncio.sleep(max(1.0, idle / 4))
            busy = self.processes.tasks_with_running() if self.processes is not None else set()
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

    # -- validation --------------------------------------------------------------------

    def backend_for(self, name: str) -> str:
        name = name or self.config.backend
        if name not in self.backends:
            raise not_found(f"unknown backend {name!r}; configured backends: {', '.join(self.backends)}")
        return name

    def _validate(self, p: ExecParams) -> float:
        """Checks a request; returns the timeout in seconds."""
        limits = self.config.limits
        check_task_id(p.task_id)
        if not p.command.strip():
            raise invalid("command is empty")
        size = len(p.command.encode("utf-8", "surrogateescape"))
        if size > limits.max_command_bytes:
            raise invalid(f"command is {size} bytes; the limit is {limits.max_command_bytes} (limits.max_command_bytes)")
        if "\0" in p.command:
            raise invalid("command contains a NUL byte, which a shell cannot run")
        if p.timeout_seconds < 0 or p.timeout_seconds != p.timeout_seconds:
            raise invalid(f"timeout_seconds must be >= 0 (0 = the default {limits.default_timeout_seconds:g} s)")
        if p.timeout_seconds > limits.max_timeout_seconds:
            raise invalid(f"timeout_seconds {p.timeout_seconds:g} exceeds the maximum {limits.max_timeout_seconds:g}")
        if len(p.env) > limits.max_env_vars:
            raise invalid(f"env has {len(p.env)} variables; the limit is {limits.max_env_vars}")
        env_bytes = 0
        for name, value in p.env.items():
            if not valid_env_name(name):
                raise invalid(f"env name {name[:64]!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if "\0" in value:
                raise invalid(f"env {name} contains a NUL byte")
            env_bytes += len(name) + len(value.encode("utf-8", "surrogateescape"))
        if env_bytes > limits.max_env_bytes:
            raise invalid(f"env is {env_bytes} bytes; the limit is {limits.max_env_bytes}")
        if len(p.stdin) > limits.max_stdin_bytes:
            raise invalid(f"stdin is {len(p.stdin)} bytes; the limit is {limits.max_stdin_bytes}")
        return p.timeout_seconds or limits.default_timeout_seconds

    # -- Exec ----------------------------------------------------------------------------

    def exec(self, p: ExecParams, *, caller: Caller = Caller(), deadline: float | None = None
             ) -> AsyncIterator[Event]:
        """Run one command: the stream of Started, ApprovalNeeded, Output..., then Finished.

        Checks the request at once (CoreError), then returns the stream (no extra generator layer
        on the hot path). ``deadline`` (monotonic) is the transport's own deadline: a shorter one
        counts as the timeout. Closing or cancelling the stream kills the command's tree in the
        backend."""
        timeout = self._validate(p)
        backend_name = self.backend_for(p.backend)
        if p.idempotency_key:
            return self._idempotent_exec(p, caller, deadline, timeout, backend_name)
        return self._exec(p, caller, deadline, timeout, backend_name)

    async def gate(self, command: str, *, task_id: str, backend: str, caller: Caller,
                   interactive_pty: bool = False, verdict: Verdict | None = None
                   ) -> AsyncIterator[ApprovalNeeded | Authorization]:
        """Authorize a command: yields ApprovalNeeded while a human is asked, then the Authorization.
        ``verdict``: the gate's verdict on it, when the caller already has it.

        Cancelling the consumer withdraws the pending approval."""
        if verdict is None:
            verdict = self.approvals.check(command, task_id=task_id, backend=backend, interactive_pty=interactive_pty)
        if verdict.decision is not Decision.ASK:
            # No human to wait for (the usual case): decide and record without the machinery below.
            yield self.approvals.settle(command, verdict, task_id=task_id, backend=backend, caller=caller.name)
            return
        pending: asyncio.Queue[Pending] = asyncio.Queue()

        async def on_pending(item: Pending) -> None:
            pending.put_nowait(item)

        authorize = asyncio.ensure_future(self.approvals.authorize(
            command, task_id=task_id, backend=backend, caller=caller.name, on_pending=on_pending,
            interactive_pty=interactive_pty, verdict=verdict))
        try:
            while not authorize.done():
                getter = asyncio.ensure_future(pending.get())
                await asyncio.wait({authorize, getter}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    item = getter.result()
                    yield ApprovalNeeded(item.approval_id, item.rule, item.reason, item.segment,
                                         max(0.0, item.expires_at - time.time()))
                else:
                    getter.cancel()
        except BaseException:
            authorize.cancel()
            raise
        yield authorize.result()

    def _publish(self, p: ExecParams, backend: str, info: ExitInfo, gate: str, caller: Caller) -> None:
        record = ExecRecord(p.task_id, backend, info, gate, caller.name)
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # an observer never breaks a command
                log.exception("exec listener failed")

    async def _exec(self, p: ExecParams, caller: Caller, deadline: float | None, timeout: float,
                    backend_name: str) -> AsyncIterator[Event]:
        """``started`` goes out as soon as the command is in the shell, so sending it overlaps the
        command's run; before that only if something may wait (an approval, the task's queue, a
        shell to start), so a client always hears of its call before it waits."""
        t0 = time.monotonic()
        timings = Timings()
        task = self.tasks.get_or_create(p.task_id, backend_name)
        task.touch()
        started: Started | None = Started(os.urandom(8).hex(), backend_name, p.task_id)

        # The gate: every command passes it before it reaches a backend.
        g0 = time.monotonic()
        verdict = self.approvals.check(p.command, task_id=p.task_id, backend=backend_name)
        if verdict.decision is Decision.ASK:
            yield started
            started = None
            g0 = time.monotonic()  # after `started` went out: the gate's own time
            auth = None
            async for item in self.gate(p.command, task_id=p.task_id, backend=backend_name, caller=caller,
                                        verdict=verdict):
                if isinstance(item, ApprovalNeeded):
                    yield item
                else:
                    auth = item
        else:
            auth = self.approvals.settle(p.command, verdict, task_id=p.task_id, backend=backend_name, caller=caller.name)
        timings.gate = time.monotonic() - g0
        if auth.approval_id:
            timings.approval = timings.gate
        gate = ("approved" if auth.allowed else "denied") if auth.approval_id else ("allow" if auth.allowed else "deny")
        if not auth.allowed:
            info = ExitInfo(0, "denied", cwd=task.cwd, duration=time.monotonic() - t0, message=auth.message,
                            rule=auth.verdict.rule, backend=backend_name, timings=timings)
            self._publish(p, backend_name, info, gate, caller)
            if started is not None:
                yield started
            yield Finished(info)
            return

        # The task's queue: one command at a time per task.
        if task.waiting >= self.config.limits.max_queued_per_task:
            raise exhausted(f"task {p.task_id!r} already has {task.waiting} commands waiting; "
                            f"wait for them (limits.max_queued_per_task)")
        if started is not None and (task.lock.locked() or self._exec_slots.locked()
                                    or task.shell is None or not task.shell.alive):
            yield started
            started = None
        q0 = time.monotonic()
        task.waiting += 1
        try:
            await task.lock.acquire()
        finally:
            task.waiting -= 1
        try:
            if task.closed:
                if started is not None:
                    yield started
                yield Finished(ExitInfo(0, "cancelled", message="the task was closed while the command waited",
                                        backend=backend_name, timings=timings))
                return
            async with self._exec_slots:
                timings.queue = time.monotonic() - q0
                s0 = time.monotonic()
                shell = await self.tasks.ensure_shell(task)
                spec = CommandSpec(p.command, env=dict(p.env), stdin=p.stdin, merge_stderr=p.merge_stderr,
                                   workdir=resolve_inside(task.root, p.workdir, "workdir") if p.workdir else None)
                run_deadline = time.monotonic() + timeout
                if deadline is not None:
                    run_deadline = min(run_deadline, deadline)
                if p.pty:
                    if self.pty is None:
                        raise CoreError("UNIMPLEMENTED", "terminals are not available in this daemon")
                    stream = self.pty.exec(task, spec, run_deadline)
                else:
                    stream = shell.run(spec, deadline=run_deadline)
                counts = {"stdout": 0, "stderr": 0}
                scrub = {k: self.redactor.stream() for k in counts} if self.redactor else None
                result: CommandResult | None = None
                timings.spawn = time.monotonic() - s0
                r0 = time.monotonic()
                try:
                    async for item in stream:
                        if started is not None:  # the first item of any kind: the command is under way
                            yield started
                            started = None
                        if isinstance(item, CommandResult):
                            result = item
                            break
                        if item is SENT:
                            continue
                        kind, data = item
                        if scrub is not None:
                            data = scrub[kind].feed(data)
                            if not data:
                                continue
                        counts[kind] += len(data)
                        yield Output(kind, data)
                except BackendError as exc:
                    result = CommandResult(0, task.cwd, "backend_error", exc.message)
                finally:
                    await stream.aclose()
                for kind, redactor in (scrub or {}).items():
                    tail = redactor.flush()
                    if tail:
                        counts[kind] += len(tail)
                        yield Output(kind, tail)
                task.commands_run += 1
                task.touch()
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
                    message = f"timed out after {timeout:g} s; the command's process tree was killed"
                if result.status == "backend_error":
                    message = f"backend {backend_name!r}: {message}"
                info = ExitInfo(result.exit_code, result.status, cwd=result.cwd or task.cwd,
                                duration=time.monotonic() - t0, stdout_bytes=counts["stdout"],
                                stderr_bytes=counts["stderr"], message=message, rule=auth.verdict.rule,
                                backend=backend_name, timings=timings)
                self._publish(p, backend_name, info, gate, caller)
                if started is not None:
                    yield started
                yield Finished(info)
        finally:
            task.lock.release()

    pty = None  # executor.pty.PtyManager, attached by the daemon

    async def _idempotent_exec(self, p: ExecParams, caller: Caller, deadline: float | None, timeout: float,
                               backend_name: str) -> AsyncIterator[Event]:
        """A retried call with the same key gets the first call's result (bounded output)."""
        key = (p.task_id, p.idempotency_key)
        fut = self._idempotent.get(key)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._idempotent[key] = fut
            while len(self._idempotent) > 1024:
                self._idempotent.popitem(last=False)
            try:
                outcome = await self._collect(self._exec(p, caller, deadline, timeout, backend_name), live=None)
            except BaseException as exc:
                self._idempotent.pop(key, None)
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else CoreError("CANCELLED", "cancelled"))
                    fut.exception()  # retrieved: no warning
                raise
            fut.set_result(outcome)
        outcome = await asyncio.shield(fut)
        yield Started("replay", backend_name, p.task_id)
        if outcome.stdout:
            yield Output("stdout", outcome.stdout)
        if outcome.stderr:
            yield Output("stderr", outcome.stderr)
        yield Finished(outcome.exit)

    # -- Run -----------------------------------------------------------------------------

    async def run(self, p: ExecParams, *, caller: Caller = Caller(), deadline: float | None = None) -> RunOutcome:
        """The buffered form of exec: head and tail of each stream, exact byte counts."""
        return await self._collect(self.exec(p, caller=caller, deadline=deadline), live=None)

    async def _collect(self, events: AsyncIterator[Event], live) -> RunOutcome:
        limit = self.config.limits.run_output_bytes
        out, err = HeadTail(limit), HeadTail(limit)
        exit_info = None
        async for event in events:
            if isinstance(event, Output):
                (out if event.stream == "stdout" else err).add(event.data)
            elif isinstance(event, Finished):
                exit_info = event.exit
        assert exit_info is not None
        exit_info.truncated = exit_info.truncated or out.truncated or err.truncated
        exit_info.stdout_bytes = out.total
        exit_info.stderr_bytes = err.total
        return RunOutcome(out.value(), err.value(), exit_info)

    # -- tasks -------------------------------------------------------------------------

    async def close_task(self, task_id: str, remove_files: bool) -> tuple[bool, int]:
        check_task_id(task_id)
        ended = 0
        if self.processes is not None:
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

    def check_command(self, command: str, task_id: str = "", backend: str = "") -> Verdict:
        if not command.strip():
            raise invalid("command is empty")
        if len(command.encode("utf-8", "surrogateescape")) > self.config.limits.max_command_bytes:
            raise invalid(f"command exceeds limits.max_command_bytes ({self.config.limits.max_command_bytes})")
        if task_id:
            check_task_id(task_id)
        return self.approvals.check(command, task_id=task_id, backend=self.backend_for(backend) if backend else "")

    def resolve_approval(self, approval_id: str, decision: ApprovalDecision, reason: str, caller: Caller) -> None:
        if not approval_id:
            raise invalid("approval_id is required")
        try:
            self.approvals.resolve(approval_id, decision, reason=reason, by=caller.name)
        except KeyError:
            raise not_found(f"no pending approval {approval_id!r} (already decided, expired or unknown)") from None

    def watch_approvals(self, task_id: str | None) -> AsyncIterator[PendingEvent]:
        return self.approvals.watch(task_id or None)

    # -- files ---------------------------------------------------------------------------

    async def task_for_files(self, task_id: str, backend: str) -> Task:
        check_task_id(task_id)
        task = self.tasks.get_or_create(task_id, self.backend_for(backend))
        if task.sandbox is None:
            try:
                task.sandbox = await task.backend.sandbox(task.id)
            except BackendError as exc:
                raise from_backend(task.backend_name, exc) from exc
        task.touch()
        return task

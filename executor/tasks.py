"""Tasks: one agent's working context on one backend.

A task is created by its first use. It owns a sandbox (its directory in the backend),
a shell whose state persists between commands, and its background processes. Commands
of one task run one after the other (a FIFO lock); different tasks run in parallel.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
import re
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from executor.backends.base import Backend, BackendError, ErrorKind, Sandbox
from executor.backends._shared.background import detach
from executor.backends._shared.files import atomic_write
from executor.errors import CoreError, exhausted, from_backend, invalid, precondition
from executor.placement import SLOTS, slot_of, slot_table, task_of
from executor.shell import PersistentShell, ShellBase

log = logging.getLogger("executor.tasks")

#: A task id, matched whole (``fullmatch``: ``$`` would also match before a final newline).
TASK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_task_id(task_id: str) -> str:
    if not task_id:
        raise invalid("task_id is required")
    if not TASK_ID.fullmatch(task_id):
        raise invalid(f"task_id {task_id[:140]!r} is invalid: use 1-128 characters from [A-Za-z0-9._-], "
                      "starting with a letter or digit")
    return task_id


def resolve_inside(root: str, path: str, what: str = "path") -> str:
    """An absolute POSIX path for ``path`` (relative to ``root``) that stays inside root *as a string*.

    Only the fast first pass: symlinks are resolved where the files are, by
    ``Sandbox.resolve_path`` (and inside ``Sandbox.put_archive`` / ``get_archive``)."""
    if "\0" in path:
        raise invalid(f"{what} contains a NUL byte")
    joined = posixpath.normpath(posixpath.join(root, path))
    root_n = posixpath.normpath(root)
    if joined != root_n and not joined.startswith(root_n.rstrip("/") + "/"):
        raise invalid(f"{what} {path!r} leaves the task's directory {root_n}")
    return joined


async def resolve_workdir(task: "Task", workdir: str) -> str | None:
    """The requested workdir as an absolute path inside the task's directory, resolved by the
    backend on its own filesystem (CoreError INVALID_ARGUMENT when it leads outside); None when
    none was requested (the command runs in the task's cwd). Relative to the task's directory.

    The one resolution of a workdir: admission judges the command there (the gate's cwd) and the
    launcher runs it there, with the path admission resolved."""
    if not workdir:
        return None
    inside = resolve_inside(task.root, workdir, "workdir")  # a first check on the string
    if task.sandbox is None:
        return inside
    try:
        return await task.sandbox.resolve_path(workdir, what="workdir")
    except BackendError as exc:
        if exc.kind is ErrorKind.INVALID_ARGUMENT:
            raise CoreError("INVALID_ARGUMENT", exc.message) from exc
        raise from_backend(task.backend_name, exc) from exc


#: Why a request that had not started yet when the daemon began to shut down was not run.
SHUTTING_DOWN = "the daemon is shutting down; the command was not started (send it again once the daemon is back)"


@dataclass
class Task:
    id: str
    backend_name: str
    backend: Backend
    created_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    commands_run: int = 0
    sandbox: Sandbox | None = None
    shell: ShellBase | None = None
    closed: bool = False
    waiting: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _setup: asyncio.Lock = field(default_factory=asyncio.Lock)
    saved_state: str = ""  # shell state restored from disk after a daemon restart
    _home: str | None = None

    @property
    def busy(self) -> bool:
        return self.lock.locked()

    def check_queue(self, max_queued: int) -> None:
        """RESOURCE_EXHAUSTED when ``max_queued`` requests already wait for the task's turn."""
        if self.waiting >= max_queued:
            raise exhausted(f"task {self.id!r} already has {self.waiting} requests waiting for their turn (a "
                            f"command or process start waiting for a human's approval holds the turn); wait "
                            f"for them or have the approval decided (limits.max_queued_per_task = {max_queued})")

    @asynccontextmanager
    async def turn(self, max_queued: int) -> AsyncIterator[None]:
        """The task's turn (its FIFO lock), taken by every request that runs in the task's shell or
        with its state (Exec, Run, StartProcess, Pty) *before* the gate judges it: the verdict, an
        approval included, is made against the state the command will run in, not the one before
        the commands queued ahead of it ran. At most ``max_queued`` requests wait (else
        RESOURCE_EXHAUSTED), so a task has at most one pending approval at a time."""
        self.check_queue(max_queued)
        self.waiting += 1
        try:
            await self.lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self.lock.release()

    @property
    def root(self) -> str:
        return self.sandbox.root if self.sandbox else ""

    @property
    def cwd(self) -> str:
        return self.shell.cwd if self.shell else self.root

    @property
    def open_sandbox(self) -> Sandbox:
        """The sandbox, for code that runs after it was opened (``ensure_shell``, ``task_for_files``,
        a spawn in it); it is never closed while the task lives."""
        assert self.sandbox is not None, "the task's sandbox is opened before it is used"
        return self.sandbox

    @property
    def home(self) -> str:
        """$HOME of the task's commands (the task directory on most backends)."""
        if self.sandbox is None:
            return ""
        if self._home is None:
            self._home = self.backend.base_env(self.sandbox).get("HOME", "")
        return self._home

    def touch(self) -> None:
        self.last_used = time.time()


class TaskManager:
    """Finds or creates tasks, and ends them."""

    def __init__(self, backends: dict[str, Backend], *, env_base: dict[str, dict[str, str]], max_tasks: int,
                 kill_grace: float, state_dir: Path, member: str = "", members: tuple[str, ...] = ()) -> None:
        self.backends = backends
        self.env_base = env_base  # backend name -> variables copied from the daemon (env_passthrough)
        self.max_tasks = max_tasks
        self.kill_grace = kill_grace
        self.tasks: dict[str, Task] = {}
        self.state_dir = state_dir / "shells"
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.reaped = 0
        self.pools: dict[str, ShellPool] = {}
        #: Set when the daemon begins to shut down: nothing new starts (``ensure_shell`` refuses).
        self.closing = False
        # The fleet (executor.placement): this daemon serves only the slots it owns.
        self.member = member
        self._owners = slot_table(members) if members else ()
        self._mine = frozenset(s for s in range(SLOTS) if self._owners and self._owners[s] == member)

    def check_owner(self, task_id: str) -> None:
        """Refuse a task that another fleet member owns (FAILED_PRECONDITION naming the owner): a
        misrouted call fails here instead of starting a second shell for the task on this daemon.
        Every entry point that names a task, a process or an approval passes through here."""
        if not self._owners or not task_id:
            return
        slot = slot_of(task_id)
        if slot not in self._mine:
            raise precondition(f"task {task_id[:140]!r} belongs to fleet member {self._owners[slot]!r}, not to this "
                               f"daemon ({self.member!r}): route the call by its `x-executor-task` header "
                               "(docs/operations.md, Beyond one machine)")

    def check_owner_of_id(self, resource_id: str) -> None:
        """The same for a process or approval id (``<id>@<task_id>``)."""
        self.check_owner(task_of(resource_id))

    def get(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id)

    def get_or_create(self, task_id: str, backend_name: str) -> Task:
        self.check_owner(task_id)
        task = self.tasks.get(task_id)
        if task is not None:
            if task.backend_name != backend_name:
                raise precondition(f"task {task_id!r} runs on backend {task.backend_name!r}, not {backend_name!r}; "
                                   "close it first (CloseTask) to move it")
            return task
        if len(self.tasks) >= self.max_tasks:
            raise exhausted(f"this daemon already holds {len(self.tasks)} tasks (limits.max_tasks); close some first")
        task = Task(task_id, backend_name, self.backends[backend_name])
        saved = self._state_file(task_id)
        if saved.exists():
            try:
                task.saved_state = saved.read_text()
            except OSError:
                pass
        self.tasks[task_id] = task
        return task

    async def open_sandbox(self, task: Task) -> Sandbox:
        """The task's sandbox, opened (created) if it is not yet: admission needs the task's place
        (its directory, cwd and HOME) to judge its first command (BackendError -> CoreError)."""
        if task.sandbox is None:
            async with task._setup:
                if task.sandbox is None:
                    try:
                        task.sandbox = await task.backend.sandbox(task.id)
                    except BackendError as exc:
                        raise from_backend(task.backend_name, exc) from exc
        return task.sandbox

    async def ensure_shell(self, task: Task) -> ShellBase:
        """The task's sandbox and shell, created on first use (BackendError -> CoreError).

        Every entry point that starts a command (Exec, Run, StartProcess, Pty) passes here just
        before it starts it: once the daemon shuts down, nothing new starts (UNAVAILABLE), so no
        command begins after the shutdown ended the tasks' shells, in a shell it never ends."""
        if self.closing:
            raise CoreError("UNAVAILABLE", SHUTTING_DOWN)
        if task.shell is None:
            async with task._setup:
                if task.shell is None:  # not made by a caller that held _setup before us
                    shell = await self._new_shell(task)
                    if self._closing_now():  # the shutdown began while it started: it may not have seen it
                        await shell.terminate()
                        raise CoreError("UNAVAILABLE", SHUTTING_DOWN)
                    task.shell = shell
        return task.shell

    def _closing_now(self) -> bool:
        """``closing``, read again after an await (a plain re-read is narrowed away by mypy)."""
        return self.closing

    async def _new_shell(self, task: Task) -> ShellBase:
        """A started shell for the task: a pre-started one made the task's, or a new one restoring
        its saved state (BackendError -> CoreError)."""
        try:
            if task.sandbox is None:
                task.sandbox = await task.backend.sandbox(task.id)
            sandbox = task.sandbox
            env = self.command_env(task)
            if not task.saved_state:
                pooled = await self._from_pool(task, sandbox, env)
                if pooled is not None:
                    return pooled
            shell = PersistentShell(sandbox, env, cwd=sandbox.root, state=task.saved_state,
                                    kill_grace=self.kill_grace)
            await shell.start()
        except BackendError as exc:
            raise from_backend(task.backend_name, exc) from exc
        return shell

    def pool(self, backend_name: str) -> ShellPool | None:
        """The backend's pool of pre-started shells (created on first use), or None without one."""
        pool = self.pools.get(backend_name)
        if pool is None:
            backend = self.backends[backend_name]
            caps = backend.capabilities
            size = backend.warm_shells() if caps.persistent_shell and caps.stdin else 0
            if size <= 0:
                return None
            pool = self.pools[backend_name] = ShellPool(
                backend, size, env={**self.env_base.get(backend_name, {}), "EXECUTOR_TASK_ID": ""},
                kill_grace=self.kill_grace)
        return pool

    async def _from_pool(self, task: Task, sandbox: Sandbox, env: dict[str, str]) -> PersistentShell | None:
        """A pre-started shell made the task's own (its directory, its environment), or None (no
        pool, none ready, or the handoff failed: the caller starts a shell as usual)."""
        pool = self.pool(task.backend_name)
        if pool is None:
            return None
        shell = pool.take()
        if shell is None:
            return None
        try:
            await pool.hand_over(shell, sandbox, env)
        except BackendError as exc:
            log.warning("task %s: a pre-started shell could not be handed over (%s); starting a new one",
                        task.id, exc.message)
            pool.discard(shell)
            return None
        return shell

    def command_env(self, task: Task) -> dict[str, str]:
        """The clean environment a task's commands start from: never the daemon's own. The task's
        sandbox is open (its callers open it first)."""
        env = task.backend.base_env(task.open_sandbox)
        env.update(self.env_base.get(task.backend_name, {}))
        env["EXECUTOR_TASK_ID"] = task.id
        return env

    def _state_file(self, task_id: str) -> Path:
        return self.state_dir / f"{task_id}.sh"

    async def save_state(self, task: Task) -> None:
        """Keep the shell's state on disk so a restarted daemon restores it."""
        if task.shell is None:
            return
        state = await task.shell.snapshot()
        if not state:
            return
        path = self._state_file(task.id)
        try:
            atomic_write(path, state.encode(), mode=0o600)
        except OSError as exc:
            # An older save must not come back as this task's state after the restart (an earlier
            # cwd and variables, silently): the task restarts with a fresh shell, and the log says so.
            path.unlink(missing_ok=True)
            log.warning("task %s: its shell state could not be saved to %s (%s); it starts with a fresh shell "
                        "after the restart", task.id, path, exc.strerror or exc)

    async def close(self, task_id: str, remove_files: bool, keep_state: bool = False) -> Task | None:
        """End the task: interrupt its command, kill its shell, release its sandbox.

        ``keep_state`` (idle reaping) keeps the saved shell state, so the task's next command
        finds its cwd and variables as if it had never been reaped."""
        task = self.tasks.pop(task_id, None)
        if task is None:
            return None
        task.closed = True
        if task.shell is not None:
            task.shell.interrupt("cancelled", "the task was closed")
            async with task.lock:  # let the interrupted command report, then end the shell
                await task.shell.terminate()
        if task.sandbox is not None:
            try:
                await task.sandbox.release(remove_files)
            except BackendError:
                pass
        if not keep_state:
            self._state_file(task_id).unlink(missing_ok=True)
        return task

    async def shutdown(self, budget: float = 10.0) -> None:
        """Daemon shutdown within ``budget`` seconds, however many tasks: a running command is
        interrupted (its caller gets an Exit, CANCELLED), every idle shell's state is saved
        concurrently, then every shell is ended concurrently. What does not finish in time is left
        to the backend's recovery at the next start."""
        self.closing = True
        loop = asyncio.get_running_loop()
        end = loop.time() + budget
        pools = [asyncio.ensure_future(pool.close()) for pool in self.pools.values()]
        saves = []
        for task in list(self.tasks.values()):
            if task.shell is None:
                continue
            if task.busy:
                task.shell.interrupt("cancelled", "the daemon is shutting down")
            else:
                saves.append(asyncio.ensure_future(self.save_state(task)))
        await _within(saves, budget / 2)
        ends = [asyncio.ensure_future(self._end_shell(t)) for t in self.tasks.values() if t.shell is not None]
        await _within(ends + pools, max(0.1, end - loop.time()))

    async def _end_shell(self, task: Task) -> None:
        if task.shell is not None:
            await task.shell.terminate()

    def idle(self, idle_seconds: float, busy_ids: set[str]) -> list[str]:
        now = time.time()
        return [t.id for t in self.tasks.values()
                if not t.busy and t.id not in busy_ids and now - t.last_used > idle_seconds]


class ShellPool:
    """Pre-started shells of one backend, for new tasks (``Backend.warm_shells``).

    Each shell starts in the backend's neutral ``pool_sandbox`` with the environment every task
    shares (no task's id, directory or $HOME). ``take`` gives one to exactly one task, never back:
    ``hand_over`` makes it enter the task's directory (made if missing) and swaps in the task's
    environment, unsetting what is not the task's, in one command through the shell's own
    protocol, before the task's first command. Nothing ran in it before, so nothing can leak from
    one task to another. Taking one starts a refill in the background."""

    RETRY_SECONDS = 2.0

    def __init__(self, backend: Backend, size: int, *, env: dict[str, str], kill_grace: float) -> None:
        self.backend = backend
        self.size = size
        self._extra_env = env
        self.kill_grace = kill_grace
        self.ready: list[PersistentShell] = []
        self._filling: asyncio.Task[None] | None = None
        #: Shells being ended in the background (``discard``): held here until done, so none is
        #: collected mid-flight, and awaited by ``close``.
        self._ending: set[asyncio.Task[None]] = set()
        self.closed = False
        self.started = 0  # shells started for the pool
        self.handed = 0  # shells handed to tasks

    def take(self) -> PersistentShell | None:
        shell = None
        while self.ready:
            candidate = self.ready.pop(0)
            if candidate.alive:
                shell = candidate
                break
            self.discard(candidate)
        self.refill()
        return shell

    def discard(self, shell: PersistentShell) -> None:
        """End a shell no task will use (dead in the pool, or its handoff failed), in the background;
        ``close`` waits for it."""
        detach(shell.terminate(), f"backend {self.backend.name}: ending a pre-started shell", into=self._ending)

    def refill(self) -> None:
        if not self.closed and (self._filling is None or self._filling.done()):
            self._filling = asyncio.ensure_future(self._fill())

    async def wait_full(self, timeout: float = 30.0) -> None:
        """Until the pool holds ``size`` shells (tests, benchmarks)."""
        self.refill()
        loop = asyncio.get_running_loop()
        end = loop.time() + timeout
        while len([s for s in self.ready if s.alive]) < self.size and loop.time() < end:
            if self._filling is None or self._filling.done():
                self.refill()
            await asyncio.sleep(0.01)

    async def _fill(self) -> None:
        failures = 0
        while not self.closed and len(self.ready) < self.size:
            try:
                sandbox = await self.backend.pool_sandbox()
                env = {**self.backend.base_env(sandbox), **self._extra_env}
                shell = PersistentShell(sandbox, env, cwd=sandbox.root, kill_grace=self.kill_grace)
                await shell.start()
            except BackendError as exc:
                failures += 1
                log.info("backend %s: a warm shell did not start (%s)", self.backend.name, exc.message)
                if failures >= 3:
                    return  # the next take() tries again
                await asyncio.sleep(self.RETRY_SECONDS)
                continue
            self.started += 1
            await self._keep(shell)

    async def _keep(self, shell: PersistentShell) -> None:
        """A shell just started for the pool joins it, unless the pool was closed meanwhile."""
        if self.closed:
            await shell.terminate()
        else:
            self.ready.append(shell)

    async def hand_over(self, shell: PersistentShell, sandbox: Sandbox, env: dict[str, str]) -> None:
        """Make ``shell`` the task's: its directory (``sandbox.root``) and exactly ``env``."""
        await shell.hand_over(sandbox, env)
        self.handed += 1

    async def close(self) -> None:
        self.closed = True
        if self._filling is not None:
            self._filling.cancel()
        shells, self.ready = self.ready, []
        # The shells still ready, and those being ended in the background (cancelled with this call).
        await asyncio.gather(*(s.terminate() for s in shells), *self._ending, return_exceptions=True)


async def _within(futures: Sequence[asyncio.Future[None]], seconds: float) -> None:
    """Wait for futures at most ``seconds``; cancel the rest. Their failures are not news here."""
    if not futures:
        return
    done, pending = await asyncio.wait(futures, timeout=seconds)
    for fut in pending:
        fut.cancel()
    for fut in done:
        if not fut.cancelled():
            fut.exception()


__all__ = ["Task", "TaskManager", "ShellPool", "check_task_id", "resolve_inside", "resolve_workdir", "TASK_ID",
           "CoreError", "SHUTTING_DOWN"]

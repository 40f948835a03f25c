"""Starting what admission let through: the only code that hands a request's command to a backend.

Each function here takes an :class:`~executor.admission.Admitted` (which only admission can
make) and the task it runs in; nothing else in the core writes a request's command into a shell
or spawns it in a sandbox (``tests/test_walls.py`` checks that). The requested ``workdir`` runs
where admission resolved it (``Request.rundir``, by ``executor.tasks.resolve_workdir``, inside the
backend against its filesystem, so a symlink a command planted in the task directory cannot lead
the command out of it): the directory the gate judged the command at.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass

from executor.admission import Admitted, Request
from executor.approval import changes_shell_state
from executor.backends.base import BackendError, ErrorKind, Process, PtySize
from executor.shell import CommandResult, CommandSpec, PidHandshake, ShellBase, wrapped_script
from executor.tasks import Task, TaskManager, resolve_workdir

__all__ = ["Spawned", "command_spec", "run_in_shell", "spawn", "task_state", "BASH", "PTY_TERM"]

BASH = ["bash", "--noprofile", "--norc", "-c"]
PTY_TERM = "xterm-256color"
HANDSHAKE_SECONDS = 60.0  # cloud backends can take a while to start a process


def _admitted(admitted: Admitted) -> Admitted:
    if not isinstance(admitted, Admitted):  # the structural guarantee, kept even under -O
        raise TypeError("a command reaches a backend only with an Admitted from executor.admission")
    return admitted


async def command_spec(admitted: Admitted, task: Task) -> CommandSpec:
    """What the task's shell runs for an admitted Exec."""
    req = _admitted(admitted).request
    return CommandSpec(req.command, env=dict(req.env), stdin=req.stdin, merge_stderr=req.merge_stderr,
                       workdir=await _workdir(req, task), want_state=changes_shell_state(req.command))


async def _workdir(req: Request, task: Task) -> str | None:
    """Where the request runs: the directory admission resolved and the gate judged it at
    (``Request.rundir``); resolved here only for a request admission did not prepare."""
    if req.rundir is not None:
        return req.rundir
    return await resolve_workdir(task, req.workdir)


def run_in_shell(admitted: Admitted, shell: ShellBase, spec: CommandSpec, deadline: float
                 ) -> AsyncGenerator[tuple[str, bytes] | CommandResult, None]:
    """An admitted Exec in the task's persistent shell (the caller holds the task's lock)."""
    _admitted(admitted)
    return shell.run(spec, deadline=deadline)


async def task_state(task: Task, lock_held: bool) -> tuple[str, bool]:
    """The task's shell state as a script a fresh bash can eval, and whether it is fresh.

    Asking the live shell is a round trip through it, which must not overlap a command.
    With the task's lock held (by the caller, or taken here when free) the shell is asked;
    when another command is running the last saved state is used (stale: exports made
    since the last snapshot are missing), so a background start never waits for a long
    foreground command."""
    shell = task.shell
    if shell is None:
        return task.saved_state, True
    if lock_held:
        return await shell.snapshot(), True
    if task.lock.locked():
        return shell.state, False
    async with task.lock:
        return await shell.snapshot(), True


@dataclass
class Spawned:
    proc: Process
    pid: int  # the session id inside the sandbox
    first: bytes  # stdout bytes that arrived with the handshake


async def spawn(admitted: Admitted, task: Task, tasks: TaskManager, *, env: Mapping[str, str] | None = None,
                workdir: str | None = None, size: PtySize | None = None, lock_held: bool) -> Spawned:
    """Start an admitted command (a background process, a terminal; "" = the task's interactive
    shell) in the task's sandbox with its shell state; wait for the pid handshake.

    ``workdir`` is already resolved (:func:`resolve_workdir`) when given; otherwise the request's
    is resolved here. Raises BackendError."""
    req = _admitted(admitted).request
    if workdir is None and req.workdir:
        workdir = await _workdir(req, task)
    handshake = PidHandshake()
    state, fresh = await task_state(task, lock_held)
    if not fresh and workdir is None:
        workdir = task.cwd  # the cwd after the last finished command, newer than a stale state
    extra = dict(req.env if env is None else env)
    if size is not None:
        extra = {"TERM": PTY_TERM, **extra}
    script = wrapped_script(state, req.command or None, cwd=task.cwd, env=extra, workdir=workdir,
                            merge_stderr=req.merge_stderr, interactive=not req.command)
    assert task.sandbox is not None, "a task's sandbox comes with its shell (TaskManager.ensure_shell)"
    proc = await task.sandbox.spawn([*BASH, script], cwd=task.root, env=tasks.command_env(task), pty=size)
    first = bytearray()
    try:
        async with asyncio.timeout(HANDSHAKE_SECONDS):
            while handshake.pid is None:
                data = await proc.stdout.read()
                if not data:
                    code = await _exit_code(proc, 5)
                    why = await _stderr_tail(proc)
                    raise BackendError(f"the process exited before it started (exit code {code})"
                                       + (f": {why}" if why else ""), ErrorKind.FAILED_PRECONDITION)
                first += handshake.feed(data)
    except TimeoutError:
        await proc.detach()
        raise BackendError(f"the process did not start within {HANDSHAKE_SECONDS:g} s", ErrorKind.UNAVAILABLE) from None
    except BaseException:
        await proc.detach()
        raise
    # A backend whose spawns' own pids are not unique in the sandbox names the session itself.
    session = getattr(proc, "session", None)
    return Spawned(proc, handshake.pid if session is None else session, bytes(first))


async def _stderr_tail(proc: Process, limit: int = 2000) -> str:
    """What a process that died before its handshake said on stderr (the sandbox's own error, say)."""
    if proc.stderr is None:
        return ""
    buf = bytearray()
    try:
        async with asyncio.timeout(1.0):
            while len(buf) < 64 << 10:
                chunk = await proc.stderr.read()
                if not chunk:
                    break
                buf += chunk
    except (TimeoutError, BackendError):
        pass
    return buf.decode(errors="replace").strip()[-limit:]


async def _exit_code(proc: Process, timeout: float) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), timeout)
    except (asyncio.TimeoutError, BackendError):
        return -1

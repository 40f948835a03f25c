"""One admission path: every way a command can start in a backend passes through here.

Exec and Run, StartProcess and Pty (and whatever entry point comes later) hand their request
to :class:`Admission`, which

1. validates it (task id, command, env, timeout, stdin, terminal size, what the backend can do),
2. asks the gate for a verdict, including whether live input to the program could run commands the
   gate never sees (an interactive shell, a REPL, an editor with a shell escape, stdin fed to a
   shell), and
3. settles it: allowed, denied, or a human asked through the approval broker (audited either way).

What comes out is an :class:`Admitted` (or a :class:`Refused`). The functions that start anything
in a backend for a request (``executor.launch``) take an ``Admitted`` and nothing else, and an
``Admitted`` can only be made here, from an authorization that allowed exactly that request: an
entry point cannot start a command it did not admit, by construction rather than by convention.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import posixpath

from executor.approval import (MAX_SCRIPT_BYTES, Decision, GateContext, ScriptFile, Verdict, interactive_risk,
                               needed_files)
from executor.approvals import Approvals, Authorization, Pending
from executor.backends.base import Backend, PtySize
from executor.config import Config
from executor.errors import invalid, not_found, precondition
from executor.events import ApprovalNeeded, Entry
from executor.shell import valid_env_name
from executor.tasks import TaskManager, check_task_id

__all__ = ["Admission", "Admitted", "Caller", "Entry", "ExecParams", "PtyOpenParams", "Refused", "Request",
           "StartParams", "pty_size"]

log = logging.getLogger("executor.admission")

MAX_DIMENSION = 10000
MAX_SCRIPT_ROUNDS = 4  # scripts sourcing scripts: levels the core reads for the gate
MAX_SCRIPTS = 32  # files read for one command
DEFAULT_SIZE = PtySize(24, 80)


@dataclass
class Caller:
    name: str = "local"
    roles: frozenset[str] = frozenset({"exec", "approve", "admin"})


# -- requests, transport-neutral ----------------------------------------------------------


@dataclass
class ExecParams:
    """An Exec/Run request."""

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
class StartParams:
    """A StartProcess request."""

    task_id: str
    command: str
    workdir: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    backend: str = ""
    pty: bool = False
    rows: int = 0
    cols: int = 0
    merge_stderr: bool = False


@dataclass
class PtyOpenParams:
    """The ``open`` of a Pty stream."""

    task_id: str
    command: str = ""  # empty: the task's shell, interactive
    backend: str = ""
    rows: int = 0
    cols: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str = ""


def pty_size(rows: int, cols: int) -> PtySize:
    """A requested terminal size; 0 means the default (24x80)."""
    if rows < 0 or cols < 0 or rows > MAX_DIMENSION or cols > MAX_DIMENSION:
        raise invalid(f"terminal size rows={rows} cols={cols} is out of range (1..{MAX_DIMENSION}; 0 = default)")
    return PtySize(rows or DEFAULT_SIZE.rows, cols or DEFAULT_SIZE.cols)


@dataclass
class Request:
    """A validated request of any entry point, as the gate and the launcher see it."""

    entry: Entry
    task_id: str
    command: str  # "" only for a Pty running the task's shell
    backend: str
    env: Mapping[str, str]
    workdir: str  # as requested (resolved in the backend at launch)
    timeout: float = 0.0  # Exec: seconds
    stdin: bytes = b""  # Exec: fixed input
    terminal: PtySize | None = None  # runs on a pseudo-terminal of this size
    merge_stderr: bool = False
    #: Why input the gate never sees could run commands (live input to a shell, stdin fed to a
    #: shell); None when it cannot.
    interactive: str | None = None
    #: The text the gate judges: the command, plus Exec's stdin when the program runs its input.
    judged: str = ""
    #: Where the task is, for relative paths (set by the core from the task before the verdict),
    #: with the scripts the command runs read from the backend (``Admission.prepare``).
    context: GateContext | None = None
    located: bool = False

    @property
    def shown(self) -> str:
        """The command as approvers and the audit log see it."""
        return self.judged or "(the task's interactive shell)"


class Admitted:
    """Proof that a request passed admission and was allowed. Only :class:`Admission` makes one;
    ``executor.launch`` starts nothing without one."""

    __slots__ = ("request", "auth")

    def __init__(self, key: object, request: Request, auth: Authorization) -> None:
        if key is not _KEY:
            raise TypeError("an Admitted is made by Admission only: every command passes the gate")
        if not auth.allowed:
            raise TypeError("a refused request cannot be admitted")
        self.request = request
        self.auth = auth


_KEY = object()


@dataclass
class Refused:
    """The gate (or a human, or silence) said no."""

    request: Request
    auth: Authorization

    @property
    def message(self) -> str:
        return self.auth.message or "the approval gate refused the command"


class Admission:
    """Validation, the gate's verdict, approvals and audit for every entry point (``core.admission``)."""

    def __init__(self, config: Config, backends: dict[str, Backend], approvals: Approvals, tasks: TaskManager,
                 protected: tuple[str, ...] = ()) -> None:
        self.config = config
        self.limits = config.limits
        self.backends = backends
        self.approvals = approvals
        self.tasks = tasks
        self.protected = protected  # paths judged like system paths wherever a task is (the state dir)
        self._contexts: dict[str, tuple[str, str, GateContext]] = {}  # task -> (cwd, state, its context)

    async def prepare(self, req: Request) -> None:
        """Where the task is (``_locate``), and the scripts the command runs, read from the task's
        backend for the gate: it names them (``needed_files``, pure), the sandbox reads them in one
        round trip, and the gate judges their contents as if inline. Scripts that source scripts are
        followed ``MAX_SCRIPT_ROUNDS`` levels; what is left, or cannot be read, is judged unread (asks).
        A command that runs no script costs one cached lookup."""
        self._locate(req)
        context = req.context
        if context is None:
            return
        task = self.tasks.get(req.task_id)
        sandbox = task.sandbox if task is not None else None
        for _ in range(MAX_SCRIPT_ROUNDS):
            wanted = needed_files(req.judged, context)
            if not wanted:
                return
            files = [ScriptFile(p, None, "not_read") for p in wanted[MAX_SCRIPTS:]]
            wanted = wanted[:MAX_SCRIPTS]
            try:
                if sandbox is None:
                    raise LookupError("the task has no sandbox")
                read = await sandbox.read_scripts(wanted, MAX_SCRIPT_BYTES)
            except Exception as exc:  # unreadable scripts are asked about, never run unjudged
                log.info("reading scripts for the gate failed on task %s: %s", req.task_id, exc)
                read = [(p, None, "unreadable") for p in wanted]
            for path, data, why in read:
                if data is not None and b"\0" in data:
                    files.append(ScriptFile(path, None, "binary"))
                elif data is not None:
                    files.append(ScriptFile(path, data.decode("utf-8", "replace")))
                else:
                    files.append(ScriptFile(path, None, why or "unreadable"))
            context = dataclasses.replace(context, files=context.files + tuple(files))
            req.context = context
        wanted = needed_files(req.judged, context)
        if wanted:
            req.context = dataclasses.replace(
                context, files=context.files + tuple(ScriptFile(p, None, "not_read") for p in wanted))

    def _locate(self, req: Request) -> None:
        """Give the gate the task's place: its cwd, its directory, its HOME, and what to protect
        (the daemon's state dir, and the directory holding every task's directory: the others')."""
        req.located = True
        task = self.tasks.get(req.task_id)
        if task is None or task.sandbox is None or task.backend_name != req.backend:
            return
        # What the task's shell holds (aliases, functions, variables), as it last reported it: kept
        # current by asking for it with the end of every command that may change it (launch).
        state = task.shell.state if task.shell is not None else task.saved_state
        cwd = task.cwd
        known = self._contexts.get(req.task_id)
        if known is not None and known[0] == cwd and known[1] is state and known[2].root == task.root:
            req.context = known[2]  # the same place as the last command: no new context to build
            return
        root = task.root
        protected = (*self.protected, posixpath.dirname(root.rstrip("/")))
        req.context = GateContext(cwd=cwd or root, root=root, home=task.home, protected=protected,
                                  shell_state=state)
        if len(self._contexts) > 4096:
            self._contexts.clear()
        self._contexts[req.task_id] = (cwd, state, req.context)

    # -- 1. validation --------------------------------------------------------------------

    def backend_for(self, name: str) -> str:
        name = name or self.config.backend
        if name not in self.backends:
            raise not_found(f"unknown backend {name!r}; configured backends: {', '.join(self.backends)}")
        return name

    def _check_common(self, task_id: str, command: str, env: Mapping[str, str], *, empty_ok: bool = False,
                      routed: bool = True) -> None:
        limits = self.limits
        check_task_id(task_id)
        if routed:
            self.tasks.check_owner(task_id)  # a task another fleet member owns: refused before the gate
        if not command.strip() and not empty_ok:
            raise invalid("command is empty")
        size = len(command.encode("utf-8", "surrogateescape"))
        if size > limits.max_command_bytes:
            raise invalid(f"command is {size} bytes; the limit is {limits.max_command_bytes} (limits.max_command_bytes)")
        if "\0" in command:
            raise invalid("command contains a NUL byte, which a shell cannot run")
        if len(env) > limits.max_env_vars:
            raise invalid(f"env has {len(env)} variables; the limit is {limits.max_env_vars}")
        env_bytes = 0
        for name, value in env.items():
            if not valid_env_name(name):
                raise invalid(f"env name {name[:64]!r} is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if "\0" in value:
                raise invalid(f"env {name} contains a NUL byte")
            env_bytes += len(name) + len(value.encode("utf-8", "surrogateescape"))
        if env_bytes > limits.max_env_bytes:
            raise invalid(f"env is {env_bytes} bytes; the limit is {limits.max_env_bytes}")

    def _check_workdir(self, workdir: str) -> None:
        if "\0" in workdir:
            raise invalid("workdir contains a NUL byte")

    def exec_request(self, p: ExecParams, *, routed: bool = True) -> Request:
        """Validate an Exec/Run request (CoreError when it cannot be served). ``routed=False``: no
        task of this daemon's is named (CheckCommand without one), so no fleet ownership check."""
        limits = self.limits
        self._check_common(p.task_id, p.command, p.env, routed=routed)
        self._check_workdir(p.workdir)
        if p.timeout_seconds < 0 or p.timeout_seconds != p.timeout_seconds:
            raise invalid(f"timeout_seconds must be >= 0 (0 = the default {limits.default_timeout_seconds:g} s)")
        if p.timeout_seconds > limits.max_timeout_seconds:
            raise invalid(f"timeout_seconds {p.timeout_seconds:g} exceeds the maximum {limits.max_timeout_seconds:g}")
        if len(p.stdin) > limits.max_stdin_bytes:
            raise invalid(f"stdin is {len(p.stdin)} bytes; the limit is {limits.max_stdin_bytes}")
        backend = self.backend_for(p.backend)
        if p.pty and not self.backends[backend].capabilities.pty:
            raise precondition(f"backend {backend!r} has no terminal support; run the command without pty")
        judged, interactive = p.command, None
        if p.stdin:
            interactive = interactive_risk(p.command, terminal=False)
            if interactive is not None:
                # The program runs its input as commands: the input is judged as part of the command
                # (the floor holds on it), and running it needs a human.
                judged = f"{p.command}\n{p.stdin.decode('utf-8', 'surrogateescape')}"
        return Request(Entry.EXEC, p.task_id, p.command, backend, p.env, p.workdir,
                       timeout=p.timeout_seconds or limits.default_timeout_seconds, stdin=p.stdin,
                       terminal=DEFAULT_SIZE if p.pty else None, merge_stderr=p.merge_stderr,
                       interactive=interactive, judged=judged)

    def start_request(self, p: StartParams) -> Request:
        """Validate a StartProcess request. Its stdin stays writable (WriteProcessStdin): live input."""
        self._check_common(p.task_id, p.command, p.env)
        self._check_workdir(p.workdir)
        backend = self.backend_for(p.backend)
        caps = self.backends[backend].capabilities
        if not caps.background:
            raise precondition(f"backend {backend!r} cannot run background processes; use Exec instead")
        if p.pty and not caps.pty:
            raise precondition(f"backend {backend!r} has no terminal support; start the process without pty")
        if p.rows < 0 or p.cols < 0 or p.rows > MAX_DIMENSION or p.cols > MAX_DIMENSION:
            raise invalid(f"size rows and cols must be between 1 and {MAX_DIMENSION} (0 = 24x80)")
        size = PtySize(p.rows or 24, p.cols or 80) if p.pty else None
        interactive = interactive_risk(p.command, terminal=p.pty)
        return Request(Entry.START_PROCESS, p.task_id, p.command, backend, p.env, p.workdir, terminal=size,
                       merge_stderr=p.merge_stderr, interactive=interactive, judged=p.command)

    def pty_request(self, p: PtyOpenParams) -> Request:
        """Validate a Pty ``open``: a terminal with live input, so default-deny on what runs on it."""
        self._check_common(p.task_id, p.command, p.env, empty_ok=True)
        self._check_workdir(p.workdir)
        backend = self.backend_for(p.backend)
        if not self.backends[backend].capabilities.pty:
            raise precondition(f"backend {backend!r} has no terminal support; use Exec without pty")
        size = pty_size(p.rows, p.cols)
        command = p.command if p.command.strip() else ""
        interactive = interactive_risk(command, terminal=True) if command else "the task's interactive shell"
        return Request(Entry.PTY, p.task_id, command, backend, p.env, p.workdir, terminal=size,
                       interactive=interactive, judged=command)

    # -- 2. the verdict -------------------------------------------------------------------

    def verdict(self, req: Request) -> Verdict:
        """What the gate says of this request right now (no human asked, nothing recorded), judged
        where the task is: relative paths against its cwd, its directory and its HOME (and, after
        ``prepare``, with the scripts it runs read from the backend)."""
        if not req.located:
            self._locate(req)
        return self.approvals.check(req.judged, task_id=req.task_id, backend=req.backend, interactive=req.interactive,
                                    context=req.context)

    # -- 3. settling ------------------------------------------------------------------------

    def settle_now(self, req: Request, verdict: Verdict, caller: Caller) -> Admitted | Refused:
        """Settle a verdict that asks nobody (allow or deny); recorded in the audit log."""
        auth = self.approvals.settle(req.shown, verdict, task_id=req.task_id, backend=req.backend,
                                     caller=caller.name)
        return Admitted(_KEY, req, auth) if auth.allowed else Refused(req, auth)

    async def decide(self, req: Request, caller: Caller, verdict: Verdict | None = None
                     ) -> AsyncIterator[ApprovalNeeded | Admitted | Refused]:
        """Settle a request: ``ApprovalNeeded`` while a human is asked, then ``Admitted`` or ``Refused``.
        Cancelling the consumer withdraws the pending approval."""
        if verdict is None:
            await self.prepare(req)
            verdict = self.verdict(req)
        if verdict.decision is not Decision.ASK:
            yield self.settle_now(req, verdict, caller)
            return
        pending: asyncio.Queue[Pending] = asyncio.Queue()

        async def on_pending(item: Pending) -> None:
            pending.put_nowait(item)

        authorize = asyncio.ensure_future(self.approvals.authorize(
            req.shown, task_id=req.task_id, backend=req.backend, caller=caller.name, on_pending=on_pending,
            interactive=req.interactive, verdict=verdict, context=req.context))
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
        auth = authorize.result()
        yield Admitted(_KEY, req, auth) if auth.allowed else Refused(req, auth)

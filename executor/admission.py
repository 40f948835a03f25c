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
import shlex

from executor.approval import (MAX_SCRIPT_BYTES, Decision, GateContext, ScriptFile, Verdict, interactive_risk,
                               needed_files)
from executor.approvals import Approvals, Authorization, Pending
from executor.backends.base import Backend, PtySize
from executor.config import Config
from executor.errors import invalid, not_found, precondition
from executor.events import ApprovalNeeded, Entry
from executor.shell import ansi_c_quote, valid_env_name
from executor.tasks import TaskManager, check_task_id, resolve_workdir

__all__ = ["Admission", "Admitted", "Caller", "Entry", "ExecParams", "PtyOpenParams", "Refused", "Request",
           "StartParams", "pty_size"]

log = logging.getLogger("executor.admission")

MAX_DIMENSION = 10000
MAX_SCRIPT_ROUNDS = 4  # scripts sourcing scripts: levels the core reads for the gate
MAX_SCRIPTS = 32  # files read for one command
DEFAULT_SIZE = PtySize(24, 80)

# -- the request's env: names it may not set ---------------------------------------------------
#
# A request's ``env`` is exported in the task's shell for the command (``shell_protocol``). The gate
# judges the command with those values in effect (``Admission._locate``) and approvers see them
# (``Request.shown``), but a variable that is itself code for bash, the loader or a common tool, or
# that moves where the command's paths lead, would run or redirect code the gate never reads. Such a
# name is refused (INVALID_ARGUMENT): set it in the command (``NAME=value cmd``, ``export``), where
# the gate judges it like any other code.

#: Exact names, each with why.
CODE_ENV: dict[str, str] = {
    # bash itself
    "ENV": "sh and posix-mode bash run the file it names",
    "PROMPT_COMMAND": "an interactive bash runs it before each prompt",
    **{f"PS{i}": "bash expands it as code (command substitutions) when it prints the prompt or a trace"
       for i in range(5)},
    "SHELLOPTS": "sets bash options for every bash it starts",
    "IFS": "changes how bash splits every unquoted word the gate reads",
    "CDPATH": "moves where cd goes, away from the directory the gate judges",
    "PWD": "the gate takes $PWD for the directory it judges the command at",
    "OLDPWD": "moves where 'cd -' goes, away from the directory the gate judges",
    "GLOBIGNORE": "changes what globs match (and turns on dotglob)",
    "POSIXLY_CORRECT": "puts the task's shell in posix mode (its framing uses it; the gate judges bash's default mode)",
    "HISTFILE": "an interactive shell writes its history to the file it names",
    "INPUTRC": "binds keys of an interactive shell to text it types",
    "MAIL": "an interactive shell expands and reports it",
    "MAILPATH": "an interactive shell expands and reports it",
    "SHELL": "programs start it as the shell (script, screen, make's sub-shells, editors' ! commands)",
    "EXECIGNORE": "hides programs from bash's PATH search",
    # the dynamic loader and libc
    "GCONV_PATH": "glibc loads character-set modules (code) from it",
    "LOCPATH": "glibc loads locale data from it",
    "HOSTALIASES": "changes what host names resolve to",
    # interpreters
    "PYTHONSTARTUP": "python runs the file it names",
    "PYTHONPATH": "python imports (and runs sitecustomize from) it",
    "PYTHONHOME": "python loads its standard library (code) from it",
    "PYTHONUSERBASE": "python runs usercustomize from it",
    "PYTHONINSPECT": "python reads commands from stdin after the script",
    "PYTHONBREAKPOINT": "python imports and calls what it names",
    "PYTHONWARNINGS": "python imports the modules its filters name",
    "PERL5OPT": "perl takes options (-M: load code) from it",
    "PERL5LIB": "perl loads modules (code) from it",
    "PERLLIB": "perl loads modules (code) from it",
    "PERL5DB": "perl runs it as its debugger",
    "RUBYOPT": "ruby takes options (-r: load code) from it",
    "RUBYLIB": "ruby loads code from it",
    "NODE_OPTIONS": "node takes options (--require: load code) from it",
    "NODE_PATH": "node loads modules (code) from it",
    "JAVA_TOOL_OPTIONS": "the JVM takes options (-javaagent: load code) from it",
    "_JAVA_OPTIONS": "the JVM takes options (-javaagent: load code) from it",
    "JDK_JAVA_OPTIONS": "the java launcher takes options (-javaagent: load code) from it",
    "DOTNET_STARTUP_HOOKS": ".NET loads and runs the assemblies it names",
    "OPENSSL_CONF": "OpenSSL reads its config (engines: load code) from it",
    # tools that run a command named by a variable
    "GIT_SSH_COMMAND": "git runs it as a command",
    "GIT_SSH": "git runs it as a program",
    "GIT_EXTERNAL_DIFF": "git runs it as a command",
    "GIT_CONFIG_PARAMETERS": "git takes config (core.pager, aliases, hooks: commands) from it",
    "GIT_CONFIG_COUNT": "git takes config (core.pager, aliases, hooks: commands) from GIT_CONFIG_KEY_n/VALUE_n",
    "GIT_CONFIG": "git reads config (commands) from the file it names",
    "GIT_CONFIG_GLOBAL": "git reads config (commands) from the file it names",
    "GIT_CONFIG_SYSTEM": "git reads config (commands) from the file it names",
    "GIT_EDITOR": "git runs it as a command",
    "GIT_SEQUENCE_EDITOR": "git runs it as a command",
    "GIT_PAGER": "git runs it as a command",
    "GIT_ASKPASS": "git runs it as a program",
    "GIT_PROXY_COMMAND": "git runs it as a command",
    "GIT_EXEC_PATH": "git runs its sub-commands from it",
    "GIT_TEMPLATE_DIR": "git copies hooks (code) from it into new repositories",
    "GIT_ALLOW_PROTOCOL": "can allow git's ext:: transport, which runs commands",
    "EDITOR": "programs (git, crontab, less, sudoedit) run it as a command",
    "VISUAL": "programs (git, crontab, less) run it as a command",
    "PAGER": "programs (git, man, psql) run it as a command",
    "MANPAGER": "man runs it as a command",
    "LESSOPEN": "less runs it as a command",
    "LESSCLOSE": "less runs it as a command",
    "BROWSER": "programs run it as a command",
    "SSH_ASKPASS": "ssh runs it as a program",
    "SUDO_ASKPASS": "sudo runs it as a program",
    "RSYNC_RSH": "rsync runs it as a command",
    "RSYNC_CONNECT_PROG": "rsync runs it as a command",
    "CVS_RSH": "cvs runs it as a program",
    "TAR_OPTIONS": "tar takes options (--to-command, --checkpoint-action=exec: commands) from it",
    "MAKEFLAGS": "make takes options and variables (SHELL, --eval: commands) from it",
    "GNUMAKEFLAGS": "make takes options and variables (SHELL, --eval: commands) from it",
    "MFLAGS": "make takes options from it",
    "MAKEFILES": "make reads (and runs) the makefiles it names",
    "RUSTC_WRAPPER": "cargo runs it as a program",
    "RUSTC_WORKSPACE_WRAPPER": "cargo runs it as a program",
}

#: Name prefixes (matched as written, or case-insensitively where the tool reads them so), with why.
CODE_ENV_PREFIXES: tuple[tuple[str, str, bool], ...] = (
    ("BASH", "bash's own variables (BASH_ENV runs a file in every bash; BASH_FUNC_ imports functions; "
             "BASHOPTS sets options)", False),
    ("LD_", "the dynamic loader's (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH load code into every program)", False),
    ("GIT_CONFIG_KEY_", "git takes config (commands) from it", False),
    ("GIT_CONFIG_VALUE_", "git takes config (commands) from it", False),
    ("NPM_CONFIG_", "npm takes config (script-shell, node-options: commands) from it", True),
)


#: The prefix of the task shell's own variables (``executor.shell_protocol``): never a request's.
RESERVED_ENV_PREFIX = "__ex_"


def env_refusal(name: str) -> str | None:
    """Why a request's ``env`` may not set ``name`` (None: it may): the whole message."""
    if name.startswith(RESERVED_ENV_PREFIX):
        return (f"env name {name} is reserved: names starting with {RESERVED_ENV_PREFIX} belong to the task shell's "
                "own framing; use another name")
    why = _code_env(name)
    if why is None:
        return None
    return (f"env may not set {name}: {why}. Set it in the command instead (`{name}=... command` or `export "
            f"{name}=...`), where the approval gate judges it")


def _code_env(name: str) -> str | None:
    why = CODE_ENV.get(name)
    if why is not None:
        return why
    for prefix, why, fold in CODE_ENV_PREFIXES:
        if (name.upper() if fold else name).startswith(prefix):
            return why
    return None


def _display_quote(value: str) -> str:
    """A shell word for ``value`` that an approver can read: shlex's quoting, or $'...' when the
    value holds control or non-ASCII characters (so nothing hides in the display)."""
    if value.isascii() and value.isprintable():
        return shlex.quote(value)
    return ansi_c_quote(value)


def _export_lines(env: Mapping[str, str]) -> str:
    """The request's env as ``export -p`` prints it (``declare -x NAME="value"``), for the gate's
    ``GateContext.shell_state``: the command is judged with these values in effect."""
    out = []
    for name, value in env.items():
        escaped = "".join("\\" + c if c in '\\"$`' else c for c in value)
        out.append(f'declare -x {name}="{escaped}"\n')
    return "".join(out)


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
    #: The directory the command runs in when a workdir was requested: resolved by admission
    #: (``prepare``), judged there by the gate, and run there by the launcher. None: the task's cwd.
    rundir: str | None = None

    @property
    def shown(self) -> str:
        """The command as approvers and the audit log see it, with what it runs with: the
        request's env (exported for it) and its workdir, as lines a shell would run before it."""
        text = self.judged or "(the task's interactive shell)"
        head = [f"export {name}={_display_quote(value)}" for name, value in self.env.items()]
        where = self.rundir if self.rundir is not None else self.workdir
        if where:
            head.append(f"cd -- {_display_quote(where)}")
        return "\n".join([*head, text]) if head else text


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
        A command that runs no script costs one cached lookup.

        The task is made and its sandbox opened here when they are not yet (every command needs
        them to run; the gate needs them to judge the first one), and a requested workdir is
        resolved here, once: the command is judged where it will run (``Request.rundir``)."""
        task = self.tasks.get_or_create(req.task_id, req.backend)  # CoreError: another backend, too many
        sandbox = await self.tasks.open_sandbox(task)
        if req.workdir:
            req.rundir = await resolve_workdir(task, req.workdir)
        self._locate(req)
        context = req.context
        if context is None:
            return
        for _ in range(MAX_SCRIPT_ROUNDS):
            wanted = needed_files(req.judged, context)
            if not wanted:
                return
            files = [ScriptFile(p, None, "not_read") for p in wanted[MAX_SCRIPTS:]]
            wanted = wanted[:MAX_SCRIPTS]
            try:
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
        """Give the gate the task's place: the directory the command runs in (its workdir, else the
        task's cwd), the task's directory, its HOME, what to protect (the daemon's state dir, and the
        directory holding every task's directory: the others'), and the shell's state with the
        request's env exported. Without the task's sandbox (``prepare`` not run, or it failed) the
        place is unknown and the command is judged from ``/``: a relative path is taken as high up
        as it can reach (fail closed), never as an unknown path that passes."""
        req.located = True
        task = self.tasks.get(req.task_id)
        if task is None or task.sandbox is None or task.backend_name != req.backend:
            req.context = GateContext(cwd="/", protected=self.protected, shell_state=_export_lines(req.env))
            return
        # What the task's shell holds (aliases, functions, variables), as it last reported it: kept
        # current by asking for it with the end of every command that may change it (launch).
        state = task.shell.state if task.shell is not None else task.saved_state
        cwd = req.rundir if req.rundir is not None else task.cwd
        root = task.root
        if req.env:  # this request's own variables: a context of its own
            req.context = GateContext(cwd=cwd or root, root=root, home=task.home,
                                      protected=(*self.protected, posixpath.dirname(root.rstrip("/"))),
                                      shell_state=state + ("" if not state or state.endswith("\n") else "\n")
                                      + _export_lines(req.env))
            return
        known = self._contexts.get(req.task_id)
        if known is not None and known[0] == cwd and known[1] is state and known[2].root == root:
            req.context = known[2]  # the same place as the last command: no new context to build
            return
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
            refusal = env_refusal(name)
            if refusal is not None:
                raise invalid(refusal)
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
        getter: asyncio.Future[Pending] | None = None
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
            if getter is not None:
                getter.cancel()  # else a cancelled request left it pending ("Task was destroyed" at shutdown)
            raise
        auth = authorize.result()
        yield Admitted(_KEY, req, auth) if auth.allowed else Refused(req, auth)

"""What the core emits while running a command; the gRPC adapter turns these into messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Entry(enum.Enum):
    """The ways a command can start."""

    EXEC = "exec"  # Exec and Run: one command in the task's shell (or on a terminal with pty=true)
    START_PROCESS = "start_process"  # a background process; its stdin stays writable
    PTY = "pty"  # an interactive terminal stream


class ExitStatus(enum.StrEnum):
    """How a command ended (``Exit.status``). A ``str``: compares and serialises as its value."""

    COMPLETED = "completed"  # it ran to its end (any exit code)
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"  # a cancel, a task close or the daemon's shutdown
    DENIED = "denied"  # the gate (or an approver) refused it
    BACKEND_ERROR = "backend_error"  # the backend failed under it


class ProcessState(enum.StrEnum):
    """Where a background process is in its life (``ProcessInfo.state``); a ``str`` too."""

    RUNNING = "running"
    EXITED = "exited"
    KILLED = "killed"
    LOST = "lost"


@dataclass
class Timings:
    gate: float = 0.0
    approval: float = 0.0
    queue: float = 0.0
    spawn: float = 0.0
    first_byte: float = 0.0
    run: float = 0.0


@dataclass
class ExitInfo:
    exit_code: int
    status: str  # an ExitStatus
    cwd: str = ""
    duration: float = 0.0
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    message: str = ""
    rule: str = ""
    backend: str = ""
    timings: Timings = field(default_factory=Timings)


@dataclass
class Started:
    exec_id: str
    backend: str
    task_id: str


@dataclass
class Output:
    stream: str  # stdout | stderr
    data: bytes


@dataclass
class ApprovalNeeded:
    approval_id: str
    rule: str
    reason: str
    segment: str
    timeout: float


@dataclass
class Finished:
    exit: ExitInfo


@dataclass
class ExecRecord:
    """What listeners (metrics, logs) learn of each finished command, of any entry point. Never
    its output."""

    task_id: str
    backend: str
    exit: ExitInfo
    gate: str  # allow | approved | denied | deny (the floor or the policy)
    caller: str
    entry: Entry = Entry.EXEC


Event = Started | Output | ApprovalNeeded | Finished

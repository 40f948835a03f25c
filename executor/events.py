"""What the core emits while running a command; the gRPC adapter turns these into messages."""

from __future__ import annotations

from dataclasses import dataclass, field


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
    status: str  # completed | timed_out | cancelled | denied | backend_error
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


Event = Started | Output | ApprovalNeeded | Finished

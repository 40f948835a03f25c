from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExitStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXIT_STATUS_UNSPECIFIED: _ClassVar[ExitStatus]
    EXIT_STATUS_COMPLETED: _ClassVar[ExitStatus]
    EXIT_STATUS_TIMED_OUT: _ClassVar[ExitStatus]
    EXIT_STATUS_CANCELLED: _ClassVar[ExitStatus]
    EXIT_STATUS_DENIED: _ClassVar[ExitStatus]
    EXIT_STATUS_BACKEND_ERROR: _ClassVar[ExitStatus]

class ApprovalDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_DECISION_UNSPECIFIED: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE_ONCE: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE_SESSION: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_APPROVE_ALWAYS: _ClassVar[ApprovalDecision]
    APPROVAL_DECISION_DENY: _ClassVar[ApprovalDecision]

class GateDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GATE_DECISION_UNSPECIFIED: _ClassVar[GateDecision]
    GATE_DECISION_ALLOW: _ClassVar[GateDecision]
    GATE_DECISION_ASK: _ClassVar[GateDecision]
    GATE_DECISION_DENY: _ClassVar[GateDecision]

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_STATE_UNSPECIFIED: _ClassVar[ProcessState]
    PROCESS_STATE_RUNNING: _ClassVar[ProcessState]
    PROCESS_STATE_EXITED: _ClassVar[ProcessState]
    PROCESS_STATE_KILLED: _ClassVar[ProcessState]
    PROCESS_STATE_LOST: _ClassVar[ProcessState]
EXIT_STATUS_UNSPECIFIED: ExitStatus
EXIT_STATUS_COMPLETED: ExitStatus
EXIT_STATUS_TIMED_OUT: ExitStatus
EXIT_STATUS_CANCELLED: ExitStatus
EXIT_STATUS_DENIED: ExitStatus
EXIT_STATUS_BACKEND_ERROR: ExitStatus
APPROVAL_DECISION_UNSPECIFIED: ApprovalDecision
APPROVAL_DECISION_APPROVE_ONCE: ApprovalDecision
APPROVAL_DECISION_APPROVE_SESSION: ApprovalDecision
APPROVAL_DECISION_APPROVE_ALWAYS: ApprovalDecision
APPROVAL_DECISION_DENY: ApprovalDecision
GATE_DECISION_UNSPECIFIED: GateDecision
GATE_DECISION_ALLOW: GateDecision
GATE_DECISION_ASK: GateDecision
GATE_DECISION_DENY: GateDecision
PROCESS_STATE_UNSPECIFIED: ProcessState
PROCESS_STATE_RUNNING: ProcessState
PROCESS_STATE_EXITED: ProcessState
PROCESS_STATE_KILLED: ProcessState
PROCESS_STATE_LOST: ProcessState

class ExecRequest(_message.Message):
    __slots__ = ("task_id", "command", "workdir", "env", "timeout_seconds", "stdin", "backend", "pty", "idempotency_key", "merge_stderr")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MERGE_STDERR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    command: str
    workdir: str
    env: _containers.ScalarMap[str, str]
    timeout_seconds: float
    stdin: bytes
    backend: str
    pty: bool
    idempotency_key: str
    merge_stderr: bool
    def __init__(self, task_id: _Optional[str] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., timeout_seconds: _Optional[float] = ..., stdin: _Optional[bytes] = ..., backend: _Optional[str] = ..., pty: _Optional[bool] = ..., idempotency_key: _Optional[str] = ..., merge_stderr: _Optional[bool] = ...) -> None: ...

class ExecStarted(_message.Message):
    __slots__ = ("exec_id", "backend", "task_id")
    EXEC_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    exec_id: str
    backend: str
    task_id: str
    def __init__(self, exec_id: _Optional[str] = ..., backend: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class ApprovalRequired(_message.Message):
    __slots__ = ("approval_id", "rule", "reason", "segment", "timeout_seconds")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    rule: str
    reason: str
    segment: str
    timeout_seconds: float
    def __init__(self, approval_id: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., segment: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class ExecEvent(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "approval_required", "exit", "heartbeat")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    started: ExecStarted
    stdout: bytes
    stderr: bytes
    approval_required: ApprovalRequired
    exit: Exit
    heartbeat: Heartbeat
    def __init__(self, started: _Optional[_Union[ExecStarted, _Mapping]] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., approval_required: _Optional[_Union[ApprovalRequired, _Mapping]] = ..., exit: _Optional[_Union[Exit, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ("sent_at",)
    SENT_AT_FIELD_NUMBER: _ClassVar[int]
    sent_at: float
    def __init__(self, sent_at: _Optional[float] = ...) -> None: ...

class StageTimings(_message.Message):
    __slots__ = ("gate_seconds", "approval_seconds", "queue_seconds", "spawn_seconds", "first_byte_seconds", "run_seconds")
    GATE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    SPAWN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FIRST_BYTE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RUN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    gate_seconds: float
    approval_seconds: float
    queue_seconds: float
    spawn_seconds: float
    first_byte_seconds: float
    run_seconds: float
    def __init__(self, gate_seconds: _Optional[float] = ..., approval_seconds: _Optional[float] = ..., queue_seconds: _Optional[float] = ..., spawn_seconds: _Optional[float] = ..., first_byte_seconds: _Optional[float] = ..., run_seconds: _Optional[float] = ...) -> None: ...

class Exit(_message.Message):
    __slots__ = ("exit_code", "status", "cwd", "duration_seconds", "stdout_bytes", "stderr_bytes", "truncated", "message", "rule", "timings", "backend")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    DURATION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    status: ExitStatus
    cwd: str
    duration_seconds: float
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    message: str
    rule: str
    timings: StageTimings
    backend: str
    def __init__(self, exit_code: _Optional[int] = ..., status: _Optional[_Union[ExitStatus, str]] = ..., cwd: _Optional[str] = ..., duration_seconds: _Optional[float] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., truncated: _Optional[bool] = ..., message: _Optional[str] = ..., rule: _Optional[str] = ..., timings: _Optional[_Union[StageTimings, _Mapping]] = ..., backend: _Optional[str] = ...) -> None: ...

class RunResult(_message.Message):
    __slots__ = ("stdout", "stderr", "exit")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit: Exit
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[Exit, _Mapping]] = ...) -> None: ...

class CloseTaskRequest(_message.Message):
    __slots__ = ("task_id", "remove_files")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FILES_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    remove_files: bool
    def __init__(self, task_id: _Optional[str] = ..., remove_files: _Optional[bool] = ...) -> None: ...

class CloseTaskResponse(_message.Message):
    __slots__ = ("existed", "processes_ended")
    EXISTED_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_ENDED_FIELD_NUMBER: _ClassVar[int]
    existed: bool
    processes_ended: int
    def __init__(self, existed: _Optional[bool] = ..., processes_ended: _Optional[int] = ...) -> None: ...

class ListTasksRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskInfo(_message.Message):
    __slots__ = ("task_id", "backend", "cwd", "root", "busy", "running_processes", "created_at", "last_used_at", "commands_run", "shell_alive")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ROOT_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    RUNNING_PROCESSES_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_RUN_FIELD_NUMBER: _ClassVar[int]
    SHELL_ALIVE_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    backend: str
    cwd: str
    root: str
    busy: bool
    running_processes: int
    created_at: float
    last_used_at: float
    commands_run: int
    shell_alive: bool
    def __init__(self, task_id: _Optional[str] = ..., backend: _Optional[str] = ..., cwd: _Optional[str] = ..., root: _Optional[str] = ..., busy: _Optional[bool] = ..., running_processes: _Optional[int] = ..., created_at: _Optional[float] = ..., last_used_at: _Optional[float] = ..., commands_run: _Optional[int] = ..., shell_alive: _Optional[bool] = ...) -> None: ...

class ListTasksResponse(_message.Message):
    __slots__ = ("tasks", "idle_reaped")
    TASKS_FIELD_NUMBER: _ClassVar[int]
    IDLE_REAPED_FIELD_NUMBER: _ClassVar[int]
    tasks: _containers.RepeatedCompositeFieldContainer[TaskInfo]
    idle_reaped: int
    def __init__(self, tasks: _Optional[_Iterable[_Union[TaskInfo, _Mapping]]] = ..., idle_reaped: _Optional[int] = ...) -> None: ...

class ResolveApprovalRequest(_message.Message):
    __slots__ = ("approval_id", "decision", "reason")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    decision: ApprovalDecision
    reason: str
    def __init__(self, approval_id: _Optional[str] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolveApprovalResponse(_message.Message):
    __slots__ = ("resolved",)
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    resolved: bool
    def __init__(self, resolved: _Optional[bool] = ...) -> None: ...

class WatchApprovalsRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class PendingApproval(_message.Message):
    __slots__ = ("approval_id", "task_id", "command", "rule", "reason", "segment", "backend", "created_at", "expires_at", "resolved", "decision")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    RESOLVED_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    task_id: str
    command: str
    rule: str
    reason: str
    segment: str
    backend: str
    created_at: float
    expires_at: float
    resolved: bool
    decision: ApprovalDecision
    def __init__(self, approval_id: _Optional[str] = ..., task_id: _Optional[str] = ..., command: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., segment: _Optional[str] = ..., backend: _Optional[str] = ..., created_at: _Optional[float] = ..., expires_at: _Optional[float] = ..., resolved: _Optional[bool] = ..., decision: _Optional[_Union[ApprovalDecision, str]] = ...) -> None: ...

class ShareApprovalRequest(_message.Message):
    __slots__ = ("backend", "rule", "command", "reason", "approval_id")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    backend: str
    rule: str
    command: str
    reason: str
    approval_id: str
    def __init__(self, backend: _Optional[str] = ..., rule: _Optional[str] = ..., command: _Optional[str] = ..., reason: _Optional[str] = ..., approval_id: _Optional[str] = ...) -> None: ...

class ShareApprovalResponse(_message.Message):
    __slots__ = ("stored",)
    STORED_FIELD_NUMBER: _ClassVar[int]
    stored: bool
    def __init__(self, stored: _Optional[bool] = ...) -> None: ...

class CheckCommandRequest(_message.Message):
    __slots__ = ("command", "task_id", "backend")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    command: str
    task_id: str
    backend: str
    def __init__(self, command: _Optional[str] = ..., task_id: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class Verdict(_message.Message):
    __slots__ = ("decision", "rule", "reason", "segment")
    DECISION_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    decision: GateDecision
    rule: str
    reason: str
    segment: str
    def __init__(self, decision: _Optional[_Union[GateDecision, str]] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., segment: _Optional[str] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ("task_id", "command", "workdir", "env", "backend", "pty", "size", "merge_stderr")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    MERGE_STDERR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    command: str
    workdir: str
    env: _containers.ScalarMap[str, str]
    backend: str
    pty: bool
    size: PtySize
    merge_stderr: bool
    def __init__(self, task_id: _Optional[str] = ..., command: _Optional[str] = ..., workdir: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., backend: _Optional[str] = ..., pty: _Optional[bool] = ..., size: _Optional[_Union[PtySize, _Mapping]] = ..., merge_stderr: _Optional[bool] = ...) -> None: ...

class ProcessInfo(_message.Message):
    __slots__ = ("process_id", "task_id", "command", "state", "exit_code", "signal", "started_at", "ended_at", "backend", "stdout_bytes", "stderr_bytes", "pty", "message")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    task_id: str
    command: str
    state: ProcessState
    exit_code: int
    signal: str
    started_at: float
    ended_at: float
    backend: str
    stdout_bytes: int
    stderr_bytes: int
    pty: bool
    message: str
    def __init__(self, process_id: _Optional[str] = ..., task_id: _Optional[str] = ..., command: _Optional[str] = ..., state: _Optional[_Union[ProcessState, str]] = ..., exit_code: _Optional[int] = ..., signal: _Optional[str] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., backend: _Optional[str] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., pty: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ("task_id",)
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    def __init__(self, task_id: _Optional[str] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[ProcessInfo]
    def __init__(self, processes: _Optional[_Iterable[_Union[ProcessInfo, _Mapping]]] = ...) -> None: ...

class GetProcessRequest(_message.Message):
    __slots__ = ("process_id",)
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    def __init__(self, process_id: _Optional[str] = ...) -> None: ...

class ReadProcessOutputRequest(_message.Message):
    __slots__ = ("process_id", "offset", "max_bytes", "stream")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    offset: int
    max_bytes: int
    stream: str
    def __init__(self, process_id: _Optional[str] = ..., offset: _Optional[int] = ..., max_bytes: _Optional[int] = ..., stream: _Optional[str] = ...) -> None: ...

class ReadProcessOutputResponse(_message.Message):
    __slots__ = ("data", "offset", "next_offset", "eof", "rotated", "state")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    EOF_FIELD_NUMBER: _ClassVar[int]
    ROTATED_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    next_offset: int
    eof: bool
    rotated: bool
    state: ProcessState
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., eof: _Optional[bool] = ..., rotated: _Optional[bool] = ..., state: _Optional[_Union[ProcessState, str]] = ...) -> None: ...

class StreamProcessOutputRequest(_message.Message):
    __slots__ = ("process_id", "offset", "stream")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    offset: int
    stream: str
    def __init__(self, process_id: _Optional[str] = ..., offset: _Optional[int] = ..., stream: _Optional[str] = ...) -> None: ...

class ProcessOutputChunk(_message.Message):
    __slots__ = ("data", "offset", "next_offset", "rotated", "exited", "heartbeat")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NEXT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    ROTATED_FIELD_NUMBER: _ClassVar[int]
    EXITED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offset: int
    next_offset: int
    rotated: bool
    exited: ProcessInfo
    heartbeat: bool
    def __init__(self, data: _Optional[bytes] = ..., offset: _Optional[int] = ..., next_offset: _Optional[int] = ..., rotated: _Optional[bool] = ..., exited: _Optional[_Union[ProcessInfo, _Mapping]] = ..., heartbeat: _Optional[bool] = ...) -> None: ...

class WaitProcessRequest(_message.Message):
    __slots__ = ("process_id", "timeout_seconds")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    timeout_seconds: float
    def __init__(self, process_id: _Optional[str] = ..., timeout_seconds: _Optional[float] = ...) -> None: ...

class WriteProcessStdinRequest(_message.Message):
    __slots__ = ("process_id", "data", "close")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    data: bytes
    close: bool
    def __init__(self, process_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: _Optional[bool] = ...) -> None: ...

class WriteProcessStdinResponse(_message.Message):
    __slots__ = ("bytes_written",)
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    def __init__(self, bytes_written: _Optional[int] = ...) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ("process_id", "signal")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    signal: str
    def __init__(self, process_id: _Optional[str] = ..., signal: _Optional[str] = ...) -> None: ...

class PtySize(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class PtyOpen(_message.Message):
    __slots__ = ("task_id", "command", "backend", "size", "env", "workdir")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    command: str
    backend: str
    size: PtySize
    env: _containers.ScalarMap[str, str]
    workdir: str
    def __init__(self, task_id: _Optional[str] = ..., command: _Optional[str] = ..., backend: _Optional[str] = ..., size: _Optional[_Union[PtySize, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ...) -> None: ...

class PtyInput(_message.Message):
    __slots__ = ("open", "data", "resize", "signal")
    OPEN_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    open: PtyOpen
    data: bytes
    resize: PtySize
    signal: str
    def __init__(self, open: _Optional[_Union[PtyOpen, _Mapping]] = ..., data: _Optional[bytes] = ..., resize: _Optional[_Union[PtySize, _Mapping]] = ..., signal: _Optional[str] = ...) -> None: ...

class PtyOutput(_message.Message):
    __slots__ = ("data", "exit", "approval_required", "heartbeat")
    DATA_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    exit: Exit
    approval_required: ApprovalRequired
    heartbeat: Heartbeat
    def __init__(self, data: _Optional[bytes] = ..., exit: _Optional[_Union[Exit, _Mapping]] = ..., approval_required: _Optional[_Union[ApprovalRequired, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ...) -> None: ...

class PutArchiveChunk(_message.Message):
    __slots__ = ("task_id", "path", "data", "backend")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    path: str
    data: bytes
    backend: str
    def __init__(self, task_id: _Optional[str] = ..., path: _Optional[str] = ..., data: _Optional[bytes] = ..., backend: _Optional[str] = ...) -> None: ...

class PutArchiveResponse(_message.Message):
    __slots__ = ("bytes_received", "entries")
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    bytes_received: int
    entries: int
    def __init__(self, bytes_received: _Optional[int] = ..., entries: _Optional[int] = ...) -> None: ...

class GetArchiveRequest(_message.Message):
    __slots__ = ("task_id", "path", "backend")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    path: str
    backend: str
    def __init__(self, task_id: _Optional[str] = ..., path: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class ArchiveChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("task_id", "path", "backend")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    path: str
    backend: str
    def __init__(self, task_id: _Optional[str] = ..., path: _Optional[str] = ..., backend: _Optional[str] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class WriteFileChunk(_message.Message):
    __slots__ = ("task_id", "path", "backend", "mode", "make_parents", "data")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    MAKE_PARENTS_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    task_id: str
    path: str
    backend: str
    mode: int
    make_parents: bool
    data: bytes
    def __init__(self, task_id: _Optional[str] = ..., path: _Optional[str] = ..., backend: _Optional[str] = ..., mode: _Optional[int] = ..., make_parents: _Optional[bool] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteFileResponse(_message.Message):
    __slots__ = ("bytes_written", "path")
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    bytes_written: int
    path: str
    def __init__(self, bytes_written: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class ListBackendsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("pty", "resize", "signals", "stdin", "background", "persistent_shell", "file_transfer", "network_policy", "streaming")
    PTY_FIELD_NUMBER: _ClassVar[int]
    RESIZE_FIELD_NUMBER: _ClassVar[int]
    SIGNALS_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_FIELD_NUMBER: _ClassVar[int]
    PERSISTENT_SHELL_FIELD_NUMBER: _ClassVar[int]
    FILE_TRANSFER_FIELD_NUMBER: _ClassVar[int]
    NETWORK_POLICY_FIELD_NUMBER: _ClassVar[int]
    STREAMING_FIELD_NUMBER: _ClassVar[int]
    pty: bool
    resize: bool
    signals: bool
    stdin: bool
    background: bool
    persistent_shell: bool
    file_transfer: bool
    network_policy: str
    streaming: bool
    def __init__(self, pty: _Optional[bool] = ..., resize: _Optional[bool] = ..., signals: _Optional[bool] = ..., stdin: _Optional[bool] = ..., background: _Optional[bool] = ..., persistent_shell: _Optional[bool] = ..., file_transfer: _Optional[bool] = ..., network_policy: _Optional[str] = ..., streaming: _Optional[bool] = ...) -> None: ...

class BackendInfo(_message.Message):
    __slots__ = ("name", "kind", "available", "reason", "is_default", "capabilities", "policy")
    class PolicyEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: str
    available: bool
    reason: str
    is_default: bool
    capabilities: Capabilities
    policy: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[str] = ..., available: _Optional[bool] = ..., reason: _Optional[str] = ..., is_default: _Optional[bool] = ..., capabilities: _Optional[_Union[Capabilities, _Mapping]] = ..., policy: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ListBackendsResponse(_message.Message):
    __slots__ = ("backends", "default_backend")
    BACKENDS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_BACKEND_FIELD_NUMBER: _ClassVar[int]
    backends: _containers.RepeatedCompositeFieldContainer[BackendInfo]
    default_backend: str
    def __init__(self, backends: _Optional[_Iterable[_Union[BackendInfo, _Mapping]]] = ..., default_backend: _Optional[str] = ...) -> None: ...

"""The model-facing terminal and process tools.

OpenAI-style function schemas (``TERMINAL_SCHEMA``, ``PROCESS_SCHEMA``) and handlers that return a
JSON string the model can read. The handlers **never raise**: bad arguments, an unreachable daemon,
a denied command all come back as well-formed JSON with ``error`` set.

    from executor.tool import TOOLS, handle_terminal
    tools = TOOLS                                   # pass to the model
    result = handle_terminal({"command": "ls"}, target="unix:///…/executor.sock", task_id="agent-7")

A command that needs a human's approval answers at once with ``status: "approval_pending"``, the
approval id and how to resolve it; the request stays pending in the daemon. Calling the tool again with
the same command returns its result once a person decided (or ``wait_for_approval=True`` blocks).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from executor.client import PROCESS_STATES, STATUS_NAMES, Client, ExecutorError, default_target
from executor.headtail import HeadTail
from executor.v1 import executor_pb2 as pb

MAX_OUTPUT = 20_000  # characters of output shown to the model: head and tail

TERMINAL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": (
            "Run a shell command (bash) in your task's sandbox. The working directory, exported variables "
            "and shell functions persist between calls. Output (stdout and stderr together) is returned, "
            "shortened in the middle when long. Use background=true for servers and watchers, then the "
            "`process` tool to read their output. Dangerous commands may wait for a human's approval."),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The bash command line to run."},
                "timeout": {"type": "number", "description": "Seconds before the command is killed (default: the daemon's)."},
                "workdir": {"type": "string", "description": "Directory for this call only, relative to the task's directory."},
                "background": {"type": "boolean", "description": "Start it in the background and return a process_id at once."},
                "pty": {"type": "boolean", "description": "Run it under a terminal (for programs that insist on one)."},
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
}

PROCESS_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "process",
        "description": (
            "Manage background processes started with terminal(background=true): list them, poll one's "
            "state, read its log from an offset, wait for it, kill it, or write to its stdin."),
        "parameters": {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": ["list", "poll", "log", "wait", "kill", "write"]},
                "process_id": {"type": "string", "description": "Required for every action but list."},
                "offset": {"type": "integer", "minimum": 0, "description": "log: byte offset to read from."},
                "limit": {"type": "integer", "minimum": 1, "description": "log: at most this many bytes."},
                "timeout": {"type": "number", "minimum": 0, "description": "wait: seconds (0 = answer at once)."},
                "signal": {"type": "string", "description": "kill: signal name, default SIGTERM."},
                "data": {"type": "string", "description": "write: text to send to stdin."},
                "close": {"type": "boolean", "description": "write: close stdin after the data."},
            },
            "required": ["action"],
            "additionalProperties": False,
        },
    },
}

TOOLS = [TERMINAL_SCHEMA, PROCESS_SCHEMA]


def _error(message: str, **extra: Any) -> str:
    return json.dumps({"error": message, **extra})


def _args(args: Any) -> dict[str, Any]:
    if isinstance(args, str):
        args = json.loads(args) if args.strip() else {}
    if not isinstance(args, dict):
        raise ValueError("arguments must be a JSON object")
    return args


# -- approvals that outlive one tool call ----------------------------------------------------


@dataclass
class _Parked:
    """An Exec waiting for a human; its stream is followed by a thread so the approval stays pending."""

    done: threading.Event = field(default_factory=threading.Event)
    result: str = ""
    approval: dict[str, str] = field(default_factory=dict)


# (target, task, command, workdir as the model gave it, pty): the same call again finds its parked command
_ParkKey = tuple[str | None, str, str, object, bool]
_parked: dict[_ParkKey, _Parked] = {}
_parked_lock = threading.Lock()

# One client (one channel) per daemon, token and deadline, shared by every call of the handlers and
# by the threads that follow parked commands: a channel is safe to use from many threads.
_clients: dict[tuple[str, str | None, float | None], Client] = {}
_clients_lock = threading.Lock()


def shared_client(target: str | None = None, token: str | None = None, deadline: float | None = None) -> Client:
    """The handlers' client for this daemon: made once, reused by every call (``close_clients()`` ends them)."""
    key = (target or default_target(), token, deadline)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = Client(key[0], token=token, deadline=deadline)
        return client


def close_clients() -> None:
    """Closes the handlers' shared channels (new calls open them again)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def _run_exec(client: Client, task_id: str, command: str, args: dict[str, Any], backend: str,
              on_approval: Callable[[pb.ApprovalRequired], None]) -> str:
    """Runs a command through Exec; returns the tool's JSON result."""
    output = HeadTail(MAX_OUTPUT)
    exit_ = None
    for event in client.exec(task_id, command, timeout=float(args.get("timeout") or 0),
                             workdir=str(args.get("workdir") or ""), pty=bool(args.get("pty")),
                             backend=backend, merge_stderr=True):
        kind = event.WhichOneof("event")
        if kind in ("stdout", "stderr"):
            output.add(getattr(event, kind))
        elif kind == "approval_required":
            on_approval(event.approval_required)
        elif kind == "exit":
            exit_ = event.exit
    if exit_ is None:
        return _error("the daemon ended the command without a result")
    result: dict[str, str | int] = {"output": output.text(), "exit_code": exit_.exit_code,
              "status": STATUS_NAMES.get(exit_.status, "unknown"), "cwd": exit_.cwd}
    if output.total > len(output.head) + len(output.tail):
        result["output_bytes"] = output.total
    if exit_.status != 1:  # not COMPLETED: say why
        result["error"] = exit_.message or result["status"]
    return json.dumps(result)


def handle_terminal(args: Any, *, target: str | None = None, token: str | None = None, task_id: str = "default",
                    backend: str = "", wait_for_approval: bool = False, deadline: float | None = None) -> str:
    """Run the model's terminal call; returns JSON (output, exit_code, status, cwd, error). Never raises."""
    try:
        args = _args(args)
        command = args.get("command")
        if not isinstance(command, str):
            return _error("`command` is required: the bash command line to run")
        unknown = set(args) - set(TERMINAL_SCHEMA["function"]["parameters"]["properties"])
        if unknown:
            return _error(f"unknown arguments: {', '.join(sorted(unknown))}")
        if not command.strip():  # what bash does with an empty line: nothing, successfully
            return json.dumps({"output": "", "exit_code": 0, "status": "completed"})
        if args.get("timeout") is not None and not isinstance(args["timeout"], (int, float)):
            return _error("`timeout` must be a number of seconds")
        client = shared_client(target, token, deadline)
        if args.get("background"):
            info = client.start_process(task_id, command, workdir=str(args.get("workdir") or ""),
                                        backend=backend, pty=bool(args.get("pty")), merge_stderr=True)
            return json.dumps({"process_id": info.process_id, "status": PROCESS_STATES.get(info.state),
                               "output": "", "note": "started in the background; read it with the process tool"})
        return _terminal_call(client, target, token, task_id, command, args, backend, wait_for_approval)
    except ExecutorError as exc:
        return _error(exc.message, code=exc.code.name if exc.code else "UNKNOWN")
    except (ValueError, TypeError) as exc:
        return _error(f"bad arguments: {exc}")
    except Exception as exc:  # the model must always get an answer
        return _error(f"{type(exc).__name__}: {exc}")


def _terminal_call(client: Client, target: str | None, token: str | None, task_id: str, command: str,
                   args: dict[str, Any], backend: str, wait_for_approval: bool) -> str:
    key: _ParkKey = (target, task_id, command, args.get("workdir") or "", bool(args.get("pty")))
    with _parked_lock:
        parked = _parked.get(key)
    if parked is not None:  # a command that waited for a human: its result, or still pending
        if parked.done.wait(0 if not wait_for_approval else None):
            with _parked_lock:
                _parked.pop(key, None)
            return parked.result
        return json.dumps({"status": "approval_pending", **parked.approval})
    if wait_for_approval:
        return _run_exec(client, task_id, command, args, backend, lambda a: None)

    # Follow the Exec in a thread; if it asks for approval, answer the model now and park it.
    parked = _Parked()
    asked = threading.Event()

    def on_approval(a: pb.ApprovalRequired) -> None:
        parked.approval = {
            "approval_id": a.approval_id, "rule": a.rule, "reason": a.reason, "segment": a.segment,
            "how_to_resolve": (f"A person with the approve role must decide: `executor approvals` (interactive) or "
                               f"ResolveApproval(approval_id={a.approval_id!r}). Then call terminal again with "
                               f"the same command to get its result. No decision within "
                               f"{a.timeout_seconds:.0f} s means denied."),
        }
        with _parked_lock:
            _parked[key] = parked
        asked.set()

    def follow() -> None:
        try:
            parked.result = _run_exec(client, task_id, command, args, backend, on_approval)
        except ExecutorError as exc:
            parked.result = _error(exc.message, code=exc.code.name if exc.code else "UNKNOWN")
        except Exception as exc:
            parked.result = _error(f"{type(exc).__name__}: {exc}")
        parked.done.set()
        asked.set()

    threading.Thread(target=follow, daemon=True, name=f"terminal-{task_id}").start()
    asked.wait()
    if parked.done.is_set():
        with _parked_lock:
            _parked.pop(key, None)
        return parked.result
    return json.dumps({"status": "approval_pending", **parked.approval})


def handle_process(args: Any, *, target: str | None = None, token: str | None = None, task_id: str = "default",
                   deadline: float | None = None) -> str:
    """Run the model's process call; returns JSON. Never raises."""
    try:
        args = _args(args)
        action = args.get("action")
        actions = PROCESS_SCHEMA["function"]["parameters"]["properties"]["action"]["enum"]
        if action not in actions:
            return _error(f"`action` must be one of {', '.join(actions)}")
        pid = args.get("process_id")
        if action != "list" and not (isinstance(pid, str) and pid):
            return _error(f"`process_id` is required for {action}")
        c = shared_client(target, token, deadline)
        if action == "list":
            return json.dumps({"processes": [_info(p) for p in c.list_processes(task_id).processes]})
        if action == "poll":
            return json.dumps(_info(c.get_process(pid)))
        if action == "log":
            offset = int(args.get("offset") or 0)
            limit = int(args.get("limit") or MAX_OUTPUT)
            r = c.read_output(pid, offset=offset, max_bytes=limit)
            return json.dumps({"output": r.data.decode("utf-8", errors="replace"), "offset": r.offset,
                               "next_offset": r.next_offset, "eof": r.eof, "rotated": r.rotated,
                               "state": PROCESS_STATES.get(r.state)})
        if action == "wait":
            return json.dumps(_info(c.wait_process(pid, float(args.get("timeout") or 0))))
        if action == "kill":
            return json.dumps(_info(c.signal_process(pid, str(args.get("signal") or "SIGTERM"))))
        data = args.get("data") or ""
        if not isinstance(data, str):
            return _error("`data` must be a string")
        w = c.write_stdin(pid, data.encode(), bool(args.get("close")))
        return json.dumps({"bytes_written": w.bytes_written})
    except ExecutorError as exc:
        return _error(exc.message, code=exc.code.name if exc.code else "UNKNOWN")
    except (ValueError, TypeError) as exc:
        return _error(f"bad arguments: {exc}")
    except Exception as exc:
        return _error(f"{type(exc).__name__}: {exc}")


def _info(p: pb.ProcessInfo) -> dict[str, object]:
    info: dict[str, object] = {"process_id": p.process_id, "command": p.command, "state": PROCESS_STATES.get(p.state),
            "started_at": p.started_at}
    if p.state != 1:
        info.update(exit_code=p.exit_code, signal=p.signal, ended_at=p.ended_at)
    return info


async def handle_terminal_async(args: Any, **kwargs: Any) -> str:
    return await asyncio.to_thread(handle_terminal, args, **kwargs)


async def handle_process_async(args: Any, **kwargs: Any) -> str:
    return await asyncio.to_thread(handle_process, args, **kwargs)


def check_terminal(*, target: str | None = None, token: str | None = None, backend: str = "",
                   timeout: float = 3.0) -> bool:
    """True when the daemon answers and the backend (default: the daemon's) is available."""
    try:
        with Client(target, token=token, deadline=timeout) as c:
            resp = c.list_backends()
    except Exception:
        return False
    name = backend or resp.default_backend
    return any(b.name == name and b.available for b in resp.backends)


__all__ = ["TOOLS", "TERMINAL_SCHEMA", "PROCESS_SCHEMA", "handle_terminal", "handle_process", "shared_client",
           "close_clients",
           "handle_terminal_async", "handle_process_async", "check_terminal", "HeadTail"]

"""hermes-agent plugin: hermes' ``terminal`` and ``process`` tools, run through an executor daemon.

hermes loads it from the ``hermes_agent.plugins`` entry point once the operator enables it and lets
it replace built-in tools (``~/.hermes/config.yaml``)::

    plugins:
      enabled: [executor]
      entries:
        executor:
          allow_tool_override: true
          target: unix:///home/me/.local/state/executor/executor.sock   # or EXECUTOR_TARGET
          token: ...                                                     # or EXECUTOR_TOKEN
          # approval_bridge: true   # opt-in, see below

The tools keep hermes' own schemas (taken from hermes at load time) and answer in hermes' result
shapes. Commands go through executor's gate instead of hermes' own dangerous-command check; a
denied command answers as hermes' blocked one (``exit_code: -1``, the reason in ``error``). A
command the gate sends to a human waits for ``executor approvals`` / ``ResolveApproval``, unless
``approval_bridge`` is on: then hermes' own approval prompt asks the person at the hermes
terminal and the answer is sent to the daemon with ``approver_token`` (or ``token``). That merges
the requester and the approver in one process, which executor's roles are meant to keep apart:
off by default.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from hashlib import sha1
from typing import Any

from executor.client import Client, ExecutorError, ExitStatus, NotFound, PermissionDenied, ProcessState

PLUGIN_ID = "executor"
_TASK_ID = re.compile(r"[^A-Za-z0-9._-]+")


# -- configuration and the shared client -------------------------------------------------------


def _settings() -> dict:
    try:
        from hermes_cli.config import load_config

        entry = (((load_config() or {}).get("plugins") or {}).get("entries") or {}).get(PLUGIN_ID) or {}
    except Exception:
        entry = {}
    env = os.environ.get
    bridge = entry.get("approval_bridge", env("EXECUTOR_HERMES_APPROVAL_BRIDGE", ""))
    return {
        "target": entry.get("target") or env("EXECUTOR_TARGET") or None,
        "token": entry.get("token") or env("EXECUTOR_TOKEN") or None,
        "approver_token": entry.get("approver_token") or env("EXECUTOR_APPROVER_TOKEN") or None,
        "backend": entry.get("backend") or env("EXECUTOR_BACKEND") or "",
        "task_prefix": entry.get("task_prefix", env("EXECUTOR_HERMES_TASK_PREFIX", "hermes-")),
        "approval_bridge": str(bridge).lower() in ("1", "true", "yes", "on"),
    }


_lock = threading.Lock()
_state: dict[str, Any] = {"client": None, "approver": None, "settings": None, "roots": {}}


def _client() -> Client:
    with _lock:
        if _state["client"] is None:
            s = _state["settings"] = _settings()
            _state["client"] = Client(s["target"], token=s["token"], deadline=60)
        return _state["client"]


def _cfg() -> dict:
    _client()
    return _state["settings"]


def task_for(hermes_task_id: str | None) -> str:
    """hermes' task id -> an executor task id. hermes collapses sub-agents onto its ``default``
    environment (only tasks with their own image stay apart); the same key is used here."""
    try:
        from tools.terminal_tool import _resolve_container_task_id

        key = _resolve_container_task_id(hermes_task_id)
    except Exception:
        key = hermes_task_id or "default"
    name = _TASK_ID.sub("-", f"{_cfg()['task_prefix']}{key}").strip("-._") or "default"
    if len(name) > 128:
        name = f"{name[:100]}-{sha1(name.encode()).hexdigest()[:16]}"
    return name


def _task_root(task: str) -> str:
    """The task's directory in the backend (``ListTasks``; the task is made first if it is new)."""
    roots = _state["roots"]
    if task not in roots:
        c = _client()
        found = [t.root for t in c.list_tasks().tasks if t.task_id == task]
        if not found:
            c.run(task, "true", backend=_cfg()["backend"], timeout=30)
            found = [t.root for t in c.list_tasks().tasks if t.task_id == task]
        roots[task] = found[0] if found else ""
    return roots[task]


# -- hermes' own helpers, when hermes is there ------------------------------------------------


def _hermes(module: str, name: str, default: Any) -> Any:
    try:
        return getattr(__import__(module, fromlist=[name]), name)
    except Exception:
        return default


def _foreground_max() -> int:
    return int(_hermes("tools.terminal_tool", "FOREGROUND_MAX_TIMEOUT", 600))


def _default_timeout() -> int:
    try:
        return int(os.environ.get("TERMINAL_TIMEOUT", "180"))
    except ValueError:
        return 180


def _shape_output(command: str, text: str) -> str:
    """What hermes does to foreground output: head 40 % and tail 60 % past its cap, ANSI
    stripped, secrets redacted."""
    limit = _hermes("tools.tool_output_limits", "get_max_bytes", lambda: 50_000)()
    if len(text) > limit:
        head = int(limit * 0.4)
        tail = limit - head
        omitted = len(text) - head - tail
        text = (text[:head] + f"\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {len(text)} total] ...\n\n"
                + text[-tail:])
    text = _hermes("tools.ansi_strip", "strip_ansi", lambda t: t)(text)
    redact = _hermes("agent.redact", "redact_terminal_output", lambda t, c: t)
    return redact(text.strip(), command) if text else ""


def _dumps(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False)


def _blocked(message: str, status: str = "blocked") -> str:
    return _dumps({"output": "", "exit_code": -1, "error": message, "status": status})


# -- terminal ------------------------------------------------------------------------------------


def _workdir(task: str, workdir: str | None) -> tuple[str, str | None]:
    """hermes' absolute workdir -> one inside the task's directory, or hermes' refusal."""
    if not workdir:
        return "", None
    problem = _hermes("tools.terminal_tool", "_validate_workdir", lambda w: None)(workdir)
    if problem:
        return "", problem
    if not workdir.startswith(("/", "~")):
        return workdir, None
    root = _task_root(task)
    path = os.path.normpath(workdir.replace("~", root, 1) if workdir.startswith("~") else workdir)
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return os.path.relpath(path, root), None
    return "", (f"Blocked: workdir {workdir!r} is outside this task's sandbox directory {root or '(unknown)'}. "
                "Use a path inside it, or a relative path.")


def terminal(args: dict, **kw: Any) -> str:
    command = args.get("command")
    if not isinstance(command, str):
        return _dumps({"output": "", "exit_code": -1, "status": "error",
                       "error": f"Invalid command: expected string, got {type(command).__name__}"})
    background = bool(args.get("background"))
    try:
        timeout = int(args["timeout"]) if args.get("timeout") is not None else None
    except (TypeError, ValueError):
        return _dumps({"output": "", "exit_code": -1, "status": "error",
                       "error": f"Invalid timeout: expected an integer number of seconds, got {args['timeout']!r}"})
    limit = _foreground_max()
    if not background and timeout and timeout > limit:
        return _dumps({"error": f"Foreground timeout {timeout}s exceeds the maximum of {limit}s. Use "
                                f"background=true with notify_on_complete=true for long-running commands."})
    if not command.strip():
        return _dumps({"output": "", "exit_code": 0, "error": None})
    try:
        task = task_for(kw.get("task_id"))
        workdir, problem = _workdir(task, args.get("workdir"))
        if problem:
            return _blocked(problem)
        if background:
            return _background(task, command, workdir, args, kw)
        return _foreground(task, command, workdir, int(timeout or _default_timeout()), bool(args.get("pty")))
    except PermissionDenied as exc:
        return _blocked(exc.message)
    except ExecutorError as exc:
        return _dumps({"output": "", "exit_code": -1, "error": f"Command execution failed: {exc.message}"})


def _foreground(task: str, command: str, workdir: str, timeout: int, pty: bool) -> str:
    c, cfg = _client(), _cfg()
    out, total, exit_ = bytearray(), 0, None
    cap = 4 * _hermes("tools.tool_output_limits", "get_max_bytes", lambda: 50_000)()
    for event in c.exec(task, command, timeout=timeout, workdir=workdir, pty=pty, backend=cfg["backend"],
                        merge_stderr=True):
        kind = event.WhichOneof("event")
        if kind in ("stdout", "stderr"):
            data = getattr(event, kind)
            total += len(data)
            out += data
            if len(out) > 2 * cap:  # keep the head and the tail, as hermes' bounded capture does
                del out[cap:len(out) - cap]
        elif kind == "approval_required" and cfg["approval_bridge"]:
            _bridge(event.approval_required, command)
        elif kind == "exit":
            exit_ = event.exit
    if exit_ is None:
        return _dumps({"output": "", "exit_code": -1, "error": "the daemon ended the command without a result"})
    status = ExitStatus(exit_.status)
    text = out.decode("utf-8", errors="replace")
    if status is ExitStatus.DENIED:
        return _blocked(exit_.message or "Command denied by executor's approval gate")
    if status is ExitStatus.TIMED_OUT:
        return _dumps({"output": _shape_output(command, text), "exit_code": 124,
                       "error": f"Command timed out after {timeout} seconds"})
    if status is not ExitStatus.COMPLETED:
        return _dumps({"output": _shape_output(command, text), "exit_code": -1,
                       "error": f"Command execution failed: {exit_.message or status}"})
    result = {"output": _shape_output(command, text), "exit_code": exit_.exit_code, "error": None}
    note = _hermes("tools.terminal_tool", "_interpret_exit_code", lambda c, e: None)(command, exit_.exit_code)
    if note:
        result["exit_code_meaning"] = note
    return _dumps(result)


def _bridge(approval, command: str) -> None:
    """Opt-in: hermes' approval prompt decides an executor approval (in a thread: the Exec stream
    keeps flowing meanwhile). hermes keeps its prompt callback per thread: taken on the tool's."""
    callback = _hermes("tools.terminal_tool", "_get_approval_callback", lambda: None)()

    def ask() -> None:
        prompt = _hermes("tools.approval", "prompt_dangerous_approval", None)
        try:
            choice = prompt(command, f"{approval.rule}: {approval.reason}", approval_callback=callback) \
                if prompt else "deny"
        except Exception:
            choice = "deny"
        cfg = _cfg()
        with _lock:
            if _state["approver"] is None:
                _state["approver"] = Client(cfg["target"], token=cfg["approver_token"] or cfg["token"], deadline=30)
        try:
            _state["approver"].resolve_approval(approval.approval_id, choice if choice in
                                                ("once", "session", "always") else "deny",
                                                reason="decided in hermes' approval prompt")
        except ExecutorError:
            pass  # decided elsewhere meanwhile, or this token may not approve: the daemon's timeout decides

    threading.Thread(target=ask, daemon=True, name=f"executor-approval-{approval.approval_id}").start()


_HINT = ("background=true without notify_on_complete=true means this process runs SILENTLY — you will not be "
         "told when it exits. If this is a bounded task (test suite, build, CI poller, deploy, anything with a "
         "defined end), you almost certainly wanted notify_on_complete=true so the system pings you on exit. "
         "Re-launch with notify_on_complete=true, or call process(action='poll') / process(action='wait') "
         "yourself to learn the outcome. Only ignore this hint for genuine long-lived processes that never "
         "exit (servers, watchers, daemons).")


def _background(task: str, command: str, workdir: str, args: dict, kw: dict) -> str:
    notify = bool(args.get("notify_on_complete"))
    patterns = [str(p) for p in (args.get("watch_patterns") or []) if str(p)]
    info = _client().start_process(task, command, workdir=workdir, env={"PYTHONUNBUFFERED": "1"},
                                   backend=_cfg()["backend"], pty=bool(args.get("pty")), merge_stderr=True)
    result: dict[str, Any] = {"output": "Background process started", "session_id": info.process_id, "pid": None,
                              "exit_code": 0, "error": None}
    if not notify and not patterns:
        result["hint"] = _HINT
    if notify and patterns:
        patterns = []
        result["watch_patterns_ignored"] = ("watch_patterns ignored because notify_on_complete=True; these two "
                                            "flags produce duplicate notifications when combined")
    if (notify or patterns) and not _hermes("gateway.session_context", "async_delivery_supported", lambda: True)():
        notify, patterns = False, []
        result["notify_on_complete"] = False
        result["notify_unsupported"] = (
            "notify_on_complete / watch_patterns are not available in this session — it cannot receive an async "
            "completion after the turn ends. The process is running in the background; retrieve its result with "
            "process(action='poll') or process(action='wait').")
    if notify:
        result["notify_on_complete"] = True
    if patterns:
        result["watch_patterns"] = patterns
    _meta[info.process_id] = {"task": task, "notify": notify, "patterns": patterns, "cwd": workdir,
                              "session_key": _session_key(kw)}
    if notify or patterns:
        threading.Thread(target=_watch, args=(info.process_id, command), daemon=True,
                         name=f"executor-watch-{info.process_id}").start()
    return _dumps(result)


def _session_key(kw: dict) -> str:
    try:
        from tools.approval import get_current_session_key

        return get_current_session_key(default="") or (kw.get("task_id") or "")
    except Exception:
        return kw.get("task_id") or ""


# -- notifications: StreamProcessOutput -> hermes' completion queue ---------------------------

_meta: dict[str, dict] = {}
_consumed: set[str] = set()


def _queue():
    registry = _hermes("tools.process_registry", "process_registry", None)
    return getattr(registry, "completion_queue", None)


def _watch(process_id: str, command: str) -> None:
    """Follows one process's output: a watch pattern's match (at most one per 15 s, as hermes) and,
    with notify_on_complete, its end become hermes notification events."""
    meta = _meta[process_id]
    interval = _hermes("tools.process_registry", "WATCH_MIN_INTERVAL_SECONDS", 15)
    quiet_until, suppressed, partial, tail = 0.0, 0, "", ""
    queue = _queue()
    try:
        for chunk in _client().follow_output(process_id):
            text = partial + chunk.data.decode("utf-8", errors="replace")
            tail = (tail + chunk.data.decode("utf-8", errors="replace"))[-2000:]
            lines = text.split("\n")
            partial = lines.pop() if not chunk.HasField("exited") else ""
            matched = [ln for ln in lines + ([partial] if chunk.HasField("exited") else [])
                       if any(p in ln for p in meta["patterns"])]
            if matched and queue is not None:
                now = time.time()
                if now < quiet_until:
                    suppressed += len(matched)
                else:
                    quiet_until = now + interval
                    queue.put({"type": "watch_match", "session_id": process_id, "session_key": meta["session_key"],
                               "command": command, "pattern": next(p for p in meta["patterns"] if p in matched[0]),
                               "output": "\n".join(matched[:20])[:2000], "suppressed": suppressed})
                    suppressed = 0
            if chunk.HasField("exited"):
                if meta["notify"] and queue is not None and process_id not in _consumed:
                    p = chunk.exited
                    queue.put({"type": "completion", "session_id": process_id, "session_key": meta["session_key"],
                               "command": command, "exit_code": _exit_code(p), "output": tail,
                               "completion_reason": "killed" if p.state == ProcessState.KILLED else "exited",
                               "termination_source": "process.kill" if p.state == ProcessState.KILLED else "",
                               "started_at": p.started_at})
                return
    except ExecutorError:
        return


def _mark_consumed(process_id: str) -> None:
    """wait / log / kill showed the end: hermes' drain skips the completion event, as for its own."""
    _consumed.add(process_id)
    registry = _hermes("tools.process_registry", "process_registry", None)
    try:
        registry._completion_consumed.add(process_id)
    except Exception:
        pass


# -- process ---------------------------------------------------------------------------------


def _exit_code(p) -> int | None:
    if p.state == ProcessState.RUNNING:
        return None
    if p.state == ProcessState.KILLED and p.signal:
        import signal as _signal

        try:
            return -int(_signal.Signals[p.signal])
        except KeyError:
            return p.exit_code
    return p.exit_code


def _output(process_id: str, last: int | None = None) -> str:
    """The process's output (merged streams), all of what the daemon keeps, or its last characters."""
    c, data, offset = _client(), bytearray(), 0
    while True:
        r = c.read_output(process_id, offset=offset)
        data += r.data
        if not r.data or r.next_offset == offset or r.eof:
            break
        offset = r.next_offset
    text = data.decode("utf-8", errors="replace")
    text = _hermes("tools.ansi_strip", "strip_ansi", lambda t: t)(text)
    return text[-last:] if last else text


def _redacted(result: dict) -> dict:
    fix = _hermes("tools.process_registry", "_redact_process_result", lambda r: r)
    return fix(result)


def _status(p) -> str:
    return "running" if p.state == ProcessState.RUNNING else "exited"


def _ended(p) -> dict:
    killed = p.state == ProcessState.KILLED
    return {"exit_code": _exit_code(p), "completion_reason": "killed" if killed else "exited",
            "termination_source": "process.kill" if killed else None}


def process(args: dict, **kw: Any) -> str:
    action = args.get("action", "")
    sid = str(args.get("session_id", "")) if args.get("session_id") is not None else ""
    c = _client()
    try:
        if action == "list":
            task = task_for(kw.get("task_id"))
            entries = []
            for p in c.list_processes(task).processes:
                meta = _meta.get(p.process_id, {})
                entry = {"session_id": p.process_id, "command": p.command[:200], "cwd": meta.get("cwd", ""),
                         "pid": None, "started_at": time.strftime("%Y-%m-%dT%H:%M:%S",
                                                                  time.localtime(p.started_at)),
                         "uptime_seconds": int(time.time() - p.started_at), "status": _status(p),
                         "output_preview": _output(p.process_id, 200)}
                if meta.get("patterns"):
                    entry["watch_patterns"] = meta["patterns"]
                if meta.get("notify"):
                    entry["notify_on_complete"] = True
                if p.state != ProcessState.RUNNING:
                    entry["exit_code"] = _exit_code(p)
                entries.append(entry)
            return _dumps({"processes": entries})
        if action not in {"poll", "log", "wait", "kill", "write", "submit", "close"}:
            return _dumps({"error": f"Unknown process action: {action}. Use: list, poll, log, wait, kill, write, "
                                    f"submit, close"})
        if not sid:
            return _dumps({"error": f"session_id is required for {action}"})
        return _dumps(_action(c, action, sid, args))
    except NotFound:
        return _dumps({"status": "not_found", "error": f"No process with ID {sid}"})
    except ExecutorError as exc:
        return _dumps({"status": "error", "error": exc.message})


def _action(c: Client, action: str, sid: str, args: dict) -> dict:
    p = c.get_process(sid)
    if action == "poll":
        result = {"session_id": sid, "command": p.command, "status": _status(p), "pid": None,
                  "uptime_seconds": int((p.ended_at or time.time()) - p.started_at), "output_preview": _output(sid, 1000)}
        if p.state != ProcessState.RUNNING:
            result.update(_ended(p))
        return _redacted(result)
    if action == "log":
        lines = _output(sid).splitlines()
        offset, limit = int(args.get("offset") or 0), int(args.get("limit") or 200)
        selected = lines[-limit:] if offset == 0 and limit > 0 else lines[offset:offset + limit]
        if p.state != ProcessState.RUNNING:
            _mark_consumed(sid)
        return _redacted({"session_id": sid, "command": p.command, "status": _status(p),
                          "output": "\n".join(selected), "total_lines": len(lines),
                          "showing": f"{len(selected)} lines"})
    if action == "wait":
        requested, cap = args.get("timeout"), _default_timeout()
        wait_for = min(int(requested), cap) if requested else cap
        p = c.wait_process(sid, wait_for)
        if p.state != ProcessState.RUNNING:
            _mark_consumed(sid)
            result = {"status": "exited", "command": p.command, **_ended(p), "output": _output(sid, 2000)}
        else:
            result = {"status": "timeout", "command": p.command, "output": _output(sid, 1000),
                      "timeout_note": f"Waited {wait_for}s, process still running"}
        if requested and int(requested) > cap:
            result["timeout_note"] = f"Requested wait of {requested}s was clamped to configured limit of {cap}s"
        return _redacted(result)
    if action == "kill":
        if p.state != ProcessState.RUNNING:
            _mark_consumed(sid)
            return _redacted({"status": "already_exited", "command": p.command, **_ended(p),
                              "output": _output(sid, 2000)})
        c.signal_process(sid, "SIGTERM")
        p = c.wait_process(sid, 10)
        _mark_consumed(sid)
        return _redacted({"status": "killed", "session_id": sid, "completion_reason": "killed",
                          "termination_source": "process.kill", "output": _output(sid, 2000)})
    if p.state != ProcessState.RUNNING:
        return {"status": "already_exited", "error": "Process has already finished"}
    if action == "close":
        c.write_stdin(sid, b"", close=True)
        return {"status": "ok", "message": "stdin closed"}
    data = str(args.get("data", "")) + ("\n" if action == "submit" else "")
    r = c.write_stdin(sid, data.encode())
    return {"status": "ok", "bytes_written": r.bytes_written}


# -- registration --------------------------------------------------------------------------------


def _schema(module: str, name: str, fallback: dict) -> dict:
    return _hermes(module, name, None) or fallback


_checked: list = [0.0, False]


def check() -> bool:
    """The tools are offered when the daemon answers and its backend is available (asked at most
    every 5 s)."""
    if time.monotonic() - _checked[0] < 5:
        return _checked[1]
    try:
        backends = _client().list_backends()
        name = _cfg()["backend"] or backends.default_backend
        ok = any(b.name == name and b.available for b in backends.backends)
    except Exception:
        ok = False
    _checked[:] = [time.monotonic(), ok]
    return ok


def register(ctx) -> None:
    """hermes' plugin entry: replace ``terminal`` and ``process``, keeping hermes' schemas."""
    terminal_schema = _schema("tools.terminal_tool", "TERMINAL_SCHEMA", {"name": "terminal", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}})
    process_schema = _schema("tools.process_registry", "PROCESS_SCHEMA", {"name": "process", "parameters": {
        "type": "object", "properties": {"action": {"type": "string"}}, "required": ["action"]}})
    ctx.register_tool("terminal", "terminal", terminal_schema, terminal, check_fn=check, emoji="💻", override=True)
    ctx.register_tool("process", "terminal", process_schema, process, emoji="⚙️", override=True)


__all__ = ["register", "terminal", "process", "task_for", "check"]

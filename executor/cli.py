"""The `executor` command: `serve` runs the daemon; `exec` runs one command through it."""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from executor.client import Client, ExecutorError
    from executor.v1 import executor_pb2 as pb


def _serve(args: argparse.Namespace) -> int:
    from executor.config import ConfigError, default_state_dir, load_config
    from executor.server import serve

    config_path = args.config or os.environ.get("EXECUTOR_CONFIG")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir or config.state_dir or default_state_dir()).expanduser()
    listen = args.listen or config.listen
    from executor.observe import setup_logging

    setup_logging(config.logging.level, config.logging.format)
    try:
        asyncio.run(serve(config, state_dir, listen, ready_file=args.ready_file, config_path=config_path))
    except ConfigError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 2
    return 0


def _start(args: argparse.Namespace) -> int:
    """``executor start``: ``executor serve`` as a background process (its own session, output to a
    log in the state directory); returns once it answers, printing where (and its pid)."""
    import json
    import signal
    import subprocess
    import time

    from executor.config import ConfigError, default_state_dir, load_config

    config_path = args.config or os.environ.get("EXECUTOR_CONFIG")
    try:
        config = load_config(config_path)
    except ConfigError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir or config.state_dir or default_state_dir()).expanduser()
    state_dir.mkdir(parents=True, exist_ok=True)
    pidfile, log_path, ready = state_dir / "executor.pid", state_dir / "executor.log", state_dir / "executor.ready"
    running = _running_pid(pidfile)
    if running:
        print(f"executor: a daemon started with `executor start` is running (pid {running}); "
              f"`executor stop` ends it", file=sys.stderr)
        return 1
    ready.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "executor", "serve", "--state-dir", str(state_dir), "--ready-file", str(ready)]
    if config_path:
        argv += ["--config", config_path]
    for address in args.listen or []:
        argv += ["--listen", address]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        if ready.exists() and ready.read_text().strip():
            break
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-5:]
            print(f"executor: the daemon exited with {proc.returncode} while starting; {log_path}:\n" +
                  "\n".join(tail), file=sys.stderr)
            return 1
        time.sleep(0.1)
    else:
        proc.send_signal(signal.SIGTERM)
        print(f"executor: the daemon did not answer within {args.wait:.0f} s (stopped); see {log_path}",
              file=sys.stderr)
        return 1
    pidfile.write_text(f"{proc.pid}\n")
    listen = ready.read_text().split()
    if args.json:
        print(json.dumps({"pid": proc.pid, "listen": listen, "log": str(log_path), "state_dir": str(state_dir)}))
    else:
        print(f"executor: serving (pid {proc.pid}) on {', '.join(listen)}; log {log_path}; `executor stop` ends it")
    return 0


def _running_pid(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    try:  # the pid is ours only if it is still an executor daemon
        if b"executor" not in Path(f"/proc/{pid}/cmdline").read_bytes():
            return None
    except OSError:
        pass
    return pid


def _stop(args: argparse.Namespace) -> int:
    """``executor stop``: ends the daemon ``executor start`` started (SIGTERM: it drains first)."""
    import signal
    import time

    from executor.config import default_state_dir

    state_dir = Path(args.state_dir or default_state_dir()).expanduser()
    pidfile = state_dir / "executor.pid"
    pid = _running_pid(pidfile)
    if pid is None:
        print(f"executor: no daemon started by `executor start` is running (no live pid in {pidfile})",
              file=sys.stderr)
        pidfile.unlink(missing_ok=True)
        return 1
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            break
        time.sleep(0.1)
    else:
        print(f"executor: pid {pid} is still draining after {args.wait:.0f} s", file=sys.stderr)
        return 1
    pidfile.unlink(missing_ok=True)
    print(f"executor: stopped (pid {pid})")
    return 0


def _default_target() -> str:
    from executor.client import default_target

    return default_target()


def _exec_pty(args: argparse.Namespace, command: str) -> int:
    """An interactive terminal through the Pty RPC: raw local tty, resize on SIGWINCH, exit mirrored."""
    import queue
    import shutil
    import signal
    import termios
    import threading
    import tty

    from executor.v1 import executor_pb2 as pb

    inputs: queue.Queue[pb.PtyInput | None] = queue.Queue()
    cols, rows = shutil.get_terminal_size()
    inputs.put(pb.PtyInput(open=pb.PtyOpen(task_id=args.task, command=command, backend=args.backend,
                                           size=pb.PtySize(rows=rows, cols=cols), workdir=args.workdir)))

    def requests() -> Iterator[pb.PtyInput]:
        while True:
            item = inputs.get()
            if item is None:
                return
            yield item

    def on_resize(*_: object) -> None:
        c, r = shutil.get_terminal_size()
        inputs.put(pb.PtyInput(resize=pb.PtySize(rows=r, cols=c)))

    def pump_stdin() -> None:
        fd = sys.stdin.fileno()
        while True:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return
            if not data:
                return
            inputs.put(pb.PtyInput(data=data))

    interactive = sys.stdin.isatty()
    saved = termios.tcgetattr(sys.stdin.fileno()) if interactive else None
    code = 125
    try:
        if interactive:
            tty.setraw(sys.stdin.fileno())
            signal.signal(signal.SIGWINCH, on_resize)
        threading.Thread(target=pump_stdin, daemon=True).start()
        with connect(args, args.target or _default_target()) as client:
            for out in client.pty(requests()):
                kind = out.WhichOneof("output")
                if kind == "data":
                    sys.stdout.buffer.write(out.data)
                    sys.stdout.buffer.flush()
                elif kind == "approval_required":
                    a = out.approval_required
                    sys.stderr.write(f"executor: waiting for approval {a.approval_id} ({a.rule}: {a.reason})\r\n")
                elif kind == "exit":
                    code = _exit_code(out.exit)
                    break
    finally:
        inputs.put(None)
        if saved is not None:
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSADRAIN, saved)
    return code


def _explain(exc: ExecutorError, target: str | None) -> str:
    """The error's message; when no daemon answers, also how to start one."""
    from executor.client import Unavailable

    message = f"executor: {exc.message}"
    if isinstance(exc, Unavailable):
        message += (f"\nexecutor: no daemon answers at {target or _default_target()}; start one with "
                    f"`executor serve` (or `make serve` in a checkout), or point --target / EXECUTOR_TARGET at it")
    return message


def _exit_code(e: pb.Exit) -> int:
    """The command's exit code as a shell would see it; 124 timeout, 126 denied, 125 other failures."""
    from executor.v1 import executor_pb2 as pb

    if e.message and e.status != pb.EXIT_STATUS_COMPLETED:
        print(f"executor: {e.message}", file=sys.stderr)
    if e.status == pb.EXIT_STATUS_COMPLETED:
        return e.exit_code if e.exit_code >= 0 else 128 - e.exit_code
    return {pb.EXIT_STATUS_TIMED_OUT: 124, pb.EXIT_STATUS_DENIED: 126}.get(e.status, 125)


def _exec(args: argparse.Namespace) -> int:
    from executor.client import ExecutorError

    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("executor exec: give a command after --", file=sys.stderr)
        return 2
    # one word is a shell command line ("ls -la | wc"); several are argv, quoted for the shell
    text = command[0] if len(command) == 1 else shlex.join(command)
    if args.pty:
        return _exec_pty(args, "" if text == "-" else text)
    stdin = sys.stdin.buffer.read() if args.stdin else b""
    if args.json:
        return _exec_json(args, text, stdin)
    try:
        with connect(args, args.target or _default_target()) as client:
            code = None
            for event in client.exec(args.task, text, timeout=args.timeout, backend=args.backend, stdin=stdin,
                                     workdir=args.workdir):
                kind = event.WhichOneof("event")
                if kind == "stdout":
                    sys.stdout.buffer.write(event.stdout)
                    sys.stdout.buffer.flush()
                elif kind == "stderr":
                    sys.stderr.buffer.write(event.stderr)
                    sys.stderr.buffer.flush()
                elif kind == "approval_required":
                    a = event.approval_required
                    print(f"executor: waiting for approval {a.approval_id} ({a.rule}: {a.reason})", file=sys.stderr)
                elif kind == "exit":
                    code = _exit_code(event.exit)
            return 125 if code is None else code
    except ExecutorError as exc:
        print(_explain(exc, args.target), file=sys.stderr)
        return 125


def _exec_json(args: argparse.Namespace, text: str, stdin: bytes) -> int:
    """``exec --json``: one JSON object at the end (stdout, stderr, exit_code, status, cwd, …)."""
    import json

    from executor.client import ExecutorError, collect

    try:
        with connect(args, args.target or _default_target()) as client:
            r = collect(client.exec(args.task, text, timeout=args.timeout, backend=args.backend, stdin=stdin,
                                    workdir=args.workdir))
    except ExecutorError as exc:
        print(json.dumps({"error": exc.message, "code": exc.code.name if exc.code else "UNKNOWN"}))
        print(_explain(exc, args.target), file=sys.stderr)
        return 125
    print(json.dumps({"stdout": r.stdout_text, "stderr": r.stderr_text, "exit_code": r.exit_code,
                      "status": str(r.status), "ok": r.ok, "cwd": r.cwd, "message": r.message, "rule": r.rule,
                      "duration_seconds": r.duration}))
    code = r.exit_code if r.exit_code >= 0 else 128 - r.exit_code
    return code if r.status == 1 else {2: 124, 4: 126}.get(int(r.status), 125)


def _doctor(args: argparse.Namespace) -> int:
    from executor.doctor import run

    return run(args.config or os.environ.get("EXECUTOR_CONFIG"), args.state_dir, as_json=args.json)


def _health(args: argparse.Namespace) -> int:
    from executor.doctor import health

    return health(args.target or _default_target(), args.timeout, as_json=args.json)


def _mcp(args: argparse.Namespace) -> int:
    from executor.mcp_server import serve

    try:
        return serve(target=args.target, token=args.token, task_id=args.task, backend=args.backend, http=args.http,
                     http_token=args.http_token)
    except ValueError as exc:
        print(f"executor mcp: {exc}", file=sys.stderr)
        return 2


def _tool_schema(args: argparse.Namespace) -> int:
    import json

    from executor.tool import TOOLS

    print(json.dumps(TOOLS, indent=2))
    return 0


def connect(args: argparse.Namespace, target: str) -> "Client":
    """The client the command line asked for (token, TLS), to ``target``."""
    from executor.cli_commands import client

    return client(args, target)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executor", description="A sandboxed execution backend for AI agents.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    from executor.cli_commands import add_commands, add_connection

    common = argparse.ArgumentParser(add_help=False)
    add_connection(common)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    common.add_argument("--deadline", type=float, default=60.0, help="seconds for each call")
    add_commands(sub, common)

    s = sub.add_parser("serve", help="run the daemon")
    s.add_argument("--config", help="YAML config file (also EXECUTOR_CONFIG)")
    s.add_argument("--listen", action="append", help="unix:///path or HOST:PORT (repeatable)")
    s.add_argument("--state-dir", help="state directory (default $XDG_STATE_HOME/executor)")
    s.add_argument("--ready-file", help=argparse.SUPPRESS)
    s.set_defaults(func=_serve)

    d = sub.add_parser("doctor", help="check the config and every configured backend, and say how to fix problems")
    d.add_argument("--config", help="YAML config file (also EXECUTOR_CONFIG)")
    d.add_argument("--state-dir", help="state directory to check")
    d.add_argument("--json", action="store_true", help="machine-readable output")
    d.set_defaults(func=_doctor)

    h = sub.add_parser("health", help="exit 0 when the daemon answers SERVING (for container health checks)")
    h.add_argument("--target", default=os.environ.get("EXECUTOR_TARGET"), help="daemon address (EXECUTOR_TARGET)")
    h.add_argument("--timeout", type=float, default=5.0)
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.set_defaults(func=_health)

    st = sub.add_parser("start", help="run the daemon in the background (its log in the state directory)")
    st.add_argument("--config", help="YAML config file (also EXECUTOR_CONFIG)")
    st.add_argument("--listen", action="append", help="unix:///path or HOST:PORT (repeatable)")
    st.add_argument("--state-dir", help="state directory (default $XDG_STATE_HOME/executor)")
    st.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it to answer")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=_start)

    sp = sub.add_parser("stop", help="stop the daemon `executor start` started (it drains first)")
    sp.add_argument("--state-dir", help="state directory (default $XDG_STATE_HOME/executor)")
    sp.add_argument("--wait", type=float, default=60.0, help="seconds to wait for it to end")
    sp.set_defaults(func=_stop)

    m = sub.add_parser("mcp", help="serve the terminal and process tools over MCP (stdio, or --http)")
    m.add_argument("--target", default=os.environ.get("EXECUTOR_TARGET"), help="daemon address (EXECUTOR_TARGET)")
    m.add_argument("--token", default=os.environ.get("EXECUTOR_TOKEN"), help="bearer token (EXECUTOR_TOKEN)")
    m.add_argument("--task", default=os.environ.get("EXECUTOR_TASK") or None,
                   help="one task id for every session (default: a fresh task per MCP session; EXECUTOR_TASK)")
    m.add_argument("--backend", default="", help="backend name (default: the daemon's default)")
    m.add_argument("--http", metavar="HOST:PORT", help="serve streamable HTTP on loopback instead of stdio")
    m.add_argument("--http-token", default=os.environ.get("EXECUTOR_MCP_HTTP_TOKEN"),
                   help="with --http: the bearer token HTTP clients must send (EXECUTOR_MCP_HTTP_TOKEN; >= 16 characters)")
    m.set_defaults(func=_mcp)

    ts = sub.add_parser("tool-schema", help="print the model-facing tool schemas (OpenAI function format)")
    ts.set_defaults(func=_tool_schema)

    e = sub.add_parser("exec", help="run one command in a task and stream its output")
    add_connection(e)
    e.add_argument("--task", required=True, help="task id")
    e.add_argument("--backend", default="", help="backend name (default: the daemon's default)")
    e.add_argument("--timeout", type=float, default=0.0, help="seconds (0 = the daemon's default)")
    e.add_argument("--workdir", default="", help="working directory for this call, inside the task")
    e.add_argument("--stdin", action="store_true", help="send this process's stdin to the command")
    e.add_argument("--pty", action="store_true", help="an interactive terminal (`-- -` for the task's shell)")
    e.add_argument("--json", action="store_true", help="one JSON object with the output and how it ended")
    e.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    e.set_defaults(func=_exec)
    return parser


def main(argv: list[str] | None = None) -> int:
    from executor.client import ExecutorError

    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func  # every subcommand sets one
    try:
        return func(args)
    except ExecutorError as exc:
        print(_explain(exc, getattr(args, "target", None)), file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0

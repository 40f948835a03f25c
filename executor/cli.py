"""The `executor` command: `serve` runs the daemon; `exec` runs one command through it."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path


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
        asyncio.run(serve(config, state_dir, listen, ready_file=args.ready_file))
    except ConfigError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 2
    return 0


def _default_target() -> str:
    from executor.client import default_target

    return default_target()


def _exec(args: argparse.Namespace) -> int:
    from executor.client import Client, ExecutorError

    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("executor exec: give a command after --", file=sys.stderr)
        return 2
    text = command[0] if len(command) == 1 else " ".join(command)
    stdin = sys.stdin.buffer.read() if args.stdin else b""
    try:
        with Client(args.target or _default_target(), token=args.token) as client:
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
                    e = event.exit
                    if e.message:
                        print(f"executor: {e.message}", file=sys.stderr)
                    from executor.v1 import executor_pb2 as pb

                    if e.status == pb.EXIT_STATUS_COMPLETED:
                        code = e.exit_code if e.exit_code >= 0 else 128 - e.exit_code
                    elif e.status == pb.EXIT_STATUS_TIMED_OUT:
                        code = 124
                    elif e.status == pb.EXIT_STATUS_DENIED:
                        code = 126
                    else:
                        code = 125
            return 125 if code is None else code
    except ExecutorError as exc:
        print(f"executor: {exc}", file=sys.stderr)
        return 125


def _doctor(args: argparse.Namespace) -> int:
    from executor.doctor import run

    return run(args.config or os.environ.get("EXECUTOR_CONFIG"), args.state_dir, as_json=args.json)


def _health(args: argparse.Namespace) -> int:
    from executor.doctor import health

    return health(args.target or _default_target(), args.timeout)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="executor", description="A sandboxed execution backend for AI agents.")
    sub = parser.add_subparsers(dest="cmd", required=True)

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
    h.set_defaults(func=_health)

    e = sub.add_parser("exec", help="run one command in a task and stream its output")
    e.add_argument("--target", default=os.environ.get("EXECUTOR_TARGET"), help="daemon address (EXECUTOR_TARGET)")
    e.add_argument("--token", default=os.environ.get("EXECUTOR_TOKEN"), help="bearer token (EXECUTOR_TOKEN)")
    e.add_argument("--task", required=True, help="task id")
    e.add_argument("--backend", default="", help="backend name (default: the daemon's default)")
    e.add_argument("--timeout", type=float, default=0.0, help="seconds (0 = the daemon's default)")
    e.add_argument("--workdir", default="", help="working directory for this call, inside the task")
    e.add_argument("--stdin", action="store_true", help="send this process's stdin to the command")
    e.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND...")
    e.set_defaults(func=_exec)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)

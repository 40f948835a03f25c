"""The human CLI's commands over the client: tables for people, `--json` for scripts.

Exit codes: 0 success; 1 the thing asked about is not OK (a gate verdict other than allow, an
unavailable backend); 2 bad usage; 3 the daemon refused or failed the call (its message on stderr)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

import grpc

from executor.client import PROCESS_STATES, Client, ExecutorError, tls_credentials
from executor.v1 import executor_pb2 as pb

GATE = {pb.GATE_DECISION_ALLOW: "allow", pb.GATE_DECISION_ASK: "ask", pb.GATE_DECISION_DENY: "deny"}


def _colour(text: str, code: str) -> str:
    if sys.stdout.isatty() and not os.environ.get("NO_COLOR"):
        return f"\x1b[{code}m{text}\x1b[0m"
    return text


def table(rows: list[list[Any]], headers: list[str]) -> str:
    cells = [headers] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    lines[0] = _colour(lines[0], "1")
    return "\n".join(lines)


def _out(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2, default=str) if args.json else text)


def _proc_dict(p: pb.ProcessInfo) -> dict[str, Any]:
    return {"process_id": p.process_id, "task_id": p.task_id, "command": p.command,
            "state": PROCESS_STATES.get(p.state), "exit_code": p.exit_code, "signal": p.signal,
            "started_at": p.started_at, "ended_at": p.ended_at}


def add_connection(parser: argparse.ArgumentParser) -> None:
    """--target, --token and TLS (--ca, --cert, --key), each with its environment variable."""
    env = os.environ.get
    parser.add_argument("--target", default=env("EXECUTOR_TARGET"), help="daemon address (EXECUTOR_TARGET)")
    parser.add_argument("--token", default=env("EXECUTOR_TOKEN"), help="bearer token (EXECUTOR_TOKEN)")
    parser.add_argument("--ca", default=env("EXECUTOR_CA"), metavar="PEM",
                        help="TLS: the CA that signed the daemon's certificate (EXECUTOR_CA); any of --ca, --cert "
                             "and --key connects with TLS (system roots without --ca)")
    parser.add_argument("--cert", default=env("EXECUTOR_CERT"), metavar="PEM",
                        help="TLS: this client's certificate, when the daemon asks for one (EXECUTOR_CERT)")
    parser.add_argument("--key", default=env("EXECUTOR_KEY"), metavar="PEM",
                        help="TLS: the key of --cert (EXECUTOR_KEY)")


def credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """TLS credentials from --ca/--cert/--key; a file that cannot be used ends the command saying which."""
    try:
        return tls_credentials(getattr(args, "ca", None), getattr(args, "cert", None), getattr(args, "key", None))
    except ValueError as exc:
        raise SystemExit(f"executor: {exc}") from None


def client(args: argparse.Namespace, target: str | None = None) -> Client:
    """A client as the command line asked for it (target, token, TLS, deadline)."""
    return Client(target or args.target or None, token=args.token, credentials=credentials(args),
                  deadline=getattr(args, "deadline", None))


def cmd_ps(args: argparse.Namespace) -> int:
    with client(args) as c:
        procs = [_proc_dict(p) for p in c.list_processes(args.task or "").processes]
    rows = [[p["process_id"], p["task_id"], p["state"], p["exit_code"] if p["state"] != "running" else "",
             time.strftime("%H:%M:%S", time.localtime(p["started_at"])), p["command"][:60]] for p in procs]
    _out(args, procs, table(rows, ["ID", "TASK", "STATE", "EXIT", "STARTED", "COMMAND"]) if procs else "no processes")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    with client(args) as c:
        if args.follow:
            for chunk in c.follow_output(args.process_id, offset=args.offset, stream=args.stream):
                if args.json:  # one line per chunk: its offset, its text
                    print(json.dumps({"offset": chunk.offset, "data": chunk.data.decode("utf-8", "replace")}),
                          flush=True)
                    continue
                sys.stdout.buffer.write(chunk.data)
                sys.stdout.buffer.flush()
            return 0
        r = c.read_output(args.process_id, offset=args.offset, stream=args.stream)
        if args.json:
            _out(args, {"data": r.data.decode("utf-8", "replace"), "offset": r.offset, "next_offset": r.next_offset,
                        "eof": r.eof, "rotated": r.rotated}, "")
        else:
            sys.stdout.buffer.write(r.data)
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    with client(args) as c:
        p = c.signal_process(args.process_id, args.signal)
    _out(args, _proc_dict(p), f"{p.process_id}: {PROCESS_STATES.get(p.state)}")
    return 0


def cmd_tasks(args: argparse.Namespace) -> int:
    with client(args) as c:
        resp = c.list_tasks()
    tasks = [{"task_id": t.task_id, "backend": t.backend, "cwd": t.cwd, "busy": t.busy,
              "running_processes": t.running_processes, "commands_run": t.commands_run,
              "last_used_at": t.last_used_at} for t in resp.tasks]
    rows = [[t["task_id"], t["backend"], "busy" if t["busy"] else "idle", t["running_processes"],
             t["commands_run"], t["cwd"]] for t in tasks]
    _out(args, {"tasks": tasks, "idle_reaped": resp.idle_reaped},
         table(rows, ["TASK", "BACKEND", "STATE", "PROCS", "CMDS", "CWD"]) if tasks else "no tasks")
    return 0


def cmd_close(args: argparse.Namespace) -> int:
    with client(args) as c:
        r = c.close_task(args.task_id, remove_files=args.remove_files)
    _out(args, {"existed": r.existed, "processes_ended": r.processes_ended},
         f"{args.task_id}: {'closed' if r.existed else 'was not open'}, {r.processes_ended} processes ended")
    return 0


def cmd_backends(args: argparse.Namespace) -> int:
    with client(args) as c:
        resp = c.list_backends()
    data = []
    rows = []
    for b in resp.backends:
        caps = b.capabilities
        names = [n for n in ("pty", "resize", "signals", "stdin", "background", "persistent_shell",
                             "file_transfer", "streaming") if getattr(caps, n)]
        data.append({"name": b.name, "kind": b.kind, "available": b.available, "reason": b.reason,
                     "default": b.is_default, "capabilities": names, "network": caps.network_policy,
                     "policy": dict(b.policy)})
        state = _colour("available", "32") if b.available else _colour("unavailable", "31")
        rows.append([b.name + (" *" if b.is_default else ""), b.kind, state, ",".join(names), b.reason])
    _out(args, data, table(rows, ["NAME", "KIND", "STATE", "CAPABILITIES", "REASON"]))
    return 0 if all(b["available"] for b in data) else 1


def cmd_check(args: argparse.Namespace) -> int:
    with client(args) as c:
        v = c.check_command(args.command, task_id=args.task or "", backend=args.backend)
    decision = GATE.get(v.decision, "unknown")
    data = {"decision": decision, "rule": v.rule, "reason": v.reason, "segment": v.segment}
    colour = {"allow": "32", "ask": "33", "deny": "31"}.get(decision, "0")
    text = _colour(decision, colour) + (f"  [{v.rule}] {v.reason}\n  segment: {v.segment}" if v.rule else "")
    _out(args, data, text)
    return 0 if decision == "allow" else 1


def _fleet_members(spec: str) -> dict[str, str]:
    """``name=target,name=target`` (or plain targets, each naming its member)."""
    out = {}
    for item in filter(None, (x.strip() for x in spec.split(","))):
        name, sep, target = item.partition("=")
        out[name if sep else item] = target if sep else item
    if not out:
        raise SystemExit("--fleet needs at least one member: name=host:port,...")
    return out


def cmd_fleet_approvals(args: argparse.Namespace) -> int:
    """Every fleet member's pending approvals; decisions go to the owner, `always` to every member."""
    from executor.fleet import FleetApprovals

    interactive = sys.stdin.isatty() and not args.json
    with FleetApprovals(_fleet_members(args.fleet), token=args.token, deadline=args.deadline,
                        credentials=credentials(args)) as fa:
        for item in fa.watch(args.task or ""):
            p = item.approval
            if args.json:
                print(json.dumps({"member": item.member, "approval_id": p.approval_id, "task_id": p.task_id,
                                  "command": p.command, "rule": p.rule, "reason": p.reason, "segment": p.segment,
                                  "backend": p.backend, "resolved": p.resolved}), flush=True)
                continue
            if p.resolved:
                print(f"  {p.approval_id}: no longer pending", flush=True)
                continue
            left = max(0, p.expires_at - time.time())
            print(_colour(f"\n{p.approval_id}", "1") + f"  task {p.task_id} on {p.backend} at {item.member}  "
                  f"({left:.0f} s left)")
            print(f"  command: {p.command}\n  rule:    {p.rule}: {p.reason}\n  segment: {p.segment}", flush=True)
            if not interactive:
                continue
            answer = input("  [o]nce, [s]ession, [a]lways (every member), [d]eny, [enter] skip? ").strip().lower()[:1]
            decision = {"o": "once", "s": "session", "a": "always", "d": "deny"}.get(answer)
            if decision:
                try:
                    r = fa.resolve(p.approval_id, decision, reason="decided in executor approvals --fleet", pending=p)
                    shared = "; ".join(f"{m}: {v}" for m, v in r.shared.items())
                    print(f"  {decision} on {r.owner}" + (f" (shared: {shared})" if shared else ""), flush=True)
                except ExecutorError as exc:
                    print(f"  not recorded: {exc.message}", file=sys.stderr)
    return 0


def cmd_fleet_approve(args: argparse.Namespace) -> int:
    from executor.fleet import FleetApprovals

    with FleetApprovals(_fleet_members(args.fleet), token=args.token, deadline=args.deadline,
                        credentials=credentials(args)) as fa:
        pending = None
        if args.decision == "always":  # the command and rule to share: from the owner's pending list
            pending = next((p for p in fa.pending_on(fa.owner(args.approval_id)) if p.approval_id == args.approval_id),
                           None)
        r = fa.resolve(args.approval_id, args.decision, reason=args.reason, pending=pending)
    _out(args, {"approval_id": args.approval_id, "decision": args.decision, "owner": r.owner, "shared": r.shared},
         f"{args.approval_id}: {args.decision} on {r.owner}" + "".join(f"\n  {m}: {v}" for m, v in r.shared.items()))
    return 0 if all(v in ("stored", "already held") for v in r.shared.values()) else 1


def cmd_fleet_proxy_config(args: argparse.Namespace) -> int:
    from executor import placement

    members = _fleet_members(args.members)
    if args.format == "nginx":
        print(placement.nginx_upstream(members), end="")
    else:
        front, back = placement.haproxy_routing(members)
        print(front + "\n" + back, end="")
    return 0


def cmd_fleet_owner(args: argparse.Namespace) -> int:
    from executor import placement

    members = _fleet_members(args.members)
    owner = placement.owner_of(args.task_id, members)
    _out(args, {"task_id": args.task_id, "slot": placement.slot_of(args.task_id), "owner": owner,
                "target": members[owner]}, owner)
    return 0


def cmd_approvals(args: argparse.Namespace) -> int:
    """Watch pending approvals live; with a terminal, ask for each decision."""
    if args.fleet:
        return cmd_fleet_approvals(args)
    interactive = sys.stdin.isatty() and not args.json
    with client(args) as c:
        for p in c.watch_approvals(args.task or ""):
            if args.json:
                print(json.dumps({"approval_id": p.approval_id, "task_id": p.task_id, "command": p.command,
                                  "rule": p.rule, "reason": p.reason, "segment": p.segment, "resolved": p.resolved}),
                      flush=True)
                continue
            if p.resolved:
                print(f"  {p.approval_id}: no longer pending", flush=True)
                continue
            left = max(0, p.expires_at - time.time())
            print(_colour(f"\n{p.approval_id}", "1") + f"  task {p.task_id} on {p.backend}  ({left:.0f} s left)")
            print(f"  command: {p.command}\n  rule:    {p.rule}: {p.reason}\n  segment: {p.segment}", flush=True)
            if not interactive:
                continue
            answer = input("  [o]nce, [s]ession, [a]lways, [d]eny, [enter] skip? ").strip().lower()[:1]
            decision = {"o": "once", "s": "session", "a": "always", "d": "deny"}.get(answer)
            if decision:
                try:
                    c.resolve_approval(p.approval_id, decision, reason="decided in executor approvals")
                    print(f"  {decision}", flush=True)
                except ExecutorError as exc:
                    print(f"  not recorded: {exc.message}", file=sys.stderr)
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    if args.fleet:
        return cmd_fleet_approve(args)
    with client(args) as c:
        c.resolve_approval(args.approval_id, args.decision, reason=args.reason)
    _out(args, {"approval_id": args.approval_id, "decision": args.decision}, f"{args.approval_id}: {args.decision}")
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                 common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("ps", parents=[common], help="list background processes")
    p.add_argument("--task", help="only this task's")
    p.set_defaults(func=cmd_ps)

    p = sub.add_parser("logs", parents=[common], help="a background process's output")
    p.add_argument("process_id")
    p.add_argument("-f", "--follow", action="store_true", help="follow until the process exits")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--stream", choices=["", "stdout", "stderr"], default="")
    p.set_defaults(func=cmd_logs)

    p = sub.add_parser("kill", parents=[common], help="signal a background process (its whole group)")
    p.add_argument("process_id")
    p.add_argument("-s", "--signal", default="SIGTERM")
    p.set_defaults(func=cmd_kill)

    p = sub.add_parser("tasks", parents=[common], help="list tasks")
    p.set_defaults(func=cmd_tasks)

    p = sub.add_parser("close", parents=[common], help="close a task (end its processes, release its sandbox)")
    p.add_argument("task_id")
    p.add_argument("--remove-files", action="store_true")
    p.set_defaults(func=cmd_close)

    p = sub.add_parser("backends", parents=[common], help="backends: availability, reason, capabilities")
    p.set_defaults(func=cmd_backends)

    p = sub.add_parser("check", parents=[common], help="the gate's verdict on a command, and why")
    p.add_argument("command")
    p.add_argument("--task", default="")
    p.add_argument("--backend", default="")
    p.set_defaults(func=cmd_check)

    fleet_help = ("every member of a fleet: name=host:port,... (each member directly); decisions go to the "
                  "approval's owner and `always` to every member")
    p = sub.add_parser("approvals", parents=[common], help="watch pending approvals; approve or deny them")
    p.add_argument("--task", default="")
    p.add_argument("--fleet", default=os.environ.get("EXECUTOR_FLEET", ""), help=fleet_help + " (EXECUTOR_FLEET)")
    p.set_defaults(func=cmd_approvals)

    p = sub.add_parser("approve", parents=[common], help="resolve one approval")
    p.add_argument("approval_id")
    p.add_argument("decision", choices=["once", "session", "always", "deny"])
    p.add_argument("--reason", default="")
    p.add_argument("--fleet", default=os.environ.get("EXECUTOR_FLEET", ""), help=fleet_help + " (EXECUTOR_FLEET)")
    p.set_defaults(func=cmd_approve)

    p = sub.add_parser("fleet", help="fleet placement: the proxies' routing config, a task's owner")
    fsub = p.add_subparsers(dest="fleet_cmd", required=True)
    f = fsub.add_parser("proxy-config", help="nginx upstream / HAProxy rules placing tasks on their owners")
    f.add_argument("--format", choices=["nginx", "haproxy"], required=True)
    f.add_argument("--members", required=True, help="name=host:port,... (the daemons' fleet.members, with addresses)")
    f.set_defaults(func=cmd_fleet_proxy_config)
    f = fsub.add_parser("owner", parents=[common], help="the member that owns a task")
    f.add_argument("task_id")
    f.add_argument("--members", required=True, help="name=host:port,... or names")
    f.set_defaults(func=cmd_fleet_owner)

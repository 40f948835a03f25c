"""Many tasks at once on one ssh host: errors (target 0) and the latency of each task's first Exec.

Each task's first Exec starts that task's shell, i.e. opens a channel on the backend's connections
(and, past the server's MaxSessions, new connections). All tasks start together, through a real
daemon on the ssh backend.

    .venv/bin/python -m bench.ssh_scale --tasks 1000             # a private sshd with OpenSSH's defaults
    .venv/bin/python -m bench.ssh_scale --tasks 200 --shared     # the shared test sshd (MaxSessions 64)

The private sshd (tests/infra/private_sshd.py) has OpenSSH's default MaxSessions 10 and
MaxStartups 10:30:100 unless --sshd-config adds lines; it is stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from executor.client import AsyncClient, ExecutorError
from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


async def run_tasks(target: str, n: int, command: str, rpc_timeout: float) -> dict[str, Any]:
    errors: Counter[str] = Counter()
    firsts: list[float] = []
    prefix = uuid.uuid4().hex[:6]
    async with AsyncClient(target, deadline=rpc_timeout) as client:
        gate = asyncio.Event()

        async def task(i: int) -> None:
            await gate.wait()
            started = time.perf_counter()
            try:
                result = await client.run(f"scale-{prefix}-{i}", command, rpc_timeout=rpc_timeout)
            except ExecutorError as exc:
                errors[f"rpc {exc.code.name if exc.code else '?'}: {exc}"[:200]] += 1
                return
            took = time.perf_counter() - started
            if result.exit.status != pb.EXIT_STATUS_COMPLETED or result.exit.exit_code != 0:
                errors[f"{pb.ExitStatus.Name(result.exit.status)} {result.exit.exit_code}: "
                       f"{result.exit.message}"[:200]] += 1
            elif result.stdout != b"ok\n":
                errors[f"wrong output {result.stdout[:40]!r}"] += 1
            else:
                firsts.append(took)

        tasks = [asyncio.create_task(task(i)) for i in range(n)]
        await asyncio.sleep(0.1)
        wall = time.perf_counter()
        gate.set()
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - wall
        backends = await client.list_backends()
        closing = [client.close_task(f"scale-{prefix}-{i}", remove_files=True) for i in range(n)]
        await asyncio.gather(*closing, return_exceptions=True)
    return {
        "tasks": n,
        "errors": sum(errors.values()),
        "error_kinds": dict(errors.most_common(5)),
        "first_exec_p50_ms": round(statistics.median(firsts) * 1000, 1) if firsts else None,
        "first_exec_p99_ms": round(percentile(firsts, 99) * 1000, 1) if firsts else None,
        "wall_s": round(wall, 2),
        "backend_health": [f"{b.name}: {'available' if b.available else 'UNAVAILABLE'}"
                           f"{' - ' + b.reason if b.reason else ''}" for b in backends.backends],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--shared", action="store_true", help="use the shared test sshd (MaxSessions 64)")
    parser.add_argument("--sshd-config", default="", help="extra lines for the private sshd's config")
    parser.add_argument("--command", default="echo ok")
    parser.add_argument("--rpc-timeout", type=float, default=600)
    args = parser.parse_args()

    sshd = None
    if args.shared:
        from tests.infra import ssh as infra
        options = {k: v for k, v in infra.provision().items() if k != "kind"}
    else:
        from tests.infra.private_sshd import PrivateSSHD
        sshd = PrivateSSHD(Path(tempfile.mkdtemp(prefix="executor-ssh-scale-")),
                           args.sshd_config.replace("\\n", "\n") + "\n").start()
        options = sshd.options()
    config = {"backend": "ssh", "backends": {"ssh": {"kind": "ssh", **options}},
              "logging": {"level": "warning"},
              "limits": {"max_tasks": max(1024, args.tasks + 16), "max_concurrent_execs": max(256, args.tasks)}}
    state = Path(tempfile.mkdtemp(prefix="executor-ssh-scale-")) / "state"
    daemon = DaemonProcess(config, state_dir=state).start(timeout=120)
    try:
        result = asyncio.run(run_tasks(daemon.target, args.tasks, args.command, args.rpc_timeout))
        result["sshd"] = "shared (MaxSessions 64, MaxStartups 50:30:100)" if args.shared else \
            f"private (OpenSSH defaults{' + ' + args.sshd_config if args.sshd_config else ''})"
        result["load1"] = round(__import__("os").getloadavg()[0], 2)
        print(json.dumps(result, indent=2))
    finally:
        daemon.stop(timeout=60)
        daemon.kill()
        if sshd is not None:
            sshd.stop()
    sys.exit(1 if result["errors"] else 0)


if __name__ == "__main__":
    main()

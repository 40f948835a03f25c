"""Many clients each starting a new task on the docker backend at once (issue 19).

Through a real daemon (``tests.daemon.DaemonProcess``) on the docker backend: N clients each send
the first ``Exec("true")`` of a new task at the same moment; the figure is each client's time to
its Exit (p50 / p99 / max), for N in 1, 20, 50, 200 (``--counts``). With ``--per-task`` the daemon
runs ``per_task: true`` (one container per task: creation throughput). ``--procs`` also reports
the processes and memory each task holds in the shared container once all shells are up.

    .venv/bin/python -m bench.docker_scale [--counts 1,20,50,200] [--per-task] [--parallel-starts N]

Containers and volumes are labelled ``io.executor.test=bench-scale`` and removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

from bench.common import load1, percentile, say
from executor.client import AsyncClient
from tests.daemon import DaemonProcess

LABEL = {"io.executor.test": "bench-scale"}


async def first_exec(client: AsyncClient, task: str, t0: float) -> tuple[float, str]:
    status = ""
    try:
        async for event in client.exec(task, "true", rpc_timeout=600):
            if event.WhichOneof("event") == "exit":
                status = f"exit {event.exit.exit_code} {event.exit.message}" if event.exit.exit_code or event.exit.message else "ok"
    except Exception as exc:  # noqa: BLE001 - reported per client
        status = f"error: {exc}"
    return time.monotonic() - t0, str(status)


async def burst(target: str, n: int, prefix: str) -> list[tuple[float, str]]:
    clients = [AsyncClient(target) for _ in range(n)]
    try:
        t0 = time.monotonic()
        return await asyncio.gather(*(first_exec(c, f"{prefix}-{i}", t0) for i, c in enumerate(clients)))
    finally:
        await asyncio.gather(*(c.close() for c in clients))


def container_usage(instance_hint: str) -> dict[str, float]:
    """Processes and memory in the daemon's shared container (docker-py, from the host)."""
    import docker

    api = docker.APIClient(version="auto")
    try:
        for c in api.containers(filters={"label": ["io.executor.test=bench-scale", "io.executor.scope=shared"]}):
            if instance_hint and instance_hint not in c["Names"][0]:
                continue
            stats = api.stats(c["Id"], stream=False, one_shot=True)
            top = api.top(c["Id"], ps_args="-eo pid,rss,comm")
            rss = {}
            for row in top["Processes"]:
                rss[row[2]] = rss.get(row[2], 0) + int(row[1])
            return {"pids": stats["pids_stats"].get("current", 0),
                    "memory_mib": round(stats["memory_stats"].get("usage", 0) / 2**20, 1),
                    "rss_kib_by_program": rss}
    finally:
        api.close()
    return {}


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="1,20,50,200")
    parser.add_argument("--per-task", action="store_true")
    parser.add_argument("--parallel-starts", type=int, default=None)
    parser.add_argument("--procs", action="store_true", help="report processes and memory per task")
    args = parser.parse_args()
    options = {"kind": "docker", "labels": LABEL, "remove_on_close": True, "per_task": args.per_task}
    if args.parallel_starts:
        options["max_parallel_starts"] = args.parallel_starts
    counts = [int(c) for c in args.counts.split(",")]
    config = {"backend": "docker", "backends": {"docker": options},
              "limits": {"default_timeout_seconds": 600, "max_tasks": 4096},
              "approval": {"mode": "allow"}}
    results = []
    for n in counts:
        daemon = DaemonProcess(config).start()
        try:
            async with asyncio.timeout(900):
                warm = AsyncClient(daemon.target)
                await first_exec(warm, "warm", time.monotonic())  # the container exists before the burst
                await warm.close()
                say(f"{n} new tasks at once (load {load1()})...")
                got = await burst(daemon.target, n, f"b{n}")
            times = [t for t, _ in got]
            failed = [s for _, s in got if s.startswith("error")]
            row = {"tasks": n, "per_task": args.per_task, "p50_s": round(percentile(times, 0.5), 2),
                   "p99_s": round(percentile(times, 0.99), 2), "max_s": round(max(times), 2),
                   "failed": len(failed), "first_error": failed[0][:300] if failed else "", "load1": load1()}
            if args.procs and not args.per_task:
                usage = await asyncio.to_thread(container_usage, "")
                row["container"] = usage
                if usage:
                    row["pids_per_task"] = round((usage["pids"] - 3) / (n + 1), 2)
                    row["memory_mib_per_task"] = round(usage["memory_mib"] / (n + 1), 2)
            results.append(row)
            say(json.dumps(row))
        finally:
            daemon.stop()
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

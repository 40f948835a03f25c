"""The fleet: three real daemons behind real nginx and HAProxy (tests/infra/fleet.py, the configs
of executor.placement as in deploy/, timeouts as deployed).

1. Exec of ``true`` on one warm task, p50/p99, straight to its owner (TCP loopback) vs through nginx
   vs through HAProxy, in alternating batches of 25 so the three see the same load; the client is
   ``executor.client.Client`` (it sends ``x-executor-task``). Target: each proxy adds <= 1 ms p50.
2. 200 tasks at once, ``true`` 10 times each, through each proxy: per-call p50/p99, Execs/s, errors
   (target: 0), and each member's share of the tasks (its own ListTasks).

Run alone: ``.venv/bin/python -m bench.fleet [--quick]`` (writes bench/results/fleet.json); the
suite (``python -m bench``) runs it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from bench.common import QUICK, RESULTS, Row, percentile, say, skipped  # noqa: E402
from executor.client import Client  # noqa: E402
from executor.routing import aio_interceptors  # noqa: E402
from executor.v1 import executor_pb2 as pb  # noqa: E402
from executor.v1 import executor_pb2_grpc as pb_grpc  # noqa: E402
from tests.infra import fleet as infra  # noqa: E402

PATHS = ("direct", "nginx", "haproxy")


def _exec_true(client: Client, task: str) -> None:
    for event in client.exec(task, "true"):
        if event.WhichOneof("event") == "exit" and event.exit.status != pb.EXIT_STATUS_COMPLETED:
            raise RuntimeError(f"Exec of true through the fleet failed: {event.exit.message}")


def latency(f: infra.TestFleet, n: int) -> list[Row]:
    owner = "executor-0"
    task = f.task_for(owner, "bench-fleet-latency")
    targets = {"direct": f.targets[owner], "nginx": f.proxies["nginx"].target, "haproxy": f.proxies["haproxy"].target}
    clients = {p: Client(t, token=infra.AGENT, deadline=60) for p, t in targets.items()}
    samples: dict[str, list[float]] = {p: [] for p in PATHS}
    try:
        for p in PATHS:  # warm: the shell, each connection
            for _ in range(30):
                _exec_true(clients[p], task)
        while len(samples["direct"]) < n:
            for p in PATHS:
                for _ in range(25):
                    t0 = time.perf_counter()
                    _exec_true(clients[p], task)
                    samples[p].append((time.perf_counter() - t0) * 1000)
    finally:
        for c in clients.values():
            c.close()
    rows = []
    note = "Exec of `true` on a warm task, executor.client.Client, TCP loopback; alternating batches of 25"
    for p in PATHS:
        s = samples[p]
        rows += [Row("executor", f"fleet ({p})", "exec_true_p50_ms", round(percentile(s, .5), 3), "ms", len(s), note),
                 Row("executor", f"fleet ({p})", "exec_true_p99_ms", round(percentile(s, .99), 3), "ms", len(s), note)]
        say(f"    fleet {p:8} Exec true p50 {percentile(s, .5):6.2f} ms  p99 {percentile(s, .99):6.2f} ms")
    direct = percentile(samples["direct"], .5)
    for p in ("nginx", "haproxy"):
        added = percentile(samples[p], .5) - direct
        rows.append(Row("executor", f"fleet ({p})", "added_p50_ms", round(added, 3), "ms", n,
                        f"p50 through {p} minus p50 direct, same run (target <= 1 ms)"))
    return rows


def concurrency(f: infra.TestFleet, proxy: str, n_tasks: int, calls: int) -> list[Row]:
    target = f.proxies[proxy].target
    md = (("authorization", f"Bearer {infra.AGENT}"),)
    prefix = f"bench-fleet-{proxy}"
    tasks = [f"{prefix}-{i}" for i in range(n_tasks)]
    errors: list[str] = []

    async def run() -> tuple[list[float], float]:
        async with grpc.aio.insecure_channel(target, interceptors=aio_interceptors()) as channel:
            stub = pb_grpc.ExecutorStub(channel)

            async def one(task: str) -> float | None:
                t0 = time.perf_counter()
                try:
                    async for event in stub.Exec(pb.ExecRequest(task_id=task, command="true"), metadata=md,
                                                 timeout=600):
                        if event.WhichOneof("event") == "exit" and event.exit.status != pb.EXIT_STATUS_COMPLETED:
                            errors.append(f"{task}: {event.exit.message}")
                except grpc.RpcError as exc:
                    errors.append(f"{task}: {exc.code().name}: {exc.details()}")
                    return None
                return (time.perf_counter() - t0) * 1000

            for i in range(0, n_tasks, 25):  # warm: every task's shell, a few at a time
                await asyncio.gather(*(one(t) for t in tasks[i:i + 25]))

            async def worker(task: str) -> list[float | None]:
                return [await one(task) for _ in range(calls)]

            t0 = time.perf_counter()
            results = await asyncio.gather(*(worker(t) for t in tasks))
            wall = time.perf_counter() - t0
            for i in range(0, n_tasks, 50):
                await asyncio.gather(*(stub.CloseTask(pb.CloseTaskRequest(task_id=t), metadata=md, timeout=120)
                                       for t in tasks[i:i + 50]))
            return [x for r in results for x in r if x is not None], n_tasks * calls / wall

    before = {m: f.tasks_on(m, prefix) for m in infra.MEMBERS}
    assert not any(before.values())
    samples, rate = asyncio.run(run())
    label = f"fleet 3 daemons ({proxy})"
    note = f"{n_tasks} tasks x {calls} `true` each, concurrently, through {proxy}"
    share = {m: sum(1 for t in tasks if f.owner(t) == m) for m in infra.MEMBERS}
    rows = [Row("executor", label, f"conc{n_tasks}_exec_p50_ms", round(percentile(samples, .5), 3), "ms", len(samples), note),
            Row("executor", label, f"conc{n_tasks}_exec_p99_ms", round(percentile(samples, .99), 3), "ms", len(samples), note),
            Row("executor", label, f"conc{n_tasks}_execs_per_s", round(rate, 1), "1/s", len(samples), note),
            Row("executor", label, f"conc{n_tasks}_errors", len(errors), "", n_tasks * calls,
                note + (f"; first: {errors[0][:200]}" if errors else "; tasks per member " +
                        ", ".join(f"{m} {k}" for m, k in share.items())))]
    say(f"    {label:28} {n_tasks} tasks: p50 {percentile(samples, .5):7.2f} ms  p99 {percentile(samples, .99):7.2f} ms"
        f"  {rate:7.1f} Execs/s  errors {len(errors)}")
    return rows


def run(quick: bool = False) -> list[Row]:
    reason = infra.missing_proxies()
    if reason:
        return [skipped("executor", "fleet (nginx)", "exec_true_p50_ms", reason)]
    workdir = Path(tempfile.mkdtemp(prefix="executor-bench-fleet-"))
    # As deployed: heartbeats on (30 s), the proxies' timeouts above limits.max_timeout_seconds.
    f = infra.TestFleet(workdir, proxy_timeout=3700, heartbeat=30).start()
    rows: list[Row] = []
    try:
        rows += latency(f, 60 if quick else 300)
        for proxy in ("nginx", "haproxy"):
            rows += concurrency(f, proxy, 200, 3 if quick else 10)
    finally:
        f.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS / "fleet.json")
    args = parser.parse_args()
    rows = run(QUICK or args.quick)
    args.out.write_text(json.dumps([r.as_dict() for r in rows], indent=1))
    for r in rows:
        print(f"{r.backend:28} {r.metric:24} {r.value!s:>9} {r.unit:4} n={r.n}  {r.note}")


if __name__ == "__main__":
    main()

"""New tasks and many tasks, backend by backend (issue 19), side by side in one run.

Rows (through a real daemon process per backend, its unix socket, ``executor.client.AsyncClient``):

* **cold start**: the first Exec (``true``) of a new task, tasks started one after another:
  p50 / p99 ms. On every backend that can be provisioned here (the cloud ones against their local
  fakes). Docker also without its warm pool (``warm_shells: 0``: the spawner alone) and, in the
  full run, with a ``docker exec`` per process (``spawner: false``: the design before).
* **burst**: N clients each send the first Exec of a new task at the same moment: p50 / p99 / max
  of each client's time to its Exit, errors. 200 on docker and ssh, 1,000 on local (quick: 200).
  Docker with a ``docker exec`` per process too (full run).
* **load**: N tasks at once, each running ``echo ok`` ``LOAD_CALLS`` times back to back (its first
  call starts its shell): per-call p50 / p99, errors (a failed call or a wrong output), for N = 200
  and 1,000 on local, docker and ssh (quick: 200 only). Docker runs with ``pids_limit: 8192`` and
  ``mem_limit: 8g`` (each task holds a shell and its reaper: 1,000 do not fit the default 512 pids).
* **shutdown**: a daemon holding 1,000 tasks (each with its live shell): SIGTERM -> exit, s; local
  (quick: 300 tasks), and docker in the full run.
* **per_task**: ``per_task: true`` (a container per task): N new tasks at once, each one's first
  Exec, and the rate of containers created per second.

    .venv/bin/python -m bench.scale [--quick] [--only local,docker] [--out FILE]

Run by ``python -m bench`` as one of its parts; alone it writes ``bench/results/scale.json`` and
``scale.md`` (or ``--out FILE`` and FILE with ``.md``) and prints the table.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import QUICK, RESULTS, Row, load1, machine_info, percentile, say, skipped, sweep_docker  # noqa: E402
from executor.client import AsyncClient, ExecutorError  # noqa: E402
from executor.v1 import executor_pb2 as pb  # noqa: E402
from tests.daemon import DaemonProcess  # noqa: E402

CLOUD = ("modal", "daytona", "vercel_sandbox")
BENCH_LABEL = "io.executor.bench"
LOAD_CALLS = 3


class Settings:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.cold_n = 15 if quick else 40
        self.burst = {"local": 200 if quick else 1000, "docker": 200, "ssh": 200}
        self.load = [200] if quick else [200, 1000]
        self.shutdown_tasks = 300 if quick else 1000
        self.per_task_n = 10 if quick else 30
        self.baseline = not quick  # docker with an exec per process (the design before)


# -- daemons ----------------------------------------------------------------------------------


def provision(kind: str) -> dict[str, Any]:
    if kind == "docker":
        importlib.import_module("tests.infra.docker").engine()
        return {"kind": "docker", "image": "executor-sandbox:latest", "labels": {BENCH_LABEL: "scale"},
                "remove_on_close": True}
    return importlib.import_module(f"tests.infra.{kind}").provision()


def start(kind: str, options: dict[str, Any], tasks: int = 1024) -> DaemonProcess:
    import tempfile

    config = {"backend": kind, "backends": {kind: options}, "logging": {"level": "warning"},
              "approval": {"mode": "allow"},
              "limits": {"max_tasks": max(4096, tasks + 64), "max_concurrent_execs": max(512, tasks + 64),
                         "default_timeout_seconds": 600}}
    state = Path(tempfile.mkdtemp(prefix="executor-bench-scale-")) / "state"
    return DaemonProcess(config, state_dir=state).start(timeout=300)


def stop(daemon: DaemonProcess) -> float:
    """SIGTERM, then the seconds until the daemon exited."""
    t0 = time.monotonic()
    try:
        daemon.stop(timeout=120)
    finally:
        daemon.kill()
    return time.monotonic() - t0


# -- measurements ------------------------------------------------------------------------------


async def _call(client: AsyncClient, task: str, command: str, expect: bytes) -> tuple[float, str]:
    """(seconds, "" or the error) of one Exec through ``client.run``."""
    t0 = time.perf_counter()
    try:
        result = await client.run(task, command, rpc_timeout=900)
    except ExecutorError as exc:
        return time.perf_counter() - t0, f"rpc {exc.code.name if exc.code else '?'}: {exc}"[:200]
    took = time.perf_counter() - t0
    if result.exit.status != pb.EXIT_STATUS_COMPLETED or result.exit.exit_code != 0:
        return took, f"{pb.ExitStatus.Name(result.exit.status)} {result.exit.exit_code}: {result.exit.message}"[:200]
    if result.stdout != expect:
        return took, f"wrong output {result.stdout[:40]!r}"
    return took, ""


async def cold_start(target: str, n: int) -> tuple[list[float], Counter[str]]:
    """n new tasks, one after another: each one's first Exec."""
    errors: Counter[str] = Counter()
    times: list[float] = []
    prefix = uuid.uuid4().hex[:6]
    async with AsyncClient(target) as client:
        await _call(client, f"cold-{prefix}-warm", "true", b"")  # the backend is up (container, connection)
        await asyncio.sleep(0.5)
        for i in range(n):
            took, err = await _call(client, f"cold-{prefix}-{i}", "true", b"")
            if err:
                errors[err] += 1
            else:
                times.append(took)
            await asyncio.sleep(0.05)  # a pool refills in the background, as between real new tasks
        await asyncio.gather(*(client.close_task(f"cold-{prefix}-{i}", remove_files=True) for i in range(n)),
                             return_exceptions=True)
    return times, errors


async def many(target: str, n: int, calls: int) -> tuple[list[float], list[float], Counter[str], float]:
    """n tasks at once, released together; each runs ``echo ok`` ``calls`` times back to back, one client
    (channel) per task. (first calls, all calls, errors, wall seconds)."""
    errors: Counter[str] = Counter()
    firsts: list[float] = []
    every: list[float] = []
    prefix = uuid.uuid4().hex[:6]
    clients = [AsyncClient(target) for _ in range(n)]
    gate = asyncio.Event()

    async def one(i: int, client: AsyncClient) -> None:
        await gate.wait()
        for k in range(calls):
            took, err = await _call(client, f"many-{prefix}-{i}", "echo ok", b"ok\n")
            if err:
                errors[err] += 1
                continue
            every.append(took)
            if k == 0:
                firsts.append(took)

    try:
        async with AsyncClient(target) as warm:
            await _call(warm, f"many-{prefix}-warm", "true", b"")
        runners = [asyncio.create_task(one(i, c)) for i, c in enumerate(clients)]
        await asyncio.sleep(0.2)
        wall = time.perf_counter()
        gate.set()
        await asyncio.gather(*runners)
        wall = time.perf_counter() - wall
        closer = clients[0]

        async def close_all() -> None:
            for i in range(0, n, 100):
                await asyncio.gather(*(closer.close_task(f"many-{prefix}-{j}", remove_files=True)
                                       for j in range(i, min(n, i + 100))), return_exceptions=True)

        t_close = time.perf_counter()
        try:  # bounded: what is left is ended by the daemon's shutdown
            await asyncio.wait_for(close_all(), 120)
        except asyncio.TimeoutError:
            say(f"      closing {n} tasks took more than 120 s; left to the daemon's shutdown")
        say(f"      closed {n} tasks in {time.perf_counter() - t_close:.1f} s")
    finally:
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    return firsts, every, errors, wall


async def open_tasks(target: str, n: int) -> Counter[str]:
    """n tasks, each with its live shell (one Exec each, 100 at a time)."""
    errors: Counter[str] = Counter()
    prefix = uuid.uuid4().hex[:6]
    async with AsyncClient(target) as client:
        for i in range(0, n, 100):
            got = await asyncio.gather(*(_call(client, f"open-{prefix}-{j}", "true", b"")
                                         for j in range(i, min(n, i + 100))))
            for _, err in got:
                if err:
                    errors[err] += 1
    return errors


def ms(values: list[float], q: float) -> float | None:
    return round(percentile(values, q) * 1000, 2) if values else None


def note_errors(errors: Counter[str]) -> str:
    if not errors:
        return "0 errors"
    return f"{sum(errors.values())} errors: " + "; ".join(f"{k} (x{v})" for k, v in errors.most_common(3))


def rows_of(backend: str, metric: str, values: list[float], errors: Counter[str], n: int, extra: str = "",
            *, maximum: bool = False) -> list[Row]:
    note = f"{note_errors(errors)}{'; ' + extra if extra else ''}"
    rows = [Row("executor", backend, f"{metric}_p50_ms", ms(values, 0.5), "ms", n, note),
            Row("executor", backend, f"{metric}_p99_ms", ms(values, 0.99), "ms", n, note),
            Row("executor", backend, f"{metric}_errors", float(sum(errors.values())), "count", n, note)]
    if maximum:
        rows.append(Row("executor", backend, f"{metric}_max_ms", round(max(values) * 1000, 2) if values else None,
                        "ms", n, note))
    return rows


# -- per backend ---------------------------------------------------------------------------------


def guarded(rows: list[Row], backend: str, metric: str, fn: Any, *args: Any) -> None:
    try:
        rows += fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded as a row with the reason
        say(f"    {backend} {metric} FAILED: {type(exc).__name__}: {exc}")
        rows.append(skipped("executor", backend, metric, f"{type(exc).__name__}: {str(exc)[:300]}"))


def with_daemon(kind: str, options: dict[str, Any], tasks: int, fn: Any) -> list[Row]:
    daemon = start(kind, options, tasks)
    try:
        return fn(daemon)
    finally:
        try:
            stop(daemon)
        finally:
            if kind == "docker":
                sweep_docker(f"{BENCH_LABEL}=scale")


def cold_rows(kind: str, label: str, options: dict[str, Any], n: int) -> list[Row]:
    def run(daemon: DaemonProcess) -> list[Row]:
        say(f"    cold start {label}: {n} new tasks one after another (load {load1()})")
        times, errors = asyncio.run(cold_start(daemon.target, n))
        return rows_of(label, "cold_start", times, errors, n, "first Exec of a new task, one at a time")
    return with_daemon(kind, options, 64, run)


def burst_rows(kind: str, label: str, options: dict[str, Any], n: int) -> list[Row]:
    def run(daemon: DaemonProcess) -> list[Row]:
        say(f"    burst {label}: {n} new tasks at once (load {load1()})")
        firsts, _, errors, wall = asyncio.run(many(daemon.target, n, 1))
        return rows_of(label, f"burst{n}_first_exec", firsts, errors, n,
                       f"{n} clients, each the first Exec of a new task, released together; wall {wall:.1f} s",
                       maximum=True)
    return with_daemon(kind, options, n, run)


def load_rows(kind: str, label: str, options: dict[str, Any], n: int) -> list[Row]:
    def run(daemon: DaemonProcess) -> list[Row]:
        say(f"    load {label}: {n} tasks x {LOAD_CALLS} calls at once (load {load1()})")
        _, every, errors, wall = asyncio.run(many(daemon.target, n, LOAD_CALLS))
        rate = len(every) / wall if wall else 0
        rows = rows_of(label, f"load{n}_exec", every, errors, n * LOAD_CALLS,
                       f"{n} tasks at once, {LOAD_CALLS} x `echo ok` each (the first starts the shell); "
                       f"{rate:.0f} Execs/s, wall {wall:.1f} s")
        return rows
    return with_daemon(kind, options, n, run)


def shutdown_rows(kind: str, label: str, options: dict[str, Any], n: int) -> list[Row]:
    daemon = start(kind, options, n)
    try:
        say(f"    shutdown {label}: {n} open tasks (load {load1()})")
        errors = asyncio.run(open_tasks(daemon.target, n))
        took = stop(daemon)
    finally:
        daemon.kill()
        if kind == "docker":
            sweep_docker(f"{BENCH_LABEL}=scale")
    return [Row("executor", label, f"shutdown_{n}_tasks_s", round(took, 2), "s", n,
                f"SIGTERM -> exit with {n} tasks, each with a live shell; {note_errors(errors)} opening them")]


def per_task_rows(n: int) -> list[Row]:
    options = {**provision("docker"), "per_task": True}

    def run(daemon: DaemonProcess) -> list[Row]:
        say(f"    per_task: {n} new tasks at once, a container each (load {load1()})")
        firsts, _, errors, wall = asyncio.run(many(daemon.target, n, 1))
        rate = len(firsts) / wall if wall else 0
        return rows_of("docker per_task", f"burst{n}_first_exec", firsts, errors, n,
                       f"per_task: true, {n} containers created at once; wall {wall:.1f} s", maximum=True) + [
            Row("executor", "docker per_task", "containers_per_s", round(rate, 2), "1/s", n,
                f"{n} tasks, each its own container (create + start + first Exec), at once")]
    return with_daemon("docker", options, n, run)


def run_all(s: Settings, only: list[str] | None = None) -> list[Row]:
    rows: list[Row] = []
    kinds = [k for k in ("local", "docker", "ssh", "singularity", *CLOUD) if not only or k in only]
    available: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        try:
            available[kind] = provision(kind)
        except BaseException as exc:  # noqa: BLE001 - pytest.skip from an infra module is no Exception
            if isinstance(exc, KeyboardInterrupt):
                raise
            say(f"  {kind}: NOT available: {exc}")
            rows.append(skipped("executor", kind, "cold_start_p50_ms", f"{type(exc).__name__}: {exc}"))
    say("scale: cold start (first Exec of a new task), every backend")
    for kind, options in available.items():
        label = f"{kind} (local fake)" if kind in CLOUD else kind
        if kind in CLOUD:
            options = provision(kind)  # the shared fake servers may have been restarted meanwhile
        guarded(rows, label, "cold_start", cold_rows, kind, label, options, s.cold_n)
        if kind == "docker":
            guarded(rows, "docker (warm_shells 0)", "cold_start", cold_rows, kind, "docker (warm_shells 0)",
                    {**options, "warm_shells": 0}, s.cold_n)
            if s.baseline:
                guarded(rows, "docker (exec per process)", "cold_start", cold_rows, kind, "docker (exec per process)",
                        {**options, "warm_shells": 0, "spawner": False}, s.cold_n)
    say("scale: many new tasks at once")
    for kind in ("local", "docker", "ssh"):
        if kind in available:
            guarded(rows, kind, "burst", burst_rows, kind, kind, available[kind], s.burst[kind])
    if "docker" in available and s.baseline:
        guarded(rows, "docker (exec per process)", "burst", burst_rows, "docker", "docker (exec per process)",
                {**available["docker"], "warm_shells": 0, "spawner": False}, s.burst["docker"])
    say("scale: load (many tasks, a few Execs each)")
    for n in s.load:
        for kind in ("local", "docker", "ssh"):
            if kind not in available:
                continue
            options = available[kind]
            if kind == "docker":
                options = {**options, "pids_limit": 8192, "mem_limit": "8g"}
            guarded(rows, kind, f"load{n}", load_rows, kind, kind, options, n)
    say("scale: shutdown")
    if "local" in available:
        guarded(rows, "local", "shutdown", shutdown_rows, "local", "local", available["local"], s.shutdown_tasks)
    if "docker" in available and not s.quick:
        guarded(rows, "docker", "shutdown", shutdown_rows, "docker", "docker",
                {**available["docker"], "pids_limit": 8192, "mem_limit": "8g"}, s.shutdown_tasks)
    if "docker" in available:
        say("scale: per_task containers")
        guarded(rows, "docker per_task", "per_task", per_task_rows, s.per_task_n)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default="", help="comma-separated backend kinds")
    parser.add_argument("--out", type=Path, default=None, help="also write the rows to this JSON file")
    args = parser.parse_args()
    s = Settings(QUICK or args.quick)
    started = time.monotonic()
    machine = machine_info()
    rows = run_all(s, [k for k in args.only.split(",") if k] or None)
    machine["quick"] = s.quick
    machine["loadavg_end"] = [round(x, 2) for x in __import__("os").getloadavg()]
    machine["seconds"] = round(time.monotonic() - started, 1)
    data = [r.as_dict() for r in rows]
    out = args.out or (RESULTS / "scale.json")
    out.write_text(json.dumps({"machine": machine, "rows": data}, indent=1))
    from bench import report

    targets = [t for t in report.evaluate(rows) if t["result"] != "not measured"]
    md = [f"Run {machine.get('when', '')} ({'quick' if s.quick else 'full'}), {machine.get('cpus')} CPUs, load average "
          f"{machine.get('loadavg_start')} at start, {machine['loadavg_end']} at end, {machine['seconds']:.0f} s."]
    md += report.scale_markdown(rows, report.Index(rows))
    if targets:
        md += ["", "| target | measured | result |", "|---|---|---|"]
        md += [f"| {t['target']} | {t['measured']} {t['unit']} | {t['result']} |" for t in targets]
    missing = [r for r in rows if r.value is None]
    if missing:
        md += ["", "Not measured:"] + [f"- {r.backend} / {r.metric}: {r.note}" for r in missing]
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    say(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()

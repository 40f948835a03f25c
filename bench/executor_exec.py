"""executor's own figures, measured through gRPC against a real daemon process.

One daemon is started with every backend that could be provisioned on this machine (named after
its kind), so all backends are measured by the same process in the same run; each request names
its backend. Latency is measured with ``executor.client.Client``, the blocking client (hermes-agent's
``execute()`` is synchronous too; our client reads a stream on the calling thread, the cheapest way
for Python to make one call at a time), and also with a ``grpc.aio`` channel (what
``executor.client.AsyncClient`` uses) as its own rows; bulk streaming and concurrency use
``grpc.aio``, as the brief asks, with a large receive limit.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc

from bench.common import Row, latency_rows, percentile, say
from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc
from executor.client import Client
from tests.daemon import DaemonProcess

STAGES = ("gate", "queue", "spawn", "first_byte", "run")
_BIG = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 64 << 20)]


def start_daemon(backends: dict[str, dict[str, Any]], default: str = "local", **extra: Any) -> DaemonProcess:
    """A daemon process with the given ``backends:``; logging at warning so the per-command log line
    (which is the daemon's default ``info``) does not fill the disk over 100k calls."""
    config = {"backend": default, "backends": backends, "logging": {"level": "warning"},
              "limits": {"max_tasks": 4096, "max_concurrent_execs": 512}, **extra}
    state = Path(tempfile.mkdtemp(prefix="executor-bench-")) / "state"
    return DaemonProcess(config, state_dir=state).start(timeout=300)


def _succeeded(exit_: pb.Exit | None, command: str, backend: str) -> pb.Exit:
    """The Exit of a call that must have run and succeeded; anything else stops the bench."""
    if exit_ is None:
        raise RuntimeError(f"Exec of {command!r} on {backend} ended without an exit event")
    if exit_.status != pb.EXIT_STATUS_COMPLETED or exit_.exit_code != 0:
        raise RuntimeError(f"Exec of {command!r} on {backend} failed: status {exit_.status}, "
                           f"code {exit_.exit_code}, {exit_.message}")
    return exit_


class ClientExec:
    """Exec calls through ``executor.client.Client``, the blocking client (it reads a stream on the
    calling thread): the like-for-like counterpart of hermes-agent's synchronous ``execute()``."""

    def __init__(self, target: str) -> None:
        self.client = Client(target)

    def close(self) -> None:
        self.client.close()

    def exec(self, task: str, command: str, backend: str, timeout: float = 120) -> pb.Exit:
        exit_ = None
        for event in self.client.exec(task, command, backend=backend, rpc_timeout=timeout):
            if event.WhichOneof("event") == "exit":
                exit_ = event.exit
        return _succeeded(exit_, command, backend)

    def timed(self, task: str, command: str, backend: str, n: int, timeout: float = 120) -> list[tuple[float, pb.Exit]]:
        """``n`` calls one after another: (milliseconds, Exit) of each."""
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            exit_ = self.exec(task, command, backend, timeout)
            out.append(((time.perf_counter() - t0) * 1000, exit_))
        return out

    def close_task(self, task: str) -> None:
        self.client.close_task(task, remove_files=True)


class AioExec(ClientExec):
    """The same calls through a ``grpc.aio`` channel (what ``executor.client.AsyncClient`` uses),
    driven by an event loop of its own."""

    def __init__(self, target: str) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)  # grpc.aio binds the channel to the current loop
        self.channel = grpc.aio.insecure_channel(target, options=_BIG)
        self.stub = pb_grpc.ExecutorStub(self.channel)

    def close(self) -> None:
        self.loop.run_until_complete(self.channel.close())
        self.loop.close()
        asyncio.set_event_loop(None)

    async def _exec(self, task: str, command: str, backend: str, timeout: float) -> pb.Exit | None:
        exit_ = None
        async for event in self.stub.Exec(pb.ExecRequest(task_id=task, command=command, backend=backend),
                                          timeout=timeout):
            if event.WhichOneof("event") == "exit":
                exit_ = event.exit
        return exit_

    def exec(self, task: str, command: str, backend: str, timeout: float = 120) -> pb.Exit:
        return _succeeded(self.loop.run_until_complete(self._exec(task, command, backend, timeout)), command, backend)

    def timed(self, task: str, command: str, backend: str, n: int, timeout: float = 120) -> list[tuple[float, pb.Exit]]:
        """``n`` calls one after another inside the running loop, as an asyncio agent runtime makes
        them: (milliseconds, Exit) of each."""
        async def calls() -> list[tuple[float, pb.Exit]]:
            out = []
            for _ in range(n):
                t0 = time.perf_counter()
                exit_ = await self._exec(task, command, backend, timeout)
                out.append(((time.perf_counter() - t0) * 1000, _succeeded(exit_, command, backend)))
            return out
        return self.loop.run_until_complete(calls())

    def close_task(self, task: str) -> None:
        self.loop.run_until_complete(
            self.stub.CloseTask(pb.CloseTaskRequest(task_id=task, remove_files=True), timeout=120))


def aio_client_latency(target: str, backend: str, label: str, n: int) -> list[Row]:
    """Exec of ``true`` through a grpc.aio channel: the same daemon, the asyncio client's cost."""
    client = AioExec(target)
    try:
        task = f"bench-lat-aio-{backend}"
        client.exec(task, "true", backend, timeout=600)
        client.timed(task, "true", backend, 30)
        samples = [ms for ms, _ in client.timed(task, "true", backend, n)]
        client.close_task(task)
    finally:
        client.close()
    say(f"    {label:28} executor true     p50 {percentile(samples, .5):7.3f} ms  (grpc.aio client)")
    return latency_rows("executor", label, "exec_true_aio_client", samples)


def exec_latency(target: str, daemon_pid: int, backend: str, label: str, n: int) -> list[Row]:
    """``true``, ``echo hi``, and two commands that change the shell's state (``x=1``, ``f(){ :; }``:
    the gate then asks the shell for what changed, in the same round trip as the command's end
    marker) on a warm task: p50/p95/p99, the p50 of each daemon stage, and the
    CPU time the daemon and this client spend per Exec of ``true`` (where a latency goes when the
    machine is busy: every one of those milliseconds also waits for a core). The two commands are
    measured in alternating batches of 25, so a noisy moment of the machine does not land on one."""
    client = ClientExec(target)
    rows: list[Row] = []
    commands = (("true", "true"), ("echo", "echo hi"), ("assign", "x=1"), ("define", "f(){ :; }"))
    batch = 25
    try:
        task = f"bench-lat-{backend}"
        client.exec(task, "true", backend, timeout=600)  # creates the task's sandbox and shell
        for _ in range(30):
            for _, command in commands:
                client.exec(task, command, backend)
        samples = {name: [] for name, _ in commands}
        stages = {s: [] for s in (*STAGES, "daemon_total")}
        daemon_cpu = client_cpu = 0.0
        for _ in range(max(1, -(-n // batch))):
            for name, command in commands:
                d0, c0 = _cpu_seconds(daemon_pid), time.process_time()
                for ms, exit_ in client.timed(task, command, backend, batch):
                    samples[name].append(ms)
                    if name == "true":
                        for s in STAGES:
                            stages[s].append(getattr(exit_.timings, f"{s}_seconds") * 1000)
                        stages["daemon_total"].append(exit_.duration_seconds * 1000)
                if name == "true":
                    daemon_cpu += _cpu_seconds(daemon_pid) - d0
                    client_cpu += time.process_time() - c0
        for name, command in commands:
            rows += latency_rows("executor", label, f"exec_{name}", samples[name])
            say(f"    {label:28} executor {command:10} p50 {percentile(samples[name], .5):7.3f} ms  "
                f"p99 {percentile(samples[name], .99):7.3f} ms")
        count = len(samples["true"])
        rows += [Row("executor", label, "daemon_cpu_ms_per_exec", round(daemon_cpu * 1000 / count, 3), "ms", count,
                     "daemon process CPU time / Execs of `true`, sequential"),
                 Row("executor", label, "client_cpu_ms_per_exec", round(client_cpu * 1000 / count, 3), "ms", count,
                     "this client's (executor.client.Client) CPU time / Execs of `true`")]
        rows += [Row("executor", label, f"stage_{s}_p50_ms", round(statistics.median(v), 4), "ms", count,
                     "Exit.duration_seconds of `true` (the core, from request to exit)" if s == "daemon_total"
                     else "Exit.timings of `true`") for s, v in stages.items()]
        client.exec(task, "true", backend)
        client.close_task(task)
    finally:
        client.close()
    return rows + aio_client_latency(target, backend, label, n)


def local_isolation(n: int, fresh: int) -> list[Row]:
    """local with ``isolation: sandbox`` (bubblewrap, the default) next to ``isolation: none``, in one
    daemon: Exec ``true`` in a warm task (the shell is long-lived: the sandbox is paid once per task)
    and the first Exec of a new task (which starts the task's shell, in its sandbox)."""
    daemon = start_daemon({"local": {"kind": "local"}, "local_none": {"kind": "local", "isolation": "none"}})
    rows: list[Row] = []
    client = ClientExec(daemon.target)
    try:
        for name, isolation in (("local", "sandbox"), ("local_none", "none")):
            client.exec(f"bench-iso-{name}", "true", name)  # the shell starts
            warm = [ms for ms, _ in client.timed(f"bench-iso-{name}", "true", name, n)]
            firsts = []
            for i in range(fresh):
                task = f"bench-iso-{name}-{i}"
                firsts += [ms for ms, _ in client.timed(task, "true", name, 1)]
                client.close_task(task)
            say(f"    local isolation {isolation:8} Exec true p50 {percentile(warm, .5):7.3f} ms, "
                f"first Exec of a new task p50 {percentile(firsts, .5):7.3f} ms")
            note = f"isolation: {isolation}; one daemon with both backends"
            rows.append(Row("executor", f"local ({isolation})", "exec_true_p50_ms", round(percentile(warm, .5), 3),
                            "ms", n, note))
            rows.append(Row("executor", f"local ({isolation})", "first_exec_new_task_p50_ms",
                            round(percentile(firsts, .5), 3), "ms", fresh, note + "; a new task each call"))
    finally:
        client.close()
        daemon.stop(timeout=180)
    return rows


async def _stream_once(stub: pb_grpc.ExecutorStub, task: str, backend: str, nbytes: int) -> tuple[int, float]:
    got = 0
    t0 = time.perf_counter()
    async for event in stub.Exec(pb.ExecRequest(task_id=task, command=f"head -c {nbytes} /dev/zero",
                                                backend=backend), timeout=600):
        kind = event.WhichOneof("event")
        if kind == "stdout":
            got += len(event.stdout)
        elif kind == "exit" and event.exit.status != pb.EXIT_STATUS_COMPLETED:
            raise RuntimeError(f"stream on {backend} ended with status {event.exit.status}: {event.exit.message}")
    return got, time.perf_counter() - t0


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def paired_with_spawn(target: str, n: int) -> list[Row]:
    """Exec of ``true`` on local and a bare ``bash -c true`` spawn, alternating call by call.

    The two are close (about 2 ms each here), and the load of this shared machine drifts within
    seconds; alternating gives both the same conditions, so their ratio is the fair one."""
    import subprocess

    client = ClientExec(target)
    execs, spawns = [], []
    try:
        for i in range(n + 10):
            t0 = time.perf_counter()
            client.exec("bench-paired", "true", "local")
            t1 = time.perf_counter()
            subprocess.run(["bash", "-c", "true"], stdout=subprocess.PIPE, check=True)
            t2 = time.perf_counter()
            if i >= 10:
                execs.append((t1 - t0) * 1000)
                spawns.append((t2 - t1) * 1000)
    finally:
        client.close()
    say(f"    {'local (paired)':28} executor p50 {percentile(execs, .5):7.3f} ms, bare spawn p50 {percentile(spawns, .5):7.3f} ms")
    note = "alternating call by call: Exec `true` (local, executor.client.Client), then subprocess.run(['bash','-c','true'])"
    return [Row("executor", "local", "paired_exec_true_p50_ms", round(percentile(execs, .5), 3), "ms", n, note),
            Row("floor", "local", "paired_exec_true_p50_ms", round(percentile(spawns, .5), 3), "ms", n, note)]


def stream_throughput(target: str, daemon_pid: int, backend: str, label: str, nbytes: int, repeats: int) -> list[Row]:
    """MB/s (10^6 bytes) of ``head -c N /dev/zero`` through Exec to an asyncio client; median and best.

    Also the CPU seconds the daemon and this client spent per stream: on a shared 2-core machine a
    low rate with low CPU means the processes waited for a core (load), not that they were slow; the
    ``cpu_bound_MBps`` row is the rate the busier of the two would allow if it had a core to itself.
    """

    async def run() -> list[tuple[float, float, float]]:
        async with grpc.aio.insecure_channel(target, options=_BIG) as channel:
            stub = pb_grpc.ExecutorStub(channel)
            task = f"bench-stream-{backend}"
            await _stream_once(stub, task, backend, min(nbytes, 20_000_000))  # warm: shell, buffers, pipes
            out = []
            for _ in range(repeats):
                d0, c0 = _cpu_seconds(daemon_pid), time.process_time()
                got, seconds = await _stream_once(stub, task, backend, nbytes)
                if got != nbytes:
                    raise RuntimeError(f"stream on {backend}: got {got} bytes of {nbytes}")
                out.append((got / seconds / 1e6, _cpu_seconds(daemon_pid) - d0, time.process_time() - c0))
            await stub.CloseTask(pb.CloseTaskRequest(task_id=task, remove_files=True), timeout=120)
            return out

    results = asyncio.run(run())
    rates = [r for r, _, _ in results]
    daemon_cpu = statistics.median(d for _, d, _ in results)
    client_cpu = statistics.median(c for _, _, c in results)
    ceiling = nbytes / 1e6 / max(daemon_cpu, client_cpu, 1e-3)
    say(f"    {label:28} stream {nbytes / 1e6:.0f} MB: median {statistics.median(rates):7.1f} MB/s  best {max(rates):7.1f}"
        f"  (CPU per stream: daemon {daemon_cpu:.2f} s, client {client_cpu:.2f} s)")
    note = f"head -c {nbytes} /dev/zero, grpc.aio client"
    return [Row("executor", label, "stream_MBps", round(statistics.median(rates), 1), "MB/s", len(rates), note + ", median"),
            Row("executor", label, "stream_best_MBps", round(max(rates), 1), "MB/s", len(rates), note + ", best"),
            Row("executor", label, "stream_daemon_cpu_s", round(daemon_cpu, 3), "s", len(rates),
                "CPU seconds of the daemon process per stream (median); the backend's own processes not included"),
            Row("executor", label, "stream_client_cpu_s", round(client_cpu, 3), "s", len(rates), "CPU seconds of the client per stream"),
            Row("executor", label, "stream_cpu_bound_MBps", round(ceiling, 1), "MB/s", len(rates),
                "bytes / max(daemon CPU, client CPU): the rate with a free core each")]


def concurrency(target: str, daemon_pid: int, backend: str, label: str, levels: list[int], calls: int) -> list[Row]:
    """Exec latency with N tasks each running ``true`` back to back at the same time.

    Every task is warmed first (its shell exists), then all N run ``calls`` Execs each; the rows
    give the per-call p50/p99 and the aggregate Execs per second at each level.
    """

    async def level(stub: pb_grpc.ExecutorStub, n: int) -> tuple[list[float], float, float]:
        tasks = [f"bench-conc-{backend}-{n}-{i}" for i in range(n)]

        async def one(task: str) -> float:
            t0 = time.perf_counter()
            async for event in stub.Exec(pb.ExecRequest(task_id=task, command="true", backend=backend), timeout=600):
                if event.WhichOneof("event") == "exit" and event.exit.status != pb.EXIT_STATUS_COMPLETED:
                    raise RuntimeError(f"{task}: {event.exit.message}")
            return (time.perf_counter() - t0) * 1000

        per_task = max(calls, 100 // n)  # at least 100 calls per level: CPU time is read in 10 ms ticks

        async def worker(task: str) -> list[float]:
            return [await one(task) for _ in range(per_task)]

        for i in range(0, n, 25):  # warm: create sandboxes/shells a few at a time
            await asyncio.gather(*(one(t) for t in tasks[i:i + 25]))
        t0, c0 = time.perf_counter(), _cpu_seconds(daemon_pid)
        results = await asyncio.gather(*(worker(t) for t in tasks))
        wall, cpu = time.perf_counter() - t0, _cpu_seconds(daemon_pid) - c0
        for i in range(0, n, 50):
            await asyncio.gather(*(stub.CloseTask(pb.CloseTaskRequest(task_id=t, remove_files=True), timeout=120)
                                   for t in tasks[i:i + 50]))
        return [x for r in results for x in r], n * per_task / wall, cpu * 1000 / (n * per_task)

    async def run() -> list[Row]:
        rows: list[Row] = []
        async with grpc.aio.insecure_channel(target, options=_BIG) as channel:
            stub = pb_grpc.ExecutorStub(channel)
            for n in levels:
                samples, rate, cpu_ms = await level(stub, n)
                note = f"{n} tasks x {max(calls, 100 // n)} `true` each, concurrently"
                rows += [Row("executor", label, f"conc{n}_exec_p50_ms", round(percentile(samples, .5), 3), "ms", len(samples), note),
                         Row("executor", label, f"conc{n}_exec_p99_ms", round(percentile(samples, .99), 3), "ms", len(samples), note),
                         Row("executor", label, f"conc{n}_execs_per_s", round(rate, 1), "1/s", len(samples), note),
                         Row("executor", label, f"conc{n}_daemon_cpu_ms_per_exec", round(cpu_ms, 3), "ms", len(samples),
                             note + "; daemon process CPU time / Execs")]
                say(f"    {label:28} {n:4d} tasks: p50 {percentile(samples, .5):8.2f} ms  p99 {percentile(samples, .99):8.2f} ms"
                    f"  {rate:7.1f} Execs/s  daemon CPU {cpu_ms:.2f} ms/Exec")
        return rows

    return asyncio.run(run())


def _pss_kb(pid: int) -> int:
    """Proportional set size: shared pages (bash's text, libc) divided among their users."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree_memory_kb(pid: int) -> tuple[int, int, int]:
    """(the process's own RSS, PSS of it and all descendants, number of descendants), from /proc.
    PSS for the tree: summing RSS would count bash's shared pages once per shell."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
        rss[int(entry)] = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    todo, total, count = [pid], 0, -1
    while todo:
        p = todo.pop()
        total += _pss_kb(p)
        count += 1
        todo += children.get(p, [])
    return rss.get(pid, 0), total, count


def idle_tasks(target: str, daemon_pid: int, backend: str, label: str, counts: list[int]) -> list[Row]:
    """How many idle tasks (each with its live shell) one daemon holds, and the memory per task.

    Tasks are created by one ``true`` each and left idle; the daemon's RSS and that of its whole
    process tree (the shells are its children on local) are read at each checkpoint.
    """

    async def run() -> list[Row]:
        rows: list[Row] = []
        base_own, base_tree, _ = _tree_memory_kb(daemon_pid)
        created = 0
        async with grpc.aio.insecure_channel(target, options=_BIG) as channel:
            stub = pb_grpc.ExecutorStub(channel)

            async def make(i: int) -> None:
                async for _ in stub.Exec(pb.ExecRequest(task_id=f"bench-idle-{i}", command="true", backend=backend),
                                         timeout=600):
                    pass

            for target_count in counts:
                t0 = time.perf_counter()
                while created < target_count:
                    batch = range(created, min(target_count, created + 50))
                    await asyncio.gather(*(make(i) for i in batch))
                    created = batch[-1] + 1
                await asyncio.sleep(1.0)
                own, tree, procs = _tree_memory_kb(daemon_pid)
                listed = len((await stub.ListTasks(pb.ListTasksRequest(), timeout=60)).tasks)
                note = f"{target_count} idle tasks (ListTasks shows {listed}), {procs} processes under the daemon"
                rows += [Row("executor", label, f"idle{target_count}_daemon_rss_MB", round(own / 1024, 1), "MB", target_count, note),
                         Row("executor", label, f"idle{target_count}_rss_per_task_kB", round((own - base_own) / target_count, 1), "kB", target_count,
                             note + "; daemon process only"),
                         Row("executor", label, f"idle{target_count}_tree_pss_per_task_kB", round((tree - base_tree) / target_count, 1), "kB",
                             target_count, note + "; PSS of the daemon + its shells")]
                say(f"    {label:28} {target_count:5d} idle tasks: daemon RSS {own / 1024:7.1f} MB, PSS with shells "
                    f"{tree / 1024:7.1f} MB ({procs} procs), made in {time.perf_counter() - t0:.1f} s")
            for i in range(0, created, 100):
                await asyncio.gather(*(stub.CloseTask(pb.CloseTaskRequest(task_id=f"bench-idle-{j}", remove_files=True),
                                                      timeout=120) for j in range(i, min(created, i + 100))))
        return rows

    return asyncio.run(run())

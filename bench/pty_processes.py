"""PTY round trip and idle background processes, on the local backend.

    .venv/bin/python bench/pty_processes.py [--rtt-samples 500] [--processes 1000]

1. PTY round trip: a `Pty` stream running `cat` on a terminal; one byte is sent and the
   time until its echo (the terminal's line discipline) comes back is measured, through
   the daemon, the gRPC stream and the backend's pty. p50/p99 over the samples.
2. Idle background processes: `sleep 3600` started with StartProcess across tasks; the
   daemon's RSS and open fds are sampled as the count grows, with the StartProcess latency.

Prints a table and writes JSON rows to bench/results/pty_processes.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import grpc  # noqa: E402

from executor.v1 import executor_pb2 as pb  # noqa: E402
from tests.daemon import DaemonProcess  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "pty_processes.json"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def pty_round_trip(client, samples: int) -> dict:
    inputs: queue.Queue = queue.Queue()
    inputs.put(pb.PtyInput(open=pb.PtyOpen(task_id="bench-pty", command="cat", size=pb.PtySize(rows=24, cols=80))))

    def requests():
        while True:
            item = inputs.get()
            if item is None:
                return
            yield item

    call = client.stub.Pty(requests(), timeout=600)
    outputs: queue.Queue = queue.Queue()

    def reader():
        try:
            for msg in call:
                if msg.WhichOneof("output") == "data":
                    outputs.put((time.perf_counter(), msg.data))
        except grpc.RpcError as exc:  # the cancel at the end
            if exc.code() != grpc.StatusCode.CANCELLED:
                raise

    threading.Thread(target=reader, daemon=True).start()
    # warm up: the program is running once a line comes back
    inputs.put(pb.PtyInput(data=b"warm\n"))
    seen = b""
    while b"warm\r\nwarm\r\n" not in seen:
        seen += outputs.get(timeout=30)[1]
    times = []
    for i in range(samples + 20):
        byte = bytes([97 + i % 26])
        t0 = time.perf_counter()
        inputs.put(pb.PtyInput(data=byte))
        got = b""
        while byte not in got:
            t1, data = outputs.get(timeout=30)
            got += data
        if i >= 20:
            times.append((t1 - t0) * 1000)
    call.cancel()
    inputs.put(None)
    return {"metric": "pty_echo_round_trip_ms", "backend": "local", "samples": len(times),
            "p50": round(statistics.median(times), 3), "p99": round(percentile(times, 0.99), 3),
            "mean": round(statistics.fmean(times), 3), "max": round(max(times), 3)}


def idle_processes(client, daemon_pid: int, total: int, per_task: int) -> list[dict]:
    rows = []
    checkpoints = sorted({0, 10, 100, 250, 500, total} & set(range(total + 1)))
    base_rss = rss_kb(daemon_pid)
    started, latencies = 0, []
    for target in checkpoints:
        while started < target:
            t0 = time.perf_counter()
            info = client.stub.StartProcess(pb.StartProcessRequest(task_id=f"bench-idle-{started // per_task}",
                                                                   command="sleep 3600"), timeout=120)
            latencies.append((time.perf_counter() - t0) * 1000)
            assert info.state == pb.PROCESS_STATE_RUNNING
            started += 1
        time.sleep(1.0)  # let the daemon settle before sampling
        rss = rss_kb(daemon_pid)
        recent = latencies[-max(1, min(len(latencies), 50)):] if latencies else [0.0]
        rows.append({"metric": "idle_background_processes", "backend": "local", "processes": target,
                     "daemon_rss_mb": round(rss / 1024, 1), "daemon_fds": fds(daemon_pid),
                     "rss_per_process_kb": round((rss - base_rss) / target, 1) if target else 0.0,
                     "start_process_ms_p50_recent": round(statistics.median(recent), 2)})
        print(f"  {target:5d} processes: daemon RSS {rss / 1024:7.1f} MiB, fds {fds(daemon_pid):5d}, "
              f"StartProcess p50 (last 50) {statistics.median(recent):6.2f} ms", flush=True)
    listed = client.stub.ListProcesses(pb.ListProcessesRequest(), timeout=60).processes
    assert sum(p.state == pb.PROCESS_STATE_RUNNING for p in listed) == total
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtt-samples", type=int, default=500)
    parser.add_argument("--processes", type=int, default=1000)
    parser.add_argument("--per-task", type=int, default=100)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON rows go")
    args = parser.parse_args()
    config = {
        "backend": "local", "backends": {"local": {"kind": "local"}},
        "approval": {"mode": "ask", "allow_interactive_pty": True},
        "processes": {"max_per_task": args.per_task, "max_total": max(args.processes, 1)},
        "logging": {"level": "warning"},
    }
    state = Path(tempfile.mkdtemp(prefix="executor-bench-proc-")) / "state"
    daemon = DaemonProcess(config, state_dir=state).start()
    rows = []
    try:
        with daemon.client() as client:
            print(f"PTY round trip ({args.rtt_samples} samples, local backend)...", flush=True)
            row = pty_round_trip(client, args.rtt_samples)
            print(f"  p50 {row['p50']:.3f} ms  p99 {row['p99']:.3f} ms  max {row['max']:.3f} ms", flush=True)
            rows.append(row)
            print(f"Idle background processes (up to {args.processes}, `sleep 3600`)...", flush=True)
            rows += idle_processes(client, daemon.proc.pid, args.processes, args.per_task)
            t0 = time.monotonic()
            ended = sum(client.close_task(f"bench-idle-{i}").processes_ended
                        for i in range((args.processes + args.per_task - 1) // args.per_task))
            rows.append({"metric": "close_tasks_ending_processes", "backend": "local", "processes": ended,
                         "seconds": round(time.monotonic() - t0, 2)})
            print(f"  CloseTask ended {ended} processes in {time.monotonic() - t0:.2f} s")
    finally:
        daemon.stop(timeout=120)
    meta = {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([{**r, **meta} for r in rows], indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

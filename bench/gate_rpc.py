"""The gate through gRPC, and the other engineers' scripts folded into this run.

- ``CheckCommand`` latency over the gate corpus (tests/data/gate_corpus.tsv), each command once,
  through the daemon: what a client pays for a dry-run verdict (a gRPC round trip included).
- ``bench/gate.py`` (the gate's owner's script: in-process check latency and corpus scores) and
  ``bench/pty_processes.py`` (PTY round trip, idle background processes) run as subprocesses; their
  JSON rows are converted into this suite's rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc

from bench.common import RESULTS, ROOT, Row, latency_rows, percentile, say, skipped
from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc


def check_command_latency(target: str, limit: int | None) -> list[Row]:
    from bench.gate import load_own  # the corpus reader of the gate's own script

    commands = [command for _expect, command in load_own()][:limit]
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.ExecutorStub(channel)
        for _ in range(20):
            stub.CheckCommand(pb.CheckCommandRequest(command="true"), timeout=30)
        samples = []
        for command in commands:
            t0 = time.perf_counter()
            stub.CheckCommand(pb.CheckCommandRequest(command=command), timeout=30)
            samples.append((time.perf_counter() - t0) * 1000)
    say(f"    CheckCommand over {len(samples)} corpus commands: p50 {percentile(samples, .5):.3f} ms  "
        f"p99 {percentile(samples, .99):.3f} ms")
    return latency_rows("executor", "gate (gRPC CheckCommand)", "check", samples,
                        "each corpus command once, through the daemon, blocking stub")


def _run_script(args: list[str], output: Path, timeout: float) -> tuple[list[dict], str | None]:
    """Run another engineer's script and read the JSON rows it writes to ``output``.

    Those scripts write their results into files their owners commit; the file's previous content
    is put back afterwards so that running the suite leaves the owners' files as they were.
    Returns (rows, None) or ([], why not)."""
    before = output.read_bytes() if output.exists() else None
    try:
        try:
            result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return [], f"{args[0]} did not finish within {timeout:.0f} s"
        if result.returncode != 0:
            return [], f"{args[0]} exited {result.returncode}: {result.stderr.strip()[-500:]}"
        for line in result.stdout.splitlines():
            say(f"      | {line}")
        return json.loads(output.read_text()), None
    finally:
        if before is None:
            output.unlink(missing_ok=True)
        else:
            output.write_bytes(before)


def gate_script(repeat: int) -> list[Row]:
    """bench/gate.py's in-process latency and corpus quality, as rows."""
    found, error = _run_script(["bench/gate.py", "--repeat", str(repeat)], RESULTS / "gate.json", 900)
    if error:
        return [skipped("executor", "gate (in-process)", "check_p50_ms", error)]
    rows = []
    for r in found:
        label = f"gate (in-process, {r['corpus']} corpus)"
        if r["metric"] == "gate_check_ms":
            note = "bench/gate.py: approval.analyze, cache cleared before each call"
            rows += [Row("executor", label, f"check_{k}_ms", r[k], "ms", r["samples"], note) for k in ("p50", "p99", "mean")]
        elif r["metric"] == "gate_quality":
            n = r["block_rows"] + r["allow_rows"]
            if r["recall"] is not None:
                rows.append(Row("executor", label, "recall", r["recall"], "ratio", r["block_rows"], "bench/gate.py"))
            if r["false_positive_rate"] is not None:
                rows.append(Row("executor", label, "false_positive_rate", r["false_positive_rate"], "ratio", r["allow_rows"],
                                f"bench/gate.py ({n} rows)"))
    return rows


def pty_processes_script(rtt_samples: int, processes: int) -> list[Row]:
    """bench/pty_processes.py's PTY echo round trip and idle background processes, as rows."""
    found, error = _run_script(["bench/pty_processes.py", "--rtt-samples", str(rtt_samples), "--processes", str(processes)],
                               RESULTS / "pty_processes.json", 1200)
    if error:
        return [skipped("executor", "local", "pty_echo_rtt_p50_ms", error)]
    rows = []
    for r in found:
        note = "bench/pty_processes.py"
        if r["metric"] == "pty_echo_round_trip_ms":
            rows += [Row("executor", "local", f"pty_echo_rtt_{k}_ms", r[k], "ms", r["samples"], note + ": a byte in, its echo out")
                     for k in ("p50", "p99")]
        elif r["metric"] == "idle_background_processes" and r["processes"]:
            p = r["processes"]
            rows += [Row("executor", "local", f"bgproc{p}_daemon_rss_MB", r["daemon_rss_mb"], "MB", p, note + ": `sleep 3600` each"),
                     Row("executor", "local", f"bgproc{p}_rss_per_process_kB", r["rss_per_process_kb"], "kB", p, note),
                     Row("executor", "local", f"bgproc{p}_start_process_p50_ms", r["start_process_ms_p50_recent"], "ms", p,
                         note + ": StartProcess, last 50 calls")]
        elif r["metric"] == "close_tasks_ending_processes":
            rows.append(Row("executor", "local", "close_tasks_ending_processes_s", r["seconds"], "s", r["processes"], note))
    return rows

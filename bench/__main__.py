"""The benchmark suite: ``make bench`` (= ``.venv/bin/python -m bench``); ``BENCH_QUICK=1`` for a short run.

One run, one machine, side by side, backend by backend: the floor, hermes-agent 0.19 and executor
(through gRPC to one real daemon process configured with every backend that could be provisioned)
are measured one right after the other, so the three see the same machine load. Then streaming,
concurrency, capacity and the gate. Writes bench/results/latest.{json,md,png}; see bench/README.md.

A part that cannot run here (no Docker, no Apptainer, a hermes environment that fails) gives a row
with no value and the reason; the rest of the run goes on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import executor_exec, floors, gate_rpc, hermes, report  # noqa: E402
from bench.common import QUICK, RESULTS, Row, machine_info, say, skipped  # noqa: E402

CLOUD = ("modal", "daytona", "vercel_sandbox")
IMAGE = "executor-sandbox:latest"


class Settings:
    """Iteration counts: the full run meets the brief (>= 200 calls per latency); quick cuts everything."""

    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.n = 60 if quick else 300                  # Exec latency calls per command
        self.n_slow = 20 if quick else 200             # floors / hermes on slow paths (docker, apptainer)
        self.n_hermes = 30 if quick else 200
        self.stream_bytes = 50_000_000 if quick else 200_000_000
        self.stream_bytes_cloud = 5_000_000 if quick else 20_000_000
        self.stream_repeats = 1 if quick else 3
        self.conc_levels = [1, 10, 50] if quick else [1, 10, 50, 200]
        self.conc_levels_docker = [] if quick else [1, 10, 50]
        self.conc_calls = 3 if quick else 10
        self.idle_counts = [50, 200] if quick else [100, 500, 1000]
        self.gate_limit = 300 if quick else None
        self.gate_repeat = 1 if quick else 3
        self.pty_samples = 100 if quick else 500
        self.bg_processes = 100 if quick else 1000


def provision_all() -> tuple[dict[str, dict[str, Any]], list[Row]]:
    """Each backend's options (its kind as its name), or a row saying why it is not available here."""
    options: dict[str, dict[str, Any]] = {}
    missing: list[Row] = []
    for kind in ("local", "docker", "ssh", "singularity", *CLOUD):
        try:
            if kind == "docker":
                # Not tests.infra.docker.provision(): that sweeps the conformance suite's containers,
                # which other engineers' runs may be using right now. Ours carry their own label.
                importlib.import_module("tests.infra.docker").engine()
                options[kind] = {"kind": "docker", "image": IMAGE, "labels": {floors.BENCH_LABEL: "daemon"}}
            else:
                options[kind] = importlib.import_module(f"tests.infra.{kind}").provision()
            say(f"  {kind}: ready")
        except (Exception, SystemExit) as exc:
            missing.append(skipped("executor", label(kind), "exec_true_p50_ms", f"{type(exc).__name__}: {exc}"))
            say(f"  {kind}: NOT available: {exc}")
        except BaseException as exc:  # pytest.skip(...) from an infra module: not an Exception
            if isinstance(exc, KeyboardInterrupt):
                raise
            missing.append(skipped("executor", label(kind), "exec_true_p50_ms", str(exc)))
            say(f"  {kind}: skipped: {exc}")
    return options, missing


def label(kind: str) -> str:
    return f"{kind} (local fake)" if kind in CLOUD else kind


def guarded(rows: list[Row], what: str, system: str, backend: str, fn: Callable[[], list[Row]]) -> None:
    """Run one part; a failure becomes a row with the reason instead of ending the run."""
    try:
        rows += fn()
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
        say(f"    {what} FAILED: {type(exc).__name__}: {exc}")
        rows.append(skipped(system, backend, what, f"{type(exc).__name__}: {str(exc)[:400]}"))


def sweep_bench_containers() -> None:
    """The docker backend keeps its container after the daemon stops (by design); the bench's is removed."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={floors.BENCH_LABEL}"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label={floors.BENCH_LABEL}"],
                          capture_output=True, text=True).stdout.split()
    if vols:
        subprocess.run(["docker", "volume", "rm", *vols], capture_output=True)


def per_backend(rows: list[Row], s: Settings, options: dict[str, dict[str, Any]], target: str) -> None:
    """Latency, backend by backend: floor, then hermes-agent, then executor, back to back."""
    try:
        hermes_python: Path | None = hermes.ensure_venv()
    except Exception as exc:  # noqa: BLE001
        hermes_python = None
        say(f"  hermes-agent venv FAILED: {exc}")
        rows.append(skipped("hermes-agent", "local", "exec_true_p50_ms", f"no hermes-agent venv: {exc}"))
    ssh_facts = importlib.import_module("tests.infra.ssh").facts() if "ssh" in options else {}
    for kind in options:
        name = label(kind)
        say(f"  [{name}]")
        if kind == "local":
            guarded(rows, "exec_true_p50_ms", "floor", "local", lambda: floors.bare_spawn(s.n))
            if hermes_python:
                guarded(rows, "exec_true_p50_ms", "hermes-agent", "local", lambda: hermes.run_environment(
                    hermes_python, "local", {"env": "local", "cwd": "/tmp", "n": s.n_hermes}, 900))
        elif kind == "docker":
            guarded(rows, "exec_true_p50_ms", "floor", "docker", lambda: floors.docker_floors(IMAGE, s.n_slow))
            if hermes_python:
                guarded(rows, "exec_true_p50_ms", "hermes-agent", "docker", lambda: hermes.run_environment(
                    hermes_python, "docker", {"env": "docker", "image": IMAGE, "task_id": "executor-bench",
                                              "n": s.n_slow}, 1800))
                hermes.sweep_containers()
        elif kind == "ssh":
            guarded(rows, "exec_true_p50_ms", "floor", "ssh", lambda: floors.ssh_floor(ssh_facts, s.n))
            if hermes_python:
                spec = {"env": "ssh", "n": s.n_hermes, **{k: ssh_facts[k] for k in ("host", "user", "port", "key_file", "known_hosts")}}
                guarded(rows, "exec_true_p50_ms", "hermes-agent", "ssh",
                        lambda: hermes.run_environment(hermes_python, "ssh", spec, 900))
        elif kind == "singularity":
            facts = importlib.import_module("tests.infra.singularity").facts()
            guarded(rows, "exec_true_p50_ms", "floor", "singularity", lambda: floors.apptainer_floor(facts, s.n_slow))
        guarded(rows, "exec_true_p50_ms", "executor", name, lambda: executor_exec.exec_latency(target, kind, name, s.n))
    if hermes_python:
        rows.append(skipped("hermes-agent", "singularity", "exec_true_p50_ms",
                            "not run: the brief compares hermes on local, docker and ssh only"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="same as BENCH_QUICK=1")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where latest.{json,md,png} go")
    args = parser.parse_args()
    s = Settings(QUICK or args.quick)
    started = time.monotonic()
    machine = machine_info()
    machine["quick"] = s.quick
    machine["stream_MB"] = {"backends": s.stream_bytes // 10**6, "cloud fakes": s.stream_bytes_cloud // 10**6}
    if s.quick:
        say(f"BENCH_QUICK: {s.n} calls per latency figure (the full run does 300), {s.stream_bytes // 10**6} MB streams, "
            f"concurrency up to {s.conc_levels[-1]} tasks on local only, {s.idle_counts[-1]} idle tasks, "
            f"{s.bg_processes} background processes; slow parts trimmed. Figures are indicative only.")
    say(f"machine: {machine['cpus']} CPUs, load average {machine['loadavg_start']}")
    rows: list[Row] = []
    say("provisioning backends")
    options, missing = provision_all()
    rows += missing
    say("the raw gRPC floor")
    guarded(rows, "rtt_p50_ms", "floor", "grpc (unary-stream)",
            lambda: floors.grpc_floor(max(s.n, 200), s.stream_bytes, s.stream_repeats))
    say(f"starting one daemon with {', '.join(options)}")
    daemon = executor_exec.start_daemon(options)
    try:
        target, pid = daemon.target, daemon.proc.pid
        say("Exec latency, backend by backend (floor, hermes-agent, executor)")
        per_backend(rows, s, options, target)
        say("streaming throughput")
        for kind in options:
            size = s.stream_bytes_cloud if kind in CLOUD else s.stream_bytes
            guarded(rows, "stream_MBps", "executor", label(kind),
                    lambda: executor_exec.stream_throughput(target, pid, kind, label(kind), size, s.stream_repeats))
        say("gate through gRPC (CheckCommand)")
        guarded(rows, "check_p50_ms", "executor", "gate (gRPC CheckCommand)",
                lambda: gate_rpc.check_command_latency(target, s.gate_limit))
        say("concurrency")
        guarded(rows, "conc_exec_p50_ms", "executor", "local",
                lambda: executor_exec.concurrency(target, "local", "local", s.conc_levels, s.conc_calls))
        if "docker" in options and s.conc_levels_docker:
            guarded(rows, "conc_exec_p50_ms", "executor", "docker",
                    lambda: executor_exec.concurrency(target, "docker", "docker", s.conc_levels_docker, s.conc_calls))
        say("idle tasks held by one daemon")
        guarded(rows, "idle_daemon_rss_MB", "executor", "local",
                lambda: executor_exec.idle_tasks(target, pid, "local", "local", s.idle_counts))
    finally:
        daemon.stop(timeout=180)
        if "docker" in options:
            sweep_bench_containers()
    say("bench/gate.py (in-process gate latency, corpus scores)")
    rows += gate_rpc.gate_script(s.gate_repeat)
    say("bench/pty_processes.py (PTY round trip, idle background processes)")
    rows += gate_rpc.pty_processes_script(s.pty_samples, s.bg_processes)
    machine["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    machine["seconds"] = round(time.monotonic() - started, 1)
    json_path, md_path, png_path, targets = report.write(rows, machine, args.out)
    print(md_path.read_text())
    if not s.quick and args.out == RESULTS:
        report.update_readme(ROOT / "bench" / "README.md", md_path.read_text())
    say(f"wrote {json_path}, {md_path}, {png_path} in {machine['seconds']:.0f} s")
    failed = [t["target"] for t in targets if t["result"] == "FAIL"]
    if failed:
        say("targets not met: " + "; ".join(failed))


if __name__ == "__main__":
    main()

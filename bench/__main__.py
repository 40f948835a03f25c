"""The benchmark suite: ``make bench`` (= ``.venv/bin/python -m bench``); ``BENCH_QUICK=1`` for a short run.

One run, one machine, side by side, backend by backend: the backend is provisioned, then the floor,
hermes-agent 0.19 and executor (through gRPC to a real daemon process started for that backend:
latency, streaming, concurrency) are measured one right after the other, so the three see the same
machine load. Then, on a fresh local daemon, the gate and idle-task capacity; last, the gate's and
the process owners' scripts. Writes bench/results/latest.{json,md,png}; see bench/README.md.

A part that cannot run here (no Docker, no Apptainer, a hermes environment that fails) gives a row
with no value and the reason; the rest of the run goes on.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import executor_exec, fleet, floors, gate_rpc, hermes, report, scale  # noqa: E402 (after sys.path)
from bench.common import QUICK, RESULTS, Row, machine_info, say, skipped, sweep_docker  # noqa: E402

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
        self.stream_repeats = 1 if quick else 5
        self.conc_levels = [1, 10, 50] if quick else [1, 10, 50, 200]
        self.conc_levels_docker = [] if quick else [1, 10, 50]
        self.conc_calls = 3 if quick else 10
        self.idle_counts = [50, 200] if quick else [100, 500, 1000]
        self.gate_limit = 300 if quick else None
        self.gate_repeat = 1 if quick else 3
        self.pty_samples = 100 if quick else 500
        self.bg_processes = 100 if quick else 1000


def provision(kind: str) -> tuple[dict[str, Any] | None, Row | None]:
    """A backend's options, or a row saying why it is not available here. Called right before the
    backend is measured: the shared fake servers may have been restarted by another test run."""
    try:
        if kind == "docker":
            # Not tests.infra.docker.provision(): that sweeps the conformance suite's containers,
            # which other engineers' runs may be using right now. Ours carry their own label.
            importlib.import_module("tests.infra.docker").engine()
            return {"kind": "docker", "image": IMAGE, "labels": {floors.BENCH_LABEL: "daemon"}}, None
        return importlib.import_module(f"tests.infra.{kind}").provision(), None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # also pytest.skip(...) from an infra module, which is no Exception
        say(f"  {kind}: NOT available: {exc}")
        return None, skipped("executor", label(kind), "exec_true_p50_ms", f"{type(exc).__name__}: {exc}")


def label(kind: str) -> str:
    return f"{kind} (local fake)" if kind in CLOUD else kind


def guarded(rows: list[Row], what: str, system: str, backend: str, fn: Callable[..., list[Row]], *args: Any) -> None:
    """Run ``fn(*args)``, one part of the suite; a failure becomes a row with the reason instead of
    ending the run."""
    try:
        rows += fn(*args)
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
        say(f"    {what} FAILED: {type(exc).__name__}: {exc}")
        rows.append(skipped(system, backend, what, f"{type(exc).__name__}: {str(exc)[:400]}"))


def floor_and_hermes(rows: list[Row], s: Settings, kind: str, hermes_python: Path | None) -> None:
    """The floor and hermes-agent for one backend (those that have them)."""
    if kind == "local":
        guarded(rows, "exec_true_p50_ms", "floor", "local", floors.bare_spawn, s.n)
        if hermes_python:
            guarded(rows, "exec_true_p50_ms", "hermes-agent", "local", hermes.run_environment,
                    hermes_python, "local", {"env": "local", "cwd": "/tmp", "n": s.n_hermes}, 900)
    elif kind == "docker":
        guarded(rows, "exec_true_p50_ms", "floor", "docker", floors.docker_floors, IMAGE, s.n_slow)
        if hermes_python:
            spec = {"env": "docker", "image": IMAGE, "task_id": "executor-bench", "n": s.n_slow}
            guarded(rows, "exec_true_p50_ms", "hermes-agent", "docker", hermes.run_environment,
                    hermes_python, "docker", spec, 1800)
            hermes.sweep_containers()
    elif kind == "ssh":
        facts = importlib.import_module("tests.infra.ssh").facts()
        guarded(rows, "exec_true_p50_ms", "floor", "ssh", floors.ssh_floor, facts, s.n)
        if hermes_python:
            spec = {"env": "ssh", "n": s.n_hermes, **{k: facts[k] for k in ("host", "user", "port", "key_file", "known_hosts")}}
            guarded(rows, "exec_true_p50_ms", "hermes-agent", "ssh",
                    hermes.run_environment, hermes_python, "ssh", spec, 900)
    elif kind == "singularity":
        facts = importlib.import_module("tests.infra.singularity").facts()
        guarded(rows, "exec_true_p50_ms", "floor", "singularity", floors.apptainer_floor, facts, s.n_slow)


def per_backend(rows: list[Row], s: Settings) -> None:
    """Backend by backend: provision, the floor, hermes-agent, then executor through a daemon of its
    own (latency, stream; concurrency on local and docker), all back to back under the same load."""
    try:
        hermes_python: Path | None = hermes.ensure_venv()
    except Exception as exc:  # noqa: BLE001
        hermes_python = None
        say(f"  hermes-agent venv FAILED: {exc}")
        rows.append(skipped("hermes-agent", "local", "exec_true_p50_ms", f"no hermes-agent venv: {exc}"))
    for kind in ("local", "docker", "ssh", "singularity", *CLOUD):
        name = label(kind)
        say(f"  [{name}]")
        options, missing = provision(kind)
        if options is None:
            rows.append(missing)
            continue
        floor_and_hermes(rows, s, kind, hermes_python)
        try:
            daemon = executor_exec.start_daemon({kind: options}, default=kind)
        except Exception as exc:  # noqa: BLE001
            say(f"    the daemon did not start with {kind}: {exc}")
            rows.append(skipped("executor", name, "exec_true_p50_ms", f"the daemon did not start: {str(exc)[:400]}"))
            continue
        try:
            target, pid = daemon.target, daemon.proc.pid
            guarded(rows, "exec_true_p50_ms", "executor", name, executor_exec.exec_latency, target, pid, kind, name, s.n)
            if kind == "local":
                guarded(rows, "paired_exec_true_p50_ms", "executor", name, executor_exec.paired_with_spawn, target, s.n)
            size = s.stream_bytes_cloud if kind in CLOUD else s.stream_bytes
            guarded(rows, "stream_MBps", "executor", name,
                    executor_exec.stream_throughput, target, pid, kind, name, size, s.stream_repeats)
            levels = {"local": s.conc_levels, "docker": s.conc_levels_docker}.get(kind)
            if levels:
                guarded(rows, "conc_exec_p50_ms", "executor", name,
                        executor_exec.concurrency, target, pid, kind, name, levels, s.conc_calls)
        finally:
            daemon.stop(timeout=180)
            if kind == "docker":
                sweep_docker(floors.BENCH_LABEL)
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
    say("the raw gRPC floor")
    guarded(rows, "rtt_p50_ms", "floor", "grpc (unary-stream)",
            floors.grpc_floor, max(s.n, 200), s.stream_bytes, s.stream_repeats)
    say("backend by backend: floor, hermes-agent, executor (latency, stream, concurrency)")
    per_backend(rows, s)
    say("scale (bench/scale.py): cold start on every backend, new tasks at once, load, shutdown, per_task")
    try:
        rows += scale.run_all(scale.Settings(s.quick))
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
        say(f"    scale FAILED: {type(exc).__name__}: {exc}")
        rows.append(skipped("executor", "scale", "cold_start_p50_ms", f"{type(exc).__name__}: {str(exc)[:400]}"))
    say("local: isolation sandbox (bubblewrap) next to none")
    guarded(rows, "exec_true_p50_ms", "executor", "local (sandbox vs none)",
            executor_exec.local_isolation, s.n, max(10, s.n // 10))
    say("a fresh local daemon: the gate through gRPC, idle tasks")
    daemon = executor_exec.start_daemon({"local": {"kind": "local"}})
    try:
        target, pid = daemon.target, daemon.proc.pid
        guarded(rows, "check_p50_ms", "executor", "gate (gRPC CheckCommand)",
                gate_rpc.check_command_latency, target, s.gate_limit)
        guarded(rows, "idle_daemon_rss_MB", "executor", "local",
                executor_exec.idle_tasks, target, pid, "local", "local", s.idle_counts)
    finally:
        daemon.stop(timeout=180)
    say("a fleet: three daemons, direct vs nginx vs HAProxy, 200 tasks through each proxy (bench/fleet.py)")
    try:
        rows += fleet.run(s.quick)
    except Exception as exc:  # noqa: BLE001 - recorded, not swallowed
        say(f"    fleet FAILED: {type(exc).__name__}: {exc}")
        rows.append(skipped("executor", "fleet (nginx)", "exec_true_p50_ms", f"{type(exc).__name__}: {str(exc)[:400]}"))
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

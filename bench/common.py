"""Shared pieces of the benchmark suite: rows, percentiles, machine facts, logging.

Every figure the suite produces becomes one :class:`Row`; ``bench/__main__.py`` writes them all to
``bench/results/latest.json``. A row carries the load average at the moment it was measured because
this 2-core machine is shared with other engineers' test runs: a figure taken under load 6 is not
comparable with one taken under load 1, and the reader must be able to tell.
"""

from __future__ import annotations

import os
import platform
import sys
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CACHE = Path(os.environ.get("EXECUTOR_TEST_CACHE", "/var/cache/executor-test"))
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")


def say(message: str) -> None:
    """Progress on stderr, flushed: a bench run is long and the reader wants to see it move."""
    print(message, file=sys.stderr, flush=True)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


@dataclass
class Row:
    """One measured figure. ``system`` is executor, hermes-agent or floor."""

    system: str
    backend: str
    metric: str
    value: float | None
    unit: str
    n: int
    note: str = ""
    load1: float = field(default_factory=load1)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..1) of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(q * (len(ordered) - 1)))))]


def latency_rows(system: str, backend: str, prefix: str, samples_ms: list[float], note: str = "") -> list[Row]:
    """p50 / p95 / p99 rows (milliseconds) of one latency series."""
    n = len(samples_ms)
    return [Row(system, backend, f"{prefix}_{name}_ms", round(percentile(samples_ms, q), 3), "ms", n, note)
            for name, q in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))]


def time_calls(call: Callable[[], object], n: int, warmup: int = 5) -> list[float]:
    """Run ``call`` ``warmup + n`` times; the last n durations in milliseconds."""
    for _ in range(warmup):
        call()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def skipped(system: str, backend: str, metric: str, why: str) -> Row:
    """A figure that could not be measured here, with the reason (never a made-up number)."""
    return Row(system, backend, metric, None, "", 0, f"not measured: {why}")


def machine_info() -> dict[str, Any]:
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": platform.node(), "cpus": os.cpu_count(), "cpu_model": cpu_model,
        "mem_gb": round(mem_kb / 1048576, 1), "kernel": platform.release(),
        "python": platform.python_version(), "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()], "quick": QUICK,
    }


def summarize(rows: Iterable[Row]) -> str:
    return "\n".join(f"  {r.system:12} {r.backend:28} {r.metric:26} {r.value!s:>10} {r.unit:5} n={r.n} {r.note}"
                     for r in rows)


def sweep_docker(label: str) -> None:
    """Remove the containers and volumes labelled ``label`` (``KEY`` or ``KEY=VALUE``): the docker
    backend keeps its container after the daemon stops (by design); the bench's are removed."""
    ids = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"],
                         capture_output=True, text=True).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True)
    vols = subprocess.run(["docker", "volume", "ls", "-q", "--filter", f"label={label}"],
                          capture_output=True, text=True).stdout.split()
    if vols:
        subprocess.run(["docker", "volume", "rm", *vols], capture_output=True)

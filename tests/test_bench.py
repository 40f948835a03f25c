"""The benchmark suite itself (``make bench``), run small: every part measures a real daemon and
writes the rows the report reads. A rename in the code a bench part calls, or a part that quietly
records nothing, fails here instead of at the next full bench run (the gate's script once broke
that way unnoticed).

Only the shape of the results is checked (rows present, values measured, targets evaluated), never
their size: performance is judged by ``make bench``, not by timed assertions."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import bench
from bench import executor_exec, gate_rpc, report, scale
from bench.common import Row, machine_info

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def test_every_bench_module_imports():
    names = [m.name for m in pkgutil.iter_modules(bench.__path__)]
    assert {"executor_exec", "floors", "gate", "gate_rpc", "report", "scale", "fleet", "hermes"} <= set(names)
    for name in names:
        if name != "__main__":
            importlib.import_module(f"bench.{name}")
    importlib.import_module("bench.__main__")


def _measured(rows: list[Row], metric: str) -> Row:
    found = [r for r in rows if r.metric == metric]
    assert found, f"no {metric} row in {[r.metric for r in rows]}"
    assert found[0].value is not None, f"{metric} was not measured: {found[0].note}"
    return found[0]


def test_the_exec_parts_measure_a_real_daemon(tmp_path):
    daemon = executor_exec.start_daemon({"local": {"kind": "local"}})
    try:
        target, pid = daemon.target, daemon.proc.pid
        rows = executor_exec.exec_latency(target, pid, "local", "local", 5)
        rows += executor_exec.stream_throughput(target, pid, "local", "local", 1_000_000, 1)
        rows += executor_exec.concurrency(target, pid, "local", "local", [2], 1)
        rows += executor_exec.idle_tasks(target, pid, "local", "local", [3])
        rows += gate_rpc.check_command_latency(target, 10)
    finally:
        daemon.stop(timeout=60)
    for metric in ("exec_true_p50_ms", "stream_MBps", "conc2_exec_p50_ms", "check_p50_ms"):
        assert _measured(rows, metric).value > 0
    assert any(r.metric.startswith("idle3_") and r.value for r in rows), [r.metric for r in rows]

    # the report: every target evaluated (FAIL or n/a where this small run has no figure), files written
    json_path, md_path, png_path, targets = report.write(rows, machine_info(), tmp_path)
    assert [t["target"] for t in targets] == [t.name for t in report.TARGETS]
    by_name = {t["target"]: t for t in targets}
    stream = by_name["local: 200 MB stream through Exec, asyncio client (>= 200 MB/s)"]
    assert stream["measured"] == _measured(rows, "stream_MBps").value and stream["result"] in ("PASS", "FAIL")
    written = json.loads(json_path.read_text())
    assert {r["metric"] for r in written} >= {"exec_true_p50_ms", "target"}
    local_line = [ln for ln in md_path.read_text().splitlines() if ln.startswith("| local |")]
    assert local_line and f"{_measured(rows, 'exec_true_p50_ms').value:.2f}" in local_line[0], local_line
    assert png_path.stat().st_size > 0


def test_the_scale_parts_run_on_local():
    options = scale.provision("local")
    rows = scale.cold_rows("local", "local", options, 2)
    rows += scale.burst_rows("local", "local", options, 5)
    assert _measured(rows, "cold_start_p50_ms").value > 0 and _measured(rows, "burst5_first_exec_p50_ms").value > 0
    # an error is a failed call or a wrong output: none, at any size
    assert _measured(rows, "cold_start_errors").value == 0 and _measured(rows, "burst5_first_exec_errors").value == 0


def test_the_owners_scripts_write_their_rows(tmp_path):
    """bench/gate.py and bench/pty_processes.py, as the suite runs them (gate_rpc reads their JSON)."""
    gate_out, pty_out = tmp_path / "gate.json", tmp_path / "pty.json"
    for args in (["bench/gate.py", "--repeat", "1", "--out", str(gate_out)],
                 ["bench/pty_processes.py", "--rtt-samples", "5", "--processes", "4", "--per-task", "2",
                  "--out", str(pty_out)]):
        r = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    gate = {(row["corpus"], row["metric"]): row for row in json.loads(gate_out.read_text())}
    assert gate[("own", "gate_check_ms")]["p50"] > 0
    own = gate[("own", "gate_quality")]
    assert own["block_rows"] > 0 and own["recall"] is not None
    pty = {row["metric"]: row for row in json.loads(pty_out.read_text())}
    assert pty["pty_echo_round_trip_ms"]["p50"] > 0
    assert pty["close_tasks_ending_processes"]["processes"] == 4


def test_a_part_that_fails_becomes_a_row_with_the_reason():
    rows: list[Row] = []

    def broken() -> list[Row]:
        raise RuntimeError("the backend is gone")

    scale.guarded(rows, "local", "cold_start", broken)
    assert len(rows) == 1 and rows[0].value is None and "the backend is gone" in rows[0].note

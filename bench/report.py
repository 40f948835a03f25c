"""Turning rows into latest.json, latest.md (tables + targets) and latest.png (the plot)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import Row

#: Plot / table order of the backends; the cloud ones carry their "(local fake)" mark.
ORDER = ["local", "docker", "ssh", "singularity", "modal (local fake)", "daytona (local fake)",
         "vercel_sandbox (local fake)"]


class Index:
    """Look rows up by (system, backend, metric)."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows = rows
        self._by = {(r.system, r.backend, r.metric): r for r in rows}

    def get(self, system: str, backend: str, metric: str) -> float | None:
        row = self._by.get((system, backend, metric))
        return row.value if row is not None else None

    def backends(self, system: str) -> list[str]:
        seen = {r.backend for r in self.rows if r.system == system and r.metric == "exec_true_p50_ms"}
        return [b for b in ORDER if b in seen]


@dataclass
class Target:
    name: str
    measured: Callable[[Index], float | None]
    goal: float
    higher_is_better: bool
    fmt: str  # how to print measured/goal: "x" (ratio) or "ms" or "MB/s"

    def check(self, idx: Index) -> tuple[float | None, str]:
        value = self.measured(idx)
        if value is None:
            return None, "not measured"
        ok = value >= self.goal if self.higher_is_better else value <= self.goal
        return value, "PASS" if ok else "FAIL"


def _ratio(num: tuple[str, str, str], den: tuple[str, str, str]) -> Callable[[Index], float | None]:
    def f(idx: Index) -> float | None:
        a, b = idx.get(*num), idx.get(*den)
        return round(a / b, 2) if a and b else None
    return f


def _value(key: tuple[str, str, str]) -> Callable[[Index], float | None]:
    return lambda idx: idx.get(*key)


EX = "executor"
P50 = "exec_true_p50_ms"
TARGETS = [
    Target("local: hermes LocalEnvironment p50 / executor p50 (>= 5x)", _ratio(("hermes-agent", "local", P50), (EX, "local", P50)), 5, True, "x"),
    Target("local: bare `bash -c true` spawn p50 / executor p50 (>= 1x: at or under the floor; separate series)",
           _ratio(("floor", "local", P50), (EX, "local", P50)), 1, True, "x"),
    Target("local: the same, paired (calls alternating, same instant load)",
           _ratio(("floor", "local", "paired_exec_true_p50_ms"), (EX, "local", "paired_exec_true_p50_ms")), 1, True, "x"),
    Target("docker: hermes DockerEnvironment p50 / executor p50 (>= 10x)", _ratio(("hermes-agent", "docker", P50), (EX, "docker", P50)), 10, True, "x"),
    Target("docker: `docker exec CONTAINER true` p50 / executor p50 (>= 10x)", _ratio(("floor", "docker", P50), (EX, "docker", P50)), 10, True, "x"),
    Target("ssh: hermes SSHEnvironment p50 / executor p50 (>= 5x)", _ratio(("hermes-agent", "ssh", P50), (EX, "ssh", P50)), 5, True, "x"),
    Target("ssh: OpenSSH warm ControlMaster p50 / executor p50 (>= 2x)", _ratio(("floor", "ssh", P50), (EX, "ssh", P50)), 2, True, "x"),
    Target("singularity: `apptainer exec instance://` p50 / executor p50 (>= 1x)",
           _ratio(("floor", "singularity", P50), (EX, "singularity", P50)), 1, True, "x"),
    Target("gate: in-process check p50 over the own corpus (<= 0.5 ms)",
           _value((EX, "gate (in-process, own corpus)", "check_p50_ms")), 0.5, False, "ms"),
    Target("local: 200 MB stream through Exec, asyncio client (>= 200 MB/s)", _value((EX, "local", "stream_MBps")), 200, True, "MB/s"),
    Target("fleet: Exec `true` p50 through nginx minus direct (<= 1 ms)", _value((EX, "fleet (nginx)", "added_p50_ms")), 1, False, "ms"),
    Target("fleet: Exec `true` p50 through HAProxy minus direct (<= 1 ms)", _value((EX, "fleet (haproxy)", "added_p50_ms")), 1, False, "ms"),
    Target("fleet: 3 daemons, 200 concurrent tasks through nginx, errors (= 0)",
           _value((EX, "fleet 3 daemons (nginx)", "conc200_errors")), 0, False, ""),
    Target("fleet: 3 daemons, 200 concurrent tasks through HAProxy, errors (= 0)",
           _value((EX, "fleet 3 daemons (haproxy)", "conc200_errors")), 0, False, ""),
    Target("docker: 200 new tasks at once, first Exec p50 (<= 2000 ms)",
           _value((EX, "docker", "burst200_first_exec_p50_ms")), 2000, False, "ms"),
    Target("docker: 200 new tasks at once, first Exec p99 (<= 5000 ms)",
           _value((EX, "docker", "burst200_first_exec_p99_ms")), 5000, False, "ms"),
    Target("docker: a new task's first Exec with the warm pool, p50 (<= 100 ms)",
           _value((EX, "docker", "cold_start_p50_ms")), 100, False, "ms"),
    Target("load: errors over 200 and 1,000 concurrent tasks on local, docker and ssh (0)",
           lambda idx: _sum_errors(idx), 0, False, "errors"),
    Target("shutdown: SIGTERM -> exit with 1,000 local tasks (<= drain + 10 s = 12 s)",
           _value((EX, "local", "shutdown_1000_tasks_s")), 12, False, "s"),
]


def _sum_errors(idx: Index) -> float | None:
    found = [r.value for r in idx.rows if r.system == EX and r.metric.startswith("load") and r.metric.endswith("_errors")
             and r.value is not None]
    return float(sum(found)) if found else None


def evaluate(rows: list[Row]) -> list[dict[str, Any]]:
    idx = Index(rows)
    out = []
    for t in TARGETS:
        value, verdict = t.check(idx)
        out.append({"target": t.name, "measured": value, "goal": t.goal, "unit": t.fmt, "result": verdict})
    return out


def _fmt(v: float | None, digits: int = 2) -> str:
    if v is None:
        return "–"
    return f"{v:.{digits}f}" if abs(v) < 1000 else f"{v:.0f}"


def markdown(rows: list[Row], machine: dict[str, Any], targets: list[dict[str, Any]]) -> str:
    idx = Index(rows)
    lines = [f"Run {machine['when']} on {machine['host']}: {machine['cpus']} CPUs ({machine['cpu_model']}), "
             f"{machine['mem_gb']} GB, Linux {machine['kernel']}, Python {machine['python']}; load average "
             f"{' / '.join(map(str, machine['loadavg_start']))} at start, {' / '.join(map(str, machine.get('loadavg_end', [])))} at end"
             + ("; **BENCH_QUICK** (fewer iterations, slow parts skipped)" if machine["quick"] else "") + ".", ""]
    lines += ["**Exec latency** (ms, warm task; executor through gRPC to a real daemon process, `executor.client.Client`; p50 / p99):", "",
              "| backend | executor `true` | executor `echo hi` | hermes-agent 0.19 `true` | floor `true` | floor is | stream MB/s |",
              "|---|---|---|---|---|---|---|"]
    floor_name = {"local": "`bash -c true` spawn", "docker": "`docker exec` CLI", "ssh": "OpenSSH ControlMaster",
                  "singularity": "`apptainer exec instance://`"}
    for b in ORDER:
        if idx.get(EX, b, P50) is None and idx.get("floor", b, P50) is None:
            continue

        def pair(system: str, name: str, b: str = b) -> str:
            p50, p99 = idx.get(system, b, f"exec_{name}_p50_ms"), idx.get(system, b, f"exec_{name}_p99_ms")
            return "–" if p50 is None else f"{_fmt(p50)} / {_fmt(p99)}"

        lines.append(f"| {b} | {pair(EX, 'true')} | {pair(EX, 'echo')} | {pair('hermes-agent', 'true')} | "
                     f"{pair('floor', 'true')} | {floor_name.get(b, '–')} | {_fmt(idx.get(EX, b, 'stream_MBps'), 0)} |")
    grpc = idx.get("floor", "grpc (unary-stream)", "rtt_p50_ms")
    dpy = idx.get("floor", "docker (docker-py exec_run)", P50)
    lines += ["", f"Other floors (p50): raw gRPC round trip on a unix socket {_fmt(grpc)} ms (unary-stream), "
              f"{_fmt(idx.get('floor', 'grpc (unary)', 'rtt_p50_ms'))} ms (unary); docker-py `exec_run` {_fmt(dpy)} ms; "
              f"a trivial gRPC server streams 1 MiB messages to a grpc.aio client at "
              f"{_fmt(idx.get('floor', 'grpc (stream)', 'stream_MBps'), 0)} MB/s.", ""]
    lines += ["**Targets** (ratios from this run):", "", "| target | measured | result |", "|---|---|---|"]
    for t in targets:
        unit = {"x": "x", "ms": " ms", "MB/s": " MB/s"}.get(t["unit"], "")
        lines.append(f"| {t['target']} | {_fmt(t['measured'])}{unit if t['measured'] is not None else ''} | {t['result']} |")
    streams = [b for b in ORDER if idx.get(EX, b, "stream_MBps") is not None]
    if streams:
        sizes = machine.get("stream_MB", {})
        lines += ["", f"**Streaming** (`head -c N /dev/zero` through Exec to a grpc.aio client, N = {sizes.get('backends', '?')} MB, "
                  f"{sizes.get('cloud fakes', '?')} MB on the local fakes; CPU seconds per stream; "
                  "the CPU-bound rate is bytes / the busier process's CPU time, i.e. the rate with a free core each):", "",
                  "| backend | median MB/s | best MB/s | daemon CPU s | client CPU s | CPU-bound MB/s |", "|---|---|---|---|---|---|"]
        for b in streams:
            lines.append(f"| {b} | " + " | ".join(_fmt(idx.get(EX, b, m), d) for m, d in (
                ("stream_MBps", 0), ("stream_best_MBps", 0), ("stream_daemon_cpu_s", 2), ("stream_client_cpu_s", 2),
                ("stream_cpu_bound_MBps", 0))) + " |")
    stages = [(s, idx.get(EX, "local", f"stage_{s}_p50_ms"))
              for s in ("gate", "queue", "spawn", "first_byte", "run", "daemon_total")]
    stage_metric = {s: f"stage_{s}_p50_ms" for s, _ in stages}
    stages += [("daemon CPU/Exec", 0.0), ("client CPU/Exec", 0.0)]
    stage_metric.update({"daemon CPU/Exec": "daemon_cpu_ms_per_exec", "client CPU/Exec": "client_cpu_ms_per_exec"})
    if any(v is not None for _, v in stages):
        lines += ["", "**Per-stage p50 of one Exec of `true`** (ms, from `Exit.timings`; daemon_total is `Exit.duration_seconds`, "
                  "the core's time from request to exit; the client-side p50 minus it is gRPC + the server adapter; "
                  "CPU/Exec: CPU time of the daemon and of the client per sequential Exec):", "",
                  "| backend | " + " | ".join(s for s, _ in stages) + " |", "|---|" + "---|" * len(stages)]
        for b in ORDER:
            vals = [idx.get(EX, b, stage_metric[s]) for s, _ in stages]
            if any(v is not None for v in vals):
                lines.append(f"| {b} | " + " | ".join(_fmt(v, 3) for v in vals) + " |")
    conc = sorted({int(r.metric[4:].split("_")[0]) for r in rows if r.metric.startswith("conc") and r.system == EX})
    if conc:
        lines += ["", "**Concurrency** (N tasks running `true` back to back at once; per-call p50 / p99 ms, Execs/s, "
                  "daemon CPU ms per Exec):", "",
                  "| backend | " + " | ".join(f"{n} tasks" for n in conc) + " |", "|---|" + "---|" * len(conc)]
        for b in ORDER:
            cells = []
            for n in conc:
                p50 = idx.get(EX, b, f"conc{n}_exec_p50_ms")
                cells.append("–" if p50 is None else
                             f"{_fmt(p50)} / {_fmt(idx.get(EX, b, f'conc{n}_exec_p99_ms'))}, {_fmt(idx.get(EX, b, f'conc{n}_execs_per_s'), 0)}/s, "
                             f"{_fmt(idx.get(EX, b, f'conc{n}_daemon_cpu_ms_per_exec'))} ms")
            if any(c != "–" for c in cells):
                lines.append(f"| {b} | " + " | ".join(cells) + " |")
    idle = [r for r in rows if r.metric.endswith("_daemon_rss_MB") and r.metric.startswith("idle")]
    bg = [r for r in rows if r.metric.endswith("_daemon_rss_MB") and r.metric.startswith("bgproc")]
    if idle or bg:
        lines += ["", "**Capacity** (one daemon, local backend):", ""]
        for r in idle:
            n = r.n
            lines.append(f"- {n} idle tasks (a live shell each): daemon RSS {_fmt(r.value, 1)} MB, "
                         f"{_fmt(idx.get(EX, r.backend, f'idle{n}_rss_per_task_kB'), 0)} kB per task in the daemon, "
                         f"{_fmt(idx.get(EX, r.backend, f'idle{n}_tree_pss_per_task_kB'), 0)} kB per task with its shell (PSS)")
        for r in bg:
            n = r.n
            lines.append(f"- {n} idle background processes: daemon RSS {_fmt(r.value, 1)} MB, "
                         f"{_fmt(idx.get(EX, 'local', f'bgproc{n}_rss_per_process_kB'), 1)} kB per process")
        rtt = idx.get(EX, "local", "pty_echo_rtt_p50_ms")
        if rtt is not None:
            lines.append(f"- PTY round trip (a byte in, its echo out): p50 {_fmt(rtt, 3)} ms, "
                         f"p99 {_fmt(idx.get(EX, 'local', 'pty_echo_rtt_p99_ms'), 3)} ms")
    lines += scale_markdown(rows, idx)
    gate_rows = [r for r in rows if r.backend.startswith("gate")]
    if gate_rows:
        lines += ["", "**Gate**:", ""]
        for b in sorted({r.backend for r in gate_rows}):
            vals = {r.metric: r.value for r in gate_rows if r.backend == b}
            parts = [f"{k.replace('check_', '').replace('_ms', '')} {_fmt(v, 3)} ms" for k, v in vals.items() if k.startswith("check_")]
            parts += [f"{k.replace('_', ' ')} {v}" for k, v in vals.items() if k in ("recall", "false_positive_rate")]
            lines.append(f"- {b}: " + ", ".join(parts))
    fleet_p50 = {p: idx.get(EX, f"fleet ({p})", "exec_true_p50_ms") for p in ("direct", "nginx", "haproxy")}
    if any(v is not None for v in fleet_p50.values()):
        lines += ["", "**Fleet** (three daemons behind real nginx and HAProxy, bench/fleet.py; Exec of `true`, "
                  "p50 / p99 ms, TCP loopback, alternating batches):", "",
                  "| path | Exec `true` | added p50 | 200 tasks at once: p50 / p99 | Execs/s | errors |",
                  "|---|---|---|---|---|---|"]
        for p in ("direct", "nginx", "haproxy"):
            b, c = f"fleet ({p})", f"fleet 3 daemons ({p})"
            lines.append(f"| {p} | {_fmt(fleet_p50[p])} / {_fmt(idx.get(EX, b, 'exec_true_p99_ms'))} | "
                         f"{_fmt(idx.get(EX, b, 'added_p50_ms'), 3) if p != 'direct' else '–'} | "
                         f"{_fmt(idx.get(EX, c, 'conc200_exec_p50_ms'), 1)} / {_fmt(idx.get(EX, c, 'conc200_exec_p99_ms'), 1)} | "
                         f"{_fmt(idx.get(EX, c, 'conc200_execs_per_s'), 0)} | {_fmt(idx.get(EX, c, 'conc200_errors'), 0)} |")
    missing = [r for r in rows if r.value is None]
    if missing:
        lines += ["", "**Not measured here**:", ""] + [f"- {r.system} / {r.backend} / {r.metric}: {r.note}" for r in missing]
    return "\n".join(lines) + "\n"


def scale_markdown(rows: list[Row], idx: Index) -> list[str]:
    """bench/scale.py's rows: cold start, new tasks at once, load, shutdown, per_task."""
    lines: list[str] = []
    scale_backends = list(dict.fromkeys(r.backend for r in rows if r.system == EX and (
        r.metric.startswith(("cold_start", "burst", "load")) or "shutdown_" in r.metric or r.metric == "containers_per_s")))
    if not scale_backends:
        return lines

    def trio(b: str, m: str) -> str:
        p50 = idx.get(EX, b, f"{m}_p50_ms")
        if p50 is None and idx.get(EX, b, f"{m}_errors") is None:
            return "–"
        errors = idx.get(EX, b, f"{m}_errors")
        return f"{_fmt(p50)} / {_fmt(idx.get(EX, b, f'{m}_p99_ms'))}, {_fmt(errors, 0)} err"

    bursts = sorted({r.metric.split("_")[0] for r in rows if r.metric.startswith("burst") and r.metric.endswith("_p50_ms")},
                    key=lambda m: int(m[5:]))
    loads = sorted({r.metric.split("_")[0] for r in rows if r.metric.startswith("load") and r.metric.endswith("_p50_ms")},
                   key=lambda m: int(m[4:]))
    head = ["cold start (first Exec of a new task)"] + [f"{m[5:]} new tasks at once (first Exec)" for m in bursts] + [
        f"load: {m[4:]} tasks x 3 Execs" for m in loads]
    lines += ["", "**New tasks and many tasks** (bench/scale.py; p50 / p99 ms, errors; each cell its own daemon):", "",
              "| backend | " + " | ".join(head) + " |", "|---|" + "---|" * len(head)]
    for b in scale_backends:
        cells = [trio(b, "cold_start")] + [trio(b, f"{m}_first_exec") for m in bursts] + [trio(b, f"{m}_exec") for m in loads]
        if any(c != "–" for c in cells):
            lines.append(f"| {b} | " + " | ".join(cells) + " |")
    for r in rows:
        if r.system == EX and r.metric.startswith("shutdown_") and r.value is not None:
            lines.append(f"\nShutdown ({r.backend}): {_fmt(r.value)} s from SIGTERM to exit with {r.n} tasks ({r.note}).")
        if r.system == EX and r.metric == "containers_per_s" and r.value is not None:
            lines.append(f"\n`per_task: true`: {_fmt(r.value)} containers per second ({r.note}).")
    return lines


def plot(rows: list[Row], path: Path, machine: dict[str, Any]) -> None:
    """Grouped bars: p50 Exec latency of `true` per backend, executor / hermes-agent / floor, log scale;
    the whiskers reach p99; the dashed line is a raw gRPC round trip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = Index(rows)
    backends = [b for b in ORDER if any(idx.get(s, b, P50) for s in (EX, "hermes-agent", "floor"))]
    systems = [(EX, "executor (gRPC, daemon)", "#1f77b4"), ("hermes-agent", "hermes-agent 0.19", "#d62728"),
               ("floor", "floor (bare spawn / docker exec / ssh -S / apptainer exec)", "#7f7f7f")]
    fig, ax = plt.subplots(figsize=(11, 6))
    width = 0.27
    for i, (system, label, color) in enumerate(systems):
        xs, p50s, errs = [], [], []
        for j, b in enumerate(backends):
            p50, p99 = idx.get(system, b, P50), idx.get(system, b, "exec_true_p99_ms")
            if p50:
                xs.append(j + (i - 1) * width)
                p50s.append(p50)
                errs.append(max(0.0, (p99 or p50) - p50))
        bars = ax.bar(xs, p50s, width, label=label, color=color, yerr=[[0] * len(errs), errs], capsize=3)
        for bar, v in zip(bars, p50s):
            ax.annotate(f"{v:.3g}", (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 2), textcoords="offset points")
    grpc = idx.get("floor", "grpc (unary-stream)", "rtt_p50_ms")
    if grpc:
        ax.axhline(grpc, color="#2ca02c", linestyle="--", linewidth=1, label=f"raw gRPC round trip ({grpc:.2g} ms)")
    ax.set_yscale("log")
    ax.set_xticks(range(len(backends)))
    ax.set_xticklabels([b.replace(" (local fake)", "\n(local fake)") for b in backends], fontsize=9)
    ax.set_ylabel("Exec of `true`, p50 ms (whisker: p99), log scale")
    ax.set_title(f"Exec latency per backend, {machine['when']} ({machine['cpus']} CPUs, load {machine['loadavg_start'][0]})"
                 + (" [BENCH_QUICK]" if machine["quick"] else ""), fontsize=10)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, frameon=False)
    ax.grid(axis="y", which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(rows: list[Row], machine: dict[str, Any], out_dir: Path) -> tuple[Path, Path, Path, list[dict[str, Any]]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    targets = evaluate(rows)
    data = [{**r.as_dict(), "machine": machine} for r in rows]
    data += [{"system": "executor", "backend": "-", "metric": "target", "value": t["measured"], "unit": t["unit"], "n": 0,
              "note": f"{t['target']}: {t['result']}", "machine": machine} for t in targets]
    paths = out_dir / "latest.json", out_dir / "latest.md", out_dir / "latest.png"
    paths[0].write_text(json.dumps(data, indent=1) + "\n")
    paths[1].write_text(markdown(rows, machine, targets))
    plot(rows, paths[2], machine)
    return (*paths, targets)


def update_readme(readme: Path, table: str) -> None:
    """Put the last full run's tables between the ``<!-- latest -->`` markers of bench/README.md."""
    text = readme.read_text()
    start, end = "<!-- latest -->\n", "<!-- /latest -->"
    if start not in text or end not in text:
        return
    head, rest = text.split(start, 1)
    tail = rest.split(end, 1)[1]
    readme.write_text(head + start + table + end + tail)

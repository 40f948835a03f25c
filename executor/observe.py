"""Observability: Prometheus metrics and one structured log line per command.

Both subscribe to the core's ExecRecords; neither sees a command's output or a token."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from executor.events import ExecRecord
from executor.service import Executor

if TYPE_CHECKING:  # prometheus_client is imported when metrics are on
    from prometheus_client import Counter, Histogram

log = logging.getLogger("executor.exec")

STAGES = ("gate", "approval", "queue", "spawn", "first_byte", "run")
BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any `fields` extra."""

    def format(self, record: logging.LogRecord) -> str:
        data = {"time": round(record.created, 3), "level": record.levelname.lower(), "logger": record.name,
                "message": record.getMessage()}
        data.update(getattr(record, "fields", {}) or {})
        if record.exc_info:
            data["error"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)


def setup_logging(level: str, fmt: str) -> None:
    global _EXEC_LEVEL
    _EXEC_LEVEL = logging.INFO if fmt == "json" else logging.DEBUG
    handler = logging.StreamHandler()
    handler.setFormatter(JSONFormatter() if fmt == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


_EXEC_LEVEL = logging.INFO  # JSON mode: one structured line per command; text mode: at debug level


def log_exec(record: ExecRecord) -> None:
    if not log.isEnabledFor(_EXEC_LEVEL):
        return
    info = record.exit
    fields = {"event": "exec", "task": record.task_id, "backend": record.backend, "status": info.status,
              "exit_code": info.exit_code, "duration": round(info.duration, 6), "gate": record.gate,
              "caller": record.caller, "stdout_bytes": info.stdout_bytes, "stderr_bytes": info.stderr_bytes}
    if info.rule:
        fields["rule"] = info.rule
    log.log(_EXEC_LEVEL, "exec task=%s backend=%s status=%s exit=%s duration=%.3fs%s", record.task_id, record.backend,
             info.status, info.exit_code, info.duration, f" rule={info.rule}" if info.rule else "",
             extra={"fields": fields})


class Metrics:
    """The Prometheus endpoint (config `metrics.listen`, off by default)."""

    def __init__(self, core: Executor) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.core = core
        self.registry = CollectorRegistry()
        self.execs = Counter("executor_execs_total", "Commands finished, by backend and status",
                             ["backend", "status"], registry=self.registry)
        self.stages = Histogram("executor_exec_stage_seconds", "Time of each stage of a command",
                                ["backend", "stage"], buckets=BUCKETS, registry=self.registry)
        self.total = Histogram("executor_exec_seconds", "Total time of a command", ["backend"], buckets=BUCKETS,
                               registry=self.registry)
        self.gate = Counter("executor_gate_decisions_total", "Gate and approval outcomes",
                            ["decision"], registry=self.registry)
        self.output = Counter("executor_output_bytes_total", "Output bytes streamed", ["backend", "stream"],
                              registry=self.registry)
        tasks = Gauge("executor_tasks", "Live tasks", registry=self.registry)
        tasks.set_function(lambda: len(self.core.tasks.tasks))
        busy = Gauge("executor_tasks_busy", "Tasks running a command", registry=self.registry)
        busy.set_function(lambda: sum(1 for t in self.core.tasks.tasks.values() if t.busy))
        procs = Gauge("executor_processes_running", "Background processes running", registry=self.registry)
        procs.set_function(self._running_processes)
        self.available = Gauge("executor_backend_available", "1 when the backend is available", ["backend"],
                               registry=self.registry)
        # backend -> (total, one per stage, stdout bytes, stderr bytes)
        self._per_backend: dict[str, tuple[Histogram, list[Histogram], Counter, Counter]] = {}
        self._counters: dict[tuple[str, str, str], tuple[Counter, Counter]] = {}  # (backend, status, gate)
        core.listeners.append(self.observe)
        self._refresh: asyncio.Task[None] | None = None

    def _running_processes(self) -> float:
        procs = self.core.processes
        return sum(procs.running_count(t) for t in list(self.core.tasks.tasks))

    def _children(self, backend: str) -> tuple[Histogram, list[Histogram], Counter, Counter]:
        """The labelled series of one backend, looked up once (labels() is costly per command)."""
        found = self._per_backend.get(backend)
        if found is None:
            found = (self.total.labels(backend), [self.stages.labels(backend, s) for s in STAGES],
                     self.output.labels(backend, "stdout"), self.output.labels(backend, "stderr"))
            self._per_backend[backend] = found
        return found

    def observe(self, record: ExecRecord) -> None:
        info = record.exit
        key = (record.backend, info.status, record.gate)
        counters = self._counters.get(key)
        if counters is None:
            counters = self._counters[key] = (self.execs.labels(record.backend, info.status),
                                              self.gate.labels(record.gate))
        counters[0].inc()
        counters[1].inc()
        total, stages, out, err = self._children(record.backend)
        total.observe(info.duration)
        t = info.timings
        for child, value in zip(stages, (t.gate, t.approval, t.queue, t.spawn, t.first_byte, t.run)):
            child.observe(value)
        out.inc(info.stdout_bytes)
        err.inc(info.stderr_bytes)

    async def refresh_health(self, every: float = 15.0) -> None:
        while True:
            for status in await self.core.list_backends():
                self.available.labels(status.name).set(1 if status.health.available else 0)
            await asyncio.sleep(every)

    def serve(self, listen: str) -> None:
        from prometheus_client import start_http_server

        host, _, port = listen.rpartition(":")
        start_http_server(int(port), addr=host.strip("[]") or "127.0.0.1", registry=self.registry)
        self._refresh = asyncio.get_running_loop().create_task(self.refresh_health())

    def render(self) -> bytes:
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


__all__ = ["Metrics", "log_exec", "setup_logging", "JSONFormatter"]

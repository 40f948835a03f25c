"""Metrics endpoint and structured logs of a live daemon."""

from __future__ import annotations

import json
import socket
import time
import urllib.request

from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess

TOKEN = "observe-token-123456"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_and_json_logs(tmp_path):
    port = free_port()
    d = DaemonProcess({
        "backend": "local", "backends": {"local": {"kind": "local"}},
        "metrics": {"listen": f"127.0.0.1:{port}"},
        "logging": {"format": "json"},
        "approval": {"mode": "deny"},
        "auth": {"tokens": [{"name": "agent", "token": TOKEN, "roles": ["exec"]}]},
    }, state_dir=tmp_path / "state").start()
    try:
        with d.client(token=TOKEN) as c:
            assert c.run("obs", "echo secret-output-text").exit.status == pb.EXIT_STATUS_COMPLETED
            assert c.run("obs", "exit 2").exit.exit_code == 2
            assert c.run("obs", "git push --force").exit.status == pb.EXIT_STATUS_DENIED
        deadline = time.monotonic() + 20
        body = ""
        while time.monotonic() < deadline:
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            if 'executor_backend_available{backend="local"} 1.0' in body:
                break
            time.sleep(0.2)
        assert 'executor_execs_total{backend="local",status="completed"} 2.0' in body
        assert 'executor_execs_total{backend="local",status="denied"} 1.0' in body
        assert 'executor_gate_decisions_total{decision="deny"} 1.0' in body
        assert 'executor_exec_stage_seconds_count{backend="local",stage="spawn"}' in body
        assert 'executor_backend_available{backend="local"} 1.0' in body
        assert "executor_tasks 1.0" in body

        log = d.log()
        lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
        execs = [x for x in lines if x.get("event") == "exec"]
        assert len(execs) == 3
        assert {x["status"] for x in execs} == {"completed", "denied"}
        denied = [x for x in execs if x["status"] == "denied"][0]
        assert denied["rule"] and denied["task"] == "obs" and denied["backend"] == "local"
        assert "secret-output-text" not in log and TOKEN not in log
    finally:
        d.kill()

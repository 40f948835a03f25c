"""`executor doctor` and `executor health`."""

from __future__ import annotations

import json
import subprocess
import sys


def executor(*args, timeout=120):
    return subprocess.run([sys.executable, "-m", "executor", *args], capture_output=True, text=True, timeout=timeout)


def test_doctor_reports_each_backend_with_a_fix(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: local\nbackends:\n  local: {kind: local}\n"
                   "  dock: {kind: docker, docker_host: 'unix:///nonexistent.sock'}\n"
                   "  remote: {kind: ssh, host: 127.0.0.1, port: 1, user: nobody, known_hosts: /dev/null}\n")
    r = executor("doctor", "--config", str(cfg), "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 1
    assert "ok    backend local (local)" in r.stdout
    assert "FAIL  backend dock (docker)" in r.stdout and "docker" in r.stdout.lower()
    assert "FAIL  backend remote (ssh)" in r.stdout and "127.0.0.1:1" in r.stdout
    r = executor("doctor", "--config", str(cfg), "--state-dir", str(tmp_path / "s"), "--json")
    data = json.loads(r.stdout)
    assert {b["name"]: b["available"] for b in data["backends"]} == {"local": True, "dock": False, "remote": False}


def test_doctor_states_each_backends_isolation_loudly_when_none(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backend: boxed\nbackends:\n  boxed: {kind: local}\n  bare: {kind: local, isolation: none}\n")
    r = executor("doctor", "--config", str(cfg), "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "isolation: sandbox" in r.stdout
    assert "isolation: NONE" in r.stdout and "WARN  backend bare" in r.stdout
    data = json.loads(executor("doctor", "--config", str(cfg), "--state-dir", str(tmp_path / "s"), "--json").stdout)
    policies = {b["name"]: b["policy"].get("isolation", "") for b in data["backends"]}
    assert policies["boxed"].startswith("sandbox") and policies["bare"].startswith("NONE")


def test_doctor_bad_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("backends:\n  local: {kind: local, bogus: 1}\n")
    r = executor("doctor", "--config", str(cfg))
    assert r.returncode == 1 and "backends.local.bogus: unknown key" in r.stdout


def test_doctor_all_good(tmp_path):
    r = executor("doctor", "--state-dir", str(tmp_path / "s"))
    assert r.returncode == 0 and "all checks passed" in r.stdout


def test_health_command(local_daemon, tmp_path):
    r = executor("health", "--target", local_daemon.target)
    assert r.returncode == 0 and r.stdout.strip() == "serving"
    r = executor("health", "--target", f"unix://{tmp_path}/nothing.sock", "--timeout", "1")
    assert r.returncode == 1 and "unhealthy" in r.stdout

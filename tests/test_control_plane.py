"""The control plane under faults: one daemon per state directory, bounded shutdown that still answers
every running command, an audit log that survives deletion and refuses what it cannot record."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess, wait_for

DENY = "executor-cp-denied"
ASK = "executor-cp-ask"


def config(**extra):
    return {"backend": "local", "backends": {"local": {"kind": "local"}},
            "limits": {"drain_seconds": 2, "kill_grace_seconds": 1},
            "approval": {"mode": "ask", "timeout_seconds": 60,
                         "rules": [{"action": "deny", "pattern": DENY, "name": "cp_deny"},
                                   {"action": "ask", "pattern": ASK, "name": "cp_ask"}]},
            **extra}


@pytest.fixture
def daemon(tmp_path):
    d = DaemonProcess(config(), state_dir=tmp_path / "state").start()
    yield d
    d.kill()


def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(daemon):
    with daemon.client() as c:
        c.run("busy", "true")
        result = {}
        th = threading.Thread(target=lambda: result.update(r=c.run("busy", "sleep 3; echo survived")))
        th.start()
        time.sleep(0.5)
        second = subprocess.run([sys.executable, "-m", "executor", "serve", "--config", str(daemon.config_path),
                                 "--state-dir", str(daemon.state_dir)], capture_output=True, text=True, timeout=60)
        th.join(30)
    assert second.returncode == 2, second.stderr
    assert f"in use by another executor daemon (pid {daemon.proc.pid})" in second.stderr
    assert result["r"].stdout == b"survived\n", "the second daemon's recovery must not touch the first's commands"


def test_an_unusable_state_dir_is_one_clear_line(tmp_path):
    bad = tmp_path / "file"
    bad.write_text("not a directory")
    r = subprocess.run([sys.executable, "-m", "executor", "serve", "--state-dir", str(bad / "state")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "cannot be used" in r.stderr and "--state-dir" in r.stderr, r.stderr


def test_sigterm_answers_every_running_exec_with_an_exit(daemon):
    with daemon.client() as c:
        c.run("long", "true")
        events = []

        def go():
            try:
                events.extend(c.exec("long", "echo started; sleep 300"))
            except grpc.RpcError as exc:
                events.append(exc)

        th = threading.Thread(target=go)
        th.start()
        assert wait_for(lambda: any(getattr(e, "WhichOneof", lambda _: "")("event") == "stdout" for e in events))
        assert daemon.stop(timeout=60) == 0
        th.join(30)
    last = events[-1]
    assert not isinstance(last, grpc.RpcError), f"the call ended without an Exit: {last}"
    assert last.exit.status == pb.EXIT_STATUS_CANCELLED and "shutting down" in last.exit.message, last


def test_sigterm_with_many_tasks_ends_within_the_drain(tmp_path):
    d = DaemonProcess(config(), state_dir=tmp_path / "state").start()
    try:
        with d.client() as c:
            threads = [threading.Thread(target=lambda i=i: c.run(f"many{i}", f"cd /tmp && export N={i}"))
                       for i in range(200)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            assert len(c.list_tasks().tasks) == 200
        t0 = time.monotonic()
        assert d.stop(timeout=60) == 0
        took = time.monotonic() - t0
        assert took < 2 + 10, f"shutdown took {took:.1f} s with 200 tasks (drain 2 s)"
        saved = list((tmp_path / "state" / "shells").glob("many*.sh"))
        assert len(saved) == 200, "every idle task's state is saved"
    finally:
        d.kill()


def _audit(daemon) -> list[dict]:
    path = daemon.state_dir / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_deleted_audit_log_is_recreated(daemon):
    with daemon.client() as c:
        assert c.run("a", f"echo {DENY} one").exit.status == pb.EXIT_STATUS_DENIED
        assert wait_for(lambda: any(DENY in e["command"] for e in _audit(daemon)))
        os.unlink(daemon.state_dir / "audit.jsonl")
        assert c.run("a", f"echo {DENY} two").exit.status == pb.EXIT_STATUS_DENIED
        assert wait_for(lambda: any("two" in e["command"] for e in _audit(daemon))), "written to the deleted file"


def test_a_rotated_audit_log_is_followed_on_sighup(daemon):
    with daemon.client() as c:
        assert c.run("a", f"echo {DENY} one").exit.status == pb.EXIT_STATUS_DENIED
        os.rename(daemon.state_dir / "audit.jsonl", daemon.state_dir / "audit.jsonl.1")
        daemon.proc.send_signal(1)  # SIGHUP, as logrotate's postrotate would
        time.sleep(0.3)
        assert c.run("a", f"echo {DENY} two").exit.status == pb.EXIT_STATUS_DENIED
        assert wait_for(lambda: any("two" in e["command"] for e in _audit(daemon)))


def _gate_health(daemon) -> int:
    with grpc.insecure_channel(daemon.target) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service="executor.v1.Executor.gate"), timeout=10).status


def test_an_unwritable_audit_log_refuses_flagged_commands_and_says_so(daemon):
    path = daemon.state_dir / "audit.jsonl"
    with daemon.client() as c:
        assert c.run("a", "echo fine").exit.status == pb.EXIT_STATUS_COMPLETED
        path.unlink()
        path.mkdir()  # writes now fail (EISDIR), as a full or read-only disk would make them
        c.run("a", "echo plain")  # unflagged: runs; its entry waits in memory
        assert wait_for(lambda: _gate_health(daemon) == health_pb2.HealthCheckResponse.NOT_SERVING, 10)
        asked = c.run("a", f"echo {ASK}")  # would wait 60 s for a human: refused at once instead
        assert asked.exit.status == pb.EXIT_STATUS_DENIED and "audit log cannot be written" in asked.exit.message
        path.rmdir()
        assert c.run("a", "echo again").exit.status == pb.EXIT_STATUS_COMPLETED
        assert wait_for(lambda: _gate_health(daemon) == health_pb2.HealthCheckResponse.SERVING, 10)
    commands = [e["command"] for e in _audit(daemon)]
    assert "echo plain" in commands, "the entry written while the log was broken is not lost"


def test_a_timeout_does_not_wait_the_kill_grace_for_what_already_died(tmp_path):
    """With a 30 s grace, a command that dies on TERM still ends at its deadline: the grace before
    KILL is waited only while something still holds the shell's streams."""
    cfg = config()
    cfg["limits"]["kill_grace_seconds"] = 30
    d = DaemonProcess(cfg, state_dir=tmp_path / "state").start()
    try:
        with d.client() as c:
            c.run("t", "true")
            for command in ("sleep 100", "sleep 100 & sleep 100", "trap 'exit 0' TERM; sleep 100 & wait"):
                t0 = time.monotonic()
                r = c.run("t", command, timeout=1)
                took = time.monotonic() - t0
                assert r.exit.status == pb.EXIT_STATUS_TIMED_OUT
                assert took < 15, f"{command!r} took {took:.1f} s: the 30 s grace was waited"
            assert c.run("t", "echo alive").stdout == b"alive\n"
    finally:
        d.kill()

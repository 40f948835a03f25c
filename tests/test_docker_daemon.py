"""The docker backend's faults as a client sees them, through a real daemon process.

The container removed under a running command must end that command with BACKEND_ERROR and
the reason; the next Exec must run (in a recreated container, files kept); a daemon restart
must reattach to the same container. Docker-only behaviour: the shared suite is tests/conformance.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess
from tests.infra import docker as infra

pytestmark = pytest.mark.backend("docker")


def _config(options: dict) -> dict:
    return {"backend": "docker", "backends": {"docker": options},
            "limits": {"default_timeout_seconds": 60, "kill_grace_seconds": 2},
            "approval": {"mode": "ask", "timeout_seconds": 3}}


@pytest.fixture(scope="module")
def options() -> dict:
    infra.engine()
    return {"kind": "docker", "labels": {infra.TEST_LABEL: "daemon"}}


def _run(client, task, command, **kw):
    out, exit_ = bytearray(), None
    for event in client.exec(task, command, **kw):
        kind = event.WhichOneof("event")
        if kind == "stdout":
            out += event.stdout
        elif kind == "exit":
            exit_ = event.exit
    return bytes(out), exit_


def _our_containers(api, state: Path) -> list[dict]:
    instance = (state / "backends" / "docker" / "instance-id").read_text().strip()
    return api.containers(all=True, filters={"label": f"io.executor.daemon={instance}"})


@pytest.fixture
def api():
    import docker

    client = docker.APIClient(version="auto")
    yield client
    client.close()


def _cleanup(api, state: Path) -> None:
    try:
        instance = (state / "backends" / "docker" / "instance-id").read_text().strip()
    except FileNotFoundError:
        return
    for c in api.containers(all=True, filters={"label": f"io.executor.daemon={instance}"}):
        api.remove_container(c["Id"], force=True)
    for v in api.volumes(filters={"label": f"io.executor.daemon={instance}"}).get("Volumes") or []:
        api.remove_volume(v["Name"], force=True)


def test_container_removed_under_a_command_then_recreated(options, api, tmp_path):
    state = tmp_path / "state"
    daemon = DaemonProcess(_config(options), state_dir=state).start()
    try:
        with daemon.client() as client:
            out, exit_ = _run(client, "t", "echo kept > file; echo ok")
            assert out == b"ok\n" and exit_.status == pb.EXIT_STATUS_COMPLETED
            (cid,) = [c["Id"] for c in _our_containers(api, state)]

            def remove_soon():
                time.sleep(1.0)
                api.remove_container(cid, force=True)

            remover = threading.Thread(target=remove_soon)
            remover.start()
            out, exit_ = _run(client, "t", "echo started; sleep 60")
            remover.join()
            assert exit_.status == pb.EXIT_STATUS_BACKEND_ERROR, exit_
            assert "container" in exit_.message, exit_.message

            print("BACKEND_ERROR message:", exit_.message)

            out, exit_ = _run(client, "t", "cat file")
            assert exit_.status == pb.EXIT_STATUS_COMPLETED, exit_
            assert out == b"kept\n"
            assert [c["Id"] for c in _our_containers(api, state)] != [cid]
    finally:
        daemon.stop(timeout=30)
        daemon.kill()
        _cleanup(api, state)


def test_exit_message_reports_the_recreation(options, api, tmp_path):
    state = tmp_path / "state"
    daemon = DaemonProcess(_config(options), state_dir=state).start()
    try:
        with daemon.client() as client:
            _run(client, "t", "true")
            for c in _our_containers(api, state):
                api.remove_container(c["Id"], force=True)
            out, exit_ = _run(client, "t", "echo back")
            assert out == b"back\n"
            assert "recreated" in exit_.message, exit_
            _, exit_ = _run(client, "t", "true")
            assert "recreated" not in exit_.message
    finally:
        daemon.stop(timeout=30)
        daemon.kill()
        _cleanup(api, state)


def test_daemon_restart_reattaches(options, api, tmp_path):
    state = tmp_path / "state"
    daemon = DaemonProcess(_config(options), state_dir=state).start()
    try:
        with daemon.client() as client:
            _run(client, "r", "echo there > f")
            before = [c["Id"] for c in _our_containers(api, state)]
        daemon.kill()  # a crash: no orderly shutdown
        daemon = DaemonProcess(_config(options), state_dir=state).start()
        with daemon.client() as client:
            out, exit_ = _run(client, "r", "cat f; ps -e -o sid= | sort -u | wc -l")
            assert exit_.status == pb.EXIT_STATUS_COMPLETED, exit_
            lines = out.decode().split()
            assert lines[0] == "there"
            assert [c["Id"] for c in _our_containers(api, state)] == before
    finally:
        daemon.stop(timeout=30)
        daemon.kill()
        _cleanup(api, state)

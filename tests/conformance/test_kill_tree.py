"""Kill means the whole tree, on every backend: at a timeout, a cancel, SignalProcess or CloseTask,
every process a command started dies, including ones that left its session (`setsid`), were
re-parented (a double fork) or ignore hangups (`nohup`). A backend whose policy says its kill
reaches only the session (`"kill": "session only ..."` in ListBackends) is skipped, saying so."""

from __future__ import annotations

import time
import uuid

import grpc
import pytest

from executor.client import error_from
from executor.v1 import executor_pb2 as pb
from tests.conformance.conftest import on_this_host, require

PIDS = ".kill-tree-pids"


def escapees(marker: str) -> str:
    """Shell text starting three processes that leave the command's session or parent, each
    named ``<marker>-x`` and recorded (pid per line) in PIDS."""
    return (
        f"rm -f {PIDS}; "
        # setsid in the background: a new session (and process group)
        f"setsid bash -c 'exec -a {marker}-a sleep 300' </dev/null >/dev/null 2>&1 & echo $! >> {PIDS}; "
        # a double fork into a new session: re-parented when the middle subshell exits
        f"( setsid bash -c 'bash -c \"exec -a {marker}-b sleep 301\" </dev/null >/dev/null 2>&1 & "
        f"echo $! >> {PIDS}' & ); "
        # nohup: ignores SIGHUP, same session
        f"nohup bash -c 'exec -a {marker}-c sleep 302' </dev/null >/dev/null 2>&1 & echo $! >> {PIDS}; "
        # all three recorded before the command goes on (the double fork writes asynchronously)
        f"while [ \"$(wc -l < {PIDS})\" -lt 3 ]; do sleep 0.05; done; "
    )


def alive(client, task: str, marker: str) -> int:
    """How many of the recorded pids still run a process named after marker (a fresh command)."""
    out = client.run(task, f"n=0; for p in $(cat {PIDS} 2>/dev/null); do "
                           f"tr '\\0' ' ' </proc/$p/cmdline 2>/dev/null | grep -q -- '^{marker}-' && n=$((n+1)); "
                           f"done; echo $n").stdout
    return max(int(out.strip() or b"0"), on_this_host(f"{marker}-"))


def recorded(client, task: str) -> int:
    out = client.run(task, f"wc -l < {PIDS} 2>/dev/null || echo 0").stdout
    return int(out.strip() or b"0")


def poll(fn, want, timeout=30.0):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value == want or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def _kills_trees(client, daemon, task):
    client.run(task, "true")  # a sandbox exists: a backend may only know its guarantee then
    for b in client.list_backends().backends:
        if b.name == daemon.kind:
            kill = dict(b.policy).get("kill", "")
            assert kill, f"backend {daemon.kind} does not report its kill guarantee in policy()['kill']"
            if kill.startswith("session only"):
                pytest.skip(f"backend {daemon.kind}: {kill}")
            return
    raise AssertionError(f"backend {daemon.kind} not listed")


@pytest.fixture
def marker():
    return f"exkt-{uuid.uuid4().hex[:10]}"


def test_timeout_kills_setsid_double_fork_and_nohup(client, task, marker):
    result = client.run(task, escapees(marker) + "sleep 300", timeout=3)
    assert result.exit.status == pb.EXIT_STATUS_TIMED_OUT
    assert recorded(client, task) == 3
    assert poll(lambda: alive(client, task, marker), 0) == 0


def test_cancel_kills_setsid_double_fork_and_nohup(client, task, marker):
    events = client.exec(task, escapees(marker) + "echo go; sleep 300")
    for event in events:
        if event.WhichOneof("event") == "stdout":
            break
    events.close()  # cancels the RPC
    assert recorded(client, task) == 3
    assert poll(lambda: alive(client, task, marker), 0) == 0


def test_close_task_kills_what_the_shell_left(client, task, marker):
    result = client.run(task, escapees(marker) + "true")
    assert result.exit.exit_code == 0
    assert poll(lambda: alive(client, task, marker), 3) == 3  # the command finished; they run on
    client.close_task(task)  # files kept: the pid list is read again below
    assert poll(lambda: alive(client, task, marker), 0) == 0


def _start(client, task, command) -> pb.ProcessInfo:
    try:
        return client.stub.StartProcess(pb.StartProcessRequest(task_id=task, command=command), timeout=60)
    except grpc.RpcError as exc:
        raise error_from(exc) from None


def test_signal_process_kill_reaches_a_setsid_child(client, daemon, task, marker):
    require(client, daemon, "background")
    proc = _start(client, task, escapees(marker) + "sleep 300")
    assert poll(lambda: alive(client, task, marker), 3) == 3
    client.signal_process(proc.process_id, "SIGKILL")
    assert poll(lambda: alive(client, task, marker), 0) == 0
    assert client.wait_process(proc.process_id, timeout=30).state == pb.PROCESS_STATE_KILLED


def test_close_task_kills_a_background_process_setsid_child(client, daemon, task, marker):
    require(client, daemon, "background")
    _start(client, task, escapees(marker) + "sleep 300")
    assert poll(lambda: alive(client, task, marker), 3) == 3
    client.close_task(task)
    assert poll(lambda: alive(client, task, marker), 0) == 0

"""Background processes on every backend that claims them: StartProcess ... SignalProcess,
offsets and rotation, caps, retention, CloseTask, the gate, and a daemon crash."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
import pytest

from executor.client import ExecutorError, error_from
from executor.v1 import executor_pb2 as pb
from tests.conformance.conftest import require, on_this_host
from tests.daemon import DaemonProcess
from tests.rendezvous import RELEASE, WAIT_FOR_RELEASE

RUNNING, EXITED, KILLED = pb.PROCESS_STATE_RUNNING, pb.PROCESS_STATE_EXITED, pb.PROCESS_STATE_KILLED


def call(client, method: str, request, timeout: float = 60):
    try:
        return getattr(client.stub, method)(request, timeout=timeout)
    except grpc.RpcError as exc:
        raise error_from(exc) from None


def start(client, task, command, timeout: float = 60, **kwargs) -> pb.ProcessInfo:
    return call(client, "StartProcess", pb.StartProcessRequest(task_id=task, command=command, **kwargs), timeout)


def wait(client, pid, timeout=30.0) -> pb.ProcessInfo:
    return call(client, "WaitProcess", pb.WaitProcessRequest(process_id=pid, timeout_seconds=timeout), timeout + 30)


def read(client, pid, offset=0, stream="", max_bytes=0) -> pb.ReadProcessOutputResponse:
    return call(client, "ReadProcessOutput", pb.ReadProcessOutputRequest(process_id=pid, offset=offset, stream=stream,
                                                                         max_bytes=max_bytes))


def read_all(client, pid, stream="") -> bytes:
    out, offset = bytearray(), 0
    while True:
        resp = read(client, pid, offset, stream)
        out += resp.data
        offset = resp.next_offset
        if not resp.data:
            return bytes(out)


def signal(client, pid, name) -> pb.ProcessInfo:
    return call(client, "SignalProcess", pb.SignalProcessRequest(process_id=pid, signal=name))


def count_marker(client, task, marker) -> int:
    out = client.run(task, f"ps -eo args 2>/dev/null | grep -c '^{marker}' || true").stdout
    return max(int(out.strip() or b"0"), on_this_host(marker))


def poll(fn, timeout=20.0, interval=0.1):
    """fn() until truthy, or the last value at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval)


@pytest.fixture(autouse=True)
def _background(client, daemon):
    require(client, daemon, "background")


def test_runs_with_task_state_and_keeps_streams_apart(client, task):
    client.run(task, "mkdir -p sub && cd sub && export FOO='x y' && hi() { echo \"hi $1\"; }")
    info = start(client, task, 'echo "$FOO"; hi there; basename "$PWD"; echo err >&2; exit 3')
    assert info.process_id and info.task_id == task and info.state in (RUNNING, EXITED)
    done = wait(client, info.process_id)
    assert done.state == EXITED and done.exit_code == 3 and done.ended_at >= done.started_at > 0
    assert read_all(client, info.process_id, "stdout") == b"x y\nhi there\nsub\n"
    assert read_all(client, info.process_id, "stderr") == b"err\n"
    merged = read_all(client, info.process_id)
    assert sorted(merged.splitlines()) == sorted(b"x y\nhi there\nsub\nerr\n".splitlines())
    assert done.stdout_bytes == 17 and done.stderr_bytes == 4
    last = read(client, info.process_id, len(merged))
    assert last.eof and last.state == EXITED and last.data == b""


def test_env_workdir_and_merge(client, task):
    client.run(task, "mkdir -p w")
    info = start(client, task, 'echo "$ONLY"; pwd; echo e >&2', env={"ONLY": "yes"}, workdir="w", merge_stderr=True)
    wait(client, info.process_id)
    out = read_all(client, info.process_id, "stdout")
    lines = out.decode().splitlines()
    assert lines[0] == "yes" and lines[1].endswith("/w") and lines[2] == "e"
    assert read_all(client, info.process_id, "stderr") == b""
    with pytest.raises(ExecutorError) as bad:
        start(client, task, "pwd", workdir="../..")
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT


def test_returns_at_once_wait_zero_list_get(client, task):
    # The command never ends by itself (it is killed below): StartProcess and a zero WaitProcess can
    # only answer (within their RPC deadlines) if they do not wait for it.
    info = start(client, task, "sleep 600")
    assert info.state == RUNNING
    now = wait(client, info.process_id, 0)
    assert now.state == RUNNING
    short = wait(client, info.process_id, 0.5)
    assert short.state == RUNNING
    listed = call(client, "ListProcesses", pb.ListProcessesRequest(task_id=task)).processes
    assert [p.process_id for p in listed] == [info.process_id]
    assert info.process_id in {p.process_id for p in call(client, "ListProcesses", pb.ListProcessesRequest()).processes}
    got = call(client, "GetProcess", pb.GetProcessRequest(process_id=info.process_id))
    assert got.command == "sleep 600" and got.state == RUNNING
    tasks = {t.task_id: t for t in client.list_tasks().tasks}
    assert tasks[task].running_processes == 1
    signal(client, info.process_id, "KILL")
    assert wait(client, info.process_id).state == KILLED


@pytest.mark.parametrize("name, expected", [("SIGTERM", "SIGTERM"), ("TERM", "SIGTERM"), ("15", "SIGTERM"),
                                            ("INT", "SIGINT")])
def test_signal_names(client, daemon, task, name, expected):
    require(client, daemon, "signals")
    # `exec`: no fork in flight when the signal lands (a /proc walk can miss a child being born)
    info = start(client, task, "echo ready; exec sleep 60")
    assert poll(lambda: read(client, info.process_id).data == b"ready\n")
    signal(client, info.process_id, name)
    done = wait(client, info.process_id)
    assert done.state == KILLED and done.signal == expected


def test_signal_reaches_the_whole_group_inside_the_backend(client, daemon, task):
    require(client, daemon, "signals")
    marker = f"executor-grp-{uuid.uuid4().hex[:8]}"
    info = start(client, task, f"(exec -a {marker} sleep 300) & (exec -a {marker} sleep 300) & wait")
    assert poll(lambda: count_marker(client, task, marker) == 2)
    signal(client, info.process_id, "SIGTERM")
    assert wait(client, info.process_id).state == KILLED
    assert poll(lambda: count_marker(client, task, marker) == 0)


def test_stdin_write_and_close(client, daemon, task):
    require(client, daemon, "stdin")
    info = start(client, task, "cat; echo end")
    resp = call(client, "WriteProcessStdin", pb.WriteProcessStdinRequest(process_id=info.process_id, data=b"ab\x00c"))
    assert resp.bytes_written == 4
    assert poll(lambda: read(client, info.process_id).data == b"ab\x00c")
    call(client, "WriteProcessStdin", pb.WriteProcessStdinRequest(process_id=info.process_id, data=b"d", close=True))
    done = wait(client, info.process_id)
    assert done.state == EXITED and done.exit_code == 0
    assert read_all(client, info.process_id) == b"ab\x00cdend\n"
    with pytest.raises(ExecutorError) as ended:
        call(client, "WriteProcessStdin", pb.WriteProcessStdinRequest(process_id=info.process_id, data=b"x"))
    assert ended.value.code == grpc.StatusCode.FAILED_PRECONDITION


def test_stream_follows_until_exit_and_resumes_by_offset(client, task):
    # The process cannot end (with 7) before the test, having received its first line, writes the file it
    # waits for: output held back until the end would arrive only after the hang bound's exit 9.
    info = start(client, task, f"echo line1; {WAIT_FOR_RELEASE}; echo line2; echo line3; exit 7")
    chunks = []
    for chunk in client.stub.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=info.process_id),
                                                 timeout=120):
        if chunk.data and not any(c.data for c in chunks):
            assert not chunk.HasField("exited")
            client.write_file(task, RELEASE, b"")
        chunks.append(chunk)
    data = b"".join(c.data for c in chunks)
    assert data == b"line1\nline2\nline3\n", "output streams while the process runs"
    assert chunks[-1].HasField("exited") and chunks[-1].exited.state == EXITED and chunks[-1].exited.exit_code == 7
    assert not any(c.HasField("exited") for c in chunks[:-1])
    offsets = [(c.offset, c.next_offset) for c in chunks]
    assert offsets[0][0] == 0 and all(a[1] == b[0] for a, b in zip(offsets, offsets[1:]))
    resumed = list(client.stub.StreamProcessOutput(
        pb.StreamProcessOutputRequest(process_id=info.process_id, offset=6, stream="stdout"), timeout=60))
    assert b"".join(c.data for c in resumed) == b"line2\nline3\n" and resumed[0].offset == 6
    part = read(client, info.process_id, 6, max_bytes=3)
    assert part.data == b"lin" and part.offset == 6 and part.next_offset == 9 and not part.eof


def test_unknown_ids_and_bad_input(client, task):
    missing = "p-doesnotexist"
    for method, request in [
        ("GetProcess", pb.GetProcessRequest(process_id=missing)),
        ("ReadProcessOutput", pb.ReadProcessOutputRequest(process_id=missing)),
        ("WaitProcess", pb.WaitProcessRequest(process_id=missing)),
        ("SignalProcess", pb.SignalProcessRequest(process_id=missing, signal="TERM")),
        ("WriteProcessStdin", pb.WriteProcessStdinRequest(process_id=missing, data=b"x")),
    ]:
        with pytest.raises(ExecutorError) as info:
            call(client, method, request)
        assert info.value.code == grpc.StatusCode.NOT_FOUND, method
    with pytest.raises(grpc.RpcError) as stream_err:
        list(client.stub.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=missing), timeout=30))
    assert stream_err.value.code() == grpc.StatusCode.NOT_FOUND
    proc = start(client, task, "sleep 20")
    for name in ("SIGNOPE", "", "99999"):
        with pytest.raises(ExecutorError) as bad:
            signal(client, proc.process_id, name)
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT and "signal" in bad.value.message
    with pytest.raises(ExecutorError) as bad:
        read(client, proc.process_id, stream="both")
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(ExecutorError) as bad:
        read(client, proc.process_id, offset=10**9)
    assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    for bad_start in (dict(task_id="bad id", command="true"), dict(task_id=task, command="  ")):
        with pytest.raises(ExecutorError) as bad:
            call(client, "StartProcess", pb.StartProcessRequest(**bad_start))
        assert bad.value.code == grpc.StatusCode.INVALID_ARGUMENT
    signal(client, proc.process_id, "KILL")


def test_close_task_ends_its_processes(client, task):
    marker = f"executor-close-{uuid.uuid4().hex[:8]}"
    procs = [start(client, task, f"exec -a {marker} sleep 300") for _ in range(2)]
    assert poll(lambda: count_marker(client, task, marker) == 2)
    resp = client.close_task(task)
    assert resp.existed and resp.processes_ended == 2
    for p in procs:
        info = call(client, "GetProcess", pb.GetProcessRequest(process_id=p.process_id))
        assert info.state == KILLED, info  # still readable after the task closed
    assert poll(lambda: count_marker(client, task, marker) == 0)


def test_gate_refuses_and_asks(client, task):
    with pytest.raises(ExecutorError) as denied:
        start(client, task, "rm -rf /")
    assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED and denied.value.message
    # ask mode: nobody answers within the approval timeout -> refused
    t0 = time.monotonic()
    with pytest.raises(ExecutorError) as timed_out:
        start(client, task, "git push --force 2>/dev/null; echo pushed")
    assert timed_out.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert time.monotonic() - t0 >= 2


def test_an_approver_lets_it_start(patient_client, task):
    """An approver sees the pending command and approves it: the process starts. (On a daemon whose
    approvals wait long enough for an approver slowed down by a loaded machine.)"""
    client = patient_client
    approved = threading.Event()

    def approver():
        for pending in client.watch_approvals(task):
            if not pending.resolved and "git push" in pending.command:
                client.resolve_approval(pending.approval_id, pb.APPROVAL_DECISION_APPROVE_ONCE)
                approved.set()
                return

    th = threading.Thread(target=approver, daemon=True)
    th.start()
    try:
        info = start(client, task, "git push --force 2>/dev/null; echo pushed", timeout=180)
        assert approved.is_set()
        wait(client, info.process_id)
        assert read_all(client, info.process_id, "stdout") == b"pushed\n"
    finally:
        client.close_task(task, remove_files=True)


# ---------------------------------------------------------------------------
# A second daemon of the same backend, with small limits
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small(daemon):
    config = {
        "backend": daemon.kind,
        "backends": {daemon.kind: daemon.options},
        "limits": {"kill_grace_seconds": 1},
        "approval": {"mode": "allow"},
        "processes": {"max_per_task": 2, "max_total": 3, "memory_buffer_bytes": 4096, "spill_file_bytes": 8192,
                      "spill_files": 2, "retain_seconds": 3},
    }
    d = DaemonProcess(config, state_dir=Path(tempfile.mkdtemp(prefix=f"executor-proc-{daemon.kind}-")) / "state")
    d.start()
    d.kind = daemon.kind
    try:
        with d.client() as c:
            yield d, c
    finally:
        try:
            d.stop(timeout=60)
        finally:
            d.kill()


def test_caps_refuse_with_resource_exhausted(small):
    d, c = small
    tasks = [f"cap-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    try:
        start(c, tasks[0], "sleep 60")
        start(c, tasks[0], "sleep 60")
        with pytest.raises(ExecutorError) as per_task:
            start(c, tasks[0], "sleep 60")
        assert per_task.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_per_task" in per_task.value.message
        start(c, tasks[1], "sleep 60")
        with pytest.raises(ExecutorError) as total:
            start(c, tasks[1], "sleep 60")
        assert total.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "max_total" in total.value.message
        # a finished process frees its slot
        first = call(c, "ListProcesses", pb.ListProcessesRequest(task_id=tasks[1])).processes[0]
        signal(c, first.process_id, "KILL")
        wait(c, first.process_id)
        start(c, tasks[1], "true")
    finally:
        for t in tasks:
            c.close_task(t, remove_files=True)


def test_rotation_and_spill(small):
    d, c = small
    task = f"rot-{uuid.uuid4().hex[:6]}"
    try:
        # 40000 bytes: far past memory (4 KiB) + two spill files of 8 KiB
        info = start(c, task, "seq 1 7000 | head -c 40000; echo; echo tail-end")
        done = wait(c, info.process_id)
        assert done.state == EXITED and done.stdout_bytes > 30000
        first = read(c, info.process_id, 0, "stdout")
        assert first.rotated and first.offset > 0 and first.offset < done.stdout_bytes
        kept = read_all_from(c, info.process_id, first.offset, "stdout")
        expected = (b"".join(b"%d\n" % i for i in range(1, 7001))[:40000] + b"\ntail-end\n")
        assert kept == expected[first.offset:]
        assert done.stdout_bytes - first.offset <= 4096 + 2 * 8192
        spill = list((d.state_dir / "processes").rglob("*"))
        assert any(p.is_file() for p in spill), "past the memory bound output is spilled to the state dir"
        chunks = list(c.stub.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=info.process_id,
                                                                               stream="stdout"), timeout=30))
        assert chunks[0].rotated and chunks[0].offset == first.offset
    finally:
        c.close_task(task, remove_files=True)


def read_all_from(client, pid, offset, stream) -> bytes:
    out = bytearray()
    while True:
        resp = read(client, pid, offset, stream)
        assert not resp.rotated or not out
        out += resp.data
        offset = resp.next_offset
        if not resp.data:
            return bytes(out)


def test_finished_processes_are_forgotten_after_retention(small):
    d, c = small
    task = f"ret-{uuid.uuid4().hex[:6]}"
    try:
        info = start(c, task, "echo bye")
        wait(c, info.process_id)
        assert read_all(c, info.process_id) == b"bye\n"
        gone = poll(lambda: _missing(c, info.process_id), timeout=15)
        assert gone, "a finished process is forgotten after processes.retain_seconds"
    finally:
        c.close_task(task, remove_files=True)


def _missing(client, pid) -> bool:
    try:
        call(client, "GetProcess", pb.GetProcessRequest(process_id=pid))
        return False
    except ExecutorError as exc:
        assert exc.code == grpc.StatusCode.NOT_FOUND
        return True


def test_daemon_crash_leaves_no_orphans(daemon):
    """SIGKILL the daemon with a background process running; after a restart it is gone."""
    state = Path(tempfile.mkdtemp(prefix=f"executor-crash-{daemon.kind}-")) / "state"
    config = {"backend": daemon.kind, "backends": {daemon.kind: daemon.options}, "approval": {"mode": "allow"}}
    d = DaemonProcess(config, state_dir=state).start()
    task = f"crash-{uuid.uuid4().hex[:6]}"
    marker = f"executor-orphan-{uuid.uuid4().hex[:8]}"
    try:
        with d.client() as c:
            start(c, task, f"(exec -a {marker} sleep 300) & exec -a {marker} sleep 300")
            assert poll(lambda: count_marker(c, task, marker) == 2)
        d.kill()  # a crash: no drain, no cleanup
        d.start()
        with d.client() as c:
            assert call(c, "ListProcesses", pb.ListProcessesRequest()).processes == []
            assert poll(lambda: count_marker(c, task, marker) == 0), "the crashed daemon's processes were ended"
            c.close_task(task, remove_files=True)
    finally:
        try:
            d.stop(timeout=60)
        finally:
            d.kill()

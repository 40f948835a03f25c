"""Daemon lifecycle on the local backend: drain on SIGTERM, restart, crash recovery."""

from __future__ import annotations

import os
import subprocess
import threading
import time

import pytest

from executor.v1 import executor_pb2 as pb


from tests.daemon import count_processes, wait_for  # noqa: E402


def test_sigterm_drains_and_leaves_nothing_running(local_daemon):
    marker = f"executor-drain-{os.getpid()}"
    results = []
    with local_daemon.client() as c:
        c.run("drain", "true")

        def go():
            try:
                results.extend(c.exec("drain", f"echo started; (exec -a {marker} sleep 300) & exec -a {marker} sleep 300"))
            except Exception as exc:  # the stream may end with the server going away
                results.append(exc)

        th = threading.Thread(target=go)
        th.start()
        assert wait_for(lambda: count_processes(marker) == 2)
        t0 = time.monotonic()
        assert local_daemon.stop(timeout=60) == 0
        assert time.monotonic() - t0 < 30
        th.join(10)
    assert wait_for(lambda: count_processes(marker) == 0, 10), "the daemon left processes running"


def test_restart_keeps_files_and_shell_state(local_daemon):
    with local_daemon.client() as c:
        c.run("keep", "mkdir -p work && cd work && echo data > f.txt && export KEPT=yes && hello() { echo hi; }")
    local_daemon.restart()
    with local_daemon.client() as c:
        r = c.run("keep", 'cat f.txt; echo "$KEPT"; hello; basename "$PWD"')
        assert r.stdout == b"data\nyes\nhi\nwork\n", r.stderr


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
def test_crash_leaves_no_orphans_and_next_exec_works(tmp_path, isolation):
    """none: orphans live until a daemon comes back and ends them (the sessions registry).
    sandbox: bubblewrap's --die-with-parent ends each sandbox with the daemon, at once."""
    from tests.daemon import DaemonProcess

    local_daemon = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local", "isolation": isolation}}},
                                 state_dir=tmp_path / "state").start()
    marker = f"executor-crash-{os.getpid()}-{isolation}"
    c = local_daemon.client()
    try:
        c.run("crash", "echo before > kept.txt")

        def follow():
            try:
                for _ in c.exec("crash", f"(exec -a {marker} sleep 300) & exec -a {marker} sleep 300"):
                    pass
            except Exception:
                pass  # the daemon dies under the stream

        th = threading.Thread(target=follow, daemon=True)
        th.start()
        assert wait_for(lambda: count_processes(marker) == 2)
        local_daemon.kill()  # SIGKILL: no chance to clean up
        if isolation == "sandbox":
            assert wait_for(lambda: count_processes(marker) == 0, 5), "a sandbox outlived the daemon"
        else:
            time.sleep(0.5)
            assert count_processes(marker) == 2  # orphans exist until a daemon comes back
    finally:
        c.close()
    try:
        local_daemon.start()
        assert wait_for(lambda: count_processes(marker) == 0, 15), "the restarted daemon did not end the orphans"
        with local_daemon.client() as c:
            r = c.run("crash", "cat kept.txt")
            assert r.stdout == b"before\n" and r.exit.status == pb.EXIT_STATUS_COMPLETED
    finally:
        local_daemon.kill()


def test_close_task_cancels_a_running_command(local_daemon):
    marker = f"executor-close-{os.getpid()}"
    events = []
    with local_daemon.client() as c:
        c.run("closing", "true")
        th = threading.Thread(target=lambda: events.extend(c.exec("closing", f"exec -a {marker} sleep 300")))
        th.start()
        assert wait_for(lambda: count_processes(marker) == 1)
        c.close_task("closing")
        th.join(20)
        assert events[-1].exit.status == pb.EXIT_STATUS_CANCELLED
    assert wait_for(lambda: count_processes(marker) == 0, 10)


def test_idle_tasks_are_reaped_but_keep_files_and_state(tmp_path):
    from tests.daemon import DaemonProcess

    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "limits": {"task_idle_seconds": 1}}, state_dir=tmp_path / "state").start()
    try:
        with d.client() as c:
            c.run("idle", "echo kept > f.txt; export IDLE_VAR=1")
            assert wait_for(lambda: c.list_tasks().idle_reaped >= 1, 15)
            assert "idle" not in {t.task_id for t in c.list_tasks().tasks}
            r = c.run("idle", 'cat f.txt; echo "$IDLE_VAR"')
            assert r.stdout == b"kept\n1\n"
    finally:
        d.kill()


def test_too_many_tasks_is_resource_exhausted(tmp_path):
    import pytest

    from executor.client import ResourceExhausted
    from tests.daemon import DaemonProcess

    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "limits": {"max_tasks": 2}}, state_dir=tmp_path / "state").start()
    try:
        with d.client() as c:
            c.run("a", "true")
            c.run("b", "true")
            with pytest.raises(ResourceExhausted) as info:
                c.run("c", "true")
            assert "max_tasks" in info.value.message
            c.close_task("a")
            assert c.run("c", "echo ok").stdout == b"ok\n"
    finally:
        d.kill()


def test_disk_full_in_the_task_dir_is_a_clear_error_and_the_daemon_serves_on(tmp_path):
    """The task directory's filesystem fills up: the command fails with the kernel's message, a file
    upload is refused with a status, other tasks and the same task carry on once space is freed."""
    import grpc
    import pytest

    from tests.daemon import DaemonProcess
    from tests.test_files import put, tar_bytes

    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs for the task root needs root")
    root = tmp_path / "small"
    root.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(root)], check=True)
    try:
        d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local", "root": str(root)}}},
                          state_dir=tmp_path / "state").start()
        try:
            with d.client() as c:
                r = c.run("full", "head -c 4000000 /dev/zero > big; echo rc=$?")
                assert b"No space left on device" in r.stderr and b"rc=1" in r.stdout
                assert r.exit.status == pb.EXIT_STATUS_COMPLETED
                channel, stub = d.stub()
                with channel, pytest.raises(grpc.RpcError) as info:
                    put(stub, "full", "more", tar_bytes([("x", "file", b"y" * 500_000)]))
                assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "No space left on device" in info.value.details()
                assert c.run("other", "echo still serving").stdout == b"still serving\n"
                assert c.run("full", "rm big; echo freed > f; cat f").stdout == b"freed\n"
        finally:
            d.kill()
    finally:
        subprocess.run(["umount", "-l", str(root)], check=False)

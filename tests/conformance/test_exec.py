"""Exec and Run on every backend: shell state, streaming, exact bytes, timeouts, cancel, bad input."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from executor.client import ExecutorError, InvalidArgument, NotFound
from executor.v1 import executor_pb2 as pb
from tests.conformance.conftest import on_this_host
from tests.rendezvous import RELEASE, WAIT_FOR_RELEASE

COMPLETED = pb.EXIT_STATUS_COMPLETED


def collect(client, task, command, **kwargs):
    """Run through Exec; returns (stdout, stderr, exit, kinds of events in order)."""
    out, err, kinds, exit_ = bytearray(), bytearray(), [], None
    for event in client.exec(task, command, **kwargs):
        kind = event.WhichOneof("event")
        kinds.append(kind)
        if kind == "stdout":
            out += event.stdout
        elif kind == "stderr":
            err += event.stderr
        elif kind == "exit":
            exit_ = event.exit
    return bytes(out), bytes(err), exit_, kinds


def test_echo_streams_started_output_exit(client, task):
    out, err, exit_, kinds = collect(client, task, "echo hello; echo oops >&2")
    assert out == b"hello\n"
    assert err == b"oops\n"
    assert exit_.status == COMPLETED and exit_.exit_code == 0
    assert kinds[0] == "started" and kinds[-1] == "exit"
    assert exit_.stdout_bytes == 6 and exit_.stderr_bytes == 5


def test_exit_code_and_task_goes_on(client, task):
    _, _, exit_, _ = collect(client, task, "exit 3")
    assert exit_.status == COMPLETED and exit_.exit_code == 3
    out, _, exit_, _ = collect(client, task, "echo still here")
    assert out == b"still here\n" and exit_.exit_code == 0


def test_shell_state_persists(client, task):
    collect(client, task, "mkdir -p a/b && cd a/b && export FOO='x y' && greet() { echo \"hi $1\"; } && alias ll='echo LL'")
    out, _, exit_, _ = collect(client, task, 'pwd; echo "$FOO"; greet you; ll')
    lines = out.decode().splitlines()
    assert lines[0].endswith("/a/b")
    assert lines[1:] == ["x y", "hi you", "LL"]
    assert exit_.cwd.endswith("/a/b")


def test_state_survives_exit_and_timeout(client, task):
    collect(client, task, "mkdir -p keep && cd keep && export KEEP=1")
    collect(client, task, "exit 5")
    out, _, _, _ = collect(client, task, 'echo "$KEEP" "$(basename "$PWD")"')
    assert out == b"1 keep\n"
    # what the timed-out command itself set reaches the next shell only through the EXIT trap's report
    _, _, exit_, _ = collect(client, task, "export AFTER=2; sleep 30", timeout=1)
    assert exit_.status == pb.EXIT_STATUS_TIMED_OUT
    out, _, _, _ = collect(client, task, 'echo "$KEEP" "$AFTER" "$(basename "$PWD")"')
    assert out == b"1 2 keep\n"


def test_binary_output_is_byte_exact(client, task):
    out, _, _, _ = collect(client, task, r"printf '\x00\x01\xff\xfe no newline'")
    assert out == b"\x00\x01\xff\xfe no newline"
    out, _, _, _ = collect(client, task, "printf '%s' 'é ü 漢字'")
    assert out == "é ü 漢字".encode()


def test_markers_cannot_be_forged_by_output(client, task):
    # Bytes that look like the protocol's separators pass through untouched.
    out, _, exit_, _ = collect(client, task, r"printf '\x1e\x1fEX:abc:1:0:1:0:/\x1e tail'")
    assert out == b"\x1e\x1fEX:abc:1:0:1:0:/\x1e tail"
    assert exit_.exit_code == 0


def test_stdin_eof_by_default_and_bytes_when_given(client, task):
    out, _, exit_, _ = collect(client, task, "cat; echo rc=$?")
    assert out == b"rc=0\n"
    out, _, _, _ = collect(client, task, "wc -c", stdin=b"abc\x00def")
    assert out.split() == [b"7"]
    out, _, _, _ = collect(client, task, "cat", stdin=b"\xff\x00binary")
    assert out == b"\xff\x00binary"


def test_env_and_workdir_apply_to_one_call(client, task):
    collect(client, task, "mkdir -p sub")
    out, _, _, _ = collect(client, task, 'echo "$ONLY"; pwd', env={"ONLY": "yes"}, workdir="sub")
    assert out.decode().splitlines()[0] == "yes"
    assert out.decode().splitlines()[1].endswith("/sub")
    out, _, exit_, _ = collect(client, task, 'echo "[$ONLY]"; pwd')
    assert out.decode().splitlines()[0] == "[]"
    assert not out.decode().splitlines()[1].endswith("/sub")


def test_syntax_error_is_contained(client, task):
    _, err, exit_, _ = collect(client, task, 'echo "unterminated')
    assert exit_.status == COMPLETED and exit_.exit_code != 0
    assert err
    out, _, exit_, _ = collect(client, task, "echo fine")
    assert out == b"fine\n"


def test_output_streams_while_running(client, task):
    """The first chunk arrives while the command runs: the command cannot end (with 0) before the
    test, having received that chunk, writes the file it waits for."""
    out, exit_ = bytearray(), None
    for event in client.exec(task, f"echo first; {WAIT_FOR_RELEASE}; echo second", timeout=120):
        kind = event.WhichOneof("event")
        if kind == "stdout":
            if not out:
                assert exit_ is None
                client.write_file(task, RELEASE, b"")
            out += event.stdout
        elif kind == "exit":
            exit_ = event.exit
    assert out == b"first\nsecond\n"
    assert exit_.status == COMPLETED and exit_.exit_code == 0, "output held back until the command ended"


def test_timeout_kills_tree_inside_backend_and_returns_output(client, task):
    marker = f"executor-bg-{task}"
    out, _, exit_, _ = collect(client, task,
                               f"echo before; (exec -a {marker} sleep 300) & sleep 300; echo never", timeout=1.5)
    assert exit_.status == pb.EXIT_STATUS_TIMED_OUT
    assert out.startswith(b"before\n") and b"never" not in out
    # Nothing of the command is left running in the backend.
    out, _, _, _ = collect(client, task, f"ps -eo args 2>/dev/null | grep -c '^{marker}' || true")
    assert out.strip() == b"0" and on_this_host(marker) == 0


def test_grpc_deadline_counts_as_timeout(client, task):
    t0 = time.monotonic()
    with pytest.raises(ExecutorError) as info:
        for _ in client.exec(task, "sleep 30", rpc_timeout=1.5):
            pass
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - t0 < 15
    out, _, exit_, _ = collect(client, task, "echo ok")
    assert out == b"ok\n"


@pytest.mark.parametrize("after", ["stdout", "started"])
def test_cancel_kills_tree_inside_backend(client, task, after):
    """Cancelled after its first output, or as soon as `started` arrives (the command is already in
    the shell by then: the daemon sends `started` once it has handed the command over)."""
    marker = f"executor-cancel-{task}"
    events = client.exec(task, f"echo go; exec -a {marker} sleep 300")
    for event in events:
        if event.WhichOneof("event") == after:
            break
    events.close()  # cancels the RPC
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out, _, exit_, _ = collect(client, task, f"ps -eo args 2>/dev/null | grep -c '^{marker}' || true")
        if out.strip() == b"0" and on_this_host(marker) == 0:
            break
        time.sleep(0.2)
    assert out.strip() == b"0" and on_this_host(marker) == 0


def test_run_bounds_output_head_and_tail(client, task):
    result = client.run(task, "seq 1 200000")
    total = len(b"".join(f"{i}\n".encode() for i in range(1, 200001)))
    assert result.exit.stdout_bytes == total
    assert result.exit.truncated
    assert result.stdout.startswith(b"1\n2\n3\n")
    assert result.stdout.endswith(b"199999\n200000\n")
    assert len(result.stdout) <= 64 * 1024


def test_run_small_output_not_truncated(client, task):
    result = client.run(task, "echo small; echo e >&2; exit 4")
    assert result.stdout == b"small\n" and result.stderr == b"e\n"
    assert result.exit.exit_code == 4 and not result.exit.truncated


def test_large_stream_exact_count(client, task):
    n = 20_000_000
    total = 0
    for event in client.exec(task, f"head -c {n} /dev/zero"):
        if event.WhichOneof("event") == "stdout":
            total += len(event.stdout)
        elif event.WhichOneof("event") == "exit":
            assert event.exit.stdout_bytes == n
    assert total == n


def test_tasks_are_isolated_and_parallel(client, daemon, task):
    other = task + "-b"
    try:
        collect(client, task, "export WHO=a; mkdir -p mine")
        out, _, _, _ = collect(client, other, 'echo "[$WHO]"; ls')
        assert out.startswith(b"[]\n") and b"mine" not in out
        # A rendezvous: each command says it runs, then waits for a file the test writes only once both
        # have said so. Both can end (with 0) only if they ran at the same time.
        running = {t: threading.Event() for t in (task, other)}
        results = {}

        def go(t: str) -> None:
            out, exit_ = bytearray(), None
            for event in client.exec(t, f"echo running; {WAIT_FOR_RELEASE}; echo done", timeout=120):
                kind = event.WhichOneof("event")
                if kind == "stdout":
                    out += event.stdout
                    if out.startswith(b"running\n"):
                        running[t].set()
                elif kind == "exit":
                    exit_ = event.exit
            results[t] = (bytes(out), exit_)

        threads = [threading.Thread(target=go, args=(t,), daemon=True) for t in (task, other)]
        for th in threads:
            th.start()
        try:
            assert all(running[t].wait(60) for t in (task, other)), "two tasks must run in parallel"
        finally:
            for t in (task, other):
                client.write_file(t, RELEASE, b"")
            for th in threads:
                th.join(120)
        for t in (task, other):
            out, exit_ = results[t]
            assert out == b"running\ndone\n" and exit_.status == COMPLETED and exit_.exit_code == 0, \
                "two tasks must run in parallel"
    finally:
        client.close_task(other, remove_files=True)


def test_same_task_runs_one_after_another(client, task):
    results = []

    def go(tag):
        results.append(collect(client, task, f"echo start-{tag}; sleep 0.5; echo end-{tag}")[0])

    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for out in results:  # never interleaved
        lines = out.decode().split()
        assert lines[0].replace("start", "end") == lines[1]


@pytest.mark.parametrize("kwargs, code, words", [
    (dict(task_id="bad id", command="true"), grpc.StatusCode.INVALID_ARGUMENT, "task_id"),
    (dict(task_id="", command="true"), grpc.StatusCode.INVALID_ARGUMENT, "task_id"),
    (dict(task_id="ok", command="   "), grpc.StatusCode.INVALID_ARGUMENT, "empty"),
    (dict(task_id="ok", command="true", timeout=-1), grpc.StatusCode.INVALID_ARGUMENT, "timeout"),
    (dict(task_id="ok", command="true", backend="nope"), grpc.StatusCode.NOT_FOUND, "configured backends"),
    (dict(task_id="ok", command="true", env={"BAD-NAME": "x"}), grpc.StatusCode.INVALID_ARGUMENT, "env"),
    (dict(task_id="ok", command="x" * (1 << 20 + 1)), grpc.StatusCode.INVALID_ARGUMENT, "limit"),
    (dict(task_id="ok", command="true", env={f"V{i}": "x" * 2000 for i in range(200)}),
     grpc.StatusCode.INVALID_ARGUMENT, "env"),
])
def test_bad_input_clear_status(client, kwargs, code, words):
    kwargs = dict(kwargs)  # the parameter is shared by every backend's run of this test
    task_id = kwargs.pop("task_id")
    command = kwargs.pop("command")
    with pytest.raises(ExecutorError) as info:
        client.run(task_id, command, **kwargs)
    assert info.value.code == code
    assert words in info.value.message
    # and the daemon keeps serving
    assert client.run("still-serving", "echo ok").stdout == b"ok\n"


def test_workdir_cannot_leave_the_task(client, task):
    with pytest.raises(InvalidArgument):
        client.run(task, "pwd", workdir="../..")
    with pytest.raises(InvalidArgument):
        client.run(task, "pwd", workdir="/etc")


def test_close_task_and_list(client, task):
    collect(client, task, "echo hi")
    listed = {t.task_id: t for t in client.list_tasks().tasks}
    assert task in listed and listed[task].commands_run >= 1
    resp = client.close_task(task, remove_files=True)
    assert resp.existed
    assert task not in {t.task_id for t in client.list_tasks().tasks}
    out = client.run(task, "ls -A | wc -l").stdout  # a new task with the same id starts clean
    assert out.strip() == b"0"


def test_list_backends_reports_the_backend(client, daemon):
    resp = client.list_backends()
    names = {b.name: b for b in resp.backends}
    assert daemon.kind in names
    info = names[daemon.kind]
    assert info.available, info.reason
    assert info.kind == daemon.kind and info.is_default
    with pytest.raises(NotFound):
        client.run("x", "true", backend="missing")

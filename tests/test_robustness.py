"""Hostile and heavy use of a live daemon: fuzzed requests, malformed bytes, concurrent load.

Every request gets a proper answer (a result or a clear status, never UNKNOWN or a hang),
and the daemon keeps serving."""

from __future__ import annotations

import asyncio
import math
import time

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc
from tests.daemon import DaemonProcess

ACCEPTABLE = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.RESOURCE_EXHAUSTED,
              grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.PERMISSION_DENIED}
FUZZED = {"count": 0}


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = DaemonProcess({
        "backend": "local",
        "backends": {"local": {"kind": "local"}},
        "approval": {"mode": "deny"},  # nothing waits for a human here
        "limits": {"default_timeout_seconds": 5, "max_timeout_seconds": 10, "max_tasks": 400,
                   "max_concurrent_execs": 256, "max_queued_per_task": 64},
    }, state_dir=tmp_path_factory.mktemp("robust") / "state").start()
    yield d
    d.kill()


@pytest.fixture(scope="module")
def stub(daemon):
    channel = grpc.insecure_channel(daemon.target)
    yield pb_grpc.ExecutorStub(channel)
    channel.close()


task_ids = st.one_of(
    st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,20}", fullmatch=True),
    st.text(max_size=200),
)
commands = st.one_of(
    st.text(max_size=300),
    st.sampled_from(["echo hi", "true", "exit 7", "printf '\\x00\\xff'", "cat", "echo $((1/0))", "((",
                     "'", "\"", "$(", "`", "\\", "for", "}", "fi", "eval '('", "exec 2>&-; echo x",
                     "rm -rf /", ":(){ :|:& };:", "kill -9 -1"]),
    st.builds(lambda n: "(" * n + "true" + ")" * n, st.integers(0, 300)),
    st.builds(lambda n: "cat <<EOF\n" + "x" * n + "\nEOF", st.integers(0, 100_000)),
)
envs = st.dictionaries(st.text(max_size=20), st.text(max_size=50), max_size=5)
timeouts = st.one_of(st.just(0.0), st.floats(allow_nan=True, allow_infinity=True), st.floats(0.01, 3))


@given(task_id=task_ids, command=commands, env=envs, timeout=timeouts, stdin=st.binary(max_size=200),
       backend=st.sampled_from(["", "local", "nope", "\x00"]), workdir=st.sampled_from(["", ".", "..", "/etc", "a/b"]),
       pty=st.booleans())
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_fuzzed_requests_get_proper_answers(stub, task_id, command, env, timeout, stdin, backend, workdir, pty):
    FUZZED["count"] += 1
    if "\x00" in task_id or any("\x00" in k + v for k, v in env.items()):
        pass  # proto strings may carry NUL; the daemon must refuse them cleanly
    request = pb.ExecRequest(task_id=task_id, command=command, env=env, timeout_seconds=timeout, stdin=stdin,
                             backend=backend, workdir=workdir, pty=pty)
    try:
        result = stub.Run(request, timeout=30)
    except grpc.RpcError as exc:
        assert exc.code() in ACCEPTABLE, (exc.code(), exc.details())
        assert exc.details(), "an error must say what is wrong"
        return
    assert result.exit.status != pb.EXIT_STATUS_UNSPECIFIED
    if math.isnan(timeout) or timeout < 0:
        pytest.fail("an invalid timeout was accepted")


@given(st.binary(max_size=512))
@settings(max_examples=100, deadline=None)
def test_malformed_messages_are_refused(daemon, raw):
    FUZZED["count"] += 1
    with grpc.insecure_channel(daemon.target) as channel:
        call = channel.unary_unary("/executor.v1.Executor/Run", request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        try:
            call(raw, timeout=30)
        except grpc.RpcError as exc:
            assert exc.code() != grpc.StatusCode.UNKNOWN or "Unexpected" not in (exc.details() or ""), exc.details()


@pytest.mark.parametrize("method", ["Exec", "Run", "StartProcess"])
def test_a_message_that_does_not_parse_is_invalid_argument(daemon, method):
    """Bytes that are no ExecRequest (field 1 as a varint with a truncated length) are refused with
    INVALID_ARGUMENT and a message saying so, on the streaming call as on the unary ones."""
    with grpc.insecure_channel(daemon.target) as channel:
        make = channel.unary_stream if method == "Exec" else channel.unary_unary
        call = make(f"/executor.v1.Executor/{method}", request_serializer=lambda b: b,
                    response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as caught:
            result = call(b"\x0a\xff\xff\xff", timeout=30)
            if method == "Exec":
                list(result)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
        assert "malformed" in caught.value.details()


def test_daemon_still_serves_after_fuzzing(stub):
    r = stub.Run(pb.ExecRequest(task_id="after-fuzz", command="echo alive"), timeout=30)
    assert r.stdout == b"alive\n"
    print(f"fuzzed requests: {FUZZED['count']}")


def test_load_200_concurrent_execs_over_50_tasks(daemon):
    """Every output exactly right under load; prints execs/s and p99."""

    async def main():
        async with grpc.aio.insecure_channel(daemon.target) as channel:
            stub = pb_grpc.ExecutorStub(channel)
            for t in range(50):  # warm the tasks' shells
                await stub.Run(pb.ExecRequest(task_id=f"load-{t}", command="true"), timeout=60)

            async def one(i: int):
                task = f"load-{i % 50}"
                t0 = time.perf_counter()
                out = bytearray()
                exit_ = None
                async for ev in stub.Exec(pb.ExecRequest(task_id=task, command=f"echo {i} $EXECUTOR_TASK_ID; seq 1 {i % 7}"),
                                          timeout=120):
                    if ev.WhichOneof("event") == "stdout":
                        out += ev.stdout
                    elif ev.WhichOneof("event") == "exit":
                        exit_ = ev.exit
                expected = f"{i} {task}\n" + "".join(f"{k}\n" for k in range(1, i % 7 + 1))
                assert out.decode() == expected, (i, bytes(out))
                assert exit_.status == pb.EXIT_STATUS_COMPLETED and exit_.exit_code == 0
                return time.perf_counter() - t0

            t0 = time.perf_counter()
            latencies = await asyncio.gather(*(one(i) for i in range(200)))
            wall = time.perf_counter() - t0
            latencies.sort()
            print(f"load: 200 execs over 50 tasks in {wall:.2f} s = {200 / wall:.0f} execs/s, "
                  f"p50 {latencies[100] * 1000:.1f} ms, p99 {latencies[197] * 1000:.1f} ms")

    asyncio.run(main())

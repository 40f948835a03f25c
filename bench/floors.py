"""The floors: what the same work costs with nothing of ours in the way.

- ``bash -c true`` spawned from Python (``subprocess.run``): what a spawn-per-command design pays.
- ``docker exec CONTAINER true`` through the CLI, and docker-py ``exec_run``, in a container of the
  same image that the bench starts for itself (so the executor's own container is not disturbed).
- OpenSSH with a warm ControlMaster (``ssh -S sock host true``) against the test sshd.
- A raw gRPC round trip on a unix socket: a trivial servicer in another process, unary and
  unary-stream (Exec's shape), through a blocking channel set up as the latency client's
  (``executor.client.Client``: a stream is read on the calling thread).
- ``apptainer exec instance://NAME true`` on an instance of the test SIF.

``python -m bench.floors --serve SOCKET`` is the trivial gRPC server's entry point.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

from bench.common import ROOT, Row, latency_rows, percentile, say, skipped, time_calls
from executor.client import SYNC_CHANNEL_OPTIONS

BENCH_LABEL = "io.executor.bench"
_METHOD_UNARY = "/bench.Echo/Unary"
_METHOD_STREAM = "/bench.Echo/Stream"
_METHOD_PUMP = "/bench.Echo/Pump"
#: The trivial server's chunk for the streaming floor: 1 MiB, the largest the daemon sends.
_PUMP_CHUNK = 1 << 20


def _report(system_backend: tuple[str, str], prefix: str, samples: list[float], note: str) -> list[Row]:
    system, backend = system_backend
    say(f"    {backend:28} {prefix:18} p50 {percentile(samples, .5):8.3f} ms  p99 {percentile(samples, .99):8.3f} ms")
    return latency_rows(system, backend, prefix, samples, note)


def bare_spawn(n: int) -> list[Row]:
    rows = []
    for name, argv in (("true", ["bash", "-c", "true"]), ("echo", ["bash", "-c", "echo hi"])):
        samples = time_calls(lambda argv=argv: subprocess.run(argv, stdout=subprocess.PIPE, check=True), n)
        rows += _report(("floor", "local"), f"exec_{name}", samples, f"subprocess.run({argv})")
    return rows


def docker_floors(image: str, n: int) -> list[Row]:
    """CLI ``docker exec`` and docker-py ``exec_run`` into a throwaway container of ``image``."""
    if not shutil.which("docker"):
        return [skipped("floor", "docker", "exec_true_p50_ms", "no docker CLI")]
    import docker

    client = docker.from_env()
    container = client.containers.run(image, ["sleep", "infinity"], detach=True, init=True, network_mode="none",
                                      labels={BENCH_LABEL: "floor"}, name=f"executor-bench-floor-{uuid.uuid4().hex[:8]}")
    try:
        cli = ["docker", "exec", container.id, "true"]
        samples = time_calls(lambda: subprocess.run(cli, stdout=subprocess.PIPE, check=True), n)
        rows = _report(("floor", "docker"), "exec_true", samples, "docker exec CONTAINER true (CLI)")

        def py_exec() -> None:
            result = container.exec_run(["true"])
            if result.exit_code != 0:
                raise RuntimeError(f"exec_run true exited {result.exit_code}")

        samples = time_calls(py_exec, n)
        rows += _report(("floor", "docker (docker-py exec_run)"), "exec_true", samples, "docker-py container.exec_run(['true'])")
        return rows
    finally:
        container.remove(force=True)
        client.close()


def ssh_floor(facts: dict, n: int) -> list[Row]:
    """OpenSSH's own client over a warm ControlMaster to the test sshd."""
    sock = Path(tempfile.mkdtemp(prefix="bench-ssh-")) / "cm.sock"
    base = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={facts['known_hosts']}",
            "-o", "StrictHostKeyChecking=yes", "-i", facts["key_file"], "-p", str(facts["port"]),
            "-S", str(sock), f"{facts['user']}@{facts['host']}"]
    subprocess.run(base[:-1] + ["-M", "-f", "-N", "-o", "ControlPersist=600", base[-1]], check=True, timeout=30)
    try:
        samples = time_calls(lambda: subprocess.run(base + ["true"], stdout=subprocess.PIPE, check=True), n)
        return _report(("floor", "ssh"), "exec_true", samples, "ssh -S sock host true (warm ControlMaster)")
    finally:
        subprocess.run(base[:-1] + ["-O", "exit", base[-1]], capture_output=True, timeout=30)


def apptainer_floor(facts: dict, n: int) -> list[Row]:
    """``apptainer exec instance://NAME true`` on an instance of the test SIF."""
    exe, image = facts["APPTAINER"], facts["IMAGE"]
    name = f"benchfloor{uuid.uuid4().hex[:6]}"
    subprocess.run([exe, "instance", "start", image, name], check=True, capture_output=True, timeout=180)
    try:
        argv = [exe, "exec", f"instance://{name}", "true"]
        samples = time_calls(lambda: subprocess.run(argv, stdout=subprocess.PIPE, check=True), n, warmup=2)
        return _report(("floor", "singularity"), "exec_true", samples, "apptainer exec instance://NAME true")
    finally:
        subprocess.run([exe, "instance", "stop", name], capture_output=True, timeout=120)


# -- the trivial gRPC servicer -------------------------------------------------------------------

def _identity(b: bytes) -> bytes:
    return b


async def _serve(socket_path: str) -> None:
    async def unary(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def stream(request: bytes, context: grpc.aio.ServicerContext):
        yield request

    async def pump(request: bytes, context: grpc.aio.ServicerContext):
        total, chunk = int(request), bytes(_PUMP_CHUNK)
        while total > 0:
            yield chunk[:total]
            total -= len(chunk)

    handler = grpc.method_handlers_generic_handler("bench.Echo", {
        "Unary": grpc.unary_unary_rpc_method_handler(unary, _identity, _identity),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, _identity, _identity),
        "Pump": grpc.unary_stream_rpc_method_handler(pump, _identity, _identity),
    })
    server = grpc.aio.server(options=[("grpc.max_send_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket_path}")
    await server.start()
    print("READY", flush=True)
    await server.wait_for_termination()


async def _pump_rate(socket_path: Path, nbytes: int, repeats: int) -> list[float]:
    async with grpc.aio.insecure_channel(f"unix://{socket_path}",
                                         options=[("grpc.max_receive_message_length", 256 << 20)]) as channel:
        pump = channel.unary_stream(_METHOD_PUMP, _identity, _identity)
        rates = []
        for _ in range(repeats):
            t0, got = time.perf_counter(), 0
            async for chunk in pump(str(nbytes).encode(), timeout=600):
                got += len(chunk)
            rates.append(got / (time.perf_counter() - t0) / 1e6)
        return rates


def grpc_floor(n: int, stream_bytes: int = 0, repeats: int = 1) -> list[Row]:
    """A round trip to a trivial grpc.aio server in another process, on a unix socket; with
    ``stream_bytes``, also the rate at which that server can stream bytes (1 MiB messages) to a
    grpc.aio client: the ceiling for Exec's stream throughput in Python gRPC on this machine."""
    sock = Path(tempfile.mkdtemp(prefix="bench-grpc-")) / "echo.sock"
    server = subprocess.Popen([sys.executable, "-m", "bench.floors", "--serve", str(sock)], cwd=ROOT,
                              stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != b"READY":
            raise RuntimeError("the trivial gRPC server did not start")
        with grpc.insecure_channel(f"unix://{sock}", options=SYNC_CHANNEL_OPTIONS) as channel:
            unary = channel.unary_unary(_METHOD_UNARY, _identity, _identity)
            stream = channel.unary_stream(_METHOD_STREAM, _identity, _identity)
            rows = _report(("floor", "grpc (unary)"), "rtt", time_calls(lambda: unary(b"x", timeout=30), n, warmup=20),
                           "trivial grpc.aio servicer in another process, unix socket, blocking stub (as executor.client.Client)")
            rows += _report(("floor", "grpc (unary-stream)"), "rtt",
                            time_calls(lambda: list(stream(b"x", timeout=30)), n, warmup=20),
                            "as above, one streamed message (Exec's shape)")
        if stream_bytes:
            rates = asyncio.run(_pump_rate(sock, stream_bytes, repeats))
            say(f"    {'grpc (stream)':28} {stream_bytes / 1e6:.0f} MB in 1 MiB messages: median {statistics.median(rates):.1f} MB/s")
            rows.append(Row("floor", "grpc (stream)", "stream_MBps", round(statistics.median(rates), 1), "MB/s", len(rates),
                            "trivial grpc.aio server streaming 1 MiB messages to a grpc.aio client, unix socket, median"))
        return rows
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description="the trivial gRPC server used as a floor")
    parser.add_argument("--serve", required=True, help="unix socket path")
    asyncio.run(_serve(parser.parse_args().serve))


if __name__ == "__main__":
    main()

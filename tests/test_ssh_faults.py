"""The ssh backend when its server dies, and at scale, against sshd servers of the test's own.

Every test here that kills an sshd starts a private one (tests/infra/private_sshd.py) and kills only
that: the shared test sshd on 127.0.0.1:22022 serves other runs. The private servers have OpenSSH's
default MaxSessions (10) and MaxStartups (10:30:100), the limits a real host has.
"""

from __future__ import annotations

import asyncio
import signal
import uuid

import pytest

from executor.backends.base import BackendError, ErrorKind, drain
from executor.backends.ssh import SSHBackend, SSHOptions
from executor.client import AsyncClient
from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess
from tests.infra.private_sshd import PrivateSSHD

pytestmark = pytest.mark.backend("ssh")

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture
def sshd(tmp_path):
    servers: list[PrivateSSHD] = []

    def make(config: str = "") -> PrivateSSHD:
        server = PrivateSSHD(tmp_path / f"sshd{len(servers)}", config).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
async def backend_for(tmp_path):
    made: list[SSHBackend] = []

    def make(server: PrivateSSHD, **overrides) -> SSHBackend:
        b = SSHBackend("ssh", SSHOptions(**server.options(**overrides)), state_dir=tmp_path / f"state{len(made)}")
        made.append(b)
        return b

    yield make
    for b in made:
        await b.close()


async def read_until(stream, needle: bytes) -> bytes:
    buf = b""
    async with asyncio.timeout(30):
        while needle not in buf:
            chunk = await stream.read()
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {buf!r}")
            buf += chunk
    return buf


async def read_to_end(stream) -> bytes:
    out = b""
    async with asyncio.timeout(30):
        while chunk := await stream.read():
            out += chunk
    return out


def kill_server(server: PrivateSSHD, *, listener: bool) -> None:
    """SIGKILL the per-connection sshd processes of our private server (and its listener)."""
    kids = server.session_pids()
    assert kids, "the private sshd serves no connection"
    if listener:
        server.kill_listener()
    for pid in kids:
        try:
            import os
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def assert_lost(proc) -> None:
    """Both streams and wait() end with LOST naming the lost connection, never a clean end."""
    for stream in (proc.stdout, proc.stderr):
        with pytest.raises(BackendError) as info:
            await read_to_end(stream)
        assert info.value.kind is ErrorKind.LOST
        assert "ssh connection" in info.value.message and "was lost" in info.value.message
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 30)
    assert info.value.kind is ErrorKind.LOST and "was lost" in info.value.message


@pytest.mark.slow
async def test_killing_sshd_under_commands_is_always_lost(sshd, backend_for):
    """The issue's fault: about half of the kills looked like a normal exit (-1). Paramiko marks the
    channels closed a moment before the transport stops counting as active; a reader that looked in
    between saw a clean EOF. Ten kills of the whole server, each under a running command: all LOST."""
    server = sshd()
    port = server.port
    for round_ in range(10):
        b = backend_for(server)
        sb = await b.sandbox("kill")
        shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
        await shell.write(b"echo started; sleep 300\n")
        await read_until(shell.stdout, b"started\n")
        kill_server(server, listener=True)
        await assert_lost(shell)
        # The server is down: the next command says so, clearly.
        with pytest.raises(BackendError) as info:
            await sb.spawn(["true"], cwd=sb.root, env=ENV)
        assert info.value.kind is ErrorKind.UNAVAILABLE and "is sshd running there?" in info.value.message, round_
        server = PrivateSSHD(server.dir, server.extra, port=port).start()  # the same server again
        # Back: the next command reconnects (and the lost session's shell is ended).
        proc = await sb.spawn(["/bin/sh", "-c", "echo back"], cwd=sb.root, env=ENV)
        out, _ = await drain(proc)
        assert (out, await proc.wait()) == (b"back\n", 0)
        assert b.reconnects == 1 and b.orphans_ended >= 1
        await b.close()
    server.stop()


async def test_killing_the_connections_sshd_process_is_lost_then_reconnects(sshd, backend_for):
    server = sshd()
    b = backend_for(server)
    sb = await b.sandbox("child")
    shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
    await shell.write(b"echo started; sleep 300\n")
    await read_until(shell.stdout, b"started\n")
    kill_server(server, listener=False)  # the listener lives on
    await assert_lost(shell)
    proc = await sb.spawn(["/bin/sh", "-c", "echo again"], cwd=sb.root, env=ENV)
    out, _ = await drain(proc)
    assert (out, await proc.wait()) == (b"again\n", 0)
    assert b.reconnects == 1
    assert "server closed the connection" in (await b.health()).details["last_loss"]


async def test_a_connection_lost_after_the_output_ended_is_still_lost(sshd, backend_for):
    """The program closed its stdout and stderr (the server sent EOF) and still runs when the
    connection goes: without an exit status that is no normal end, so the streams fail too."""
    server = sshd()
    b = backend_for(server)
    sb = await b.sandbox("eof")
    proc = await sb.spawn(["/bin/sh", "-c", "echo bye; exec >&- 2>&-; sleep 300"], cwd=sb.root, env=ENV)
    await read_until(proc.stdout, b"bye\n")
    async with asyncio.timeout(30):
        while not proc._chan.eof_received:  # the server's EOF arrived
            await asyncio.sleep(0.01)
    kill_server(server, listener=False)
    await assert_lost(proc)


async def test_exec_through_the_daemon_is_backend_error_then_the_task_goes_on(sshd, tmp_path):
    """End to end: the Exec under which the server dies ends BACKEND_ERROR naming the lost
    connection (never COMPLETED); the task's next Exec runs on a new connection."""
    server = sshd()
    config = {"backend": "ssh", "backends": {"ssh": {"kind": "ssh", **server.options()}},
              "limits": {"kill_grace_seconds": 1}}
    (tmp_path / "daemon").mkdir()
    daemon = DaemonProcess(config, state_dir=tmp_path / "daemon" / "state").start()
    try:
        async with AsyncClient(daemon.target, deadline=120) as client:
            assert (await client.run("t", "cd /tmp && X=1")).exit.status == pb.EXIT_STATUS_COMPLETED
            events = client.exec("t", "echo started; sleep 300")
            async for event in events:
                if event.HasField("stdout") and b"started" in event.stdout:
                    break
            kill_server(server, listener=False)
            exit_ = None
            async for event in events:
                if event.HasField("exit"):
                    exit_ = event.exit
            assert exit_ is not None
            assert exit_.status == pb.EXIT_STATUS_BACKEND_ERROR, exit_
            assert "ssh connection" in exit_.message and "was lost" in exit_.message
            result = await client.run("t", "echo again")
            assert (result.exit.status, result.stdout) == (pb.EXIT_STATUS_COMPLETED, b"again\n"), result.exit
    finally:
        daemon.stop()
        daemon.kill()


@pytest.mark.slow
async def test_200_concurrent_tasks_on_default_sshd_limits_all_succeed(sshd, tmp_path):
    """Each of 200 tasks runs its first Exec at once, through a real daemon, against a server with
    OpenSSH's default MaxSessions 10 and MaxStartups 10:30:100: no error at all (the issue saw 6%
    "Unable to open channel"). The backend learns MaxSessions and reports it in its health."""
    server = sshd()
    n = 200
    config = {"backend": "ssh", "backends": {"ssh": {"kind": "ssh", **server.options()}},
              "logging": {"level": "warning"}, "limits": {"max_concurrent_execs": n}}
    (tmp_path / "daemon").mkdir()
    daemon = DaemonProcess(config, state_dir=tmp_path / "daemon" / "state").start()
    prefix = uuid.uuid4().hex[:6]
    try:
        async with AsyncClient(daemon.target, deadline=600) as client:
            results = await asyncio.gather(*(client.run(f"{prefix}-{i}", f"echo task-{i}") for i in range(n)),
                                           return_exceptions=True)
            failures = [(i, r) for i, r in enumerate(results)
                        if isinstance(r, BaseException) or r.exit.status != pb.EXIT_STATUS_COMPLETED
                        or r.exit.exit_code != 0 or r.stdout != f"task-{i}\n".encode()]
            assert failures == [], failures[:5]
            (info,) = (await client.list_backends()).backends
            assert info.available
    finally:
        daemon.stop()
        daemon.kill()


async def test_health_reports_the_max_sessions_it_met(sshd, backend_for):
    server = sshd("MaxSessions 3\n")
    b = backend_for(server)
    procs = []
    for i in range(7):
        sb = await b.sandbox(f"h{i}")
        procs.append(await sb.spawn(["sleep", "300"], cwd=sb.root, env=ENV))
    health = await b.health()
    assert health.available
    assert health.details["max_sessions"].startswith("3 ") or health.details["max_sessions"].startswith("2 ")
    assert "MaxSessions" in health.reason and int(health.details["connections"]) >= 3
    for p in procs:
        p.abort()

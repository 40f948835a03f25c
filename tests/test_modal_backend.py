"""The modal backend: the real ``modal`` SDK against the local fake of Modal's gRPC API.

The fake (tests/fakes/modal_server.py) runs every command for real and records every
request, so these tests check both what the backend does (streaming, stdin, env,
sessions, signals, files, vanished sandboxes) and exactly what the SDK sends.
The backend-independent behaviour through a daemon is covered by tests/conformance.
"""

from __future__ import annotations

import asyncio
import io
import re
import shutil
import signal
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
from grpclib import Status
from modal_proto import api_pb2

from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.modal import ModalBackend, ModalOptions
from tests.infra import modal as infra
from tests.rendezvous import RELEASE, WAIT_FOR_RELEASE

pytestmark = pytest.mark.backend("modal")

SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture(scope="module")
def server():
    srv = infra.in_process()
    yield srv
    srv.stop_thread()


@pytest.fixture
async def make_backend(server, tmp_path):
    """Backends on the fake server, with option overrides; closed after the test."""
    made: list[ModalBackend] = []
    server.clear_faults()
    server.max_sandboxes = None
    server.exec_new_session = True
    server.schedule_delay = 0.0

    def make(name: str = "m", **overrides: Any) -> ModalBackend:
        opts = {**infra.options(server.url), **overrides}
        opts.pop("kind")
        backend = ModalBackend(name, ModalOptions(**opts), state_dir=tmp_path / name)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()
    for sb in server.running():
        server.run_sync(sb.terminate())


def env_of(sandbox) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sandbox.root, "LANG": "C.UTF-8"}


async def run(sandbox, argv, **kw) -> tuple[bytes, bytes, int]:
    proc = await sandbox.spawn(argv, cwd=kw.pop("cwd", sandbox.root), env=kw.pop("env", env_of(sandbox)), **kw)
    await proc.close_stdin()
    out, err = await drain(proc)
    return out, err, await proc.wait()


async def read_until(stream, pattern: bytes, timeout: float = 10) -> bytes:
    """Read a stream until ``pattern`` appears, with a deadline."""
    buf = b""
    deadline = time.monotonic() + timeout
    while pattern not in buf:
        chunk = await asyncio.wait_for(stream.read(), max(0.01, deadline - time.monotonic()))
        if not chunk:
            raise AssertionError(f"EOF before {pattern!r}; got {buf!r}")
        buf += chunk
    return buf


def created(server, name: str) -> api_pb2.SandboxCreateV2Request:
    requests = [r for r in server.requests("SandboxCreateV2") if r.definition.name == name]
    assert len(requests) == 1, f"expected one SandboxCreateV2 for {name}, got {len(requests)}"
    return requests[0]


# ---------------------------------------------------------------------------
# What the SDK sends
# ---------------------------------------------------------------------------


async def test_create_carries_image_resources_network_and_name(make_backend, server):
    backend = make_backend("opts", image="python:3.12-slim", cpu=0.5, memory=768, timeout=600, idle_timeout=120,
                           region="us-east-1", block_network=True)
    sb = await backend.sandbox("task-a")
    request = created(server, f"executor-{backend.daemon_id}-opts-task-a")
    d = request.definition
    assert d.resources.milli_cpu == 500
    assert d.resources.memory_mb == 768
    assert d.timeout_secs == 600 and d.idle_timeout_secs == 120
    assert d.network_access.network_access_type == api_pb2.NetworkAccess.NetworkAccessType.BLOCKED
    assert list(d.scheduler_placement.regions) == ["us-east-1"]
    assert list(d.entrypoint_args) == ["sleep", "infinity"]
    assert {t.tag_name: t.tag_value for t in request.tags} == {
        "executor-daemon": backend.daemon_id, "executor-backend": "opts", "executor-key": "task-a"}
    assert request.app_id == server.apps[infra.APP]
    images = server.requests("ImageGetOrCreate")
    assert any("FROM python:3.12-slim" in list(r.image.dockerfile_commands) for r in images)
    assert sb.root.endswith("/tasks/task-a") and Path(sb.root).is_dir()
    # credentials go in metadata to the control plane, never into requests
    call = next(c for c in server.calls if c.method == "SandboxCreateV2")
    assert call.metadata["x-modal-token-id"] == infra.TOKEN_ID
    assert infra.TOKEN_SECRET not in str(request)


async def test_block_network_is_enforced_inside_the_sandbox(make_backend, server):
    probe = ["python3", "-c", "import socket,sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), 3)",
             str(server.port)]
    open_sb = await make_backend("net-open").sandbox("t")
    assert (await run(open_sb, probe))[2] == 0
    blocked = await make_backend("net-blocked", block_network=True).sandbox("t")
    _, err, code = await run(blocked, probe)
    assert code != 0 and (b"refused" in err.lower() or b"unreachable" in err.lower()), err
    # the sandbox's own loopback still works between its processes
    listen = await blocked.spawn(["python3", "-c", "import socket; s=socket.socket(); s.bind(('127.0.0.1', 47123)); "
                                  "s.listen(); print('up', flush=True); s.accept()"], cwd=blocked.root,
                                 env=env_of(blocked))
    await read_until(listen.stdout, b"up\n")
    assert (await run(blocked, probe[:-1] + ["47123"]))[2] == 0
    assert await listen.wait() == 0


async def test_cidr_allowlist_is_sent(make_backend, server):
    backend = make_backend("cidr", cidr_allowlist=["10.0.0.0/8", "192.168.1.0/24"])
    await backend.sandbox("t")
    access = created(server, backend._sandbox_name("t")).definition.network_access
    assert access.network_access_type == api_pb2.NetworkAccess.NetworkAccessType.ALLOWLIST
    assert list(access.allowed_cidrs) == ["10.0.0.0/8", "192.168.1.0/24"]
    assert backend.capabilities.network_policy == "allowlist"


def test_block_network_and_allowlist_exclude_each_other():
    with pytest.raises(ValueError, match="exclude each other"):
        ModalOptions(block_network=True, cidr_allowlist=["10.0.0.0/8"])


async def test_env_travels_in_the_secret_channel_not_argv(make_backend, server):
    backend = make_backend("envch")
    sb = await backend.sandbox("t")
    env = env_of(sb) | {"API_KEY": "s3cr3t-value"}
    out, _, code = await run(sb, ["printenv", "API_KEY"], env=env)
    assert (out, code) == (b"s3cr3t-value\n", 0)
    start = [r for r in server.requests("TaskExecStart") if "printenv" in r.command_args][-1]
    assert all("s3cr3t-value" not in a for a in start.command_args)
    inline = {k: v for s in start.secret_sources for k, v in s.env.contents.items()}
    assert inline["API_KEY"] == "s3cr3t-value"
    assert start.workdir == sb.root


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


async def test_output_streams_while_the_process_runs(make_backend):
    sb = await make_backend("stream").sandbox("t")
    # The process cannot end before the test creates `release`, which it does only once it has read both
    # streams: output held back to the end would never arrive (the reads time out).
    proc = await sb.spawn(["bash", "-c", f"echo first; echo err >&2; {WAIT_FOR_RELEASE}; echo second"], cwd=sb.root,
                          env=env_of(sb))
    exited = asyncio.ensure_future(proc.wait())
    assert await read_until(proc.stdout, b"first\n", timeout=30) == b"first\n"
    assert await read_until(proc.stderr, b"err\n", timeout=30) == b"err\n"
    assert not exited.done(), "output must arrive before the process ends"
    Path(sb.root, RELEASE).touch()
    rest = await read_until(proc.stdout, b"second\n", timeout=30)
    assert rest == b"second\n"
    assert await exited == 0


async def test_persistent_shell_over_stdin(make_backend):
    sb = await make_backend("shell").sandbox("t")
    proc = await sb.spawn(SH, cwd=sb.root, env=env_of(sb))
    await proc.write(b"cd /tmp && export X=42; echo step1\n")
    await read_until(proc.stdout, b"step1\n")
    await proc.write(b'echo "$PWD $X"\n')
    assert (await read_until(proc.stdout, b"/tmp 42\n")).endswith(b"/tmp 42\n")
    data = bytes(range(256)) * 64  # arbitrary bytes survive the trip
    await proc.write(b"head -c 16384 | od -An -tx1 | tr -d ' \\n' | md5sum\n" + data)
    import hashlib
    want = hashlib.md5(data.hex().encode()).hexdigest().encode()
    await read_until(proc.stdout, want)
    await proc.write(b"exit 7\n")
    assert await proc.wait() == 7


async def test_stdin_eof_and_writes_after_it(make_backend):
    sb = await make_backend("eof").sandbox("t")
    proc = await sb.spawn(["wc", "-c"], cwd=sb.root, env=env_of(sb))
    await proc.write(b"x" * 3_000_000)  # more than one stdin chunk
    await proc.close_stdin()
    with pytest.raises(BackendError) as info:
        await proc.write(b"late")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    out, _ = await drain(proc)
    assert out.strip() == b"3000000" and await proc.wait() == 0


async def test_exact_env_and_session_leader(make_backend):
    sb = await make_backend("leader").sandbox("t")
    env = env_of(sb) | {"ODD": "a b\nc=d", "EMPTY": ""}
    out, _, code = await run(sb, ["/bin/sh", "-c", 'echo "$$ $(ps -o sid= -p $$) $(ps -o pgid= -p $$)"; env'],
                             env=env)
    assert code == 0
    first, _, rest = out.decode().partition("\n")
    pid, sid, pgid = first.split()
    assert pid == sid == pgid, "the process must lead its own session and group"
    seen = dict(line.split("=", 1) for line in re.split(r"\n(?=[A-Z_]+=)", rest.strip()))
    seen.pop("PWD", None)  # set by the shell itself
    assert seen == env, "exactly the given environment: nothing from the container (MODAL_*, ...)"


async def test_exact_env_and_session_leader_when_the_exec_is_not_a_group_leader(make_backend, server):
    """The prologue's other path: an exec started inside someone else's process group
    becomes a session leader without a fork, and its exit status is its own."""
    server.exec_new_session = False
    sb = await make_backend("noleader").sandbox("t")
    out, _, code = await run(sb, ["/bin/sh", "-c", 'echo "$$ $(ps -o sid= -p $$)"; env; exit 5'])
    first, _, rest = out.decode().partition("\n")
    pid, sid = first.split()
    assert pid == sid and code == 5
    assert "MODAL_" not in rest and "HOME=" + sb.root in rest


@pytest.mark.parametrize("new_session", [True, False])
async def test_a_missing_session_registry_is_harmless(make_backend, server, new_session):
    server.exec_new_session = new_session
    sb = await make_backend(f"noreg{int(new_session)}").sandbox("t")
    registry = Path(sb.root).parent / ".executor-sessions"
    assert registry.is_dir()
    shutil.rmtree(registry)
    assert await run(sb, ["echo", "fine"]) == (b"fine\n", b"", 0)


async def test_signal_session_kills_the_command_tree_not_the_sandbox(make_backend, server):
    sb = await make_backend("sig").sandbox("t")
    proc = await sb.spawn(["bash", "-c", "sleep 300 & sleep 300 & echo $$; wait"], cwd=sb.root, env=env_of(sb))
    pid = int((await read_until(proc.stdout, b"\n")).strip())
    members = _session_members(pid)
    assert len(members) == 3
    await sb.signal_session(pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    assert _session_members(pid) == []
    # the sandbox lives on
    out, _, code = await run(sb, ["echo", "alive"])
    assert (out, code) == (b"alive\n", 0)
    assert any(s.id == sb.sandbox_id for s in server.running())


def _session_members(sid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                raw = (entry / "stat").read_bytes()
            except OSError:
                continue
            fields = raw[raw.rfind(b")") + 2:].split()
            if fields[3] == str(sid).encode() and fields[0] != b"Z":
                members.append(int(entry.name))
    return members


async def test_exit_code_above_128_is_not_mistaken_for_a_signal(make_backend):
    sb = await make_backend("code").sandbox("t")
    assert (await run(sb, ["bash", "-c", "exit 137"]))[2] == 137


async def test_missing_program_fails_with_127(make_backend):
    sb = await make_backend("missing").sandbox("t")
    _, err, code = await run(sb, ["no-such-program-xyz"])
    assert code == 127 and b"no-such-program-xyz" in err


async def test_pty_size_tty_and_ctrl_c(make_backend):
    sb = await make_backend("pty").sandbox("t")
    proc = await sb.spawn(SH, cwd=sb.root, env=env_of(sb) | {"TERM": "xterm"}, pty=PtySize(rows=33, cols=101))
    assert proc.stderr is None
    await proc.write(b"stty size; tty; echo $TERM\n")
    out = await read_until(proc.stdout, b"xterm\r\n")
    assert b"33 101" in out and b"/dev/pts/" in out
    await proc.write(b"sleep 300\n")
    await read_until(proc.stdout, b"sleep 300\r\n")
    await asyncio.sleep(0.3)
    await proc.write(b"\x03")
    await read_until(proc.stdout, b"^C")
    await proc.write(b"echo after-$?\n")
    await read_until(proc.stdout, b"after-130")
    await proc.write(b"exit 3\n")
    assert await asyncio.wait_for(proc.wait(), 10) == 3


async def test_pty_resize_reaches_the_program(make_backend):
    sb = await make_backend("resize").sandbox("t")
    proc = await sb.spawn(SH, cwd=sb.root, env=env_of(sb), pty=PtySize(rows=24, cols=80))
    await proc.write(b"trap 'echo winch-$LINES' WINCH; shopt -s checkwinsize; echo ok\n")
    await read_until(proc.stdout, b"ok\r\n")
    await proc.resize(PtySize(rows=40, cols=132))
    await read_until(proc.stdout, b"winch-")
    await proc.write(b"stty size\n")
    await read_until(proc.stdout, b"40 132")
    await proc.write(b"exit\n")
    await asyncio.wait_for(proc.wait(), 10)
    pipe = await sb.spawn(["cat"], cwd=sb.root, env=env_of(sb))
    with pytest.raises(BackendError) as info:
        await pipe.resize(PtySize(10, 10))
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    await pipe.close_stdin()
    await pipe.wait()


async def test_files_round_trip(make_backend):
    sb = await make_backend("files").sandbox("t")

    async def chunks():
        archive = tar_single_file("dir/hello.txt", b"hello modal\n")
        for i in range(0, len(archive), 1000):
            yield archive[i:i + 1000]

    await sb.put_archive(sb.root + "/in", chunks())
    assert (Path(sb.root) / "in/dir/hello.txt").read_bytes() == b"hello modal\n"
    data = b"".join([c async for c in sb.get_archive(sb.root + "/in/dir")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("dir/hello.txt").read() == b"hello modal\n"


# ---------------------------------------------------------------------------
# Sandbox life cycle
# ---------------------------------------------------------------------------


async def test_a_restarted_daemon_finds_the_sandbox_by_name(make_backend, server):
    first = make_backend("again")
    sb = await first.sandbox("t")
    await run(sb, ["bash", "-c", "echo kept > note"])
    await first.close()
    second = make_backend("again")
    sb2 = await second.sandbox("t")
    assert sb2.sandbox_id == sb.sandbox_id
    out, _, _ = await run(sb2, ["cat", "note"])
    assert out == b"kept\n"
    assert second.daemon_id == first.daemon_id
    created(server, second._sandbox_name("t"))  # exactly one create


async def test_a_restarted_daemon_ends_what_the_previous_one_left(make_backend):
    first = make_backend("leftover")
    sb = await first.sandbox("t")
    proc = await sb.spawn(["bash", "-c", "sleep 300 & echo $$; wait"], cwd=sb.root, env=env_of(sb))
    pid = int((await read_until(proc.stdout, b"\n")).strip())
    assert len(_session_members(pid)) == 2
    await proc.detach()
    await first.close()  # a daemon going away ends nothing by itself
    assert len(_session_members(pid)) == 2
    second = make_backend("leftover")
    await second.sandbox("t")
    deadline = time.monotonic() + 10
    while _session_members(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert _session_members(pid) == []


async def test_release_terminates_or_keeps(make_backend, server):
    term = make_backend("term")
    sb = await term.sandbox("t")
    await sb.release(remove_files=False)
    assert server.lookup(sandbox_id=sb.sandbox_id).running is False
    keep = make_backend("keep", on_close="keep")
    sb = await keep.sandbox("t")
    await sb.release(remove_files=True)
    fake = server.lookup(sandbox_id=sb.sandbox_id)
    assert fake.running and not Path(sb.root).exists()


async def test_names_are_valid_stable_and_per_daemon(make_backend, tmp_path):
    a = make_backend("same")
    long = a._sandbox_name("x" * 80 + "/weird id")
    assert len(long) <= 64 and re.fullmatch(r"[A-Za-z0-9._-]+", long)
    assert long == a._sandbox_name("x" * 80 + "/weird id")
    other = ModalBackend("same", a.options, state_dir=tmp_path / "another-daemon")
    assert other._sandbox_name("t") != a._sandbox_name("t")


async def test_one_sandbox_per_daemon(make_backend, server):
    backend = make_backend("shared", sandbox_per="daemon")
    a, b = await backend.sandbox("a"), await backend.sandbox("b")
    assert a.sandbox_id == b.sandbox_id and a.root != b.root
    await a.release(remove_files=True)
    assert server.lookup(sandbox_id=b.sandbox_id).running
    assert not Path(a.root).exists() and Path(b.root).exists()
    assert len([r for r in server.requests("SandboxCreateV2") if r.definition.name == backend._sandbox_name("daemon")]) == 1


async def test_vanished_sandbox_is_lost_then_recreated(make_backend, server):
    backend = make_backend("vanish")
    sb = await backend.sandbox("t")
    proc = await sb.spawn(SH, cwd=sb.root, env=env_of(sb))
    await proc.write(b"echo ready\n")
    await read_until(proc.stdout, b"ready\n")
    old = sb.sandbox_id
    server.vanish(old)
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 10)
    assert info.value.kind is ErrorKind.LOST and old in info.value.message
    out, _, code = await run(sb, ["pwd"])
    assert (out.decode().strip(), code) == (sb.root, 0)
    assert sb.sandbox_id != old


async def test_exec_into_a_vanished_sandbox_is_lost_once(make_backend, server):
    backend = make_backend("vanish2")
    sb = await backend.sandbox("t")
    server.vanish(sb.sandbox_id)
    with pytest.raises(BackendError) as info:
        await run(sb, ["true"])
    assert info.value.kind is ErrorKind.LOST
    assert (await run(sb, ["true"]))[2] == 0


# ---------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------


async def test_output_that_cannot_be_read_is_lost(make_backend, server):
    sb = await make_backend("readfail").sandbox("t")
    server.fail("TaskExecStdioRead", Status.NOT_FOUND, "exec output expired", times=2)
    proc = await sb.spawn(["echo", "hi"], cwd=sb.root, env=env_of(sb))
    for stream in (proc.stdout, proc.stderr):
        with pytest.raises(BackendError) as info:
            await asyncio.wait_for(stream.read(), 10)
        assert info.value.kind is ErrorKind.LOST and "expired" in info.value.message
    assert await proc.wait() == 0


async def test_missing_credentials(make_backend, monkeypatch):
    monkeypatch.delenv("EXECUTOR_TEST_NO_ID", raising=False)
    backend = make_backend("nocreds", token_id=None, token_secret=None, token_id_env="EXECUTOR_TEST_NO_ID",
                           token_secret_env="EXECUTOR_TEST_NO_SECRET")
    health = await backend.health()
    assert not health.available and "EXECUTOR_TEST_NO_ID" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION


async def test_credentials_from_named_env_vars(make_backend, monkeypatch):
    monkeypatch.setenv("EXECUTOR_TEST_MODAL_ID", infra.TOKEN_ID)
    monkeypatch.setenv("EXECUTOR_TEST_MODAL_SECRET", infra.TOKEN_SECRET)
    backend = make_backend("envcreds", token_id=None, token_secret=None, token_id_env="EXECUTOR_TEST_MODAL_ID",
                           token_secret_env="EXECUTOR_TEST_MODAL_SECRET")
    assert (await backend.health()).available
    policy = backend.policy()
    assert "EXECUTOR_TEST_MODAL_ID" in policy["credentials"]
    assert infra.TOKEN_SECRET not in repr(policy) and infra.TOKEN_SECRET not in repr(backend.options)


async def test_refused_credentials_are_unauthenticated(make_backend):
    backend = make_backend("badcreds", token_secret="wrong")
    health = await backend.health()
    assert not health.available and "credentials" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t")
    assert info.value.kind is ErrorKind.UNAUTHENTICATED
    assert "wrong" not in info.value.message


async def test_unreachable_server_is_unavailable_quickly(make_backend):
    """A refused connection fails at once (the probe), not after the SDK's retries: with a request
    timeout of an hour, only the probe can answer within the 60 s that bound a hang here, and only
    the probe says "cannot reach"."""
    backend = make_backend("down", server_url="http://127.0.0.1:9", request_timeout=3600)
    async with asyncio.timeout(60):
        health = await backend.health()
        assert not health.available and "cannot reach Modal" in health.reason
        with pytest.raises(BackendError) as info:
            await backend.sandbox("t")
    assert info.value.kind is ErrorKind.UNAVAILABLE and "cannot reach Modal" in info.value.message


async def test_a_slow_cold_start_is_waited_for_up_to_start_timeout(make_backend, server):
    """The sandbox is scheduled only after request_timeout has run out (the test holds it until
    then): the first process waits for it under start_timeout instead."""
    server.schedule_delay = 3600.0  # held: the test schedules it below
    request_timeout = 5.0  # it bounds every other call too: room for a loaded machine
    making = asyncio.ensure_future(
        make_backend("cold", request_timeout=request_timeout, start_timeout=120).sandbox("t"))

    def polled_while_held() -> list[Any]:
        held = [sb for sb in server.running() if sb.tags.get("executor-backend") == "cold" and not sb.scheduled]
        polled = {r.sandbox_id for r in server.requests("SandboxGetTaskIdV2")}
        return [sb for sb in held if sb.id in polled]

    async with asyncio.timeout(60):
        while not (held := polled_while_held()):
            await asyncio.sleep(0.01)
    # The first process waits for its task. Any bound of request_timeout on that wait was armed before
    # the poll just seen, so on this event loop it fires before this sleep ends (no clock race).
    await asyncio.sleep(request_timeout)
    assert not making.done()
    await asyncio.to_thread(server.run_sync, held[0].start())
    sb = await asyncio.wait_for(making, 60)
    assert (await run(sb, ["true"]))[2] == 0
    assert server.requests("SandboxGetTaskIdV2"), "the SDK polls for the task while it is scheduled"
    server.schedule_delay = 3.0
    with pytest.raises(BackendError) as info:
        await make_backend("colder", start_timeout=0.5).sandbox("t")
    assert info.value.kind is ErrorKind.UNAVAILABLE and "within 0.5s" in info.value.message


async def test_quota_is_resource_exhausted(make_backend, server):
    server.max_sandboxes = 0
    with pytest.raises(BackendError) as info:
        await make_backend("quota").sandbox("t")
    assert info.value.kind is ErrorKind.RESOURCE_EXHAUSTED and "quota" in info.value.message


async def test_transient_lookup_failure_is_retried(make_backend, server):
    server.fail("SandboxGetFromNameV2", Status.UNAVAILABLE, "try again", times=4)
    sb = await make_backend("flaky").sandbox("t")
    assert (await run(sb, ["true"]))[2] == 0


async def test_policy_and_capabilities(make_backend):
    backend = make_backend("pol", block_network=True, memory=512)
    policy = backend.policy()
    assert policy["network"].startswith("blocked") and policy["memory_mib"] == "512"
    assert infra.TOKEN_SECRET not in repr(policy)
    caps = backend.capabilities
    assert caps.stdin and caps.persistent_shell and caps.streaming and caps.pty
    assert caps.network_policy == "blocked"

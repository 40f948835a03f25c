"""The docker backend against the real Docker engine (scripts/docker-up.sh, scripts/sandbox-image.sh).

Every hardening item is proven from INSIDE the container; processes, terminals, signals,
archives and the container's life (removed, killed, daemon restarted) run for real. The
backend-independent behaviour through the daemon is covered by tests/conformance.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import signal
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.docker import DockerBackend, DockerOptions, _owned_tar
from tests.infra import docker as infra

pytestmark = pytest.mark.backend("docker")

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
LABELS = {infra.TEST_LABEL: "unit"}


@pytest.fixture(scope="module")
def engine() -> None:
    infra.engine()
    infra.sweep("unit", older_than=600)


def _remove_ours(backend: DockerBackend) -> None:
    infra.remove_daemons(backend.instance_id)


@pytest.fixture
async def make_backend(engine, tmp_path):
    """Backends with test labels (and their containers/volumes removed after the test)."""
    made: list[DockerBackend] = []

    def make(state_dir: Path | None = None, name: str = "dk", **overrides) -> DockerBackend:
        opts = {"labels": LABELS, **overrides}
        backend = DockerBackend(name, DockerOptions(**opts), state_dir=state_dir or tmp_path / f"state{len(made)}")
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()
    for backend in made:
        await asyncio.to_thread(_remove_ours, backend)


@pytest.fixture(scope="module")
async def shared(engine, tmp_path_factory):
    """One hardened backend (default options) shared by the read-only tests of this module."""
    backend = DockerBackend("dkshared", DockerOptions(labels=LABELS), state_dir=tmp_path_factory.mktemp("dk"))
    await backend.start()
    yield backend
    await backend.close()
    await asyncio.to_thread(_remove_ours, backend)


async def run(sb, script: str, *, env: dict | None = None, cwd: str | None = None, stdin: bytes = b""):
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", script], cwd=cwd or sb.root, env=env or ENV)
    if stdin:
        await proc.write(stdin)
    await proc.close_stdin()
    out, err = await asyncio.wait_for(drain(proc), 30)
    code = await proc.wait()
    await proc.detach()
    return code, out.decode(errors="replace"), err.decode(errors="replace")


async def read_until(stream, needle: bytes, timeout: float = 15.0) -> bytes:
    buf = b""
    async with asyncio.timeout(timeout):
        while needle not in buf:
            chunk = await stream.read()
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {buf!r}")
            buf += chunk
    return buf


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


# ---------------------------------------------------------------------------
# Hardening, proven from inside the container
# ---------------------------------------------------------------------------


async def test_no_capabilities_and_no_new_privs(shared):
    sb = await shared.sandbox("hard")
    code, out, _ = await run(sb, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
    assert code == 0
    fields = dict(line.split(":\t") for line in out.strip().splitlines())
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[cap], 16) == 0, (cap, fields[cap])
    assert fields["NoNewPrivs"] == "1"
    assert fields["Seccomp"] == "2", "docker's default seccomp filter must stay on"


async def test_runs_as_non_root(shared):
    sb = await shared.sandbox("hard")
    code, out, _ = await run(sb, "id -u; id -g; stat -c '%u:%g' .")
    assert (code, out.split()) == (0, ["1000", "1000", "1000:1000"])


async def test_root_is_read_only_tmp_and_workspace_writable(shared):
    sb = await shared.sandbox("hard")
    code, _, err = await run(sb, "touch /should-fail")
    assert code != 0 and "Read-only file system" in err
    code, _, err = await run(sb, "touch /etc/should-fail")
    assert code != 0
    code, out, err = await run(sb, "echo x > /tmp/ok && echo y > ./ok && cat /tmp/ok ./ok")
    assert (code, out, err) == (0, "x\ny\n", "")


async def test_network_none_leaves_only_loopback(shared):
    sb = await shared.sandbox("hard")
    code, out, _ = await run(sb, "ls /sys/class/net; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert code == 0
    names = out.split()
    assert set(names) == {"lo"}, names


async def _cgroup_value(sb, v1: str, v2: str) -> str:
    code, out, _ = await run(sb, f"cat /sys/fs/cgroup/{v1} 2>/dev/null || cat /sys/fs/cgroup/{v2}")
    assert code == 0, out
    return out.strip()


async def test_limits_visible_in_cgroup(shared):
    sb = await shared.sandbox("hard")
    assert await _cgroup_value(sb, "pids/pids.max", "pids.max") == "512"
    assert int(await _cgroup_value(sb, "memory/memory.limit_in_bytes", "memory.max")) == 2 << 30
    cpu = await _cgroup_value(sb, "cpu/cpu.cfs_quota_us", "cpu.max")
    quota = int(cpu.split()[0])
    period = int(cpu.split()[1]) if " " in cpu else int(await _cgroup_value(sb, "cpu/cpu.cfs_period_us", "x"))
    assert quota / period == pytest.approx(2.0)


async def test_pids_limit_is_enforced(make_backend):
    backend = make_backend(pids_limit=40)
    sb = await backend.sandbox("pids")
    code, out, err = await run(sb, "for i in $(seq 60); do sleep 5 & done 2>&1; wait; echo end", env=ENV)
    assert "retry" in (out + err).lower() or "resource temporarily unavailable" in (out + err).lower()


async def test_no_docker_socket_and_no_host_mounts(shared):
    sb = await shared.sandbox("hard")
    code, out, _ = await run(sb, "test -e /var/run/docker.sock && echo SOCK; test -e /run/docker.sock && echo SOCK; "
                                 "cut -d' ' -f5 /proc/self/mountinfo")
    assert "SOCK" not in out
    mountpoints = set(out.split())
    allowed = {"/", "/proc", "/dev", "/sys", "/tmp", "/run", "/workspace", "/etc/hostname", "/etc/hosts",
               "/etc/resolv.conf", "/dev/shm", "/dev/pts", "/dev/mqueue", "/dev/console", "/sys/fs/cgroup",
               "/sbin/docker-init", "/usr/sbin/docker-init"}  # docker-init: the engine's own tini, read-only
    unexpected = {m for m in mountpoints if m not in allowed and not m.startswith(("/proc/", "/sys/", "/dev/"))}
    assert not unexpected, unexpected


async def test_policy_reports_effective_hardening(make_backend):
    backend = make_backend(network="bridge", cap_add=["NET_BIND_SERVICE"], pids_limit=99)
    policy = backend.policy()
    assert policy["network"] == "bridge"
    assert policy["capabilities"] == "none + NET_BIND_SERVICE"
    assert policy["pids_limit"] == "99"
    assert policy["read_only_root"] == "true" and policy["no_new_privileges"] == "true"
    assert policy["user"] == "1000:1000" and policy["host_mounts"] == "none" and policy["pull"] == "false"
    assert backend.capabilities.network_policy == "bridge"


async def test_options_are_validated():
    with pytest.raises(ValueError):
        DockerOptions(user="sandbox")
    with pytest.raises(ValueError):
        DockerOptions(no_such_option=1)


async def test_bridge_network_and_cap_add_take_effect(make_backend):
    backend = make_backend(network="bridge", cap_add=["NET_BIND_SERVICE"], user="0:0")
    sb = await backend.sandbox("net")
    code, out, _ = await run(sb, "ls /sys/class/net; grep CapEff /proc/self/status")
    names = out.split()
    assert "eth0" in names
    assert int(out.split("CapEff:")[1].split()[0], 16) == 1 << 10  # CAP_NET_BIND_SERVICE


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


async def test_exact_env_cwd_and_session_leader(shared):
    sb = await shared.sandbox("proc")
    env = {"PATH": "/usr/bin:/bin", "ODD": "a b\tc\n'\"$x", "UNI": "ü😀", "EMPTY": ""}
    proc = await sb.spawn(["/usr/bin/env", "-0"], cwd="/tmp", env=env)
    await proc.close_stdin()
    out, err = await drain(proc)
    assert await proc.wait() == 0 and err == b""
    got = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
    assert got == env
    code, out, _ = await run(sb, "echo $$; read -r stat < /proc/self/stat; set -- ${stat##*) }; echo $4 $3; pwd",
                             cwd="/tmp")
    pid, sid_pgrp, cwd = out.splitlines()
    assert sid_pgrp.split() == [pid, pid], "the spawned shell must lead its own session and group"
    assert cwd == "/tmp"


async def test_exit_codes_streams_and_exact_bytes(shared):
    sb = await shared.sandbox("proc")
    code, out, err = await run(sb, "printf 'out\\0x'; printf err >&2; exit 7")
    assert (code, out, err) == (7, "out\0x", "err")
    # 6 MB through the pipe, more than the stream's pause threshold, byte-exact.
    proc = await sb.spawn(["bash", "-c", "head -c 6000000 /dev/urandom | tee /tmp/big | sha256sum >&2; cat /tmp/big"],
                          cwd=sb.root, env=ENV)
    await proc.close_stdin()
    out, err = await drain(proc)
    assert await proc.wait() == 0
    assert len(out) == 6000000
    assert hashlib.sha256(out).hexdigest() == err.split()[0].decode()


async def test_stdin_streams_and_eof(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["cat"], cwd=sb.root, env=ENV)
    for i in range(50):
        await proc.write(b"line %d\n" % i)
        assert await read_until(proc.stdout, b"line %d\n" % i) == b"line %d\n" % i
    await proc.close_stdin()
    assert await proc.stdout.read() == b""
    assert await proc.wait() == 0


async def test_signal_exit_is_negative(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["bash", "-c", "kill -TERM $$"], cwd=sb.root, env=ENV)
    await proc.close_stdin()
    await drain(proc)
    assert await proc.wait() == -signal.SIGTERM


async def test_signal_session_kills_the_tree(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["bash", "-c", "sleep 300 & (sleep 301 & wait) & echo $$; wait"], cwd=sb.root, env=ENV)
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    code, out, _ = await run(sb, f"ps -o pid= -s {sid} | wc -l")
    assert int(out) >= 4
    await sb.signal_session(sid, signal.SIGKILL)
    await asyncio.wait_for(proc.wait(), 10)
    deadline = time.monotonic() + 10
    while True:
        code, out, _ = await run(sb, f"ps -o pid=,args= -s {sid}")
        if not out.strip() or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert out.strip() == "", f"left running in session {sid}: {out}"


async def test_signal_session_while_busy_and_term(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["bash", "-c", "trap 'echo got-term; exit 3' TERM; echo $$; while :; do sleep 0.05; done"],
                          cwd=sb.root, env=ENV)
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    await sb.signal_session(sid, signal.SIGTERM)
    assert b"got-term" in await read_until(proc.stdout, b"got-term")
    assert await asyncio.wait_for(proc.wait(), 10) == 3


async def test_sigint_right_after_start_is_not_lost(shared):
    """A signal that lands while bash forks its child must reach the child too (one group
    kill, not a pid-by-pid walk that misses the child; bash then ignores its own SIGINT)."""
    sb = await shared.sandbox("proc")
    survivors = 0
    for _ in range(20):
        proc = await sb.spawn(["bash", "-c", "echo $$; sleep 60; true"], cwd=sb.root, env=ENV)
        sid = int((await read_until(proc.stdout, b"\n")).strip())
        await sb.signal_session(sid, signal.SIGINT)
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            survivors += 1
            await sb.signal_session(sid, signal.SIGKILL)
            await proc.wait()
        await proc.detach()
    assert survivors == 0


async def test_spawn_missing_program_and_bad_env(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["/no/such/program"], cwd=sb.root, env=ENV)
    await proc.close_stdin()
    out, err = await drain(proc)
    assert await proc.wait() == 127 and b"No such file" in err
    with pytest.raises(BackendError) as info:
        await sb.spawn(["true"], cwd=sb.root, env={"A=B": "x"})
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT


# ---------------------------------------------------------------------------
# PTY
# ---------------------------------------------------------------------------


async def test_pty_size_resize_and_ctrl_c(shared):
    sb = await shared.sandbox("pty")
    env = {**ENV, "TERM": "xterm"}
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c",
                           "stty size; tty -s && echo is-tty; read line; stty size; "
                           "trap 'echo got-int; exit 4' INT; echo ready; while :; do sleep 0.05; done"],
                          cwd=sb.root, env=env, pty=PtySize(rows=33, cols=101))
    assert proc.stderr is None
    out = await read_until(proc.stdout, b"is-tty")
    assert b"33 101" in out
    await proc.resize(PtySize(rows=40, cols=132))
    await proc.write(b"go\r")
    out = await read_until(proc.stdout, b"ready")
    assert b"40 132" in out
    await proc.write(b"\x03")
    assert b"got-int" in await read_until(proc.stdout, b"got-int")
    assert await asyncio.wait_for(proc.wait(), 10) == 4


async def test_pty_env_is_exact(shared):
    sb = await shared.sandbox("pty")
    proc = await sb.spawn(["/usr/bin/env"], cwd=sb.root, env={"PATH": "/usr/bin:/bin", "TERM": "xterm-256color"},
                          pty=PtySize(24, 80))
    out = b""
    while chunk := await proc.stdout.read():
        out += chunk
    assert sorted(out.decode().split()) == ["PATH=/usr/bin:/bin", "TERM=xterm-256color"]
    assert await proc.wait() == 0


# ---------------------------------------------------------------------------
# Archives
# ---------------------------------------------------------------------------


def _tar(members: dict[str, bytes], uid: int = 4242) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid, info.uname = len(data), 0o640, uid, uid, "someone"
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_owned_tar_rewrites_owners_and_adds_parents():
    long_name = "deep/" + "d" * 150 + "/file.txt"
    src = _tar({long_name: b"x" * 1000, "top.txt": b"hi"})
    out = b"".join(_owned_tar(io.BytesIO(src), 1000, 1001))
    members = tarfile.open(fileobj=io.BytesIO(out)).getmembers()
    assert [m.name for m in members] == ["deep", "deep/" + "d" * 150, long_name, "top.txt"]
    assert all((m.uid, m.gid) == (1000, 1001) for m in members)
    assert tarfile.open(fileobj=io.BytesIO(out)).extractfile(long_name).read() == b"x" * 1000


async def test_archives_round_trip_owned_by_the_user(shared):
    sb = await shared.sandbox("files")
    payload = bytes(range(256)) * 4000
    archive = _tar({"a/b/data.bin": payload, "note.txt": b"hello"})
    await sb.put_archive(f"{sb.root}/in/deeper", chunks(archive[:1000], archive[1000:]))
    code, out, _ = await run(sb, "cd in && find . -printf '%u:%g %m %p\\n' | sort")
    assert code == 0
    lines = out.splitlines()
    assert all(line.startswith("1000:1000") for line in lines), lines
    assert "1000:1000 640 ./deeper/a/b/data.bin" in lines
    code, _, _ = await run(sb, "echo more >> in/deeper/note.txt")  # the user owns what was uploaded
    assert code == 0
    data = b""
    async for chunk in sb.get_archive(f"{sb.root}/in/deeper"):
        data += chunk
    tar = tarfile.open(fileobj=io.BytesIO(data))
    assert tar.extractfile("deeper/a/b/data.bin").read() == payload
    assert tar.extractfile("deeper/note.txt").read() == b"hellomore\n"


async def test_get_archive_of_a_single_file_and_missing_path(shared):
    sb = await shared.sandbox("files")
    await sb.put_archive(sb.root, chunks(tar_single_file("one.txt", b"1")))
    data = b""
    async for chunk in sb.get_archive(f"{sb.root}/one.txt"):
        data += chunk
    assert [m.name for m in tarfile.open(fileobj=io.BytesIO(data))] == ["one.txt"]
    with pytest.raises(BackendError) as info:
        async for _ in sb.get_archive(f"{sb.root}/missing"):
            pass
    assert info.value.kind is ErrorKind.NOT_FOUND


async def test_symlinked_path_leading_out_is_refused(shared):
    """The engine resolves links as root: a link to /etc/shadow must not leak it. Paths are
    resolved in the container first, so a link out of the task directory is refused outright."""
    sb = await shared.sandbox("files")
    code, _, _ = await run(sb, "ln -sfn /etc linked")
    assert code == 0
    for name in ("linked/shadow", "linked/hostname", "linked"):
        with pytest.raises(BackendError) as info:
            async for _ in sb.get_archive(f"{sb.root}/{name}"):
                pass
        assert info.value.kind is ErrorKind.INVALID_ARGUMENT
        assert "linked -> /etc" in info.value.message


async def test_bad_tar_is_invalid_argument(shared):
    sb = await shared.sandbox("files")
    with pytest.raises(BackendError) as info:
        await sb.put_archive(sb.root, chunks(b"not a tar" * 100))
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT


# ---------------------------------------------------------------------------
# The container's life
# ---------------------------------------------------------------------------


async def _container_call(backend: DockerBackend, fn):
    return await backend.call(fn, "test")


async def test_container_removed_under_a_command(make_backend):
    backend = make_backend()
    sb = await backend.sandbox("life")
    assert await run(sb, "echo kept > file") == (0, "", "")
    proc = await sb.spawn(["bash", "-c", "echo started; sleep 300"], cwd=sb.root, env=ENV)
    await read_until(proc.stdout, b"started")
    old = sb.container.id
    await _container_call(backend, lambda api: api.remove_container(old, force=True))
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(read_until(proc.stdout, b"never"), 15)
    assert info.value.kind is ErrorKind.LOST and "container" in info.value.message
    with pytest.raises(BackendError) as info:
        await proc.wait()
    assert info.value.kind is ErrorKind.LOST
    sb = await backend.sandbox("life")
    assert await run(sb, "cat file") == (0, "kept\n", "")
    assert sb.container.id != old
    notice = sb.take_notice()
    assert notice and "recreated" in notice
    assert sb.take_notice() is None


async def test_container_killed_under_a_command_restarts(make_backend):
    backend = make_backend()
    sb = await backend.sandbox("life")
    proc = await sb.spawn(["bash", "-c", "echo started; sleep 300"], cwd=sb.root, env=ENV)
    await read_until(proc.stdout, b"started")
    cid = sb.container.id
    await _container_call(backend, lambda api: api.kill(cid))
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(read_until(proc.stdout, b"never"), 15)
    assert info.value.kind is ErrorKind.LOST
    assert (await run(sb, "echo again"))[:2] == (0, "again\n")
    assert sb.container.id == cid
    assert "restarted" in (sb.take_notice() or "")


async def test_killed_process_is_not_mistaken_for_a_lost_container(shared):
    """pkill also hits the container's own `sleep infinity` if it ran as the user; it does not."""
    sb = await shared.sandbox("life2")
    proc = await sb.spawn(["bash", "-c", "echo up; exec sleep 300"], cwd=sb.root, env=ENV)
    await read_until(proc.stdout, b"up\n")  # an exec's process starts after exec_start returns
    code, _, _ = await run(sb, "pkill -KILL -x sleep")
    assert code == 0
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    assert sb.take_notice() is None


async def test_daemon_restart_reattaches_and_ends_leftovers(make_backend, tmp_path):
    state = tmp_path / "daemon"
    first = make_backend(state_dir=state)
    sb = await first.sandbox("restart")
    await run(sb, "echo persisted > f")
    proc = await sb.spawn(["bash", "-c", "echo $$; sleep 300"], cwd=sb.root, env=ENV)
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    cid = sb.container.id
    await proc.detach()
    await first.close()  # the daemon goes away without ending its processes

    second = make_backend(state_dir=state)
    await second.start()
    assert second.orphans_ended >= 1
    sb2 = await second.sandbox("restart")
    assert sb2.container.id == cid
    assert await run(sb2, "cat f") == (0, "persisted\n", "")
    code, out, _ = await run(sb2, f"ps -o pid= -s {sid}")
    assert out.strip() == ""
    assert sb2.take_notice() is None


async def test_changed_options_replace_the_container(make_backend, tmp_path):
    state = tmp_path / "daemon"
    first = make_backend(state_dir=state)
    cid = (await first.sandbox("opts")).container.id
    await first.close()
    second = make_backend(state_dir=state, pids_limit=77)
    sb = await second.sandbox("opts")
    assert sb.container.id != cid
    assert await _cgroup_value(sb, "pids/pids.max", "pids.max") == "77"


async def test_per_task_containers(make_backend):
    backend = make_backend(per_task=True)
    a = await backend.sandbox("ta")
    b = await backend.sandbox("tb")
    assert a.container.id != b.container.id
    await run(a, "echo a > mine")
    code, out, _ = await run(b, "ls /workspace")
    assert out.split() == ["tb"]
    await a.release(remove_files=True)

    def gone(api):
        return api.containers(all=True, filters={"id": a.container.id})

    assert await _container_call(backend, gone) == []


async def test_release_removes_task_files(shared):
    sb = await shared.sandbox("gone")
    await run(sb, "echo x > f")
    await sb.release(remove_files=True)
    other = await shared.sandbox("proc")
    code, out, _ = await run(other, "ls /workspace")
    assert "gone" not in out.split()


async def test_engine_unreachable_is_unavailable(make_backend, tmp_path):
    backend = make_backend(docker_host=f"unix://{tmp_path}/no-engine.sock")
    await backend.start()  # must not raise
    health = await backend.health()
    assert not health.available and "cannot reach the Docker engine" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t")
    assert info.value.kind is ErrorKind.UNAVAILABLE


async def test_missing_image_is_a_precondition(make_backend):
    backend = make_backend(image="executor-no-such-image:latest")
    health = await backend.health()
    assert not health.available and "make sandbox-image" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION and "make sandbox-image" in info.value.message


async def test_invalid_task_id(shared):
    with pytest.raises(BackendError) as info:
        await shared.sandbox("../etc")
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT


@pytest.mark.parametrize("spawner", [True, False], ids=["spawner", "exec-per-process"])
async def test_user_cannot_stop_the_container(make_backend, spawner):
    """`kill -9 -1` as the sandbox user ends its own processes, not the container."""
    backend = make_backend(spawner=spawner)
    sb = await backend.sandbox("killall")
    cid = sb.container.id
    sleeper = await sb.spawn(["bash", "-c", "echo up; exec sleep 300"], cwd=sb.root, env=ENV)
    await read_until(sleeper.stdout, b"up\n")
    if spawner:
        # The spawner runs as the sandbox user too: it dies, and the processes it started are
        # reported lost with that reason (never as a normal exit).
        with pytest.raises(BackendError) as info:
            await run(sb, "kill -9 -1; echo survived")
        assert info.value.kind is ErrorKind.LOST and "spawner" in info.value.message
        assert "kill -9 -1" in info.value.message
        with pytest.raises(BackendError) as info:
            await asyncio.wait_for(sleeper.wait(), 10)
        assert info.value.kind is ErrorKind.LOST
    else:
        # bash's kill -1 spares bash itself, not its reaper (same user): that exec reports the
        # reaper's SIGKILL, and the output still arrives.
        code, out, _ = await run(sb, "kill -9 -1; echo survived")
        assert (code, out) == (-signal.SIGKILL, "survived\n")
        assert await asyncio.wait_for(sleeper.wait(), 10) == -signal.SIGKILL
    state = await _container_call(backend, lambda api: api.inspect_container(cid)["State"])
    assert state["Running"]
    assert await run(sb, "echo fine") == (0, "fine\n", "")
    assert sb.take_notice() is None
    # The signalling helper died with everything else; the next signal starts a new one.
    proc = await sb.spawn(["bash", "-c", "echo $$; sleep 300"], cwd=sb.root, env=ENV)
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    await sb.signal_session(sid, signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGTERM


async def test_image_without_the_env_program_is_a_precondition(make_backend):
    backend = make_backend(env_program="/opt/missing/env")
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION and "/opt/missing/env" in info.value.message


async def test_detach_ends_reads_and_wait_still_answers(shared):
    sb = await shared.sandbox("proc")
    proc = await sb.spawn(["bash", "-c", "echo $$; sleep 300"], cwd=sb.root, env=ENV)
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    reader = asyncio.ensure_future(proc.stdout.read())
    await proc.detach()
    assert await asyncio.wait_for(reader, 10) == b""
    waiter = asyncio.ensure_future(proc.wait())
    await asyncio.sleep(0.2)
    assert not waiter.done(), "the process still runs after a detach"
    await sb.signal_session(sid, signal.SIGKILL)
    assert await asyncio.wait_for(waiter, 10) == -signal.SIGKILL


async def test_memory_limit_kills_the_process_not_the_container(make_backend):
    backend = make_backend(mem_limit="96m")
    sb = await backend.sandbox("oom")
    cid = sb.container.id
    proc = await sb.spawn(["python3", "-c", "x = bytearray(400 * 2**20); print('allocated')"], cwd=sb.root, env=ENV)
    await proc.close_stdin()
    out, _ = await asyncio.wait_for(drain(proc), 60)
    assert out == b"" and await proc.wait() == -signal.SIGKILL
    state = await _container_call(backend, lambda api: api.inspect_container(cid)["State"])
    assert state["Running"]
    assert await run(sb, "echo alive") == (0, "alive\n", "")
    assert sb.take_notice() is None


async def test_remove_on_close_keeps_the_files(make_backend, tmp_path):
    state = tmp_path / "daemon"
    first = make_backend(state_dir=state, remove_on_close=True)
    sb = await first.sandbox("roc")
    await run(sb, "echo still > f")
    cid = sb.container.id
    await first.close()
    second = make_backend(state_dir=state, remove_on_close=True)
    assert await _container_call(second, lambda api: api.containers(all=True, filters={"id": cid})) == []
    sb2 = await second.sandbox("roc")
    assert await run(sb2, "cat f") == (0, "still\n", "")
    assert sb2.take_notice() is None


# ---------------------------------------------------------------------------
# Scale: the pids limit and the number of tasks agree (issue 19)
# ---------------------------------------------------------------------------


async def test_a_task_beyond_the_pids_limit_is_refused_naming_it(make_backend):
    # pids_limit 15 holds (15 - 4 - 5) // 2 = 3 tasks: each needs its shell and the shell's reaper,
    # the container 4 (with the spawner), and one start in flight 5 for a moment.
    backend = make_backend(pids_limit=15, max_parallel_starts=1, warm_shells=0)
    shells = []
    for i in range(3):
        sb = await backend.sandbox(f"fit{i}")
        proc = await sb.spawn(["bash", "--noprofile", "--norc"], cwd=sb.root, env=ENV)
        await proc.write(b"echo up\n")
        await read_until(proc.stdout, b"up\n", timeout=60)
        shells.append((sb, proc))
    with pytest.raises(BackendError) as err:
        await backend.sandbox("one-too-many")
    assert err.value.kind is ErrorKind.RESOURCE_EXHAUSTED
    assert "pids_limit 15" in err.value.message and "3 task(s)" in err.value.message, err.value.message
    assert "3 are open" in err.value.message, err.value.message
    # a task already admitted is attached again; a released one makes room
    assert (await backend.sandbox("fit0")).root == shells[0][0].root
    sb, proc = shells.pop()
    await proc.close_stdin()
    await proc.wait()
    await proc.detach()
    await sb.release()
    late = await backend.sandbox("one-too-many")
    code, out, _ = await run(late, "pwd")
    assert (code, out.strip()) == (0, late.root)
    for _, proc in shells:
        await proc.close_stdin()
        await proc.wait()
        await proc.detach()


FILL_PIDS = r"""
import os, signal, sys, time
kids = []
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids.append(pid)
os.kill(kids[-1], signal.SIGKILL)
os.waitpid(kids[-1], 0)  # exactly one pid free: the next exec takes it, its fork finds none
print("full", len(kids), flush=True)
sys.stdin.read()
for k in kids[:-1]:
    os.kill(k, signal.SIGKILL)
"""


async def test_a_fork_failure_at_start_names_the_pids_limit(make_backend):
    backend = make_backend(pids_limit=24, max_parallel_starts=1)
    sb = await backend.sandbox("forks")
    await sb.signal_session(1, 0)  # the signal helper runs (it holds a pid of its own)
    filler = await sb.spawn_helper(["python3", "-I", "-S", "-c", FILL_PIDS], cwd=sb.root, env=ENV)
    await read_until(filler.stdout, b"full", timeout=60)
    try:
        with pytest.raises(BackendError) as err:
            proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "echo started"], cwd=sb.root, env=ENV)
            out, _ = await asyncio.wait_for(drain(proc), 30)
            await proc.wait()
            raise AssertionError(f"the spawn ran: {out!r}")
        assert err.value.kind is ErrorKind.RESOURCE_EXHAUSTED, err.value
        assert "fork failed" in err.value.message, err.value.message  # the reaper told us, not a guess
        assert "pids limit is reached" in err.value.message and "pids_limit 24" in err.value.message, err.value.message
    finally:
        await filler.close_stdin()
        await filler.wait()
        await filler.detach()
    code, out, _ = await run(sb, "echo again")
    assert (code, out) == (0, "again\n")


async def test_max_parallel_starts_is_validated_and_bounds_the_starts(make_backend):
    with pytest.raises(ValueError):
        DockerOptions(max_parallel_starts=0)
    backend = make_backend(max_parallel_starts=2)
    sandboxes = [await backend.sandbox(f"par{i}") for i in range(6)]
    results = await asyncio.gather(*(run(sb, "echo $PWD") for sb in sandboxes))
    assert [r[:2] for r in results] == [(0, sb.root + "\n") for sb in sandboxes]
    assert backend.start_gate()._value == 2  # every start gave its slot back


async def test_first_spawn_makes_the_task_directory_owned_by_the_user(make_backend):
    backend = make_backend()
    sb = await backend.sandbox("fresh")
    code, out, _ = await run(sb, "pwd; stat -c '%u:%g %a' .", cwd=sb.root)
    assert (code, out.split("\n")[:2]) == (0, [sb.root, "1000:1000 755"])


def test_containers_started_together_are_all_remembered(tmp_path):
    """Per-task containers start in parallel Engine API threads, each noting its container: none of
    the notes may fail the start (it did: one renamed another's temporary file away, ENOENT) or be lost."""
    import json
    import threading

    backend = DockerBackend("dk", DockerOptions(labels=LABELS), state_dir=tmp_path / "state")
    start = threading.Barrier(32)
    errors: list[BaseException] = []

    def starts(i: int) -> None:
        start.wait()
        try:
            backend.remember(f"task-{i}", f"{i:064x}")
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=starts, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    known = json.loads((tmp_path / "state" / "containers.json").read_text())
    assert known == {f"task-{i}": f"{i:064x}" for i in range(32)}
    assert backend.remembered("task-7") == f"{7:064x}"


def test_a_state_disk_that_refuses_the_note_does_not_fail_the_container(tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / "containers.json").mkdir()  # replacing a directory with a file fails, as a full disk would
    backend = DockerBackend("dk", DockerOptions(labels=LABELS), state_dir=state)
    with caplog.at_level("WARNING", logger="executor.backends.docker"):
        backend.remember("shared", "ab" * 32)
    assert any("could not record container abababababab" in r.getMessage() for r in caplog.records)


def test_the_daemons_own_file_errors_are_not_called_an_unreachable_engine():
    import requests

    from executor.backends.docker.options import _docker_error

    own = _docker_error(FileNotFoundError(2, "No such file or directory", "/state/containers.json.tmp"), "preparing x")
    assert own.kind is ErrorKind.INTERNAL and "cannot reach the Docker engine" not in own.message
    assert "/state/containers.json.tmp" in own.message
    full = _docker_error(OSError(28, "No space left on device", "/state/upload"), "uploading")
    assert full.kind is ErrorKind.RESOURCE_EXHAUSTED
    gone = _docker_error(requests.exceptions.ConnectionError(
        "('Connection aborted.', FileNotFoundError(2, 'No such file or directory'))"), "preparing x")
    assert gone.kind is ErrorKind.UNAVAILABLE and "cannot reach the Docker engine" in gone.message
    reset = _docker_error(ConnectionResetError(104, "Connection reset by peer"), "reading")
    assert reset.kind is ErrorKind.UNAVAILABLE


async def test_sessions_signalled_together_share_one_walk(shared):
    """A shutdown signals every running command at once: the container's signal helper walked them one
    at a time, a whole /proc walk each, and under load ran out of the shutdown's time with commands
    left running. Sessions signalled in one turn of the loop go in one request and one walk."""
    sb = await shared.sandbox("batchkill")
    procs = [await sb.spawn(["bash", "-c", "setsid sleep 3007 & echo $$; exec sleep 3007"], cwd=sb.root, env=ENV)
             for _ in range(8)]
    sids = [int((await read_until(p.stdout, b"\n")).strip()) for p in procs]
    await sb.signal_session(sids[0], 0)  # the helper is up: what follows is the batch alone
    killer = sb.container.killer
    before = killer._seq
    await asyncio.gather(*(sb.signal_session(sid, signal.SIGKILL) for sid in sids))
    assert killer._seq - before == 1, f"{killer._seq - before} round trips to signal 8 sessions"
    for proc in procs:
        assert await asyncio.wait_for(proc.wait(), 15) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while True:
        code, out, _ = await run(sb, "ps -eo stat=,args= | grep -v '^Z' | grep -c 'sleep 3007$' || true")
        if out.strip() == "0" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert out.strip() == "0", f"{out.strip()} sleeps left running (the setsid ones escape a session walk)"

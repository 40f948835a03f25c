"""The singularity backend against a real Apptainer (provisioned by scripts/apptainer.sh).

Skips, saying why, when Apptainer cannot be provisioned here; the argv tier
(tests/test_singularity_argv.py) still runs then.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import tarfile
import time
from pathlib import Path

import pytest
import pytest_asyncio

from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.singularity import SingularityBackend, SingularityOptions
from tests.infra import singularity as infra

pytestmark = pytest.mark.slow

ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/workspace",
       "LANG": "C.UTF-8", "TERM": "dumb"}


def make_backend(state_dir: Path, **options) -> SingularityBackend:
    opts = infra.provision()
    opts.pop("kind")
    return SingularityBackend("sing", SingularityOptions(**opts, **options), state_dir=state_dir)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def backend(tmp_path_factory):
    b = make_backend(tmp_path_factory.mktemp("sing") / "backends" / "sing", memory="256M")
    await b.start()
    yield b
    await b.close()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def sandbox(backend):
    sb = await backend.sandbox("real-1")
    yield sb
    await sb.release(remove_files=True)


async def run(sb, script: str, env=None, cwd=None) -> tuple[int, bytes, bytes]:
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", script], cwd=cwd or sb.root, env=env or ENV)
    await proc.close_stdin()
    out, err = await drain(proc)
    return await proc.wait(), out, err


async def wait_until(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_health_and_policy(backend):
    health = await backend.health()
    assert health.available, health.reason
    assert health.details["version"].startswith("apptainer version")
    assert backend.policy()["network"] == "none (only lo)"


async def test_spawn_env_exact_cwd_and_session_leader(sandbox):
    env = {**ENV, "NASTY": 'multi\nline $HOME `id` "q" \\ end\\', "EMPTY": ""}
    code, out, err = await run(sandbox, 'echo "$PWD"; read -r _ _ _ _ _ sid _ < /proc/$$/stat; '
                                        'echo "$$ $sid"; exec env -0', env=env)
    assert code == 0, err
    cwd, ids, env_out = out.split(b"\n", 2)
    assert cwd == b"/workspace"
    pid, sid = ids.split()
    assert pid == sid
    got = dict(item.split("=", 1) for item in env_out.decode().split("\0") if item)
    for added_by_bash in ("PWD", "SHLVL", "_"):
        got.pop(added_by_bash, None)
    assert got == env


async def test_task_dir_is_bound_read_write(sandbox):
    code, _, err = await run(sandbox, "echo hello > /workspace/from-inside")
    assert code == 0, err
    assert (sandbox.host_dir / "from-inside").read_text() == "hello\n"


async def test_network_none_leaves_only_lo(sandbox):
    code, out, err = await run(sandbox, "ls /sys/class/net")
    assert code == 0, err
    assert out.split() == [b"lo"]


@pytest.mark.parametrize("walk", ["host", "inside"])
async def test_signal_session_kills_the_tree(sandbox, monkeypatch, walk):
    if walk == "inside":  # the base class's /proc walk through an exec, used when the
        monkeypatch.setattr(sandbox, "pid_ns", None)  # instance's PID namespace is not readable
    else:
        assert sandbox.pid_ns is not None
    proc = await sandbox.spawn(["bash", "--noprofile", "--norc", "-c", 'sleep 300 & echo "$$ $!"; wait'],
                               cwd=sandbox.root, env=ENV)
    line = await proc.stdout.read()
    sid, child = line.split()
    await sandbox.signal_session(int(sid), signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGTERM

    async def child_gone() -> bool:
        code, out, _ = await run(sandbox, f"test -d /proc/{child.decode()} && echo alive || echo gone")
        return out.strip() == b"gone"

    assert await wait_until(child_gone)


async def test_processes_of_one_instance_see_each_other_only(backend, sandbox):
    other = await backend.sandbox("real-2")
    try:
        proc = await other.spawn(["bash", "--noprofile", "--norc", "-c", "echo $$; exec sleep 300"],
                                 cwd=other.root, env=ENV)
        pid = int((await proc.stdout.read()).strip())
        code, out, _ = await run(other, f"test -d /proc/{pid} && echo seen")
        assert out.strip() == b"seen"
        _, listing, _ = await run(sandbox, "ls /proc | grep -c '^[0-9]'")
        assert int(listing) < 10  # its own PID namespace: a handful of processes, not the host's
        await other.signal_session(pid, signal.SIGKILL)
        assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    finally:
        await other.release(remove_files=True)


async def test_exit_code_without_signal_is_kept(sandbox):
    code, _, _ = await run(sandbox, "exit 143")
    assert code == 143


async def test_persistent_shell_over_stdin(sandbox):
    proc = await sandbox.spawn(["bash", "--noprofile", "--norc"], cwd=sandbox.root, env=ENV)
    await proc.write(b"cd /tmp; X=42\n")
    await proc.write(b"echo $PWD $X\n")
    assert (await proc.stdout.read()).strip() == b"/tmp 42"
    await proc.close_stdin()
    assert await proc.wait() == 0


async def test_pty_size_resize_and_ctrl_c(sandbox):
    proc = await sandbox.spawn(["bash", "--noprofile", "--norc", "-i"], cwd=sandbox.root,
                               env={**ENV, "TERM": "xterm", "PS1": "$ "}, pty=PtySize(30, 90))
    assert proc.stderr is None
    buf = bytearray()

    async def read_until(token: bytes, timeout: float = 10.0) -> None:
        async def more() -> None:
            while token not in buf:
                chunk = await proc.stdout.read()
                assert chunk, f"EOF before {token!r}: {bytes(buf)!r}"
                buf.extend(chunk)
        await asyncio.wait_for(more(), timeout)

    await proc.write(b"stty size; tty; echo mark-$((40+2))\n")  # the echo of the input has no "mark-42"
    await read_until(b"mark-42")
    assert b"30 90" in buf
    assert b"/dev/pts/" in buf  # a pty of the instance's own devpts: `tty` can name it
    await proc.resize(PtySize(40, 120))
    await proc.write(b"stty size\n")
    await read_until(b"40 120")
    buf.clear()
    await proc.write(b"sleep 100\n")
    await asyncio.sleep(0.3)
    await proc.write(b"\x03")
    await proc.write(b"echo after=$?\n")  # interactive bash drops the rest of an interrupted line
    await read_until(b"after=130")
    await proc.write(b"exit 5\n")
    while await proc.stdout.read():
        pass
    assert await proc.wait() == 5
    await proc.detach()


async def test_archives_round_trip(sandbox):
    async def chunks():
        yield tar_single_file("hello.txt", b"hi there\n")

    await sandbox.put_archive("/workspace/up", chunks())
    assert (sandbox.host_dir / "up" / "hello.txt").read_bytes() == b"hi there\n"
    data = b"".join([c async for c in sandbox.get_archive("/workspace/up/hello.txt")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("hello.txt").read() == b"hi there\n"


async def test_memory_limit_applies_as_root(backend, sandbox):
    if os.geteuid() != 0:
        assert "NOT APPLIED" in backend.policy()["limits"]
        return
    lines = Path(f"/proc/{sandbox.instance_pid}/cgroup").read_text().splitlines()
    memory = next(line.split(":", 2)[2] for line in lines if ":memory:" in line or line.startswith("0::"))
    candidates = [Path("/sys/fs/cgroup/memory") / memory.lstrip("/") / "memory.limit_in_bytes",
                  Path("/sys/fs/cgroup") / memory.lstrip("/") / "memory.max"]
    limit = next(p.read_text().strip() for p in candidates if p.exists())
    assert int(limit) == 256 * 1024 * 1024


async def test_release_stops_and_start_stops_leftovers(tmp_path):
    state = tmp_path / "backends" / "sing"
    first = make_backend(state)
    sb = await first.sandbox("left-over")
    assert sb.instance_alive()
    # another daemon's instance must survive our restart
    stranger = make_backend(tmp_path / "other" / "backends" / "sing")
    other = await stranger.sandbox("left-over")
    try:
        restarted = make_backend(state)  # a new daemon on the same state dir
        await restarted.start()
        assert restarted.leftovers_stopped == 1
        names = {i["instance"] for i in await restarted.cli.instances()}
        assert sb.instance not in names and other.instance in names
        assert not sb.instance_alive()
        with pytest.raises(BackendError) as info:
            await sb.spawn(["true"], cwd="/workspace", env=ENV)
        assert info.value.kind is ErrorKind.LOST
    finally:
        await other.release(remove_files=True)
    assert other.instance not in {i["instance"] for i in await stranger.cli.instances()}


async def test_instance_dying_under_a_process_is_lost(backend):
    sb = await backend.sandbox("real-dies")
    proc = await sb.spawn(["sleep", "100"], cwd=sb.root, env=ENV)
    await backend.cli.stop(sb.instance)  # as if an admin or the OOM killer ended it
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 30)
    assert info.value.kind is ErrorKind.LOST and sb.instance in info.value.message
    health = await backend.health()
    assert health.available and "real-dies" in health.details["lost_instances"]
    fresh = await backend.sandbox("real-dies")
    assert fresh is not sb and fresh.instance_alive()
    await fresh.release(remove_files=True)


async def test_reopening_a_closed_task_right_away(backend):
    sb = await backend.sandbox("real-reopen")
    code, _, _ = await run(sb, "echo kept > /workspace/f")
    assert code == 0
    await sb.release()  # returns once the processes are gone; Apptainer's cleanup continues
    assert not sb.instance_alive()
    again = await backend.sandbox("real-reopen")
    assert again is not sb and again.instance == sb.instance and again.instance_alive()
    code, out, _ = await run(again, "cat /workspace/f")
    assert (code, out) == (0, b"kept\n")
    await again.release(remove_files=True)
    assert not again.host_dir.exists()


@pytest.mark.parametrize("overlay, persists", [("image", True), ("dir", True), ("writable_tmpfs", False)])
async def test_overlays(tmp_path, overlay, persists):
    backend = make_backend(tmp_path / "backends" / "sing", overlay=overlay, overlay_size_mb=64)
    sb = await backend.sandbox("ov")
    code, out, err = await run(sb, "echo written > /opt/outside-workdir && cat /opt/outside-workdir")
    assert (code, out) == (0, b"written\n"), err
    await sb.release()
    again = await backend.sandbox("ov")
    try:
        code, out, _ = await run(again, "cat /opt/outside-workdir 2>/dev/null")
        assert (code == 0 and out == b"written\n") is persists
    finally:
        await again.release(remove_files=True)
    assert not backend._overlay_path("ov").exists()


async def test_read_only_image_without_overlay(sandbox):
    code, _, err = await run(sandbox, "touch /opt/nope")
    assert code != 0 and b"Read-only file system" in err

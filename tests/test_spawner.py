"""The in-sandbox spawner's protocol (backends/_spawner.py), run on the host over plain pipes: no
container needed. Flow control per process, byte-exact stdio, exit codes, start failures, the
spawner's death. (Through a real container: tests/test_docker_scale.py and the conformance suite.)"""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import sys

import pytest

from executor.backends._spawner import WINDOW, Spawner, spawner_argv
from executor.backends.base import BackendError, ErrorKind, PtySize, drain

ENV = ["/usr/bin/env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"]


@pytest.fixture
async def spawner(tmp_path):
    argv = spawner_argv()
    argv[2] = argv[2].replace('for p in ', f'for p in {sys.executable} ', 1)  # this python3 first
    proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    mux = Spawner(lambda data: proc.stdin.write(data), "test spawner")

    async def pump() -> None:
        while chunk := await proc.stdout.read(1 << 18):
            mux.feed(chunk)
        mux.lost(BackendError("the spawner exited", ErrorKind.LOST))

    reader = asyncio.ensure_future(pump())
    await asyncio.wait_for(mux.hello, 10)
    mux.test_proc = proc
    yield mux
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    await reader


async def start(mux: Spawner, script: str, cwd: str = "/", pty: PtySize | None = None, mkdir: str | None = None):
    proc = mux.spawn([*ENV, "sh", "-c", script], cwd=cwd, mkdir=mkdir, pty=pty)
    await asyncio.wait_for(proc.started(), 10)
    return proc


async def test_output_exit_codes_and_signals(spawner, tmp_path):
    proc = await start(spawner, 'echo "out $PWD"; echo err >&2; exit 7', cwd=str(tmp_path))
    out, err = await asyncio.wait_for(drain(proc), 10)
    assert (out, err, await proc.wait()) == (f"out {tmp_path}\n".encode(), b"err\n", 7)
    proc = await start(spawner, "kill -TERM $$; sleep 5")
    await drain(proc)
    assert await proc.wait() == -signal.SIGTERM
    # exactly the environment given (env -i), the process leads a new session under a reaper
    proc = await start(spawner, 'env; read -r s < /proc/$$/stat; set -- ${s##*) }; echo "sid=$4 pid=$$"')
    out, _ = await drain(proc)
    lines = out.decode().splitlines()
    assert sorted(lines[:-1]) == ["LANG=C.UTF-8", "PATH=/usr/local/bin:/usr/bin:/bin", "PWD=/"]
    sid, pid = (part.split("=")[1] for part in lines[-1].split())
    assert sid == pid
    assert await proc.wait() == 0


async def test_a_slow_reader_holds_back_only_its_own_process(spawner):
    big = 3 * WINDOW
    hog = await start(spawner, f"head -c {big} /dev/zero")  # nobody reads it for now
    async def window_full() -> None:  # the spawner has sent a whole window and waits for acks
        while len(hog.stdout) < WINDOW:
            await asyncio.sleep(0.01)
    await asyncio.wait_for(window_full(), 30)
    quick = await start(spawner, "echo quick")
    out, _ = await asyncio.wait_for(drain(quick), 10)
    assert out == b"quick\n" and await quick.wait() == 0
    # held at its window (the spawner stops reading once WINDOW bytes are unacknowledged; its last read
    # before that takes at most 64 KiB), and blocked on its pipe
    assert not hog._exit.done() and WINDOW <= len(hog.stdout) < WINDOW + (1 << 16)
    out, _ = await asyncio.wait_for(drain(hog), 30)
    assert len(out) == big and await hog.wait() == 0


async def test_stdin_is_byte_exact_with_backpressure(spawner):
    data = os.urandom(12 << 20)
    proc = await start(spawner, "cat")
    reading = asyncio.ensure_future(drain(proc))
    await proc.write(data)
    await proc.close_stdin()
    out, _ = await asyncio.wait_for(reading, 60)
    assert hashlib.sha256(out).digest() == hashlib.sha256(data).digest()
    assert await proc.wait() == 0


async def test_terminal_size_and_resize(spawner):
    proc = await start(spawner, 'stty size; read -r line; stty size; echo "got $line"', pty=PtySize(30, 100))
    buf = b""
    while b"30 100" not in buf:
        buf += await asyncio.wait_for(proc.stdout.read(), 10)
    await proc.resize(PtySize(40, 120))
    await proc.write(b"hello\r")
    while b"got hello" not in buf:
        buf += await asyncio.wait_for(proc.stdout.read(), 10)
    assert b"40 120" in buf and proc.stderr is None
    assert await asyncio.wait_for(proc.wait(), 10) == 0


async def test_a_start_that_fails_says_why_and_mkdir_makes_the_directory(spawner, tmp_path):
    with pytest.raises(BackendError) as info:
        await start(spawner, "true", cwd=str(tmp_path / "missing"))
    assert "cannot enter the directory" in info.value.message and "No such file" in info.value.message
    made = tmp_path / "made" / "deep"
    proc = await start(spawner, "pwd", cwd=str(made), mkdir=str(made))
    out, _ = await drain(proc)
    assert out.decode().strip() == str(made) and await proc.wait() == 0


async def test_detach_discards_output_and_wait_still_answers(spawner):
    proc = await start(spawner, "head -c 20000000 /dev/zero; exit 3")
    await proc.detach()
    assert await proc.stdout.read() == b""
    assert await asyncio.wait_for(proc.wait(), 30) == 3


async def test_the_spawner_dying_loses_every_process_with_the_reason(spawner):
    procs = [await start(spawner, "echo up; read -r x") for _ in range(3)]  # they end at stdin's EOF
    for proc in procs:
        assert await asyncio.wait_for(proc.stdout.read(), 10) == b"up\n"
    spawner.test_proc.kill()
    for proc in procs:
        with pytest.raises(BackendError) as info:
            await asyncio.wait_for(proc.wait(), 10)
        assert info.value.kind is ErrorKind.LOST
    with pytest.raises(BackendError):
        spawner.spawn(["true"], cwd="/", mkdir=None, pty=None)


async def test_channel_streams_are_bounded_by_the_window_and_ack_what_is_read():
    from executor.backends._spawner import _ChanStream
    acked: list[int] = []
    stream = _ChanStream(acked.append)
    assert stream.limit == WINDOW
    stream.feed(b"ab")
    stream.feed(b"cd")
    assert stream.seen and stream.head == b"abcd"
    assert await stream.read() == b"abcd" and acked == [4]
    stream.feed_eof(BackendError("gone", ErrorKind.LOST))
    stream.feed(b"late")
    with pytest.raises(BackendError):
        await stream.read()
    assert acked == [4] and stream.head == b"abcd"

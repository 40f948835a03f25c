"""PipeReader: the daemon's end of a host process's stdout/stderr (local and singularity backends),
read by the event loop. Pull and push delivery, backpressure both ways, detach, EOF."""

from __future__ import annotations

import asyncio
import os

from executor.backends._host import READ_SIZE, PipeReader, spawn_piped

MiB = 1 << 20


async def read_all(reader: PipeReader) -> bytes:
    out = bytearray()
    while chunk := await reader.read():
        out += chunk
    return bytes(out)


async def spawn(script: str):
    return await spawn_piped(["bash", "-c", script], cwd="/", env={"PATH": os.environ["PATH"]},
                             start_new_session=True)


async def test_pull_reads_each_stream_to_eof_and_closes_the_pipe():
    proc, out, err = await spawn("printf abc; printf err >&2; printf def")
    assert await read_all(out) == b"abcdef"
    assert await read_all(err) == b"err"
    assert await out.read() == b""  # stays at EOF
    assert await proc.wait() == 0
    assert out._fd == -1 and err._fd == -1


async def test_an_unread_pipe_is_not_buffered_without_bound():
    """Nobody reads: the reader stops at its limit, the pipe fills, the writer waits; nothing is lost."""
    proc, out, err = await spawn(f"head -c {16 * MiB} /dev/zero")
    await asyncio.sleep(0.5)
    assert proc.returncode is None  # blocked on the full pipe
    assert out._size <= MiB + READ_SIZE
    assert len(await read_all(out)) == 16 * MiB
    assert await proc.wait() == 0
    await read_all(err)


async def test_push_delivers_in_order_and_pause_holds_the_writer():
    proc, out, err = await spawn(f"printf first; sleep 0.2; head -c {8 * MiB} /dev/zero; printf last")
    got = bytearray()
    ended: asyncio.Future = asyncio.get_running_loop().create_future()

    def on_data(data: bytes) -> None:
        got.extend(data)
        if len(got) > MiB:
            out.pause()

    await asyncio.sleep(0.1)  # "first" is buffered before anyone subscribes: delivered first
    out.subscribe(on_data, ended.set_result)
    await asyncio.sleep(0.6)
    assert got.startswith(b"first") and MiB < len(got) < 8 * MiB
    assert proc.returncode is None  # paused: the writer waits
    deadline = asyncio.get_running_loop().time() + 30
    while not ended.done():  # each chunk pauses it again (got > 1 MiB): resume until the end
        assert asyncio.get_running_loop().time() < deadline, "the stream did not end after resume"
        out.resume()
        await asyncio.sleep(0.01)
    assert ended.result() is None
    assert len(got) == len("first") + 8 * MiB + len("last") and got.endswith(b"last")
    assert await proc.wait() == 0
    await read_all(err)


async def test_detach_drains_so_a_writer_is_never_stuck():
    """A consumer that goes away (a discarded shell) leaves a background writer free to finish."""
    proc, out, err = await spawn(f"head -c {8 * MiB} /dev/zero; head -c {4 * MiB} /dev/zero >&2")
    out.detach()
    err.detach()
    assert await asyncio.wait_for(proc.wait(), 10) == 0
    for _ in range(100):
        if out._fd == -1 and err._fd == -1:
            break
        await asyncio.sleep(0.01)
    assert out._fd == -1 and err._fd == -1


async def test_subscribing_after_eof_reports_the_end_at_once():
    proc, out, err = await spawn("printf tail")
    assert await proc.wait() == 0
    for _ in range(500):  # the loop reads the data and then the EOF
        if out._eof:
            break
        await asyncio.sleep(0.01)
    assert out._eof
    got, ends = [], []
    out.subscribe(got.append, ends.append)
    assert b"".join(got) == b"tail" and ends == [None]
    await read_all(err)

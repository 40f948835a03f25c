"""The backends' shared machinery (backends/_shared): streams, identity, retry rule, registry, cleanup."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from executor.backends._shared import identity, kill
from executor.backends._shared.registry import SessionRegistry
from executor.backends._shared.retry import Failure, may_repeat, once, retrying
from executor.backends._shared.streams import ByteQueue, ByteStream, PushStream
from executor.backends.base import BackendError, ErrorKind


async def test_byte_queue_is_bounded_and_keeps_order():
    q = ByteQueue(limit=10)
    assert isinstance(q, ByteStream) and not isinstance(q, PushStream)
    q.feed(b"0123456789")
    assert q.full
    room = asyncio.ensure_future(q.room())
    await asyncio.sleep(0)
    assert not room.done()  # the producer waits while the reader is behind
    assert await q.read() == b"0123456789"
    await asyncio.wait_for(room, 1)
    q.feed(b"ab")
    q.feed(b"cd")
    q.feed_eof(BackendError("gone", ErrorKind.LOST))
    assert await q.read() == b"abcd"  # what was fed before the end is read first
    with pytest.raises(BackendError):
        await q.read()


async def test_byte_queue_on_read_hook():
    calls = []
    q = ByteQueue(on_read=lambda: calls.append(len(q)))
    q.feed(b"x")
    await q.read()
    q.feed_eof()
    assert await q.read() == b""
    assert calls == [0]


async def test_byte_queue_end_of_stream():
    q = ByteQueue()
    q.feed(b"a")
    q.feed_eof()
    q.feed(b"late")  # after the end: dropped
    q.feed_error(BackendError("too late", ErrorKind.LOST))  # the first end stands
    assert q.at_eof and await q.read() == b"a"
    assert await q.read() == b"" and await q.read() == b""  # EOF stays EOF
    waiting = ByteQueue()
    reader = asyncio.ensure_future(waiting.read())
    await asyncio.sleep(0)
    waiting.feed_error(BackendError("gone", ErrorKind.LOST))
    with pytest.raises(BackendError):
        await asyncio.wait_for(reader, 1)  # a reader waiting at the end gets the error
    with pytest.raises(BackendError):
        await waiting.read()  # and so does every later read


async def test_byte_queue_bound_and_room():
    q = ByteQueue(limit=4)
    await asyncio.wait_for(q.room(), 1)  # room at once below the limit
    q.feed(b"abcdef")  # feed never drops: past the limit the queue is full, not truncated
    assert q.full and len(q) == 6
    room = asyncio.ensure_future(q.room())
    await asyncio.sleep(0)
    assert not room.done()
    q.feed_eof()
    await asyncio.wait_for(room, 1)  # the end releases a waiting producer
    assert await q.read() == b"abcdef" and len(q) == 0 and not q.full


async def test_byte_queue_peek_leaves_the_data_for_the_reader():
    q = ByteQueue()
    q.feed(b"ab")
    q.feed(b"cd")
    assert q.peek() == b"abcd" and len(q) == 4
    assert await q.read() == b"abcd" and q.peek() == b""


async def test_byte_queue_read_size_joins_chunks():
    q = ByteQueue(read_size=4)
    for part in (b"ab", b"cd", b"ef", b"ghijkl", b"m"):
        q.feed(part)
    assert [await q.read() for _ in range(3)] == [b"abcd", b"efghijkl", b"m"]


async def test_byte_queue_wakes_every_waiting_reader():
    q = ByteQueue()
    first, second = asyncio.ensure_future(q.read()), asyncio.ensure_future(q.read())
    cancelled = asyncio.ensure_future(q.read())
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.sleep(0)
    q.feed(b"x")
    await asyncio.sleep(0)
    q.feed_eof()
    assert sorted(await asyncio.wait_for(asyncio.gather(first, second), 1)) == [b"", b"x"]


def test_instance_id_one_file_one_length_and_old_files_kept(tmp_path):
    new = identity.instance_id(tmp_path / "a")
    assert len(new) == identity.ID_LENGTH and (tmp_path / "a" / "instance-id").read_text().strip() == new
    assert identity.instance_id(tmp_path / "a") == new
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "daemon-id").write_text("0badcafe\n")  # modal's / vercel's (8 hex digits)
    assert identity.instance_id(tmp_path / "b") == "0badcafe"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "instance-id").write_text("f" * 32 + "\n")  # docker's uuid
    assert identity.instance_id(tmp_path / "c") == "f" * 32


def test_the_one_repeat_rule():
    assert may_repeat(Failure.UNSENT, idempotent=False)
    assert may_repeat(Failure.TRANSIENT, idempotent=True)
    assert not may_repeat(Failure.TRANSIENT, idempotent=False)
    assert not may_repeat(Failure.FINAL, idempotent=True)


async def test_retrying_repeats_only_what_is_safe():
    def translate(exc):
        return BackendError(str(exc), ErrorKind.UNAVAILABLE if isinstance(exc, ConnectionError) else ErrorKind.INTERNAL)

    calls = []

    async def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("down")
        return "ok"

    assert await retrying(flaky, translate=translate, idempotent=True, delay=0) == "ok" and len(calls) == 3
    calls.clear()
    with pytest.raises(BackendError) as info:
        await retrying(flaky, translate=translate, idempotent=False, delay=0)
    assert len(calls) == 1 and info.value.kind is ErrorKind.UNAVAILABLE  # an effect is never repeated
    calls.clear()
    assert await retrying(flaky, translate=translate, idempotent=False, delay=0,
                          classify=lambda exc: Failure.UNSENT) == "ok"  # unless it never left
    calls.clear()
    with pytest.raises(BackendError):
        await once(flaky(), translate=translate)


def test_session_registry_scopes_and_old_one_file_scopes(tmp_path):
    reg = SessionRegistry(tmp_path / "pids")
    reg.remember(12, "345")
    reg.remember(7, scope="sb/1")
    assert reg.load() == {12: "345"}
    assert reg.load("sb/1") == {7: ""}
    reg.forget(12)
    assert reg.load() == {}
    (tmp_path / "pids" / "old").write_text("3\n4\n")  # an older daytona's file of pids
    assert reg.load("old") == {3: "", 4: ""}
    reg.remember(5, scope="old")
    assert reg.load("old") == {3: "", 4: "", 5: ""}
    reg.clear("old")
    assert reg.load("old") == {}


def _start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[19]


def _children_when_started(pid: int) -> list[int]:
    """``sh -c 'sleep & sleep; wait'``'s two children, once it has forked both."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except OSError:
            kids = []
        if len(kids) == 2:
            return kids
        time.sleep(0.01)
    raise AssertionError(f"process {pid} did not start its two children within 10 s")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, f"process {pid} outlived the cleanup"
        time.sleep(0.01)


def test_cleanup_script_reads_both_registry_formats_and_kills_trees(tmp_path):
    """ssh's files (named by the pid, holding the start time) and modal's ("PID START TTY") are both
    ended, with what they started; a stale entry (wrong start time) is left alone."""
    procs = [subprocess.Popen(["sh", "-c", "sleep 300 & sleep 300; wait"], start_new_session=True) for _ in range(3)]
    try:
        kids = {p.pid: _children_when_started(p.pid) for p in procs}
        reg = tmp_path / "reg"
        reg.mkdir()
        a, b, c = procs
        (reg / str(a.pid)).write_text(_start_time(a.pid) + "\n")
        (reg / "tag1").write_text(f"{b.pid} {_start_time(b.pid)} -\n")
        (reg / str(c.pid)).write_text("1\n")  # a recycled pid: not ours
        out = subprocess.run(["sh", "-c", "set -- \"$1\"\n" + kill.CLEANUP_SCRIPT, "cleanup", str(reg)],
                             capture_output=True, text=True, timeout=30)
        assert out.stdout.strip() == "2"
        assert a.wait(10) == -signal.SIGKILL and b.wait(10) == -signal.SIGKILL
        for pid in kids[a.pid] + kids[b.pid]:  # the trees, not only their leaders
            _wait_gone(pid)
        assert c.poll() is None and all(_alive(pid) for pid in kids[c.pid])
        assert not reg.exists()  # CLEANUP_SCRIPT removes the emptied dirs (CLEANUP_KEEP_SCRIPT keeps them)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


# --- background: detached work is held until it ends, and its failure is logged ------------------

async def test_detached_work_is_not_collected_while_it_waits():
    import gc
    import weakref

    from executor.backends._shared import background

    async def waits_on_what_only_it_holds() -> None:
        await asyncio.get_running_loop().create_future()  # as a task awaiting its own socket's reader

    task = weakref.ref(background.detach(waits_on_what_only_it_holds(), "a test's work"))
    await asyncio.sleep(0)
    gc.collect()
    held = task()
    assert held is not None and not held.done(), "a detached task nobody else holds was collected"
    held.cancel()
    await asyncio.sleep(0)
    assert held.cancelled()


async def test_a_detached_failure_is_logged_with_what_it_was(caplog):
    from executor.backends._shared import background

    async def fails() -> None:
        raise RuntimeError("the socket went away")

    with caplog.at_level("ERROR", logger="executor.backends"):
        task = background.detach(fails(), "settling exec 42")
        with pytest.raises(RuntimeError):
            await task
        await asyncio.sleep(0)
    assert any("settling exec 42 failed: the socket went away" in r.getMessage() for r in caplog.records)


# --- files: atomic_write with many writers at once -------------------------------------------------

def test_concurrent_atomic_writes_each_land_whole(tmp_path):
    import threading

    from executor.backends._shared.files import atomic_write

    target = tmp_path / "state" / "containers.json"
    errors: list[BaseException] = []
    start = threading.Barrier(32)

    def writer(i: int) -> None:
        start.wait()
        try:
            for _ in range(20):
                atomic_write(target, (chr(65 + i) * 1000).encode())
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    body = target.read_text()
    assert len(body) == 1000 and len(set(body)) == 1  # one writer's whole content, never a mix
    assert [p.name for p in target.parent.iterdir()] == ["containers.json"]  # no temporary left behind
    assert target.stat().st_mode & 0o777 == 0o600


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    from executor.backends._shared import files

    target = tmp_path / "f"
    files.atomic_write(target, b"old")

    def full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        files.atomic_write(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f"]

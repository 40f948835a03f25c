"""Offset-addressed process output: memory bound, spill files, rotation, reads across them."""

from __future__ import annotations

import os
import signal

import pytest
from hypothesis import given, settings, strategies as st

from executor.errors import CoreError
from executor.processes import OutputLog, parse_signal


def make(tmp_path, memory=64, file_bytes=128, files=2) -> OutputLog:
    return OutputLog(tmp_path / "spill", "stdout", memory_bytes=memory, file_bytes=file_bytes, files=files)


def feed(log: OutputLog, total: int, chunk: int) -> bytes:
    data = bytes(i % 251 for i in range(total))
    for i in range(0, total, chunk):
        log.append(data[i:i + chunk])
    return data


def test_small_output_stays_in_memory(tmp_path):
    log = make(tmp_path)
    log.append(b"hello ")
    log.append(b"world")
    assert log.read(0, 100) == (b"hello world", 0, False)
    assert log.read(6, 3) == (b"wor", 6, False)
    assert log.read(11, 10) == (b"", 11, False)
    assert not (tmp_path / "spill").exists()


def test_spills_past_the_memory_bound_and_reads_across(tmp_path):
    log = make(tmp_path, memory=64, file_bytes=1024, files=2)
    data = feed(log, 300, 7)
    assert log.spilled_bytes > 0 and len(log._mem) <= 64
    assert log.start == 0
    assert log.read(0, 1000) == (data, 0, False)
    # a read that spans file and memory, at any offset
    for offset in (0, 1, 100, 236, 250, 299):
        got, start, rotated = log.read(offset, 40)
        assert (got, start, rotated) == (data[offset:offset + 40], offset, False)


def test_rotation_drops_the_oldest_and_says_so(tmp_path):
    log = make(tmp_path, memory=64, file_bytes=100, files=2)
    data = feed(log, 1000, 13)
    files = sorted(os.listdir(tmp_path / "spill"))
    assert len(files) == 2, files  # never more than spill_files on disk
    assert all(os.path.getsize(tmp_path / "spill" / f) <= 100 for f in files)
    start = log.start
    assert 0 < start < 1000 - 64
    got, real, rotated = log.read(0, 5000)
    assert rotated and real == start
    assert got == data[start:]
    # an offset still kept is not marked rotated
    assert log.read(start + 1, 10) == (data[start + 1:start + 11], start + 1, False)
    assert log.end == 1000


def test_bad_offsets_are_invalid(tmp_path):
    log = make(tmp_path)
    log.append(b"abc")
    with pytest.raises(CoreError) as info:
        log.read(4, 10)
    assert info.value.code == "INVALID_ARGUMENT" and "past the end" in info.value.message
    with pytest.raises(CoreError):
        log.read(-1, 10)


def test_close_removes_files(tmp_path):
    log = make(tmp_path, memory=16, file_bytes=32, files=3)
    feed(log, 200, 10)
    assert os.listdir(tmp_path / "spill")
    log.close()
    assert os.listdir(tmp_path / "spill") == []
    log.append(b"more")  # ignored after close
    assert log.end == 200


@settings(max_examples=60, deadline=None)
@given(chunks=st.lists(st.binary(min_size=0, max_size=90), max_size=40),
       memory=st.integers(4, 80), file_bytes=st.integers(8, 120), files=st.integers(1, 3),
       offset_frac=st.floats(0, 1), size=st.integers(1, 400))
def test_any_read_is_a_slice_of_what_was_kept(tmp_path_factory, chunks, memory, file_bytes, files, offset_frac, size):
    log = OutputLog(tmp_path_factory.mktemp("spill"), "", memory_bytes=memory, file_bytes=file_bytes, files=files)
    data = b""
    for c in chunks:
        log.append(c)
        data += c
    assert log.end == len(data)
    assert log.start <= len(data) and len(data) - log.start >= min(len(data), memory // 2)
    offset = int(offset_frac * len(data))
    got, real, rotated = log.read(offset, size)
    assert rotated == (offset < log.start)
    assert real == max(offset, log.start)
    assert got == data[real:real + size]


@pytest.mark.parametrize("text, expected", [
    ("SIGTERM", signal.SIGTERM), ("TERM", signal.SIGTERM), ("term", signal.SIGTERM), ("15", signal.SIGTERM),
    ("KILL", signal.SIGKILL), ("SIGINT", signal.SIGINT), ("hup", signal.SIGHUP), ("9", signal.SIGKILL),
])
def test_signal_names(text, expected):
    assert parse_signal(text) is expected


@pytest.mark.parametrize("text", ["", "SIGNOPE", "999", "-9", "TERM;", "SIG"])
def test_bad_signal_names(text):
    with pytest.raises(CoreError) as info:
        parse_signal(text)
    assert info.value.code == "INVALID_ARGUMENT"


def test_a_spill_that_cannot_be_written_keeps_what_was_kept_and_says_why(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")  # the spill directory cannot be created: as a full disk, writes fail
    log = OutputLog(blocker / "spill", "stdout", memory_bytes=64, file_bytes=128, files=2)
    data = feed(log, 1000, 10)
    assert log.lost and "spill file failed" in log.lost
    assert log.end + log.dropped == len(data)
    kept, start, rotated = log.read(0, 10_000)
    assert (start, rotated) == (0, False) and kept == data[:len(kept)] and len(kept) == log.end


def test_spill_files_count_against_one_budget(tmp_path):
    from executor.processes import SpillBudget

    budget = SpillBudget(500)
    a = OutputLog(tmp_path / "a", "stdout", memory_bytes=64, file_bytes=128, files=4, budget=budget)
    b = OutputLog(tmp_path / "b", "stdout", memory_bytes=64, file_bytes=128, files=4, budget=budget)
    feed(a, 400, 16)
    assert budget.used == a.spilled_bytes > 0
    feed(b, 400, 16)
    assert budget.used == a.spilled_bytes + b.spilled_bytes and budget.over
    freed = a.release_files()
    assert freed > 0 and budget.used == b.spilled_bytes and not budget.over
    data, start, rotated = a.read(0, 1000)
    assert rotated and start == a.start  # what was dropped reads as rotated, never as wrong bytes


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_a_full_state_disk_keeps_background_output_written_so_far(tmp_path):
    """A real ENOSPC: a 1 MiB tmpfs as the state directory; a process prints 4 MiB."""
    import asyncio
    import subprocess

    from executor.admission import Caller, StartParams
    from executor.config import Config
    from executor.service import Executor

    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(state)], check=True)
    try:
        async def go():
            config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local",
                                            "root": str(tmp_path / "tasks")}}, "approval": {"mode": "allow"},
                                            "processes": {"memory_buffer_bytes": 65536, "max_spill_bytes": 1 << 30}})
            core = Executor(config, state)
            await core.start()
            try:
                mp = await core.processes.start_process(
                    StartParams(task_id="full", command="head -c 4194304 /dev/zero | tr '\\0' x; echo; echo end"),
                    Caller())
                await asyncio.wait_for(mp.done.wait(), 60)
                assert mp.state == "exited" and mp.exit_code == 0
                assert "not kept" in mp.message and "free space" in mp.message, mp.message
                out = mp.logs["stdout"]
                kept, start, rotated = out.read(0, 8 << 20)
                assert kept and set(kept) <= {ord("x")} and not rotated and start == 0
                assert out.end + out.dropped >= 4 << 20
            finally:
                await core.shutdown()

        asyncio.run(go())
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)

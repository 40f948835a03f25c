"""The gate judges a command in its task's turn, against the state it will run in.

A command queued behind another (pipelined Exec/Run, a StartProcess sent while a command runs) is
judged only once the commands ahead of it ran: `cd / && ...` followed by `rm -rf etc/...` is
judged at `/`, not at the task's directory it was in when the second request arrived. The
interleavings are made certain: the first command blocks reading a fifo the test holds, after its
`cd /`, until the second request is queued (or, on code that judged early, judged and waiting).

Also: a task has at most one pending approval at a time and at most ``max_queued_per_task``
requests waiting (RESOURCE_EXHAUSTED beyond), and an Exec with an idempotency key says when it
waits for a human, like a plain Exec.
"""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from executor.admission import Caller, StartParams
from executor.config import Config
from executor.errors import CoreError
from executor.events import ApprovalNeeded, Finished, Output, Started
from executor.service import ExecParams, Executor

#: Allowed at the task's directory (a path inside it), asks at `/` (rm_system_path). Harmless if it
#: ran: nothing is there.
SECOND = "echo SECOND-RAN; rm -rf etc/executor-test-nothing"


def make_core(tmp_path, approval_timeout=1, **limits):
    config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local"}},
                                    "approval": {"mode": "ask", "timeout_seconds": approval_timeout},
                                    "limits": {"kill_grace_seconds": 1, **limits}})
    return Executor(config, tmp_path / "state")


@pytest.fixture
async def core(tmp_path):
    core = make_core(tmp_path)
    await core.start()
    yield core
    await core.shutdown()


async def until(predicate, timeout=20.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.02)


async def hold_after_cd(core, task_id, define=""):
    """Start (``define`` then) `cd /` then a read of a fifo in the task; returns (the run, a function
    releasing it)."""
    await core.run(ExecParams(task_id, "mkfifo gate"))
    fifo = f"{core.tasks.get(task_id).root}/gate"
    first = asyncio.ensure_future(core.run(ExecParams(task_id, f"{define}cd / && read line < {fifo}")))

    async def release():
        while True:  # until the first command reads the fifo (it cannot have ended without reading it)
            assert not first.done(), f"the first command ended early: {first.result().exit}"
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:
                assert exc.errno == errno.ENXIO  # no reader yet
                await asyncio.sleep(0.02)
                continue
            os.write(fd, b"go\n")
            os.close(fd)
            break
        done = await first
        assert done.exit.status == "completed" and done.exit.cwd == "/"

    return first, release


@pytest.mark.parametrize("entry, state", [("exec", "cwd"), ("run", "cwd"), ("pty_exec", "cwd"),
                                          ("exec", "function"), ("run", "function")])
async def test_a_pipelined_command_is_judged_after_the_command_ahead_of_it(core, entry, state):
    """Sent while `cd / && ...` runs: judged at `/` (asks; nobody answers: denied), never run. With
    ``state=function`` the second command calls a function the first one defines."""
    define, second = "", SECOND
    if state == "function":
        define, second = f"wipe() {{ {SECOND}; }}; ", "wipe"
    first, release = await hold_after_cd(core, "pipe", define)
    task = core.tasks.get("pipe")
    params = ExecParams("pipe", second, pty=entry == "pty_exec")
    if entry == "run":
        second = asyncio.ensure_future(core.run(params))
    else:
        second = asyncio.ensure_future(_events(core.exec(params)))
    await until(lambda: task.waiting >= 1)  # queued (on the old code: judged at the task's root, then queued)
    await release()
    result = await second
    if entry == "run":
        status, stdout, asked = result.exit.status, result.stdout, None
    else:
        finished = result[-1]
        assert isinstance(finished, Finished)
        status = finished.exit.status
        stdout = b"".join(e.data for e in result if isinstance(e, Output))
        asked = [e for e in result if isinstance(e, ApprovalNeeded)]
        assert asked and asked[0].rule == "rm_system_path"
    assert status == "denied"
    assert b"SECOND-RAN" not in stdout


async def test_a_process_started_while_a_command_runs_is_judged_after_it(core, monkeypatch):
    """StartProcess sent while `cd / && ...` runs: judged at `/`, not started. The old code's losing
    interleaving is made certain: its spawn waits until the first command ended."""
    first, release = await hold_after_cd(core, "bg")
    task = core.tasks.get("bg")
    first_done = asyncio.Event()
    reached_spawn = asyncio.Event()
    spawn = core.processes._spawn

    async def late_spawn(*args):
        reached_spawn.set()
        await first_done.wait()
        return await spawn(*args)

    monkeypatch.setattr(core.processes, "_spawn", late_spawn)
    second = asyncio.ensure_future(core.processes.start_process(StartParams("bg", SECOND), Caller()))
    await until(lambda: task.waiting >= 1 or reached_spawn.is_set())
    await release()
    first_done.set()
    with pytest.raises(CoreError) as info:
        await second
    assert info.value.code == "PERMISSION_DENIED" and "rm_system_path" in info.value.message
    assert core.processes.list("bg") == []


async def test_a_terminal_opened_while_a_command_runs_waits_for_its_turn(core):
    """Pty takes the task's turn before it is judged, like Exec and StartProcess."""
    first, release = await hold_after_cd(core, "term")
    task = core.tasks.get("term")
    from executor.admission import PtyOpenParams
    session = core.pty.open(PtyOpenParams("term", SECOND), Caller())
    second = asyncio.ensure_future(_events(session.run()))
    await until(lambda: task.waiting >= 1)
    await release()
    events = await second
    assert events[-1].exit.status == "denied"
    assert not any(isinstance(e, Output) and b"SECOND-RAN" in e.data for e in events)


async def _events(stream):
    return [e async for e in stream]


async def test_the_turn_is_freed_when_an_approval_wait_ends(core):
    """An approval is waited for in the task's turn; the caller going away (withdrawn) or nobody
    answering in time (denied) frees it for the task's next command."""
    ask = "systemctl stop executor-test-nothing"
    stream = core.exec(ExecParams("free", ask))
    async for event in stream:
        if isinstance(event, ApprovalNeeded):
            break
    task = core.tasks.get("free")
    assert task.busy and len(core.approvals.pending("free")) == 1
    await stream.aclose()  # the caller went away while a human was asked
    assert not task.busy
    await until(lambda: core.approvals.pending("free") == [])  # withdrawn as the gate's wait is cancelled
    assert (await core.run(ExecParams("free", "echo next"))).stdout == b"next\n"
    assert (await core.run(ExecParams("free", ask))).exit.status == "denied"  # nobody answered
    assert not task.busy
    assert (await core.run(ExecParams("free", "echo again"))).stdout == b"again\n"


# -- pending approvals are bounded per task ------------------------------------------------------


@pytest.mark.parametrize("entry", ["run", "start_process"])
async def test_a_task_has_one_pending_approval_and_a_bounded_queue(tmp_path, entry):
    core = make_core(tmp_path, approval_timeout=120, max_queued_per_task=3)  # nobody answers during the test
    await core.start()
    try:
        ask = "systemctl stop executor-test-nothing"

        async def one():
            if entry == "run":
                return await core.run(ExecParams("flood", ask))
            return await core.processes.start_process(StartParams("flood", ask), Caller())

        calls = [asyncio.ensure_future(one()) for _ in range(12)]
        refused = lambda: [c for c in calls if c.done() and isinstance(c.exception(), CoreError)]  # noqa: E731
        await until(lambda: len(core.approvals.pending("flood")) == 1 and len(refused()) == 12 - 1 - 3)
        assert core.tasks.get("flood").waiting == 3
        for call in refused():
            err = call.exception()
            assert err.code == "RESOURCE_EXHAUSTED" and "limits.max_queued_per_task" in err.message
        # Closing the task denies the pending approval and ends the queue (does not wait for it).
        await asyncio.wait_for(core.close_task("flood", remove_files=True), 30)
        await asyncio.wait(calls, timeout=30)
        assert all(c.done() for c in calls)
        assert core.approvals.pending("flood") == []
    finally:
        await core.shutdown()


# -- an idempotent Exec says it waits for a human ----------------------------------------------


async def test_an_idempotent_exec_emits_approval_required(core):
    events = await _events(core.exec(ExecParams("idem", "systemctl stop executor-test-nothing",
                                                idempotency_key="k1")))
    kinds = [type(e) for e in events]
    assert kinds[0] is Started and ApprovalNeeded in kinds and kinds[-1] is Finished
    assert kinds.index(ApprovalNeeded) < kinds.index(Finished)
    assert events[-1].exit.status == "denied"  # nobody answered within the timeout
    # A retry with the same key replays the result (no second approval).
    again = await _events(core.exec(ExecParams("idem", "systemctl stop executor-test-nothing",
                                               idempotency_key="k1")))
    assert [type(e) for e in again] == [Started, Finished] and again[-1].exit.status == "denied"

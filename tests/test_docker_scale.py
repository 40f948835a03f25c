"""The docker backend at scale (issue 19): the in-container spawner, many new tasks at once, the
warm pool of pre-started shells and its handoff. Correctness only: timing is measured by
bench/docker_scale.py, never asserted here.

Through the core's TaskManager (in-process) on a real Docker engine (tests/infra/docker.py).
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from executor.backends.base import BackendError, ErrorKind, drain
from executor.backends.docker import DockerBackend, DockerOptions
from executor.errors import CoreError
from executor.shell import CommandResult, CommandSpec
from executor.tasks import TaskManager
from tests.infra import docker as infra

pytestmark = pytest.mark.backend("docker")

LABELS = {infra.TEST_LABEL: "scale"}
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture(scope="module")
def engine() -> None:
    infra.engine()
    infra.sweep("scale", older_than=600)


def _remove_ours(backend: DockerBackend) -> None:
    infra.remove_daemons(backend.instance_id)


@pytest.fixture
async def make_manager(engine, tmp_path):
    made: list[tuple[TaskManager, DockerBackend]] = []

    def make(max_tasks: int = 1024, **overrides) -> tuple[TaskManager, DockerBackend]:
        opts = {"labels": LABELS, **overrides}
        backend = DockerBackend("dk", DockerOptions(**opts), state_dir=tmp_path / f"b{len(made)}")
        manager = TaskManager({"dk": backend}, env_base={"dk": {}}, max_tasks=max_tasks, kill_grace=1.0,
                              state_dir=tmp_path / f"core{len(made)}")
        made.append((manager, backend))
        return manager, backend

    yield make
    for manager, backend in made:
        try:
            await manager.shutdown(budget=10)
            await backend.close()
        finally:
            await asyncio.to_thread(_remove_ours, backend)


async def run(manager: TaskManager, task_id: str, command: str) -> tuple[int, str, str]:
    """One command in the task (created on first use), as the core runs it."""
    task = manager.get_or_create(task_id, "dk")
    shell = await manager.ensure_shell(task)
    out, err = bytearray(), bytearray()
    result: CommandResult | None = None
    async with task.lock:
        async for item in shell.run(CommandSpec(command), deadline=time.monotonic() + 60):
            if isinstance(item, CommandResult):
                result = item
            elif item[0] == "stdout":
                out += item[1]
            elif item[0] == "stderr":
                err += item[1]
    assert result is not None and result.status == "completed", result
    return result.exit_code, out.decode(), err.decode()


async def test_many_new_tasks_at_once_all_run_with_their_own_state(make_manager):
    """150 new tasks at once (beyond the warm pool): each command runs in its own directory with its
    own environment, and what one task leaves in its shell is seen by no other."""
    manager, backend = make_manager(warm_shells=2)
    n = 150
    script = 'export MINE=$EXECUTOR_TASK_ID; fn_mine() { :; }; echo "$EXECUTOR_TASK_ID|$PWD|$HOME|${OTHER-unset}"; OTHER=x'
    results = await asyncio.gather(*(run(manager, f"many-{i}", script) for i in range(n)))
    for i, (code, out, err) in enumerate(results):
        root = f"/workspace/many-{i}"
        assert (code, out, err) == (0, f"many-{i}|{root}|{root}|unset\n", ""), (i, out, err)
    # a second round on the same tasks: each shell kept its own state, nobody else's
    again = await asyncio.gather(*(run(manager, f"many-{i}", 'echo "$MINE|$OTHER|$(declare -F | grep -c fn_)"')
                                   for i in range(n)))
    assert [r[1] for r in again] == [f"many-{i}|x|1\n" for i in range(n)]
    # every task has a shell of its own (distinct sessions)
    pids = {manager.get(f"many-{i}").shell.pid for i in range(n)}
    assert len(pids) == n
    assert backend._shared.spawner.mux is not None  # the shells came from the spawner, not an exec each


async def test_warm_pool_hands_a_clean_shell_to_each_new_task(make_manager):
    manager, backend = make_manager(warm_shells=2)
    pool_owner = manager.get_or_create("first", "dk")
    await manager.ensure_shell(pool_owner)  # the pool starts with the backend's first use
    pool = manager.pool("dk")
    assert pool is not None
    await pool.wait_full()
    assert len(pool.ready) == 2
    handed = pool.handed
    # task A takes a pre-started shell and leaves everything it can in it
    code, out, _ = await run(manager, "task-a", 'echo "$PWD|$HOME|$EXECUTOR_TASK_ID|${OLDPWD-none}"; '
                                                'export LEAK=a; leakfn() { :; }; alias leak=true; cd /tmp; umask 077')
    assert (code, out) == (0, "/workspace/task-a|/workspace/task-a|task-a|none\n")
    assert pool.handed == handed + 1
    await pool.wait_full()
    code, out, _ = await run(manager, "task-b", 'echo "$PWD|$HOME|$EXECUTOR_TASK_ID|${OLDPWD-none}|${LEAK-none}|'
                                                '$(type -t leakfn leak | wc -l)|$(umask)"')
    assert (code, out) == (0, "/workspace/task-b|/workspace/task-b|task-b|none|none|0|0022\n")
    assert pool.handed == handed + 2
    # exactly the task's environment: what a task started the usual way would have
    code, env_b, _ = await run(manager, "task-b", "env -0 | sort -z | tr '\\0' '\\n' | grep -v '^_='")
    fresh, fresh_backend = make_manager(warm_shells=0)
    code2, env_c, _ = await run(fresh, "task-b", "env -0 | sort -z | tr '\\0' '\\n' | grep -v '^_='")
    assert code == code2 == 0
    assert env_b.replace("SHLVL=1", "SHLVL=x") == env_c.replace("SHLVL=1", "SHLVL=x")
    assert "workspace/task-a" not in env_b and "/workspace\n" not in env_b
    # the task's files are in its own directory, made by the handoff
    code, out, _ = await run(manager, "task-b", "touch mine && ls -ld /workspace/task-b/mine | cut -c1-10 && "
                                                "stat -c %U:%G . 2>/dev/null || stat -c %u:%g .")
    assert code == 0 and "-rw-r--r--" in out


async def test_warm_pool_refills_after_use_and_zero_turns_it_off(make_manager):
    manager, _ = make_manager(warm_shells=3)
    await run(manager, "refill-0", "true")
    pool = manager.pool("dk")
    await pool.wait_full()
    started = pool.started
    for i in range(1, 4):
        await run(manager, f"refill-{i}", "true")
    await pool.wait_full()
    assert len(pool.ready) == 3 and all(s.alive for s in pool.ready)
    assert pool.started >= started + 3 and pool.handed >= 3
    off, _ = make_manager(warm_shells=0)
    assert (await run(off, "nopool", "echo $PWD"))[1] == "/workspace/nopool\n"
    assert off.pool("dk") is None


async def test_a_dead_warm_shell_is_not_handed_out(make_manager):
    manager, backend = make_manager(warm_shells=1)
    await run(manager, "dead-0", "true")
    pool = manager.pool("dk")
    await pool.wait_full()
    (shell,) = pool.ready
    sandbox = await backend.pool_sandbox()
    await sandbox.signal_session(shell.pid, signal.SIGKILL)
    for _ in range(200):
        if not shell.alive:
            break
        await asyncio.sleep(0.02)
    assert not shell.alive
    assert (await run(manager, "dead-1", "echo $EXECUTOR_TASK_ID"))[1] == "dead-1\n"


async def test_pids_limit_and_tasks_agree_with_warm_shells(make_manager):
    """pids_limit 25: (25 - 4 for the container - 5 for one start in flight - 2 x 2 for the warm
    shells) // 2 = 6 tasks; the 7th is refused with RESOURCE_EXHAUSTED naming pids_limit, the
    others all run."""
    manager, backend = make_manager(pids_limit=25, max_parallel_starts=1, warm_shells=2)
    outs = await asyncio.gather(*(run(manager, f"fit-{i}", "echo ok") for i in range(6)))
    assert [o[1] for o in outs] == ["ok\n"] * 6
    with pytest.raises(CoreError) as info:
        await run(manager, "fit-6", "echo ok")
    assert "pids_limit 25" in str(info.value) and "6 task(s)" in str(info.value), str(info.value)
    manager.pool("dk") and await manager.pool("dk").wait_full(10)
    outs = await asyncio.gather(*(run(manager, f"fit-{i}", "echo again") for i in range(6)))
    assert [o[1] for o in outs] == ["again\n"] * 6


async def test_spawner_death_is_reported_and_the_next_command_starts_a_new_one(make_manager):
    manager, backend = make_manager(warm_shells=0)
    assert (await run(manager, "sp-a", "echo up"))[1] == "up\n"
    sandbox = manager.get("sp-a").sandbox
    proc = await sandbox.spawn(["sh", "-c", "echo started; exec sleep 60"], cwd=sandbox.root, env=ENV)
    assert await proc.stdout.read() == b"started\n"
    # the spawner is killed (as `pkill -u` of the sandbox user would): its processes are lost, with why
    helper = await sandbox.spawn_helper(["sh", "-c", "for d in /proc/[0-9]*; do read -r s < $d/stat; "
                                         "case $s in *'(executor-spawn)'*) kill -9 ${d#/proc/};; esac; done"],
                                        cwd="/", env=ENV)
    try:  # the helper is one of the spawner's processes too: it may be lost with it
        await drain(helper)
        await helper.wait()
    except BackendError:
        pass
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 15)
    assert info.value.kind is ErrorKind.LOST and "spawner" in info.value.message, info.value.message
    # the task's shell died with it; its next command starts a new shell through a new spawner
    code, out, _ = await run(manager, "sp-a", "echo again")
    assert (code, out) == (0, "again\n")
    assert (await run(manager, "sp-b", "echo new"))[1] == "new\n"


async def test_exec_per_process_without_the_spawner_still_works(make_manager):
    manager, backend = make_manager(spawner=False, warm_shells=0)
    outs = await asyncio.gather(*(run(manager, f"noexec-{i}", "echo $EXECUTOR_TASK_ID") for i in range(5)))
    assert [o[1] for o in outs] == [f"noexec-{i}\n" for i in range(5)]
    assert backend._shared.spawner.mux is None


async def test_a_shell_that_cannot_start_names_the_pids_limit(make_manager):
    """The shell's start fails for lack of pids: the error says so (not only "exited while starting")."""
    manager, backend = make_manager(pids_limit=30, warm_shells=0, max_parallel_starts=1)
    assert (await run(manager, "full-0", "true"))[0] == 0
    sandbox = manager.get("full-0").sandbox
    filler = await sandbox.spawn_helper(["python3", "-I", "-S", "-c", FILL_PIDS], cwd=sandbox.root, env=ENV)
    buf = b""
    while b"full" not in buf:
        buf += await asyncio.wait_for(filler.stdout.read(), 60)
    try:
        with pytest.raises(CoreError) as info:
            await run(manager, "full-1", "true")
        message = str(info.value)
        assert "pids" in message and ("fork failed" in message or "pids limit is reached" in message), message
    finally:
        await filler.close_stdin()
        await filler.wait()
        await filler.detach()
    assert (await run(manager, "full-2", "echo back"))[1] == "back\n"


FILL_PIDS = r"""
import os, signal, sys
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
print("full", len(kids), flush=True)
sys.stdin.read()
for k in kids:
    os.kill(k, signal.SIGKILL)
"""


def test_options_validate_the_pool_size(tmp_path: Path):
    with pytest.raises(ValueError):
        DockerOptions(warm_shells=-1)
    backend = DockerBackend("dk", DockerOptions(per_task=True, warm_shells=4), state_dir=tmp_path)
    assert backend.warm_shells() == 0  # a container per task: nothing to share a pool in

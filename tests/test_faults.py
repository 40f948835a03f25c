"""The control plane under faults found by an outside attack: a full state disk (the daemon's own
records: the session registry, the audit log, the approvals file, saved shell state), crashes and
restarts at awkward moments. Each disk-full case runs on its own small tmpfs (root only), unmounted
after."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

from executor.approval.store import AuditLog
from executor.client import ResourceExhausted
from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path):
    """``small_disk(name, size)``: a fresh tmpfs of ``size`` mounted at ``tmp_path/name``."""
    mounted: list[Path] = []

    def mount(name: str, size: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], check=False)


def fill(directory: Path, name: str = "filler") -> Path:
    """Fill the file system of ``directory`` to the last byte (from the test, not from a command)."""
    path = directory / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        block = b"\0" * 65536
        while True:
            try:
                if os.write(fd, block) == 0:
                    break
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                if len(block) == 1:
                    break
                block = block[: len(block) // 2]
    finally:
        os.close(fd)
    return path


def children(pid: int) -> set[int]:
    """The live (not zombie) child processes of ``pid``."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.add(int(entry))
    return found


# -- the session registry: a spawn the daemon cannot record ------------------------------


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
def test_a_full_state_disk_refuses_new_shells_and_leaves_nothing_running(small_disk, isolation):
    """Task directories live on the state disk by default, so one task can fill it. A new shell (or
    background process) whose session cannot be written to the registry used to be reported
    FAILED_PRECONDITION while it went on running, unrecorded: under bubblewrap its command was
    released when the spawn's --block-fd pipe closed, and no crash recovery could ever find it. Now
    it is ended and reaped before the call fails, with RESOURCE_EXHAUSTED saying what to free."""
    state = small_disk("state", "8m")
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local", "isolation": isolation}}},
                      state_dir=state).start()
    try:
        with d.client() as c:
            assert c.run("a", "echo up").stdout == b"up\n"
            filler = fill(state)
            before = children(d.proc.pid)
            with pytest.raises(ResourceExhausted) as info:
                c.run("b", "echo ran > ran")
            assert "Free space on the daemon's state disk" in info.value.message, info.value.message
            assert str(state) in info.value.message
            with pytest.raises(ResourceExhausted):
                c.start_process("a", "echo ran > ran-bg; sleep 600")
            assert children(d.proc.pid) == before, "a spawn that failed is still running"
            assert not (state / "tasks" / "b" / "ran").exists() and not (state / "tasks" / "a" / "ran-bg").exists()
            assert c.run("a", "echo still serving").stdout == b"still serving\n", "a running shell carries on"
            filler.unlink()
            assert c.run("b", "echo ok").stdout == b"ok\n", "space is back: new shells start again"
    finally:
        d.kill()


# -- the audit log: the disk filling up in the middle of a batch -------------------------


def test_a_disk_filling_up_mid_write_leaves_every_audit_line_whole_and_once(small_disk):
    """A batch that half fits used to leave its first half in the file, and the retry wrote the
    whole batch after it: a torn line glued to a repeated one (the log unreadable from there)."""
    disk = small_disk("audit", "256k")
    log = AuditLog(disk)
    log.record(task="t", command="before", decision="allow")
    filler = fill(disk)
    failed = 0
    for i in range(64):  # the audit file's last page has room for a few: one write is cut short
        try:
            log.record(sync=True, task="t", command=f"entry {i} " + "x" * 200, decision="ask")
        except OSError:
            failed += 1
            break
    assert failed and log.broken
    filler.unlink()
    log.record(sync=True, task="t", command="after", decision="ask")
    assert not log.broken
    log.close()
    lines = (disk / "audit.jsonl").read_text().splitlines()
    commands = [json.loads(line)["command"] for line in lines]  # every line parses
    assert commands[0] == "before" and commands[-1] == "after"
    assert len(commands) == len(set(commands)), "an entry was written twice"
    assert commands[1:-1] == [f"entry {i} " + "x" * 200 for i in range(len(commands) - 2)]


# -- approvals: an "approve always" the full disk cannot keep -----------------------------

ASK = "executor-faults-ask"


def test_approve_always_on_a_full_state_disk_is_resource_exhausted_and_the_request_stays_pending(small_disk):
    """It used to be UNAVAILABLE, which clients and gRPC retry policies take for a passing fault and
    retry; the disk stays full until someone frees it, so the status says so."""
    state = small_disk("state", "8m")
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "approval": {"mode": "ask", "timeout_seconds": 60,
                                    "rules": [{"action": "ask", "pattern": ASK, "name": "faults_ask"}]}},
                      state_dir=state).start()
    try:
        with d.client() as c:
            c.run("a", "true")
            result = {}
            th = threading.Thread(target=lambda: result.update(r=c.run("a", f"echo {ASK}")))
            th.start()
            pending = next(iter(c.watch_approvals()))
            fill(state)
            with pytest.raises(ResourceExhausted) as info:
                c.resolve_approval(pending.approval_id, "always")
            assert "free space on the state disk" in info.value.message and "approvals.json" in info.value.message
            c.resolve_approval(pending.approval_id, "deny")  # still pending: decided now
            th.join(60)
        assert result["r"].exit.status == pb.EXIT_STATUS_DENIED
        assert not (state / "approvals.json").exists()
    finally:
        d.kill()


# -- saved shell state: a shutdown that cannot save it ------------------------------------


def test_a_shell_state_that_cannot_be_saved_does_not_restore_an_older_one(small_disk):
    """SIGTERM saves every idle task's shell state. When the disk was full, the save failed without
    a word and the previous shutdown's file stayed: after the restart the task silently came back in
    an older directory with older variables. Now that file goes, the task starts fresh, the log says."""
    state = small_disk("state", "8m")
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "limits": {"drain_seconds": 2, "kill_grace_seconds": 1}}, state_dir=state).start()
    try:
        with d.client() as c:
            c.run("s", "mkdir -p first && cd first && export X=first")
        assert d.stop() == 0
        d.start()
        with d.client() as c:
            assert c.run("s", 'echo "$X"').stdout == b"first\n", "the first shutdown's state is restored"
            c.run("s", "mkdir -p ../second && cd ../second && export X=second")
        filler = fill(state)
        assert d.stop() == 0
        filler.unlink()
        assert "could not be saved" in d.log() and "task s:" in d.log()
        d.start()
        with d.client() as c:
            r = c.run("s", 'echo "${X:-fresh}" "${PWD##*/}"')
        assert r.stdout == b"fresh s\n", r.stdout
    finally:
        d.kill()


# -- shutdown: requests that had not started yet ------------------------------------------


def test_sigterm_answers_queued_waiting_and_pending_requests_with_an_exit_and_starts_nothing(tmp_path):
    """SIGTERM while one command runs, one waits for its task's turn behind it, one (another task)
    waits for an exec slot, and one waits for an approver. The waiting ones used to get a turn or a
    slot once the running one was interrupted, and started: in a shell made after the shutdown ended
    the tasks' shells (its command ran), until the server's grace ran out and cut every call without
    an Exit (UNAVAILABLE, 12 s later); the pending approval waited out that grace too."""
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "limits": {"drain_seconds": 1, "kill_grace_seconds": 1, "max_concurrent_execs": 1},
                       "approval": {"mode": "ask", "timeout_seconds": 120,
                                    "rules": [{"action": "ask", "pattern": ASK, "name": "faults_ask"}]}},
                      state_dir=tmp_path / "state").start()
    events: dict[str, list] = {name: [] for name in ("running", "queued", "slot", "asked")}
    try:
        with d.client() as c:
            c.run("a", "true")

            def go(name, task, command):
                try:
                    for ev in c.exec(task, command):
                        events[name].append(ev)
                except Exception as exc:  # noqa: BLE001 - recorded, asserted below
                    events[name].append(exc)

            def seen(name, kind):
                return any(getattr(e, "WhichOneof", lambda _: "")("event") == kind for e in events[name])

            threads = [threading.Thread(target=go, args=("running", "a", "echo started; sleep 300"))]
            threads[0].start()
            assert wait_for(lambda: seen("running", "stdout"))
            # (ASK is matched by the gate only in the 'asked' command.)
            for name, task, command in (("queued", "a", "echo ran > ran-queued; sleep 300"),
                                        ("slot", "b", "echo ran > ran-slot; sleep 300"),
                                        ("asked", "c", f"echo {ASK} > ran-asked")):
                threads.append(threading.Thread(target=go, args=(name, task, command)))
                threads[-1].start()
                assert wait_for(lambda name=name: seen(name, "started")), f"{name} was not heard of"
            assert wait_for(lambda: seen("asked", "approval_required"))
            assert d.stop(timeout=60) == 0
            for th in threads:
                th.join(30)
    finally:
        d.kill()
    last = {name: evs[-1] for name, evs in events.items()}
    for name, ev in last.items():
        assert not isinstance(ev, Exception), f"{name}: the call ended without an Exit: {ev}"
        assert ev.WhichOneof("event") == "exit", (name, ev)
    assert last["running"].exit.status == pb.EXIT_STATUS_CANCELLED
    for name in ("queued", "slot"):
        assert last[name].exit.status == pb.EXIT_STATUS_CANCELLED, (name, last[name])
        assert "not started" in last[name].exit.message, (name, last[name])
    assert last["asked"].exit.status == pb.EXIT_STATUS_DENIED and "shutting down" in last["asked"].exit.message
    assert not list((tmp_path / "state" / "tasks").rglob("ran-*")), "a command started during the shutdown"


# -- killing many sessions at once (a shutdown, many timeouts together) --------------------


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
async def test_many_sessions_signalled_together_read_proc_once_per_pass_not_once_each(tmp_path, monkeypatch,
                                                                                      isolation):
    """Each kill walk reads every process of the host, synchronously in the daemon's loop. A SIGTERM
    to a daemon running 500 commands made about four walks per command over some 1,500 processes:
    78 s (isolation none) or past the server's grace (sandbox) without answering any call, and every
    running Exec was cut without its Exit. Walks asked for together are now made together."""
    import asyncio
    import signal

    from executor.backends.local import LocalBackend, LocalOptions
    from tests.daemon import count_processes

    marker = f"executor-faults-kill-{os.getpid()}-{isolation}"
    backend = LocalBackend("local", LocalOptions(isolation=isolation),
                           state_dir=tmp_path / "state" / "backends" / "local")
    await backend.start()
    sandbox = await backend.sandbox("many")
    script = f"setsid bash -c 'exec -a {marker} sleep 300' & echo up; exec -a {marker} sleep 300"
    procs = [await sandbox.spawn(["bash", "-c", script], cwd=sandbox.root, env={"PATH": "/usr/bin:/bin"})
             for _ in range(40)]
    for proc in procs:
        assert await proc.stdout.read() == b"up\n"
    assert wait_for(lambda: count_processes(marker) == 80)
    walks = 0
    listdir = os.listdir

    def counting(path="."):
        nonlocal walks
        walks += str(path) == "/proc"
        return listdir(path)

    monkeypatch.setattr(os, "listdir", counting)
    await asyncio.gather(*(sandbox.signal_session(p.session if p.session is not None else p.pid, signal.SIGKILL)
                           for p in procs))
    monkeypatch.setattr(os, "listdir", listdir)
    assert walks <= 10, f"{walks} walks of /proc to signal 40 sessions"
    for proc in procs:
        await asyncio.wait_for(proc.wait(), 30)
    assert wait_for(lambda: count_processes(marker) == 0), "a signalled session left processes"
    await backend.close()


# -- the audit log: a question it cannot record --------------------------------------------


async def test_a_flagged_command_whose_question_cannot_be_recorded_asks_nobody(tmp_path):
    """The disk fills before the log knows it is broken: the "ask" entry was written at the loop's
    next turn, after approvers had been shown the request, so a human was asked (and could spend a
    minute deciding) about a command that would be refused whatever they said. Now the question
    is on record before anyone sees it, or it is refused at once."""
    from executor.approval import GateConfig
    from executor.approvals import Approvals

    approvals = Approvals(GateConfig.model_validate({}), tmp_path)
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, approvals._audit._fd)  # the log's own descriptor now answers ENOSPC
    os.close(full)

    async def asked(pending) -> None:
        raise AssertionError(f"an approver was shown {pending.command!r}")

    r = await approvals.authorize("git push -f", task_id="t", backend="local", on_pending=asked)
    assert not r.allowed and r.decided_by == "audit" and "audit log cannot be written" in r.message, r
    assert approvals.pending() == []
    approvals.close()


async def test_ssh_sessions_signalled_together_share_one_helper_channel(tmp_path):
    """On ssh every kill was a helper command on its own exec channel: a SIGTERM with 200 commands
    running opened 400 (TERM, then KILL) through MaxSessions-limited connections, ran past the
    shutdown's budget, and the backend was closed under the kills still queued: 162 of 180 Execs
    ended UNKNOWN ("cannot schedule new futures after shutdown") and 89 commands outlived the
    daemon on the remote host. Sessions signalled together now share one channel."""
    import asyncio
    import signal

    from executor.backends.ssh import SSHBackend, SSHOptions
    from tests.infra.private_sshd import PrivateSSHD

    server = PrivateSSHD(tmp_path / "sshd").start()
    backend = SSHBackend("ssh", SSHOptions(**server.options()), state_dir=tmp_path / "state")
    try:
        await backend.start()
        sandbox = await backend.sandbox("many")
        procs = [await sandbox.spawn(["bash", "-c", "echo up; setsid sleep 300 & exec sleep 300"],
                                     cwd=sandbox.root, env={"PATH": "/usr/bin:/bin"}) for _ in range(12)]
        for proc in procs:
            assert await proc.stdout.read() == b"up\n"
        helpers = []
        run = backend._run

        async def counting(command, **kw):
            helpers.append(command)
            return await run(command, **kw)

        backend._run = counting  # type: ignore[method-assign]
        await asyncio.gather(*(sandbox.signal_session(p.session if p.session is not None else p.pid,
                                                      signal.SIGKILL) for p in procs))
        backend._run = run  # type: ignore[method-assign]
        assert len(helpers) == 1, f"{len(helpers)} helper channels to signal 12 sessions"
        for proc in procs:
            await asyncio.wait_for(proc.wait(), 30)
    finally:
        await backend.close()
        server.stop()
    with pytest.raises(Exception) as info:  # closed: a backend error, never a RuntimeError from its pool
        await backend._blocking(lambda: None)
    assert type(info.value).__name__ == "BackendError" and "closed" in str(info.value)


def test_sigterm_ends_approvers_watch_streams_with_a_status_after_the_denials(tmp_path):
    """An approver's WatchApprovals never ended by itself: the server's stop waited out its whole
    grace (drain + kill grace + 10 s) on it, then cut it. Now it reports the pending approval
    denied, then ends UNAVAILABLE saying why, as the drain begins."""
    import grpc

    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                       "limits": {"drain_seconds": 1, "kill_grace_seconds": 1},
                       "approval": {"mode": "ask", "timeout_seconds": 120,
                                    "rules": [{"action": "ask", "pattern": ASK, "name": "faults_ask"}]}},
                      state_dir=tmp_path / "state").start()
    seen = []
    try:
        with d.client() as c:
            c.run("a", "true")
            asked = threading.Thread(target=lambda: seen.append(c.run("a", f"echo {ASK}")))
            asked.start()
            channel, stub = d.stub()
            with channel:
                watch = stub.WatchApprovals(pb.WatchApprovalsRequest(), timeout=60)
                first = next(watch)
                assert not first.resolved
                stopping = threading.Thread(target=d.stop)
                stopping.start()
                rest = []
                with pytest.raises(grpc.RpcError) as info:
                    for p in watch:
                        rest.append(p)
                stopping.join(60)
            asked.join(30)
    finally:
        d.kill()
    assert [(p.approval_id, p.resolved, p.decision) for p in rest] == \
        [(first.approval_id, True, pb.APPROVAL_DECISION_DENY)]
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "shutting down" in info.value.details(), info.value
    assert seen[0].exit.status == pb.EXIT_STATUS_DENIED



async def test_a_request_cancelled_while_a_human_is_asked_leaves_no_task_behind(tmp_path):
    """A request cancelled while its approval was pending left admission's wait for the next pending
    event running, owned by nobody ("Task was destroyed but it is pending" at shutdown)."""
    import asyncio

    from executor.admission import Admission, Caller, Entry, Request
    from executor.approval import Decision, GateConfig, analyze
    from executor.approvals import Approvals
    from executor.config import Config

    approvals = Approvals(GateConfig.model_validate({"mode": "ask"}), tmp_path)
    admission = Admission(Config.model_validate({}), {}, approvals, None)  # type: ignore[arg-type]
    command = "git push --force origin main"
    req = Request(Entry.EXEC, "t1", command, "local", {}, "", judged=command)
    verdict = analyze(command)
    assert verdict.decision is Decision.ASK
    asked = asyncio.Event()

    async def consume() -> None:
        async for event in admission.decide(req, Caller(), verdict):
            assert type(event).__name__ == "ApprovalNeeded"
            asked.set()

    consumer = asyncio.ensure_future(consume())
    await asyncio.wait_for(asked.wait(), 10)
    consumer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await consumer
    for _ in range(100):  # the cancellations run to their end (a few turns of the loop)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if not left:
            break
        await asyncio.sleep(0)
    assert left == []
    assert approvals.pending() == []  # the withdrawn request asks nobody any more
    approvals.close()

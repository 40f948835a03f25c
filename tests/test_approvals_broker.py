"""The approval broker: pending approvals, decisions, persistence, watchers and the audit log."""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import stat

import pytest
from executor.approval import Decision, GateConfig

from executor.approvals import ApprovalDecision, Approvals, Pending, PendingEvent


def make(tmp_path: pathlib.Path, **cfg: object) -> Approvals:
    return Approvals(GateConfig.model_validate(cfg), tmp_path)


async def audit(tmp_path: pathlib.Path) -> list[dict]:
    """The audit log's entries; inside a loop they are written at its next turn."""
    await asyncio.sleep(0)
    return [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]


async def next_event(it, timeout: float = 5.0) -> PendingEvent:
    return await asyncio.wait_for(it.__anext__(), timeout)


async def test_allow_and_hardline_deny(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)
    ok = await a.authorize("ls -la", task_id="t1", backend="local", caller="agent")
    assert ok.allowed and ok.approval_id is None
    called: list[Pending] = []

    async def on_pending(p: Pending) -> None:
        called.append(p)

    no = await a.authorize("rm -rf /", task_id="t1", backend="local", on_pending=on_pending)
    assert not no.allowed and no.verdict.hardline and "hardline" in no.message and not called
    records = await audit(tmp_path)
    assert [r["decision"] for r in records] == ["allow", "deny"]
    assert (
        records[1]["rule"] == "rm_recursive_root" and records[1]["task"] == "t1" and records[1]["command"] == "rm -rf /"
    )
    assert stat.S_IMODE((tmp_path / "audit.jsonl").stat().st_mode) == 0o600
    a.close()


async def test_ask_then_approve_once_via_watch(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)
    watcher = a.watch()
    pendings: list[Pending] = []

    async def on_pending(p: Pending) -> None:
        pendings.append(p)

    job = asyncio.create_task(
        a.authorize("git push --force", task_id="t1", backend="docker", caller="agent", on_pending=on_pending)
    )
    ev = await next_event(watcher)
    assert not ev.resolved and ev.pending.rule == "git_force_push" and ev.pending.backend == "docker"
    assert ev.pending.segment == "git push --force" and ev.pending.expires_at - ev.pending.created_at == pytest.approx(
        300
    )
    assert a.check("git push --force", task_id="t1").decision is Decision.ASK
    a.resolve(ev.pending.approval_id, ApprovalDecision.APPROVE_ONCE, by="alice")
    result = await asyncio.wait_for(job, 5)
    assert result.allowed and result.decided_by == "alice" and result.approval_id == ev.pending.approval_id
    assert pendings and pendings[0].approval_id == ev.pending.approval_id
    done = await next_event(watcher)
    assert done.resolved and done.decision is ApprovalDecision.APPROVE_ONCE
    # once means once
    assert a.check("git push --force", task_id="t1").decision is Decision.ASK
    with pytest.raises(KeyError):
        a.resolve(ev.pending.approval_id, ApprovalDecision.APPROVE_ONCE)
    await watcher.aclose()
    a.close()


async def test_deny_with_reason(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)

    async def on_pending(p: Pending) -> None:
        a.resolve(p.approval_id, ApprovalDecision.DENY, reason="not on main", by="bob")

    r = await a.authorize("git reset --hard", task_id="t", backend="local", on_pending=on_pending)
    assert not r.allowed and "bob" in r.message and "not on main" in r.message
    last = (await audit(tmp_path))[-1]
    assert (last["decision"], last["decided_by"], last["approval"]) == ("deny", "bob", "deny")
    a.close()


async def test_session_approval_is_per_task_backend_and_rule(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)

    async def approve_session(p: Pending) -> None:
        a.resolve(p.approval_id, ApprovalDecision.APPROVE_SESSION, by="alice")

    first = await a.authorize("git clean -fd", task_id="t1", backend="local", on_pending=approve_session)
    assert first.allowed
    covered = a.check("git clean -fdx", task_id="t1", backend="local")
    assert covered.decision is Decision.ALLOW
    # The verdict names the approval that let it through (the audit log records it).
    assert covered.rule == "stored_approval" and first.approval_id in covered.reason, covered
    assert a.check("git clean -fdx", task_id="t1", backend="docker").decision is Decision.ASK
    assert a.check("git clean -fdx", task_id="t2", backend="local").decision is Decision.ASK
    assert a.check("git push -f", task_id="t1", backend="local").decision is Decision.ASK
    a.forget_task("t1")
    assert a.check("git clean -fdx", task_id="t1", backend="local").decision is Decision.ASK
    a.close()


async def test_always_is_persisted_atomically_and_survives_restart(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)

    async def approve_always(p: Pending) -> None:
        a.resolve(p.approval_id, ApprovalDecision.APPROVE_ALWAYS, by="alice", reason="CI resets often")

    assert (
        await a.authorize("git reset --hard origin/main", task_id="t1", backend="local", on_pending=approve_always)
    ).allowed
    path = tmp_path / "approvals.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "git_reset_hard" in json.loads(path.read_text())["always"]["local"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".approvals")]
    a.close()
    b = make(tmp_path)
    assert b.check("git reset --hard", task_id="other", backend="local").decision is Decision.ALLOW
    # Granted on one backend, it holds there only.
    assert b.check("git reset --hard", task_id="other", backend="docker").decision is Decision.ASK
    assert b.check("rm -rf /", task_id="other", backend="local").decision is Decision.DENY
    b.close()


def test_temp_files_of_an_interrupted_save_are_removed_at_start(tmp_path: pathlib.Path) -> None:
    (tmp_path / ".approvals.json.abc123").write_text("half a file")
    make(tmp_path).close()
    assert not list(tmp_path.glob(".approvals.json.*"))


async def test_an_old_unscoped_always_file_is_not_carried_over(tmp_path: pathlib.Path) -> None:
    (tmp_path / "approvals.json").write_text(json.dumps({"version": 1, "always": {"git_reset_hard": {}}}))
    a = make(tmp_path)
    assert a.check("git reset --hard", task_id="t", backend="local").decision is Decision.ASK
    a.close()


async def test_a_failed_always_save_approves_nothing(tmp_path: pathlib.Path) -> None:
    """The save comes first: when it fails, the rule is not approved in memory either and the
    request stays pending (a later save cannot write it behind the approver's back)."""
    a = make(tmp_path)
    seen: list[Pending] = []

    async def remember(p: Pending) -> None:
        seen.append(p)

    waiting = asyncio.ensure_future(a.authorize("git reset --hard", task_id="t", backend="local", on_pending=remember))
    while not seen:
        await asyncio.sleep(0.01)
    (tmp_path / "approvals.json").mkdir()  # the atomic rename onto it fails
    with pytest.raises(OSError):
        a.resolve(seen[0].approval_id, ApprovalDecision.APPROVE_ALWAYS, by="alice")
    assert a.check("git reset --hard", task_id="t", backend="local").decision is Decision.ASK
    assert [p.approval_id for p in a.pending()] == [seen[0].approval_id]
    a.resolve(seen[0].approval_id, ApprovalDecision.APPROVE_ONCE, by="alice")
    assert (await waiting).allowed
    assert a.check("git reset --hard", task_id="t", backend="local").decision is Decision.ASK
    a.close()


async def test_timeout_denies(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path, timeout_seconds=0.2)
    watcher = a.watch("t")
    job = asyncio.create_task(a.authorize("crontab -r", task_id="t", backend="local"))
    assert not (await next_event(watcher)).resolved
    r = await asyncio.wait_for(job, 5)
    assert not r.allowed and r.decided_by == "timeout" and "approval timed out after 0.2s" in r.message
    ev = await next_event(watcher)
    assert ev.resolved and ev.decision is ApprovalDecision.DENY
    assert a.pending() == []
    await watcher.aclose()
    a.close()


async def test_cancellation_withdraws_the_pending_approval(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)
    watcher = a.watch()
    job = asyncio.create_task(a.authorize("iptables -F", task_id="t", backend="local"))
    ev = await next_event(watcher)
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    gone = await next_event(watcher)
    assert gone.resolved and gone.decision is None and gone.pending.approval_id == ev.pending.approval_id
    assert a.pending() == []
    with pytest.raises(KeyError):
        a.resolve(ev.pending.approval_id, ApprovalDecision.APPROVE_ONCE)
    assert (await audit(tmp_path))[-1]["decision"] == "withdrawn"
    await watcher.aclose()
    a.close()


async def test_identical_concurrent_requests_share_one_approval(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)
    watcher = a.watch()
    j1 = asyncio.create_task(a.authorize("docker volume prune -f", task_id="t", backend="local"))
    j2 = asyncio.create_task(a.authorize("docker volume prune -f", task_id="t", backend="local"))
    ev = await next_event(watcher)
    deadline = asyncio.get_running_loop().time() + 5
    while len(a.pending()) != 1 or not j2.done() and a._pending[ev.pending.approval_id].waiters < 2:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    a.resolve(ev.pending.approval_id, ApprovalDecision.APPROVE_ONCE, by="alice")
    r1, r2 = await asyncio.wait_for(asyncio.gather(j1, j2), 5)
    assert r1.allowed and r2.allowed and r1.approval_id == r2.approval_id
    await watcher.aclose()
    a.close()


async def test_watch_yields_current_pendings_first_and_filters_by_task(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)
    other = a.watch("t1")
    j1 = asyncio.create_task(a.authorize("git push -f", task_id="t1", backend="local"))
    j2 = asyncio.create_task(a.authorize("git push -f", task_id="t2", backend="local"))
    ev = await next_event(other)
    assert ev.pending.task_id == "t1"
    deadline = asyncio.get_running_loop().time() + 5
    while len(a.pending()) < 2:
        assert asyncio.get_running_loop().time() < deadline
        await asyncio.sleep(0.01)
    late = a.watch("t2")
    first = await next_event(late)
    assert first.pending.task_id == "t2" and not first.resolved
    a.forget_task("t1")
    r1 = await asyncio.wait_for(j1, 5)
    assert not r1.allowed and r1.decided_by == "task closed"
    closed = await next_event(other)
    assert closed.resolved and closed.decision is ApprovalDecision.DENY
    a.close()
    r2 = await asyncio.wait_for(j2, 5)
    assert not r2.allowed
    await other.aclose()
    await late.aclose()


async def test_modes_deny_and_allow_never_wait(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path / "deny", mode="deny")
    r = await a.authorize("systemctl stop nginx", task_id="t", backend="local")
    assert not r.allowed and r.approval_id is None and "mode is deny" in r.message
    a.close()
    b = make(tmp_path / "allow", mode="allow")
    r = await b.authorize("systemctl stop nginx", task_id="t", backend="local")
    assert r.allowed and r.decided_by == "mode" and r.verdict.rule == "service_stop"
    assert (await audit(tmp_path / "allow"))[-1]["rule"] == "service_stop"
    assert not (await b.authorize("reboot", task_id="t", backend="local")).allowed
    b.close()


async def test_interactive_pty_asks_unless_allowed(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path, mode="deny")
    r = await a.authorize("bash", task_id="t", backend="local", interactive="opens an interactive shell")
    assert not r.allowed and r.verdict.rule == "interactive_shell"
    a.close()
    b = make(tmp_path / "b", allow_interactive_pty=True)
    assert (await b.authorize("bash", task_id="t", backend="local", interactive="opens an interactive shell")).allowed
    b.close()


def test_corrupt_always_file_is_a_clear_error(tmp_path: pathlib.Path) -> None:
    (tmp_path / "approvals.json").write_text("{not json")
    with pytest.raises(ValueError, match="corrupt"):
        make(tmp_path)


async def test_failing_on_pending_withdraws(tmp_path: pathlib.Path) -> None:
    a = make(tmp_path)

    async def broken(p: Pending) -> None:
        raise ConnectionError("stream gone")

    with pytest.raises(ConnectionError):
        await a.authorize("git push -f", task_id="t", backend="local", on_pending=broken)
    assert a.pending() == []
    a.close()


def test_audit_outside_a_loop_is_written_at_once(tmp_path):
    from executor.approval.store import AuditLog

    log = AuditLog(tmp_path)
    log.record(task="t", command="ls", decision="allow")
    assert json.loads((tmp_path / "audit.jsonl").read_text())["command"] == "ls"
    log.close()


async def test_audit_in_a_loop_is_written_at_its_next_turn_and_on_close(tmp_path):
    from executor.approval.store import AuditLog

    log = AuditLog(tmp_path)
    log.record(task="t", command="one", decision="allow")
    log.record(task="t", command="two ✓", decision="deny")
    assert (tmp_path / "audit.jsonl").read_text() == ""  # the command it admits goes first
    await asyncio.sleep(0)
    assert [json.loads(line)["command"] for line in (tmp_path / "audit.jsonl").read_text().splitlines()] == \
        ["one", "two ✓"]
    log.record(task="t", command="three", decision="allow")
    log.close()  # nothing waiting is lost when the daemon stops
    assert json.loads((tmp_path / "audit.jsonl").read_text().splitlines()[-1])["command"] == "three"


async def test_an_approval_the_audit_log_cannot_record_is_refused(tmp_path: pathlib.Path) -> None:
    """The log breaks while the caller waits (the approver's decision meets a full disk): the
    approved command is refused, never run unrecorded."""
    a = make(tmp_path)

    async def approve_on_a_full_disk(p: Pending) -> None:
        full = os.open("/dev/full", os.O_WRONLY)
        os.dup2(full, a._audit._fd)  # the log's own descriptor now answers ENOSPC
        os.close(full)
        a.resolve(p.approval_id, ApprovalDecision.APPROVE_ONCE, by="alice")

    r = await a.authorize("git push -f", task_id="t", backend="local", on_pending=approve_on_a_full_disk)
    assert not r.allowed and r.decided_by == "audit" and "audit log cannot be written" in r.message
    assert a.audit_problem
    a.close()

"""The approval broker: the core side of the gate (asyncio).

The daemon calls :meth:`Approvals.authorize` before any command reaches a backend.  A
command that needs a human becomes a :class:`Pending` approval that approvers see through
:meth:`Approvals.watch` and decide with :meth:`Approvals.resolve`.  Policy itself is pure
and lives in ``executor.approval``; this module only holds state: pending approvals,
session approvals per task, persisted "always" approvals and the audit log.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import pathlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from executor.approval import AlwaysStore, AuditLog, Decision, GateConfig, GateContext, Verdict, evaluate

STORED = "stored_approval"  # the rule id of an ALLOW that a session/always approval gave


class ApprovalDecision(enum.Enum):
    """An approver's answer (mirrors the proto's ApprovalDecision)."""

    APPROVE_ONCE = "approve_once"
    APPROVE_SESSION = "approve_session"  # this task, this backend and this rule, from now on
    APPROVE_ALWAYS = "approve_always"  # this rule on this backend, persisted across restarts
    DENY = "deny"

    @property
    def approves(self) -> bool:
        return self is not ApprovalDecision.DENY


@dataclass
class Pending:
    """A command waiting for a human."""

    approval_id: str
    task_id: str
    command: str
    rule: str
    reason: str
    segment: str
    backend: str
    created_at: float  # epoch seconds
    expires_at: float  # epoch seconds


@dataclass
class PendingEvent:
    """What watchers see: a new pending approval, or one that left the pending set.

    ``resolved`` with ``decision=None`` means the request was withdrawn (its caller was
    cancelled); a timeout is reported as ``DENY``.
    """

    pending: Pending
    resolved: bool
    decision: ApprovalDecision | None = None


@dataclass
class Authorization:
    """The outcome of :meth:`Approvals.authorize`."""

    allowed: bool
    verdict: Verdict
    message: str = ""  # why it was refused (empty when allowed)
    approval_id: str | None = None  # set when a human was asked
    decided_by: str = ""  # "gate", "mode", "policy", an approver's name, "timeout", "task closed"


@dataclass
class _Answer:
    decision: ApprovalDecision
    by: str
    reason: str


@dataclass
class _Slot:
    pending: Pending
    verdict: Verdict
    key: tuple[str, str, str | None]
    future: asyncio.Future[_Answer]
    deadline: float = 0.0  # time.monotonic(): wall-clock jumps neither shorten nor extend the wait
    waiters: int = 0
    callers: list[str] = field(default_factory=list)
    context: GateContext | None = None  # where the task was, to judge it again


class Approvals:
    """Pending approvals, session/always approvals and the audit log of one daemon."""

    def __init__(self, config: GateConfig, state_dir: pathlib.Path,
                 shown: Callable[[str], str] = lambda text: text) -> None:
        """``shown``: what a text becomes before an approver, the audit log or approvals.json sees it
        (the daemon's redaction: a command or a script the gate quotes may hold a secret)."""
        self.config = config
        self._shown = shown
        self.state_dir = pathlib.Path(state_dir)
        self._always = AlwaysStore(self.state_dir)
        if self._always.dropped_v1:
            logging.getLogger("executor.approvals").warning(
                "approvals.json is from an older version whose 'approve always' rules held on every backend; "
                "not carried over (they ask again once, per backend): %s", ", ".join(self._always.dropped_v1))
        self._audit = AuditLog(self.state_dir)
        self._session: dict[tuple[str, str], dict[str, str]] = {}  # (task, backend) -> rule -> approval id
        self._pending: dict[str, _Slot] = {}
        self._by_key: dict[tuple[str, str, str | None], str] = {}
        self._watchers: list[tuple[str | None, asyncio.Queue[PendingEvent | None]]] = []  # None: the end
        self._closing = False  # shutting down: nobody is asked any more

    # -- dry run ---------------------------------------------------------------------

    def approved_rules(self, task_id: str, backend: str) -> frozenset[str]:
        """Rule ids approved for this task on this backend: its session approvals plus the
        "always" ones granted on that backend. An approval never crosses backends."""
        session = self._session.get((task_id, backend))
        always = self._always.rules_for(backend)
        return always | frozenset(session) if session else always

    def check(self, command: str, *, task_id: str = "", backend: str = "", interactive: str | None = None,
              context: GateContext | None = None) -> Verdict:
        """The dry run (CheckCommand): what authorize would decide right now, without asking.

        ``interactive``: why live input to the program could run commands the gate never sees.
        ``context``: where the task is (cwd, root, home, paths to protect), for relative paths.
        A command let through by a stored (session or always) approval gets an ALLOW verdict
        whose rule is ``stored_approval`` and whose segment names the approval and its rule."""
        approved = self.approved_rules(task_id, backend)
        verdict = _evaluate(command, self.config, backend, approved, interactive, context)
        if approved and verdict.decision is Decision.ALLOW:
            bare = _evaluate(command, self.config, backend, frozenset(), interactive, context)
            if bare.decision is Decision.ASK and bare.rule in approved:
                return Verdict(Decision.ALLOW, STORED, f"allowed by {self._describe(task_id, backend, bare.rule)}",
                               bare.segment)
        return verdict

    def _describe(self, task_id: str, backend: str, rule: str) -> str:
        session = self._session.get((task_id, backend), {})
        if rule in session:
            return f"approval {session[rule]} (approve_session, rule {rule}, backend {backend})"
        return f"approval {self._always.approval_id(backend, rule)} (approve_always, rule {rule}, backend {backend})"

    # -- the gate ----------------------------------------------------------------------

    async def authorize(
        self,
        command: str,
        *,
        task_id: str,
        backend: str,
        caller: str = "",
        on_pending: Callable[[Pending], Awaitable[None]] | None = None,
        interactive: str | None = None,
        verdict: Verdict | None = None,
        context: GateContext | None = None,
    ) -> Authorization:
        """Decide whether ``command`` may run, asking a human when the policy says ask.

        Returns once decided; never raises for a refusal (``allowed=False`` with a message).
        Cancelling the awaiting coroutine withdraws the pending approval. ``verdict`` is this
        command's :meth:`check` when the caller has just made it (it is not evaluated twice).
        """
        if verdict is None:
            verdict = self.check(command, task_id=task_id, backend=backend, interactive=interactive, context=context)
        if verdict.decision is not Decision.ASK:
            return self.settle(command, verdict, task_id=task_id, backend=backend, caller=caller)
        return await self._ask(command, verdict, task_id, backend, caller, on_pending, interactive, context)

    def settle(self, command: str, verdict: Verdict, *, task_id: str, backend: str, caller: str = "") -> Authorization:
        """The decision for a verdict that asks nobody (allow or deny), recorded in the audit log."""
        if verdict.decision is Decision.ALLOW:
            by = "stored approval" if verdict.rule == STORED else "mode" if verdict.rule else "gate"
            if not verdict.rule:
                self._record(task_id, backend, command, verdict, "allow", by, caller)
                return Authorization(True, verdict, decided_by=by)
            # A flagged command let through (mode allow, a stored approval): only once it is on record.
            try:
                self._record(task_id, backend, command, verdict, "allow", by, caller, sync=True)
            except OSError:
                return Authorization(False, verdict, self._unrecorded(), decided_by="audit")
            return Authorization(True, verdict, decided_by=by)
        if verdict.decision is Decision.DENY:
            by = "gate" if verdict.hardline else "policy"
            self._record(task_id, backend, command, verdict, "deny", by, caller)
            return Authorization(False, verdict, _denied_message(verdict), decided_by=by)
        raise ValueError(f"a verdict that asks ({verdict.rule}) is settled by a human, not by settle()")

    async def _ask(
        self,
        command: str,
        verdict: Verdict,
        task_id: str,
        backend: str,
        caller: str,
        on_pending: Callable[[Pending], Awaitable[None]] | None,
        interactive: str | None,
        context: GateContext | None = None,
    ) -> Authorization:
        if self._audit.broken:  # a decision that cannot be recorded is not made
            return Authorization(False, verdict, self._unrecorded(), decided_by="audit")
        if self._closing:  # no approver would see it before the daemon is gone
            self._record(task_id, backend, command, verdict, "deny", "shutdown", caller)
            return Authorization(False, verdict, f"the daemon is shutting down; nobody was asked and the command was "
                                                 f"not run ({verdict.rule})", decided_by="shutdown")
        try:
            slot = self._join_or_create(command, verdict, task_id, backend, interactive)
        except OSError:  # the question itself cannot be recorded: nobody is asked
            return Authorization(False, verdict, self._unrecorded(), decided_by="audit")
        slot.context = context
        slot.waiters += 1
        slot.callers.append(caller)
        try:
            if on_pending is not None:
                await on_pending(slot.pending)
            remaining = max(0.0, slot.deadline - time.monotonic())
            try:
                answer = await asyncio.wait_for(asyncio.shield(slot.future), timeout=remaining)
            except TimeoutError:
                answer = self._expire(slot)
        except BaseException:  # cancelled, or on_pending failed: nobody waits for this caller any more
            slot.waiters -= 1
            if slot.waiters == 0 and not slot.future.done():
                self._withdraw(slot, caller)
            raise
        slot.waiters -= 1
        pid = slot.pending.approval_id
        if answer.decision.approves and self.audit_problem:  # read again: it may have broken during the wait
            return Authorization(False, verdict, self._unrecorded(), pid, "audit")
        if answer.decision.approves:
            return Authorization(True, verdict, "", pid, answer.by)
        if answer.by == "timeout":
            msg = f"approval timed out after {self.config.timeout_seconds:g}s; the command was not run ({verdict.rule})"
        else:
            msg = f"denied by {answer.by or 'an approver'}" + (f": {answer.reason}" if answer.reason else "")
            msg += f" (rule {verdict.rule}: {verdict.reason})"
        return Authorization(False, verdict, msg, pid, answer.by)

    def _join_or_create(
        self, command: str, verdict: Verdict, task_id: str, backend: str, interactive: str | None
    ) -> _Slot:
        key = (task_id, command, interactive)
        existing = self._by_key.get(key)
        if existing is not None and existing in self._pending:
            return self._pending[existing]
        now = time.time()
        pending = Pending(
            # Routable: names its task (<id>@<task_id>, executor.placement.task_of reads it back).
            approval_id=f"{uuid.uuid4().hex}@{task_id}" if task_id else uuid.uuid4().hex,
            task_id=task_id,
            command=self._shown(command),
            rule=verdict.rule,
            reason=self._shown(verdict.reason),
            segment=self._shown(verdict.segment),
            backend=backend,
            created_at=now,
            expires_at=now + self.config.timeout_seconds,
        )
        # On record before any approver sees it (OSError: nobody is asked for what the log cannot hold).
        self._record(task_id, backend, command, verdict, "ask", "gate", "", sync=True,
                     approval_id=pending.approval_id)
        slot = _Slot(pending, verdict, key, asyncio.get_running_loop().create_future())
        slot.deadline = time.monotonic() + self.config.timeout_seconds
        self._pending[pending.approval_id] = slot
        self._by_key[key] = pending.approval_id
        self._notify(PendingEvent(pending, resolved=False))
        return slot

    def _finish(self, slot: _Slot, answer: _Answer | None) -> None:
        """Take a slot out of the pending set, tell watchers and audit the outcome."""
        pid = slot.pending.approval_id
        self._pending.pop(pid, None)
        if self._by_key.get(slot.key) == pid:
            del self._by_key[slot.key]
        p = slot.pending
        if answer is None:
            self._record(p.task_id, p.backend, p.command, slot.verdict, "withdrawn", "caller", "", approval_id=pid)
            self._notify(PendingEvent(p, resolved=True, decision=None))
            if not slot.future.done():
                slot.future.cancel()
            return
        decision = "allow" if answer.decision.approves else "deny"
        self._record_quietly(
            p.task_id,
            p.backend,
            p.command,
            slot.verdict,
            decision,
            answer.by,
            "",
            approval_id=pid,
            approval=answer.decision.value,
            approver_reason=answer.reason,
        )
        self._notify(PendingEvent(p, resolved=True, decision=answer.decision))
        if not slot.future.done():
            slot.future.set_result(answer)

    def _expire(self, slot: _Slot) -> _Answer:
        if slot.future.done():
            return slot.future.result()
        answer = _Answer(ApprovalDecision.DENY, "timeout", f"no answer within {self.config.timeout_seconds:g}s")
        self._finish(slot, answer)
        return answer

    def _withdraw(self, slot: _Slot, caller: str) -> None:
        self._finish(slot, None)

    # -- approvers -----------------------------------------------------------------------

    @property
    def always_path(self) -> pathlib.Path:
        """The file that keeps "approve always" rules."""
        return self._always.path

    def resolve(self, approval_id: str, decision: ApprovalDecision, *, reason: str = "", by: str = "") -> None:
        """Decide a pending approval. Raises KeyError for an unknown, decided or expired id."""
        slot = self._pending.get(approval_id)
        if slot is None or slot.future.done() or slot.deadline <= time.monotonic():
            raise KeyError(f"no pending approval {approval_id!r}: unknown, already decided or expired")
        rule, p = slot.verdict.rule, slot.pending
        if decision is ApprovalDecision.APPROVE_ALWAYS:
            # Persisted first: a save that fails (disk full) raises and changes nothing.
            self._always.add(p.backend, rule, approval_id=approval_id, by=by, reason=reason, command=p.command)
        elif decision is ApprovalDecision.APPROVE_SESSION:
            self._session.setdefault((p.task_id, p.backend), {}).setdefault(rule, approval_id)
        self._finish(slot, _Answer(decision, by or "approver", reason))
        if decision in (ApprovalDecision.APPROVE_SESSION, ApprovalDecision.APPROVE_ALWAYS):
            self._release_covered(p.task_id if decision is ApprovalDecision.APPROVE_SESSION else None, p.backend, by)

    def share(self, command: str, backend: str, rule: str, *, approval_id: str = "", reason: str = "",
              by: str = "") -> bool:
        """An APPROVE_ALWAYS another fleet member was given, carried here by the approver: stored only
        when this daemon's own gate asks for exactly ``rule`` on ``command`` (ValueError otherwise),
        so it never grants what this gate would refuse or judge differently. False: already held."""
        verdict = self.check(command, backend=backend)
        if verdict.decision is Decision.ALLOW and verdict.rule == STORED and rule in self._always.rules_for(backend):
            return False
        if verdict.decision is not Decision.ASK or verdict.rule != rule:
            raise ValueError(f"this daemon's gate does not ask for rule {rule!r} on that command on backend "
                             f"{backend!r} (it says {verdict.decision.name} by rule {verdict.rule!r}); not stored")
        self._always.add(backend, rule, approval_id=approval_id or "shared", by=by, reason=reason,
                         command=self._shown(command))
        self._record_quietly("", backend, command, verdict, "approve_always", by or "approver", "",
                             approval_id=approval_id, shared=True)
        self._release_covered(None, backend, by)
        return True

    def _release_covered(self, task_id: str | None, backend: str, by: str) -> None:
        """Pending requests that a new session/always approval now covers go through too."""
        for slot in list(self._pending.values()):
            p = slot.pending
            if (task_id is not None and p.task_id != task_id) or p.backend != backend:
                continue
            again = self.check(slot.key[1], task_id=p.task_id, backend=p.backend, interactive=slot.key[2],
                               context=slot.context)
            if again.decision is Decision.ALLOW:
                self._finish(
                    slot, _Answer(ApprovalDecision.APPROVE_ONCE, by or "approver", "covered by a broader approval")
                )

    def pending(self, task_id: str | None = None) -> list[Pending]:
        """The approvals waiting right now (optionally of one task)."""
        return [s.pending for s in self._pending.values() if task_id in (None, "", s.pending.task_id)]

    async def watch(self, task_id: str | None = None) -> AsyncIterator[PendingEvent]:
        """Pending approvals now, then every new or resolved one, until cancelled or the daemon
        shuts down (then, once the pending ones were reported denied, the stream ends)."""
        queue: asyncio.Queue[PendingEvent | None] = asyncio.Queue()
        entry = (task_id or None, queue)
        if self._closing:
            return
        self._watchers.append(entry)
        try:
            for p in self.pending(task_id):
                yield PendingEvent(p, resolved=False)
            while (event := await queue.get()) is not None:
                yield event
        finally:
            with contextlib.suppress(ValueError):
                self._watchers.remove(entry)

    def _notify(self, event: PendingEvent) -> None:
        for task_filter, queue in self._watchers:
            if task_filter is None or task_filter == event.pending.task_id:
                queue.put_nowait(event)

    # -- lifecycle -----------------------------------------------------------------------

    def forget_task(self, task_id: str) -> None:
        """CloseTask: drop the task's session approvals and deny whatever it still waits for."""
        for key in [k for k in self._session if k[0] == task_id]:
            del self._session[key]
        for slot in list(self._pending.values()):
            if slot.pending.task_id == task_id:
                self._finish(slot, _Answer(ApprovalDecision.DENY, "task closed", "the task was closed"))

    def close_pending(self) -> None:
        """The daemon begins to shut down: deny everything pending, and every later ask at once."""
        self._closing = True
        for slot in list(self._pending.values()):
            self._finish(slot, _Answer(ApprovalDecision.DENY, "shutdown", "the daemon is shutting down"))
        for _, queue in self._watchers:  # approvers' streams end (the server's stop would wait on them)
            queue.put_nowait(None)

    def close(self) -> None:
        """Deny everything still pending and close the audit log (daemon shutdown)."""
        self.close_pending()
        self._audit.close()

    # -- audit ---------------------------------------------------------------------------

    @property
    def audit_problem(self) -> str:
        """Why the audit log cannot be written ("" when it can): health reports it."""
        return self._audit.broken

    def reopen_audit(self) -> None:
        self._audit.reopen()

    def _unrecorded(self) -> str:
        return (f"denied: the audit log cannot be written ({self._audit.broken}); commands the gate flags are "
                "refused until it can (free space in the state directory)")

    def _record_quietly(self, task_id: str, backend: str, command: str, verdict: Verdict, decision: str, by: str,
                        caller: str, **extra: object) -> None:
        """Record an approver's decision at once; a failure marks the log broken (the waiting caller
        then refuses) instead of failing the approver's call."""
        try:
            self._record(task_id, backend, command, verdict, decision, by, caller, sync=True, **extra)
        except OSError:
            pass

    def _record(
        self,
        task_id: str,
        backend: str,
        command: str,
        verdict: Verdict,
        decision: str,
        by: str,
        caller: str,
        sync: bool = False,
        **extra: object,
    ) -> None:
        self._audit.record(
            sync=sync,
            task=task_id,
            backend=backend,
            command=self._shown(command),
            rule=verdict.rule,
            reason=self._shown(verdict.reason),
            segment=self._shown(verdict.segment),
            decision=decision,
            decided_by=by,
            caller=caller,
            **extra,
        )


def _evaluate(command: str, config: GateConfig, backend: str, approved: frozenset[str],
              interactive: str | None, context: GateContext | None = None) -> Verdict:
    return evaluate(command, config, backend=backend, approved_rules=approved, interactive=interactive,
                    context=context)


def _denied_message(verdict: Verdict) -> str:
    floor = " (hardline floor: only the operator's config can change this)" if verdict.hardline else ""
    return f"denied by the approval gate: {verdict.reason} [rule {verdict.rule}]{floor}"


__all__ = ["ApprovalDecision", "Approvals", "Authorization", "Pending", "PendingEvent"]

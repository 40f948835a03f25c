"""Several daemons serving one fleet of agents: each task owned by one member.

A task's shell, files and processes live in one daemon, so every call for a task must reach the
same daemon. The placement rule is :mod:`executor.placement` (crc32 slot -> slot table over the
member names): the daemons' ownership check, the proxy configs (``executor fleet proxy-config``)
and this module all compute it, so they agree by construction.

Usually agents go through a proxy (nginx or HAProxy, deploy/) with a plain ``Client``: the client
sends ``x-executor-task`` and the proxy routes. ``Fleet`` is the same placement without a proxy:

    fleet = Fleet({"executor-0": "executor-0.executor:50051", "executor-1": "executor-1.executor:50051"})
    fleet.run("task-42", "make test")          # always reaches the member that owns task-42

``FleetApprovals`` is the approver's side: every member's pending approvals in one stream, each
resolved on its owner, and an APPROVE_ALWAYS carried to every other member (ShareApproval).

Client-side only: it imports the client, nothing of the server.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Unpack

import grpc

from executor.client import Client, ExecOptions, ExecResult, ExecutorError, decision_value, error_from
from executor.placement import owner_of, task_of
from executor.v1 import executor_pb2 as pb


def _members(members: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """name -> target; a plain list of targets names each member by its target."""
    out = dict(members) if isinstance(members, Mapping) else {t: t for t in dict.fromkeys(members)}
    if not out:
        raise ValueError("a fleet needs at least one member")
    return out


def pick_target(task_id: str, targets: Sequence[str]) -> str:
    """The target owning ``task_id`` when members are named by their targets."""
    if not targets:
        raise ValueError("no targets to choose from")
    return owner_of(task_id, targets)


class Fleet:
    """A Client per member; calls that name a task go to the member that owns it."""

    def __init__(self, members: Mapping[str, str] | Sequence[str], *, token: str | None = None,
                 credentials: grpc.ChannelCredentials | None = None, deadline: float | None = None) -> None:
        self.members = _members(members)
        self.targets = list(self.members.values())
        self._clients = {name: Client(t, token=token, credentials=credentials, deadline=deadline)
                         for name, t in self.members.items()}

    def owner(self, task_id: str) -> str:
        return owner_of(task_id, self.members)

    def client_for(self, task_id: str) -> Client:
        return self._clients[self.owner(task_id)]

    def client_of(self, member: str) -> Client:
        return self._clients[member]

    def exec(self, task_id: str, command: str, *, timeout: float = 0.0, rpc_timeout: float | None = None,
             **kwargs: Unpack[ExecOptions]) -> Iterator[pb.ExecEvent]:
        """Client.exec on the member that owns the task."""
        return self.client_for(task_id).exec(task_id, command, timeout=timeout, rpc_timeout=rpc_timeout, **kwargs)

    def run(self, task_id: str, command: str, *, timeout: float = 0.0, rpc_timeout: float | None = None,
            **kwargs: Unpack[ExecOptions]) -> ExecResult:
        """Client.run on the member that owns the task."""
        return self.client_for(task_id).run(task_id, command, timeout=timeout, rpc_timeout=rpc_timeout, **kwargs)

    def close_task(self, task_id: str, remove_files: bool = False) -> pb.CloseTaskResponse:
        return self.client_for(task_id).close_task(task_id, remove_files)

    def list_tasks(self) -> dict[str, pb.ListTasksResponse]:
        """Every member's tasks, by member name."""
        return {name: c.list_tasks() for name, c in self._clients.items()}

    def close(self) -> None:
        for c in self._clients.values():
            c.close()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class FleetPending:
    member: str  # the daemon that reported it (its owner)
    approval: pb.PendingApproval


@dataclass
class Resolution:
    owner: str
    shared: dict[str, str]  # member -> "stored", "already held" or why it was not


class FleetApprovals:
    """The approver's view of a fleet: watch every member, resolve on the owner, share always."""

    def __init__(self, members: Mapping[str, str] | Sequence[str], *, token: str | None = None,
                 deadline: float | None = 30.0, credentials: grpc.ChannelCredentials | None = None) -> None:
        self.fleet = Fleet(members, token=token, deadline=deadline, credentials=credentials)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._deadline = deadline
        self._known: dict[str, FleetPending] = {}
        self._lock = threading.Lock()

    def watch(self, task_id: str = "") -> Iterator[FleetPending]:
        """Every member's pending approvals (then new and resolved ones), merged, until closed. A
        member that cannot be watched (down, refused) ends the watch with an ExecutorError naming
        it: an approver never silently misses a member."""
        events: queue.Queue[FleetPending | tuple[str, ExecutorError]] = queue.Queue()
        stop = threading.Event()

        def pump(name: str, client: Client) -> None:
            try:
                for p in client.watch_approvals(task_id):
                    if stop.is_set():
                        return
                    events.put(FleetPending(name, p))
            except ExecutorError as exc:
                events.put((name, exc))

        threads = [threading.Thread(target=pump, args=(n, c), daemon=True, name=f"watch-{n}")
                   for n, c in self.fleet._clients.items()]
        for t in threads:
            t.start()
        try:
            while True:
                item = events.get()
                if isinstance(item, tuple):
                    name, exc = item
                    raise ExecutorError(exc.code, f"fleet member {name!r}: {exc.message}")
                with self._lock:
                    if item.approval.resolved:
                        self._known.pop(item.approval.approval_id, None)
                    else:
                        self._known[item.approval.approval_id] = item
                yield item
        finally:
            stop.set()

    def owner(self, approval_id: str) -> str:
        with self._lock:
            known = self._known.get(approval_id)
        if known is not None:
            return known.member
        task = task_of(approval_id)
        if not task:
            raise ValueError(f"approval id {approval_id!r} names no task (<id>@<task_id>)")
        return self.fleet.owner(task)

    def resolve(self, approval_id: str, decision: str | int, reason: str = "",
                pending: pb.PendingApproval | None = None) -> Resolution:
        """Resolve on the owner; an APPROVE_ALWAYS is then carried to every other member, each of
        which judges the command again and stores it only if its own gate asks for that rule."""
        owner = self.owner(approval_id)
        if pending is None:  # before resolving: the watch forgets it once the owner reports it resolved
            with self._lock:
                known = self._known.get(approval_id)
            pending = known.approval if known is not None else None
        self.fleet.client_of(owner).resolve_approval(approval_id, decision, reason)
        shared: dict[str, str] = {}
        if decision_value(decision) != pb.APPROVAL_DECISION_APPROVE_ALWAYS:
            return Resolution(owner, shared)
        if pending is None:
            raise ValueError(f"approval {approval_id!r} was resolved on {owner!r}, but its command and rule are "
                             "unknown here (watch first, or pass pending=): not shared with the other members")
        for name, client in self.fleet._clients.items():
            if name == owner:
                continue
            try:
                resp = self._share(client, pb.ShareApprovalRequest(
                    backend=pending.backend, rule=pending.rule, command=pending.command, reason=reason,
                    approval_id=approval_id))
                shared[name] = "stored" if resp.stored else "already held"
            except ExecutorError as exc:
                shared[name] = f"not stored: {exc.message}"
        return Resolution(owner, shared)

    def pending_on(self, member: str, wait: float = 1.0) -> list[pb.PendingApproval]:
        """The approvals pending right now on one member (the start of its watch stream, read for
        ``wait`` seconds)."""
        out: list[pb.PendingApproval] = []
        call = self.fleet.client_of(member).stub.WatchApprovals(pb.WatchApprovalsRequest(), metadata=self._metadata,
                                                                timeout=wait)
        try:
            for p in call:
                if not p.resolved:
                    out.append(p)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:  # the deadline ends the listing
                raise error_from(exc) from None
        return out

    def _share(self, client: Client, request: pb.ShareApprovalRequest) -> pb.ShareApprovalResponse:
        try:
            response: pb.ShareApprovalResponse = client.stub.ShareApproval(request, metadata=self._metadata,
                                                                           timeout=self._deadline)
        except grpc.RpcError as exc:
            raise error_from(exc) from None
        return response

    def close(self) -> None:
        self.fleet.close()

    def __enter__(self) -> "FleetApprovals":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Fleet", "FleetApprovals", "FleetPending", "Resolution", "pick_target"]

"""Several daemons serving one fleet of agents: each task pinned to one daemon by its id.

A task's shell, files and processes live in one daemon, so every call for a task must reach the same
daemon. ``pick_target`` uses rendezvous (highest-random-weight) hashing: every client that knows the
same list of targets picks the same daemon for a task, with no coordination, and adding or removing a
daemon moves only the tasks that hashed to it (about 1/N of them).

    fleet = Fleet(["dns:///executor-0.executor:50051", "dns:///executor-1.executor:50051"], token=...)
    fleet.run("task-42", "make test")          # always reaches the same daemon for task-42

Client-side only: it imports the client, nothing of the server.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from executor.client import Client


def _weight(target: str, task_id: str) -> int:
    digest = hashlib.blake2b(f"{target}\x00{task_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def pick_target(task_id: str, targets: Sequence[str]) -> str:
    """The daemon that owns ``task_id`` among ``targets`` (stable across clients and restarts)."""
    if not targets:
        raise ValueError("no targets to choose from")
    return max(targets, key=lambda t: (_weight(t, task_id), t))


class Fleet:
    """A Client per daemon; calls that name a task go to the daemon that owns it."""

    def __init__(self, targets: Sequence[str], *, token: str | None = None, **client_kwargs) -> None:
        if not targets:
            raise ValueError("a fleet needs at least one target")
        self.targets = list(dict.fromkeys(targets))
        self._clients = {t: Client(t, token=token, **client_kwargs) for t in self.targets}

    def client_for(self, task_id: str) -> Client:
        return self._clients[pick_target(task_id, self.targets)]

    def exec(self, task_id: str, command: str, **kwargs):
        return self.client_for(task_id).exec(task_id, command, **kwargs)

    def run(self, task_id: str, command: str, **kwargs):
        return self.client_for(task_id).run(task_id, command, **kwargs)

    def close_task(self, task_id: str, remove_files: bool = False):
        return self.client_for(task_id).close_task(task_id, remove_files)

    def list_tasks(self) -> dict[str, object]:
        """Every daemon's tasks, by target."""
        return {t: c.list_tasks() for t, c in self._clients.items()}

    def close(self) -> None:
        for c in self._clients.values():
            c.close()

    def __enter__(self) -> "Fleet":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

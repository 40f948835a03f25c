"""PutArchive / GetArchive: tar streams in and out of a task's directory; ReadFile / WriteFile:
one file's bytes, with the same confinement.

Two layers. Here, before the backend is touched, a fast first pass on strings: the path must
not leave the task's directory as written, and ``plan_archive`` (the same rules every backend
applies) refuses absolute or ``..`` member names, devices, FIFOs and links that point out.
The guarantee itself is in ``Sandbox.put_archive`` / ``get_archive``: the path, every member
and every link are resolved there, on the sandbox's own filesystem, so a symlink a command
planted in the task directory cannot lead a read or a write outside it."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator
from typing import IO, Protocol

from executor.backends.base import BackendError, ErrorKind, plan_archive
from executor.errors import CoreError, from_backend, invalid
from executor.redact import Redactor, StreamRedactor
from executor.tasks import Task, resolve_inside
from executor.v1 import executor_pb2 as pb

CHUNK = 1 << 20


class FilesCore(Protocol):
    """What these calls need of the core (``executor.service.Executor``)."""

    redactor: Redactor  # what comes back out is redacted like command output

    async def task_for_files(self, task_id: str, backend: str) -> Task:
        """The task, created if new, with its sandbox open."""
        ...


def check_members(tar_file: IO[bytes]) -> int:
    """The first pass over an archive (a binary file object at its start): raises CoreError
    for a member that would leave the destination as written; returns the member count."""
    try:
        return plan_archive(tar_file).count
    except BackendError as exc:
        if exc.kind is ErrorKind.INVALID_ARGUMENT:
            raise invalid(exc.message) from None
        raise


async def put_archive(core: FilesCore, chunks: AsyncIterator[pb.PutArchiveChunk], max_bytes: int
                      ) -> tuple[int, int]:
    first = None
    received = 0
    with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
        async for chunk in chunks:
            if first is None:
                first = chunk
            received += len(chunk.data)
            if received > max_bytes:
                raise invalid(f"archive exceeds {max_bytes} bytes")
            spool.write(chunk.data)
        if first is None:
            raise invalid("empty request: the first chunk must name task_id and path")
        task = await core.task_for_files(first.task_id, first.backend)
        dest = resolve_inside(task.root, first.path or ".", "path")
        spool.seek(0)
        entries = check_members(spool)
        spool.seek(0)

        async def body() -> AsyncIterator[bytes]:
            while True:
                data = spool.read(CHUNK)
                if not data:
                    return
                yield data

        try:
            await task.open_sandbox.put_archive(dest, body())
        except BackendError as exc:
            raise from_backend(task.backend_name, exc) from exc
    return received, entries


async def _redacted(task: Task, data: AsyncIterator[bytes], out: StreamRedactor | None) -> AsyncIterator[bytes]:
    """A file's or an archive's bytes on their way out, redacted like command output; what came
    before a backend failure is returned, then the failure."""
    failed: BackendError | None = None
    try:
        async for chunk in data:
            chunk = out.feed(chunk) if out is not None else chunk
            if chunk:
                yield chunk
    except BackendError as exc:
        failed = exc
    if out is not None and (tail := out.flush()):
        yield tail
    if failed is not None:
        raise from_backend(task.backend_name, failed) from failed


async def get_archive(core: FilesCore, task_id: str, path: str, backend: str) -> AsyncIterator[bytes]:
    task = await core.task_for_files(task_id, backend)
    target = resolve_inside(task.root, path or ".", "path")
    # Masked with as many bytes as each secret has: the tar's members keep their sizes.
    out = core.redactor.stream(same_length=True) if core.redactor else None
    async for data in _redacted(task, task.open_sandbox.get_archive(target), out):
        yield data


async def read_file(core: FilesCore, task_id: str, path: str, backend: str) -> AsyncIterator[bytes]:
    if not path:
        raise invalid("path is required: the file to read")
    task = await core.task_for_files(task_id, backend)
    target = resolve_inside(task.root, path, "path")
    out = core.redactor.stream() if core.redactor else None
    async for data in _redacted(task, task.open_sandbox.read_file(target), out):
        yield data


async def write_file(core: FilesCore, chunks: AsyncIterator[pb.WriteFileChunk]) -> tuple[str, int]:
    """The first chunk names the task, the path, the mode and make_parents; every chunk's data
    goes to the file as it arrives (no size limit but the sandbox's disk)."""
    first = None
    async for chunk in chunks:
        first = chunk
        break
    if first is None or not first.path:
        raise invalid("empty request: the first chunk must name task_id and path")
    if first.mode > 0o7777:
        raise invalid(f"mode {first.mode:o} is not a permission mode (at most 7777 octal)")
    task = await core.task_for_files(first.task_id, first.backend)
    target = resolve_inside(task.root, first.path, "path")

    async def body() -> AsyncIterator[bytes]:
        if first.data:
            yield first.data
        async for chunk in chunks:
            if chunk.data:
                yield chunk.data

    try:
        return await task.open_sandbox.write_file(target, body(), mode=first.mode, make_parents=first.make_parents)
    except BackendError as exc:
        raise from_backend(task.backend_name, exc) from exc


__all__ = ["put_archive", "get_archive", "read_file", "write_file", "check_members", "CoreError"]

"""PutArchive / GetArchive: tar streams in and out of a task's directory.

Uploaded archives are spooled and checked before anything reaches the backend: every
member must stay inside the destination, links included; devices and FIFOs are refused."""

from __future__ import annotations

import posixpath
import tarfile
import tempfile
from collections.abc import AsyncIterator

from executor.backends.base import BackendError
from executor.errors import CoreError, from_backend, invalid
from executor.tasks import resolve_inside

CHUNK = 1 << 20


def check_members(tar: tarfile.TarFile) -> int:
    """Raises CoreError for a member that would leave the destination; returns the count."""
    count = 0
    for member in tar:
        count += 1
        name = member.name
        norm = posixpath.normpath(name)
        if name.startswith("/") or norm == ".." or norm.startswith("../"):
            raise invalid(f"archive member {name!r} leaves the destination directory")
        if member.issym() or member.islnk():
            target = member.linkname
            if target.startswith("/"):
                raise invalid(f"archive link {name!r} -> {target!r} points outside the task's directory")
            base = posixpath.dirname(norm) if member.issym() else ""
            resolved = posixpath.normpath(posixpath.join(base, target))
            if resolved == ".." or resolved.startswith("../"):
                raise invalid(f"archive link {name!r} -> {target!r} points outside the destination directory")
        elif not (member.isfile() or member.isdir()):
            raise invalid(f"archive member {name!r} is a device or FIFO; only files, directories and links are accepted")
    return count


async def put_archive(core, chunks: AsyncIterator, max_bytes: int) -> tuple[int, int]:
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
        try:
            with tarfile.open(fileobj=spool, mode="r:") as tar:
                entries = check_members(tar)
        except tarfile.TarError as exc:
            raise invalid(f"not a valid tar stream: {exc}") from None
        spool.seek(0)

        async def body():
            while True:
                data = spool.read(CHUNK)
                if not data:
                    return
                yield data

        try:
            await task.sandbox.put_archive(dest, body())
        except BackendError as exc:
            raise from_backend(task.backend_name, exc) from exc
    return received, entries


async def get_archive(core, task_id: str, path: str, backend: str) -> AsyncIterator[bytes]:
    task = await core.task_for_files(task_id, backend)
    target = resolve_inside(task.root, path or ".", "path")
    try:
        async for data in task.sandbox.get_archive(target):
            yield data
    except BackendError as exc:
        raise from_backend(task.backend_name, exc) from exc


__all__ = ["put_archive", "get_archive", "check_members", "CoreError"]

"""The container itself: created or found by label, restarted, watched (engine events), and
the tar streams that move files into it."""

from __future__ import annotations


import asyncio
import collections
import io
import tarfile
import threading
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any


from ..base import (
    BackendError,
    ErrorKind,
)

from .options import LABEL_BACKEND, LABEL_CONFIG, LABEL_DAEMON, LABEL_SCOPE, SHARED, _status
from .process import _Killer, _SpawnerConn

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named in annotations
    from .backend import DockerBackend


class _Container:
    """One labelled container (the daemon's shared one, or a task's) and its life story."""

    def __init__(self, backend: "DockerBackend", scope: str) -> None:
        self.backend = backend
        self.scope = scope
        self.id: str | None = None
        self.started_at: str | None = None
        self.generation = 0
        self.notices: list[tuple[int, str]] = []
        self._suspect: str | None = None
        self._lock = asyncio.Lock()
        self.known_dirs: set[str] = set()
        self.events: collections.deque[tuple[float, str]] = collections.deque(maxlen=32)
        self.killer = _Killer()
        self.spawner = _SpawnerConn(self)
        self.changed = asyncio.Event()
        self.cleaned = False
        self.tasks: set[str] = set()  # tasks with a sandbox here (released ones removed)

    _WORDS = {"kill": "was sent a signal by the engine (docker kill / docker rm -f)", "die": "stopped",
              "destroy": "was removed", "oom": "ran out of memory", "stop": "was stopped",
              "pause": "was paused"}

    def on_event(self, action: str, detail: str) -> None:
        """An engine event about this container (see _EventWatcher).

        ``oom`` alone is not a loss: the kernel killed one process and the container runs on
        (the command reports -9 as it would anywhere); if pid 1 died, ``die`` follows."""
        if action in ("oom", "pause"):
            return
        words = self._WORDS.get(action, f"got '{action}'")
        self.events.append((time.monotonic(), f"container {self.name} {words}{detail}"))
        self.invalidate(f"container {self.name} {words}")
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    def event_since(self, since: float) -> str:
        return "; ".join(text for at, text in self.events if at >= since)

    @property
    def name(self) -> str:
        base = f"executor-{self.backend.name}-{self.backend.instance_id[:8]}"
        return base if self.scope == SHARED else f"{base}-{self.scope}"[:120]

    @property
    def volume(self) -> str:
        base = f"executor-{self.backend.name}-{self.backend.instance_id[:8]}-workspace"
        return base if self.scope == SHARED else f"{base}-{self.scope}"[:120]

    def labels(self) -> dict[str, str]:
        return {**self.backend.options.labels, LABEL_DAEMON: self.backend.instance_id,
                LABEL_BACKEND: self.backend.name, LABEL_SCOPE: self.scope, LABEL_CONFIG: self.backend.config_hash}

    def invalidate(self, reason: str) -> None:
        """A process saw the container fail: check it again before the next use."""
        self._suspect = reason

    async def ensure(self) -> str:
        """The running container's id: found by label, started, or created."""
        if self.id is not None and self._suspect is None:
            return self.id
        self.backend.watch_events()
        async with self._lock:
            if self.id is not None and self._suspect is None:
                return self.id
            had = self.id
            cid, started, note, created = await self.backend.call(self._ensure_sync,
                                                                  f"preparing container {self.name}")
            if had is not None and cid != had:
                note = note or f"container {self.name} was gone and has been recreated"
            if had is not None and cid == had and started != self.started_at:
                note = note or f"container {self.name} had stopped and has been restarted"
            if cid != had or started != self.started_at:
                self.known_dirs.clear()
            if had is None and not self.cleaned and not created:
                # First attach in this daemon's life: end what a previous daemon left running
                # (before anything of ours runs here). Done here, not only in start(), so a
                # daemon that started while the engine was down still does it.
                self.backend.orphans_ended += await self.backend.cleanup(cid)
                self.cleaned = True
            self.id, self.started_at, self._suspect = cid, started, None
            if note:
                self.generation += 1
                self.notices.append((self.generation, note + f" (files under {self.backend.options.workspace} are kept)"))
            return cid

    def _ensure_sync(self, api: Any) -> tuple[str, str, str, bool]:
        """(id, StartedAt, a note for the tasks, whether it was created just now)."""
        import docker.errors

        note = ""
        created = False
        found = api.containers(all=True, filters={"label": [f"{LABEL_DAEMON}={self.backend.instance_id}",
                                                            f"{LABEL_SCOPE}={self.scope}",
                                                            f"{LABEL_BACKEND}={self.backend.name}"]})
        for c in found:
            if c["Labels"].get(LABEL_CONFIG) != self.backend.config_hash:
                api.remove_container(c["Id"], force=True)
                note = f"container {self.name} was replaced because the backend's options changed"
                found = []
                break
        if found:
            cid = found[0]["Id"]
            state = api.inspect_container(cid)["State"]
            if not state.get("Running"):
                api.start(cid)
                note = (f"container {self.name} had stopped ({_state_reason(state)}) and has been restarted")
        else:
            cid = self._create(api)
            created = True
            if not note and self.backend.remembered(self.scope) not in (None, cid):
                note = f"container {self.name} was gone and has been recreated"
            try:
                api.start(cid)
            except docker.errors.APIError:
                api.remove_container(cid, force=True)
                raise
        self.backend.remember(self.scope, cid)
        self._check_image_tools(api, cid)
        started = api.inspect_container(cid)["State"].get("StartedAt", "")
        return cid, started, note, created

    def _check_image_tools(self, api: Any, cid: str) -> None:
        """The programs every spawn relies on must be in the image; say so plainly if not."""
        for path in (self.backend.options.env_program, "/bin/sh"):
            res = api.head(api._url("/containers/{0}/archive", cid), params={"path": path})
            if res.status_code == 404:
                raise BackendError(f"image {self.backend.options.image} has no {path}; the docker backend runs every "
                                   "process through it (install coreutils and a POSIX sh, or set `env_program`)",
                                   ErrorKind.FAILED_PRECONDITION)

    def _give_workspace(self, api: Any, image: str) -> None:
        """Make a new volume's root belong to the sandbox user.

        A fresh named volume's root is root's; the archive API skips ``.`` entries, and no
        process in the hardened container may chown (no CAP_CHOWN, and a privileged exec is
        refused once the bounding set is empty). So a one-off container holding only
        CAP_CHOWN does it, once per volume. Without it a task's directory could be emptied
        but not removed."""
        from docker.types import Mount

        uid, gid = self.backend.options.uid_gid
        if uid == 0:
            return
        workspace = self.backend.options.workspace
        host_config = api.create_host_config(
            mounts=[Mount(target=workspace, source=self.volume, type="volume")], network_mode="none",
            cap_drop=["ALL"], cap_add=["CHOWN"], security_opt=["no-new-privileges:true"])
        helper = api.create_container(image, command=["chown", f"{uid}:{gid}", workspace], user="0:0",
                                      host_config=host_config, labels=self.labels(), entrypoint=[])["Id"]
        try:
            api.start(helper)
            result = api.wait(helper, timeout=60)
            if result.get("StatusCode") != 0:
                logs = api.logs(helper).decode(errors="replace").strip()
                raise BackendError(f"could not give {workspace} to user {uid}:{gid}: {logs}",
                                   ErrorKind.FAILED_PRECONDITION)
        finally:
            api.remove_container(helper, force=True)

    def _create(self, api: Any) -> str:
        import docker.errors

        opts = self.backend.options
        image = opts.image
        try:
            api.inspect_image(image)
        except docker.errors.ImageNotFound:
            if not opts.pull:
                raise BackendError(f"image {image} is not in the Docker engine; build it with `make sandbox-image` "
                                   "(or set `pull: true` to pull it from a registry)", ErrorKind.FAILED_PRECONDITION)
            api.pull(image)
        try:
            api.inspect_volume(self.volume)
        except docker.errors.NotFound:
            api.create_volume(self.volume, labels=self.labels())
            try:
                self._give_workspace(api, image)
            except BaseException:
                api.remove_volume(self.volume, force=True)
                raise
        host_config = api.create_host_config(**self.backend.host_config_kwargs(self.volume))
        # The idle main process (docker-init + command) runs as root *without capabilities*:
        # the sandbox user's processes (opts.user, set on every exec) cannot signal it, so
        # `kill -9 -1` or `pkill sleep` in a command cannot stop the container.
        kwargs = dict(image=image, command=list(opts.command), user="0:0", labels=self.labels(),
                      host_config=host_config, working_dir=opts.workspace, hostname="sandbox",
                      name=self.name, detach=True)
        try:
            created: str = api.create_container(**kwargs)["Id"]
            return created
        except docker.errors.APIError as exc:
            if _status(exc) != 409:
                raise
            # A container of that name exists: ours from an older instance, or someone else's.
            other = api.inspect_container(self.name)
            if other["Config"]["Labels"].get(LABEL_BACKEND) != self.backend.name:
                raise BackendError(f"a container named {self.name} exists and is not ours; remove or rename it",
                                   ErrorKind.FAILED_PRECONDITION) from exc
            api.remove_container(self.name, force=True)
            created = api.create_container(**kwargs)["Id"]
            return created

    async def describe_loss(self, backend: "DockerBackend") -> str:
        """What happened to the container, in words."""
        cid = self.id
        if cid is None:
            return "no container"

        def look(api: Any) -> str:
            import docker.errors

            try:
                state = api.inspect_container(cid)["State"]
            except docker.errors.NotFound:
                return f"container {self.name} was removed"
            if state.get("Running") and state.get("StartedAt") == self.started_at:
                return f"container {self.name} is still running"
            return f"container {self.name} stopped ({_state_reason(state)})"

        try:
            reason = await backend.call(look, "inspecting the container")
        except BackendError as err:
            reason = err.message
        if "still running" not in reason:
            self.invalidate(reason)
        return reason + "; the next command starts it again"

    async def pressure(self, backend: "DockerBackend") -> str:
        """The container's pids and memory use against its limits, from the engine (no exec: one
        may not start when the pids are exhausted), naming what is at its limit; "" if unknown."""
        cid = self.id
        if cid is None:
            return ""

        def look(api: Any) -> tuple[dict[str, Any], dict[str, Any]]:
            stats = api.stats(cid, stream=False, one_shot=True)
            return stats, api.inspect_container(cid)["State"]

        try:
            stats, state = await backend.call(look, "reading the container's resource use")
        except BackendError:
            return ""
        parts = []
        pids = stats.get("pids_stats") or {}
        current, limit = pids.get("current"), pids.get("limit")
        if current is not None and limit:
            full = current >= limit - 1  # the failed fork itself is not counted
            parts.append(f"{'the pids limit is reached: ' if full else ''}{current} processes of pids_limit {limit}")
        memory = stats.get("memory_stats") or {}
        if memory.get("limit") and memory.get("usage") is not None:
            parts.append(f"memory {memory['usage'] >> 20} MiB of {memory['limit'] >> 20} MiB"
                         f"{', out of memory (mem_limit)' if memory.get('failcnt') else ''}")
        if state.get("OOMKilled"):
            parts.append("the container was killed for exceeding mem_limit")
        return ", ".join(parts)

    async def loss_since(self, backend: "DockerBackend", generation: int) -> str:
        """A reason if the container stopped/restarted/vanished since ``generation`` began."""
        if generation != self.generation:
            return f"container {self.name} was replaced"
        reason = await self.describe_loss(backend)
        return "" if "still running" in reason else reason


def _state_reason(state: Mapping[str, Any]) -> str:
    if state.get("OOMKilled"):
        return "killed for exceeding its memory limit"
    status = state.get("Status", "unknown")
    code = state.get("ExitCode")
    return f"{status}, exit code {code}" if code is not None else str(status)


# ---------------------------------------------------------------------------
# Tar ownership rewriting
# ---------------------------------------------------------------------------


async def _anext(it: AsyncIterator[bytes]) -> bytes:
    return await it.__anext__()


class _AsyncReader(io.RawIOBase):
    """A blocking file object (for tarfile, in a worker thread) over an async byte iterator
    consumed on the event loop."""

    def __init__(self, data: AsyncIterator[bytes], loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._it = data.__aiter__()
        self._loop = loop
        self._buf = b""
        self._done = False

    def readable(self) -> bool:
        return True

    def readinto(self, target: Any) -> int:
        while not self._buf and not self._done:
            try:
                self._buf = bytes(asyncio.run_coroutine_threadsafe(_anext(self._it), self._loop).result())
            except StopAsyncIteration:
                self._done = True
        n = min(len(target), len(self._buf))
        target[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _owned_tar(source: io.RawIOBase, uid: int, gid: int) -> Iterator[bytes]:
    """Re-emit a tar stream with every member owned by ``uid:gid``, in constant memory.

    The engine unpacks archives as root and keeps the owners written in the headers, and it
    creates parent directories missing from the archive as root; the sandbox's processes must
    own everything a client uploads, so missing parents are added as entries too. (docker's
    ``copyUIDGID`` would look the numeric user up in the *host's* passwd file and fail.)"""
    dirs: set[str] = set()

    def header(info: tarfile.TarInfo) -> bytes:
        info.uid, info.gid, info.uname, info.gname = uid, gid, "", ""
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    with tarfile.open(fileobj=io.BufferedReader(source, 1 << 16), mode="r|*") as tin:
        for member in tin:
            parts = PurePosixPath(member.name).parts
            parts = tuple(p for p in parts if p != "/")
            for i in range(1, len(parts)):
                parent = "/".join(parts[:i])
                if parent not in dirs:
                    dirs.add(parent)
                    info = tarfile.TarInfo(parent)
                    info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, member.mtime
                    yield header(info)
            if member.isdir():
                dirs.add("/".join(parts))
            if member.issparse():
                member.type = tarfile.REGTYPE
            yield header(member)
            if member.isreg():
                stream = tin.extractfile(member)
                assert stream is not None
                while chunk := stream.read(1 << 20):
                    yield chunk
                if member.size % 512:
                    yield b"\0" * (512 - member.size % 512)
    yield b"\0" * 1024


def _dir_tar(names: Sequence[str], uid: int, gid: int, mode: int = 0o755) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE
            info.mode = mode
            info.uid, info.gid = uid, gid
            tar.addfile(info)
    return buf.getvalue()


# ---------------------------------------------------------------------------
# Container events
# ---------------------------------------------------------------------------


class _EventWatcher:
    """Follows the engine's events for our containers in a thread (docker-py streams block).

    A ``kill`` event is sent before the signal reaches the container, so when an exec dies of
    a signal we can tell "the container was killed or removed" from "someone killed this
    process" without guessing from timing. ``die``/``destroy``/``oom`` also mark the
    container for a fresh look before its next use."""

    ACTIONS = ("kill", "die", "destroy", "stop")

    def __init__(self, backend: "DockerBackend", loop: asyncio.AbstractEventLoop) -> None:
        self._backend = backend
        self._loop = loop
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread = threading.Thread(target=self._run, name=f"docker-events-{backend.name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import docker

        while not self._stop.is_set():
            api = None
            try:
                api = self._backend.new_client(timeout=None)
                self._stream = api.events(decode=True, filters={
                    "type": "container", "label": f"{LABEL_DAEMON}={self._backend.instance_id}"})
                for event in self._stream:
                    if self._stop.is_set():
                        break
                    self._loop.call_soon_threadsafe(self._backend.on_event, event)
            except (docker.errors.DockerException, OSError, RuntimeError, Exception):  # noqa: BLE001 - reconnect
                pass  # the engine went away (or the loop closed): try again in a second
            finally:
                if api is not None:
                    api.close()
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            try:
                stream.close()
            except Exception:  # noqa: BLE001 - best effort
                pass


# ---------------------------------------------------------------------------
# Sandbox and backend
# ---------------------------------------------------------------------------

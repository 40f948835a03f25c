"""DockerSandbox (one task's directory in the container) and DockerBackend."""

from __future__ import annotations


import asyncio
import hashlib
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar


from .._shared.files import atomic_write
from .._spawner import Spawner, SpawnedProcess
from ..base import (
    Backend,
    BackendError,
    Capabilities,
    ErrorKind,
    Health,
    Process,
    PtySize,
    KILL_SUBREAPER_IF_PYTHON,
    Sandbox,
    drain,
    reaper_argv,
)

from .options import CLEANUP_SCRIPT, CONTAINER_RECIPE, DockerOptions, LABEL_BACKEND, LABEL_DAEMON, LABEL_SCOPE, MKDIR_WRAPPER, POOL_TASK, PROCS_PER_CONTAINER, PROCS_PER_START, PROCS_PER_TASK, PTY_WRAPPER, SHARED, _TASK_ID, _docker_error
from .process import DockerProcess
from .container import _AsyncReader, _Container, _EventWatcher, _dir_tar, _owned_tar

log = logging.getLogger(__name__.rpartition('.')[0])

T = TypeVar("T")


class DockerSandbox(Sandbox):
    """A task's directory in the (shared or per-task) container."""

    def __init__(self, backend: "DockerBackend", container: _Container, task_id: str) -> None:
        self.backend = backend
        self.container = container
        self.task_id = task_id
        self.root = f"{backend.options.workspace.rstrip('/')}/{task_id}"
        self._seen_generation = container.generation

    def take_notice(self) -> str | None:
        """Something the task should be told once (e.g. its container was recreated), or None."""
        del self.container.notices[:-16]
        notes = [text for gen, text in self.container.notices if gen > self._seen_generation]
        self._seen_generation = self.container.generation
        return "; ".join(notes) or None

    async def _ready(self) -> str:
        """The container id, with this task's directory present (recreating what vanished)."""
        cid = await self.container.ensure()
        if self.task_id not in self.container.known_dirs:
            await self.backend.make_task_dir(cid, self.task_id)
            self.container.known_dirs.add(self.task_id)
        return cid

    def _command(self, argv: Sequence[str], env: Mapping[str, str], pty: PtySize | None,
                 reaper: bool = True) -> list[str]:
        if not argv:
            raise BackendError("nothing to run: empty argv", ErrorKind.INVALID_ARGUMENT)
        if "=" in argv[0]:
            raise BackendError(f"cannot run {argv[0]!r}: a program name with '=' cannot follow env -i",
                               ErrorKind.INVALID_ARGUMENT)
        assignments = []
        for key, value in env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise BackendError(f"invalid environment variable {key!r}", ErrorKind.INVALID_ARGUMENT)
            assignments.append(f"{key}={value}")
        # Under the reaper (the image's python3): argv leads a new session and whatever it
        # starts stays in the reaper's tree, which signal_session reaches (setsid included).
        cmd = [self.backend.options.env_program, "-i", *assignments, *argv]
        if reaper:
            cmd = reaper_argv(cmd, pty=pty is not None)
        if pty is not None:
            cmd = ["/bin/sh", "-c", PTY_WRAPPER, "sh", str(pty.rows), str(pty.cols), *cmd]
        return cmd

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        return await self._spawn_any(argv, cwd=cwd, env=env, pty=pty)

    async def _spawn_any(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                         pty: PtySize | None = None, helper: bool = False) -> Process:
        """Through the spawner when it runs here (a fork), else a docker exec of its own."""
        if self.backend.options.spawner:
            for attempt in (1, 2):
                try:
                    mux = await self.container.spawner.get(self)
                    if mux is None:
                        break  # the image cannot run it: a docker exec per process
                    return await self._spawn_forked(mux, argv, cwd=cwd, env=env, pty=pty)
                except BackendError as err:
                    if attempt == 1 and err.kind is ErrorKind.LOST:
                        continue  # the spawner died under us (e.g. its container): once more
                    raise
        return await self._spawn(argv, cwd=cwd, env=env, pty=pty, reaper=not helper)

    async def _spawn_forked(self, mux: Spawner, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                            pty: PtySize | None) -> SpawnedProcess:
        """A process forked by the container's spawner (with the reaper, as ``_spawn`` starts it)."""
        cmd = self._command(argv, env, None, reaper=False)
        new_dir = self.task_id not in self.container.known_dirs
        proc = mux.spawn(cmd, cwd=cwd, mkdir=self.root if new_dir else None, pty=pty)
        try:
            await proc.started()
        except BackendError as err:
            if err.kind is ErrorKind.RESOURCE_EXHAUSTED:
                pressure = await self.container.pressure(self.backend)
                why = err.message.removeprefix("fork: ")
                raise BackendError(f"the process could not start in container {self.container.name}: fork failed ({why})"
                                   f"{'; ' + pressure if pressure else ''}", ErrorKind.RESOURCE_EXHAUSTED) from err
            if err.kind is ErrorKind.FAILED_PRECONDITION:
                raise BackendError(f"cannot start {argv[0]!r} in container {self.container.name}: {err.message}",
                                   ErrorKind.NOT_FOUND if "No such file" in err.message else err.kind) from err
            raise
        if new_dir:
            self.container.known_dirs.add(self.task_id)
        return proc

    async def spawn_helper(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> Process:
        """The backend's own helpers (kill walk, path resolution, tar, rm): forked by the spawner
        like any process (a fork costs far less than an exec: closing 1,000 tasks ran 1,000 `rm`
        execs one after another in the engine); with a docker exec each, without the reaper
        (nothing of theirs outlives them, and a python3 start per helper costs ~40 ms and a pid;
        runc still makes each the leader of its own session)."""
        return await self._spawn_any(argv, cwd=cwd, env=env, helper=True)

    async def _spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], pty: PtySize | None,
                     reaper: bool) -> Process:
        cmd = self._command(argv, env, pty, reaper)
        tty = pty is not None
        user = self.backend.options.user
        for attempt in (1, 2):
            cid = await self.container.ensure()
            run, workdir = cmd, cwd
            if self.task_id not in self.container.known_dirs:
                if await self.backend._stat(cid, self.root) is not None:
                    self.container.known_dirs.add(self.task_id)
                else:  # a new task (or a recreated container): the first spawn makes the directory
                    run, workdir = ["/bin/sh", "-c", MKDIR_WRAPPER, "executor-mkdir", self.root, cwd, *cmd], "/"
            spawned_at = time.monotonic()

            def start(api: Any) -> tuple[str, Any]:
                exec_id = api.exec_create(cid, run, stdin=True, stdout=True, stderr=True, tty=tty,
                                          user=user, workdir=workdir)["Id"]
                return exec_id, api.exec_start(exec_id, tty=tty, socket=True)

            try:
                async with self.backend.start_gate():
                    exec_id, result = await self.backend.call(start, f"starting {argv[0]!r} in {self.container.name}")
            except BackendError as err:
                if attempt == 1 and (err.kind is ErrorKind.NOT_FOUND or "is not running" in err.message
                                     or "is restarting" in err.message):
                    self.container.invalidate(err.message)
                    continue
                if "resource temporarily unavailable" in err.message.lower():
                    pressure = await self.container.pressure(self.backend)
                    raise BackendError(f"{err.message}{'; ' + pressure if pressure else ''}",
                                       ErrorKind.RESOURCE_EXHAUSTED) from err
                raise
            proc = DockerProcess(self, self.container, exec_id, result, tty, spawned_at)
            if pty is not None:
                try:
                    await proc.resize(pty)
                except BackendError:
                    pass  # the wrapper already set the size; the process may be gone already
            return proc
        raise AssertionError("unreachable")

    async def signal_session(self, pid: int, sig: int) -> None:
        """Signal the whole tree of ``pid``'s spawn inside the container, through the
        container's helper (one round trip); the helper is respawned if it died."""
        await self.container.killer.signal(self, pid, sig)

    # Sandbox.put_archive / get_archive resolve and check every path in the container first;
    # these only move the bytes (the engine's archive API where it is safe, else tar inside).
    async def unpack_tar(self, dest: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        cid = await self._ready()
        # the engine's unpacking replaces a symlink on a member's path with a directory: tar follows it
        if through_links or not await self.backend.native_archive_ok(cid, self.root, dest, create=True):
            await super().unpack_tar(dest, data)
            return
        await self.backend.put_archive(cid, dest, data)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        cid = await self._ready()
        if not await self.backend.native_archive_ok(cid, self.root, path, create=False):
            async for chunk in super().pack_tar(path):
                yield chunk
            return
        async for chunk in self.backend.get_archive(cid, path):
            yield chunk

    async def release(self, remove_files: bool = False) -> None:
        self.container.tasks.discard(self.task_id)
        if self.backend.options.per_task:
            self.container.spawner.close()
            await self.backend.remove_container(self.container, remove_volume=remove_files)
            return
        if remove_files:
            proc = await self.spawn_helper(["rm", "-rf", "--", self.root], cwd="/",
                                    env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
            await proc.close_stdin()
            await drain(proc)
            await proc.wait()
            await proc.detach()
            self.container.known_dirs.discard(self.task_id)


class DockerBackend(Backend):
    kind = "docker"
    Options = DockerOptions
    options: DockerOptions

    def __init__(self, name: str, options: DockerOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.config_hash = hashlib.sha256(
            json.dumps([CONTAINER_RECIPE, options.model_dump(exclude={"env_passthrough", "api_timeout", "max_parallel_starts", "spawner",
                                                                       "warm_shells",
                                                                       "docker_host"})],
                       sort_keys=True).encode()).hexdigest()[:16]
        self._api: Any = None
        self._api_lock = threading.Lock()
        self._remember_lock = threading.Lock()
        self._shared: _Container | None = None
        self._per_task: dict[str, _Container] = {}
        self._watcher: _EventWatcher | None = None
        # Our own workers: uploads hold one for their duration, and the loop's default
        # executor (shared with the core) must not fill up with Engine API calls.
        # Process starts take at most max_parallel_starts of them, so the rest stay free for
        # control calls (exit codes, resizes, files) during a burst of new tasks.
        self._pool = ThreadPoolExecutor(max_workers=max(16, options.max_parallel_starts + 12),
                                        thread_name_prefix=f"docker-{name}")
        self._start_gate: asyncio.Semaphore | None = None
        self.orphans_ended = 0

    # identity and small persistent state ---------------------------------
    def remembered(self, scope: str) -> str | None:
        try:
            cid: str | None = json.loads((self.state_dir / "containers.json").read_text()).get(scope)
            return cid
        except (OSError, ValueError):
            return None

    def remember(self, scope: str, cid: str) -> None:
        """Note the container of a scope (read back only to tell a task its container was recreated).

        Called from the Engine API threads, many at once when per-task containers start together:
        the read-modify-write is serialized, and a state disk that refuses the write (full,
        read-only) costs that note only, never the container."""
        path = self.state_dir / "containers.json"
        with self._remember_lock:
            try:
                known = json.loads(path.read_text())
            except (OSError, ValueError):
                known = {}
            if known.get(scope) == cid:
                return
            known[scope] = cid
            try:
                atomic_write(path, json.dumps(known).encode())
            except OSError as exc:
                log.warning("docker backend %s: could not record container %s in %s: %s", self.name, cid[:12], path, exc)

    # the Engine API --------------------------------------------------------
    def new_client(self, timeout: float | None) -> Any:
        """A docker-py low-level client for the configured engine (connecting costs a round trip)."""
        import docker

        kwargs: dict[str, Any] = {"version": "auto", "timeout": timeout}
        if self.options.docker_host:
            return docker.APIClient(base_url=self.options.docker_host, **kwargs)
        return docker.APIClient(**docker.utils.kwargs_from_env(), **kwargs)

    def _client(self) -> Any:
        with self._api_lock:
            if self._api is None:
                api = self.new_client(self.options.api_timeout)
                if api.base_url.startswith(("https://", "http+docker://ssh")):
                    api.close()
                    raise BackendError("the docker backend streams processes over unix or plain tcp engine sockets "
                                       "only; TLS and ssh docker_host are not supported yet", ErrorKind.FAILED_PRECONDITION)
                self._api = api
            return self._api

    @property
    def watching(self) -> bool:
        return self._watcher is not None

    def watch_events(self) -> None:
        """Start following container events (once; from the event loop)."""
        if self._watcher is None:
            self._watcher = _EventWatcher(self, asyncio.get_running_loop())

    def on_event(self, event: Mapping[str, Any]) -> None:
        action = str(event.get("Action") or event.get("status") or "")
        cid = str(event.get("id") or event.get("Actor", {}).get("ID") or "")
        if action.split(":")[0] not in _EventWatcher.ACTIONS:
            return
        attrs = event.get("Actor", {}).get("Attributes", {}) or {}
        detail = f" (signal {attrs['signal']})" if "signal" in attrs else (
            f" (exit code {attrs['exitCode']})" if "exitCode" in attrs else "")
        for container in [self._shared, *self._per_task.values()]:
            if container is not None and container.id == cid:
                container.on_event(action.split(":")[0], detail)

    async def call(self, fn: Callable[[Any], T], what: str) -> T:
        """Run a blocking docker-py call in a worker thread; failures become BackendError."""

        def run() -> T:
            return fn(self._client())

        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, run)
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001 - translated with context
            raise _docker_error(exc, what) from exc

    def host_config_kwargs(self, volume: str) -> dict[str, Any]:
        """docker-py ``create_host_config`` arguments for the effective policy."""
        from docker.types import Mount

        o = self.options
        # no_copy: the image's directory would be copied up, with its owner, onto the empty volume
        mounts = [Mount(target=o.workspace, source=volume, type="volume", no_copy=True)]
        for spec in o.mounts:
            parts = spec.split(":")
            if len(parts) not in (2, 3):
                raise BackendError(f"mount {spec!r} is not HOST:CONTAINER[:ro]", ErrorKind.INVALID_ARGUMENT)
            mounts.append(Mount(target=parts[1], source=parts[0], type="bind",
                                read_only=len(parts) == 3 and parts[2] == "ro"))
        security_opt = []
        if o.no_new_privileges:
            security_opt.append("no-new-privileges:true")
        if o.seccomp_profile:
            try:
                profile = Path(o.seccomp_profile).expanduser().read_text()
            except OSError as exc:
                raise BackendError(f"cannot read the seccomp profile {o.seccomp_profile}: {exc.strerror}",
                                   ErrorKind.FAILED_PRECONDITION) from exc
            security_opt.append(f"seccomp={profile}")
        kwargs: dict[str, Any] = dict(
            init=o.init, read_only=o.read_only, tmpfs=dict(o.tmpfs), mounts=mounts,
            cap_drop=["ALL"] if o.cap_drop_all else None, cap_add=list(o.cap_add) or None,
            security_opt=security_opt or None, network_mode=o.network, pids_limit=o.pids_limit,
        )
        if o.mem_limit:
            kwargs["mem_limit"] = o.mem_limit
            kwargs["memswap_limit"] = o.mem_limit  # no swap beyond the limit
        if o.cpus:
            kwargs["nano_cpus"] = int(o.cpus * 1e9)
        return kwargs

    # Backend interface ------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.full(self.options.network)

    def policy(self) -> dict[str, str]:
        o = self.options
        return {
            "isolation": "docker container" + (" per task" if o.per_task else " shared by the daemon's tasks"),
            "image": o.image,
            "pull": str(o.pull).lower(),
            "user": o.user,
            "read_only_root": str(o.read_only).lower(),
            "tmpfs": ", ".join(sorted(o.tmpfs)) or "none",
            "capabilities": ("none" if o.cap_drop_all else "docker default") + (
                f" + {', '.join(o.cap_add)}" if o.cap_add else ""),
            "no_new_privileges": str(o.no_new_privileges).lower(),
            "seccomp": "custom profile" if o.seccomp_profile else "docker default",
            "pids_limit": str(o.pids_limit) if o.pids_limit else "unlimited",
            "memory": o.mem_limit or "unlimited",
            "cpus": str(o.cpus) if o.cpus else "unlimited",
            "network": o.network,
            "host_mounts": ", ".join(o.mounts) or "none",
            "workspace": f"{o.workspace} (named volume)",
            "kill": KILL_SUBREAPER_IF_PYTHON,
        }

    async def start(self) -> None:
        """Attach to our labelled containers and end what a previous daemon left running in them."""
        try:
            found = await self.call(lambda api: api.containers(filters={"label": [
                f"{LABEL_DAEMON}={self.instance_id}", f"{LABEL_BACKEND}={self.name}"]}), "listing containers")
        except BackendError:
            return  # unreachable: health() says so; the first use retries
        for info in found:
            try:
                await self._container_for(info["Labels"].get(LABEL_SCOPE, SHARED)).ensure()  # ends leftovers
            except BackendError:
                continue

    async def cleanup(self, cid: str) -> int:
        """End every process in the container outside its init session; how many were ended."""
        def run(api: Any) -> bytes:
            exec_id = api.exec_create(cid, ["/bin/sh", "-c", CLEANUP_SCRIPT], user=self.options.user)["Id"]
            output: bytes = api.exec_start(exec_id)
            return output

        out = await self.call(run, "ending processes a previous daemon left")
        try:
            return int(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            return 0

    async def health(self) -> Health:
        try:
            version = await self.call(lambda api: api.version(), "asking the Docker engine for its version")
        except BackendError as err:
            return Health(False, err.message)
        image = self.options.image

        def has_image(api: Any) -> bool:
            import docker.errors

            try:
                api.inspect_image(image)
                return True
            except docker.errors.ImageNotFound:
                return False

        try:
            present = await self.call(has_image, "looking for the image")
        except BackendError as err:
            return Health(False, err.message)
        details = {"engine": str(version.get("Version", "")), "api": str(version.get("ApiVersion", "")),
                   "image": image}
        if self._shared is not None and self._shared.id:
            details["container"] = f"{self._shared.name} ({self._shared.id[:12]})"
        if self._per_task:
            details["containers"] = str(len(self._per_task))
        if not present and not self.options.pull:
            return Health(False, f"image {image} is not in the Docker engine; run `make sandbox-image` "
                                 "(or set `pull: true`)", details)
        return Health(True, "", details)

    def _container_for(self, scope: str) -> _Container:
        if scope == SHARED:
            if self._shared is None:
                self._shared = _Container(self, SHARED)
            return self._shared
        if scope not in self._per_task:
            self._per_task[scope] = _Container(self, scope)
        return self._per_task[scope]

    async def sandbox(self, task_id: str) -> DockerSandbox:
        if not _TASK_ID.match(task_id):
            raise BackendError(f"task id {task_id!r} cannot name a directory (letters, digits, . _ -)",
                               ErrorKind.INVALID_ARGUMENT)
        container = self._container_for(task_id if self.options.per_task else SHARED)
        self._admit(container, task_id)
        sb = DockerSandbox(self, container, task_id)
        await container.ensure()  # the task's directory is made by its first spawn or file transfer
        container.tasks.add(task_id)
        container.killer.warm(sb)
        return sb

    def _admit(self, container: _Container, task_id: str) -> None:
        """Refuse a task the container's pids limit cannot hold: each needs PROCS_PER_TASK processes
        at least (its shell and the shell's reaper), the container PROCS_PER_CONTAINER."""
        limit = self.options.pids_limit
        if not limit or limit < 0 or task_id in container.tasks:
            return
        headroom = PROCS_PER_START * self.options.max_parallel_starts + PROCS_PER_TASK * self.warm_shells()
        fits = max(0, (limit - PROCS_PER_CONTAINER - headroom) // PROCS_PER_TASK)
        if len(container.tasks) + 1 > fits:
            where = "its own container" if self.options.per_task else f"the shared container {container.name}"
            raise BackendError(
                f"task {task_id!r} does not fit in {where}: pids_limit {limit} holds {fits} task(s) "
                f"({PROCS_PER_TASK} processes each, its shell and the shell's reaper, plus {PROCS_PER_CONTAINER} "
                f"for the container and {headroom} kept free for starting processes and warm shells) and {len(container.tasks)} "
                "are open; close a task, or raise pids_limit (or use per_task: true)", ErrorKind.RESOURCE_EXHAUSTED)

    def warm_shells(self) -> int:
        return 0 if self.options.per_task else self.options.warm_shells

    async def pool_sandbox(self) -> DockerSandbox:
        """The workspace itself, in the shared container: pre-started shells wait there."""
        container = self._container_for(SHARED)
        await container.ensure()
        sb = DockerSandbox(self, container, POOL_TASK)
        sb.root = self.options.workspace
        container.known_dirs.add(POOL_TASK)
        container.killer.warm(sb)
        return sb

    def start_gate(self) -> asyncio.Semaphore:
        """Bounds the process starts in flight (``max_parallel_starts``)."""
        if self._start_gate is None:
            self._start_gate = asyncio.Semaphore(self.options.max_parallel_starts)
        return self._start_gate

    async def make_task_dir(self, cid: str, task_id: str) -> None:
        """Create ``<workspace>/<task_id>`` owned by the sandbox user, through the archive API
        (left alone when it exists: unpacking a directory entry would reset its mode)."""
        workspace = self.options.workspace
        if await self._stat(cid, f"{workspace.rstrip('/')}/{task_id}") is not None:
            return
        uid, gid = self.options.uid_gid
        body = _dir_tar([task_id], uid, gid)
        await self.call(lambda api: api.put_archive(cid, workspace, body), f"creating the task directory {task_id}")

    async def remove_container(self, container: _Container, remove_volume: bool) -> None:
        import docker.errors

        def run(api: Any) -> None:
            if container.id is not None:
                try:
                    api.remove_container(container.id, force=True)
                except docker.errors.NotFound:
                    pass
            if remove_volume:
                try:
                    api.remove_volume(container.volume, force=True)
                except docker.errors.NotFound:
                    pass

        await self.call(run, f"removing {container.name}")
        self._per_task.pop(container.scope, None)

    async def close(self) -> None:
        for container in [self._shared, *self._per_task.values()]:
            if container is not None:
                container.spawner.close()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher = None
        if self.options.remove_on_close:
            await self._remove_all_containers()
        with self._api_lock:
            api, self._api = self._api, None
        if api is not None:
            await asyncio.to_thread(api.close)
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _remove_all_containers(self) -> None:
        import docker.errors

        def run(api: Any) -> None:
            for c in api.containers(all=True, filters={"label": [f"{LABEL_DAEMON}={self.instance_id}",
                                                                 f"{LABEL_BACKEND}={self.name}"]}):
                try:
                    api.remove_container(c["Id"], force=True)
                except docker.errors.NotFound:
                    pass
            (self.state_dir / "containers.json").unlink(missing_ok=True)

        try:
            await self.call(run, "removing this daemon's containers")
        except BackendError:
            pass  # shutting down: an unreachable engine keeps them; the next start reattaches

    # archives ----------------------------------------------------------------
    async def _stat(self, cid: str, path: str) -> dict[str, Any] | None:
        """The engine's stat of ``path`` in the container (None when missing); links not followed."""

        def run(api: Any) -> dict[str, Any] | None:
            res = api.head(api._url("/containers/{0}/archive", cid), params={"path": path})
            if res.status_code == 404:
                return None
            api._raise_for_status(res)
            header = res.headers.get("X-Docker-Container-Path-Stat")
            import base64

            return json.loads(base64.b64decode(header)) if header else {}

        return await self.call(run, f"looking at {path}")

    async def native_archive_ok(self, cid: str, root: str, path: str, *, create: bool) -> bool:
        """Whether the engine's archive endpoints may serve ``path``: it is inside the workspace
        volume and no component below the task root is a symlink (the engine resolves links as
        root; those paths go through tar run as the sandbox user instead). With ``create``,
        missing directories are made, owned by the sandbox user."""
        workspace = PurePosixPath(self.options.workspace)
        target = PurePosixPath(path)
        if target != workspace and workspace not in target.parents:
            return False
        base = PurePosixPath(root)
        if target != base and base not in target.parents:
            return False
        missing: list[str] = []
        current = base
        for part in target.relative_to(base).parts:
            current = current / part
            stat = await self._stat(cid, str(current))
            if stat is None:
                missing = list(target.relative_to(current.parent).parts)
                parent = current.parent
                break
            if stat.get("linkTarget"):
                return False
        if missing:
            if not create:
                raise BackendError(f"{path} does not exist", ErrorKind.NOT_FOUND)
            uid, gid = self.options.uid_gid
            names = ["/".join(missing[: i + 1]) for i in range(len(missing))]
            body = _dir_tar(names, uid, gid)
            await self.call(lambda api: api.put_archive(cid, str(parent), body), f"creating {path}")
        return True

    async def put_archive(self, cid: str, path: str, data: AsyncIterator[bytes]) -> None:
        source = _AsyncReader(data, asyncio.get_running_loop())
        uid, gid = self.options.uid_gid

        def run(api: Any) -> None:
            res = api.put(api._url("/containers/{0}/archive", cid), params={"path": path},
                          data=_owned_tar(source, uid, gid))
            api._raise_for_status(res)

        try:
            await self.call(run, f"unpacking into {path}")
        except BackendError as err:
            if err.kind is ErrorKind.UNAVAILABLE and "Docker engine said" in err.message:
                err.kind = ErrorKind.FAILED_PRECONDITION
            raise

    async def get_archive(self, cid: str, path: str) -> AsyncIterator[bytes]:
        stream, _stat = await self.call(lambda api: api.get_archive(cid, path, chunk_size=None),
                                        f"reading {path}")
        iterator: Iterator[bytes] = iter(stream)
        while True:
            chunk = await self.call(lambda _api: next(iterator, None), f"reading {path}")
            if chunk is None:
                break
            if chunk:
                yield chunk


__all__ = ["DockerBackend", "DockerOptions", "DockerSandbox", "DockerProcess"]

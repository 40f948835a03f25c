"""The daytona sandbox and backend: sandboxes per task or per daemon, adoption after a restart, health."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import uuid
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .._shared.registry import SessionRegistry
from ..base import KILL_SESSION_ONLY, Backend, BackendError, Capabilities, ErrorKind, Health, Process, PtySize, Sandbox
from .api import _sdk, _translate, _retrying, _once
from .launcher import launcher, kill_sessions_command
from .options import _DEFAULT_API_URL, _GONE_STATES, _STOPPED_STATES, DaytonaOptions
from .process import DaytonaProcess, DaytonaPtyProcess

log = logging.getLogger(__name__.rpartition('.')[0])
T = TypeVar("T")


@dataclass
class _Remote:
    """One Daytona sandbox as the backend knows it."""

    sandbox: Any  # daytona.AsyncSandbox
    home: str
    roots: set[str] = field(default_factory=set)


class DaytonaSandbox(Sandbox):
    """A task's directory in a Daytona sandbox (its own, or the daemon's shared one)."""

    def __init__(self, backend: "DaytonaBackend", key: str, task_id: str, root: str) -> None:
        self._backend = backend
        self._key = key
        self.task_id = task_id
        self.root = root
        #: signals we delivered, by session id, so wait() can tell a kill from an exit code.
        self.signalled: dict[int, int] = {}
        self._notice_seen, _ = backend.notice_since(key, 0)

    @property
    def request_timeout(self) -> float:
        return self._backend.options.request_timeout

    def take_notice(self) -> str | None:
        self._notice_seen, note = self._backend.notice_since(self._key, self._notice_seen)
        return note

    async def _remote(self) -> Any:
        remote = await self._backend.attach(self._key, self.task_id)
        if self.root not in remote.roots:
            await _once("creating the task directory", remote.sandbox.fs.create_folder(self.root, "755"),
                        timeout=self._backend.options.request_timeout)
            remote.roots.add(self.root)
        return remote.sandbox

    async def check_alive(self) -> None:
        """After a failure: LOST if the sandbox is gone (it is recreated on next use)."""
        await self._backend.check_alive(self._key)

    async def _guard(self, action: str, aw: Awaitable[T], timeout: float | None = -1.0) -> T:
        """Run a toolbox call (bounded by ``request_timeout`` unless told otherwise); a failure
        that turns out to be a vanished or stopped sandbox is LOST."""
        if timeout is not None and timeout < 0:
            timeout = self._backend.options.request_timeout
        try:
            return await _once(action, aw, timeout=timeout)
        except BackendError as err:
            if err.kind in (ErrorKind.NOT_FOUND, ErrorKind.FAILED_PRECONDITION, ErrorKind.UNAVAILABLE):
                await self.check_alive()
            raise

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        if not argv:
            raise BackendError("empty argv", ErrorKind.INVALID_ARGUMENT)
        from daytona import SessionExecuteRequest

        remote = await self._remote()
        if pty is not None:
            return await self._spawn_pty(remote, argv, cwd, env, pty)
        session_id = f"executor-{uuid.uuid4().hex}"
        script = launcher(argv, cwd, env, f"/tmp/.{session_id}")
        await self._guard("creating a session", remote.process.create_session(session_id))
        try:
            resp = await self._guard("starting the command", remote.process.execute_session_command(
                session_id, SessionExecuteRequest(command=script, run_async=True, suppress_input_echo=True)))
            ws = await self._guard("opening the output stream", _open_log_socket(remote, session_id, resp.cmd_id))
        except BaseException:
            self._backend.background(remote.process.delete_session(session_id))
            raise
        proc = DaytonaProcess(self, remote, session_id, resp.cmd_id, ws)
        try:
            await proc.started(self._backend.options.request_timeout)
        except BaseException:
            self._backend.background(remote.process.delete_session(session_id))
            raise
        return proc

    async def _spawn_pty(self, remote: Any, argv: Sequence[str], cwd: str, env: Mapping[str, str],
                         size: PtySize) -> Process:
        from daytona.common.pty import PtySize as SdkPtySize

        token = uuid.uuid4().hex
        proc = DaytonaPtyProcess(self, token)
        handle = await self._guard("opening a terminal", remote.process.create_pty_session(
            f"executor-{token}", proc.on_data, cwd=cwd, pty_size=SdkPtySize(rows=size.rows, cols=size.cols)))
        try:
            await handle.send_input(proc.startup_line(argv, cwd, env))
        except Exception as exc:  # noqa: BLE001
            with contextlib.suppress(Exception):
                await handle.disconnect()
            raise _translate(exc, "starting the program on the terminal") from exc
        await proc.attach(handle, self._backend.options.request_timeout)
        return proc

    def remember(self, pid: int) -> None:
        """A process of ours runs as session ``pid``: on disk, so a restarted daemon ends it."""
        remote = self._backend.cached(self._key)
        if remote is not None:
            self._backend.registry.remember(pid, scope=remote.sandbox.id)

    def forget_session(self, session_id: str | None, pid: int | None) -> None:
        """The process is over: forget its pid, delete its toolbox session in the background."""
        remote = self._backend.cached(self._key)
        if remote is None:
            return
        if pid is not None:
            self._backend.registry.forget(pid, scope=remote.sandbox.id)
        if session_id is not None:
            self._backend.background(remote.sandbox.process.delete_session(session_id))

    async def run(self, command: str, action: str, timeout: int = 120) -> tuple[int, str]:
        """A one-shot helper command (``process.exec``): exit code and combined output."""
        remote = await self._remote()
        resp = await self._guard(action, remote.process.exec(command, cwd="/", timeout=timeout),
                                 timeout=timeout + self._backend.options.request_timeout)
        return int(resp.exit_code), resp.result or ""

    async def signal_session(self, pid: int, sig: int) -> None:
        """One ``process.exec`` round trip: ``pkill -s`` where the image has it (fast), else the
        generic /proc walk. Never touches other sessions, never the sandbox itself."""
        self.signalled[pid] = sig
        await self.run(kill_sessions_command([pid], sig), f"signalling session {pid}", timeout=30)

    # Sandbox.put_archive / get_archive resolve and check every path in the sandbox first;
    # these only move the bytes.
    async def unpack_tar(self, path: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        remote = await self._remote()
        tmp = f"/tmp/.executor-put-{uuid.uuid4().hex}.tar"
        await self._guard(f"uploading into {path}", remote.fs.upload_file_stream(data, tmp), timeout=None)
        code, out = await self.run(
            shlex.join(["/bin/sh", "-c", 'mkdir -p -- "$1" && tar -x -f "$2" -C "$1"; c=$?; rm -f -- "$2"; exit $c',
                        "put", path, tmp]), f"unpacking into {path}")
        if code != 0:
            raise BackendError(f"unpacking into {path} failed: {out.strip() or f'tar exited {code}'}",
                               ErrorKind.FAILED_PRECONDITION)

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        remote = await self._remote()
        parent, _, name = path.rstrip("/").rpartition("/")
        tmp = f"/tmp/.executor-get-{uuid.uuid4().hex}.tar"
        code, out = await self.run(
            shlex.join(["/bin/sh", "-c", 'cd -- "$1" && tar -c -f "$3" -- "$2"', "get", parent or "/", name or ".", tmp]),
            f"packing {path}")
        try:
            if code != 0:
                message = out.strip() or f"tar exited {code}"
                raise BackendError(f"reading {path} failed: {message}",
                                   ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION)
            stream = await self._guard(f"downloading {path}", remote.fs.download_file_stream(tmp), timeout=None)
            try:
                async for chunk in stream:
                    yield chunk
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, f"downloading {path}") from exc
        finally:
            self._backend.background(self.run(f"rm -f -- {shlex.quote(tmp)}", "removing a temporary file"))

    async def release(self, remove_files: bool = False) -> None:
        await self._backend.release(self._key, self, remove_files)


async def _open_log_socket(remote: Any, session_id: str, cmd_id: str) -> Any:
    """The command's log websocket, raw.

    The SDK's public ``get_session_command_logs_async`` decodes output as UTF-8 text (bytes that
    are not UTF-8 become U+FFFD) and only hands it to callbacks; we need the exact bytes, so we
    open the same websocket the same way the SDK does (its request serializer and its shared
    aiohttp session, so auth, headers and the connection pool are the SDK's) and demultiplex
    ourselves. Pinned to daytona==0.226.1; ``tests/test_daytona_backend.py`` breaks if it moves."""
    process = remote.process
    _, url, headers, *_ = process._api_client._get_session_command_logs_serialize(
        session_id=session_id, command_id=cmd_id, follow=True,
        _request_auth=None, _content_type=None, _headers=None, _host_index=None)
    return await process._open_ws(re.sub(r"^http", "ws", url), headers)


# ---------------------------------------------------------------------------
# Backend
# ---------------------------------------------------------------------------

class DaytonaBackend(Backend):
    kind = "daytona"
    Options = DaytonaOptions
    options: DaytonaOptions

    def __init__(self, name: str, options: DaytonaOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self._client: Any = None
        self._remotes: dict[str, _Remote] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self.adopted = 0
        self.orphans_ended = 0
        self.registry = SessionRegistry(state_dir / "pids")
        #: key -> (generation, note) about the sandbox's life (vanished and recreated, restarted).
        self._notices: dict[str, tuple[int, str]] = {}
        self._notice_seq = 0

    # -- configuration --------------------------------------------------------------------
    @property
    def api_url(self) -> str:
        return self.options.api_url or os.environ.get("DAYTONA_API_URL") or _DEFAULT_API_URL

    def _api_key(self) -> str | None:
        if self.options.api_key is not None:
            return self.options.api_key.get_secret_value() or None
        return os.environ.get(self.options.api_key_env) or None

    @property
    def _key_hint(self) -> str:
        source = "backends.%s.api_key" % self.name if self.options.api_key else f"${self.options.api_key_env}"
        return f" (key from {source}, API {self.api_url})"

    def _missing_credentials(self) -> BackendError:
        return BackendError(
            f"daytona: no API key: set the {self.options.api_key_env} environment variable of the daemon "
            f"(or backends.{self.name}.api_key_env / api_key in the config)", ErrorKind.FAILED_PRECONDITION)

    @property
    def capabilities(self) -> Capabilities:
        network = ("blocked" if self.options.network_block_all else
                   "allow_list" if self.options.network_allow_list else "open")
        return Capabilities.full(network)

    def policy(self) -> dict[str, str]:
        o = self.options
        policy = {
            "isolation": f"daytona sandbox per {o.sandbox_per}",
            "api_url": self.api_url,
            "credentials": f"backends.{self.name}.api_key" if o.api_key else f"${o.api_key_env}",
            "target": o.target or "(organization default)",
            "source": f"image {o.image}" if o.image else f"snapshot {o.snapshot or '(default)'}",
            "network": ("blocked" if o.network_block_all else
                        "allow " + ",".join(o.network_allow_list) if o.network_allow_list else "open"),
            "auto_stop_minutes": str(o.auto_stop_interval),
            "on_close": o.on_close,
            "kill": KILL_SESSION_ONLY,
        }
        for k, v in (("cpu", o.cpu), ("memory_gib", o.memory), ("disk_gib", o.disk)):
            if v is not None:
                policy[k] = str(v)
        return policy

    # -- lifecycle ---------------------------------------------------------------------------
    def _client_or_raise(self) -> Any:
        if self._client is None:
            key = self._api_key()
            if not key:
                raise self._missing_credentials()
            daytona = _sdk()
            config = daytona.DaytonaConfig(api_key=key, api_url=self.api_url, target=self.options.target)
            try:
                self._client = daytona.AsyncDaytona(config)
            except Exception as exc:  # noqa: BLE001
                raise _translate(exc, "configuring the client", key_hint=self._key_hint) from exc
        return self._client

    async def start(self) -> None:
        try:
            self._client_or_raise()
            found = await self._list({"executor.daemon": self.instance_id, "executor.backend": self.name})
            self.adopted = len(found)
        except BackendError as err:
            log.warning("daytona backend %s: %s", self.name, err.message)

    async def health(self) -> Health:
        try:
            self._client_or_raise()
            found = await asyncio.wait_for(
                self._list({"executor.daemon": self.instance_id, "executor.backend": self.name}),
                self.options.request_timeout)
        except asyncio.TimeoutError:
            return Health(False, f"daytona: the API at {self.api_url} did not answer in "
                                 f"{self.options.request_timeout:g}s")
        except BackendError as err:
            return Health(False, err.message, {"kind": err.kind.value})
        return Health(True, "", {"api_url": self.api_url, "sandboxes": str(len(found))})

    async def close(self) -> None:
        if self.options.sandbox_per == "daemon" and "daemon" in self._remotes:
            with contextlib.suppress(BackendError):
                await self._dispose(self._remotes.pop("daemon"))
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await self._client.close()
            self._client = None

    def background(self, aw: Awaitable[Any]) -> None:
        """Fire-and-forget cleanup (deleting sessions, temp files); failures are only logged."""
        async def run() -> None:
            try:
                await aw
            except Exception as exc:  # noqa: BLE001
                log.debug("daytona background cleanup failed: %s", exc)
        task = asyncio.ensure_future(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- sandboxes ---------------------------------------------------------------------------
    def _labels(self, key: str, task_id: str) -> dict[str, str]:
        labels = {**self.options.labels, "executor.daemon": self.instance_id, "executor.backend": self.name}
        if key == "daemon":
            labels["executor.scope"] = "daemon"
        else:
            labels["executor.task"] = task_id
        return labels

    async def _list(self, labels: dict[str, str]) -> list[Any]:
        from daytona import ListSandboxesQuery

        client = self._client_or_raise()

        async def fetch() -> list[Any]:
            return [sb async for sb in client.list(ListSandboxesQuery(labels=labels))]
        return await _retrying("listing sandboxes", fetch, key_hint=self._key_hint,
                               timeout=self.options.request_timeout)

    async def sandbox(self, task_id: str) -> DaytonaSandbox:
        key = "daemon" if self.options.sandbox_per == "daemon" else task_id
        remote = await self.attach(key, task_id)
        sb = DaytonaSandbox(self, key, task_id, f"{remote.home.rstrip('/')}/tasks/{task_id}")
        await sb._remote()
        return sb

    def _notify(self, key: str, note: str) -> None:
        self._notice_seq += 1
        self._notices[key] = (self._notice_seq, note)

    def notice_since(self, key: str, seen: int) -> tuple[int, str | None]:
        """The note for ``key`` newer than generation ``seen``, if any."""
        gen, note = self._notices.get(key, (0, ""))
        return (gen, note) if gen > seen else (seen, None)

    def cached(self, key: str) -> _Remote | None:
        return self._remotes.get(key)

    async def attach(self, key: str, task_id: str) -> _Remote:
        """The sandbox for ``key``: cached, found again by its labels, started, or created."""
        remote = self._remotes.get(key)
        if remote is not None:
            return remote
        async with self._locks.setdefault(key, asyncio.Lock()):
            remote = self._remotes.get(key)
            if remote is not None:
                return remote
            labels = self._labels(key, task_id)
            found = [sb for sb in await self._list(labels) if _state(sb) not in _GONE_STATES]
            sandbox = await self._adopt(found[0]) if found else await self._create(labels)
            home = await _retrying("reading the work directory", sandbox.get_work_dir,
                                   timeout=self.options.request_timeout)
            remote = _Remote(sandbox, home or "/home/daytona")
            self._remotes[key] = remote
            return remote

    async def _adopt(self, sandbox: Any) -> Any:
        """Take over a sandbox an earlier daemon (or this one, before a vanish check) left.

        Started if Daytona stopped it. Its processes from before are ended: the sessions whose
        ids the registry kept are killed (SIGKILL, whole session), and the left toolbox
        sessions deleted."""
        left = set(self.registry.load(sandbox.id))
        if _state(sandbox) in _STOPPED_STATES:
            await _once(f"starting sandbox {sandbox.id}", sandbox.start(timeout=self.options.create_timeout))
            self.registry.clear(sandbox.id)  # a stopped sandbox ran nothing
            return sandbox
        if left:
            try:
                await sandbox.process.exec(kill_sessions_command(sorted(left), 9), cwd="/", timeout=30)
                self.orphans_ended += len(left)
                self.registry.clear(sandbox.id)
            except Exception as exc:  # noqa: BLE001 - the sandbox still works; say so
                log.warning("daytona: could not end the processes left in %s: %s", sandbox.id, exc)
        try:
            sessions = await sandbox.process.list_sessions()
            ptys = await sandbox.process.list_pty_sessions()
        except Exception as exc:  # noqa: BLE001 - best effort: the sandbox still works
            log.warning("daytona: could not list the sessions left in %s: %s", sandbox.id, exc)
            return sandbox
        for session in sessions:
            if session.session_id.startswith("executor-"):
                self.background(sandbox.process.delete_session(session.session_id))
        for pty in ptys:
            if pty.id.startswith("executor-"):
                self.background(sandbox.process.kill_pty_session(pty.id))
        return sandbox

    async def _create(self, labels: dict[str, str]) -> Any:
        daytona = _sdk()
        o = self.options
        common: dict[str, Any] = dict(
            labels=dict(labels), auto_stop_interval=o.auto_stop_interval, auto_delete_interval=o.auto_delete_interval,
            network_block_all=o.network_block_all or None,
            network_allow_list=",".join(o.network_allow_list) or None)
        if o.image:
            resources = daytona.Resources(cpu=o.cpu, memory=o.memory, disk=o.disk) if (o.cpu or o.memory or o.disk) else None
            params = daytona.CreateSandboxFromImageParams(image=o.image, resources=resources, **common)
        else:
            params = daytona.CreateSandboxFromSnapshotParams(snapshot=o.snapshot, **common)
        client = self._client_or_raise()
        # Not retried: a create that timed out may still have happened (the next use finds it by label).
        return await _once("creating a sandbox", client.create(params, timeout=o.create_timeout),
                           key_hint=self._key_hint)

    async def check_alive(self, key: str) -> None:
        """Called after a failed call: LOST if the sandbox vanished (forgotten, so the next use
        recreates it); started again if Daytona stopped it; otherwise nothing to add."""
        remote = self._remotes.get(key)
        if remote is None:
            return
        sandbox = remote.sandbox
        try:
            await _retrying("checking the sandbox", sandbox.refresh_data, timeout=self.options.request_timeout)
        except BackendError as err:
            if err.kind is not ErrorKind.NOT_FOUND:
                return
            self._remotes.pop(key, None)
            self._notify(key, f"daytona sandbox {sandbox.id} had vanished (deleted or reaped); a new one was "
                              "created: files and shell state from before are gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} vanished (deleted or reaped); "
                               "a new one is created on the next command", ErrorKind.LOST) from err
        if _state(sandbox) in _GONE_STATES:
            self._remotes.pop(key, None)
            self._notify(key, f"daytona sandbox {sandbox.id} was {_state(sandbox)}; a new one was created: "
                              "files and shell state from before are gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} is {_state(sandbox)}; "
                               "a new one is created on the next command", ErrorKind.LOST)
        if _state(sandbox) in _STOPPED_STATES:
            await self._adopt(sandbox)
            self._notify(key, f"daytona sandbox {sandbox.id} had been stopped (idle) and was started again: "
                              "files kept, running processes gone")
            raise BackendError(f"daytona: sandbox {sandbox.id} had been stopped (idle); it was started again, "
                               "its processes are gone", ErrorKind.LOST)

    async def release(self, key: str, sb: DaytonaSandbox, remove_files: bool) -> None:
        remote = self._remotes.get(key)
        if key == "daemon" or self.options.on_close != "delete":
            if remove_files and remote is not None:
                await sb.run(f"rm -rf -- {shlex.quote(sb.root)}", f"removing {sb.root}")
                remote.roots.discard(sb.root)
        if key != "daemon":
            remote = self._remotes.pop(key, None)
            if remote is not None:
                await self._dispose(remote)

    async def _dispose(self, remote: _Remote) -> None:
        sandbox = remote.sandbox
        if self.options.on_close == "delete":
            try:
                await _retrying(f"deleting sandbox {sandbox.id}", lambda: sandbox.delete(),
                                timeout=self.options.create_timeout)
            except BackendError as err:
                if err.kind is not ErrorKind.NOT_FOUND:
                    raise
        elif self.options.on_close == "stop":
            await _once(f"stopping sandbox {sandbox.id}", sandbox.stop(timeout=self.options.create_timeout))


def _state(sandbox: Any) -> str:
    state = getattr(sandbox, "state", None)
    return str(getattr(state, "value", state) or "")

"""The modal backend: each task's commands run in a Modal sandbox (``modal`` SDK 1.6).

One Modal sandbox per task (or one per daemon, ``sandbox_per: daemon``), created on
first use with a deterministic *name* inside the configured app, so a restarted
daemon finds it again with ``Sandbox.from_name``; tags mark what executor made.

Processes are ``sandbox.exec`` calls (the SDK's ContainerProcess, through Modal's
task command router). The SDK streams stdout/stderr while the process runs and
writes stdin in offset-addressed chunks, so the task's persistent shell lives in one
long-lived exec and a command costs one stdin write, not a new exec.

Each exec is wrapped in a tiny POSIX ``sh`` prologue (``_SPAWN_SCRIPT``) so that,
inside the sandbox, the process

* is the leader of a new session (``setsid``; ``setsid -c`` under a pty so Ctrl-C
  reaches it), which is what ``signal_session`` relies on to kill a command's whole
  tree without touching the sandbox, and
* sees *exactly* the environment it was given (``env -i``): a Modal container adds
  its own variables, which must not leak into commands. The values travel in the
  exec's environment (Modal's secret channel), never on a command line.

All SDK calls use the ``.aio`` variants: nothing blocks the daemon's event loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import secrets
import time
import urllib.parse
import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import SecretStr, model_validator

from ._shared.kill import CLEANUP_KEEP_SCRIPT
from ._shared.retry import retrying
from .base import (
    Backend,
    BackendError,
    ByteQueue,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    KILL_SESSION_ONLY,
    Sandbox,
    drain,
)

try:
    import modal
    import modal.exception as mexc
    from grpclib import GRPCError, Status
    from grpclib.exceptions import StreamTerminatedError
    from modal_proto import api_pb2
except ImportError as _exc:  # pragma: no cover - depends on the install
    raise ImportError("the modal backend needs the modal SDK: pip install 'executor-daemon[modal]'") from _exc



def _quiet_pty_info_deprecation() -> None:
    """Passing PTYInfo is the only way to give an exec a terminal of a chosen size
    (``pty=True`` copies the *daemon's* terminal size), but the SDK marks it deprecated.
    Re-applied at each use: the filter list may have been reset since import."""
    warnings.filterwarnings("ignore", message=r".*pty_info.*", category=mexc.DeprecationError)

T = TypeVar("T")

#: The prologue registers each session it starts in a directory of the sandbox: one file
#: per spawn, named by a random tag, holding "PID STARTTIME TTY". A restarted daemon ends
#: the sessions a previous one left (``_shared.kill.CLEANUP_KEEP_SCRIPT``, the whole tree of each); ``resize`` finds a pty there.
#: It lives next to the task directories (``<root>/.executor-sessions``).
_REGISTRY = ".executor-sessions"

#: argv prologue run by /bin/sh inside the sandbox.
#: $1 = "1" for a controlling terminal (pty), $2 = the registry file for this spawn ("-":
#: none), $3 = N, then N variable names whose values are in this shell's environment, then
#: the argv (possibly led by NAME=VALUE words for names that are not shell identifiers).
_SPAWN_SCRIPT = r"""
ctty=$1; f=$2; n=$3; shift 3
i=0
while [ "$i" -lt "$n" ]; do
  eval "v=\${$1}"
  set -- "$@" "$1=$v"
  shift; i=$((i + 1))
done
m=$(($# - n)); i=0
while [ "$i" -lt "$m" ]; do
  set -- "$@" "$1"
  shift; i=$((i + 1))
done
t=-
if [ "$ctty" = 1 ]; then set -- -c env -i "$@"; t=$(tty 2>/dev/null) || t=-; else set -- env -i "$@"; fi
# me: "PID STARTTIME TTY" of the process running it (/proc/self: right in a subshell too).
me() { read -r s < /proc/self/stat; p=${s%% *}; s=${s##*) }; set -- $s; echo "$p ${20} $t"; }
leader() { read -r s < /proc/self/stat; s=${s##*) }; set -- $s; [ "$3" = "$$" ]; }
if leader; then
  # A process-group leader cannot call setsid(2): a fresh child (the subshell) can.
  ( [ "$f" = - ] || { me > "$f.w" && mv -f "$f.w" "$f"; } 2>/dev/null; exec setsid "$@" )
  st=$?
  [ "$f" = - ] || rm -f "$f"
  exit $st
fi
[ "$f" = - ] || { me > "$f.w" && mv -f "$f.w" "$f"; } 2>/dev/null
exec setsid "$@"
"""

#: Sets the window size of the pty of the spawn registered in $1: $2 rows, $3 columns.
_RESIZE_SCRIPT = r"""
# The registration is written whole (a rename) before the command runs; a resize sent right after the
# spawn returned may still race the wrapper's first steps: wait for it briefly.
i=0
while ! [ -s "$1" ] && [ "$i" -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
read -r pid start t < "$1" || { echo "the process is not registered (or has ended)" >&2; exit 1; }
[ -n "$t" ] && [ "$t" != - ] || { echo "the process has no terminal" >&2; exit 1; }
exec stty rows "$2" cols "$3" < "$t"
"""

#: Largest stdin write sent in one TaskExecStdinWrite.
_WRITE_CHUNK = 1 << 20

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+\Z")


class ModalOptions(Options):
    """``backends.<name>`` options of kind ``modal``."""

    #: The Modal app that owns executor's sandboxes (created if missing).
    app_name: str = "executor"
    #: Modal environment; default: the SDK's (MODAL_ENVIRONMENT or the profile's).
    environment: str | None = None
    #: A registry tag (``python:3.12-slim``) or an image id (``im-...``); default: Modal's debian_slim.
    image: str | None = None
    #: With a registry ``image``: let Modal add this Python version to it.
    image_add_python: str | None = None
    #: CPU cores requested, and memory in MiB.
    cpu: float | None = None
    memory: int | None = None
    #: Lifetime of a sandbox in seconds (Modal ends it after this), and its idle timeout.
    timeout: int = 3600
    idle_timeout: int | None = None
    region: str | list[str] | None = None
    #: Network policy: no network at all, or only these outbound CIDRs.
    block_network: bool = False
    cidr_allowlist: list[str] | None = None
    #: One sandbox per task, or one shared by every task of this daemon.
    sandbox_per: Literal["task", "daemon"] = "task"
    #: On CloseTask: terminate the task's sandbox, or keep it (Modal's timeouts end it).
    on_close: Literal["terminate", "keep"] = "terminate"
    #: Where task directories live in the sandbox; relative: from the sandbox's working dir.
    root: str = "/root/executor"
    #: The sandbox's working directory; default: the image's.
    workdir: str | None = None
    #: Prefix of sandbox names (``<prefix>-<daemon id>-<backend>-<task>``).
    name_prefix: str = "executor"
    #: Modal API URL (tests point this at a local server); default: the SDK's.
    server_url: str | None = None
    #: Credentials in the config itself (prefer the *_env names) ...
    token_id: SecretStr | None = None
    token_secret: SecretStr | None = None
    #: ... or the names of the daemon's environment variables holding them.
    token_id_env: str = "MODAL_TOKEN_ID"
    token_secret_env: str = "MODAL_TOKEN_SECRET"
    #: Upper bound in seconds on one control-plane call (create, lookup, exec start).
    request_timeout: float = 60.0
    #: Upper bound in seconds for a new sandbox to be scheduled and run its first process
    #: (a cold start pulls the image).
    start_timeout: float = 600.0

    @model_validator(mode="after")
    def _network(self) -> "ModalOptions":
        if self.block_network and self.cidr_allowlist is not None:
            raise ValueError("block_network and cidr_allowlist exclude each other: choose one")
        return self


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------

_UNAVAILABLE_STATUSES = {Status.UNAVAILABLE, Status.DEADLINE_EXCEEDED, Status.INTERNAL, Status.UNKNOWN,
                         Status.CANCELLED}


def _error(exc: BaseException, what: str) -> BackendError:
    """A BackendError, with a message a person can act on, for an SDK failure."""
    if isinstance(exc, BackendError):
        return exc
    detail = str(exc).strip() or type(exc).__name__
    if isinstance(exc, mexc.AuthError):
        return BackendError(f"{what}: Modal refused the credentials ({detail}); check MODAL_TOKEN_ID/"
                            "MODAL_TOKEN_SECRET or the token settings of this backend", ErrorKind.UNAUTHENTICATED)
    if isinstance(exc, mexc.ResourceExhaustedError):
        return BackendError(f"{what}: Modal quota or capacity exhausted ({detail}); close idle tasks or raise "
                            "the workspace's limits", ErrorKind.RESOURCE_EXHAUSTED)
    if isinstance(exc, mexc.PermissionDeniedError):
        return BackendError(f"{what}: permission denied by Modal ({detail})", ErrorKind.PERMISSION_DENIED)
    if isinstance(exc, mexc.NotFoundError):
        return BackendError(f"{what}: not found on Modal ({detail})", ErrorKind.NOT_FOUND)
    if isinstance(exc, mexc.SandboxTerminatedError):
        return BackendError(f"{what}: the Modal sandbox was terminated ({detail})", ErrorKind.LOST)
    if isinstance(exc, (mexc.InvalidError, mexc.VersionError)):
        return BackendError(f"{what}: Modal rejected the request ({detail}); check this backend's options",
                            ErrorKind.FAILED_PRECONDITION)
    if isinstance(exc, GRPCError) and not isinstance(exc, mexc.Error) and exc.status not in _UNAVAILABLE_STATUSES:
        return BackendError(f"{what}: Modal answered {exc.status.name} ({detail})", ErrorKind.INTERNAL)
    if isinstance(exc, (mexc.ConnectionError, mexc.ServiceError, mexc.InternalError, mexc.TimeoutError,
                        mexc.ClientClosed, GRPCError, StreamTerminatedError, ConnectionError, OSError,
                        asyncio.TimeoutError)):
        return BackendError(f"{what}: Modal is unreachable or failing ({detail}); retry later",
                            ErrorKind.UNAVAILABLE)
    return BackendError(f"{what}: unexpected error from the Modal SDK: {type(exc).__name__}: {detail}",
                        ErrorKind.INTERNAL)


def _as_lost(err: BackendError) -> BackendError:
    """Output or an exit status that cannot be had any more is LOST (the Process
    contract), whatever the cause; the message keeps the cause."""
    if err.kind is ErrorKind.LOST:
        return err
    return BackendError(f"{err.message} (the process's output or status is lost)", ErrorKind.LOST)


async def _bounded(coro: Awaitable[T], seconds: float, what: str) -> T:
    """Await an SDK call with an upper bound: the SDK itself retries unreachable
    endpoints for minutes, which would hang a command instead of failing it."""
    try:
        return await asyncio.wait_for(coro, seconds)
    except asyncio.TimeoutError as exc:
        raise BackendError(f"{what}: no answer from Modal within {seconds:g}s; retry later",
                           ErrorKind.UNAVAILABLE) from exc


async def _retrying(call: Callable[[], Awaitable[T]], what: str, *, attempts: int = 3) -> T:
    """An idempotent call (a lookup), repeated under the shared rule (``_shared.retry``)."""
    return await retrying(call, translate=lambda exc: _error(exc, what), idempotent=True, attempts=attempts,
                          factor=3.0)


# ---------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------


class ModalProcess(Process):
    """One ``sandbox.exec``: its streams are pumped into ByteQueues as they arrive."""

    stdout: ByteQueue
    stderr: ByteQueue | None

    def __init__(self, backend: "ModalBackend", box: "_Box", proc: Any, regfile: str, pty: bool) -> None:
        self._backend = backend
        self._box = box
        self._proc = proc
        self.regfile = regfile  # this spawn's entry in the sandbox's session registry ("-": none)
        self._pty = pty
        self._started = time.monotonic()
        self._write_lock = asyncio.Lock()
        self._stdin_closed = False
        self.stdout = ByteQueue()
        self.stderr = None if pty else ByteQueue()
        self._pumps = [asyncio.ensure_future(self._pump(proc.stdout, self.stdout))]
        if self.stderr is not None:
            self._pumps.append(asyncio.ensure_future(self._pump(proc.stderr, self.stderr)))

    async def _pump(self, stream: Any, queue: ByteQueue) -> None:
        try:
            async for chunk in stream:
                queue.feed(chunk)
                await queue.room()  # bounded: the SDK's stream waits while the reader is behind
        except asyncio.CancelledError:
            queue.feed_eof()
            raise
        except Exception as exc:  # noqa: BLE001 - the reader gets it as LOST
            err = await self._box.lost_or(_error(exc, "reading process output"), "reading output")
            queue.feed_error(_as_lost(err))
            return
        queue.feed_eof()

    async def write(self, data: bytes) -> None:
        if self._stdin_closed:
            raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
        if not data:
            return
        async with self._write_lock:
            try:
                for i in range(0, len(data), _WRITE_CHUNK):  # the SDK buffers at most 16 MiB
                    self._proc.stdin.write(data[i:i + _WRITE_CHUNK])
                    await self._proc.stdin.drain.aio()
            except ValueError as exc:  # the SDK's "stdin is closed"
                raise BackendError(f"stdin is closed: {exc}", ErrorKind.FAILED_PRECONDITION) from exc
            except Exception as exc:  # noqa: BLE001
                raise await self._box.lost_or(_error(exc, "writing to stdin"), "writing to stdin") from exc

    async def close_stdin(self) -> None:
        if self._pty or self._stdin_closed:
            return
        async with self._write_lock:
            self._stdin_closed = True
            try:
                self._proc.stdin.write_eof()
                await self._proc.stdin.drain.aio()
            except Exception as exc:  # noqa: BLE001
                raise await self._box.lost_or(_error(exc, "closing stdin"), "closing stdin") from exc

    async def wait(self) -> int:
        try:
            code: int = await self._proc.wait.aio()
        except Exception as exc:  # noqa: BLE001 - the result cannot be known: LOST
            err = await self._box.lost_or(_error(exc, "waiting for the process"), "waiting for a process")
            raise _as_lost(err) from exc
        if code == -1:  # the SDK's "status unknown"
            raise await self._box.lost_or(BackendError("Modal could not report the exit status", ErrorKind.LOST),
                                          "waiting for a process")
        if code > 128:
            # 128+N: killed by signal N (Modal reports signal deaths so), or an exit code
            # >128; the sandbox itself dying looks the same, so check it.
            vanished = await self._box.vanished()
            if vanished is not None:
                raise BackendError(vanished, ErrorKind.LOST)
            if self._box.signalled_since(code - 128, self._started):
                return -(code - 128)
        return code

    async def resize(self, size: PtySize) -> None:
        if not self._pty:
            raise BackendError("not a terminal: the process was started without a pty", ErrorKind.FAILED_PRECONDITION)
        proc = await self._backend._exec(self._box, ["/bin/sh", "-c", _RESIZE_SCRIPT, "resize", self.regfile,
                                                     str(size.rows), str(size.cols)],
                                         cwd=None, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, pty=None)
        await proc.close_stdin()
        _, err = await drain(proc)
        if await proc.wait() != 0:
            raise BackendError(f"cannot resize the terminal: {err.decode(errors='replace').strip()}",
                               ErrorKind.FAILED_PRECONDITION)

    async def detach(self) -> None:
        for pump in self._pumps:
            pump.cancel()


# ---------------------------------------------------------------------------
# Sandboxes
# ---------------------------------------------------------------------------


class _Box:
    """One Modal sandbox (shared by every task in ``sandbox_per: daemon`` mode)."""

    def __init__(self, backend: "ModalBackend", key: str, name: str) -> None:
        self.backend = backend
        self.key = key
        self.name = name
        self.sb: Any = None
        self.dead: str | None = None  # why the sandbox is gone, until it is recreated
        self.generation = 0  # bumped whenever a (new) Modal sandbox is attached
        self.registry: str | None = None  # absolute path of the session registry in the sandbox
        self.lock = asyncio.Lock()
        self._signals: list[tuple[float, int]] = []

    async def live(self) -> Any:
        """The Modal sandbox, found by name or created (again, if it vanished)."""
        async with self.lock:
            if self.sb is None or self.dead is not None:
                self.sb = await self.backend._find_or_create(self)
                self.dead = None
                self.generation += 1
            return self.sb

    async def vanished(self) -> str | None:
        """Why the sandbox is gone, or None while it runs (asks Modal: one cheap poll)."""
        if self.dead is not None:
            return self.dead
        if self.sb is None:
            return None
        try:
            code = await _bounded(self.sb.poll.aio(), 10, "checking the sandbox")
        except mexc.NotFoundError:
            code = -1
        except Exception:  # noqa: BLE001 - unreachable: not known to be gone
            return None
        if code is None:
            return None
        self.dead = (f"the Modal sandbox {self.sb.object_id} ({self.name}) ended (exit {code}: terminated, "
                     "timed out or crashed); its processes and files are gone. A new sandbox is created on "
                     "the next command")
        return self.dead

    async def lost_or(self, err: BackendError, what: str) -> BackendError:
        """LOST if the sandbox vanished under the operation, else ``err``."""
        vanished = await self.vanished()
        if vanished is not None:
            return BackendError(f"{what}: {vanished}", ErrorKind.LOST)
        return err

    def record_signal(self, sig: int) -> None:
        now = time.monotonic()
        self._signals = [(t, s) for t, s in self._signals if now - t < 3600] + [(now, sig)]

    def signalled_since(self, sig: int, since: float) -> bool:
        return any(s == sig and t >= since for t, s in self._signals)


class ModalSandbox(Sandbox):
    """A task's directory inside a Modal sandbox."""

    def __init__(self, backend: "ModalBackend", box: _Box, task_id: str, task_dir: str, root: str,
                 generation: int) -> None:
        self._backend = backend
        self.box = box
        self.task_id = task_id
        self._task_dir = task_dir
        self.root = root
        self._generation = generation  # of the Modal sandbox in which ``root`` was made

    @property
    def sandbox_id(self) -> str | None:
        return self.box.sb.object_id if self.box.sb is not None else None

    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        pty: PtySize | None = None,
    ) -> Process:
        if not argv:
            raise BackendError("empty argv", ErrorKind.INVALID_ARGUMENT)
        if self.box.dead is not None or self.box.generation != self._generation:
            # The sandbox vanished (reported once as LOST): work on in a new one, with a new task dir.
            await self._backend._prepare_root(self.box, self._task_dir)  # same image: same absolute path
            self._generation = self.box.generation
        return await self._backend._exec(self.box, argv, cwd=cwd, env=env, pty=pty)

    async def signal_session(self, pid: int, sig: int) -> None:
        """Signal the session's processes inside the sandbox (never the sandbox itself)."""
        if self.box.dead is not None or self.box.generation != self._generation:
            return  # the sandbox that ran this session is gone, and the session with it
        self.box.record_signal(sig)
        await super().signal_session(pid, sig)

    async def release(self, remove_files: bool = False) -> None:
        await self._backend._release(self, remove_files)


class ModalBackend(Backend):
    kind = "modal"
    Options = ModalOptions
    options: ModalOptions

    def __init__(self, name: str, options: ModalOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.options: ModalOptions = options
        self._client: Any = None
        self._client_lock = asyncio.Lock()
        self._app: Any = None
        self._boxes: dict[str, _Box] = {}

    # -- configuration ---------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.full(self._network_policy())

    def _network_policy(self) -> str:
        o = self.options
        if o.block_network:
            return "blocked"
        if o.cidr_allowlist is not None:
            return "allowlist"
        return "open"

    def _server_url(self) -> str:
        from modal.config import config

        return self.options.server_url or config.get("server_url")

    def _credential_source(self) -> str:
        o = self.options
        if o.token_id is not None:
            return "backend config (token_id/token_secret)"
        return f"environment ({o.token_id_env}/{o.token_secret_env}) or the Modal profile"

    def policy(self) -> dict[str, str]:
        o = self.options
        network = {"blocked": "blocked (no network)", "open": "open",
                   "allowlist": f"outbound allowlist {','.join(o.cidr_allowlist or []) or '(none)'}"}
        return {
            "isolation": "Modal sandbox (gVisor container on Modal's fleet)",
            "sandbox_per": o.sandbox_per,
            "on_close": o.on_close,
            "app": o.app_name,
            "image": o.image or "modal default (debian_slim)",
            "cpu": str(o.cpu) if o.cpu is not None else "modal default",
            "memory_mib": str(o.memory) if o.memory is not None else "modal default",
            "timeout_seconds": str(o.timeout),
            "idle_timeout_seconds": str(o.idle_timeout) if o.idle_timeout is not None else "none",
            "region": ",".join(o.region) if isinstance(o.region, list) else (o.region or "any"),
            "network": network[self._network_policy()],
            "root": o.root,
            "server": self._server_url(),
            "credentials": self._credential_source(),
            "kill": KILL_SESSION_ONLY,
        }

    def _credentials(self) -> tuple[str, str]:
        o = self.options
        token_id = o.token_id.get_secret_value() if o.token_id else os.environ.get(o.token_id_env, "")
        token_secret = o.token_secret.get_secret_value() if o.token_secret else os.environ.get(o.token_secret_env, "")
        defaults = (o.token_id_env, o.token_secret_env) == ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET")
        if not (token_id and token_secret) and defaults and o.token_id is None:
            from modal.config import config  # the active profile in ~/.modal.toml

            token_id = token_id or (config.get("token_id") or "")
            token_secret = token_secret or (config.get("token_secret") or "")
        if not (token_id and token_secret):
            raise BackendError(
                f"no Modal credentials: set {o.token_id_env} and {o.token_secret_env} in the daemon's "
                "environment (or token_id/token_secret, token_id_env/token_secret_env in this backend's "
                "config), or run `modal token new`", ErrorKind.FAILED_PRECONDITION)
        return token_id, token_secret

    # -- the client ----------------------------------------------------------

    async def _probe(self) -> None:
        """Fail fast, with the reason, when Modal's endpoint refuses TCP connections: the
        SDK would keep retrying a refused connection for as long as we let it."""
        url = urllib.parse.urlparse(self._server_url())
        host = url.hostname or ""
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        except (OSError, asyncio.TimeoutError) as exc:
            raise BackendError(f"cannot reach Modal at {self._server_url()}: {str(exc) or 'timed out'}; check the "
                               "network or server_url, then retry", ErrorKind.UNAVAILABLE) from exc
        writer.close()

    async def _get_client(self) -> Any:
        async with self._client_lock:
            if self._client is None:
                credentials = self._credentials()
                await self._probe()
                client = modal.Client(self._server_url(), api_pb2.CLIENT_TYPE_CLIENT, credentials)
                try:
                    await _bounded(client.__aenter__(), self.options.request_timeout, "connecting to Modal")
                except Exception as exc:  # noqa: BLE001
                    raise _error(exc, "connecting to Modal") from exc
                self._client = client
            return self._client

    async def _get_app(self) -> Any:
        if self._app is None:
            client = await self._get_client()
            o = self.options
            self._app = await _retrying(
                lambda: _bounded(modal.App.lookup.aio(o.app_name, client=client, environment_name=o.environment,
                                                      create_if_missing=True), o.request_timeout,
                                 f"looking up the Modal app {o.app_name}"),
                f"looking up the Modal app {o.app_name}")
        return self._app

    def _image(self) -> Any:
        o = self.options
        if o.image is None:
            return None
        if o.image.startswith("im-"):
            return modal.Image.from_id(o.image)
        return modal.Image.from_registry(o.image, add_python=o.image_add_python)

    # -- life cycle --------------------------------------------------------------

    async def start(self) -> None:
        """Nothing to recover eagerly: sandboxes are found again by name on first use."""

    async def health(self) -> Health:
        details = {"server": self._server_url(), "app": self.options.app_name}
        try:
            client = await self._get_client()
            await self._probe()
            await _bounded(client.hello.aio(), 10, "contacting Modal")
        except Exception as exc:  # noqa: BLE001
            err = _error(exc, "contacting Modal")
            return Health(False, err.message, details)
        return Health(True, "", details)

    async def close(self) -> None:
        """Detach from every sandbox and close the client. Sandboxes stay (named), so a
        restarted daemon re-attaches; CloseTask or Modal's timeouts end them."""
        for box in self._boxes.values():
            if box.sb is not None:
                try:
                    await _bounded(box.sb.detach.aio(), 5, "detaching")
                except Exception:  # noqa: BLE001 - shutting down anyway
                    pass
        self._boxes.clear()
        if self._client is not None:
            try:
                await _bounded(self._client.close.aio(), 5, "closing the Modal client")
            except Exception:  # noqa: BLE001
                pass
            self._client = None
            self._app = None

    # -- sandboxes ---------------------------------------------------------------

    @property
    def daemon_id(self) -> str:
        """This daemon's id (``Backend.instance_id``): sandbox names carry it, so two daemons sharing a
        Modal workspace never adopt (and clean up) each other's sandboxes, while a restarted daemon
        finds its own again."""
        return self.instance_id

    def _sandbox_name(self, key: str) -> str:
        """A valid, stable Modal object name (<= 64 of [A-Za-z0-9._-])."""
        raw = f"{self.options.name_prefix}-{self.daemon_id}-{self.name}-{key}"
        name = re.sub(r"[^A-Za-z0-9._-]", "-", raw)
        if name != raw or len(name) > 64:
            digest = hashlib.sha256(raw.encode()).hexdigest()[:12]
            name = f"{name[:51]}-{digest}"
        return name

    @staticmethod
    def _task_dir(task_id: str) -> str:
        if _SAFE_NAME.match(task_id) and not task_id.startswith("."):
            return task_id
        return re.sub(r"[^A-Za-z0-9._-]", "_", task_id)[:40] + "-" + hashlib.sha256(task_id.encode()).hexdigest()[:12]

    async def sandbox(self, task_id: str) -> ModalSandbox:
        key = "daemon" if self.options.sandbox_per == "daemon" else task_id
        box = self._boxes.get(key)
        if box is None:
            box = self._boxes[key] = _Box(self, key, self._sandbox_name(key))
        task_dir = self._task_dir(task_id)
        root = await self._prepare_root(box, task_dir)
        return ModalSandbox(self, box, task_id, task_dir, root, box.generation)

    async def _find_or_create(self, box: _Box) -> Any:
        client = await self._get_client()
        o = self.options
        what = f"finding the Modal sandbox {box.name}"

        async def lookup() -> Any:
            try:
                sb = await _bounded(modal.Sandbox.from_name.aio(o.app_name, box.name, environment_name=o.environment,
                                                                client=client), o.request_timeout, what)
            except mexc.NotFoundError:
                return None
            return sb

        found = await _retrying(lookup, what)
        if found is not None:
            await self._end_leftovers(found, box)
            return found
        app = await self._get_app()
        tags = {"executor-daemon": self.daemon_id, "executor-backend": self.name, "executor-key": box.key[:200]}
        try:
            return await _bounded(modal.Sandbox.create.aio(
                "sleep", "infinity", app=app, name=box.name, tags=tags, image=self._image(),
                timeout=o.timeout, idle_timeout=o.idle_timeout, workdir=o.workdir, region=o.region,
                cpu=o.cpu, memory=o.memory, block_network=o.block_network,
                outbound_cidr_allowlist=o.cidr_allowlist, client=client,
            ), o.request_timeout, f"creating the Modal sandbox {box.name}")
        except mexc.AlreadyExistsError:
            # Another daemon (or a retried request) created it meanwhile: use that one.
            found = await _retrying(lookup, what)
            if found is None:
                raise BackendError(f"the Modal sandbox {box.name} exists but cannot be found; retry",
                                   ErrorKind.UNAVAILABLE) from None
            return found
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _error(exc, f"creating the Modal sandbox {box.name}") from exc

    async def _end_leftovers(self, sb: Any, box: _Box) -> None:
        """A sandbox found by name was used by an earlier daemon: end the sessions it left
        (shells, background processes), as the local backend does with its pid registry."""
        try:
            proc = await _bounded(sb.exec.aio("/bin/sh", "-c", CLEANUP_KEEP_SCRIPT, "cleanup",
                                              f"{self.options.root.rstrip('/')}/{_REGISTRY}", text=False),
                                  self.options.request_timeout, "ending leftover processes")
            await _bounded(proc.wait.aio(), self.options.request_timeout, "ending leftover processes")
        except BackendError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _error(exc, f"ending leftover processes in the Modal sandbox {box.name}") from exc

    async def _prepare_root(self, box: _Box, task_dir: str) -> str:
        """Create the task directory (and the session registry next to it); returns its
        absolute path. A relative ``root`` option is resolved against the sandbox's
        working directory."""
        script = 'mkdir -p -- "$1/$2" "$1/$3" && cd -- "$1" && pwd -P'
        process = await self._exec(box, ["/bin/sh", "-c", script, "mkroot", self.options.root, task_dir, _REGISTRY],
                                   cwd=None, env={"PATH": "/usr/local/bin:/usr/bin:/bin"}, pty=None,
                                   timeout=self.options.start_timeout)
        await process.close_stdin()
        out, err = await drain(process)
        code = await process.wait()
        base = out.decode(errors="replace").strip()
        if code != 0 or not base.startswith("/"):
            raise BackendError(f"cannot create the task directory {self.options.root}/{task_dir} in the Modal "
                               f"sandbox {box.name}: {err.decode(errors='replace').strip() or f'exit {code}'}",
                               ErrorKind.FAILED_PRECONDITION)
        base = base.rstrip("/")
        box.registry = f"{base}/{_REGISTRY}"
        return f"{base}/{task_dir}"

    async def _exec(self, box: _Box, argv: Sequence[str], *, cwd: str | None, env: Mapping[str, str],
                    pty: PtySize | None, timeout: float | None = None) -> ModalProcess:
        """Start ``argv`` through the session/env prologue (``_SPAWN_SCRIPT``)."""
        channel: dict[str, str] = {}
        literal: list[str] = []
        for key, value in env.items():
            if _IDENT.match(key):
                channel[key] = value
            elif "=" in key or not key:
                raise BackendError(f"invalid environment variable name {key!r}", ErrorKind.INVALID_ARGUMENT)
            else:
                literal.append(f"{key}={value}")
        regfile = f"{box.registry}/{secrets.token_hex(8)}" if box.registry else "-"
        wrapped = ["/bin/sh", "-c", _SPAWN_SCRIPT, "executor-spawn", "1" if pty else "0", regfile, str(len(channel)),
                   *channel, *literal, *argv]
        kwargs: dict[str, Any] = {"text": False, "env": channel or None}
        if cwd is not None:
            kwargs["workdir"] = cwd
        if pty is not None:
            _quiet_pty_info_deprecation()
            kwargs["pty_info"] = api_pb2.PTYInfo(
                enabled=True, winsz_rows=pty.rows, winsz_cols=pty.cols, env_term=env.get("TERM", "xterm-256color"),
                pty_type=api_pb2.PTYInfo.PTY_TYPE_SHELL, no_terminate_on_idle_stdin=True)
        sb = await box.live()
        try:
            proc = await _bounded(sb.exec.aio(*wrapped, **kwargs), timeout or self.options.request_timeout,
                                  f"starting a process in the Modal sandbox {box.name}")
        except Exception as exc:  # noqa: BLE001
            raise await box.lost_or(_error(exc, "starting a process"), "starting a process") from exc
        return ModalProcess(self, box, proc, regfile, pty is not None)

    async def _release(self, sandbox: ModalSandbox, remove_files: bool) -> None:
        box = sandbox.box
        o = self.options
        if o.sandbox_per == "task" and o.on_close == "terminate":
            self._boxes.pop(box.key, None)
            if box.sb is not None and box.dead is None:
                try:
                    await _bounded(box.sb.terminate.aio(), o.request_timeout, "terminating the sandbox")
                except mexc.NotFoundError:
                    pass
                except Exception as exc:  # noqa: BLE001
                    raise _error(exc, f"terminating the Modal sandbox {box.name}") from exc
                try:
                    await _bounded(box.sb.detach.aio(), 5, "detaching")
                except Exception:  # noqa: BLE001
                    pass
            return
        if remove_files and box.dead is None and box.sb is not None:
            process = await self._exec(box, ["/bin/rm", "-rf", "--", sandbox.root], cwd=None,
                                       env={"PATH": "/usr/bin:/bin"}, pty=None)
            await process.close_stdin()
            await drain(process)
            await process.wait()
        if o.sandbox_per == "task":
            self._boxes.pop(box.key, None)
            if box.sb is not None:
                try:
                    await _bounded(box.sb.detach.aio(), 5, "detaching")
                except Exception:  # noqa: BLE001
                    pass


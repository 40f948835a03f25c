"""The ssh sandbox and backend: the connection pool, spawning, recovery and health."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import paramiko

from ..base import KILL_SUBREAPER_IF_PYTHON, Backend, BackendError, Capabilities, ErrorKind, Health, Process, PtySize, Sandbox, drain
from .._shared.batch import TurnBatch
from .._shared.retry import Failure, retrying
from .commands import CLEANUP_SCRIPT, SIGNAL_SESSIONS_FUNCTION, build_spawn_command, remote_path_expr
from .connection import _Connection, _Connector, _Dropped, _OpenLost, _Refused
from .options import CONNECT_ATTEMPTS, SESSIONS_DIR, SSHOptions
from .process import _ChannelProcess

log = logging.getLogger(__name__.rpartition('.')[0])

T = TypeVar("T")

# ---------------------------------------------------------------------------
# Sandbox and backend
# ---------------------------------------------------------------------------


class SSHSandbox(Sandbox):
    """A task's directory under remote_root; processes run on the shared connection."""

    def __init__(self, backend: "SSHBackend", task_id: str, root: str) -> None:
        self._backend = backend
        self.task_id = task_id
        self.root = root

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        return await self._backend._spawn(argv, cwd=cwd, env=env, pty=pty)

    async def signal_session(self, pid: int, sig: int) -> None:
        """Signal the session from a plain exec channel (no registry, no handshake); the sessions
        signalled in the same turn of the loop share one channel (``_signal_sessions``)."""
        await self._backend._kills.ask(int(sig), int(pid))

    async def release(self, remove_files: bool = False) -> None:
        if remove_files:
            code, _, err = await self._backend._run(f"rm -rf -- {shlex.quote(self.root)}")
            self._backend._dirs.discard(self.root)
            if code != 0:
                raise BackendError(f"removing {self.root} failed: {err.decode(errors='replace').strip()}",
                                   ErrorKind.FAILED_PRECONDITION)


class SSHBackend(Backend):
    kind = "ssh"
    Options = SSHOptions
    options: SSHOptions

    def __init__(self, name: str, options: SSHOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self._connector = _Connector(options)
        # Connects (max_parallel_connects at a time) and open/exec requests wait here for the server.
        self._closed = False
        self._kills: TurnBatch[int, int] = TurnBatch(self._signal_sessions)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=8 + options.max_parallel_connects,
                                                           thread_name_prefix=f"ssh-{name}")
        self._conn: _Connection | None = None  # the primary connection
        self._extra: list[_Connection] = []  # overflow: only when the server refuses more channels
        self._lock = asyncio.Lock()
        self._forgotten: list[str] = []  # registry files of ended sessions, removed by the next spawn
        self._serial = 0
        self._swept = False  # the previous daemon's registry was cleaned up
        self._dead_registries: list[str] = []  # of lost connections, cleaned up by the next connect
        self._dirs: set[str] = set()
        self.orphans_ended = 0
        self.reconnects = 0
        self.last_loss = ""  # why the last connection was lost (shown by health)
        self._room: asyncio.Future[None] | None = None  # resolved when room for a channel may have appeared
        self._waiting = 0  # channel opens waiting in _pick
        self._connecting = 0  # overflow connections being opened
        self._connect_error: BackendError | None = None  # why the last overflow connect failed
        #: What the server showed of its limits: channels per connection (MaxSessions) when it
        #: refused one, and how often it dropped a new connection before its greeting (MaxStartups).
        self.max_sessions_seen: int | None = None
        self.refusals = 0
        self.startup_drops = 0
        self.last_startup_drop = ""

    # -- capabilities and policy ------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.full("host")

    def policy(self) -> dict[str, str]:
        o = self.options
        auth = ["publickey (key_file)" if o.key_file else "publickey (ssh-agent)"]
        if o.password_env:
            auth.append("password (from the daemon's environment)")
        policy = {
            "isolation": "remote account (task directory only; no sandbox on the remote host)",
            "host": f"{self._connector.user}@{o.host}:{o.port}",
            "remote_root": self._conn.root if self._conn and self._conn.root else o.remote_root,
            "host_keys": f"verified against {o.known_hosts}" + (" (new keys accepted and recorded)"
                                                               if o.accept_new_host_keys else " (strict)"),
            "auth": ", ".join(auth),
            "network": "the remote host's",
            "kill": KILL_SUBREAPER_IF_PYTHON,
        }
        if o.jump_host:
            policy["jump_host"] = o.jump_host
        return policy

    # -- plumbing --------------------------------------------------------------------

    async def _blocking(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))
        except RuntimeError as exc:
            if not self._closed:
                raise
            # A command still being ended when the shutdown's budget ran out: a backend error its
            # caller handles, not an exception that ends the call without its Exit.
            raise BackendError(f"ssh backend {self.name} is closed (the daemon is shutting down)",
                               ErrorKind.UNAVAILABLE) from exc

    async def _connection(self) -> _Connection:
        """The primary connection; reconnects (and reports why) when it was lost."""
        conn = self._conn
        if conn is not None and conn.alive():
            return conn
        async with self._lock:
            conn = self._conn
            if conn is not None and conn.alive():
                return conn
            if conn is not None:
                log.warning("ssh backend %s: reconnecting to %s after: %s", self.name, conn.label, conn.loss_reason())
                self._bury(conn)
                self._conn = None
                self.reconnects += 1
                self.last_loss = conn.loss_reason()
            self._conn = await self._connect()
            return self._conn

    async def _connect(self) -> _Connection:
        """A new connection, prepared. A connection the server drops before its greeting (sshd's
        MaxStartups: too many unauthenticated connections at once, counted over every client of
        that server) is retried after a short pause: nothing has run yet, so that is safe."""
        def classify(exc: BaseException) -> Failure:
            if isinstance(exc, _Dropped):
                self.startup_drops += 1
                self.last_startup_drop = exc.message
                return Failure.UNSENT
            return Failure.FINAL

        def translate(exc: BaseException) -> BaseException:
            if isinstance(exc, _Dropped):
                return BackendError(f"{exc.message} ({CONNECT_ATTEMPTS} attempts)", ErrorKind.UNAVAILABLE)
            return exc  # raised as it is

        def retried(exc: BaseException, pause: float) -> None:
            log.info("ssh backend %s: %s; retrying in %.2f s", self.name, exc, pause)

        conn = await retrying(lambda: self._blocking(self._connector.connect), translate=translate, classify=classify,
                              idempotent=False, attempts=CONNECT_ATTEMPTS, delay=0.05, jitter=True, on_retry=retried)
        try:
            await self._prepare(conn)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            conn.close()
            raise BackendError(f"ssh: connecting to {self.options.host}:{self.options.port} failed: {exc}",
                               ErrorKind.UNAVAILABLE) from exc
        except BaseException:
            conn.close()
            raise
        conn.pinger = asyncio.get_running_loop().create_task(self._keepalive(conn), name=f"ssh-keepalive-{self.name}")
        return conn

    async def _ping(self, conn: _Connection) -> float:
        """One keepalive round trip (a global request the server must answer); seconds."""
        async with conn.ping_lock:
            started = time.perf_counter()
            await self._blocking(conn.transport.global_request, "keepalive@openssh.com", None, True)
            if not conn.alive():
                raise conn.lost_error("a keepalive")
            return time.perf_counter() - started

    async def _keepalive(self, conn: _Connection) -> None:
        """Ping every keepalive_interval; no answer within 3 intervals closes the connection,
        so that its processes fail as LOST instead of hanging on a stopped server or a dead
        network (TCP keepalives alone miss a peer whose kernel still ACKs)."""
        interval = self.options.keepalive_interval
        while conn.alive():
            await asyncio.sleep(interval)
            try:
                await asyncio.wait_for(self._ping(conn), 3 * interval)
            except TimeoutError:
                reason = f"the server did not answer keepalives for {3 * interval:g} s"
                log.warning("ssh backend %s: closing the connection to %s: %s", self.name, conn.label, reason)
                conn.close(reason)
                return
            except BackendError:
                return

    def _bury(self, conn: _Connection) -> None:
        """A lost connection: its sessions are cleaned up by the next connect or sweep."""
        conn.close()
        if conn.registry:
            self._dead_registries.append(conn.registry)

    async def _prepare(self, conn: _Connection) -> None:
        """One round trip after connecting: resolve remote_root, kill the sessions recorded by
        a previous daemon (first connect) or by lost connections, and create this connection's
        registry. The core reported those sessions LOST and cannot re-adopt them: left alone
        they would be orphans."""
        root = remote_path_expr(self.options.remote_root)
        base = f"{root}/{SESSIONS_DIR}/{self.instance_id}"
        self._serial += 1
        serial = self._serial
        dead = list(self._dead_registries)
        targets = f"{base}/c*" if not self._swept else " ".join(shlex.quote(d) for d in dead)
        command = (f"mkdir -p -- {base} && cd -- {root} && pwd -P && {{ set -- {targets}\n{CLEANUP_SCRIPT}\n}} "
                   f"&& mkdir -p -- {base}/c{serial}")
        code, out, err = await self._run(command, conn=conn)
        lines = out.decode(errors="replace").splitlines()
        if code != 0 or len(lines) < 2 or not lines[-1].strip().isdigit():
            conn.close()
            raise BackendError(f"ssh: cannot prepare remote_root {self.options.remote_root} on {conn.label}: "
                               f"{err.decode(errors='replace').strip() or f'exit {code}'}", ErrorKind.FAILED_PRECONDITION)
        conn.root = lines[-2]
        conn.registry = f"{conn.root}/{SESSIONS_DIR}/{self.instance_id}/c{serial}"
        if not self._swept:
            self._forgotten.clear()
        self._swept = True
        self._dead_registries = [d for d in self._dead_registries if d not in dead]
        self._forgotten = [f for f in self._forgotten if not any(f.startswith(d + "/") for d in dead)]
        ended = int(lines[-1])
        if ended:
            self.orphans_ended += ended
            log.warning("ssh backend %s: ended %d session(s) left running on %s by a previous daemon or a lost "
                        "connection", self.name, ended, conn.label)

    def _connections(self) -> list[_Connection]:
        return [c for c in (self._conn, *self._extra) if c is not None]

    def _room_changed(self) -> None:
        """Wake the channel opens waiting for room (a channel closed, a connection came or went)."""
        if self._room is not None and not self._room.done():
            self._room.set_result(None)
        self._room = None

    def _room_signal(self) -> asyncio.Future[None]:
        if self._room is None:
            self._room = asyncio.get_running_loop().create_future()
        return self._room

    async def _pick(self) -> _Connection:
        """A connection with room for one more channel: the primary, else an overflow one.

        When none has room, more connections are opened in the background, at most
        ``max_parallel_connects`` at a time (sshd's MaxStartups counts unauthenticated connections,
        10 by default) and enough for the opens waiting, given the MaxSessions learnt; at most
        ``max_connections`` in all, after which opens wait for a channel to close."""
        primary = await self._connection()
        dead = [c for c in self._extra if not c.alive()]
        if dead:
            for c in dead:
                self._extra.remove(c)
                log.warning("ssh backend %s: lost an overflow connection: %s", self.name, c.loss_reason())
                self._bury(c)
            await self._sweep(primary)
        self._waiting += 1
        try:
            waited = 0.0
            while True:
                for c in self._connections():
                    if c.has_room():
                        return c
                if not primary.alive():
                    primary = await self._connection()
                    continue
                if self._connect_error is not None and self._connecting == 0:
                    error, self._connect_error = self._connect_error, None
                    raise BackendError(
                        f"ssh: {primary.label} has no room for another channel ({self._describe_limits()}) and "
                        f"opening another connection failed: {error.message}", ErrorKind.RESOURCE_EXHAUSTED)
                per_connection = self.max_sessions_seen or 1
                total = len(self._connections()) + self._connecting
                if (self._connecting < self.options.max_parallel_connects and total < self.options.max_connections
                        and self._connecting * per_connection < self._waiting):
                    self._connecting += 1
                    asyncio.get_running_loop().create_task(self._add_connection(), name=f"ssh-connect-{self.name}")
                    continue
                if self._connecting == 0 and total >= self.options.max_connections:
                    if waited >= self.options.channel_wait:
                        raise BackendError(
                            f"ssh: no room for another channel on {primary.label}: {self._describe_limits()}, "
                            f"max_connections {self.options.max_connections} reached, and none closed within "
                            f"{self.options.channel_wait:g} s (raise MaxSessions in sshd_config, or max_connections)",
                            ErrorKind.RESOURCE_EXHAUSTED)
                    started = time.monotonic()
                    try:
                        await asyncio.wait_for(asyncio.shield(self._room_signal()), self.options.channel_wait - waited)
                    except TimeoutError:
                        pass
                    waited += time.monotonic() - started
                    continue
                await asyncio.shield(self._room_signal())
        finally:
            self._waiting -= 1

    async def _add_connection(self) -> None:
        """Open one overflow connection (a background task of _pick's)."""
        try:
            conn = await self._connect()
        except BackendError as exc:
            self._connect_error = exc
        except Exception as exc:  # noqa: BLE001 - reported to the waiting opens, not lost in a task
            self._connect_error = BackendError(f"{type(exc).__name__}: {exc}", ErrorKind.UNAVAILABLE)
        else:
            if self.max_sessions_seen:
                log.info("ssh backend %s: %s allows %d channels per connection (MaxSessions); %d connection(s) "
                         "now", self.name, conn.label, self.max_sessions_seen, 2 + len(self._extra))
            self._extra.append(conn)
            self._connect_error = None
        finally:
            self._connecting -= 1
            self._room_changed()

    def _describe_limits(self) -> str:
        conns = self._connections()
        text = f"{len(conns)} connection(s), {sum(c.open_channels for c in conns)} channel(s) open"
        if self.max_sessions_seen:
            text += f", the server allows {self.max_sessions_seen} per connection (sshd MaxSessions)"
        return text

    async def _sweep(self, conn: _Connection) -> None:
        """Kill the sessions of lost connections now, from a live one."""
        dead = list(self._dead_registries)
        if not dead:
            return
        code, out, _ = await self._run("set -- " + " ".join(shlex.quote(d) for d in dead) + "\n" + CLEANUP_SCRIPT,
                                       conn=conn)
        if code == 0 and out.strip().isdigit():
            self.orphans_ended += int(out.strip())
            self._dead_registries = [d for d in self._dead_registries if d not in dead]

    async def _open(self, conn: _Connection, command: str, pty: PtySize | None) -> paramiko.Channel:
        """A channel on ``conn`` running ``command``.

        Two steps, and only the first may be retried: opening the channel (nothing runs yet;
        _Refused when the server will not open one more, MaxSessions; _OpenLost when the
        connection died meanwhile), then the pty and exec requests, after which the command may
        have started: a failure there is reported, never retried. Opens on one connection
        are queued (conn.open_lock): one in flight at a time."""
        async with conn.open_lock:
            if not conn.alive():
                raise _OpenLost(conn.lost_error("a new channel").message, ErrorKind.LOST)
            if not conn.has_room():
                raise _Refused(f"ssh: {conn.label} has no room for another channel", ErrorKind.RESOURCE_EXHAUSTED)
            try:
                chan = await self._blocking(conn.transport.open_session, self.options.connect_timeout)
            except (OSError, EOFError, paramiko.SSHException) as exc:
                refusal = conn.transport.executor_refusal
                conn.transport.executor_refusal = None
                if isinstance(exc, paramiko.ChannelException) or refusal is not None:
                    code, text = (exc.code, exc.text) if isinstance(exc, paramiko.ChannelException) else \
                        (refusal.code, refusal.text)
                    # OpenSSH answers "open failed" (code 2) past MaxSessions; others use code 1.
                    if code in (paramiko.common.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED,
                                paramiko.common.OPEN_FAILED_CONNECT_FAILED):
                        raise _Refused(f"ssh: {conn.label} refused a new channel ({text}) with {conn.open_channels} "
                                       "open: its sshd MaxSessions is reached", ErrorKind.RESOURCE_EXHAUSTED) from exc
                    raise BackendError(f"ssh: {conn.label} refused a new channel: {text}", ErrorKind.UNAVAILABLE) from exc
                if not conn.transport.is_active():
                    raise _OpenLost(conn.lost_error("a new channel").message, ErrorKind.LOST) from exc
                raise BackendError(f"ssh: opening a channel on {conn.label} failed: {exc}", ErrorKind.UNAVAILABLE) from exc
            conn.open_channels += 1
            conn.opened += 1
        chan.executor_send_lock = threading.RLock()  # see _serialized

        def start() -> None:
            if pty is not None:
                chan.get_pty(term="xterm-256color", width=pty.cols, height=pty.rows)
            chan.exec_command(command)

        try:
            await self._blocking(start)
        except BaseException as exc:
            with chan.executor_send_lock:
                chan.close()
            conn.open_channels -= 1
            self._room_changed()
            if isinstance(exc, (OSError, EOFError, paramiko.SSHException)):
                if not conn.transport.is_active():
                    raise conn.lost_error("a new command") from exc
                raise BackendError(f"ssh: starting a command on {conn.label} failed: {exc}",
                                   ErrorKind.UNAVAILABLE) from exc
            raise
        return chan

    async def _open_any(self, build: Callable[[_Connection], str],
                        pty: PtySize | None) -> tuple[_Connection, paramiko.Channel]:
        """Open a channel on whichever connection has room (see _pick). Refusals (MaxSessions) are
        retried on another connection; so is a connection lost while opening, twice."""
        lost = 0
        while True:
            conn = await self._pick()
            try:
                return conn, await self._open(conn, build(conn), pty)
            except _Refused as exc:
                if conn.opened == 0:
                    raise BackendError(f"ssh: {conn.label} refuses channels even on a new connection: "
                                       f"{exc.message}", ErrorKind.RESOURCE_EXHAUSTED) from exc
                if self.max_sessions_seen and conn.open_channels < self.max_sessions_seen:
                    # Below what the server allowed before: it still counts channels we just closed
                    # (their CLOSE is under way). Not a new limit; try again in a moment.
                    await asyncio.sleep(0.02)
                    continue
                if conn.limit is None or conn.open_channels < conn.limit:
                    conn.limit = max(1, conn.open_channels)
                    self.max_sessions_seen = max(self.max_sessions_seen or 0, conn.limit)
                    self.refusals += 1
            except _OpenLost:
                lost += 1
                if lost > 2:
                    raise
                conn.lost = True

    async def _signal_sessions(self, sig: int, pids: list[int]) -> None:
        """Every session in ``pids`` signalled from one exec channel, in one walk: a shutdown ending 200
        commands opened 400 channels (TERM, then KILL) through MaxSessions-limited connections, and
        outlived its budget."""
        await self._run(f"{SIGNAL_SESSIONS_FUNCTION}_extrees {int(sig)} {' '.join(str(p) for p in sorted(set(pids)))}; "
                        "exit 0")

    async def _run(self, command: str, *, conn: _Connection | None = None) -> tuple[int, bytes, bytes]:
        """Run a helper command on a plain exec channel and collect its output."""
        if conn is not None:
            chan = await self._open(conn, command, None)
        else:
            conn, chan = await self._open_any(lambda _: command, None)
        proc = _ChannelProcess(self, conn, chan, pty=False, handshake=False)
        await proc.close_stdin()
        out, err = await drain(proc)
        code = await proc.wait()
        await proc.detach()
        return code, out, err

    def _forget(self, path: str) -> None:
        self._forgotten.append(path)

    async def _spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                     pty: PtySize | None) -> Process:
        forget, self._forgotten = self._forgotten[:200], self._forgotten[200:]
        try:
            conn, chan = await self._open_any(lambda c: build_spawn_command(argv, cwd, env, c.registry, forget, pty=pty is not None), pty)
        except BaseException:
            self._forgotten[:0] = forget
            raise
        proc = _ChannelProcess(self, conn, chan, pty=pty is not None, handshake=True)
        try:
            await proc.started(self.options.connect_timeout + 5)
        except BackendError as exc:
            proc.abort()
            if "err:cwd" in exc.message:
                raise BackendError(f"cannot start {argv[0]!r}: the directory {cwd} does not exist on "
                                   f"{conn.label}", ErrorKind.NOT_FOUND) from None
            if "err:session" in exc.message:
                raise BackendError(f"{conn.label} cannot run commands for this backend: it needs Linux's /proc "
                                   "and an sshd that starts each command in a new session (OpenSSH does)",
                                   ErrorKind.FAILED_PRECONDITION) from None
            if exc.kind is ErrorKind.FAILED_PRECONDITION and proc.stderr is not None:
                detail = proc.stderr.peek().decode(errors="replace").strip()
                if detail:
                    raise BackendError(f"{exc.message}: {detail}", exc.kind) from None
            raise
        return proc

    # -- Backend API -----------------------------------------------------------------

    async def start(self) -> None:
        """Connect; connecting kills the sessions a previous daemon left on the remote host."""
        try:
            await self._connection()
        except BackendError as exc:
            log.warning("ssh backend %s: not reachable at start: %s", self.name, exc.message)

    async def health(self) -> Health:
        try:
            conn = await asyncio.wait_for(self._connection(), self.options.connect_timeout + 5)
        except BackendError as exc:
            return Health(False, exc.message)
        except TimeoutError:
            return Health(False, f"ssh: connecting to {self.options.host}:{self.options.port} timed out")
        try:
            rtt = await asyncio.wait_for(self._ping(conn), self.options.connect_timeout) * 1000
        except TimeoutError:
            return Health(False, f"ssh: {conn.label} does not answer")
        except BackendError:
            return Health(False, f"ssh: {conn.loss_reason()}")
        conns = self._connections()
        details = {"host": conn.label, "remote_root": conn.root, "rtt_ms": f"{rtt:.2f}",
                   "connections": str(len(conns)), "channels_open": str(sum(c.open_channels for c in conns)),
                   "reconnects": str(self.reconnects)}
        if self.last_loss:
            details["last_loss"] = self.last_loss
        # The server's limits, as it showed them (never assumed): only when they are what limits.
        notes = []
        if self.max_sessions_seen:
            details["max_sessions"] = (f"{self.max_sessions_seen} (the server refused channel "
                                       f"{self.max_sessions_seen + 1} on a connection; {self.refusals} refusal(s))")
            notes.append(f"sshd MaxSessions allows {self.max_sessions_seen} channels per connection, so "
                         f"{len(conns)} connections are open; raise MaxSessions in the server's sshd_config "
                         "for fewer")
        if self.startup_drops:
            details["startup_drops"] = f"{self.startup_drops} ({self.last_startup_drop})"
            notes.append(f"the server dropped {self.startup_drops} new connection(s) before its greeting "
                         "(sshd MaxStartups); raise MaxStartups or lower max_parallel_connects")
        return Health(True, "; ".join(notes), details=details)

    async def sandbox(self, task_id: str) -> SSHSandbox:
        if not task_id or "/" in task_id or task_id in (".", "..") or task_id == SESSIONS_DIR or "\x00" in task_id:
            raise BackendError(f"invalid task id {task_id!r}", ErrorKind.INVALID_ARGUMENT)
        conn = await self._connection()
        root = f"{conn.root}/{task_id}"
        if root not in self._dirs:
            code, _, err = await self._run(f"mkdir -p -- {shlex.quote(root)}")
            if code != 0:
                message = err.decode(errors="replace").strip()
                kind = ErrorKind.RESOURCE_EXHAUSTED if "No space" in message else ErrorKind.FAILED_PRECONDITION
                raise BackendError(f"cannot create the task directory {root} on {conn.label}: {message}", kind)
            self._dirs.add(root)
        return SSHSandbox(self, task_id, root)

    async def close(self) -> None:
        self._closed = True
        for conn in (self._conn, *self._extra):
            if conn is not None:
                conn.close()
        self._conn = None
        self._extra = []
        self._pool.shutdown(wait=False, cancel_futures=True)

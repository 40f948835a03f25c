"""The ssh backend: commands on a remote host over one shared paramiko connection.

Why it is built this way:

* **One Transport per host**, shared by every task: a new TCP+SSH handshake costs
  100-200 ms, a channel on a warm transport about 2 ms, and a line through a task's
  long-lived shell on its channel well under a millisecond. ``TCP_NODELAY`` is set
  on the socket (without it each small packet waits ~40 ms for delayed ACKs).
* **Paramiko is blocking; the daemon is asyncio.** Paramiko's transport thread
  reads the socket and fills each channel's buffers; a channel's ``fileno()`` is a
  pipe that becomes readable when data, EOF or close arrive. We watch that pipe with
  ``loop.add_reader`` and drain the buffers without blocking, so output costs no
  thread hop. Only operations that wait for a server reply (connect, opening a
  channel, an exec request) run in a small thread pool of this backend's own.
* **The remote command** is run by sshd through the account's login shell, which
  sshd has already made a session leader (it calls ``setsid()`` before exec). A
  small POSIX wrapper changes directory, records the session in a registry file,
  prints a handshake line carrying ``$$``, then ``exec env -i K=V ... argv``: the
  program keeps that pid (so ``$$`` is the session id), gets exactly ``env``, and
  nothing of the login environment leaks in (sshd usually refuses ``setenv``).
* **Faults**: when the connection drops under a process, its reads raise
  ``BackendError(LOST)`` with the reason; the next ``sandbox()``/``spawn`` opens a
  new connection. Host keys are always verified; credentials refused are
  ``UNAUTHENTICATED``. There is never a fallback to another place.
* **No orphans**: every session leader is recorded under
  ``remote_root/.executor-sessions/<instance>/<pid>`` (with its start time, so a
  recycled pid is never hit); ``start()`` kills what a previous daemon left there.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import errno
import functools
import getpass
import hashlib
import logging
import os
import random
import re
import shlex
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import paramiko
from paramiko.common import MSG_CHANNEL_CLOSE, MSG_CHANNEL_FAILURE, MSG_CHANNEL_REQUEST
from pydantic import Field, field_validator

from .base import (
    Backend,
    BackendError,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    KILL_SUBREAPER_IF_PYTHON,
    KILL_TREE_FUNCTION,
    Sandbox,
    drain,
    reaper_argv,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Output buffered per stream before we stop draining the channel (the SSH window
#: then throttles the remote writer, as a pipe would).
HIGH_WATER = 4 << 20
LOW_WATER = 1 << 20
#: Bytes moved per stream per turn of the event loop, in either direction (keeps the
#: loop's latency for other tasks at a few ms under a bulk transfer).
TURN_BUDGET = 256 << 10
#: The first line a spawned wrapper prints: b"\0EXECUTOR:ok:<pid>\n" or b"\0EXECUTOR:err:<what>\n".
HANDSHAKE = b"\x00EXECUTOR:"
#: Bytes of login-shell chatter tolerated in front of the handshake.
HANDSHAKE_LIMIT = 64 << 10
SESSIONS_DIR = ".executor-sessions"
_ENV_NAME = re.compile(r"^[^=\x00]+$")


class SSHOptions(Options):
    """``backends.<name>`` for ``kind: ssh``."""

    host: str
    port: int = 22
    #: Remote account; default: the daemon's own user name.
    user: str | None = None
    #: Private key file; without it the keys of the ssh-agent at $SSH_AUTH_SOCK are tried.
    key_file: str | None = None
    known_hosts: str = "~/.ssh/known_hosts"
    #: Name of an environment variable of the daemon holding a password (password auth).
    password_env: str | None = None
    #: ``[user@]host[:port]`` of a bastion to tunnel through (same credentials and known_hosts).
    jump_host: str | None = None
    connect_timeout: float = Field(10.0, gt=0)
    #: Where task directories live on the remote host; ``~`` is the account's home.
    remote_root: str = "~/.executor/tasks"
    #: Trust and record a host key not yet in known_hosts (a changed key is always refused).
    accept_new_host_keys: bool = False
    #: Seconds between keepalive pings (answered by the server); 3 unanswered close the
    #: connection (its processes then fail as LOST). Also the TCP keepalive interval.
    keepalive_interval: float = Field(15.0, gt=0)
    #: Connections to the host at most (each holds up to the server's MaxSessions channels: a
    #: task's shell or a background process holds one). Past it, new channels wait for one to close.
    max_connections: int = Field(256, gt=0)
    #: New connections being opened at once (sshd's MaxStartups counts unauthenticated ones: 10 by default).
    max_parallel_connects: int = Field(4, gt=0)
    #: Seconds a new channel waits for room when max_connections are all full before it fails.
    channel_wait: float = Field(60.0, gt=0)

    @field_validator("remote_root")
    @classmethod
    def _root_is_absolute(cls, value: str) -> str:
        if not (value.startswith("/") or value == "~" or value.startswith("~/")):
            raise ValueError("remote_root must be absolute or start with ~/")
        return value.rstrip("/") or "/"

    @field_validator("jump_host")
    @classmethod
    def _jump_parses(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                _, host, port = parse_jump(value, "")
            except ValueError:
                host, port = "", 0
            if not host or not 0 < port < 65536:
                raise ValueError("jump_host must be [user@]host[:port]")
        return value


# ---------------------------------------------------------------------------
# Small pure helpers
# ---------------------------------------------------------------------------


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint of a public key (what ``ssh-keygen -lf`` prints)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def parse_jump(spec: str, default_user: str) -> tuple[str, str, int]:
    """``[user@]host[:port]`` -> (user, host, port)."""
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, 22
    if hostport.startswith("["):
        host, _, rest = hostport[1:].partition("]")
        if rest.startswith(":"):
            port = int(rest[1:])
    elif hostport.count(":") == 1:
        host, _, p = hostport.partition(":")
        port = int(p)
    return user or default_user, host, port


def remote_path_expr(path: str) -> str:
    """A shell word for a remote path in which a leading ``~`` means $HOME."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def build_spawn_command(
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    registry: str,
    forget: Sequence[str] = (),
    *,
    pty: bool = False,
) -> str:
    """The command line sshd hands to the login shell for ``spawn``.

    It forgets registry entries of sessions that ended (batched here so that no
    extra round trip is spent on them), enters ``cwd`` (or reports that it cannot),
    records ``$$`` and its start time in the registry, prints the handshake and
    finally execs ``argv`` with exactly ``env``.
    """
    if not argv:
        raise BackendError("nothing to run: argv is empty", ErrorKind.INVALID_ARGUMENT)
    for key in env:
        if not _ENV_NAME.match(key):
            raise BackendError(f"invalid environment variable name {key!r}", ErrorKind.INVALID_ARGUMENT)
    reg = shlex.quote(registry)
    parts: list[str] = []
    if forget:
        parts.append("rm -f -- " + " ".join(shlex.quote(path) for path in forget) + " 2>/dev/null")
    parts.append(f"cd -- {shlex.quote(cwd)} 2>/dev/null || {{ printf '\\000EXECUTOR:err:cwd\\n'; exit 126; }}")
    # sshd starts each command in a new session (OpenSSH and dropbear call setsid()): check it,
    # since signal_session relies on it. Field 22 of /proc/PID/stat (start time) guards the
    # registry against recycled pids at cleanup.
    parts.append(
        'read -r _s </proc/$$/stat 2>/dev/null && _s=${_s##*) } && set -- $_s && [ "$4" = "$$" ] || '
        "{ printf '\\000EXECUTOR:err:session\\n'; exit 126; }"
    )
    parts.append(f'echo "${{20}}" >{reg}/$$ 2>/dev/null')
    parts.append("printf '\\000EXECUTOR:ok:%s\\n' $$")
    assignments = [shlex.quote(f"{k}={v}") for k, v in env.items()]
    program = [*argv]
    if "=" in program[0]:  # env would take it for an assignment
        program = ["/bin/sh", "-c", 'exec "$@"', "sh", *program]
    # The reaper (the host's python3) forks `env -i ... argv` as the leader of a new session and
    # keeps everything it starts in its tree (setsid included), which signal_session reaches.
    reaper = [shlex.quote(a) for a in reaper_argv(["env", "-i"], pty=pty)]
    parts.append(" ".join(["exec", *reaper, *assignments, *(shlex.quote(a) for a in program)]))
    return "; ".join(parts)


#: Signals the whole tree of the spawn of $1 with signal $2 (base.KILL_TREE_FUNCTION: builtins
#: only, the reaper's descendants, `setsid` included); run by the login shell itself (its `read`
#: is buffered in bash; dash reads byte by byte, ~3x slower). It runs in a session and a tree
#: of its own, so it never signals itself.
SIGNAL_SESSION_SCRIPT = KILL_TREE_FUNCTION + '_extree "$1" "$2"\nexit 0\n'

#: Kills every session recorded in the registry dirs given as arguments whose leader
#: still runs with the recorded start time, then removes those dirs; prints how many
#: sessions it ended. Run by the login shell (builtins only).
CLEANUP_SCRIPT = KILL_TREE_FUNCTION + r"""
n=0
for reg in "$@"; do
  for f in "$reg"/*; do
    [ -f "$f" ] || continue
    sid=${f##*/}
    read -r want <"$f" 2>/dev/null || want=
    if read -r s </proc/"$sid"/stat 2>/dev/null; then
      s=${s##*) }; set -- $s
      if [ "${20}" = "$want" ] && [ "$4" = "$sid" ]; then
        _extree "$sid" 9
        n=$((n+1))
      fi
    fi
    rm -f -- "$f"
  done
  rmdir -- "$reg" 2>/dev/null
done
echo "$n"
"""


# ---------------------------------------------------------------------------
# The connection
# ---------------------------------------------------------------------------


def _handle_channel_request(chan: paramiko.Channel, m: paramiko.Message) -> None:
    """Runs on paramiko's thread for every channel request. Paramiko ignores ``exit-signal``:
    record it as exit status -N. Mark a channel whose exit was reported at all (-1 is both
    "no status" and "killed by SIGHUP"), and wake the asyncio side waiting for it."""
    pos = m.packet.tell()
    kind = m.get_text()
    if kind == "exit-signal":
        m.get_boolean()  # want_reply: always false for exit-signal
        name = m.get_text()
        try:
            number = signal.Signals["SIG" + name].value
        except KeyError:
            number = 255
        with chan.lock:
            chan.exit_status = -number
        chan.executor_exited = True
        chan.status_event.set()
    else:
        m.packet.seek(pos)
        if kind == "exit-status":
            chan.executor_exited = True
        paramiko.Channel._handle_request(chan, m)
    if kind in ("exit-status", "exit-signal"):
        wake = getattr(chan, "executor_wake", None)
        if wake is not None:
            wake()


def _serialized(handler: Callable[[paramiko.Channel, paramiko.Message], None]
                ) -> Callable[[paramiko.Channel, paramiko.Message], None]:
    """Run a transport-thread handler that may send on the channel under the channel's send lock.

    Paramiko builds a message under the channel's lock but sends it after releasing it
    (paramiko issue #1115). When the server closes a channel while our thread sends EOF,
    data or a window adjust on it, our message can leave *after* paramiko's CLOSE reply;
    OpenSSH then sees a packet for a channel it has freed and drops the whole connection,
    every task's shell with it. Every send of ours holds the same lock (``_locked``)."""
    def run(chan: paramiko.Channel, m: paramiko.Message) -> None:
        lock = getattr(chan, "executor_send_lock", None)
        if lock is None:
            handler(chan, m)
        else:
            with lock:
                handler(chan, m)
    return run


def _handle_close(chan: paramiko.Channel, m: paramiko.Message) -> None:
    """The server closed this channel (MSG_CHANNEL_CLOSE). Marked, because paramiko also marks a
    channel closed when the whole connection dies (``Channel._unlink``), *before* the transport
    stops counting as active: the mark is what tells "the remote side ended the channel" from
    "the connection was lost under it" without racing paramiko's thread."""
    chan.executor_server_closed = True
    paramiko.Channel._handle_close(chan, m)
    wake = getattr(chan, "executor_wake", None)
    if wake is not None:
        wake()


class _Transport(paramiko.Transport):
    """A Transport that understands ``exit-signal`` (killed by signal N -> -N), never sends
    on a channel after closing it (see _serialized), marks channels the server closed
    (_handle_close), wakes its channels' readers when the connection dies, and keeps the
    reason it died of and the last channel-open refusal apart.

    Paramiko keeps one ``saved_exception`` per transport, which ``get_exception()`` reads *and
    clears*: a refusal of one channel open could be taken by another thread's open (which then
    raised a bare "Unable to open channel."), and the reason a connection died could be taken by
    whoever looked first. Every assignment is also recorded here, by kind."""

    _channel_handler_table = {**paramiko.Transport._channel_handler_table,
                              MSG_CHANNEL_REQUEST: _serialized(_handle_channel_request),
                              MSG_CHANNEL_CLOSE: _serialized(_handle_close),
                              MSG_CHANNEL_FAILURE: _serialized(paramiko.Channel._request_failed)}

    executor_death: BaseException | None = None  # what the connection died of
    executor_refusal: paramiko.ChannelException | None = None  # the last channel-open failure
    executor_disconnect = ""  # the server's MSG_DISCONNECT text, if it sent one
    _executor_saved: BaseException | None = None

    @property
    def saved_exception(self) -> BaseException | None:  # type: ignore[override]
        return self._executor_saved

    @saved_exception.setter
    def saved_exception(self, exc: BaseException | None) -> None:
        self._executor_saved = exc
        if isinstance(exc, paramiko.ChannelException):
            self.executor_refusal = exc
        elif exc is not None and self.executor_death is None:
            self.executor_death = exc

    def _parse_disconnect(self, m: paramiko.Message) -> None:
        pos = m.packet.tell()
        code = m.get_int()
        text = m.get_text()
        self.executor_disconnect = f"the server disconnected (code {code}): {text}" if text else \
            f"the server disconnected (code {code})"
        m.packet.seek(pos)
        super()._parse_disconnect(m)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.executor_wakes: dict[int, Callable[[], None]] = {}  # a reader of ours per open channel
        self.executor_wakes_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def run(self) -> None:
        """Paramiko's loop; when it ends (the connection is gone; paramiko has marked every channel
        closed by then), wake every reader of ours: one paused after EOF waits for an exit status
        that will now never come."""
        try:
            super().run()
        finally:
            with self.executor_wakes_lock:
                wakes = list(self.executor_wakes.values())
            for wake in wakes:
                wake()


class _Refused(BackendError):
    """The server refused one more channel on a connection (MaxSessions)."""


class _OpenLost(BackendError):
    """The connection died while a channel was being opened (nothing ran: safe to retry)."""


class _Dropped(BackendError):
    """The server closed a new connection before its greeting (MaxStartups)."""


class _Connection:
    """One authenticated transport (maybe tunnelled through a jump host)."""

    def __init__(self, transport: paramiko.Transport, jump: paramiko.Transport | None, label: str) -> None:
        self.transport = transport
        self.jump = jump
        self.label = label
        self.root = ""  # remote_root, resolved to an absolute path
        self.registry = ""  # this connection's session registry dir on the remote host
        self.closing = False
        self.close_reason = ""
        self.pinger: asyncio.Task[None] | None = None  # the keepalive task
        self.ping_lock = asyncio.Lock()  # paramiko runs one global request at a time
        self.open_channels = 0
        #: How many of our channels the server held when it refused one more (MaxSessions).
        self.limit: int | None = None
        #: Channel opens wait here, one in flight per connection: a refusal is then surely the
        #: answer to ours, and the server's MaxSessions is learnt exactly, with one round trip.
        self.open_lock = asyncio.Lock()
        #: Set as soon as one of its channels was seen lost with it (paramiko marks the channels
        #: closed a moment before the transport stops counting as active).
        self.lost = False
        self.opened = 0  # channels opened on it, ever

    def has_room(self) -> bool:
        return self.alive() and (self.limit is None or self.open_channels < self.limit)

    def alive(self) -> bool:
        return not self.lost and not self.closing and self.transport.is_active()

    def loss_reason(self) -> str:
        if self.close_reason:
            return self.close_reason
        t = self.transport
        exc = getattr(t, "executor_death", None)
        disconnect = getattr(t, "executor_disconnect", "")
        if disconnect:
            return disconnect
        if exc is None or isinstance(exc, EOFError):
            return "the server closed the connection (sshd was stopped or restarted, or its process for this connection was killed)"
        if isinstance(exc, ConnectionResetError):
            return "the connection was reset (sshd or its process for this connection was killed, or the network dropped it)"
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__

    def lost_error(self, what: str = "the command") -> BackendError:
        return BackendError(
            f"the ssh connection to {self.label} was lost under {what}: {self.loss_reason()}; "
            "the next command reconnects", ErrorKind.LOST)

    def close(self, reason: str = "the backend closed the connection") -> None:
        if not self.closing:
            self.closing = True
            if self.transport.is_active():  # else keep the reason the transport died of
                self.close_reason = reason
        if self.pinger is not None:
            self.pinger.cancel()
        self.transport.close()
        if self.jump is not None:
            self.jump.close()


def _tune_socket(sock: socket.socket, keepalive: float) -> None:
    """TCP_NODELAY (small packets must not wait for delayed ACKs) and TCP keepalives,
    so a dead network is noticed even when no SSH traffic flows."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    idle = max(1, int(keepalive))
    for opt, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", idle), ("TCP_KEEPCNT", 3),
                       ("TCP_USER_TIMEOUT", idle * 4 * 1000)):
        if hasattr(socket, opt):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, opt), value)


class _Connector:
    """Opens and authenticates connections (blocking; runs in the backend's pool)."""

    def __init__(self, options: SSHOptions) -> None:
        self.o = options
        self.user = options.user or getpass.getuser()
        self.known_hosts = Path(options.known_hosts).expanduser()

    # -- host keys ---------------------------------------------------------

    def _load_known(self) -> paramiko.HostKeys:
        keys = paramiko.HostKeys()
        if self.known_hosts.exists():
            try:
                keys.load(str(self.known_hosts))
            except (OSError, paramiko.SSHException) as exc:
                raise BackendError(f"ssh: cannot read known_hosts {self.known_hosts}: {exc}",
                                   ErrorKind.FAILED_PRECONDITION) from exc
        return keys

    @staticmethod
    def _allowed_types(known: Mapping[str, paramiko.PKey]) -> list[str]:
        types: list[str] = []
        for name in known:
            types += ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if name == "ssh-rsa" else [name]
        return types

    def _check_host_key(self, t: paramiko.Transport, name: str, known: Mapping[str, paramiko.PKey] | None) -> None:
        key = t.get_remote_server_key()
        got = f"{key.get_name()} {fingerprint(key)}"
        if known:
            expected = known.get(key.get_name())
            if expected is not None and expected == key:
                return
            want = ", ".join(f"{k} {fingerprint(v)}" for k, v in known.items())
            raise BackendError(
                f"ssh: the host key of {name} has CHANGED: the server presented {got}, but "
                f"{self.known_hosts} has {want}. Someone may be intercepting the connection, or the "
                "host was reinstalled: verify the new fingerprint out of band, then fix known_hosts.",
                ErrorKind.FAILED_PRECONDITION)
        if not self.o.accept_new_host_keys:
            raise BackendError(
                f"ssh: {name} is not in known_hosts ({self.known_hosts}); it presented {got}. Verify that "
                "fingerprint, then add the key (e.g. `ssh-keyscan -p PORT HOST >> known_hosts`) or set "
                "accept_new_host_keys: true.", ErrorKind.FAILED_PRECONDITION)
        log.warning("ssh: trusting the new host key of %s: %s (accept_new_host_keys)", name, got)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as f:
            f.write(f"{name} {key.get_name()} {key.get_base64()}\n")

    # -- connecting --------------------------------------------------------

    def _socket(self, host: str, port: int) -> socket.socket:
        try:
            sock = socket.create_connection((host, port), timeout=self.o.connect_timeout)
        except socket.gaierror as exc:
            raise BackendError(f"ssh: cannot resolve {host}: {exc.strerror}", ErrorKind.UNAVAILABLE) from exc
        except TimeoutError as exc:
            raise BackendError(f"ssh: connecting to {host}:{port} timed out after {self.o.connect_timeout}s",
                               ErrorKind.UNAVAILABLE) from exc
        except OSError as exc:
            hint = " (is sshd running there?)" if exc.errno == errno.ECONNREFUSED else ""
            raise BackendError(f"ssh: cannot connect to {host}:{port}: {exc.strerror or exc}{hint}",
                               ErrorKind.UNAVAILABLE) from exc
        _tune_socket(sock, self.o.keepalive_interval)
        return sock

    def _handshake(self, sock: Any, user: str, host: str, port: int) -> paramiko.Transport:
        name = known_hosts_name(host, port)
        known = self._load_known().lookup(name)
        t = _Transport(sock)
        if known:
            supported = set(t.get_security_options().key_types)
            allowed = [k for k in self._allowed_types(known) if k in supported]
            if allowed:
                t.get_security_options().key_types = allowed
        try:
            t.start_client(timeout=self.o.connect_timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            t.close()
            death = t.executor_death
            text = str(exc).lower()
            if ("banner" in text and "timed out" not in text) or isinstance(death, (EOFError, ConnectionResetError)):
                raise _Dropped(f"ssh: {name} closed a new connection before its greeting (sshd's MaxStartups: too "
                               "many unauthenticated connections to it at once; or it is not an SSH server)",
                               ErrorKind.UNAVAILABLE) from exc
            if not isinstance(exc, paramiko.SSHException):
                raise BackendError(f"ssh: handshake with {name} failed: {exc}", ErrorKind.UNAVAILABLE) from exc
            if known and "host key" in str(exc).lower():
                raise BackendError(
                    f"ssh: the host key of {name} has CHANGED: known_hosts ({self.known_hosts}) has "
                    f"{', '.join(f'{k} {fingerprint(v)}' for k, v in known.items())}, but the server offers "
                    "none of those key types. Verify the host out of band, then fix known_hosts.",
                    ErrorKind.FAILED_PRECONDITION) from exc
            raise BackendError(f"ssh: handshake with {name} failed: {exc}", ErrorKind.UNAVAILABLE) from exc
        try:
            self._check_host_key(t, name, known)
            self._authenticate(t, user, host, port)
        except BaseException:
            t.close()
            raise
        return t

    def _authenticate(self, t: paramiko.Transport, user: str, host: str, port: int) -> None:
        where = f"{user}@{host}:{port}"
        tried: list[str] = []
        try:
            for label, key in self._keys():
                tried.append(label)
                try:
                    t.auth_publickey(user, key)
                except paramiko.AuthenticationException:
                    continue
                if t.is_authenticated():
                    return
            if self.o.password_env:
                password = os.environ.get(self.o.password_env)
                if password is None:
                    raise BackendError(f"ssh: password_env names ${self.o.password_env}, which is not set "
                                       "in the daemon's environment", ErrorKind.FAILED_PRECONDITION)
                tried.append("a password")
                try:
                    t.auth_password(user, password)
                except paramiko.AuthenticationException:
                    pass
                if t.is_authenticated():
                    return
        except paramiko.SSHException as exc:
            if not isinstance(exc, paramiko.AuthenticationException):
                raise BackendError(f"ssh: authentication with {where} failed: {exc}", ErrorKind.UNAVAILABLE) from exc
        if not tried:
            raise BackendError("ssh: no credentials: set key_file, or password_env, or run an ssh-agent "
                               "(SSH_AUTH_SOCK)", ErrorKind.FAILED_PRECONDITION)
        raise BackendError(
            f"ssh: {where} refused {' and '.join(tried)}: check the user name and that the public key is in "
            "that account's authorized_keys (or the password)", ErrorKind.UNAUTHENTICATED)

    def _keys(self) -> list[tuple[str, paramiko.PKey]]:
        if self.o.key_file:
            path = Path(self.o.key_file).expanduser()
            try:
                return [(f"the key {path}", paramiko.PKey.from_path(path))]
            except paramiko.PasswordRequiredException as exc:
                raise BackendError(f"ssh: the key {path} is encrypted: load it into an ssh-agent and leave "
                                   "key_file unset", ErrorKind.FAILED_PRECONDITION) from exc
            except Exception as exc:  # OSError, ValueError, SSHException, UnknownKeyType, ...
                raise BackendError(f"ssh: cannot load the key {path}: {exc}", ErrorKind.FAILED_PRECONDITION) from exc
        if os.environ.get("SSH_AUTH_SOCK"):
            try:
                keys = paramiko.Agent().get_keys()
            except paramiko.SSHException as exc:
                raise BackendError(f"ssh: the ssh-agent does not answer: {exc}", ErrorKind.UNAVAILABLE) from exc
            return [(f"agent key {fingerprint(k)}", k) for k in keys]
        return []

    def connect(self) -> _Connection:
        o = self.o
        jump: paramiko.Transport | None = None
        try:
            if o.jump_host:
                juser, jhost, jport = parse_jump(o.jump_host, self.user)
                jump = self._handshake(self._socket(jhost, jport), juser, jhost, jport)
                try:
                    sock: Any = jump.open_channel("direct-tcpip", (o.host, o.port), ("127.0.0.1", 0),
                                                  timeout=o.connect_timeout)
                except paramiko.SSHException as exc:
                    raise BackendError(f"ssh: the jump host {jhost} cannot reach {o.host}:{o.port}: {exc}",
                                       ErrorKind.UNAVAILABLE) from exc
            else:
                sock = self._socket(o.host, o.port)
            transport = self._handshake(sock, self.user, o.host, o.port)
        except BaseException:
            if jump is not None:
                jump.close()
            raise
        return _Connection(transport, jump, f"{self.user}@{o.host}:{o.port}")


# ---------------------------------------------------------------------------
# Channels bridged to asyncio
# ---------------------------------------------------------------------------


class _Stream:
    """One direction of output of a channel, read with ``await read()`` (b"" at EOF)."""

    def __init__(self, owner: "_ChannelProcess") -> None:
        self._owner = owner
        self._buf = bytearray()
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    def __len__(self) -> int:
        return len(self._buf)

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def feed(self, data: bytes) -> None:
        self._buf += data
        self._wake()

    def feed_eof(self, error: BaseException | None = None) -> None:
        if not self._eof:
            self._eof = True
            self._error = error
            self._wake()

    async def read(self) -> bytes:
        while not self._buf:
            if self._eof:
                if self._error is not None:
                    raise self._error
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = bytes(self._buf)
        self._buf.clear()
        self._owner.resume()
        return data


class _ChannelProcess(Process):
    """A remote process on its own channel; see the module docstring for the bridging."""

    def __init__(self, backend: "SSHBackend", conn: _Connection, chan: paramiko.Channel, *,
                 pty: bool, handshake: bool) -> None:
        self._backend = backend
        self._conn = conn
        self._chan = chan
        self._send_lock: threading.RLock = chan.executor_send_lock
        self._pty = pty
        self._loop = asyncio.get_running_loop()
        self.pid = 0
        self._forgot = False
        self.stdout = _Stream(self)
        self.stderr = None if pty else _Stream(self)
        self._handshake: asyncio.Future[None] | None = self._loop.create_future() if handshake else None
        self._head = bytearray()  # output before the handshake line
        self._fd = chan.fileno()
        chan.settimeout(0.0)  # recv/send never block the loop
        self._watching = False
        self._done = False
        self._finished: asyncio.Future[None] = self._loop.create_future()
        self._slot = True  # counts in conn.open_channels until the channel is done
        self._status: asyncio.Future[None] = self._loop.create_future()
        self._aborted = False  # we closed the channel ourselves
        self._awaiting_status = False  # EOF seen: the streams end when the exit status (or a loss) does
        chan.executor_wake = self._wake_from_thread
        transport = conn.transport
        with transport.executor_wakes_lock:
            transport.executor_wakes[id(self)] = self._wake_from_thread
        self._watch()
        self._pump()

    # -- the reader --------------------------------------------------------

    def _watch(self) -> None:
        if not self._watching and not self._done:
            self._watching = True
            self._loop.add_reader(self._fd, self._pump)

    def _unwatch(self) -> None:
        if self._watching:
            self._watching = False
            self._loop.remove_reader(self._fd)

    def resume(self) -> None:
        """A reader caught up: drain again if we had paused for it."""
        if not self._watching and not self._done and self._below(LOW_WATER):
            self._watch()
            self._pump()

    def _below(self, mark: int) -> bool:
        return len(self.stdout) < mark and (self.stderr is None or len(self.stderr) < mark)

    def _pump(self) -> None:
        """Drain what paramiko buffered, at most TURN_BUDGET per stream per call so that a
        fast producer cannot stall the loop (the pipe stays readable: we are called again)."""
        chan = self._chan
        more = False
        try:
            budget = TURN_BUDGET
            while len(self.stdout) < HIGH_WATER and chan.recv_ready():
                if budget <= 0:
                    more = True
                    break
                data = self._locked(chan.recv, 1 << 16)  # recv may send a window adjust
                budget -= len(data)
                self._on_stdout(data)
            budget = TURN_BUDGET
            while (self.stderr is None or len(self.stderr) < HIGH_WATER) and chan.recv_stderr_ready():
                if budget <= 0:
                    more = True
                    break
                data = self._locked(chan.recv_stderr, 1 << 16)
                budget -= len(data)
                if self.stderr is not None:  # a pty has no stderr: drop what a server sends anyway
                    self.stderr.feed(data)
        except socket.timeout:
            return
        if more:
            return
        if chan.recv_ready() or chan.recv_stderr_ready():
            self._unwatch()  # above the high-water mark: paused until a reader catches up (resume)
            return
        if chan.eof_received or chan.closed:
            self._unwatch()  # paramiko's pipe stays readable from now on
            self._settle()

    def _settle(self) -> None:
        """All output is in. The streams end once it is known how the channel ended: the exit
        status arrived (or the channel is closed) -> clean EOF; the connection was lost first ->
        LOST. Until then an EOF is held back (sshd sends the EOF and the exit status a moment
        apart; a connection dying in between must not look like a normal end)."""
        if self._done:
            return
        chan = self._chan
        if chan.closed or getattr(chan, "executor_exited", False):
            self._finish()
        else:
            self._awaiting_status = True  # woken by exit-status/-signal, CLOSE or the transport's end

    def _on_stdout(self, data: bytes) -> None:
        if self._handshake is None or self._handshake.done():
            self.stdout.feed(data)
            return
        self._head += data
        start = self._head.find(HANDSHAKE)
        end = self._head.find(b"\n", start) if start >= 0 else -1
        if end < 0:
            if len(self._head) > HANDSHAKE_LIMIT:
                self._handshake.set_exception(BackendError(
                    "the remote login shell printed too much before the command started (check its rc files)",
                    ErrorKind.FAILED_PRECONDITION))
            return
        line = bytes(self._head[start + len(HANDSHAKE):end]).rstrip(b"\r").decode(errors="replace")
        rest = bytes(self._head[end + 1:])
        if start:
            log.debug("ssh: dropped %d bytes of login-shell output before the command", start)
        self._head.clear()
        status, _, value = line.partition(":")
        if status == "ok" and value.isdigit():
            self.pid = int(value)
            self._handshake.set_result(None)
            if rest:
                self.stdout.feed(rest)
        else:
            self._handshake.set_exception(BackendError(f"the remote wrapper reported {line!r}",
                                                       ErrorKind.FAILED_PRECONDITION))

    def _locked(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a paramiko method that may send on this channel, under its send lock (see
        _serialized). Held for microseconds; it can stall paramiko's thread only if that
        send itself waits for a key re-exchange to finish (paramiko gives up after 30 s)."""
        with self._send_lock:
            return fn(*args)

    def _wake_from_thread(self) -> None:
        try:
            self._loop.call_soon_threadsafe(self._on_status)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _on_status(self) -> None:
        if not self._status.done():
            self._status.set_result(None)
        if self._awaiting_status:
            self._settle()

    def _channel_lost(self) -> bool:
        """The channel was closed under us by the connection dying (not by the server's CLOSE,
        not by us)."""
        chan = self._chan
        return chan.closed and not getattr(chan, "executor_server_closed", False) and not self._aborted

    def _lost_error(self, what: str = "the command") -> BackendError:
        self._conn.lost = True  # do not wait for paramiko to mark the transport inactive
        return self._conn.lost_error(what)

    def _release_slot(self) -> None:
        if self._slot:
            self._slot = False
            self._conn.open_channels -= 1
            with self._conn.transport.executor_wakes_lock:
                self._conn.transport.executor_wakes.pop(id(self), None)
            self._backend._room_changed()

    def _finish(self) -> None:
        """EOF or close: end both streams, as EOF or as LOST."""
        self._unwatch()
        self._done = True
        self._awaiting_status = False
        self._release_slot()
        chan = self._chan
        exited = getattr(chan, "executor_exited", False)
        error: BackendError | None = None
        if self._channel_lost():
            if not (exited and chan.eof_received):  # else the process ended and all its output is in
                error = self._lost_error()
        elif chan.closed and not exited:
            error = BackendError(f"the ssh server {self._conn.label} closed the channel without reporting how "
                                 "the command ended (no exit status)", ErrorKind.LOST)
        if self._handshake is not None and not self._handshake.done():
            self._handshake.set_exception(error or BackendError(
                "the remote shell ended before starting the command", ErrorKind.FAILED_PRECONDITION))
        self.stdout.feed_eof(error)
        if self.stderr is not None:
            self.stderr.feed_eof(error)
        if not self._finished.done():
            self._finished.set_result(None)
        if chan.closed:
            self._on_status()

    async def started(self, timeout: float) -> None:
        """Wait for the wrapper's handshake line (pid known, cwd entered)."""
        assert self._handshake is not None
        try:
            await asyncio.wait_for(asyncio.shield(self._handshake), timeout)
        except TimeoutError as exc:
            raise BackendError(f"the remote command did not start within {timeout}s", ErrorKind.UNAVAILABLE) from exc

    # -- Process API -------------------------------------------------------

    async def write(self, data: bytes) -> None:
        view = memoryview(data)
        delay = 0.0002
        sent = 0
        while view:
            chan = self._chan
            if chan.closed or chan.eof_sent:
                if self._channel_lost():
                    raise self._lost_error("a write")
                raise BackendError("stdin is closed", ErrorKind.FAILED_PRECONDITION)
            try:
                n = self._locked(chan.send, view[:1 << 15])
            except socket.timeout:
                # The remote window is full: the program is not reading. Poll until the
                # window opens (paramiko offers no wakeup we could wait on).
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
                continue
            except (OSError, EOFError, paramiko.SSHException) as exc:
                if self._channel_lost() or not self._conn.alive():
                    raise self._lost_error("a write") from exc
                raise BackendError("stdin is closed: the process has ended", ErrorKind.FAILED_PRECONDITION) from exc
            view = view[n:]
            delay = 0.0002
            sent += n
            if sent >= TURN_BUDGET and view:
                sent = 0
                await asyncio.sleep(0)  # let the rest of the daemon run during a bulk write

    async def close_stdin(self) -> None:
        if not self._pty and not self._chan.closed:
            try:
                self._locked(self._chan.shutdown_write)
            except (OSError, EOFError, paramiko.SSHException):
                pass

    async def resize(self, size: PtySize) -> None:
        if not self._pty:
            raise BackendError("this process has no terminal to resize", ErrorKind.FAILED_PRECONDITION)
        try:
            self._locked(self._chan.resize_pty, size.cols, size.rows)
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if self._channel_lost() or not self._conn.alive():
                raise self._lost_error("a resize") from exc
            raise BackendError("the terminal is closed: the process has ended", ErrorKind.FAILED_PRECONDITION) from exc

    async def wait(self) -> int:
        """The exit status: woken by paramiko's thread when exit-status/exit-signal arrives,
        or by the pump when the channel closes; a once-a-second check covers a close that
        nothing reported (a connection dying after the output ended)."""
        chan = self._chan
        while not chan.exit_status_ready():  # set by exit-status, exit-signal or close
            try:
                await asyncio.wait_for(asyncio.shield(self._status), 1.0)
            except TimeoutError:
                pass
        if not getattr(chan, "executor_exited", False):
            if self._channel_lost():
                raise self._lost_error()
            raise BackendError(f"the ssh channel on {self._conn.label} closed without an exit status",
                               ErrorKind.LOST)
        if self.pid and not self._forgot:
            self._forgot = True
            self._backend._forget(f"{self._conn.registry}/{self.pid}")
        return chan.exit_status

    async def detach(self) -> None:
        self.abort()

    def abort(self) -> None:
        self._aborted = True
        self._unwatch()
        self._done = True
        self._awaiting_status = False
        self._release_slot()
        self._locked(self._chan.close)


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
        """Signal the session from a plain exec channel (no registry, no handshake)."""
        await self._backend._run(f"set -- {int(pid)} {int(sig)};{SIGNAL_SESSION_SCRIPT}")

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

    def __init__(self, name: str, options: SSHOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.options: SSHOptions = options
        self._connector = _Connector(options)
        # Connects (max_parallel_connects at a time) and open/exec requests wait here for the server.
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
        self._instance = self._instance_id(state_dir)
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

    @staticmethod
    def _instance_id(state_dir: Path) -> str:
        """A stable id of this daemon's backend, naming its session registry on the remote host
        (two daemons sharing an account must not kill each other's sessions)."""
        path = state_dir / "instance-id"
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            state_dir.mkdir(parents=True, exist_ok=True)
            value = uuid.uuid4().hex[:16]
            path.write_text(value + "\n")
            return value

    # -- capabilities and policy ------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(pty=True, resize=True, signals=True, stdin=True, background=True,
                            persistent_shell=True, file_transfer=True, network_policy="host", streaming=True)

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
        return await asyncio.get_running_loop().run_in_executor(self._pool, functools.partial(fn, *args))

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
        delay = 0.05
        for attempt in range(1, 7):
            try:
                conn = await self._blocking(self._connector.connect)
                break
            except _Dropped as exc:
                self.startup_drops += 1
                self.last_startup_drop = exc.message
                if attempt == 6:
                    raise BackendError(f"{exc.message} ({attempt} attempts)", ErrorKind.UNAVAILABLE) from exc
                log.info("ssh backend %s: %s; retrying in %.2f s", self.name, exc.message, delay)
                await asyncio.sleep(delay * (1 + random.random()))
                delay *= 2
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
        base = f"{root}/{SESSIONS_DIR}/{self._instance}"
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
        conn.registry = f"{conn.root}/{SESSIONS_DIR}/{self._instance}/c{serial}"
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
                detail = bytes(proc.stderr._buf).decode(errors="replace").strip()
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
        for conn in (self._conn, *self._extra):
            if conn is not None:
                conn.close()
        self._conn = None
        self._extra = []
        self._pool.shutdown(wait=False, cancel_futures=True)


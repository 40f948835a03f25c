"""One SSH connection: paramiko's transport with the channel-request handling the backend needs, and how it is opened."""

from __future__ import annotations

import asyncio
import errno
import getpass
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import paramiko
from paramiko.common import MSG_CHANNEL_CLOSE, MSG_CHANNEL_FAILURE, MSG_CHANNEL_REQUEST

from ..base import BackendError, ErrorKind
from .commands import fingerprint, known_hosts_name, parse_jump
from .options import SSHOptions

log = logging.getLogger(__name__.rpartition('.')[0])


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

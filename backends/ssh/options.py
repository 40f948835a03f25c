"""The ssh backend's options and the limits it works within."""

from __future__ import annotations

from pydantic import Field, field_validator

from ..base import Options
from .commands import parse_jump


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
#: Connects tried when the server drops new connections before its greeting (MaxStartups).
CONNECT_ATTEMPTS = 6


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

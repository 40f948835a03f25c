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

The package: ``options`` (SSHOptions and the limits), ``commands`` (what runs on the remote host:
the spawn wrapper, the tree kill, the registry cleanup; pure helpers), ``connection`` (paramiko's
transport and how a connection is opened), ``process`` (a channel bridged to asyncio),
``backend`` (the sandbox, the connection pool, recovery and health).
"""

from __future__ import annotations

from .backend import SSHBackend, SSHSandbox
from .commands import (
    CLEANUP_SCRIPT,
    SIGNAL_SESSION_SCRIPT,
    build_spawn_command,
    fingerprint,
    known_hosts_name,
    parse_jump,
    remote_path_expr,
)
from .options import (
    CONNECT_ATTEMPTS,
    HANDSHAKE,
    HANDSHAKE_LIMIT,
    HIGH_WATER,
    LOW_WATER,
    SESSIONS_DIR,
    TURN_BUDGET,
    SSHOptions,
)

__all__ = ["SSHBackend", "SSHSandbox", "SSHOptions", "CLEANUP_SCRIPT", "SIGNAL_SESSION_SCRIPT", "build_spawn_command",
           "fingerprint", "known_hosts_name", "parse_jump", "remote_path_expr", "CONNECT_ATTEMPTS", "HANDSHAKE",
           "HANDSHAKE_LIMIT", "HIGH_WATER", "LOW_WATER", "SESSIONS_DIR", "TURN_BUDGET"]

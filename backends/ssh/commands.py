"""What runs on the remote host: the spawn wrapper, the tree kill and the registry cleanup, and small pure helpers."""

from __future__ import annotations

import base64
import hashlib
import re
import shlex
from collections.abc import Mapping, Sequence

import paramiko

from .._shared.kill import CLEANUP_SCRIPT as CLEANUP_SCRIPT_SHARED
from ..base import KILL_TREE_FUNCTION, KILL_TREE_SCRIPT, BackendError, ErrorKind, reaper_argv


_ENV_NAME = re.compile(r"^[^=\x00]+$")

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


#: Signals the whole tree of the spawn of $1 with signal $2 (``_shared.kill``); run by the login
#: shell itself (its `read` is buffered in bash; dash reads byte by byte, ~3x slower). It runs in a
#: session and a tree of its own, so it never signals itself.
SIGNAL_SESSION_SCRIPT = KILL_TREE_SCRIPT

#: The walk as functions (``_extrees SIG PID...``), for a helper that signals many sessions at once.
SIGNAL_SESSIONS_FUNCTION = KILL_TREE_FUNCTION

#: ``set -- DIR...`` then this: kills every session recorded in those registry dirs whose leader
#: still runs with the recorded start time (its whole tree), removes the dirs, prints how many
#: sessions it ended (``_shared.kill.CLEANUP_SCRIPT``).
CLEANUP_SCRIPT = CLEANUP_SCRIPT_SHARED

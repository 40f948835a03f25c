"""The docker backend's options, names and the one map from engine errors to BackendError."""

from __future__ import annotations


import errno
import re
import tarfile
from typing import Any

from pydantic import field_validator

from ..base import (
    BackendError,
    ErrorKind,
    Options,
    KILL_TREE_FUNCTION,
)




LABEL_DAEMON = "io.executor.daemon"
LABEL_BACKEND = "io.executor.backend"
LABEL_SCOPE = "io.executor.scope"
LABEL_CONFIG = "io.executor.config"
SHARED = "shared"
#: The sandbox name of pre-started shells (not a valid task id: no task can have it).
POOL_TASK = ".pool"
#: Bumped when the way containers are created changes: existing ones are then replaced.
CONTAINER_RECIPE = 2

_TASK_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_USER = re.compile(r"^\d+(:\d+)?$")

#: Ends every process a previous daemon left in the container: everything outside the
#: container's own init session (sid 1) except this script's own session.
CLEANUP_SCRIPT = r"""
me=$$; n=0
for d in /proc/[0-9]*; do
  pid=${d#/proc/}
  [ "$pid" = 1 ] && continue
  { read -r stat < "$d/stat"; } 2>/dev/null || continue
  rest=${stat##*) }
  set -- $rest
  [ "$4" = 1 ] && continue
  [ "$4" = "$me" ] && continue
  kill -9 "$pid" 2>/dev/null && n=$((n+1))
done
echo "$n"
"""

#: A long-lived helper per container: reads "SEQ SIG PID..." lines, delivers SIG to the whole tree
#: of each PID's spawn (base.KILL_TREE_FUNCTION: the reaper's descendants, `setsid` included; the
#: sessions signalled together, e.g. by a shutdown, in one walk), then answers "done SEQ". It makes
#: signal_session one round trip on an open exec socket instead of a new exec (~50-100 ms), with
#: shell builtins only (no fork per request).
KILLER_SCRIPT = KILL_TREE_FUNCTION + r"""
while read -r seq sig pids; do
  _extrees "$sig" $pids
  echo "done $seq"
done
"""

#: Sets the terminal size before exec'ing the program: Engine API 1.41 has no size on exec
#: create, and a resize after start would race a program that reads its size at once.
PTY_WRAPPER = 'stty rows "$1" cols "$2" 2>/dev/null; shift 2; exec "$@"'

#: Creates the task's directory (as the sandbox user) and enters ``cwd`` before exec'ing the
#: command: a new task's first spawn needs no separate archive call (on Engine 20.10 an archive
#: upload costs as much as an exec, and the engine runs those one after another).
MKDIR_WRAPPER = 'mkdir -p -- "$1" && cd -- "$2" && shift 2 && exec "$@"'

#: Processes a task needs at least in the shared container: its shell and the shell's reaper.
PROCS_PER_TASK = 2
#: Processes of the container itself: docker-init, the idle command, the signal helper, the spawner.
PROCS_PER_CONTAINER = 4
#: Processes a start holds for a moment beyond what stays (runc's exec bootstrap stages, the
#: task directory's mkdir): kept free for each of the max_parallel_starts starts in flight.
PROCS_PER_START = 5


class DockerOptions(Options):
    """``backends.<name>`` options of ``kind: docker``. Defaults are the hardened policy."""

    #: The image; built locally by ``make sandbox-image``.
    image: str = "executor-sandbox:latest"
    #: Pull the image when it is missing. Off: no registry is contacted at run time.
    pull: bool = False
    #: Engine address (``unix:///var/run/docker.sock``, ``tcp://host:2375``); default: DOCKER_HOST.
    docker_host: str | None = None
    #: Seconds for Engine API control calls.
    api_timeout: float = 60.0
    #: One container per task instead of one for the whole daemon.
    per_task: bool = False
    #: Numeric ``UID:GID`` every process runs as (the container's idle init is a capless root).
    user: str = "1000:1000"
    read_only: bool = True
    #: tmpfs mounts, path -> mount options.
    tmpfs: dict[str, str] = {"/tmp": "rw,nosuid,nodev,size=512m", "/run": "rw,nosuid,nodev,size=16m"}
    cap_drop_all: bool = True
    cap_add: list[str] = []
    no_new_privileges: bool = True
    #: ``None`` keeps docker's default seccomp profile (a path to a profile JSON replaces it).
    seccomp_profile: str | None = None
    pids_limit: int | None = 512
    mem_limit: str | None = "2g"
    #: CPUs (fractional), sent as NanoCpus.
    cpus: float | None = 2.0
    #: ``none``, ``bridge``, ``host`` or a named network.
    network: str = "none"
    #: Extra bind mounts ``HOST:CONTAINER[:ro]``; none by default (no Docker socket, no host paths).
    mounts: list[str] = []
    #: Where the workspace volume is mounted; each task gets ``<workspace>/<task_id>``.
    workspace: str = "/workspace"
    #: Run docker-init (tini) as pid 1 so orphans are reaped and do not fill the pids limit.
    init: bool = True
    #: The container's main process; it only has to stay alive.
    command: list[str] = ["sleep", "infinity"]
    #: The program used to give each process exactly its environment.
    env_program: str = "/usr/bin/env"
    #: Extra labels on the containers and volumes.
    labels: dict[str, str] = {}
    #: At most this many process starts (exec create + start) in flight at once; the rest queue.
    #: The engine runs execs one after another anyway (~10-15/s on a 2-core host, however many
    #: are in flight): more parallelism only crowds out the control calls (wait, resize, files).
    max_parallel_starts: int = 4
    #: Start task processes through one long-lived spawner in the container (one docker exec per
    #: container; a process start is then a fork there, not an engine call). Off, or when the image
    #: has no python3: one docker exec per process.
    spawner: bool = True
    #: Pre-started task shells kept ready in the shared container (refilled in the background;
    #: each is handed to one new task, with its own directory and environment): a new task's first
    #: command then costs no shell start. 0 turns it off; ignored with ``per_task``.
    warm_shells: int = 2
    #: Remove this daemon's containers at an orderly shutdown (volumes, so files, are kept).
    #: For ephemeral daemons such as test runs; a crashed daemon's container still stays.
    remove_on_close: bool = False

    @field_validator("user")
    @classmethod
    def _numeric_user(cls, value: str) -> str:
        if not _USER.match(value):
            raise ValueError("user must be numeric UID or UID:GID (archive ownership is set from it)")
        return value

    @field_validator("max_parallel_starts")
    @classmethod
    def _positive_starts(cls, value: int) -> int:
        if value < 1:
            raise ValueError("max_parallel_starts must be at least 1")
        return value

    @field_validator("warm_shells")
    @classmethod
    def _pool_size(cls, value: int) -> int:
        if not 0 <= value <= 64:
            raise ValueError("warm_shells must be between 0 and 64")
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        if not value:
            raise ValueError("network must be none, bridge, host or a network name")
        return value

    @property
    def uid_gid(self) -> tuple[int, int]:
        uid, _, gid = self.user.partition(":")
        return int(uid), int(gid or uid)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _docker_error(exc: BaseException, what: str) -> BackendError:
    """Turn a docker-py / requests failure into a BackendError a person can act on."""
    import docker.errors
    import requests

    if isinstance(exc, BackendError):
        return exc
    if isinstance(exc, tarfile.TarError):
        return BackendError(f"{what}: the upload is not a valid tar stream: {exc}", ErrorKind.INVALID_ARGUMENT)
    if isinstance(exc, docker.errors.ImageNotFound):
        return BackendError(f"{what}: image not found in the Docker engine ({_explain(exc)}); build it with "
                            "`make sandbox-image` or set `pull: true`", ErrorKind.FAILED_PRECONDITION)
    if isinstance(exc, docker.errors.NotFound):
        return BackendError(f"{what}: {_explain(exc)}", ErrorKind.NOT_FOUND)
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code or 500
        kind = ErrorKind.FAILED_PRECONDITION if code in (400, 409) else (
            ErrorKind.PERMISSION_DENIED if code == 403 else ErrorKind.UNAVAILABLE)
        return BackendError(f"{what}: Docker engine said {code}: {_explain(exc)}", kind)
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return BackendError(f"{what}: {exc}", ErrorKind.RESOURCE_EXHAUSTED)
    if isinstance(exc, OSError) and exc.filename is not None and not isinstance(exc, ConnectionError):
        # a file of the daemon's own (state, an upload's spool), not the engine's socket
        return BackendError(f"{what}: {exc}", ErrorKind.INTERNAL)
    if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                        docker.errors.DockerException, OSError)):
        return BackendError(f"{what}: cannot reach the Docker engine ({exc}); start dockerd "
                            "(`make docker-up`) or fix `docker_host`", ErrorKind.UNAVAILABLE)
    return BackendError(f"{what}: {exc}", ErrorKind.INTERNAL)


def _explain(exc: Any) -> str:
    return str(getattr(exc, "explanation", None) or exc)


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status_code", None)


# ---------------------------------------------------------------------------
# Streams and the hijacked exec socket
# ---------------------------------------------------------------------------

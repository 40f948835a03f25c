"""The docker backend: one hardened, persistent container, as fast as a local shell.

Design (issue 5):

* **One container per daemon** (or, with ``per_task: true``, one per task), created on first
  use from a local image and labelled ``io.executor.daemon=<instance id>``; a restarted daemon
  finds it again by label. If it is gone or stopped, the next ``sandbox()``/``spawn()`` recreates
  (or restarts) it and the sandbox says so through ``take_notice()``. Files live on a named
  volume at ``/workspace`` (one directory per task), so they survive a container restart.
* **Hardened by default**, every item an option: read-only root with a tmpfs ``/tmp``, all
  capabilities dropped, no-new-privileges, a non-root numeric user, pids/memory/CPU limits,
  ``network: none``, no host mounts, docker's default seccomp profile, never a pull.
* **Fast**: the Engine API through docker-py for control calls (in a worker thread), and for
  each process a docker exec whose *hijacked socket* is driven by the event loop directly
  (``add_reader`` + non-blocking ``recv``/``sock_sendall``, demultiplexed in place): a line
  written to a long-lived shell comes back with no thread hop and no polling.
* **Many new tasks at once** (issue 19): a task process is not a docker exec of its own (the
  engine runs execs one after another, ~50-100 ms of engine CPU each: 200 new tasks queued for
  15-30 s). One long-lived spawner per container (``backends/_spawner.py``, started with one
  docker exec) forks every task process, reaper included, and multiplexes their stdio over its
  exec socket; a start is a fork in the container. The backend's own helpers (kill walk, tar,
  path resolution) and images without python3 (or ``spawner: false``) keep a docker exec each.
  ``warm_shells`` pre-started shells (the core's pool, ``executor.tasks.ShellPool``) wait in
  the workspace for new tasks.
* Every spawn runs ``env -i K=V... argv`` so the process gets exactly the given environment
  (docker exec otherwise adds PATH, HOSTNAME, HOME and the image's variables). runc makes every
  exec'd process a session leader; the reaper (base.reaper_argv, the image's python3) forks the
  command as the leader of a new session and keeps everything it starts in its tree, which
  ``signal_session`` (a /proc walk inside the container) signals.
"""

from __future__ import annotations

from .options import CLEANUP_SCRIPT, CONTAINER_RECIPE, DockerOptions, KILLER_SCRIPT, LABEL_BACKEND, LABEL_CONFIG, LABEL_DAEMON, LABEL_SCOPE, MKDIR_WRAPPER, POOL_TASK, PROCS_PER_CONTAINER, PROCS_PER_START, PROCS_PER_TASK, PTY_WRAPPER, SHARED, _TASK_ID, _USER, _docker_error, _explain, _status  # noqa: F401
from .process import DockerProcess, _ExecSocket, _Killer, _OrderedWriter, _SpawnerConn, _hijacked_socket  # noqa: F401
from .container import _AsyncReader, _Container, _EventWatcher, _dir_tar, _owned_tar, _state_reason  # noqa: F401
from .backend import DockerBackend, DockerSandbox, __all__  # noqa: F401

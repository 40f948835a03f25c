"""The singularity backend: one Apptainer (or SingularityCE) instance per task.

HPC sites that forbid Docker usually have Apptainer. Each task gets its own
``apptainer instance start`` (named after the task, prefixed with a tag unique
to this backend's state dir so that two daemons never touch each other's
instances), with the task's host directory bound inside at ``workdir``. Every
process is an ``apptainer exec instance://NAME ...``: the persistent shell the
core keeps per task makes the ~0.1 s an exec costs here irrelevant after the first.

The commands are built with spython (``init_command`` and spython's argument
conventions) and run here as asyncio subprocesses: spython itself always runs
an executable called ``singularity`` synchronously and exits the interpreter on
errors, which a daemon cannot afford.

Inside the instance a small POSIX ``sh`` launcher (``LAUNCHER``) enters the
working directory, drops every variable Apptainer injects, sets exactly the
requested environment and ``exec``s ``setsid`` on the reaper (``base.reaper_argv``), which
forks the command as the leader of its own session (its ``$$`` is its session id in the
instance's PID namespace) and keeps whatever it starts in its tree, which ``signal_session``
signals, ``setsid`` included. Values travel as ``APPTAINERENV_EXRV_<name>``,
never on a command line, so secrets do not show up in ``ps``.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import stat
import struct
import subprocess
import termios
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Literal

from pydantic import field_validator

from ._host import PipeReader, PtyReader, proc_stat, signal_tree, spawn_piped, write_master, write_stdin
from .base import (
    Backend,
    BackendError,
    Capabilities,
    ErrorKind,
    Health,
    Options,
    Process,
    PtySize,
    KILL_SESSION_ONLY,
    KILL_SUBREAPER,
    KILL_SUBREAPER_IF_PYTHON,
    REAPER_PYTHONS,
    Sandbox,
    reaper_argv,
)

#: Image references Apptainer pulls and converts; we build each once into a cached SIF.
REMOTE_SCHEMES = ("docker://", "docker-daemon://", "oras://", "library://", "shub://", "http://", "https://")

#: Host variables the apptainer executable itself may need (its config, cache, the HOME where it
#: keeps instance state, the test wrapper's extra binds). Nothing else of the daemon's reaches it.
_HOST_ENV_NAMES = {"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "XDG_RUNTIME_DIR"}
_HOST_ENV_PREFIXES = ("APPTAINER_", "SINGULARITY_", "EXECUTOR_APPTAINER_")

#: ioctls Python's termios lacks: unlock a pty master, and open its peer without a path lookup
#: (the slave lives in the instance's devpts, which the host cannot name).
_TIOCSPTLCK = 0x40045431
_TIOCGPTPEER = 0x5441

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = ("EXRV_", "EXR_KEEP", "__exr_")

#: Runs inside the instance as ``sh -c LAUNCHER executor DIR MODE ARGV...``. Drops every exported
#: variable (Apptainer adds PS1, LD_LIBRARY_PATH, APPTAINER_*, ...), then sets exactly the names in
#: EXR_KEEP from EXRV_<name>, then execs setsid (with -c: take the pty as controlling terminal).
#: ``export -p`` prints one ``export NAME=...`` per variable; a multi-line value can only add
#: spurious names, which are unset harmlessly before the wanted ones are set. Under ``apptainer exec``
#: the launcher is a child of Apptainer's starter, never a process-group leader, so ``setsid``
#: does not fork: the command keeps the exec's pid, stdio and exit status.
LAUNCHER = r"""
cd -- "$1" 2>/dev/null || { echo "executor: the working directory $1 does not exist in the sandbox" >&2; exit 127; }
__exr_mode=$2; shift 2
set -f
__exr_setsid=$(command -v setsid) || { echo "executor: the image has no setsid (util-linux or busybox)" >&2; exit 127; }
__exr_keep=$EXR_KEEP
IFS='
'
for __exr_line in $(export -p); do
  case $__exr_line in
    "export "*) __exr_n=${__exr_line#export } ;;
    "declare -x "*) __exr_n=${__exr_line#declare -x } ;;
    *) continue ;;
  esac
  __exr_n=${__exr_n%%=*}
  case $__exr_n in EXRV_*) ;; *) unset "$__exr_n" 2>/dev/null ;; esac
done
IFS=' '
for __exr_n in $__exr_keep; do
  eval "$__exr_n=\$EXRV_$__exr_n; export $__exr_n; unset EXRV_$__exr_n"
done
unset IFS __exr_line __exr_n __exr_keep
if [ "$__exr_mode" = pty ]; then exec "$__exr_setsid" -c "$@"; fi
exec "$__exr_setsid" "$@"
"""


class SingularityOptions(Options):
    """``backends.<name>`` for ``kind: singularity``."""

    #: The executable: a name looked up on PATH or a path. ``apptainer`` and ``singularity`` work.
    executable: str = "apptainer"
    #: A SIF file, a sandbox directory, or a docker:// / oras:// / library:// reference (built
    #: once into a SIF under the backend's state dir).
    image: str
    #: Writable layer: none (read-only image), writable_tmpfs (lost at instance stop), dir (a
    #: persistent overlay directory per task), image (a persistent ext3 overlay file per task).
    overlay: Literal["none", "writable_tmpfs", "dir", "image"] = "none"
    overlay_size_mb: int = 1024
    #: Extra binds, ``SRC[:DST][:ro|rw]``; read-only unless marked rw.
    binds: list[str] = []
    #: none: an empty network namespace with only lo (``--net --network none``); host: the host's.
    network: Literal["none", "host"] = "none"
    containall: bool = True
    no_home: bool = True
    cleanenv: bool = True
    #: cgroup limits (``--memory``, ``--cpus``); need root or systemd-delegated cgroups v2.
    memory: str | None = None
    cpus: float | None = None
    #: Unprivileged mode (``--userns``).
    userns: bool = False
    #: Where the task's directory appears inside the instance.
    workdir: str = "/workspace"
    #: Host folder holding one directory per task; default ``<state_dir>/tasks``.
    tasks_root: str | None = None
    start_timeout: float = 120.0
    build_timeout: float = 1800.0

    @field_validator("binds")
    @classmethod
    def _check_binds(cls, binds: list[str]) -> list[str]:
        for bind in binds:
            parse_bind(bind)
        return binds

    @field_validator("memory")
    @classmethod
    def _check_memory(cls, memory: str | None) -> str | None:
        if memory is not None and not re.fullmatch(r"[0-9]+[KMGTkmgt]?", memory):
            raise ValueError(f"memory must look like 512M or 2G, not {memory!r}")
        return memory

    @field_validator("workdir")
    @classmethod
    def _check_workdir(cls, workdir: str) -> str:
        if not workdir.startswith("/") or ":" in workdir:
            raise ValueError("workdir must be an absolute path inside the container, without ':'")
        return workdir.rstrip("/") or "/"


def parse_bind(spec: str) -> tuple[str, str, str]:
    """``SRC[:DST][:ro|rw]`` -> (src, dst, mode); read-only unless marked rw."""
    parts = spec.split(":")
    mode = "ro"
    if len(parts) > 1 and parts[-1] in ("ro", "rw"):
        mode = parts.pop()
    if len(parts) > 2 or not parts[0]:
        raise ValueError(f"bind {spec!r} must be SRC[:DST][:ro|rw]")
    src = parts[0]
    dst = parts[1] if len(parts) == 2 and parts[1] else src
    if not src.startswith("/") or not dst.startswith("/"):
        raise ValueError(f"bind {spec!r}: both paths must be absolute")
    return src, dst, mode


def escape_env_value(value: str) -> str:
    """Apptainer writes APPTAINERENV_ values into a double-quoted ``export`` it sources (it
    escapes ``"`` itself): escape what would still expand there."""
    return value.replace("\\", "\\\\").replace("$", "\\$").replace("`", "\\`")


def _init_command(action: list[str]) -> list[str]:
    """spython's command prefix (``singularity --quiet ACTION``), without spython's global state."""
    from spython.main.base.command import init_command

    command: list[str] = init_command(SimpleNamespace(quiet=True, debug=False), action)
    return command


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)[:limit].strip("-.") or "task"


def _short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def _tail(text: str, limit: int = 800) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    out = "\n".join(lines[-6:])
    return out[-limit:]


def _proc_start_time(pid: int) -> str | None:
    """A live (non-zombie) process's start time, to tell it from a later one with the same pid."""
    fields = proc_stat(pid)
    return None if fields is None or fields[0] in ("Z", "X") else fields[19]


class Cli:
    """The apptainer executable: argv built with spython's conventions, run without blocking."""

    def __init__(self, executable: str) -> None:
        self.executable = executable
        #: ``--version`` output once known: "apptainer version 1.4.5", "singularity-ce version 4.1.0"
        self.last_version = ""

    def resolve(self) -> str:
        """The executable's path, or BackendError(FAILED_PRECONDITION) saying how to fix it."""
        path = shutil.which(self.executable)
        if path is None:
            raise BackendError(
                f"the Apptainer executable {self.executable!r} was not found "
                f"({'not executable' if os.sep in self.executable else 'not on PATH'}): install apptainer "
                "(or singularity) or set backends.<name>.executable to its path",
                ErrorKind.FAILED_PRECONDITION,
            )
        return path

    def argv(self, action: list[str], *args: str) -> list[str]:
        cmd = _init_command(action)
        cmd[0] = self.resolve()
        return cmd + list(args)

    @staticmethod
    def host_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k in _HOST_ENV_NAMES or k.startswith(_HOST_ENV_PREFIXES)}
        env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        if extra:
            env.update(extra)
        return env

    async def run(self, argv: Sequence[str], timeout: float) -> tuple[int, str, str]:
        """Run to completion: (exit code, stdout, stderr). Killed at the timeout."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=self.host_env(), start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]}: {exc.strerror}", ErrorKind.FAILED_PRECONDITION) from exc
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()
            raise BackendError(f"`{' '.join(argv[1:4])} ...` did not finish within {timeout:g} s",
                               ErrorKind.UNAVAILABLE) from None
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def version(self) -> str:
        code, out, err = await self.run([self.resolve(), "--version"], 30)
        if code != 0:
            raise BackendError(f"`{self.executable} --version` failed: {_tail(err or out)}", ErrorKind.FAILED_PRECONDITION)
        self.last_version = out.strip()
        return self.last_version

    async def instances(self) -> list[dict[str, Any]]:
        """``instance list --json``: [{instance, pid, img, logErrPath, ...}] (spython's schema)."""
        code, out, err = await self.run(self.argv(["instance", "list", "--json"]), 60)
        if code != 0:
            raise BackendError(f"listing Apptainer instances failed: {_tail(err or out)}", ErrorKind.UNAVAILABLE)
        try:
            return list(json.loads(out or "{}").get("instances") or [])
        except json.JSONDecodeError as exc:
            raise BackendError(f"`instance list --json` printed something that is not JSON: {out[:200]!r}",
                               ErrorKind.INTERNAL) from exc

    async def stop(self, name: str) -> None:
        code, out, err = await self.run(self.argv(["instance", "stop"], "--timeout", "10", name), 60)
        if code != 0 and "no instance found" not in (err + out):
            raise BackendError(f"stopping the Apptainer instance {name} failed: {_tail(err or out)}",
                               ErrorKind.UNAVAILABLE)


class ApptainerProcess(Process):
    """One ``apptainer exec instance://...`` and the command it runs inside.

    The exit status crosses Apptainer (and, in the test setup, bubblewrap) as 128+N when the
    command dies of signal N; ``wait`` reports -N when this backend delivered N to a session of
    the sandbox while the process ran (timeouts, cancels, SignalProcess all go through
    ``signal_session``), else the number as it came."""

    stdout: PipeReader | PtyReader
    stderr: PipeReader | None

    def __init__(self, sandbox: "ApptainerSandbox", proc: asyncio.subprocess.Process,
                 master: int | None, pipes: tuple[PipeReader, PipeReader] | None = None) -> None:
        self._sandbox = sandbox
        self._proc = proc
        self._master = master
        self._started = time.monotonic()
        self.pid = proc.pid  # the host-side apptainer process
        if master is None:
            assert pipes is not None
            self.stdout, self.stderr = pipes
        else:
            self.stdout = PtyReader(master)
            self.stderr = None

    async def write(self, data: bytes) -> None:
        if self._master is not None:
            await write_master(self._master, data, 0.002)
            return
        await write_stdin(self._proc.stdin, data)

    async def close_stdin(self) -> None:
        stdin = self._proc.stdin
        if self._master is None and stdin is not None and not stdin.is_closing():
            stdin.close()

    async def resize(self, size: PtySize) -> None:
        if self._master is None:
            raise BackendError("this process has no terminal to resize", ErrorKind.FAILED_PRECONDITION)
        fcntl.ioctl(self._master, termios.TIOCSWINSZ, struct.pack("HHHH", size.rows, size.cols, 0, 0))

    async def wait(self) -> int:
        code = await self._proc.wait()
        if code > 128 and not self._sandbox.instance_alive():
            raise BackendError(f"the Apptainer instance {self._sandbox.instance} ended under the process "
                               f"(exit {code}); see {self._sandbox.log_err or 'its log'}", ErrorKind.LOST)
        if code > 128 and self._sandbox.signalled_since(code - 128, self._started):
            return -(code - 128)
        return code

    async def detach(self) -> None:
        if isinstance(self.stdout, PipeReader):
            self.stdout.detach()
        if self.stderr is not None:
            self.stderr.detach()
        if self._master is not None:
            assert isinstance(self.stdout, PtyReader)
            self.stdout.stop()
            os.close(self._master)
            self._master = None


class ApptainerSandbox(Sandbox):
    """A task's instance: ``root`` is the task directory as seen inside it."""

    def __init__(self, backend: "SingularityBackend", task_id: str, instance: str, host_dir: Path,
                 info: dict[str, Any]) -> None:
        self._backend = backend
        self.task_id = task_id
        self.instance = instance
        self.host_dir = host_dir
        self.root = backend.options.workdir
        self.instance_pid = int(info.get("pid") or 0)
        self.instance_start = _proc_start_time(self.instance_pid) if self.instance_pid else None
        self.log_err = str(info.get("logErrPath") or "")
        self._signals: list[tuple[float, int]] = []
        try:  # the instance's PID namespace, as the host sees it (None: not ours to read)
            self.pid_ns: str | None = os.readlink(f"/proc/{self.instance_pid}/ns/pid")
        except (OSError, ValueError):
            self.pid_ns = None
        # Whether the image has a python3 for the reaper (else a `setsid` escapes the kill),
        # seen through the instance's root from the host: shown by ListBackends.
        if self.instance_pid:
            backend.reaper_python = any(os.path.exists(f"/proc/{self.instance_pid}/root{path}")
                                        for path in REAPER_PYTHONS)

    def instance_alive(self) -> bool:
        """The instance's host process still runs (Apptainer runs in the host PID namespace)."""
        return bool(self.instance_pid) and _proc_start_time(self.instance_pid) == self.instance_start

    def signalled_since(self, sig: int, since: float) -> bool:
        return any(s == sig and t >= since for t, s in self._signals)

    def exec_argv(self, argv: Sequence[str], cwd: str, pty: bool) -> list[str]:
        """``apptainer exec --cleanenv --pwd / instance://NAME sh -c LAUNCHER ...``: the exact argv.

        ``--pwd /`` keeps Apptainer from trying (and warning about) the daemon's own cwd; the
        launcher enters ``cwd`` and says plainly when it does not exist."""
        return self._backend.cli.argv(
            ["exec"], "--cleanenv", "--pwd", "/", f"instance://{self.instance}",
            "/bin/sh", "-c", LAUNCHER, "executor", cwd, "pty" if pty else "pipe", *reaper_argv(argv, pty=pty),
        )

    def exec_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """The apptainer process's environment: host essentials plus the command's, escaped."""
        prefix = self._backend.env_prefix
        extra: dict[str, str] = {}
        for name, value in env.items():
            if not _NAME_RE.match(name) or name.startswith(_RESERVED_ENV):
                raise BackendError(f"environment variable name {name!r} cannot be passed into an Apptainer "
                                   "instance (letters, digits and _ only; EXRV_/EXR_KEEP/__exr_ are reserved)",
                                   ErrorKind.INVALID_ARGUMENT)
            if "\0" in value:
                raise BackendError(f"environment variable {name} contains a NUL byte", ErrorKind.INVALID_ARGUMENT)
            extra[f"{prefix}EXRV_{name}"] = escape_env_value(value)
        extra[f"{prefix}EXR_KEEP"] = " ".join(env)
        return Cli.host_env(extra)

    async def spawn(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str],
                    pty: PtySize | None = None) -> Process:
        if not argv:
            raise BackendError("nothing to run: empty argv", ErrorKind.INVALID_ARGUMENT)
        if not self.instance_alive():
            raise BackendError(f"the Apptainer instance {self.instance} of task {self.task_id} is no longer "
                               f"running; see {self.log_err or 'its log'} (close the task to start a fresh one)",
                               ErrorKind.LOST)
        full = self.exec_argv(argv, cwd, pty is not None)
        host_env = self.exec_env(env)
        if pty is None:
            try:
                proc, stdout, stderr = await spawn_piped(full, cwd=None, env=host_env, start_new_session=True)
            except OSError as exc:
                raise _spawn_error(exc) from exc
            return ApptainerProcess(self, proc, None, (stdout, stderr))
        master, slave = self.open_pty()
        try:
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", pty.rows, pty.cols, 0, 0))
            os.set_blocking(master, False)
            # A new process group but not a new session: a session leader on the host side would
            # make the pty its controlling terminal and `setsid -c` inside could not take it.
            proc = await asyncio.create_subprocess_exec(
                *full, stdin=slave, stdout=slave, stderr=slave, env=host_env, process_group=0)
        except OSError as exc:
            os.close(master)
            raise _spawn_error(exc) from exc
        finally:
            os.close(slave)
        return ApptainerProcess(self, proc, master)

    def open_pty(self) -> tuple[int, int]:
        """A pseudo-terminal from the instance's own devpts when it has one (``--containall``
        mounts a fresh devpts), so that inside ``tty`` names it (/dev/pts/N); else the host's."""
        path = f"/proc/{self.instance_pid}/root/dev/pts/ptmx"
        try:
            master = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            return os.openpty()
        try:
            st = os.fstat(master)
            if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (5, 2):
                raise OSError(errno.EINVAL, f"{path} is not a ptmx device")
            fcntl.ioctl(master, _TIOCSPTLCK, struct.pack("i", 0))  # unlockpt
            slave = fcntl.ioctl(master, _TIOCGPTPEER, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        except OSError:
            os.close(master)
            return os.openpty()
        return master, slave

    async def signal_session(self, pid: int, sig: int) -> None:
        """Signal the whole tree of the spawn of ``pid`` (as seen inside; the reaper's descendants,
        ``setsid`` included) from the host when we can read the instance's PID namespace
        (``_host.signal_tree``): ~1 ms instead of an exec (~95 ms); else the base class's walk inside."""
        self._signals.append((time.monotonic(), sig))
        del self._signals[:-64]
        if self.pid_ns is not None and self.instance_alive():
            await asyncio.to_thread(signal_tree, pid, sig, self.pid_ns)
            return
        await super().signal_session(pid, sig)

    async def release(self, remove_files: bool = False) -> None:
        await self._backend.release(self, remove_files)


def _spawn_error(exc: OSError) -> BackendError:
    kind = ErrorKind.RESOURCE_EXHAUSTED if exc.errno in (errno.EAGAIN, errno.ENOMEM, errno.EMFILE) \
        else ErrorKind.FAILED_PRECONDITION
    return BackendError(f"cannot start apptainer exec: {exc.strerror}", kind)


class SingularityBackend(Backend):
    kind = "singularity"
    Options = SingularityOptions
    options: SingularityOptions

    def __init__(self, name: str, options: SingularityOptions, *, state_dir: Path) -> None:
        super().__init__(name, options, state_dir=state_dir)
        self.cli = Cli(options.executable)
        #: Every instance of this backend starts with this: its state dir's hash, so a second
        #: daemon (another state dir) never stops ours as "leftovers".
        self.prefix = f"exr-{_short_hash(str(state_dir.resolve()))}-"
        self.tasks_root = Path(options.tasks_root).expanduser() if options.tasks_root else state_dir / "tasks"
        self.overlays_root = state_dir / "overlays"
        self.images_root = state_dir / "images"
        self._sandboxes: dict[str, ApptainerSandbox] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._image_lock = asyncio.Lock()
        self._image_error: str | None = None
        #: ``instance stop`` calls still running (Apptainer's cleanup after the processes died).
        self._stopping: dict[str, asyncio.Future[None]] = {}
        self.leftovers_stopped = 0
        self.limits_apply, self.limits_note = self._limits_support()
        self.reaper_python: bool | None = None  # unknown until an instance runs

    @property
    def env_prefix(self) -> str:
        """Apptainer reads APPTAINERENV_ (and warns, on the command's stderr, when a
        SINGULARITYENV_ twin is set too); SingularityCE reads only SINGULARITYENV_."""
        version = self.cli.last_version.lower()
        return "SINGULARITYENV_" if version and "apptainer" not in version else "APPTAINERENV_"

    # -- description ---------------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.full(self.options.network)

    def policy(self) -> dict[str, str]:
        o = self.options
        policy = {
            "isolation": "one Apptainer instance per task" + (" (user namespace)" if o.userns else ""),
            "executable": o.executable,
            "image": o.image,
            "network": "none (only lo)" if o.network == "none" else "host",
            "containall": str(o.containall).lower(),
            "no_home": str(o.no_home).lower(),
            "cleanenv": str(o.cleanenv).lower(),
            "workdir": f"{self.tasks_root}/<task> -> {o.workdir}",
            "overlay": o.overlay,
            "binds": ", ".join(self._bind_flags_text()) or "none",
            "kill": (KILL_SUBREAPER_IF_PYTHON if self.reaper_python is None else KILL_SUBREAPER
                     if self.reaper_python else f"{KILL_SESSION_ONLY}: the image has no python3 for the reaper"),
        }
        if o.memory or o.cpus:
            limits = ", ".join(x for x in (o.memory and f"memory={o.memory}", o.cpus and f"cpus={o.cpus:g}") if x)
            policy["limits"] = limits if self.limits_apply else f"{limits} NOT APPLIED: {self.limits_note}"
        return policy

    def base_env(self, sandbox: Sandbox) -> dict[str, str]:
        env = super().base_env(sandbox)
        for name in self.options.env_passthrough:
            if name in os.environ:
                env[name] = os.environ[name]
        return env

    @staticmethod
    def _limits_support() -> tuple[bool, str]:
        """cgroup limits need root, or rootless on cgroups v2 with systemd delegating them."""
        if os.geteuid() == 0:
            return True, ""
        if Path("/sys/fs/cgroup/cgroup.controllers").exists() and Path("/run/systemd/system").is_dir():
            return True, ""
        return False, ("rootless Apptainer can only apply cgroup limits on cgroups v2 with systemd; "
                       "this host has neither, so --memory/--cpus are not passed")

    def _bind_flags_text(self) -> list[str]:
        return [f"{s}:{d}:{m}" for s, d, m in (parse_bind(b) for b in self.options.binds)]

    # -- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Stop the instances a previous daemon with this state dir left running."""
        self.tasks_root.mkdir(parents=True, exist_ok=True)
        try:
            leftovers = [i["instance"] for i in await self.cli.instances()
                         if str(i.get("instance", "")).startswith(self.prefix)]
            await asyncio.gather(*(self.cli.stop(name) for name in leftovers))
            self.leftovers_stopped = len(leftovers)
        except BackendError:
            pass  # health() says why

    async def close(self) -> None:
        """Daemon shutdown: stop every instance of ours and wait for Apptainer's cleanup."""
        sandboxes = list(self._sandboxes.values())
        self._sandboxes.clear()
        await asyncio.gather(*(self._begin_stop(sb.instance) for sb in sandboxes), return_exceptions=True)
        await asyncio.gather(*list(self._stopping.values()), return_exceptions=True)

    async def health(self) -> Health:
        try:
            version = await self.cli.version()
        except BackendError as exc:
            return Health(False, exc.message)
        alive = [sb for sb in self._sandboxes.values() if sb.instance_alive()]
        details = {"version": version, "instances": str(len(alive))}
        lost = [sb.task_id for sb in self._sandboxes.values() if sb not in alive]
        if lost:
            details["lost_instances"] = "the instances of these tasks died (next use starts anew): " + ", ".join(lost)
        if self.options.memory or self.options.cpus:
            details["limits"] = "applied" if self.limits_apply else f"not applied: {self.limits_note}"
        if self._image_error:
            return Health(False, self._image_error, details)
        try:
            details["image"] = self._local_image()
        except BackendError as exc:
            return Health(False, exc.message, details)
        return Health(True, "", details)

    # -- images --------------------------------------------------------------------------------

    def _is_remote(self) -> bool:
        return self.options.image.startswith(REMOTE_SCHEMES)

    def _cached_sif(self) -> Path:
        return self.images_root / f"{_short_hash(self.options.image, 16)}.sif"

    def _local_image(self) -> str:
        """The image path to start from; for a remote reference, where its SIF is (or will be)."""
        if self._is_remote():
            sif = self._cached_sif()
            return str(sif) if sif.exists() else f"{self.options.image} (built into {sif} on first use)"
        path = Path(self.options.image).expanduser()
        if not path.exists():
            raise BackendError(f"the image {path} does not exist: build it (apptainer build) or fix "
                               "backends.<name>.image", ErrorKind.FAILED_PRECONDITION)
        return str(path)

    async def image_path(self) -> str:
        """A local SIF or sandbox dir; builds a remote reference once, under a lock."""
        if not self._is_remote():
            return self._local_image()
        sif = self._cached_sif()
        async with self._image_lock:
            if sif.exists():
                return str(sif)
            sif.parent.mkdir(parents=True, exist_ok=True)
            tmp = sif.with_suffix(".sif.tmp")
            code, out, err = await self.cli.run(
                self.cli.argv(["build"], "--force", str(tmp), self.options.image), self.options.build_timeout)
            if code != 0:
                tmp.unlink(missing_ok=True)
                self._image_error = f"building {self.options.image} into a SIF failed: {_tail(err or out)}"
                raise BackendError(self._image_error, ErrorKind.FAILED_PRECONDITION)
            tmp.rename(sif)
            self._image_error = None
            return str(sif)

    # -- instances -----------------------------------------------------------------------------

    def instance_name(self, task_id: str) -> str:
        return f"{self.prefix}{_slug(task_id, 24)}-{_short_hash(task_id, 6)}"

    def task_dir(self, task_id: str) -> Path:
        safe = re.fullmatch(r"[A-Za-z0-9._-]+", task_id) and task_id not in (".", "..")
        return self.tasks_root / (task_id if safe else self.instance_name(task_id)[len(self.prefix):])

    def start_flags(self, task_id: str, host_dir: Path) -> list[str]:
        """Every ``instance start`` option, in order; the image and the name come after."""
        o = self.options
        flags: list[str] = []
        if o.containall:
            flags.append("--containall")
        else:
            flags.append("--pid")  # the /proc walk of signal_session must see only this instance
        if o.no_home:
            flags.append("--no-home")
        if o.cleanenv:
            flags.append("--cleanenv")
        if o.network == "none":
            flags += ["--net", "--network", "none"]
        if o.userns:
            flags.append("--userns")
        flags += ["--bind", f"{host_dir}:{o.workdir}:rw"]
        for bind in self._bind_flags_text():
            flags += ["--bind", bind]
        if o.overlay == "writable_tmpfs":
            flags.append("--writable-tmpfs")
        elif o.overlay in ("dir", "image"):
            flags += ["--overlay", str(self._overlay_path(task_id))]
        if self.limits_apply:
            if o.memory:
                flags += ["--memory", o.memory]
            if o.cpus:
                flags += ["--cpus", f"{o.cpus:g}"]
        return flags

    def _overlay_path(self, task_id: str) -> Path:
        base = self.overlays_root / self.instance_name(task_id)[len(self.prefix):]
        return base.with_suffix(".img") if self.options.overlay == "image" else base

    async def _prepare_overlay(self, task_id: str) -> None:
        path = self._overlay_path(task_id)
        if self.options.overlay == "dir":
            path.mkdir(parents=True, exist_ok=True)
        elif self.options.overlay == "image" and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            code, out, err = await self.cli.run(
                self.cli.argv(["overlay", "create"], "--size", str(self.options.overlay_size_mb), str(path)), 300)
            if code != 0:
                path.unlink(missing_ok=True)
                raise BackendError(f"creating the overlay image {path} failed: {_tail(err or out)}",
                                   ErrorKind.FAILED_PRECONDITION)

    async def _find_instance(self, name: str) -> dict[str, Any] | None:
        for info in await self.cli.instances():
            if info.get("instance") == name:
                return info
        return None

    async def sandbox(self, task_id: str) -> ApptainerSandbox:
        lock = self._locks.setdefault(task_id, asyncio.Lock())
        async with lock:
            existing = self._sandboxes.get(task_id)
            if existing is not None and existing.instance_alive():
                return existing
            sandbox = await self._start_instance(task_id)
            self._sandboxes[task_id] = sandbox
            return sandbox

    async def _start_instance(self, task_id: str) -> ApptainerSandbox:
        if not self.cli.last_version:
            await self.cli.version()  # Apptainer or SingularityCE: decides the env prefix
        name = self.instance_name(task_id)
        host_dir = self.task_dir(task_id)
        try:
            host_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BackendError(f"cannot create the task directory {host_dir}: {exc.strerror}",
                               ErrorKind.RESOURCE_EXHAUSTED if exc.errno == errno.ENOSPC
                               else ErrorKind.FAILED_PRECONDITION) from exc
        pending = self._stopping.get(name)
        if pending is not None:  # the task was closed a moment ago: let that stop finish
            await asyncio.gather(pending, return_exceptions=True)
        info = await self._find_instance(name)
        if info is not None and not _proc_start_time(int(info.get("pid") or 0)):
            await self.cli.stop(name)  # listed but its processes are gone: clean it up, start anew
            info = None
        if info is None:
            image = await self.image_path()
            await self._prepare_overlay(task_id)
            argv = self.cli.argv(["instance", "start"], *self.start_flags(task_id, host_dir), image, name)
            code, out, err = await self.cli.run(argv, self.options.start_timeout)
            if code != 0:
                raise BackendError(f"starting the Apptainer instance {name} for task {task_id} failed: "
                                   f"{_tail(err or out)}", ErrorKind.FAILED_PRECONDITION)
            info = await self._find_instance(name)
            if info is None:
                raise BackendError(f"the Apptainer instance {name} exited right after starting; "
                                   f"see {Path.home()}/.apptainer/instances/logs", ErrorKind.FAILED_PRECONDITION)
        return ApptainerSandbox(self, task_id, name, host_dir, info)

    def _begin_stop(self, name: str) -> asyncio.Future[None]:
        """Start ``instance stop NAME`` (once), tracked until it has finished."""
        stop = self._stopping.get(name)
        if stop is None:
            stop = asyncio.ensure_future(self.cli.stop(name))
            self._stopping[name] = stop
            stop.add_done_callback(lambda done: self._stopping.pop(name, None)
                                   if self._stopping.get(name) is done else None)
        return stop

    async def release(self, sandbox: ApptainerSandbox, remove_files: bool) -> None:
        """CloseTask: ``instance stop``; with remove_files the task dir and overlay go too.

        Waits until the instance's processes are gone (tens of ms), not for the rest of
        Apptainer's cleanup (unmounting, ~1.5 s): that finishes in the background, and a new
        sandbox for the same task waits for it."""
        self._sandboxes.pop(sandbox.task_id, None)
        stop = self._begin_stop(sandbox.instance)
        deadline = time.monotonic() + 60
        while sandbox.instance_alive() and not stop.done() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if stop.done():
            stop.result()  # a failed stop is the caller's error to see
        elif sandbox.instance_alive():
            await stop
        if remove_files:
            await asyncio.to_thread(shutil.rmtree, sandbox.host_dir, True)
            overlay = self._overlay_path(sandbox.task_id)
            if overlay.is_dir():
                await asyncio.to_thread(shutil.rmtree, overlay, True)
            else:
                overlay.unlink(missing_ok=True)

"""The Backend interface: all that executor needs from a place where commands run.

Three small objects, modelled on httpx's transports:

* ``Backend``  one configured place (the host, a container engine, an ssh host, a
  cloud account). It knows its health and capabilities and hands out sandboxes.
* ``Sandbox``  one task's corner of that place: a working directory (``root``) in
  which processes are started and files moved. Created or re-attached by
  ``Backend.sandbox(task_id)``.
* ``Process``  one process started in a sandbox, with byte pipes (or a terminal).

Shell sessions, cwd/env persistence, timeouts, background processes and the
approval gate are written once, above this interface (``executor.shell``,
``executor.tasks``); a backend knows nothing of them, of gRPC or of the gate.

Contract every backend keeps:

* ``Sandbox.spawn`` starts ``argv`` as the leader of a *new session* inside the
  sandbox (so the session id equals the pid the process sees for itself, ``$$``),
  with exactly ``env`` as its environment (nothing inherited from the daemon) and
  ``cwd`` as its directory. With ``pty`` it runs on a pseudo-terminal of that size
  and ``Process.stderr`` is None.
* ``Sandbox.signal_session(pid, sig)`` delivers ``sig`` to every process in the
  session ``pid`` inside the sandbox: that is how timeouts, cancels and
  ``SignalProcess`` kill a whole process tree *in the backend*, not only the client
  side. The default walks ``/proc`` with a POSIX shell started through ``spawn``.
* Failures are ``BackendError`` with a ``kind`` that says what went wrong, never a
  silent fallback elsewhere.
"""

from __future__ import annotations

import abc
import asyncio
import enum
import io
import shlex
import tarfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

__all__ = [
    "Backend",
    "BackendError",
    "ErrorKind",
    "Capabilities",
    "Health",
    "PtySize",
    "Sandbox",
    "Process",
    "ByteQueue",
    "Options",
    "KILL_SESSION_SCRIPT",
    "KILL_TREE_FUNCTION",
    "KILL_TREE_SCRIPT",
    "REAPER_NAME",
    "reaper_argv",
    "REAPER_PYTHONS",
    "KILL_SUBREAPER",
    "KILL_SUBREAPER_IF_PYTHON",
    "KILL_SESSION_ONLY",
    "drain",
    "read_all",
]


class ErrorKind(enum.Enum):
    """What kind of failure a BackendError is; the daemon maps it to a status."""

    UNAVAILABLE = "unavailable"  # the backend cannot be reached now (retry later)
    FAILED_PRECONDITION = "failed_precondition"  # misconfigured: image missing, host key changed
    UNAUTHENTICATED = "unauthenticated"  # credentials refused
    PERMISSION_DENIED = "permission_denied"
    RESOURCE_EXHAUSTED = "resource_exhausted"  # quota, disk full, pids limit
    NOT_FOUND = "not_found"  # a path or object that does not exist
    INVALID_ARGUMENT = "invalid_argument"
    LOST = "lost"  # the sandbox or connection vanished under a running process
    INTERNAL = "internal"


class BackendError(Exception):
    """A failure of the backend, with a message a person can act on."""

    def __init__(self, message: str, kind: ErrorKind = ErrorKind.UNAVAILABLE) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True)
class PtySize:
    rows: int = 24
    cols: int = 80


@dataclass(frozen=True)
class Capabilities:
    pty: bool = False
    resize: bool = False
    signals: bool = True
    stdin: bool = True  # Process.write works; without it no persistent shell
    background: bool = True
    persistent_shell: bool = True
    file_transfer: bool = True
    network_policy: str = "host"
    streaming: bool = True  # output arrives while the process runs


@dataclass(frozen=True)
class Health:
    available: bool
    reason: str = ""
    details: Mapping[str, str] = field(default_factory=dict)


class Options(BaseModel):
    """Base for a backend's config options: unknown keys are an error."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Names of the daemon's environment variables copied into every command's
    #: environment (commands never inherit the daemon's environment otherwise).
    env_passthrough: list[str] = []


class ByteQueue:
    """An async byte stream fed by a producer: ``read()`` returns b"" at EOF.

    Backends whose SDK delivers output by callback or in frames use it to expose
    ``Process.stdout`` / ``Process.stderr``.
    """

    def __init__(self) -> None:
        self._q: asyncio.Queue[bytes | BaseException | None] = asyncio.Queue()
        self._eof = False

    def feed(self, data: bytes) -> None:
        if data and not self._eof:
            self._q.put_nowait(bytes(data))

    def feed_eof(self) -> None:
        if not self._eof:
            self._eof = True
            self._q.put_nowait(None)

    def feed_error(self, exc: BaseException) -> None:
        if not self._eof:
            self._eof = True
            self._q.put_nowait(exc)

    async def read(self) -> bytes:
        item = await self._q.get()
        if item is None:
            self._q.put_nowait(None)  # stay at EOF for later readers
            return b""
        if isinstance(item, BaseException):
            self._q.put_nowait(item)
            raise item
        return item


class Process(abc.ABC):
    """A process started by ``Sandbox.spawn``: the leader of its own session."""

    #: stdout, or the terminal stream under a pty. ``await stdout.read()`` returns
    #: a chunk, or b"" at EOF; it raises BackendError(kind=LOST) if the transport dies.
    #: A stream may also push its chunks (``subscribe(on_data, on_eof)``, ``pause()``,
    #: ``resume()``, as ``_host.PipeReader`` does); the shell layer then uses that.
    stdout: Any
    #: stderr, or None under a pty.
    stderr: Any

    @abc.abstractmethod
    async def write(self, data: bytes) -> None:
        """Write to stdin (the terminal's input under a pty)."""

    @abc.abstractmethod
    async def close_stdin(self) -> None:
        """Send EOF on stdin. Under a pty this is a no-op."""

    @abc.abstractmethod
    async def wait(self) -> int:
        """Wait for the exit: the exit code, or -N when killed by signal N.

        Raises BackendError(kind=LOST) when the result cannot be known."""

    async def resize(self, size: PtySize) -> None:
        raise BackendError("this backend cannot resize a terminal", ErrorKind.FAILED_PRECONDITION)

    async def detach(self) -> None:
        """Release client-side resources (sockets, channels). Does not signal."""


class Sandbox(abc.ABC):
    """One task's place in a backend: a directory where processes run."""

    #: The task's directory inside the sandbox (a POSIX path).
    root: str

    @abc.abstractmethod
    async def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str,
        env: Mapping[str, str],
        pty: PtySize | None = None,
    ) -> Process:
        """Start argv as a new session leader with exactly env, in cwd."""

    async def signal_session(self, pid: int, sig: int) -> None:
        """Deliver sig to every process of session ``pid`` inside the sandbox."""
        proc = await self.spawn(
            ["/bin/sh", "-c", KILL_TREE_SCRIPT, "executor-kill", str(pid), str(sig)],
            cwd="/",
            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        await proc.close_stdin()
        await drain(proc)
        await proc.wait()

    async def put_archive(self, path: str, data: AsyncIterator[bytes]) -> None:
        """Unpack a tar stream into ``path`` (created if missing).

        The caller has validated the archive (no member leaves ``path``). The
        default pipes it through ``tar -x`` inside the sandbox."""
        proc = await self.spawn(
            ["/bin/sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', "put", path],
            cwd=self.root,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        out = asyncio.ensure_future(read_all(proc.stdout))
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        try:
            async for chunk in data:
                await proc.write(chunk)
            await proc.close_stdin()
        finally:
            code = await proc.wait()
            await out
            message = (await err).decode(errors="replace").strip() if err is not None else ""
        if code != 0:
            full = "No space left on device" in message or "Disk quota exceeded" in message
            raise BackendError(f"unpacking into {path} failed: {message or f'tar exited {code}'}",
                               ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION)

    async def get_archive(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of ``path`` (a file or a directory), its last component at the top."""
        parent, _, name = path.rstrip("/").rpartition("/")
        proc = await self.spawn(
            ["/bin/sh", "-c", 'cd -- "$1" && exec tar -c -f - -- "$2"', "get", parent or "/", name or "."],
            cwd=self.root,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        await proc.close_stdin()
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        while True:
            chunk = await proc.stdout.read()
            if not chunk:
                break
            yield chunk
        code = await proc.wait()
        if code != 0:
            message = (await err).decode(errors="replace").strip() if err is not None else ""
            raise BackendError(f"reading {path} failed: {message or f'tar exited {code}'}",
                               ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION)

    async def release(self, remove_files: bool = False) -> None:
        """The task is closed: free what the sandbox holds; remove its files if asked."""

    def take_notice(self) -> str | None:
        """A one-off note about the sandbox's life since the last call (e.g. "container X was
        gone and has been recreated; files kept"), for the core to append to the next
        Exit.message; None when there is nothing to tell. Reading it clears it."""
        return None


class Backend(abc.ABC):
    """One configured place where commands run."""

    #: The config name of this kind of backend: local, docker, ssh, ...
    kind: ClassVar[str]
    #: The pydantic model of this backend's options (``backends.<name>`` in config).
    Options: ClassVar[type[Options]] = Options

    def __init__(self, name: str, options: Options, *, state_dir: Path) -> None:
        self.name = name
        self.options = options
        self.state_dir = state_dir  # a directory of this backend's own under the daemon's state dir

    @property
    @abc.abstractmethod
    def capabilities(self) -> Capabilities: ...

    def policy(self) -> dict[str, str]:
        """The effective sandbox policy, shown by ListBackends (no secrets)."""
        return {}

    def base_env(self, sandbox: Sandbox) -> dict[str, str]:
        """The clean environment every command starts from (never the daemon's)."""
        return {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": sandbox.root,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }

    async def start(self) -> None:
        """Connect and recover: end (or re-adopt) what a previous daemon left running.

        Must not raise because the backend is unreachable: ``health`` says so."""

    @abc.abstractmethod
    async def health(self) -> Health: ...

    @abc.abstractmethod
    async def sandbox(self, task_id: str) -> Sandbox:
        """Create, or attach to, the task's sandbox and its directory ``root``."""

    async def close(self) -> None:
        """Daemon shutdown: release connections. Running processes were ended above."""


# ---------------------------------------------------------------------------
# Helpers for backends
# ---------------------------------------------------------------------------

#: The name (``comm``, /proc/PID/stat field 2) the reaper gives itself, so a kill walk can tell it
#: from the command it anchors.
REAPER_NAME = "executor-reaper"

#: The reaper: ``python3 -I -S -c REAPER_PY MODE ARGV...`` (MODE: ``pipe`` or ``pty``).
#:
#: A ``setsid`` leaves a process group and a session, never its ancestry: the reaper marks itself
#: a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the command starts stays its
#: descendant even when its parent dies (a double fork re-parents to the reaper, not to init).
#: It forks the command as the leader of a new session (``$$`` = session id, as the Sandbox
#: contract says; under ``pty`` with the terminal as controlling tty), hands its own stdio to
#: /dev/null (EOF on the command's pipes is unchanged), reaps orphans, and when the command ends,
#: TERMs whatever the command left behind, KILLs it after ``REAPER_GRACE`` seconds, and exits
#: as the command did (code, or the same signal). It keeps the command's zombie until then, so
#: a kill walk always finds the reaper from the command's pid and the pid cannot be reused.
#: It ignores HUP/INT/TERM/QUIT (it is the anchor of the tree; the command gets them at their
#: defaults); SIGKILL from the command's own user can still end it (see docs/security.md).
REAPER_GRACE = 3.0
REAPER_PY = r"""
import ctypes, fcntl, os, signal, sys, termios, time
mode, argv = sys.argv[1], sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:
    os.write(2, b"executor: cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER)\n")
    os._exit(126)
libc.prctl(15, b"%(name)s", 0, 0, 0)
HANDLED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)
for s in HANDLED:
    signal.signal(s, signal.SIG_IGN)
if mode == "pty":
    try:
        fcntl.ioctl(0, termios.TIOCNOTTY)  # a session leader holding the terminal lets it go
    except OSError:
        pass
pid = os.fork()
if pid == 0:
    try:
        os.setsid()
        if mode == "pty":
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for s in HANDLED + (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(s, signal.SIG_DFL)
        with open("/proc/self/environ", "rb") as f:  # exactly as given: Python may add LC_CTYPE
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, ("executor: cannot run %%r: %%s\n" %% (argv[0], exc.strerror)).encode())
    os._exit(127)
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
me = os.getpid()
while True:
    done = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
    if done is None or done.si_pid == pid:
        break
    os.waitpid(done.si_pid, 0)

def rest():
    kids, parent = set(), {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open("/proc/%%s/stat" %% e, "rb") as f:
                    raw = f.read()
                parent[int(e)] = int(raw[raw.rfind(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, grew = {me}, True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in tree and p not in tree:
                tree.add(p)
                grew = True
    for p, pp in parent.items():
        if pp == me and p != pid:
            kids.add(p)
    return tree - {me, pid}, kids

def reap(kids):
    for k in kids:
        try:
            os.waitpid(k, os.WNOHANG)
        except ChildProcessError:
            pass

left, kids = rest()
deadline = time.monotonic() + %(grace)s
sig = signal.SIGTERM
while left:
    for p in left:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    time.sleep(0.02)
    reap(kids)
    left, kids = rest()
    if time.monotonic() > deadline:
        sig = signal.SIGKILL
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.WTERMSIG(status) != signal.SIGKILL:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [os.WTERMSIG(status)])
    os.kill(me, os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
""" % {"name": REAPER_NAME, "grace": REAPER_GRACE}

#: Runs the reaper with the sandbox's own python3 (``/bin/sh -c REAPER_SH executor-reaper
#: REAPER_PY MODE ARGV...``); where there is none, falls back to ``setsid`` (session only: a
#: ``setsid`` in the command escapes the kill; the backend's policy says so).
REAPER_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
REAPER_SH = r"""py=$1; mode=$2; shift 2
for p in PYTHONS; do
  [ -x "$p" ] && exec "$p" -I -S -c "$py" "$mode" "$@"
done
read -r s </proc/$$/stat; s=${s##*) }; sid=${s#* * * }; sid=${sid%% *}
[ "$sid" = $$ ] && exec "$@"  # already a session leader (a container engine's exec)
if [ "$mode" = pty ]; then exec setsid -c "$@"; fi
exec setsid "$@"
""".replace("PYTHONS", " ".join(REAPER_PYTHONS))


#: What ``Backend.policy()["kill"]`` says: how far a timeout, cancel or CloseTask reaches.
KILL_SUBREAPER = "subreaper tree (setsid, nohup and double forks die too)"
KILL_SUBREAPER_IF_PYTHON = ("subreaper tree where the sandbox has python3 (setsid, nohup and double forks die "
                            "too); else session only (setsid escapes)")
KILL_SESSION_ONLY = "session only (setsid escapes)"


def reaper_argv(argv: Sequence[str], *, pty: bool = False, python: str | None = None) -> list[str]:
    """``argv`` under the reaper: it runs as the leader of a new session, and every process it
    starts (even after ``setsid`` or a double fork) stays in the reaper's tree, which
    ``signal_session`` signals. ``python``: a known interpreter (the daemon's own, for host
    backends); else the sandbox's python3 is looked up, with ``setsid`` as the fallback."""
    mode = "pty" if pty else "pipe"
    if python is not None:
        return [python, "-I", "-S", "-c", REAPER_PY, mode, *argv]
    return ["/bin/sh", "-c", REAPER_SH, REAPER_NAME, REAPER_PY, mode, *argv]


#: A POSIX sh function (builtins only: no process per /proc entry; reads /proc, so Linux):
#: ``_extree PID SIG`` delivers SIG to the whole tree that the spawn of PID started:
#:
#: * the anchor: the reaper that started PID (its parent, or PID itself), whose descendants are
#:   everything the command started, ``setsid``, ``nohup`` and double forks included; without a
#:   reaper, PID itself;
#: * signalled: PID's process group first, in one kill(2) (a shell forking as the signal lands
#:   sees its child signalled too), then every descendant of the anchor and every member of
#:   PID's session, except the reaper itself and the shell running the walk;
#: * /proc is walked again until a pass finds nothing new (a child forked during a walk is caught
#:   by the next; it is a descendant of the reaper even if its parent already died), at most 20
#:   passes. Each process gets the signal once.
KILL_TREE_FUNCTION = r"""
_extree() {
  _p=$1; _g=$2; _me=$$; _root=$_p; _c=
  if { read -r _s <"/proc/$_p/stat"; } 2>/dev/null; then
    _c=${_s#*(}; _c=${_c%)*}; _s=${_s##*) }; set -- $_s
    if [ "$_c" != executor-reaper ] && { read -r _s <"/proc/$2/stat"; } 2>/dev/null; then
      _c=${_s#*(}; _c=${_c%)*}; [ "$_c" = executor-reaper ] && _root=${_s%% *}
    fi
  fi
  [ "$_c" = executor-reaper ] && [ "$_root" = "$_p" ] || kill "-$_g" "-$_p" 2>/dev/null
  _seen=" $_me "; [ "$_c" = executor-reaper ] && _seen=" $_root $_me "  # never the reaper
  _pass=0
  while [ "$_pass" -lt 20 ]; do
    _pass=$((_pass + 1)); _all=""; _tree=" $_root "
    for _d in /proc/[0-9]*; do
      _q=${_d#/proc/}
      { read -r _s <"$_d/stat"; } 2>/dev/null || continue
      _s=${_s##*) }; set -- $_s
      if [ "$4" = "$_p" ]; then _tree="$_tree$_q "; else _all="$_all $_q:$2"; fi
    done
    _grew=1
    while [ "$_grew" = 1 ]; do
      _grew=0; _left=""
      for _e in $_all; do
        case $_tree in
          *" ${_e#*:} "*) _tree="$_tree${_e%:*} "; _grew=1 ;;
          *) _left="$_left $_e" ;;
        esac
      done
      _all=$_left
    done
    _new=0
    for _q in $_tree; do
      case $_seen in *" $_q "*) continue ;; esac
      kill "-$_g" "$_q" 2>/dev/null
      _seen="$_seen$_q "; _new=1
    done
    [ "$_new" = 0 ] && break
  done
}
"""

#: ``sh -c KILL_TREE_SCRIPT executor-kill PID SIG``: the tree of PID's spawn gets SIG.
KILL_TREE_SCRIPT = KILL_TREE_FUNCTION + '_extree "$1" "$2"\nexit 0\n'

#: The former name (it signalled only the session); kept for callers outside the backends.
KILL_SESSION_SCRIPT = KILL_TREE_SCRIPT


async def read_all(stream: Any) -> bytes:
    """A stream's bytes to EOF (None reads as empty)."""
    if stream is None:
        return b""
    buf = bytearray()
    while True:
        chunk = await stream.read()
        if not chunk:
            return bytes(buf)
        buf += chunk


async def drain(proc: Process) -> tuple[bytes, bytes]:
    """Read a process's stdout and stderr to EOF, concurrently."""
    out, err = await asyncio.gather(read_all(proc.stdout), read_all(proc.stderr))
    return out, err


def shell_quote(argv: Sequence[str]) -> str:
    return " ".join(shlex.quote(a) for a in argv)


def tar_single_file(name: str, data: bytes, mode: int = 0o644) -> bytes:
    """A one-file tar archive (used by tests and simple callers)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()

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
import posixpath
import tarfile
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ._shared import identity
from ._shared.streams import ByteQueue, ByteStream, PushStream

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
    "ByteStream",
    "PushStream",
    "Options",
    "KILL_SESSION_SCRIPT",
    "RESOLVE_SCRIPT",
    "Resolved",
    "ArchivePlan",
    "plan_archive",
    "resolve_with",
    "KILL_TREE_FUNCTION",
    "KILL_TREE_SCRIPT",
    "REAPER_NAME",
    "REAPER_GRACE",
    "REAPER_PY",
    "REAPER_SH",
    "REAPER_START_FAILED",
    "REAPER_START_FAILED_LINE",
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

    @classmethod
    def full(cls, network_policy: str) -> "Capabilities":
        """Everything a Process can do (terminals and resizing included), with this network policy."""
        return cls(pty=True, resize=True, signals=True, stdin=True, background=True, persistent_shell=True,
                   file_transfer=True, network_policy=network_policy, streaming=True)


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


class Process(abc.ABC):
    """A process started by ``Sandbox.spawn``: the leader of its own session."""

    #: stdout, or the terminal stream under a pty. ``await stdout.read()`` returns
    #: a chunk, or b"" at EOF; it raises BackendError(kind=LOST) if the transport dies.
    #: A stream may also be a ``PushStream`` (``subscribe(on_data, on_eof)``, ``pause()``,
    #: ``resume()``, as ``_host.PipeReader`` is); the shell layer then uses that shape.
    stdout: ByteStream
    #: stderr, or None under a pty.
    stderr: ByteStream | None
    #: The handle the core passes to ``Sandbox.signal_session`` for this process, when the pid
    #: the process reports for itself (``$$``) does not name it alone in its sandbox: a backend
    #: that starts each spawn in a pid namespace of its own (local's ``isolation: sandbox``,
    #: where every spawn is pid 2) sets it. None: the core uses the reported pid.
    session: int | None = None

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

    def tree_gone(self) -> bool:
        """True once the backend knows that nothing this spawn started can still run (its reaper
        ended every descendant and exited by itself): the core then skips the kill walk after the
        shell's end. False (the default) when unknown."""
        return False

    async def why_exited(self, code: int) -> str:
        """For a process that ended unexpectedly with ``code`` (e.g. a shell before its ready
        marker): what the backend knows about the cause (a pids limit reached, out of memory), in
        words, or "" (the default)."""
        return ""


# Reads the files the gate asks for: for each path a header "<status> <size>" and, for "ok", exactly
# <size> bytes. Never opens what is not a regular file (a FIFO would block, a device would not end).
READ_SCRIPTS = r"""
max=$1; shift
for p do
  if [ ! -e "$p" ] && [ ! -L "$p" ]; then echo "missing 0"; continue; fi
  if [ ! -f "$p" ] || [ ! -r "$p" ]; then echo "unreadable 0"; continue; fi
  magic=$(head -c 4 -- "$p" 2>/dev/null | od -An -tx1 | tr -d ' \n')
  case $magic in
    7f454c46|cffaedfe|cefaedfe|feedface|feedfacf|cafebabe|4d5a*) echo "binary 0"; continue;;
  esac
  n=$(wc -c < "$p" | tr -d ' ')
  if [ "$n" -gt "$max" ]; then echo "too_big $n"; continue; fi
  echo "ok $n"; head -c "$n" -- "$p"
done
"""


def parse_read_scripts(paths: Sequence[str], data: bytes) -> list[tuple[str, bytes | None, str]]:
    """Parse ``READ_SCRIPTS`` output; anything that does not parse (a file that changed while it was
    read) makes every file unreadable, so the gate asks rather than judging half a script."""
    out: list[tuple[str, bytes | None, str]] = []
    pos = 0
    try:
        for p in paths:
            nl = data.index(b"\n", pos)
            status, size = data[pos:nl].decode("ascii").split()
            pos = nl + 1
            if status == "ok":
                n = int(size)
                content = data[pos:pos + n]
                if len(content) != n:
                    raise ValueError("short read")
                pos += n
                out.append((p, content, ""))
            elif status in ("missing", "unreadable", "too_big", "binary"):
                out.append((p, None, status))
            else:
                raise ValueError(status)
        if pos != len(data):
            raise ValueError("trailing bytes")
    except ValueError:
        return [(p, None, "unreadable") for p in paths]
    return out


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

    async def spawn_helper(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str]) -> Process:
        """Start one of the backend's own short helpers (the kill walk, path resolution, tar), not a
        task's command: nothing of it outlives it and it is never signalled as a tree. The default is
        ``spawn``; a backend whose spawns carry a costly wrapper (the reaper) may leave it out here."""
        return await self.spawn(argv, cwd=cwd, env=env)

    async def signal_session(self, pid: int, sig: int) -> None:
        """Deliver sig to every process of session ``pid`` inside the sandbox."""
        proc = await self.spawn_helper(
            ["/bin/sh", "-c", KILL_TREE_SCRIPT, "executor-kill", str(pid), str(sig)],
            cwd="/",
            env={"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
        )
        await proc.close_stdin()
        await drain(proc)
        await proc.wait()

    # paths --------------------------------------------------------------------
    async def resolve_paths(self, paths: Sequence[str]) -> list[Resolved]:
        """Resolve absolute paths on the sandbox's own filesystem, in one round trip.

        Every existing component's symlinks are followed (as the kernel would), missing
        trailing components are kept as written. The default runs ``RESOLVE_SCRIPT`` through
        ``spawn`` inside the sandbox; a backend that can look at its files directly overrides it."""
        if not paths:
            return []
        proc = await self.spawn_helper(["/bin/sh", "-c", RESOLVE_SCRIPT, "executor-resolve"], cwd="/",
                                env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        out = asyncio.ensure_future(read_all(proc.stdout))
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        try:
            await proc.write(encode_path_lines(paths))
            await proc.close_stdin()
        finally:
            code = await proc.wait()
            stdout = await out
            message = (await err).decode(errors="replace").strip() if err is not None else ""
        if code != 0:
            raise BackendError(f"resolving paths in the sandbox failed: {message or f'sh exited {code}'}; the "
                               "sandbox needs a POSIX sh and readlink", ErrorKind.FAILED_PRECONDITION)
        results = parse_resolved(stdout)
        if len(results) != len(paths):
            raise BackendError(f"resolving paths in the sandbox returned {len(results)} answers for {len(paths)} "
                               f"paths{': ' + message if message else ''}", ErrorKind.INTERNAL)
        return results

    async def resolve_path(self, path: str, *, what: str = "path") -> str:
        """``path`` (relative to ``root``, or absolute) with every existing component's symlinks
        resolved on the sandbox's filesystem; missing trailing components are allowed.

        Raises BackendError(INVALID_ARGUMENT) when the result is not ``root`` or below it
        (naming the links that led out), or for a NUL byte."""
        (resolved,) = await self.resolve_inside([path], what=what)
        return resolved

    async def resolve_inside(self, paths: Sequence[str], *, what: str = "path",
                             base: str | None = None) -> list[str]:
        """``resolve_path`` for many paths in one round trip (relative ones against ``base``,
        default ``root``): each resolved, each checked to be inside ``root``."""
        return [path for path, _ in await self._resolve_checked(paths, what=what, base=base)]

    async def _resolve_checked(self, paths: Sequence[str], *, what: str,
                               base: str | None = None) -> list[tuple[str, Resolved]]:
        root = posixpath.normpath(self.root)
        absolute = [_absolute(p, base or root, what) for p in paths]
        answers = await self.resolve_paths([root, *absolute])
        real_root = answers[0]
        return [(_check_inside(root, real_root, asked, got, what), got) for asked, got in zip(paths, answers[1:])]

    # scripts read for the gate --------------------------------------------------
    async def read_scripts(self, paths: Sequence[str], max_bytes: int) -> list[tuple[str, bytes | None, str]]:
        """Read small files the approval gate judges (the scripts a command runs), in one round trip.

        For each absolute path: ``(path, content, "")`` for a regular readable file of at most
        ``max_bytes``, else ``(path, None, why)`` with ``why`` one of ``missing``, ``unreadable``
        (not a regular file, no permission), ``too_big``, ``binary`` (an executable format: ELF,
        Mach-O, PE). Read inside the sandbox as its commands would read them; a FIFO or device is
        never opened. The default runs ``READ_SCRIPTS`` through ``spawn_helper``."""
        if not paths:
            return []
        proc = await self.spawn_helper(["/bin/sh", "-c", READ_SCRIPTS, "executor-read", str(max_bytes), *paths],
                                       cwd="/", env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        out = asyncio.ensure_future(read_all(proc.stdout))
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        await proc.close_stdin()
        code = await proc.wait()
        stdout = await out
        if err is not None:
            await err
        if code != 0:
            return [(p, None, "unreadable") for p in paths]
        return parse_read_scripts(paths, stdout)

    # archives -----------------------------------------------------------------
    async def put_archive(self, path: str, data: AsyncIterator[bytes]) -> None:
        """Unpack a tar stream into ``path`` (created if missing), refusing (INVALID_ARGUMENT)
        any member that would be written outside the task's directory.

        Checked here, on the sandbox's filesystem, whatever the caller checked before: the
        destination and every member's path are resolved in the sandbox (a symlink already on
        disk that leads out is refused); no member may be written through, or over, a link the
        same archive creates; hard-link targets are resolved in the sandbox; devices and FIFOs
        are refused; after unpacking, each symlink the archive made is resolved and one that
        leads out is removed and refused. ``unpack_tar`` does the unpacking."""
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
            async for chunk in data:
                spool.write(chunk)
            spool.seek(0)
            plan = plan_archive(spool)
            (dest,) = await self.resolve_inside([path], what="path")
            members = await self._resolve_checked(plan.paths + plan.hardlinks, what="archive member", base=dest)
            spool.seek(0)
            await self.unpack_tar(dest, _read_spool(spool), through_links=any(r.links for _, r in members))
        if plan.symlinks:
            root = posixpath.normpath(self.root)
            links = [posixpath.join(dest, n) for n in plan.symlinks]
            answers = await self.resolve_paths([root, *links])
            bad = [(link, got) for link, got in zip(links, answers[1:]) if not _inside(answers[0].path, got)]
            if bad:
                await self._remove_links([link for link, _ in bad])
                link, got = bad[0]
                raise BackendError(f"archive link {posixpath.relpath(link, dest)!r} leads outside the task's "
                                   f"directory {root} ({_describe(got)}); it was removed", ErrorKind.INVALID_ARGUMENT)

    async def _remove_links(self, links: Sequence[str]) -> None:
        proc = await self.spawn_helper(["/bin/sh", "-c", 'for l do [ -L "$l" ] && rm -f -- "$l"; done; exit 0',
                                 "executor-unlink", *links], cwd="/", env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        await proc.close_stdin()
        await drain(proc)
        await proc.wait()

    async def unpack_tar(self, dest: str, data: AsyncIterator[bytes], *, through_links: bool = False) -> None:
        """Unpack a tar stream into ``dest`` (already resolved and checked; created if missing).

        ``through_links``: some member's path goes through a symlink already on disk (one that
        stays inside the task's directory); the unpacking must follow it, not replace it. The default pipes it through ``tar -x`` inside the sandbox; backends with a better
        transport override this, not ``put_archive`` (which does the checks)."""
        proc = await self.spawn_helper(
            ["/bin/sh", "-c", 'mkdir -p -- "$1" && exec tar -x -f - -C "$1"', "put", dest],
            cwd=self.root,
            env={"PATH": "/usr/local/bin:/usr/bin:/bin"},
        )
        code, message, _ = await _pipe_through(proc, data)
        if code != 0:
            full = "No space left on device" in message or "Disk quota exceeded" in message
            raise BackendError(f"unpacking into {dest} failed: {message or f'tar exited {code}'}",
                               ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION)

    async def get_archive(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of ``path`` (a file or a directory), its last component at the top.

        ``path`` is resolved in the sandbox first: one that leads outside the task's directory
        is refused (INVALID_ARGUMENT). Links below it are stored as links, never followed."""
        (target,) = await self.resolve_inside([path], what="path")
        async for chunk in self.pack_tar(target):
            yield chunk

    async def pack_tar(self, path: str) -> AsyncIterator[bytes]:
        """A tar stream of ``path`` (already resolved and checked), without following links.

        The default runs ``tar -c`` inside the sandbox; backends override this, not ``get_archive``."""
        parent, _, name = path.rstrip("/").rpartition("/")

        def failed(code: int, message: str) -> BackendError:
            return BackendError(f"reading {path} failed: {message or f'tar exited {code}'}",
                                ErrorKind.NOT_FOUND if "No such file" in message else ErrorKind.FAILED_PRECONDITION)

        async for chunk in self._helper_output(
                ["/bin/sh", "-c", 'cd -- "$1" && exec tar -c -f - -- "$2"', "get", parent or "/", name or "."],
                self.root, failed):
            yield chunk

    async def _helper_output(self, argv: list[str], cwd: str,
                             failed: Callable[[int, str], BackendError]) -> AsyncIterator[bytes]:
        """A helper's stdout, streamed; when it exits non-zero, ``failed(code, its stderr)`` is raised."""
        proc = await self.spawn_helper(argv, cwd=cwd, env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        await proc.close_stdin()
        err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
        while True:
            chunk = await proc.stdout.read()
            if not chunk:
                break
            yield chunk
        code = await proc.wait()
        if code != 0:
            raise failed(code, (await err).decode(errors="replace").strip() if err is not None else "")

    # single files ---------------------------------------------------------------
    async def read_file(self, path: str) -> AsyncIterator[bytes]:
        """The bytes of the regular file ``path``, streamed.

        ``path`` is resolved in the sandbox first, as for ``get_archive``: one that leads outside
        the task's directory is refused (INVALID_ARGUMENT). ``read_bytes`` does the reading."""
        (target,) = await self.resolve_inside([path], what="path")
        async for chunk in self.read_bytes(target):
            yield chunk

    async def read_bytes(self, path: str) -> AsyncIterator[bytes]:
        """The bytes of ``path`` (already resolved and checked). The default runs ``cat`` inside the
        sandbox; refuses a directory or a special file, and a path that became a link since it was
        resolved (a command racing the call)."""
        async for chunk in self._helper_output(["/bin/sh", "-c", _READ_FILE_SCRIPT, "executor-read", path], "/",
                                               lambda code, message: _file_error(path, "reading", code, message)):
            yield chunk

    async def write_file(self, path: str, data: AsyncIterator[bytes], *, mode: int = 0,
                         make_parents: bool = False) -> tuple[str, int]:
        """Writes a stream into the file ``path`` (replacing its content); returns the resolved path
        and the bytes written. ``mode`` (permission bits) is set when given; a new file is 0644
        otherwise. Missing parents are created with ``make_parents``, else refused (NOT_FOUND).

        ``path`` is resolved in the sandbox first (a link that leads out is refused, INVALID_ARGUMENT,
        and so is every missing parent created: it is below the resolved path, inside)."""
        (target,) = await self.resolve_inside([path], what="path")
        if target == posixpath.normpath(self.root):
            raise BackendError(f"{path!r} is the task's directory, not a file", ErrorKind.INVALID_ARGUMENT)
        return target, await self.write_bytes(target, data, mode=mode, make_parents=make_parents)

    async def write_bytes(self, path: str, data: AsyncIterator[bytes], *, mode: int = 0,
                          make_parents: bool = False) -> int:
        """Writes ``path`` (already resolved and checked). The default pipes the data through
        ``cat`` inside the sandbox, refusing a final component that became a link meanwhile."""
        proc = await self.spawn_helper(
            ["/bin/sh", "-c", _WRITE_FILE_SCRIPT, "executor-write", path, f"{mode:o}" if mode else "",
             "1" if make_parents else ""],
            cwd="/", env={"PATH": "/usr/local/bin:/usr/bin:/bin"})
        code, message, written = await _pipe_through(proc, data)
        if code != 0:
            raise _file_error(path, "writing", code, message)
        return written

    async def release(self, remove_files: bool = False) -> None:
        """The task is closed: free what the sandbox holds; remove its files if asked."""

    def take_notice(self) -> str | None:
        """A one-off note about the sandbox's life since the last call (e.g. "container X was
        gone and has been recreated; files kept"), for the core to append to the next
        Exit.message; None when there is nothing to tell. Reading it clears it."""
        return None


#: ``Options`` by a name that the ``Backend.Options`` class attribute does not shadow in the class body.
BackendOptions = Options

_IDENTITY_LOCK = threading.Lock()


class Backend(abc.ABC):
    """One configured place where commands run."""

    #: The config name of this kind of backend: local, docker, ssh, ...
    kind: ClassVar[str]
    #: The pydantic model of this backend's options (``backends.<name>`` in config).
    Options: ClassVar[type[Options]] = Options

    def __init__(self, name: str, options: BackendOptions, *, state_dir: Path) -> None:
        self.name = name
        self.options = options
        self.state_dir = state_dir  # a directory of this backend's own under the daemon's state dir
        self.hidden_paths: list[str] = []  # see hide()

    _instance_id: str | None = None

    @property
    def instance_id(self) -> str:
        """This daemon's id for this backend, kept in ``state_dir`` (``_shared.identity``): what the
        backend makes outside the daemon carries it, so a restarted daemon finds its own again and
        two daemons sharing an account never touch each other's. Read (or made) on first use, once,
        whichever thread asks first."""
        if self._instance_id is None:
            with _IDENTITY_LOCK:
                if self._instance_id is None:
                    self._instance_id = identity.instance_id(self.state_dir)
        return self._instance_id

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

    def hide(self, paths: Sequence[str]) -> None:
        """Paths no command may see: the core calls it once, before ``start()``, with the daemon's
        config file, every ``token_file``, the TLS key, the unix socket(s) and any file a backend
        option names as a secret. A backend whose commands share the daemon's filesystem (local)
        hides them; others keep the list and may ignore it. Calls add to the list."""
        self.hidden_paths.extend(str(p) for p in paths)

    def startup_notice(self) -> str | None:
        """A line the daemon logs as a warning at startup (e.g. "commands run unisolated on the
        host"); None when there is nothing to warn about."""
        return None

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

    def warm_shells(self) -> int:
        """How many pre-started task shells the core keeps ready for new tasks (0: none). A backend
        that says more than 0 gives them a place to start in: ``pool_sandbox``."""
        return 0

    async def pool_sandbox(self) -> Sandbox:
        """Where pre-started shells wait: a neutral directory of the backend, shared by no task.
        Each shell is handed to one new task only (it enters the task's directory and takes the
        task's environment then) and never comes back to the pool."""
        raise BackendError("this backend keeps no pre-started shells", ErrorKind.FAILED_PRECONDITION)


# ---------------------------------------------------------------------------
# Helpers for backends
# ---------------------------------------------------------------------------

from ._shared.kill import (  # noqa: E402 - re-exported: the names backends and tests import
    KILL_SESSION_ONLY, KILL_SESSION_SCRIPT, KILL_SUBREAPER, KILL_SUBREAPER_IF_PYTHON, KILL_TREE_FUNCTION,
    KILL_TREE_SCRIPT, REAPER_GRACE, REAPER_NAME, REAPER_PY, REAPER_PYTHONS, REAPER_SH, REAPER_START_FAILED,
    REAPER_START_FAILED_LINE, reaper_argv,
)


#: Resolves paths on the sandbox's own filesystem, as the kernel would, with POSIX sh built-ins
#: plus ``readlink`` (only when a symlink is met). stdin: one absolute path a line, with ``\`` and
#: newline escaped as ``\\`` and ``\n``. stdout, per path, NUL-separated: ``L link target`` for each
#: symlink followed, ``!`` after 40 links (a loop), then ``R resolved``. Missing components are kept
#: as written; ``..`` after a symlink goes to the parent of the link's target.
RESOLVE_SCRIPT = r"""
while IFS= read -r p; do
  case $p in *\\*) p=$(printf '%bx' "$p"); p=${p%x} ;; esac
  cur=; rest=$p; hops=0; gone=
  while [ -n "$rest" ]; do
    comp=${rest%%/*}
    case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
    case $comp in
      ''|.) continue ;;
      ..) cur=${cur%/*}; gone=; continue ;;
    esac
    next=$cur/$comp
    if [ -z "$gone" ] && [ -L "$next" ]; then
      hops=$((hops + 1))
      if [ $hops -gt 40 ]; then printf '!\000'; break; fi
      t=$(readlink -- "$next" && printf x) || { echo "executor: cannot read the link $next" >&2; exit 3; }
      t=${t%?x}
      printf 'L\000%s\000%s\000' "$next" "$t"
      case $t in /*) cur= ;; esac
      rest=$t/$rest
    else
      [ -z "$gone" ] && [ ! -e "$next" ] && gone=1
      cur=$next
    fi
  done
  printf 'R\000%s\000' "${cur:-/}"
done
exit 0
"""


@dataclass(frozen=True)
class Resolved:
    """A path as the sandbox's filesystem sees it."""

    path: str  # absolute, every existing component's links followed
    links: tuple[tuple[str, str], ...] = ()  # (link, its target) for each symlink followed, in order
    loop: bool = False  # gave up after 40 links


def encode_path_lines(paths: Sequence[str]) -> bytes:
    """``RESOLVE_SCRIPT``'s input: one path a line, ``\\`` and newline escaped."""
    return b"".join(p.replace("\\", "\\\\").replace("\n", "\\n").encode("utf-8", "surrogateescape") + b"\n"
                    for p in paths)


def parse_resolved(out: bytes) -> list[Resolved]:
    """``RESOLVE_SCRIPT``'s output, one Resolved per input path."""
    fields = [f.decode("utf-8", "surrogateescape") for f in out.split(b"\0")]
    results: list[Resolved] = []
    links: list[tuple[str, str]] = []
    loop = False
    i = 0
    while i < len(fields) - 1:
        tag = fields[i]
        if tag == "L" and i + 2 < len(fields):
            links.append((fields[i + 1], fields[i + 2]))
            i += 3
        elif tag == "!":
            loop = True
            i += 1
        elif tag == "R":
            results.append(Resolved(fields[i + 1], tuple(links), loop))
            links, loop = [], False
            i += 2
        else:
            raise BackendError(f"resolving paths in the sandbox gave unexpected output {tag[:80]!r}", ErrorKind.INTERNAL)
    return results


def resolve_with(path: str, readlink: Any) -> Resolved:
    """``RESOLVE_SCRIPT``'s algorithm for a backend that sees its files directly: ``readlink(p)``
    returns the target of the symlink ``p``, or None when ``p`` is not a symlink (or is missing)."""
    cur = ""
    rest = [c for c in reversed(path.split("/"))]
    links: list[tuple[str, str]] = []
    while rest:
        comp = rest.pop()
        if comp in ("", "."):
            continue
        if comp == "..":
            cur = cur.rpartition("/")[0]
            continue
        nxt = f"{cur}/{comp}"
        target = readlink(nxt)
        if target is None:
            cur = nxt
            continue
        if len(links) >= 40:
            return Resolved(cur or "/", tuple(links), True)
        links.append((nxt, target))
        if target.startswith("/"):
            cur = ""
        rest.extend(reversed(target.split("/")))
    return Resolved(cur or "/", tuple(links))


def _absolute(path: str, base: str, what: str) -> str:
    if "\0" in path:
        raise BackendError(f"{what} contains a NUL byte", ErrorKind.INVALID_ARGUMENT)
    return posixpath.normpath(posixpath.join(base, path)) if not path.startswith("/") else path


def _inside(real_root: str, got: Resolved) -> bool:
    if got.loop:
        return False
    return real_root == "/" or got.path == real_root or got.path.startswith(real_root + "/")


def _describe(got: Resolved, root: str = "") -> str:
    if got.loop:
        return "too many levels of symbolic links"
    prefix = root.rstrip("/") + "/"
    hops = [f"{link[len(prefix):] if root and link.startswith(prefix) else link} -> {t}" for link, t in got.links]
    if not hops:
        return f"it resolves to {got.path}"
    if len(hops) > 4:
        hops = hops[:2] + ["..."] + hops[-1:]
    return ", ".join(hops)


def _check_inside(root: str, real_root: Resolved, asked: str, got: Resolved, what: str) -> str:
    """The resolved path, spelled under ``root``; BackendError(INVALID_ARGUMENT) when it is not inside."""
    if not _inside(real_root.path, got):
        raise BackendError(f"{what} {asked!r} leads outside the task's directory {root} ({_describe(got, root)})",
                           ErrorKind.INVALID_ARGUMENT)
    rel = got.path[len(real_root.path):] if real_root.path != "/" else got.path
    return root.rstrip("/") + rel if rel else root


@dataclass
class ArchivePlan:
    """What an archive will write, relative to its destination (checked by ``plan_archive``)."""

    count: int = 0
    paths: list[str] = field(default_factory=list)  # every member's path
    hardlinks: list[str] = field(default_factory=list)  # every hard link's target
    symlinks: list[str] = field(default_factory=list)  # every symlink the archive makes


def _invalid(message: str) -> BackendError:
    return BackendError(message, ErrorKind.INVALID_ARGUMENT)


def plan_archive(fileobj: Any) -> ArchivePlan:
    """Read a tar archive's headers and refuse what no backend may unpack: absolute or ``..``
    member names, devices and FIFOs, links whose target leaves the destination (absolute or
    ``..`` too far), and any member written through or over a symlink the same archive makes
    (its target would only be known once unpacked). Paths on disk are checked by the caller."""
    plan = ArchivePlan()
    symlinks: set[str] = set()
    paths: dict[str, None] = {}

    def through_link(norm: str) -> str | None:
        parts = norm.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if prefix in symlinks:
                return prefix
        return None

    try:
        with tarfile.open(fileobj=fileobj, mode="r:") as tar:
            for member in tar:
                plan.count += 1
                name = member.name
                if "\0" in name or "\0" in member.linkname:
                    raise _invalid(f"archive member {name!r} contains a NUL byte")
                norm = posixpath.normpath(name)
                if name.startswith("/") or norm == ".." or norm.startswith("../"):
                    raise _invalid(f"archive member {name!r} leaves the destination directory")
                if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
                    raise _invalid(f"archive member {name!r} is a device or FIFO; only files, directories and "
                                   "links are accepted")
                link = through_link(norm) if norm != "." else None
                if link is not None:
                    raise _invalid(f"archive member {name!r} would be written through the link {link!r} that the "
                                   "same archive makes; unpack links in a separate archive")
                if member.issym() or member.islnk():
                    target = member.linkname
                    if target.startswith("/"):
                        raise _invalid(f"archive link {name!r} -> {target!r} points outside the task's directory "
                                       "(absolute link targets are refused)")
                    base = posixpath.dirname(norm) if member.issym() else ""
                    resolved = posixpath.normpath(posixpath.join(base, target))
                    if resolved == ".." or resolved.startswith("../"):
                        raise _invalid(f"archive link {name!r} -> {target!r} points outside the destination "
                                       "directory")
                    if member.islnk():
                        via = through_link(resolved)
                        if via is not None:
                            raise _invalid(f"archive hard link {name!r} -> {target!r} goes through the link "
                                           f"{via!r} that the same archive makes")
                        plan.hardlinks.append(resolved)
                    else:
                        symlinks.add(norm)
                        plan.symlinks.append(norm)
                if norm != ".":
                    paths[norm] = None
    except tarfile.TarError as exc:
        raise _invalid(f"not a valid tar stream: {exc}") from None
    plan.paths = list(paths)
    return plan


async def _read_spool(spool: Any, size: int = 1 << 20) -> AsyncIterator[bytes]:
    while True:
        data = spool.read(size)
        if not data:
            return
        yield data


async def read_all(stream: ByteStream | None) -> bytes:
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


async def _pipe_through(proc: Process, data: AsyncIterator[bytes]) -> tuple[int, str, int]:
    """Write ``data`` to a helper's stdin and close it, reading its output meanwhile (so it never
    blocks on a full pipe); returns its exit code, its stderr (stripped text) and the bytes written.
    The helper is waited for also when ``data`` or a write fails."""
    out = asyncio.ensure_future(read_all(proc.stdout))
    err = asyncio.ensure_future(read_all(proc.stderr)) if proc.stderr is not None else None
    written = 0
    try:
        async for chunk in data:
            written += len(chunk)
            await proc.write(chunk)
        await proc.close_stdin()
    finally:
        code = await proc.wait()
        await out
        message = (await err).decode(errors="replace").strip() if err is not None else ""
    return code, message, written


# Exit codes of the file helpers: 3 missing, 4 not a regular file, 5 a link appeared.
_READ_FILE_SCRIPT = r"""
[ -L "$1" ] && { echo "$1 became a link" >&2; exit 5; }
[ -e "$1" ] || { echo "$1: no such file" >&2; exit 3; }
[ -f "$1" ] || { echo "$1 is not a regular file" >&2; exit 4; }
exec cat -- "$1"
"""
_WRITE_FILE_SCRIPT = r"""
parent=$(dirname -- "$1")
if [ -n "$3" ]; then mkdir -p -- "$parent" || exit 1; fi
[ -d "$parent" ] || { cat >/dev/null; echo "$parent: no such directory (make_parents creates it)" >&2; exit 3; }
[ -L "$1" ] && { cat >/dev/null; echo "$1 became a link" >&2; exit 5; }
if [ -e "$1" ] && [ ! -f "$1" ]; then cat >/dev/null; echo "$1 is not a regular file" >&2; exit 4; fi
umask 022
cat > "$1" || exit 1
if [ -n "$2" ]; then chmod "$2" -- "$1" || exit 1; fi
"""


def _file_error(path: str, doing: str, code: int, message: str) -> BackendError:
    kind = {3: ErrorKind.NOT_FOUND, 4: ErrorKind.INVALID_ARGUMENT, 5: ErrorKind.INVALID_ARGUMENT}.get(code)
    if kind is None:
        full = "No space left on device" in message or "Disk quota exceeded" in message
        kind = ErrorKind.RESOURCE_EXHAUSTED if full else ErrorKind.FAILED_PRECONDITION
    return BackendError(f"{doing} {path} failed: {message or f'exit {code}'}", kind)


def tar_single_file(name: str, data: bytes, mode: int = 0o644) -> bytes:
    """A one-file tar archive (used by tests and simple callers)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = mode
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()

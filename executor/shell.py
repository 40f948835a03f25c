"""Shell sessions: a task's shell state (cwd, exported variables, functions, aliases)
carried from one command to the next, on any backend.

``PersistentShell``: one long-lived ``bash`` per task (every backend feeds stdin to a long-lived
process: the Backend contract). Each command
  is written to its stdin as an ANSI-C quoted string and ``eval``'d at top level, so
  ``cd``/``export``/functions persist and a syntax error cannot desynchronise the shell.
  After the command the shell prints an end marker (with that command's nonce) carrying
  the exit code and cwd on stdout, and a second marker on stderr: the command is done
  when both arrive. ``exit N`` and a TERM (timeout/cancel) go through an EXIT trap that
  also prints the shell's state, so the next shell restores it.

A command never reads the shell's control stream: its stdin is /dev/null or the bytes
the request carried. Killing is done with ``Sandbox.signal_session`` on the shell's
session: the whole process tree inside the backend, TERM then KILL.

The protocol itself (the bash helpers, each command's line, the marker scanner, the wrapped
scripts of background processes and terminals) is ``executor.shell_protocol``; the channel from
the stream readers to the running command is ``executor.shell_channel``. Their names stay
importable from here.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Literal

from executor.backends.base import BackendError, ByteStream, ErrorKind, Process, PushStream, Sandbox
from executor.events import ExitStatus
from executor.shell_channel import Interrupt, Running
# The protocol's names stay importable from here (executor.shell is what the rest of the daemon uses).
from executor.shell_protocol import (
    BASH,
    EXITED_WHILE_STARTING,
    RS,
    SENT,
    US,
    CommandSpec,
    Done,
    Marker,
    MarkerScanner,
    PidHandshake,
    ansi_c_quote,
    command_line,
    new_nonce,
    prelude,
    valid_env_name,
    wrapped_script,
)


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


@dataclass
class CommandResult:
    exit_code: int
    cwd: str
    status: str = ExitStatus.COMPLETED  # an ExitStatus: completed | timed_out | cancelled | backend_error
    message: str = ""
    first_byte_at: float = 0.0


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------

Event = tuple[str, bytes]  # ("stdout" | "stderr", data)
StreamName = Literal["stdout", "stderr"]


class ShellBase:
    """What the task layer sees of a shell, persistent or not."""

    pid: int = 0
    cwd: str
    state: str  # the last known state script ("" = none)

    def __init__(self, sandbox: Sandbox, env: Mapping[str, str], *, cwd: str, state: str = "",
                 kill_grace: float = 2.0) -> None:
        self.sandbox = sandbox
        self.env = dict(env)
        self.cwd = cwd
        self.state = state
        self.kill_grace = kill_grace
        self.ready_nonce = new_nonce()
        self._seq = 0

    @property
    def alive(self) -> bool:
        return False

    def run(self, spec: CommandSpec, *, deadline: float | None) -> AsyncGenerator[Event | CommandResult, None]:
        """The command's events (``SENT`` first), then its CommandResult. Closing the stream early
        kills the command."""
        raise NotImplementedError

    async def snapshot(self) -> str:
        """The state as a script that a fresh bash can eval."""
        return self.state

    def interrupt(self, status: str = ExitStatus.CANCELLED, message: str = "") -> bool:
        """Stop the running command from outside (task closed, daemon draining)."""
        return False

    async def terminate(self) -> None:
        """End the shell and everything in its session."""

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _next_nonce(self) -> str:
        self._seq += 1
        return new_nonce()


class PersistentShell(ShellBase):
    """One long-lived bash in the sandbox; commands cost a write and a read."""

    def __init__(self, sandbox: Sandbox, env: Mapping[str, str], *, cwd: str, state: str = "",
                 kill_grace: float = 2.0) -> None:
        super().__init__(sandbox, env, cwd=cwd, state=state, kill_grace=kill_grace)
        self.proc: Process | None = None
        self._readers: list[asyncio.Task[None]] = []
        self._running: Running | None = None
        self._dead = True
        self._ready: asyncio.Future[int] | None = None  # the pid in the ready marker
        self._start_output = bytearray()  # what the shell printed outside any command (its start)
        self._scanners: list[MarkerScanner] = []

    @property
    def alive(self) -> bool:
        return not self._dead

    def _attach(self, proc: Process) -> asyncio.Future[int]:
        """Start reading a freshly spawned shell's stdout and stderr; returns the future of its
        ready marker (the pid it reports)."""
        ready = self._ready = asyncio.get_running_loop().create_future()
        self._start_output = bytearray()
        self.proc = proc
        self._dead = False
        self._readers = []
        self._scanners = []
        streams: tuple[tuple[ByteStream | None, StreamName], ...] = ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
        for stream, name in streams:
            scanner = MarkerScanner(self.ready_nonce, name == "stdout")
            self._scanners.append(scanner)
            if isinstance(stream, PushStream):  # pushed to us (host pipes): no task between bash and the command
                self._subscribe(stream, scanner, name)
            else:
                self._readers.append(asyncio.create_task(self._pump(stream, scanner, name)))
        return ready

    def _session(self, reported: int) -> int:
        """What signal_session takes: the pid the shell reported, unless the backend names the
        session itself (``Process.session``: spawns each in a pid namespace of their own)."""
        session = self.proc.session if self.proc is not None else None
        return reported if session is None else session

    def _restore_script(self) -> str:
        if self.state:
            return f"eval {ansi_c_quote(self.state)} >/dev/null 2>&1\n"
        if self.cwd and self.cwd != self.sandbox.root:
            return f"builtin cd -- {ansi_c_quote(self.cwd)} 2>/dev/null\n"
        return ""

    async def start(self) -> None:
        """Spawn the shell, restore the saved state, wait until it answers."""
        proc = await self.sandbox.spawn(BASH, cwd=self.sandbox.root, env=self.env)
        ready = self._attach(proc)
        unwritten: BackendError | None = None
        try:
            try:
                await proc.write((prelude(self.ready_nonce) + self._restore_script()).encode())
            except BackendError as exc:  # it ended before reading its setup: ``ready`` tells why it ended
                unwritten = exc
            self.pid = self._session(await asyncio.wait_for(ready, 30))
        except (asyncio.TimeoutError, BackendError) as exc:
            if isinstance(exc, BackendError) and exc.message == EXITED_WHILE_STARTING:
                exc = await self._why_exited(exc)
            await self._discard()
            if isinstance(exc, BackendError):
                raise exc
            if unwritten is not None:
                raise unwritten from exc
            raise BackendError("the task's shell did not start within 30 s", ErrorKind.UNAVAILABLE) from exc

    async def hand_over(self, sandbox: Sandbox, env: Mapping[str, str]) -> None:
        """A pre-started shell (a warm pool's, started in a neutral place) becomes a task's: it enters
        ``sandbox.root`` (made if missing) and takes exactly ``env`` (what differs exported, what is
        not the task's unset, OLDPWD too), in one command through the protocol. Raises
        BackendError when that fails; the shell is then not to be used."""
        root = sandbox.root
        exports = " ".join(f"{k}={ansi_c_quote(v)}" for k, v in env.items() if self.env.get(k) != v)
        drop = " ".join(k for k in self.env if k not in env and valid_env_name(k))
        script = (f"command mkdir -p -- {ansi_c_quote(root)} && builtin cd -- {ansi_c_quote(root)} && "
                  f"{{ builtin unset -v OLDPWD {drop}; {'builtin export ' + exports if exports else ':'}; }}")
        result: CommandResult | None = None
        async for item in self.run(CommandSpec(script), deadline=time.monotonic() + 15):
            if isinstance(item, CommandResult):
                result = item
        if result is None or result.status != "completed" or result.exit_code != 0 or self.cwd != root:
            why = result.message if result is not None and result.message else (
                f"exit code {result.exit_code}" if result is not None else "no result")
            raise BackendError(f"entering {root} failed ({why})")
        self.sandbox, self.env, self.state = sandbox, dict(env), ""

    async def _why_exited(self, exc: BackendError) -> BackendError:
        """The shell ended before its ready marker: the cause, when the backend knows it (its exit
        code or signal, what it printed, the backend's own reason: a pids limit, out of memory, the
        engine gone)."""
        proc = self.proc
        if proc is None:
            return exc
        try:
            code = await asyncio.wait_for(proc.wait(), 5)
        except BackendError as err:  # the backend says why (e.g. RESOURCE_EXHAUSTED naming pids_limit)
            return BackendError(f"{EXITED_WHILE_STARTING}: {err.message}", err.kind)
        except asyncio.TimeoutError:
            return exc
        parts = [f"exit code {code}" if code >= 0 else f"killed by signal {-code}"]
        said = bytes(self._start_output).decode(errors="replace").strip()
        if said:
            parts.append(f"it said: {said[-300:]}")
        try:
            extra = await asyncio.wait_for(proc.why_exited(code), 5)
        except (asyncio.TimeoutError, BackendError):
            extra = ""
        if extra:
            parts.append(extra)
        return BackendError(f"{EXITED_WHILE_STARTING} ({'; '.join(parts)})", exc.kind)

    async def _pump(self, stream: ByteStream | None, scanner: MarkerScanner, name: StreamName) -> None:
        """Read one stream until EOF, routing output to the running command."""
        error: BaseException | None = None
        try:
            if stream is None:  # spawned without a pty, a shell has both streams (the Backend contract)
                raise BackendError(f"the backend gave the task's shell no {name}", ErrorKind.INTERNAL)
            while True:
                data = await stream.read()
                if not data:
                    break
                for item in scanner.feed(data):
                    if isinstance(item, bytes):
                        running = self._running
                        if running is not None and not running.stream_done(name):
                            await running.channel.put_data((name, item))
                        elif running is None and len(self._start_output) < 1024:
                            self._start_output += item[:1024]
                    else:
                        self._on_marker(name, item)
        except BackendError as exc:
            error = exc
        except Exception as exc:  # a transport failure we did not foresee
            error = BackendError(f"reading the shell's {name} failed: {exc}", ErrorKind.LOST)
        finally:
            self._on_eof(name, error)

    def _subscribe(self, stream: PushStream, scanner: MarkerScanner, name: StreamName) -> None:
        """What ``_pump`` does, from the stream's own callbacks: a stream that delivers chunks as they
        arrive (``subscribe``, ``pause``, ``resume``) hands the end marker to the waiting command in
        the same loop turn that read it."""

        def on_data(data: bytes) -> None:
            for item in scanner.feed(data):
                if isinstance(item, bytes):
                    running = self._running
                    if running is not None and not running.stream_done(name):
                        if not running.channel.put_now((name, item)):
                            stream.pause()
                            running.channel.when_space(stream.resume)
                    elif running is None and len(self._start_output) < 1024:
                        self._start_output += item[:1024]
                else:
                    self._on_marker(name, item)

        stream.subscribe(on_data, lambda error: self._on_eof(name, error))

    def _on_marker(self, name: str, marker: Marker) -> None:
        if isinstance(marker, tuple) and marker[0] == "ready":
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(marker[1])
            return
        running = self._running
        if isinstance(marker, Done):
            if marker.state is not None:
                self.state = marker.state
            if marker.exit:
                # The EXIT trap ran, or a command printed what it prints: either way this shell is
                # done with, and its session is killed (see _follow and _discard).
                self._dead = True
            self.cwd = marker.cwd
            if running is not None and (marker.exit or marker.nonce == running.nonce) and running.done is None:
                running.done = marker
                running.channel.put_control(("marker", b""))
        elif running is not None and not running.stderr_done and (
                marker[0] == "errx" or marker[1] == running.nonce):
            running.stderr_done = True
            running.channel.put_control(("marker", b""))

    def _on_eof(self, name: str, error: BaseException | None) -> None:
        self._dead = True
        running = self._running
        if running is not None and error is None and running.stream_done(name):
            return  # this stream already ended the command; its EOF adds nothing
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(error or BackendError(EXITED_WHILE_STARTING, ErrorKind.UNAVAILABLE))
        if running is not None:
            running.channel.put_control(("eof", error))

    async def run(self, spec: CommandSpec, *, deadline: float | None
                  ) -> AsyncGenerator[Event | CommandResult, None]:
        if self._dead:
            if self.proc is not None:
                await self._discard()
            await self.start()
        nonce = self._next_nonce()
        running = Running(nonce)
        self._expect(nonce)
        self._running = running
        try:
            await self._write(command_line(spec, nonce, want_state=spec.want_state).encode())
        except BackendError as exc:
            if self._running is running:
                self._running = None
            yield CommandResult(0, self.cwd, ExitStatus.BACKEND_ERROR, f"could not send the command to the task's shell: {exc.message}")
            return
        follow = self._follow(running, deadline)
        try:
            async for item in follow:
                yield item
        finally:
            await follow.aclose()  # at once, not at garbage collection: a closed stream kills its command

    async def _write(self, data: bytes) -> None:
        """Write to the live shell's stdin (a shell that is not dead has a process)."""
        if self.proc is None:
            raise BackendError("the task's shell is not running", ErrorKind.UNAVAILABLE)
        await self.proc.write(data)

    def _expect(self, nonce: str) -> None:
        for scanner in self._scanners:
            scanner.expect(nonce)

    async def _follow(self, running: Running, deadline: float | None
                      ) -> AsyncGenerator[Event | CommandResult, None]:
        """Relay the running command's output until its end markers, a deadline or an interrupt."""
        self._running = running
        ends = 0  # end markers and EOFs consumed, in stream order: two means both streams are done
        interrupt: Interrupt | None = None
        first_byte = 0.0
        settled = False  # the command has ended (or been killed): nothing left to kill
        try:
            yield SENT
            while ends < 2:
                item = await running.channel.get(None if deadline is None else deadline - time.monotonic())
                if item is None:
                    interrupt = Interrupt(ExitStatus.TIMED_OUT)
                    break
                if item[0] == "interrupt":
                    interrupt = item[1]
                    break
                if item[0] == "eof":
                    ends += 1
                    if item[1] is not None:  # the transport failed
                        settled = True
                        yield CommandResult(0, self.cwd, ExitStatus.BACKEND_ERROR, str(item[1]))
                        return
                    continue
                if item[0] == "marker":
                    ends += 1
                    continue
                if not first_byte:
                    first_byte = time.monotonic()
                yield item
            if interrupt is not None:
                async for event in self._stop(running, interrupt):
                    settled = settled or isinstance(event, CommandResult)
                    yield event
                return
            settled = True
            if running.done is None:
                # The shell went away without reporting (exec, killed, trap removed). When its exit
                # cannot be known (the connection to the backend was lost), that is a backend error,
                # never a normal exit with a made-up code.
                try:
                    code = await self._exit_code()
                except BackendError as exc:
                    yield CommandResult(0, self.cwd, ExitStatus.BACKEND_ERROR, exc.message, first_byte)
                    return
                yield CommandResult(code, self.cwd, ExitStatus.COMPLETED,
                                    "the task's shell exited; the next command starts a new one with the last saved state",
                                    first_byte)
                return
            if running.done.exit:
                # The shell said it is exiting. That marker carries no nonce (the command could have
                # printed it): whatever is left of this shell's session ends now, so nothing of the
                # command outlives its Exec.
                await self._signal(signal.SIGKILL)
                self._dead = True
            yield CommandResult(running.done.rc, running.done.cwd, ExitStatus.COMPLETED, "", first_byte)
        except (asyncio.CancelledError, GeneratorExit):
            # The caller went away mid-command: the RPC was cancelled (CancelledError), or the consumer
            # closed this stream (GeneratorExit from aclose). Kill the command's tree, then let it through.
            if not settled:
                await asyncio.shield(self._kill_tree())
            raise
        finally:
            running.channel.close()
            if self._running is running:  # never clear a newer command's routing
                self._running = None

    def interrupt(self, status: str = ExitStatus.CANCELLED, message: str = "") -> bool:
        """Stop the running command from outside (task closed, daemon draining)."""
        running = self._running
        if running is None:
            return False
        running.channel.put_control(("interrupt", Interrupt(status, message)))
        return True

    async def _stop(self, running: Running, interrupt: Interrupt) -> AsyncGenerator[Event | CommandResult, None]:
        """TERM the shell's session; collect what the command still prints; KILL the rest.

        The grace is waited only while something still holds the shell's streams: a stream ends with
        its end marker (the shell's EXIT trap reports on the way out) or its EOF, and once both have
        ended the KILL follows at once, so a command that dies on TERM ends right at its deadline."""
        await self._signal(signal.SIGTERM)
        grace_end = time.monotonic() + self.kill_grace
        ended = 0
        while time.monotonic() < grace_end and ended < 2:
            item = await running.channel.get(grace_end - time.monotonic())
            if item is None:
                break
            if item[0] in ("eof", "marker"):
                ended += 1
            elif item[0] in ("stdout", "stderr"):
                yield item
        await self._kill_tree(term_first=False)
        # Drain what was already read, without waiting.
        while running.channel.items:
            item = running.channel.items.popleft()
            if item[0] in ("stdout", "stderr"):
                yield item
        code = -signal.SIGKILL if running.done is None else running.done.rc
        yield CommandResult(code, self.cwd, interrupt.status, interrupt.message)

    async def _signal(self, sig: int) -> None:
        if self.pid:
            try:
                await self.sandbox.signal_session(self.pid, sig)
            except BackendError:
                pass

    async def _kill_tree(self, term_first: bool = True) -> None:
        """Make sure nothing of this shell's session survives; the shell restarts next time."""
        if term_first:
            await self._signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._wait_dead(), self.kill_grace)
            except asyncio.TimeoutError:
                pass
        await self._signal(signal.SIGKILL)
        self._dead = True

    async def _wait_dead(self) -> None:
        while not self._dead:
            await asyncio.sleep(0.01)

    async def _exit_code(self) -> int:
        """The shell's exit code (-1 when it does not answer within 5 s). Raises BackendError when
        the backend cannot know it (the connection was lost)."""
        if self.proc is None:
            return -1
        try:
            return await asyncio.wait_for(self.proc.wait(), 5)
        except asyncio.TimeoutError:
            return -1

    async def snapshot(self) -> str:
        """Ask the live shell for its state (one round trip)."""
        if self._dead or self._running is not None:
            return self.state
        nonce = self._next_nonce()
        running = Running(nonce)
        self._expect(nonce)
        self._running = running
        try:
            await self._write(f"\\__ex_end_state 0; \\__ex_mark {nonce}\n".encode())
            while running.done is None or not running.stderr_done:
                item = await running.channel.get(10)
                if item is None or item[0] == "eof":
                    break
        except BackendError:
            return self.state
        finally:
            running.channel.close()
            if self._running is running:
                self._running = None
        if running.done is not None and not running.done.exit and running.done.state is not None:
            self._dead = False  # a snapshot does not end the shell
            self.state = running.done.state
        return self.state

    async def terminate(self) -> None:
        """End the shell: an idle one gets EOF and exits at once (bash reading its input runs no
        trap until the grace is over); then nothing of its session may survive."""
        if self.proc is None:
            return
        if not self._dead and self._running is None:
            # A backend that can tell the tree is gone spares the kill walk: there, give bash (and
            # its reaper) longer to end by themselves, as a busy machine may need.
            cheap = type(self.proc).tree_gone is not Process.tree_gone
            try:
                await self.proc.close_stdin()
                await asyncio.wait_for(self._wait_dead(), 5.0 if cheap else 0.5)
            except (asyncio.TimeoutError, BackendError):
                pass
        if not self._dead:
            await self._kill_tree(term_first=True)
        elif not await self._tree_gone(5.0):  # the reaper may be ending what the shell left (`cmd &`)
            await self._signal(signal.SIGKILL)  # what the shell left in its session (`cmd &`)
        await self._discard()

    async def _tree_gone(self, wait: float = 0.5) -> bool:
        """The backend knows nothing of the shell's spawn is left (``Process.tree_gone``), waiting
        up to ``wait`` s for it to say so: then no kill walk is needed (one walk reads every process
        of the sandbox: with 1,000 tasks in one container, closing them all would take minutes)."""
        proc = self.proc
        if proc is None:
            return True
        if type(proc).tree_gone is Process.tree_gone:
            return False
        if proc.tree_gone():
            return True
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
        except (asyncio.TimeoutError, BackendError):
            return False
        return proc.tree_gone()

    async def _discard(self) -> None:
        if self.proc is not None and not await self._tree_gone():
            # Nothing of a shell we stop using may keep running unsupervised (a command that
            # printed a fake exit marker, or what the shell left behind).
            await self._signal(signal.SIGKILL)
        proc, self.proc = self.proc, None
        for task in self._readers:
            task.cancel()
        self._readers = []
        if proc is not None:
            try:
                await proc.close_stdin()
            except BackendError:
                pass
            try:
                await asyncio.wait_for(proc.wait(), 2)
            except (asyncio.TimeoutError, BackendError):
                pass
            await proc.detach()
        self._dead = True


def now() -> float:
    return time.monotonic()


__all__ = [
    # sessions (this module)
    "CommandResult",
    "Event",
    "Interrupt",
    "PersistentShell",
    "ShellBase",
    # the protocol (executor.shell_protocol), importable from here as before
    "BASH",
    "EXITED_WHILE_STARTING",
    "RS",
    "SENT",
    "US",
    "CommandSpec",
    "Done",
    "MarkerScanner",
    "PidHandshake",
    "ansi_c_quote",
    "command_line",
    "new_nonce",
    "prelude",
    "valid_env_name",
    "wrapped_script",
]

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
"""

from __future__ import annotations

import asyncio
import collections
import re
import secrets
import signal
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

from executor.backends.base import BackendError, ByteStream, ErrorKind, Process, PushStream, Sandbox
from executor.events import ExitStatus

BASH = ["bash", "--noprofile", "--norc"]
RS, US = b"\x1e", b"\x1f"

# ---------------------------------------------------------------------------
# Quoting and the bash side of the protocol
# ---------------------------------------------------------------------------

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789 _-+=.,/:@%^()[]{}<>!?#*&|;~")


def ansi_c_quote(value: str | bytes) -> str:
    """Quote as bash $'...': byte-exact for any input without NUL."""
    data = value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
    if b"\0" in data:
        raise ValueError("NUL bytes cannot be passed to a shell")
    out = ["$'"]
    for b in data:
        if b in _SAFE:
            out.append(chr(b))
        else:
            out.append(f"\\x{b:02x}")
    out.append("'")
    return "".join(out)


_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def valid_env_name(name: str) -> bool:
    return bool(_ENV_NAME.match(name))


def new_nonce() -> str:
    """A fresh per-command nonce: 96 random bits, hex."""
    return secrets.token_hex(12)


def prelude(ready_nonce: str) -> str:
    """Shell code defining the protocol's helpers; ends by printing the ready marker.

    There is no long-lived secret in the shell. Each command's line ends with
    ``\\__ex_end RC WANT_STATE; \\__ex_mark NONCE``: the nonce is text the daemon wrote after the
    ``eval``, so the command's own code cannot read it while it runs. The helpers are readonly
    functions and every word of the line is quoted (no function or alias of the command replaces
    them). ``__ex_end`` enters posix mode (an assignment: ``unset``/``trap``/``set`` are then the
    special builtins, never functions of that name), removes a function named ``builtin`` (the shell
    exits if it cannot), clears the DEBUG trap and turns off verbose and history (which would show the
    line); ``__ex_mark`` prints both markers with ``builtin printf`` and leaves posix mode.

    That is all it does, on purpose (each command pays for it): code a command leaves in the shell
    with more power (a DEBUG trap with function tracing or extdebug, signal traps, disabled builtins)
    can still see the nonce once the command's own code has returned, and end its Exec with a made-up
    code; what it keeps running is killed by the next command's deadline, CloseTask or the idle reaper
    (docs/security.md, Framing).

    Markers: stdout RS US "EX:" nonce ":" rc ":" len(cwd) ":" len(state) ":" cwd state RS; stderr
    RS US "EX:" nonce RS. On exit the EXIT trap prints RS US "EXX:" rc ":" len(cwd) ":" len(state) ":"
    cwd state RS and RS US "EXX" RS: no nonce (the command could forge it), so the daemon kills the
    shell's session when it sees one. Ready: RS US "EXR:" ready_nonce ":" pid RS."""
    if not re.fullmatch(r"[0-9a-f]+", ready_nonce):
        raise ValueError("the ready nonce must be hex")
    fatal = ': "${3:?the framing of the task shell was tampered with: the shell exits}"'
    return f"""shopt -s expand_aliases 2>/dev/null
command_not_found_handle() {{  # say why, not only that: sandboxes expose less than the user's login
  builtin printf 'bash: %s: command not found (executor: the task'"'"'s PATH is %s; tools from the daemon user'"'"'s own setup, such as pyenv, nvm or conda, are not on it unless the backend passes them: env_passthrough, and read_only_paths on the local sandbox)\n' "$1" "$PATH" >&2
  return 127
}}
__ex_state() {{
  builtin printf 'builtin cd -- %q 2>/dev/null\\n' "$PWD"
  builtin export -p
  builtin declare -f
  builtin alias -p
}}
__ex_end() {{
  __ex_rc=$1 __ex_st= __ex_x= __ex_px=${{POSIXLY_CORRECT+1}} POSIXLY_CORRECT=${{POSIXLY_CORRECT-y}}
  case :$SHELLOPTS:/$- in *:history:*|*/*[xv]*) __ex_opts ;; *:posix:*) ;; *) __ex_fatal ;; esac
  unset -f builtin || __ex_fatal
  trap - DEBUG
  __ex_lp=${{#PWD}} __ex_ls=0
  case $PWD in *[![:ascii:]]*) __ex_bytes ;; esac
}}
__ex_opts() {{  # history and verbose would show the next line; xtrace is restored after the markers
  case $- in *x*) __ex_x=1 ;; esac
  set +xv +o history
  case :$SHELLOPTS:/$- in *:history:*|*/*[xv]*) __ex_fatal ;; *:posix:*) ;; *) __ex_fatal ;; esac
}}
__ex_fatal() {{
  trap - 0  # exit without the EXIT trap, which would call a function named builtin
  {fatal}
}}
__ex_end_state() {{  # __ex_end, and the shell's state in the marker (a snapshot)
  __ex_s=$(__ex_state)
  \\__ex_end "$1"
  __ex_st="$__ex_s
" __ex_s=
  __ex_ls=${{#__ex_st}}
  case $PWD$__ex_st in *[![:ascii:]]*) __ex_bytes ;; esac
}}
__ex_bytes() {{  # lengths in bytes, not characters
  local LC_ALL=C
  __ex_lp=${{#PWD}} __ex_ls=${{#__ex_st}}
}}
__ex_mark() {{
  builtin printf %s $'\\036\\037EX:'"$1:$__ex_rc:$__ex_lp:$__ex_ls:$PWD$__ex_st"$'\\036'  # one %s: cheaper than a format
  builtin printf %s $'\\036\\037EX:'"$1"$'\\036' >&2
  case $__ex_px$__ex_x in
    '') unset POSIXLY_CORRECT; builtin shopt -s expand_aliases ;;  # leaving posix mode turns it off
    *) __ex_post ;;
  esac
}}
__ex_post() {{
  __ex_st=
  case $__ex_x in 1) set -x ;; esac
  case $__ex_px in '') unset POSIXLY_CORRECT; builtin shopt -s expand_aliases ;; esac
}}
__ex_exit() {{
  local __ex_rc=$1 __ex_st
  __ex_st=$(__ex_state); __ex_st="$__ex_st
"
  case "$PWD$__ex_st" in *[![:ascii:]]*) local LC_ALL=C ;; esac  # lengths in bytes, not characters
  builtin printf '\\036\\037EXX:%d:%d:%d:%s%s\\036' "$__ex_rc" "${{#PWD}}" "${{#__ex_st}}" "$PWD" "$__ex_st"
  builtin printf '\\036\\037EXX\\036' >&2
}}
readonly -f __ex_state __ex_end __ex_opts __ex_fatal __ex_end_state __ex_bytes __ex_mark __ex_post __ex_exit
trap '\\__ex_exit $?' EXIT
trap '\\exit 143' TERM
builtin printf '\\036\\037EXR:%s:%d\\036' {ready_nonce} "$$"
"""


#: The first item of a shell's ``run`` stream: the command is now in the shell (written, or its
#: process spawned). A consumer that stops reading from here on still kills it.
SENT = ("sent", b"")

#: The shell's end before its ready marker, when nothing more is known (then the cause is added).
EXITED_WHILE_STARTING = "the task's shell exited while starting"


@dataclass
class CommandSpec:
    """One command, as the shell layer needs it."""

    command: str
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None  # absolute path inside the sandbox, already validated
    stdin: bytes = b""
    merge_stderr: bool = False
    #: Report the shell's state (functions, aliases, variables, cwd) with the end marker, in the same
    #: round trip: the command may have changed what the gate must know for the next one.
    want_state: bool = False


def command_line(spec: CommandSpec, nonce: str, final: bool = False, *, want_state: bool = False) -> str:
    """The shell code that runs one command in the current shell and reports it.

    ``nonce`` appears only after the ``eval``: the command cannot know it while it runs. Every
    command word is quoted (``\\eval``) so no alias the task defined can rewrite the line."""
    end = f"\\{'__ex_end_state' if want_state else '__ex_end'} $?; \\__ex_mark {nonce}\n"
    if not (spec.env or spec.stdin or spec.workdir is not None or final):
        # The common case in one short line: bash reads its input a byte at a time from a pipe.
        merge = " 2>&1" if spec.merge_stderr else ""
        return f"\\eval {ansi_c_quote(spec.command)} </dev/null{merge}; {end}"
    parts = [f"__ex_c={ansi_c_quote(spec.command)}"]
    restore: list[str] = []
    for i, (name, value) in enumerate(spec.env.items()):
        parts.append(f'__ex_s{i}=${{{name}+1}}; __ex_o{i}=${{{name}-}}; export {name}={ansi_c_quote(value)}')
        restore.append(f'if [ -n "$__ex_s{i}" ]; then {name}=$__ex_o{i}; else unset {name}; fi')
    redirect = "< /dev/null"
    if spec.stdin:
        import base64

        parts.append(f"__ex_in={base64.b64encode(spec.stdin).decode()}")
        redirect = '< <(builtin printf %s "$__ex_in" | base64 -d)'
    if spec.merge_stderr:
        redirect += " 2>&1"
    run = f'\\eval "$__ex_c" {redirect}; __ex_r=$?'
    if spec.workdir is not None:
        run = (
            f"__ex_wd=$PWD; if builtin cd -- {ansi_c_quote(spec.workdir)}; then {run}; "
            f'builtin cd -- "$__ex_wd" 2>/dev/null; else __ex_r=1; fi'
        )
    parts.append(run)
    parts.extend(restore)
    parts.append("unset __ex_in __ex_c")
    if final:  # a one-shot shell exits: its EXIT trap reports the result and the state
        parts.append("builtin exit $__ex_r")
    # One line, and the nonce after it: the set-up runs inside an eval (parsed after the command's
    # aliases, so they may break it, never the framing around it).
    return f"__ex_r=2; \\eval {ansi_c_quote(chr(10).join(parts))}; " + end.replace("$?", "$__ex_r")


# ---------------------------------------------------------------------------
# The Python side: scanning output for markers
# ---------------------------------------------------------------------------


@dataclass
class Done:
    nonce: str  # the command's nonce ("" for an exit claim, which carries none)
    rc: int
    cwd: str
    state: str | None  # set when the shell sent its state (exiting, or snapshot)
    exit: bool = False  # printed by the EXIT trap: the shell says it is going away


_MAX_CWD = 1 << 16
_MAX_STATE = 1 << 26
_HEAD_OUT = re.compile(rb"\x1e\x1fEX:([0-9a-f]{1,64}):(\d{1,10}):(\d{1,6}):(\d{1,9}):")
_HEAD_EXIT = re.compile(rb"\x1e\x1fEXX:(\d{1,10}):(\d{1,6}):(\d{1,9}):")
_HEAD_ERR = re.compile(rb"\x1e\x1fEX(?::([0-9a-f]{1,64})|X)\x1e")
_HEAD_READY = re.compile(rb"\x1e\x1fEXR:(?:([0-9a-f]{1,64}):)?(\d{1,10})\x1e")
# What a marker can look like before it is complete (a longer non-match is plain output).
_PARTIAL = re.compile(rb"\x1e(?:\x1f(?:E(?:X(?:[:XR][0-9a-f:]*)?)?)?)?")
_PARTIAL_MAX = 96


class MarkerScanner:
    """Splits one output stream into payload bytes and protocol markers.

    A command marker counts only with the nonce the daemon expects (``expect``); anything else
    that looks like one is output, passed through byte-exact. Bytes that might be the start of a
    marker are held back until they can be told apart."""

    def __init__(self, nonce: str = "", stdout: bool = True) -> None:
        self.nonce = nonce.encode()
        self.stdout = stdout
        self.buf = bytearray()

    def expect(self, nonce: str) -> None:
        """The nonce of the command now running (or of the ready marker while starting)."""
        self.nonce = nonce.encode()

    def feed(self, data: bytes) -> list:
        """Splits data into an ordered list of payload chunks (bytes) and markers: Done
        records (stdout), ("err", nonce) / ("errx", "") tuples (stderr), ("ready", pid) tuples."""
        if not self.buf:
            if RS not in data:  # fast path: no marker can start in this chunk
                return [data] if data else []
        self.buf += data
        items: list = []
        buf = self.buf
        out = bytearray()
        while True:
            i = buf.find(RS)
            if i < 0:
                out += buf
                buf.clear()
                break
            out += buf[:i]
            del buf[:i]
            markers: list = []
            n = self._parse(buf, markers)
            if n == 0:  # incomplete: wait for more
                break
            if n < 0:  # not a marker: pass the RS byte through
                out += buf[:1]
                del buf[:1]
                continue
            del buf[:n]
            if out:
                items.append(bytes(out))
                out.clear()
            items.extend(markers)
        if out:
            items.append(bytes(out))
        return items

    def _parse(self, buf: bytearray, markers: list) -> int:
        """At buf[0] == RS: length of a complete marker, 0 if incomplete, -1 if none."""
        m = _HEAD_READY.match(buf)
        if m is not None:
            if (m[1] or b"") != self.nonce:
                return -1
            markers.append(("ready", int(m[2])))
            return m.end()
        if self.stdout:
            m = _HEAD_OUT.match(buf)
            exit_ = False
            if m is not None:
                if m[1] != self.nonce or not self.nonce:
                    return -1
                rc, cwdlen, statelen = int(m[2]), int(m[3]), int(m[4])
            else:
                m = _HEAD_EXIT.match(buf)
                if m is None:
                    return self._incomplete(buf)
                exit_ = True
                rc, cwdlen, statelen = int(m[1]), int(m[2]), int(m[3])
            if cwdlen > _MAX_CWD or statelen > _MAX_STATE:
                return -1
            pos = m.end()
            total = pos + cwdlen + statelen + 1
            if len(buf) < total:
                return 0
            if buf[total - 1] != RS[0]:
                return -1
            cwd = bytes(buf[pos:pos + cwdlen]).decode("utf-8", "surrogateescape")
            state = bytes(buf[pos + cwdlen:total - 1]).decode("utf-8", "surrogateescape") if statelen else None
            markers.append(Done("" if exit_ else m[1].decode(), rc, cwd, state, exit_))
            return total
        m = _HEAD_ERR.match(buf)
        if m is None:
            return self._incomplete(buf)
        if m[1] is None:
            markers.append(("errx", ""))
        elif m[1] != self.nonce or not self.nonce:
            return -1
        else:
            markers.append(("err", m[1].decode()))
        return m.end()

    @staticmethod
    def _incomplete(buf: bytearray) -> int:
        if len(buf) < _PARTIAL_MAX and _PARTIAL.fullmatch(buf) is not None:
            return 0
        return -1


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


class Interrupt(Exception):
    """Raised into a running command to stop it: timeout, cancel or task close."""

    def __init__(self, status: str, message: str = "") -> None:
        super().__init__(message or status)
        self.status = status
        self.message = message


# ---------------------------------------------------------------------------
# Sessions
# ---------------------------------------------------------------------------

Event = tuple[str, bytes]  # ("stdout" | "stderr", data)


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

    async def run(self, spec: CommandSpec, *, deadline: float | None
                  ) -> AsyncIterator[Event | CommandResult]:
        raise NotImplementedError
        yield  # pragma: no cover

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


class _Channel:
    """Output of the running command, from the stream readers to its consumer.

    Data waits for space (backpressure reaches the command through the pipe): a task producer
    awaits ``put_data``; a callback producer uses ``put_now`` and, when told the channel is full,
    pauses its stream until ``when_space`` calls back. Control items (markers, EOF, interrupts)
    never wait. Closing releases a blocked producer."""

    def __init__(self, limit: int = 64) -> None:
        self.items: collections.deque = collections.deque()
        self.limit = limit
        self.closed = False
        self._reader: asyncio.Future | None = None  # the consumer, waiting for an item
        self._on_space: list = []  # producers waiting for room, called once there is

    def _wake(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(True)

    async def put_data(self, item) -> None:
        while len(self.items) >= self.limit and not self.closed:
            room = asyncio.get_running_loop().create_future()
            self.when_space(lambda: room.done() or room.set_result(None))
            await room
        if not self.closed:
            self.items.append(item)
            self._wake()

    def put_now(self, item) -> bool:
        """Queue data without waiting; False when the channel is now full (pause, then ``when_space``)."""
        if self.closed:
            return True
        self.items.append(item)
        self._wake()
        return len(self.items) < self.limit

    def when_space(self, callback) -> None:
        """Call ``callback`` once, when the channel has room again or is closed."""
        if self.closed or len(self.items) < self.limit:
            callback()
        else:
            self._on_space.append(callback)

    def _space(self) -> None:
        if self._on_space:
            callbacks, self._on_space = self._on_space, []
            for callback in callbacks:
                callback()

    def put_control(self, item) -> None:
        self.items.append(item)
        self._wake()

    async def get(self, timeout: float | None):
        """The next item; None when the timeout passes first. (A future and a timer: this runs
        for every command, and asyncio.wait_for would start a task per wait.)"""
        while not self.items:
            if timeout is not None and timeout <= 0:
                return None
            loop = asyncio.get_running_loop()
            self._reader = loop.create_future()
            timer = loop.call_later(timeout, self._wake) if timeout is not None else None
            try:
                await self._reader
            finally:
                self._reader = None
                if timer is not None:
                    timer.cancel()
            if not self.items and timeout is not None:
                return None  # the timer fired first
        item = self.items.popleft()
        if item[0] in ("stdout", "stderr"):
            # Coalesce what is already queued for the same stream: fewer, larger messages.
            data = item[1]
            while self.items and self.items[0][0] == item[0] and len(data) < (1 << 20):
                if not isinstance(data, bytearray):
                    data = bytearray(data)
                data += self.items.popleft()[1]
            item = (item[0], bytes(data)) if isinstance(data, bytearray) else item
        if len(self.items) < self.limit:
            self._space()
        return item

    def close(self) -> None:
        self.closed = True
        self.items.clear()
        self._space()


class _Running:
    """Bookkeeping for the command in flight on a persistent shell."""

    def __init__(self, nonce: str) -> None:
        self.nonce = nonce
        self.channel = _Channel()
        self.done: Done | None = None
        self.stderr_done = False

    def stream_done(self, name: str) -> bool:
        return self.done is not None if name == "stdout" else self.stderr_done


class PersistentShell(ShellBase):
    """One long-lived bash in the sandbox; commands cost a write and a read."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.proc: Process | None = None
        self._readers: list[asyncio.Task] = []
        self._running: _Running | None = None
        self._dead = True
        self._ready: asyncio.Future | None = None
        self._scanners: list[MarkerScanner] = []
        self.restarts = 0

    @property
    def alive(self) -> bool:
        return not self._dead

    def _attach(self, proc: Process) -> None:
        """Start reading a freshly spawned shell's stdout and stderr."""
        self._ready = asyncio.get_running_loop().create_future()
        self._start_output = bytearray()  # what the shell printed outside any command (its start)
        self.proc = proc
        self._dead = False
        self._readers = []
        self._scanners = []
        for stream, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            scanner = MarkerScanner(self.ready_nonce, name == "stdout")
            self._scanners.append(scanner)
            if isinstance(stream, PushStream):  # pushed to us (host pipes): no task between bash and the command
                self._subscribe(stream, scanner, name)
            else:
                self._readers.append(asyncio.create_task(self._pump(stream, scanner, name)))

    def _session(self, reported: int) -> int:
        """What signal_session takes: the pid the shell reported, unless the backend names the
        session itself (``Process.session``: spawns each in a pid namespace of their own)."""
        session = getattr(self.proc, "session", None)
        return reported if session is None else session

    def _restore_script(self) -> str:
        if self.state:
            return f"eval {ansi_c_quote(self.state)} >/dev/null 2>&1\n"
        if self.cwd and self.cwd != self.sandbox.root:
            return f"builtin cd -- {ansi_c_quote(self.cwd)} 2>/dev/null\n"
        return ""

    async def start(self) -> None:
        """Spawn the shell, restore the saved state, wait until it answers."""
        self._attach(await self.sandbox.spawn(BASH, cwd=self.sandbox.root, env=self.env))
        try:
            await self.proc.write((prelude(self.ready_nonce) + self._restore_script()).encode())
            self.pid = self._session(await asyncio.wait_for(self._ready, 30))
        except (asyncio.TimeoutError, BackendError) as exc:
            if isinstance(exc, BackendError) and exc.message == EXITED_WHILE_STARTING:
                exc = await self._why_exited(exc)
            await self._discard()
            if isinstance(exc, BackendError):
                raise exc
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

    async def _pump(self, stream: ByteStream, scanner: MarkerScanner, name: str) -> None:
        """Read one stream until EOF, routing output to the running command."""
        error: BaseException | None = None
        try:
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

    def _subscribe(self, stream: PushStream, scanner: MarkerScanner, name: str) -> None:
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

    def _on_marker(self, name: str, marker) -> None:
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
                  ) -> AsyncIterator[Event | CommandResult]:
        if self._dead:
            if self.proc is not None:
                await self._discard()
                self.restarts += 1
            await self.start()
        nonce = self._next_nonce()
        running = _Running(nonce)
        self._expect(nonce)
        self._running = running
        try:
            await self.proc.write(command_line(spec, nonce, want_state=spec.want_state).encode())
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

    def _expect(self, nonce: str) -> None:
        for scanner in self._scanners:
            scanner.expect(nonce)

    async def _follow(self, running: _Running, deadline: float | None
                      ) -> AsyncIterator[Event | CommandResult]:
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
                kind, data = item
                if kind == "interrupt":
                    interrupt = data
                    break
                if kind == "eof":
                    ends += 1
                    if data is not None:  # the transport failed
                        settled = True
                        yield CommandResult(0, self.cwd, ExitStatus.BACKEND_ERROR, str(data))
                        return
                    continue
                if kind == "marker":
                    ends += 1
                    continue
                if not first_byte:
                    first_byte = time.monotonic()
                yield (kind, data)
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

    async def _stop(self, running: _Running, interrupt: Interrupt) -> AsyncIterator[Event | CommandResult]:
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
            kind, data = item
            if kind in ("eof", "marker"):
                ended += 1
            elif kind in ("stdout", "stderr"):
                yield (kind, data)
        await self._kill_tree(term_first=False)
        # Drain what was already read, without waiting.
        while running.channel.items:
            kind, data = running.channel.items.popleft()
            if kind in ("stdout", "stderr"):
                yield (kind, data)
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
        running = _Running(nonce)
        self._expect(nonce)
        self._running = running
        try:
            await self.proc.write(f"\\__ex_end_state 0; \\__ex_mark {nonce}\n".encode())
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


# ---------------------------------------------------------------------------
# Wrapped spawns: background processes and terminals, started with the task's state
# ---------------------------------------------------------------------------


def wrapped_script(state: str, command: str | None, *, cwd: str | None = None,
                   env: Mapping[str, str] | None = None, workdir: str | None = None, merge_stderr: bool = False,
                   interactive: bool = False) -> str:
    """A bash script that reports its pid, restores the task's state and runs ``command``
    (or an interactive shell). Its exit status is the command's."""
    # The pid comes first, before anything of the task runs: no secret is needed (none in argv).
    lines = ["builtin printf '\\036\\037EXR:%d\\036' \"$$\""]
    if state:
        lines.append(f"eval {ansi_c_quote(state)} >/dev/null 2>&1")
    elif cwd:
        lines.append(f"builtin cd -- {ansi_c_quote(cwd)} 2>/dev/null")
    for name, value in (env or {}).items():
        lines.append(f"export {name}={ansi_c_quote(value)}")
    if workdir:
        lines.append(f"builtin cd -- {ansi_c_quote(workdir)} || exit 1")
    if merge_stderr:
        lines.append("exec 2>&1")
    if interactive:
        # An interactive bash that keeps the task's exported variables and functions.
        lines.append("export -f $(compgen -A function) >/dev/null 2>&1")
        lines.append("exec bash --noprofile --norc -i")
    else:
        lines.append("shopt -s expand_aliases")
        lines.append(f"eval {ansi_c_quote(command or '')}")
    return "\n".join(lines) + "\n"


class PidHandshake:
    """Strips the ready marker off the front of a wrapped process's stdout."""

    def __init__(self) -> None:
        self.scanner = MarkerScanner("", True)
        self.pid: int | None = None
        self.passthrough = False

    def feed(self, data: bytes) -> bytes:
        if self.passthrough:
            return data
        out = bytearray()
        for item in self.scanner.feed(data):
            if isinstance(item, bytes):
                out += item
            elif isinstance(item, tuple) and item[0] == "ready":
                self.pid = item[1]
        if self.pid is not None:
            self.passthrough = True
            out += self.scanner.buf
            self.scanner.buf.clear()
        return bytes(out)


def now() -> float:
    return time.monotonic()


__all__ = [
    "ansi_c_quote",
    "CommandSpec",
    "CommandResult",
    "PersistentShell",
    "ShellBase",
    "wrapped_script",
    "PidHandshake",
    "valid_env_name",
]


"""The shell protocol: how the daemon talks to a task's ``bash`` (see ``executor.shell``).

The bash side (``prelude``: the helpers that print the end markers; ``command_line``: one command's
line; ``wrapped_script``: a background process's or terminal's start) and the Python side
(``MarkerScanner``: splitting a stream into output and markers; ``PidHandshake``). Nothing here
drives a process: ``executor.shell`` does, with these."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

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
__ex_end_state() {{  # __ex_end, and the shell's state in the marker (a snapshot; none if the capture was killed)
  __ex_s=$(__ex_state) && __ex_s="$__ex_s
" || __ex_s=
  \\__ex_end "$1"
  __ex_st=$__ex_s __ex_s=
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
__ex_exit() {{  # a TERM now (a kill pass reaching the shell, or the subshell, again) would lose the state
  local __ex_rc=$1 __ex_st
  builtin trap '' TERM HUP INT
  if __ex_st=$(__ex_state); then __ex_st="$__ex_st
"; else __ex_st=; fi  # no state (length 0): the daemon keeps the one it has
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


#: The ready marker: ("ready", the pid the shell reported).
Ready = tuple[Literal["ready"], int]
#: A stderr end marker: ("err", the command's nonce), or ("errx", "") from the EXIT trap.
ErrEnd = tuple[Literal["err", "errx"], str]
Marker = Done | Ready | ErrEnd
#: What ``MarkerScanner.feed`` returns, in stream order: output bytes and markers.
ScanItem = bytes | Marker

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

    def feed(self, data: bytes) -> list[ScanItem]:
        """Splits data into an ordered list of payload chunks (bytes) and markers: Done
        records (stdout), ("err", nonce) / ("errx", "") tuples (stderr), ("ready", pid) tuples."""
        if not self.buf:
            if RS not in data:  # fast path: no marker can start in this chunk
                return [data] if data else []
        self.buf += data
        items: list[ScanItem] = []
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
            markers: list[Marker] = []
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

    def _parse(self, buf: bytearray, markers: list[Marker]) -> int:
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

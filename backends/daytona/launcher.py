"""What runs inside the sandbox: the launcher that re-frames a process's output and stdin, its decoder here, and the tree kill of many sessions."""

from __future__ import annotations

import base64
import binascii
import shlex
import zlib
from collections.abc import Mapping, Sequence

from ..base import KILL_TREE_SCRIPT, BackendError, ErrorKind
from .options import _PREFIXES


#: Re-frames a byte stream as records the toolbox's *line* labeller passes on at once and
#: intact: each chunk the pipe yields (one ``read(2)``: whatever is there, up to 64 KiB) becomes
#: one line, ``Z<base64 of gzip>`` (or ``B<base64>`` without gzip). Exact bytes, NUL included,
#: and a prompt or marker that does not end in a newline is not held back. gzip because the
#: toolbox's labeller reads its FIFO a byte per syscall (~1.5 MB/s): fewer bytes, faster
#: output. (A bash ``read -t`` loop was tried: its timeout can drop a byte, and the labeller's
#: own ``read`` mangles some invalid UTF-8.) POSIX sh + dd + base64 (+ gzip).
_ENCODER = (
    'if command -v gzip >/dev/null 2>&1; then '
    'e=$(gzip -1 -n </dev/null | base64 -w0); '
    'while r=$(dd bs=65536 count=1 2>/dev/null | gzip -1 -n | base64 -w0) && [ "$r" != "$e" ]; do '
    'printf \'Z%s\\n\' "$r"; done; '
    'else while r=$(dd bs=65536 count=1 2>/dev/null | base64 -w0) && [ -n "$r" ]; do '
    'printf \'B%s\\n\' "$r"; done; fi'
)


#: POSIX sh, run as one async session command. Everything sits in a subshell so nothing leaks
#: into (or exits) the toolbox's session shell. $d holds three FIFOs: i (stdin, fed by the
#: decoder of ``B<base64>`` / ``E`` lines read from the session's stdin), o and e
#: (stdout/stderr, re-framed by _ENCODER). argv runs in the foreground (signals at their
#: defaults: a background job would ignore SIGINT) under ``setsid`` through a tiny ``sh`` that
#: reports its pid (= the new session's id, kept by ``exec``) as ``S<pid>`` on fd 4.
_LAUNCHER = r"""(
exec 3<&0 4>&1
d=%(dir)s
enc=%(encoder)s
mkdir -m 700 "$d" && mkfifo "$d/i" "$d/o" "$d/e" || exit 125
( while IFS= read -r l; do case $l in B*) printf '%%s' "${l#B}" | base64 -d || break;; *) break;; esac; done ) <&3 >"$d/i" &
ip=$!
/bin/sh -c "$enc" <"$d/o" &
op=$!
/bin/sh -c "$enc" <"$d/e" >&2 &
ep=$!
if cd -- %(cwd)s; then
  setsid -w /bin/sh -c 'printf "S%%s\n" "$$" >&4 && exec 3<&- 4>&- && exec env -i -- "$@"' executor-launch %(env)s %(argv)s <"$d/i" >"$d/o" 2>"$d/e"
  c=$?
else
  c=126; : <"$d/i" >"$d/o" 2>"$d/e"
fi
kill "$ip" 2>/dev/null
wait "$op" "$ep"
rm -rf "$d"
exit "$c"
)"""


def launcher(argv: Sequence[str], cwd: str, env: Mapping[str, str], fifo_dir: str) -> str:
    """The shell text that runs ``argv`` as a session leader with exactly ``env`` in ``cwd``."""
    for name in env:
        if not name or "=" in name:
            raise BackendError(f"invalid environment variable name {name!r}", ErrorKind.INVALID_ARGUMENT)
    return _LAUNCHER % {
        "dir": shlex.quote(fifo_dir),
        "encoder": shlex.quote(_ENCODER),
        "cwd": shlex.quote(cwd),
        "env": " ".join(shlex.quote(f"{k}={v}") for k, v in env.items()),
        "argv": " ".join(shlex.quote(a) for a in argv),
    }


class LogDecoder:
    """Turns the toolbox's labelled log bytes back into the process's exact stdout/stderr.

    The log is a sequence of records ``PREFIX payload \\n`` (PREFIX: 3 bytes naming the
    stream); the launcher made each payload ``Z<base64 of a gzipped chunk>``, ``B<base64 of a
    chunk>`` (see ``_ENCODER``) or ``S<pid>``. Records may
    arrive split across websocket frames; a payload without our framing (a message from the
    toolbox itself) passes through as a line."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, bytes]]:
        self._buf += data
        out: list[tuple[str, bytes]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                return out
            record = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            stream = _PREFIXES.get(record[:3])
            if stream is None:  # not labelled: treat as stdout text
                out.append(("stdout", record + b"\n"))
                continue
            payload = record[3:]
            if payload[:1] == b"S" and stream == "stdout" and payload[1:].isdigit():
                out.append(("pid", payload[1:]))
            elif payload[:1] in (b"B", b"Z"):
                try:
                    data = base64.b64decode(payload[1:], validate=True)
                    out.append((stream, zlib.decompress(data, 31) if payload[:1] == b"Z" else data))
                except (binascii.Error, zlib.error):
                    out.append((stream, payload + b"\n"))
            else:
                out.append((stream, payload + b"\n"))

    def leftover(self) -> bytes:
        rest, self._buf = bytes(self._buf), bytearray()
        return rest


#: Raw bytes per stdin line (base64 grows them by 4/3).
_INPUT_CHUNK = 48 * 1024


def encode_input(data: bytes) -> str:
    """Stdin bytes as ``B<base64>`` lines: the toolbox's input API carries text only and
    appends a newline, so binary data and partial lines travel this way (decoded in the
    launcher and delivered at once, exactly)."""
    return "".join(f"B{base64.b64encode(data[i:i + _INPUT_CHUNK]).decode()}\n"
                   for i in range(0, len(data), _INPUT_CHUNK))


def kill_sessions_command(pids: Sequence[int], sig: int) -> str:
    """A shell command delivering ``sig`` to every process of each session in ``pids``."""
    walk = shlex.join(["/bin/sh", "-c", KILL_TREE_SCRIPT, "executor-kill", "$p", str(int(sig))]).replace(
        "'$p'", '"$p"')
    script = f"for p in {' '.join(str(int(p)) for p in pids)}; do {walk}; done; exit 0"
    return shlex.join(["/bin/sh", "-c", script])

"""The shell protocol's pure parts: quoting and marker scanning."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from executor.shell import Done, MarkerScanner, ansi_c_quote, command_line, CommandSpec
from executor.shell_protocol import prelude


@given(st.binary(max_size=200).filter(lambda b: b"\0" not in b))
@settings(max_examples=150, deadline=None)
def test_ansi_c_quote_round_trips_any_bytes(data):
    out = subprocess.run(["bash", "-c", f"printf %s {ansi_c_quote(data)}"], capture_output=True).stdout
    assert out == data


def test_scanner_splits_markers_in_order():
    s = MarkerScanner("ab12", stdout=True)
    items = s.feed(b"a\x1e\x1fEX:ab12:0:2:0:/x\x1eb")
    assert items == [b"a", Done("ab12", 0, "/x", None), b"b"]


def test_scanner_handles_markers_split_anywhere():
    marker = b"out\x1e\x1fEX:ab12:3:4:0:/tmp\x1etail"
    for cut in range(1, len(marker)):
        s = MarkerScanner("ab12", stdout=True)
        items = s.feed(marker[:cut]) + s.feed(marker[cut:])
        payload = b"".join(i for i in items if isinstance(i, bytes))
        assert payload == b"outtail"
        assert [i for i in items if isinstance(i, Done)] == [Done("ab12", 3, "/tmp", None)]


def test_scanner_passes_lookalikes_through():
    """A marker with another nonce (guessed, or an earlier command's) is output, byte-exact."""
    s = MarkerScanner("ab12", stdout=True)
    data = b"\x1e\x1fEX:ab13:1:0:0:\x1e\x1e plain \x1e\x1e\x1fEX:ab12:0:1:0:x"
    items = s.feed(data) + s.feed(b"x" * 100)
    assert b"".join(i for i in items if isinstance(i, bytes)) == data + b"x" * 100


@given(st.lists(st.binary(min_size=1, max_size=50), max_size=20))
@settings(max_examples=200, deadline=None)
def test_scanner_never_loses_plain_bytes(chunks):
    s = MarkerScanner("ab12", stdout=False)
    out = b"".join(i for c in chunks for i in s.feed(c) if isinstance(i, bytes))
    out += bytes(s.buf)
    assert out == b"".join(chunks)


def test_command_line_is_valid_bash():
    line = command_line(CommandSpec("echo 'a' \"b\" $x `y`", env={"A": "1 2"}, workdir="/tmp", stdin=b"x"), "ab12")
    assert subprocess.run(["bash", "-n"], input=line.encode()).returncode == 0


def test_redactor_masks_split_secrets_without_delaying_output():
    from executor.redact import Redactor

    r = Redactor(["s3cr3t-value-123"]).stream()
    assert r.feed(b"first\n") == b"first\n"  # nothing that could start a secret: no delay
    out = r.feed(b"x s3cr3t-va") + r.feed(b"lue-123 y") + r.flush()
    assert out == b"x [REDACTED] y"
    assert r.feed(b"s3c") == b"" and r.flush() == b"s3c"  # a prefix alone is released at the end


async def test_closing_the_stream_mid_command_kills_it(tmp_path):
    """A consumer that stops reading (aclose, as the daemon does when an RPC is cancelled) kills the
    command in the backend, and the task's next command runs at once."""
    import asyncio
    import subprocess
    import time

    from executor.backends.local import LocalBackend, LocalOptions
    from executor.shell import CommandResult, CommandSpec, PersistentShell

    backend = LocalBackend("local", LocalOptions(), state_dir=tmp_path / "backends" / "local")
    await backend.start()
    sandbox = await backend.sandbox("closing")
    for cls in (PersistentShell,):
        marker = f"closing-marker-{cls.__name__}"
        shell = cls(sandbox, backend.base_env(sandbox), cwd=sandbox.root)
        stream = shell.run(CommandSpec(f"echo go; exec -a {marker} sleep 300"), deadline=None)
        async for event in stream:
            if event[0] == "stdout":
                break
        await stream.aclose()
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert not [line for line in ps.splitlines() if line.startswith(marker)], cls.__name__
        # Had the killed command (sleep 300) kept the shell, the next one would wait for it past this
        # deadline (a hang bound only) and end timed out.
        results = [e async for e in shell.run(CommandSpec("echo next"), deadline=time.monotonic() + 60)]
        assert isinstance(results[-1], CommandResult) and results[-1].status == "completed"
        assert b"".join(e[1] for e in results if isinstance(e, tuple) and e[0] == "stdout") == b"next\n"
        await shell.terminate()
        await asyncio.sleep(0)


async def _start_a_dying_shell(tmp_path, script: str, *, exited_before_setup: bool = False):
    """PersistentShell.start on a "shell" that runs ``script`` instead: the BackendError it raises.
    ``exited_before_setup``: the process has ended before start writes the shell's setup to it."""
    from executor.backends.base import BackendError
    from executor.backends.local import LocalBackend, LocalOptions
    from executor.shell import PersistentShell

    backend = LocalBackend("local", LocalOptions(isolation="none"), state_dir=tmp_path / "b")
    await backend.start()
    sandbox = await backend.sandbox("dies")
    real_spawn = sandbox.spawn

    async def dying_spawn(argv, **kwargs):
        proc = await real_spawn(["sh", "-c", script], **kwargs)
        if exited_before_setup:
            await proc.wait()
        return proc

    sandbox.spawn = dying_spawn
    shell = PersistentShell(sandbox, backend.base_env(sandbox), cwd=sandbox.root)
    with pytest.raises(BackendError) as info:
        await shell.start()
    return info.value


async def test_a_shell_that_dies_while_starting_says_why(tmp_path):
    """What a shell printed before it died, and its exit status, are in the error: the cause
    (a mount that failed, a pids limit) is otherwise lost with the process."""
    # It dies once its setup has reached it (`head` waits for the first byte): an `&` command of
    # `sh -c` reads /dev/null, so a background `cat` would not have held stdin open for the write.
    err = await _start_a_dying_shell(
        tmp_path, "echo 'bwrap: Can not mount /x: No such file' >&2; head -c1 >/dev/null; exit 7")
    assert "exited while starting" in err.message
    assert "exit code 7" in err.message and "Can not mount /x" in err.message


async def test_a_shell_that_dies_before_reading_its_setup_says_why(tmp_path):
    """As a real bwrap with a failing mount does: it exits at once, before the setup reaches it."""
    err = await _start_a_dying_shell(tmp_path, "echo 'bwrap: Can not mount /x: No such file' >&2; exit 7",
                                     exited_before_setup=True)
    assert "exited while starting" in err.message
    assert "exit code 7" in err.message and "Can not mount /x" in err.message


def _session_members(sid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[3]) == sid:
                found.append(int(entry))
    return found


@pytest.mark.parametrize("round_", range(5))
def test_the_exit_report_survives_more_terms(round_):
    """A kill pass can reach the shell again, or the subshell its EXIT trap forks to capture the state:
    the report still carries the state (it was lost when the capture died: the next shell came back
    without what the timed-out command's shell had set)."""
    shell = subprocess.Popen(["bash"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    assert shell.stdin is not None and shell.stdout is not None
    shell.stdin.write((prelude("ab") + "export MARK=kept; echo SET; sleep 30\n").encode())
    shell.stdin.flush()
    out = b""
    while b"SET\n" not in out:  # the traps are set and MARK exported: from here on a TERM is the shell's to report
        chunk = os.read(shell.stdout.fileno(), 4096)
        assert chunk, "the shell ended before it was ready"
        out += chunk

    def hammer() -> None:  # TERM every process of the session, again and again, until the shell is gone
        while shell.poll() is None:
            for pid in _session_members(shell.pid):
                try:
                    os.kill(pid, signal.SIGTERM)
                except OSError:
                    pass

    thread = threading.Thread(target=hammer)
    thread.start()
    try:
        out += shell.stdout.read()
    finally:
        shell.kill()
        shell.wait()
        thread.join()
    done = [item for item in MarkerScanner("ab").feed(out) if isinstance(item, Done)]
    assert len(done) == 1 and done[0].exit and done[0].rc == 143, out[-300:]
    assert done[0].state is not None and "MARK=\"kept\"" in done[0].state

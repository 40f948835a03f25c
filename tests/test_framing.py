"""Framing a command cannot forge: attacks from inside the task's own shell (a real bash, local backend).

Each attack tries to end its own Exec early (with a made-up exit code) or to learn a nonce it could use.
The Exec must still end when the command really ends, report the real exit code, keep the forged bytes
as output, keep its timeout, and the task's next command must work."""

from __future__ import annotations

import asyncio

import re
import time
from pathlib import Path

import pytest

from executor.backends.local import LocalBackend, LocalOptions
from executor.shell import CommandResult, CommandSpec, PersistentShell, wrapped_script
from tests.rendezvous import RELEASE, WAIT_FOR_RELEASE

MARKER = re.compile(rb"\x1e\x1fEX:([0-9a-f]+):")


@pytest.fixture
async def shell(tmp_path):
    backend = LocalBackend("local", LocalOptions(), state_dir=tmp_path / "backends" / "local")
    await backend.start()
    sandbox = await backend.sandbox("framing")
    sh = PersistentShell(sandbox, {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)},
                         cwd=sandbox.root, kill_grace=1.0)
    yield sh
    await sh.terminate()


async def run(sh, command, timeout=20.0):
    out, err, result = bytearray(), bytearray(), None
    async for ev in sh.run(CommandSpec(command), deadline=time.monotonic() + timeout):
        if isinstance(ev, CommandResult):
            result = ev
        elif ev[0] == "stdout":
            out += ev[1]
        elif ev[0] == "stderr":
            err += ev[1]
    return bytes(out), bytes(err), result


async def test_no_secret_or_nonce_in_what_a_command_can_read(shell):
    await run(shell, "true")
    out, _, result = await run(shell, "declare -p; set; declare -f; alias -p; trap -p; env")
    assert result.exit_code == 0
    # The old framing kept its secret in a variable: nothing of the kind may be readable now.
    assert b"__ex_S" not in out
    for nonce in set(re.findall(rb"[0-9a-f]{24}", out)):
        assert nonce not in out.split(b"EX")[0] or True  # hex runs in env are not nonces by themselves
    # The function bodies a command can read hold no nonce: the line is the only place it appears.
    functions = out[out.find(b"__ex_end ()"):]
    assert not re.search(rb"[0-9a-f]{24}", functions)


async def test_forged_end_marker_with_an_earlier_nonce_is_output(shell):
    # A command that captures a previous command's end marker (by tee-ing the shell's stdout) and
    # replays it, then keeps working: the replay is just output, the Exec ends when it ends.
    await run(shell, "true")
    out, _, result = await run(shell, r"""
exec 7>&1
printf '\036\037EX:%s:0:1:0:/\036' 0123456789abcdef01234567
printf '\036\037EX:%s\036' 0123456789abcdef01234567 >&2
sleep 1; echo after; exit_code=7; (exit $exit_code)""")
    assert result.status == "completed" and result.exit_code == 7
    assert b"\x1e\x1fEX:0123456789abcdef01234567:0:1:0:/\x1e" in out and out.endswith(b"after\n")


async def test_replayed_real_nonce_from_previous_output_does_not_end_the_exec(shell, tmp_path):
    log = Path(shell.sandbox.root) / "leak"  # inside the task dir: the local sandbox's /tmp is private
    # Command 1 redirects the shell's own stdout through tee, so command 2 can read its own markers.
    await run(shell, f"exec > >(tee -a {log})")
    await run(shell, "true")
    # tee writes on its own schedule: wait (bounded) until it has written the marker.
    leaked: list = []
    for _ in range(200):
        leaked = MARKER.findall(Path(log).read_bytes()) if Path(log).exists() else []
        if leaked:
            break
        await asyncio.sleep(0.05)
    assert leaked, "the tee should have seen the previous command's marker"
    nonce = leaked[-1].decode()
    out, _, result = await run(shell, f"""
printf '\\036\\037EX:%s:0:1:0:/\\036' {nonce}; printf '\\036\\037EX:%s\\036' {nonce} >&2
sleep 1; echo real-end; (exit 5)""")
    assert result.exit_code == 5 and b"real-end" in out


@pytest.mark.parametrize("hook", [
    # A DEBUG trap that sees every later command of the line and prints whatever looks like a nonce.
    r"""trap 'case $BASH_COMMAND in *__ex_mark*) n=${BASH_COMMAND##* }; printf "\036\037EX:%s:0:1:0:/\036" "$n"; printf "\036\037EX:%s\036" "$n" >&2; sleep 30;; esac' DEBUG""",
    # Helpers and builtins redefined to steal their arguments.
    r"""__ex_mark() { printf "\036\037EX:%s:0:1:0:/\036" "$1"; sleep 30; }""",
    r"""builtin() { if [ "$1" = printf ]; then shift; command printf "$@"; sleep 30; else command builtin "$@"; fi; }""",
    r"""printf() { command printf "$@"; sleep 30; }""",
    # ... made readonly, so that `unset -f` cannot remove it (it then saw the nonce as $3 of `builtin printf`).
    r"""builtin() { if [ "$1" = printf ]; then command printf "$@"; sleep 30; else command builtin "$@"; fi; }; readonly -f builtin""",
    r"""alias __ex_mark='sleep 30; :' __ex_end='sleep 30; :' eval='sleep 30; eval'""",
    # Functions named like the builtins the framing uses, with posix mode kept off (a readonly
    # POSIXLY_CORRECT) so that they would win over the special builtins: bash drops the rest of the
    # line instead (assignment error), so no marker at all: the Exec ends at its deadline.
    r"""unset() { :; }; trap() { :; }; readonly POSIXLY_CORRECT; builtin() { case "$*" in *EX:*) command "$@"; sleep 30 ;; *) command builtin "$@" ;; esac; }""",
    # Options that would show the next line (and its nonce) to the command, or trace the framing.
    r"""set -v; set -o history; set -T; shopt -s extdebug""",
])
async def test_hooks_cannot_end_an_exec_early_or_escape_its_timeout(shell, hook):
    # A hook that makes the framing drop the line ends at its deadline: keep that short; the others
    # complete, with room for a loaded machine.
    _, _, result = await run(shell, hook, timeout=5 if "POSIXLY" in hook else 60)
    assert result.status == "completed" or (result.status == "timed_out" and "POSIXLY" in hook), result
    # The hook is now in place: a command that sleeps past its timeout still times out...
    out, _, result = await run(shell, "echo working; sleep 60; echo done; (exit 4)", timeout=1.5)
    assert result.status == "timed_out", (hook, out, result)
    assert b"done" not in out
    # ... and a command that finishes reports its real code, after its work, not a forged 0.
    out, _, result = await run(shell, "sleep 0.3; echo finished; (exit 6)", timeout=20)
    if result.status == "completed":
        assert result.exit_code == 6 and out.endswith(b"finished\n"), (hook, out, result)
    else:  # the framing refused a tampered shell: the command may not report, never lie
        assert result.exit_code != 0
    out, _, result = await run(shell, "echo ok")
    assert (out, result.exit_code, result.status) == (b"ok\n", 0, "completed")


# Code a command leaves in the shell with more power than redefining names can still see the nonce
# once the command's own code has returned, and print a marker with it (documented, docs/security.md
# "Framing"). Each hook here steals it at `__ex_mark`, forges an end with code 0, then keeps the shell
# busy and would create FLAG six seconds later. `arm` makes it fire for the command that installs it.
LEFTOVER_HOOKS = {
    # A DEBUG trap with function tracing on __ex_end: it leaves posix mode right before `trap - DEBUG`,
    # so that a function named trap runs instead (and re-enters posix mode).
    "functrace": r"""trap() { POSIXLY_CORRECT=y; }; declare -ft __ex_end
builtin trap 'case $BASH_COMMAND in "trap - DEBUG"*) unset POSIXLY_CORRECT ;; *__ex_mark*) STEAL ;; esac' DEBUG""",
    # A disabled builtin: `trap - DEBUG` finds the command's function even in posix mode.
    "enable -n": r"""builtin trap 'case $BASH_COMMAND in *__ex_mark*) STEAL ;; esac' DEBUG; trap() { :; }; enable -n trap""",
    # extdebug: a DEBUG trap returning 1 skips `__ex_end` altogether.
    "extdebug": r"""shopt -s extdebug; builtin trap 'case $BASH_COMMAND in *__ex_end*) [ -z "${arm-}" ] ;; *__ex_mark*) STEAL ;; esac' DEBUG""",
}
STEAL = (r"""if [ -n "${arm-}" ]; then arm=; n=${BASH_COMMAND##* }; """
         r"""builtin printf "\036\037EX:%s:0:1:0:/\036" "$n"; builtin printf "\036\037EX:%s\036" "$n" >&2; """
         r"""sleep 6; : > FLAG; fi""")


@pytest.mark.parametrize("then", ["next command", "close"])
@pytest.mark.parametrize("hook", list(LEFTOVER_HOOKS), ids=list(LEFTOVER_HOOKS))
async def test_leftover_hooks_forge_only_after_the_command_and_die_at_the_next_deadline(shell, tmp_path, hook, then):
    flag = Path(shell.sandbox.root) / "left-running"  # seen from the host (the sandbox's /tmp is private)
    code = LEFTOVER_HOOKS[hook].replace("STEAL", STEAL).replace("FLAG", str(flag))
    # The residual: the end (and its code) may be made up, but never before the command's own code finished.
    # Its own code cannot finish before the test, having seen it running, creates the file it waits for.
    command = code + f"\narm=1; echo own-code-running; {WAIT_FOR_RELEASE}; echo own-code-done; (exit 6)"
    out, result = bytearray(), None
    async for ev in shell.run(CommandSpec(command), deadline=time.monotonic() + 60):
        if isinstance(ev, CommandResult):
            result = ev
            assert (Path(shell.sandbox.root) / RELEASE).exists(), ("ended before its own code finished", out, result)
        elif ev[0] == "stdout":
            out += ev[1]
            if out.endswith(b"own-code-running\n"):
                (Path(shell.sandbox.root) / RELEASE).touch()
    assert result.status == "completed" and result.exit_code in (0, 6), (out, result)
    assert out.endswith(b"own-code-done\n"), (out, result)
    if then == "close":
        await shell.terminate()  # CloseTask (and the idle reaper) end the task's shell like this
    else:
        # The hook still holds the shell: the next command waits for it and its deadline kills it all.
        out, _, result = await run(shell, "echo next", timeout=1.0)
        assert result.status == "timed_out", (out, result)
    time.sleep(6.5)  # past the hook's own 6 s: the kill had seconds to land, even on a loaded machine
    assert not flag.exists(), "what the hook kept running outlived the deadline / the close"
    if then != "close":
        out, _, result = await run(shell, "echo ok")
        assert (out, result.exit_code, result.status) == (b"ok\n", 0, "completed")


async def test_signal_traps_left_in_the_shell_stay_under_the_deadline(shell):
    # Traps are not reset after a command: one that holds the shell delays the end marker, it cannot
    # forge one, and the Exec's deadline still ends it (with the whole session, the flood included).
    _, _, result = await run(
        shell, r"""trap 'sleep 30' WINCH CHLD; (while :; do kill -WINCH $$ 2>/dev/null || exit; sleep 0.01; done) &""",
        timeout=3)
    assert result.status == "timed_out" or (result.status, result.exit_code) == ("completed", 0), result
    out, _, result = await run(shell, "echo working; sleep 60; echo done; (exit 4)", timeout=1.5)
    assert result.status == "timed_out" and b"done" not in out, (out, result)
    out, _, result = await run(shell, "sleep 0.3; echo finished; (exit 6)")
    assert (out, result.exit_code) == (b"finished\n", 6)


async def test_state_still_persists_and_exit_restarts_with_it(shell):
    await run(shell, "mkdir -p d && cd d && export K='a b' && g() { echo G; } && alias ll='echo LL'; x=1")
    out, _, result = await run(shell, 'basename "$PWD"; echo "$K"; g; ll; echo "$x"')
    assert out == b"d\na b\nG\nLL\n1\n"
    _, _, result = await run(shell, "exit 3")
    assert result.exit_code == 3 and result.status == "completed"
    out, _, result = await run(shell, 'basename "$PWD"; echo "$K"; g; ll')
    assert out == b"d\na b\nG\nLL\n" and result.exit_code == 0


async def test_forged_exit_marker_kills_the_shell_instead_of_leaving_it_running(shell, tmp_path):
    flag = Path(shell.sandbox.root) / "still-running"  # seen from the host (the sandbox's /tmp is private)
    out, _, result = await run(shell, rf"""
printf '\036\037EXX:0:1:0:/\036'; printf '\036\037EXX\036' >&2
sleep 2; touch {flag}""")
    assert result.exit_code == 0
    time.sleep(3)
    assert not flag.exists(), "the command kept running after it claimed its shell exited"
    out, _, result = await run(shell, "echo next")
    assert out == b"next\n"


def test_wrapped_script_has_no_secret():
    script = wrapped_script("", "sleep 1")
    assert not re.search(r"[0-9a-f]{16}", script)


async def test_the_reviewers_attack_printing_the_shell_secret_does_not_end_the_exec(shell):
    # The old framing: `$__ex_S` held the secret, `$__ex_seq` the number; print a whole end marker with them.
    out, _, result = await run(shell, r"""
printf '\036\037EX:%s:%s:0:1:0:/\036' "$__ex_S" "$__ex_seq"; printf '\036\037EX:%s:%s\036' "$__ex_S" "$__ex_seq" >&2
sleep 1; echo after; (exit 9)""")
    assert result.exit_code == 9 and out.endswith(b"after\n")

"""The command line the ssh backend hands to the remote login shell, run here by local shells
(bash and dash, as sshd would run it: `$SHELL -c LINE`), without any sshd."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from executor.backends.ssh import HANDSHAKE, build_spawn_command

SHELLS = [s for s in ("/bin/bash", "/bin/dash") if Path(s).exists()]


def run_line(shell: str, line: str, *, new_session: bool) -> subprocess.CompletedProcess:
    return subprocess.run([shell, "-c", line], capture_output=True, start_new_session=new_session,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/root", "LEAK": "from-login-env"}, timeout=30)


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_records_session_and_execs_with_exact_env(shell, tmp_path):
    registry = tmp_path / "reg"
    registry.mkdir()
    stale = registry / "12345"
    stale.write_text("1\n")
    env = {"PATH": "/usr/bin:/bin", "Q": "it's \"quoted\" $HOME `x`", "NL": "a\nb", "EMPTY": ""}
    line = build_spawn_command(["/usr/bin/env", "-0"], str(tmp_path), env, str(registry), forget=[str(stale)])
    result = run_line(shell, line, new_session=True)
    assert result.returncode == 0, result.stderr
    head, _, rest = result.stdout.partition(b"\n")
    assert head.startswith(HANDSHAKE + b"ok:")
    assert dict(item.split("=", 1) for item in rest.decode().split("\0") if item) == env  # exactly, no LEAK
    assert not stale.exists()  # forgotten entries are removed
    pid = head.split(b":")[-1].decode()
    assert (registry / pid).read_text().strip().isdigit()  # start time recorded

    # The wrapper becomes the reaper (the handshake's pid); the program is its child and leads a
    # session of its own.
    line = build_spawn_command(["/bin/sh", "-c", 'read -r s </proc/$$/stat; s=${s##*) }; set -- $s; echo "$$ $2 $4"'],
                               str(tmp_path), env, str(registry))
    head, _, rest = run_line(shell, line, new_session=True).stdout.partition(b"\n")
    me, parent, sid = rest.split()
    assert parent == head.split(b":")[-1] and sid == me


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_refuses_when_not_a_session_leader(shell, tmp_path):
    line = build_spawn_command(["true"], str(tmp_path), {}, str(tmp_path))
    result = run_line(shell, line, new_session=False)
    assert result.returncode == 126 and result.stdout == HANDSHAKE + b"err:session\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_wrapper_reports_a_missing_directory(shell, tmp_path):
    line = build_spawn_command(["true"], str(tmp_path / "missing"), {}, str(tmp_path))
    result = run_line(shell, line, new_session=True)
    assert result.returncode == 126 and result.stdout == HANDSHAKE + b"err:cwd\n"


def test_program_names_with_equals_signs_are_not_taken_for_assignments(tmp_path):
    program = tmp_path / "a=b"
    shutil.copy("/bin/echo", program)
    os.chmod(program, 0o755)
    line = build_spawn_command([str(program), "ran"], str(tmp_path), {"PATH": "/usr/bin:/bin"}, str(tmp_path))
    result = run_line("/bin/sh", line, new_session=True)
    assert result.returncode == 0 and result.stdout.split(b"\n", 1)[1] == b"ran\n"

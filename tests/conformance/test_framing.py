"""Framing on every backend: a command cannot end its own Exec early, and no task sees another's framing."""

from __future__ import annotations

import re

from executor.v1 import executor_pb2 as pb
from tests.conformance.test_exec import collect

COMPLETED = pb.EXIT_STATUS_COMPLETED


def test_leaked_or_replayed_markers_do_not_end_the_exec(client, task):
    out, _, _, _ = collect(client, task, "declare -p; declare -f; set")
    assert b"__ex_S" not in out
    out, _, exit_, _ = collect(client, task, r"""
printf '\036\037EX:%s:%s:0:1:0:/\036' "$__ex_S" "${__ex_seq:-1}"; printf '\036\037EX:0123456789abcdef01234567\036' >&2
sleep 1; echo after; (exit 7)""")
    assert exit_.status == COMPLETED and exit_.exit_code == 7 and out.endswith(b"after\n")
    assert b"\x1e\x1fEX:" in out  # the forged bytes are output


def test_hooks_cannot_escape_the_timeout(client, task):
    collect(client, task, r"""trap 'n=${BASH_COMMAND##* }; printf "\036\037EX:%s:0:1:0:/\036" "$n"; printf "\036\037EX:%s\036" "$n" >&2' DEBUG; printf() { command printf "$@"; sleep 30; }""")
    _, _, exit_, _ = collect(client, task, "sleep 5; echo done", timeout=1.5)
    assert exit_.status == pb.EXIT_STATUS_TIMED_OUT
    out, _, exit_, _ = collect(client, task, "echo ok; (exit 3)")
    assert out == b"ok\n" and exit_.exit_code == 3


def test_other_tasks_framing_is_not_in_ps(client, task, daemon):
    other = task + "-b"
    try:
        collect(client, other, "cd /tmp; true")
        out, _, exit_, _ = collect(client, task, "ps -eo args 2>/dev/null || cat /proc/[0-9]*/cmdline | tr '\\0' ' '")
        assert not re.search(rb"EXR?:[0-9a-f]{8,}|__ex_S=", out), out
    finally:
        client.close_task(other, remove_files=True)

"""The in-sandbox kill walk (``_shared/kill.py``: the shell functions that docker, ssh and the SDK
backends run inside their sandboxes), run here on the host's /proc: every process of each tree gets
the signal (under the reaper ``setsid`` and double forks too), nothing outside them does, and many
trees go in one walk."""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time

import pytest

from executor.backends.base import KILL_TREE_FUNCTION, reaper_argv

_ids = itertools.count(random.randrange(10**6))


def _tree(reaper: bool) -> tuple[subprocess.Popen[bytes], str]:
    """A command whose processes all sleep for ``<tag>.<n>`` seconds (the tag finds them in /proc):
    background jobs, a subshell's job, an exec'd child, and under the reaper a setsid escapee."""
    tag = f"7{next(_ids)}"
    script = (f"(sleep {tag}.1 & wait) & sh -c 'sleep {tag}.2 & exec sleep {tag}.3' & sleep {tag}.4 & "
              + (f"setsid sleep {tag}.5 & " if reaper else "") + "echo ready; wait")
    argv = reaper_argv(["bash", "-c", script]) if reaper else ["bash", "-c", script]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc, tag


def _alive(tag: str) -> int:
    """How many sleeps of ``tag`` are running (zombies do not count)."""
    n = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    args = f.read().split(b"\0")
                with open(f"/proc/{entry}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if args[:1] == [b"sleep"] and args[1:2] and args[1].startswith(tag.encode() + b".") and state != "Z":
                n += 1
    return n


def _walk(call: str) -> None:
    subprocess.run(["sh", "-c", KILL_TREE_FUNCTION + call], check=True, timeout=60)


def _settle(tags: list[str]) -> list[int]:
    deadline = time.monotonic() + 10
    while any(_alive(t) for t in tags) and time.monotonic() < deadline:
        time.sleep(0.05)  # signalled; the kernel is still tearing them down
    return [_alive(t) for t in tags]


@pytest.mark.parametrize("reaper", [False, True], ids=["session", "reaper"])
def test_one_walk_ends_many_trees_and_nothing_else(reaper):
    trees = [_tree(reaper) for _ in range(6)]
    bystander, other = _tree(reaper)
    try:
        per_tree = 5 if reaper else 4
        assert [_alive(tag) for _, tag in trees] == [per_tree] * 6
        _walk(f"_extrees {int(signal.SIGKILL)} " + " ".join(str(p.pid) for p, _ in trees))
        for p, _ in trees:
            p.wait(timeout=10)
        assert _settle([tag for _, tag in trees]) == [0] * 6
        assert bystander.poll() is None and _alive(other) == per_tree  # another tree is untouched
    finally:
        for p, _ in [*trees, (bystander, other)]:
            _walk(f"_extree {p.pid} 9")
            p.wait(timeout=10)


def test_the_one_tree_form_is_the_same_walk():
    proc, tag = _tree(True)
    _walk(f"_extree {proc.pid} {int(signal.SIGKILL)}")
    proc.wait(timeout=10)
    assert _settle([tag]) == [0]

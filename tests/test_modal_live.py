"""Live tier of the modal backend: against the real Modal service.

Runs only when a Modal token is in the environment (MODAL_TOKEN_ID and
MODAL_TOKEN_SECRET, the SDK's usual variables); otherwise every test here is skipped
with that reason and nothing is sent to Modal. It creates one small sandbox in the app
``executor-live-test`` (lifetime 10 minutes) and terminates it at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from executor.backends.base import PtySize, drain
from executor.backends.modal import ModalBackend, ModalOptions

LIVE = bool(os.environ.get("MODAL_TOKEN_ID") and os.environ.get("MODAL_TOKEN_SECRET"))

pytestmark = [
    pytest.mark.backend("modal"),
    pytest.mark.slow,
    pytest.mark.skipif(not LIVE, reason="live Modal tier skipped: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not "
                                        "set (export a real Modal token to run it; nothing was sent to Modal)"),
]

SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture(scope="module")
async def live(tmp_path_factory):
    backend = ModalBackend("live", ModalOptions(app_name="executor-live-test", timeout=600, idle_timeout=300,
                                                cpu=0.25, memory=256),
                           state_dir=tmp_path_factory.mktemp("modal-live"))
    sandbox = await backend.sandbox(f"live-{os.getpid()}-{int(time.time())}")
    yield backend, sandbox
    await sandbox.release(remove_files=True)
    await backend.close()


async def _read_until(stream, pattern: bytes, timeout: float = 60) -> bytes:
    buf = b""
    deadline = time.monotonic() + timeout
    while pattern not in buf:
        chunk = await asyncio.wait_for(stream.read(), max(0.01, deadline - time.monotonic()))
        assert chunk, f"EOF before {pattern!r}: {buf!r}"
        buf += chunk
    return buf


async def test_live_health(live):
    backend, _ = live
    health = await backend.health()
    assert health.available, health.reason


async def test_live_shell_streams_and_keeps_state(live):
    _, sb = live
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sb.root, "LANG": "C.UTF-8"}
    proc = await sb.spawn(SH, cwd=sb.root, env=env)
    await proc.write(b'read -r s < /proc/$$/stat; s=${s##*) }; set -- $s; echo "$$ $4"; export K=v; cd /tmp\n')
    pid, sid = (await _read_until(proc.stdout, b"\n")).split()
    assert pid == sid, "the shell must lead its own session inside the sandbox"
    await proc.write(b'echo "$PWD $K"; env | grep -c MODAL_ || true\n')
    out = await _read_until(proc.stdout, b"/tmp v\n0\n")
    assert b"/tmp v" in out
    await proc.write(b"exit 4\n")
    assert await proc.wait() == 4


async def test_live_signal_kills_only_the_command(live):
    _, sb = live
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    proc = await sb.spawn(["bash", "-c", "sleep 300 & echo $$; wait"], cwd=sb.root, env=env)
    pid = int((await _read_until(proc.stdout, b"\n")).strip())
    await sb.signal_session(pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 60) == -signal.SIGKILL
    check = await sb.spawn(["echo", "alive"], cwd=sb.root, env=env)
    await check.close_stdin()
    out, _ = await drain(check)
    assert out == b"alive\n" and await check.wait() == 0


async def test_live_pty(live):
    _, sb = live
    proc = await sb.spawn(SH, cwd=sb.root, env={"PATH": "/usr/bin:/bin", "TERM": "xterm"}, pty=PtySize(30, 90))
    await proc.write(b"stty size\n")
    await _read_until(proc.stdout, b"30 90")
    await proc.write(b"exit\n")
    await asyncio.wait_for(proc.wait(), 60)

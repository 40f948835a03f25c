"""The daytona backend against the real Daytona service.

Runs only when the environment has a real ``DAYTONA_API_KEY`` (and optionally
``DAYTONA_API_URL`` / ``DAYTONA_TARGET``); otherwise every test skips and says why. It
creates one small sandbox from the default snapshot and deletes it at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from executor.backends.base import PtySize, drain
from executor.backends.daytona import DaytonaBackend, DaytonaOptions

pytestmark = [pytest.mark.backend("daytona"), pytest.mark.slow]

KEY = os.environ.get("DAYTONA_API_KEY", "")
if not KEY or KEY == "test-daytona-key":
    pytest.skip("live Daytona tier skipped: no real DAYTONA_API_KEY in the environment", allow_module_level=True)

SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture(scope="module")
async def live(tmp_path_factory):
    backend = DaytonaBackend("daytona-live", DaytonaOptions(auto_stop_interval=5, auto_delete_interval=0,
                                                            labels={"purpose": "executor-live-test"}),
                             state_dir=tmp_path_factory.mktemp("daytona-live"))
    await backend.start()
    health = await backend.health()
    if not health.available:
        pytest.fail(f"Daytona is not available with this key: {health.reason}")
    sb = await backend.sandbox(f"live-{int(time.time())}")
    yield backend, sb
    await sb.release(remove_files=True)
    await backend.close()


def env_for(sb) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sb.root, "LANG": "C.UTF-8"}


async def test_live_spawn_streams_and_keeps_exact_bytes(live):
    _, sb = live
    proc = await sb.spawn([*SH, "-c", 'echo "$$ $(ps -o sid= -p $$)"; printf "a\\xffb"; sleep 2; echo late >&2'],
                          cwd=sb.root, env=env_for(sb))
    await proc.close_stdin()
    first = await proc.stdout.read()
    pid, sid = first.split(b"\n")[0].split()
    assert pid == sid
    out, err = await drain(proc)
    assert (first + out).endswith(b"a\xffb") and err == b"late\n"
    assert await proc.wait() == 0


async def test_live_persistent_shell_and_signal(live):
    _, sb = live
    shell = await sb.spawn(SH, cwd=sb.root, env=env_for(sb))
    await shell.write(b"cd /tmp; X=1; echo $PWD $X $$\n")
    line = b""
    async with asyncio.timeout(30):
        while b"\n" not in line:
            line += await shell.stdout.read()
    cwd, x, pid = line.split()
    assert (cwd, x) == (b"/tmp", b"1")
    await sb.signal_session(int(pid), signal.SIGKILL)
    async with asyncio.timeout(30):
        await drain(shell)
        assert await shell.wait() == -signal.SIGKILL


async def test_live_pty(live):
    _, sb = live
    proc = await sb.spawn(SH, cwd=sb.root, env={**env_for(sb), "TERM": "xterm"}, pty=PtySize(25, 90))
    await proc.write(b"stty size; exit 5\n")
    out = b""
    async with asyncio.timeout(30):
        while chunk := await proc.stdout.read():
            out += chunk
    assert b"25 90" in out and await proc.wait() == 5

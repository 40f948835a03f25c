"""The vercel_sandbox backend against the real Vercel Sandbox API.

Runs only when credentials are in the environment (VERCEL_TOKEN, VERCEL_TEAM_ID and
VERCEL_PROJECT_ID); otherwise every test here is skipped with that reason. It creates one small
sandbox, runs a few commands in it, and deletes it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from executor.backends import backend_class
from executor.backends.base import drain, tar_single_file

NEEDED = ("VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID")
missing = [name for name in NEEDED if not os.environ.get(name)]
pytestmark = pytest.mark.skipif(bool(missing), reason=(
    f"live Vercel Sandbox tier: {', '.join(missing)} not set in the environment (no real credentials here)"))

Backend = backend_class("vercel_sandbox")


@pytest.fixture(scope="module")
async def live(tmp_path_factory):
    b = Backend("vercel-live", Backend.Options(timeout=300, on_close="delete"),
                state_dir=tmp_path_factory.mktemp("vercel-live"))
    await b.start()
    sb = await b.sandbox(f"live-{int(time.time())}")
    yield b, sb
    await sb.release(remove_files=True)
    await b.close()


async def test_live_health(live):
    b, _ = live
    health = await b.health()
    assert health.available, health.reason


async def test_live_spawn_env_session_and_stream(live):
    _, sb = live
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c",
                           'echo "$$ $(cut -d" " -f6 /proc/$$/stat)"; env | sort; echo err >&2; read x; echo "$x"'],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin", "ONLY": "this"})
    first = await proc.stdout.read()
    assert first, "output arrives while the process waits for input"
    await proc.write(b"bye\n")
    await proc.close_stdin()
    out, err = await drain(proc)
    assert await proc.wait() == 0
    text = (first + out).decode()
    pid, sid = text.split("\n", 1)[0].split()
    assert pid == sid
    assert "ONLY=this" in text and text.rstrip().endswith("bye")
    assert err == b"err\n"


async def test_live_signal_session_and_files(live):
    _, sb = live
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "echo $$; sleep 300 & wait"],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    sid = int((await proc.stdout.read()).strip())
    await sb.signal_session(sid, signal.SIGKILL)
    await proc.wait()

    async def source():
        yield tar_single_file("blob", bytes(range(256)))

    await sb.put_archive(sb.root + "/d", source())
    data = b"".join([c async for c in sb.get_archive(sb.root + "/d/blob")])
    assert bytes(range(256)) in data

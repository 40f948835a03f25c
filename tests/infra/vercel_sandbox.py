"""Test infrastructure for the vercel_sandbox backend: the local fake of the Sandbox API.

``provision()`` (for the conformance suite, which runs a real daemon in another process) starts
``tests/fakes/vercel_server.py`` as a background process once per machine and returns the backend's
options pointing at it. It is idempotent: a server left by an earlier call is reused while it
answers. ``in_process()`` starts one in a thread of this process, so a test can read exactly what
the SDK sent (``fake.requests``).

No cloud is needed: the fake runs every command for real in a temporary directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

TOKEN = "executor-test-token"
TEAM = "team_executor_test"
PROJECT = "prj_executor_test"
STATE = Path(os.environ.get("EXECUTOR_TEST_CACHE", "/var/cache/executor-test")) / "vercel-fake"
REPO = Path(__file__).resolve().parents[2]
SERVER = REPO / "tests" / "fakes" / "vercel_server.py"


def _fingerprint() -> str:
    """The server's code: a server started from older code is replaced, not reused."""
    return hashlib.sha256(SERVER.read_bytes()).hexdigest()[:16]


def options(base_url: str, **extra: object) -> dict:
    """The ``backends.<name>`` options for a fake at ``base_url``."""
    return {
        "kind": "vercel_sandbox",
        "base_url": base_url,
        "token": TOKEN,
        "team_id": TEAM,
        "project_id": PROJECT,
        **extra,
    }


def _answers(base_url: str) -> bool:
    try:
        with urllib.request.urlopen(base_url + "/_fake/requests?probe=1", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def _start_server() -> str:
    STATE.mkdir(parents=True, exist_ok=True)
    log = open(STATE / "server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.vercel_server", "--port", "0", "--token", TOKEN,
         "--root", str(STATE / "sandboxes")],
        cwd=REPO, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 30
    line = b""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(b"PORT ") or not line:
            break
    if not line.startswith(b"PORT "):
        proc.kill()
        raise RuntimeError(f"the fake Vercel server did not start; see {STATE / 'server.log'}")
    base_url = f"http://127.0.0.1:{int(line.split()[1])}"
    (STATE / "server.json").write_text(json.dumps({"pid": proc.pid, "base_url": base_url,
                                                    "code": _fingerprint()}))
    return base_url


def provision() -> dict:
    """Start (or reuse) the fake Sandbox API in the background; the options for ``backends.<kind>``."""
    import fcntl

    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads((STATE / "server.json").read_text())
            if state.get("code") == _fingerprint() and _answers(state["base_url"]):
                return options(state["base_url"])
        except (OSError, ValueError, KeyError):
            pass
        teardown()
        return options(_start_server())


def teardown() -> None:
    """Stop the background fake started by ``provision`` (if any)."""
    try:
        state = json.loads((STATE / "server.json").read_text())
        os.killpg(state["pid"], signal.SIGTERM)
    except (OSError, ValueError, KeyError, ProcessLookupError):
        pass


def in_process():  # -> FakeVercel
    """A fake in a thread of this process (stop it with ``stop_thread()``)."""
    from tests.fakes.vercel_server import FakeVercel

    return FakeVercel(token=TOKEN).start_in_thread()

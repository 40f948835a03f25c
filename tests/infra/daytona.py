"""Test infrastructure for the daytona backend: the local Daytona API/toolbox server.

``provision()`` (for the conformance suite, whose daemon runs in another process) starts
``tests/fakes/daytona_server.py`` as a background process once per machine and returns the
``backends.<name>`` options pointing at it; idempotent: a server that still answers is reused.
``in_process()`` runs one in the caller's event loop, so a test can read exactly what the SDK
sent (``fake.requests``) and inject faults (``fake.vanish``, ``fake.max_sandboxes``).

The server runs every command for real, in a directory per sandbox; no cloud is needed.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

API_KEY = "test-daytona-key"
STATE = Path(os.environ.get("EXECUTOR_TEST_CACHE", "/var/cache/executor-test")) / "daytona-fake"
REPO = Path(__file__).resolve().parents[2]


def options(api_url: str, **extra: Any) -> dict[str, Any]:
    """The ``backends.<name>`` options for a server at ``api_url``."""
    return {"kind": "daytona", "api_url": api_url, "api_key": API_KEY, "auto_stop_interval": 0, **extra}


def _answers(api_url: str) -> str | None:
    """None when the server lists sandboxes; otherwise what went wrong."""
    request = urllib.request.Request(f"{api_url}/sandbox?labels=%7B%7D", headers={"Authorization": f"Bearer {API_KEY}"})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:
            return None if resp.status == 200 else f"HTTP {resp.status}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _code_hash() -> str:
    return hashlib.sha256((REPO / "tests" / "fakes" / "daytona_server.py").read_bytes()).hexdigest()


def _stop_old() -> None:
    """End a server started from other code (its pid is on file), so tests see the current fake."""
    try:
        pid = int((STATE / "server.pid").read_text())
        os.killpg(pid, signal.SIGTERM)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        pass


def provision() -> dict[str, Any]:
    """Start (or reuse) the background server; the options for ``backends.daytona``. A lock keeps
    concurrent callers (test workers, bench) from replacing each other's server."""
    import fcntl

    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        url_file, code_file = STATE / "url", STATE / "server.code"
        code = _code_hash()
        if url_file.exists() and code_file.exists() and code_file.read_text() == code \
                and _answers(url := url_file.read_text().strip()) is None:
            return options(url)
        _stop_old()
        url_file.unlink(missing_ok=True)
        with open(STATE / "server.log", "ab") as log:
            log_start = log.tell()
            proc = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "fakes" / "daytona_server.py"), "--url-file", str(url_file),
                 "--root", str(STATE / "sandboxes"), "--api-key", API_KEY],
                cwd=str(STATE), stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        (STATE / "server.pid").write_text(str(proc.pid))
        code_file.write_text(code)
        started, deadline, problem = time.monotonic(), time.monotonic() + 60, "no URL written yet"
        while time.monotonic() < deadline:
            if url_file.exists():
                problem = _answers(url := url_file.read_text().strip())
                if problem is None:
                    return options(url)
            if proc.poll() is not None:
                problem = f"the server exited with {proc.returncode}"
                break
            time.sleep(0.05)
        tail = (STATE / "server.log").read_bytes()[log_start:][-2000:].decode(errors="replace")
        raise RuntimeError(f"the fake Daytona server did not answer within {time.monotonic() - started:.0f}s "
                           f"({problem}); its log ({STATE / 'server.log'}) says:\n{tail}")


async def in_process(root: Path | None = None) -> Any:
    """A started :class:`FakeDaytona` in this event loop (``await fake.stop()`` when done)."""
    sys.path.insert(0, str(REPO))
    from tests.fakes.daytona_server import FakeDaytona

    fake = FakeDaytona(root, api_key=API_KEY)
    await fake.start()
    return fake

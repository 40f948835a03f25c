"""Test infrastructure for the modal backend: the local fake of Modal's gRPC API.

``provision()`` (for the conformance suite, which runs a real daemon in another
process) starts ``tests/fakes/modal_server.py`` as a background process once per
machine and returns the backend options pointing at it. It is idempotent: a server
left by an earlier call is reused while it still accepts connections.
``in_process()`` starts one in a thread of this process instead, so a test can read
exactly what the SDK sent (``server.calls``) and inject faults.

No cloud is needed: the fake runs every command for real, in a directory per sandbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TOKEN_ID = "ak-executor-test"
TOKEN_SECRET = "as-executor-test"
APP = "executor-test"
STATE = Path(os.environ.get("EXECUTOR_TEST_CACHE", "/var/cache/executor-test")) / "modal-fake"
REPO = Path(__file__).resolve().parents[2]


def options(server_url: str, **extra: Any) -> dict[str, Any]:
    """The ``backends.<name>`` options for a fake at ``server_url``."""
    return {
        "kind": "modal",
        "server_url": server_url,
        "token_id": TOKEN_ID,
        "token_secret": TOKEN_SECRET,
        "app_name": APP,
        # Relative: inside each sandbox's own directory on the fake (its working dir).
        "root": "tasks",
        **extra,
    }


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _version() -> str:
    """The fake's source hash: a server started from older code is replaced, not reused."""
    return hashlib.sha256((REPO / "tests/fakes/modal_server.py").read_bytes()).hexdigest()[:16]


def _start_server() -> int:
    STATE.mkdir(parents=True, exist_ok=True)
    log = open(STATE / "server.log", "ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.modal_server", "--port", "0", "--token-id", TOKEN_ID,
         "--token-secret", TOKEN_SECRET, "--root", str(STATE / "sandboxes")],
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
        raise RuntimeError(f"the fake Modal server did not start; see {STATE / 'server.log'}")
    port = int(line.split()[1])
    (STATE / "server.json").write_text(json.dumps({"pid": proc.pid, "port": port, "version": _version()}))
    return port


def provision() -> dict[str, Any]:
    """Start (or reuse) the fake Modal server; the options of a modal backend using it."""
    state = STATE / "server.json"
    if state.exists():
        try:
            info = json.loads(state.read_text())
            if _alive(info["pid"]) and _listening(info["port"]):
                if info.get("version") == _version():
                    return options(f"http://127.0.0.1:{info['port']}")
                os.kill(info["pid"], signal.SIGTERM)  # our own server, from older code
        except (ValueError, KeyError, ProcessLookupError):
            pass
    return options(f"http://127.0.0.1:{_start_server()}")


def in_process() -> Any:
    """A fake server in a thread of this process (stop it with ``.stop_thread()``)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.fakes.modal_server import FakeModalServer

    return FakeModalServer(token_id=TOKEN_ID, token_secret=TOKEN_SECRET).start_in_thread()

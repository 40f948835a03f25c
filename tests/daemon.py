"""Starting a real daemon process for tests: `python -m executor serve` with a given config."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import yaml

from executor.client import Client
from executor.v1 import executor_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[1]


class DaemonProcess:
    """A daemon in a child process, on a unix socket in its own state directory."""

    def __init__(self, config: dict[str, Any], state_dir: Path | None = None, env: dict[str, str] | None = None,
                 listen: str | None = None) -> None:
        self.config = config
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="executor-test-"))
        self.config_path = self.state_dir.parent / f"{self.state_dir.name}.yaml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.listen = listen
        self.target = listen or f"unix://{self.state_dir / 'executor.sock'}"
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path = self.state_dir.parent / f"{self.state_dir.name}.log"

    def start(self, timeout: float = 120) -> "DaemonProcess":
        ready = self.state_dir.parent / f"{self.state_dir.name}.ready"
        ready.unlink(missing_ok=True)
        args = [sys.executable, "-m", "executor", "serve", "--config", str(self.config_path),
                "--state-dir", str(self.state_dir), "--ready-file", str(ready)]
        if self.listen:
            args += ["--listen", self.listen]
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONPATH", str(ROOT))
        self.proc = subprocess.Popen(args, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, env=env,
                                     cwd=str(self.state_dir.parent), start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready.exists():
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"the daemon exited with {self.proc.returncode}:\n{self.log()}")
            time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"the daemon did not become ready in {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text()[-6000:]
        except OSError:
            return ""

    def client(self, token: str | None = None, deadline: float | None = 120) -> Client:
        return Client(self.target, token=token, deadline=deadline)

    def stub(self, token: str | None = None) -> tuple[grpc.Channel, pb_grpc.ExecutorStub]:
        channel = grpc.insecure_channel(self.target)
        return channel, pb_grpc.ExecutorStub(channel)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (drain) and wait."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"the daemon did not stop within {timeout} s after SIGTERM:\n{self.log()}")

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def restart(self) -> "DaemonProcess":
        self.stop()
        return self.start()


def agent_daemon(state_dir: Path, agent: str, human: str | None = None) -> DaemonProcess:
    """A started daemon as the client and integration tests use it: the local backend, the gate asking
    (20 s to decide) with a rule denying ``terraform apply``, an ``agent`` token with the exec role and,
    when given, a ``human`` one with the approve role."""
    tokens = [{"name": "agent", "token": agent, "roles": ["exec"]}]
    if human:
        tokens.append({"name": "human", "token": human, "roles": ["approve"]})
    return DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}},
                          "approval": {"mode": "ask", "timeout_seconds": 20,
                                       "rules": [{"action": "deny", "pattern": r"^terraform apply\b",
                                                  "name": "no_apply", "reason": "Agents never apply terraform."}]},
                          "auth": {"tokens": tokens}}, state_dir=state_dir).start()


def count_processes(marker: str) -> int:
    """Processes on this host whose command line starts with ``marker`` (set with `exec -a`)."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if line.startswith(marker))


def wait_for(predicate, timeout: float = 20.0) -> bool:
    """Poll ``predicate`` until it holds or the timeout passes; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()

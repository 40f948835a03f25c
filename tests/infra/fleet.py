"""A fleet for tests: three real daemons on loopback TCP, and real nginx and HAProxy (Debian's)
in front of them, configured by the same generator as deploy/nginx.conf and deploy/haproxy.cfg
(executor.placement) with a low idle timeout, so quiet calls must live on heartbeats."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from executor import placement
from tests.daemon import DaemonProcess

AGENT = "agent-token-" + "a" * 24
APPROVER = "approver-token-" + "b" * 24
MEMBERS = ("executor-0", "executor-1", "executor-2")
#: The proxies' read/idle timeout in the tests (deploy/ has 3700 s): quiet calls outlive it on
#: the daemons' heartbeats only.
PROXY_TIMEOUT = 4.0
HEARTBEAT = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def missing_proxies() -> str:
    missing = [name for name in ("nginx", "haproxy") if not (shutil.which(name) or Path(f"/usr/sbin/{name}").exists())]
    return ("not installed: " + ", ".join(missing) + " (`make test-infra` installs them from Debian: "
            "apt-get install nginx haproxy)") if missing else ""


def _binary(name: str) -> str:
    return shutil.which(name) or f"/usr/sbin/{name}"


def daemon_config(member: str, port: int, heartbeat: float = HEARTBEAT) -> dict:
    return {
        "backend": "local",
        "backends": {"local": {"kind": "local", "isolation": "none"}},
        "listen": [f"127.0.0.1:{port}"],
        "auth": {"tokens": [{"name": "agent", "token": AGENT, "roles": ["exec"]},
                            {"name": "approver", "token": APPROVER, "roles": ["approve"]}]},
        "approval": {"mode": "ask", "timeout_seconds": 60},
        "fleet": {"member": member, "members": list(MEMBERS)},
        "streams": {"heartbeat_seconds": heartbeat},
        "limits": {"drain_seconds": 1},
    }


class Proxy:
    def __init__(self, kind: str, workdir: Path, members: dict[str, str], timeout: float) -> None:
        self.kind = kind
        self.dir = workdir / kind
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.target = f"127.0.0.1:{self.port}"
        self.log_path = self.dir / "proxy.log"
        if kind == "nginx":
            conf = self.dir / "nginx.conf"
            conf.write_text(placement.nginx_config(members, listen=self.target, timeout=timeout,
                                                   pid=str(self.dir / "nginx.pid"), error_log=str(self.log_path)))
            (self.dir / "logs").mkdir(exist_ok=True)
            self.args = [_binary("nginx"), "-p", str(self.dir), "-c", str(conf), "-g", "daemon off;"]
        else:
            conf = self.dir / "haproxy.cfg"
            conf.write_text(placement.haproxy_config(members, bind=self.target, timeout=timeout))
            self.args = [_binary("haproxy"), "-db", "-f", str(conf)]
        self.config_path = conf
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Proxy":
        self.proc = subprocess.Popen(self.args, stdout=open(self.dir / "stdout.log", "ab"), stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: {self.log()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not listen on {self.target}: {self.log()}")

    def log(self) -> str:
        out = ""
        for p in (self.dir / "stdout.log", self.log_path):
            if p.exists():
                out += p.read_text()[-3000:]
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class TestFleet:
    """Three daemons (executor-0..2) and both proxies in front of them."""

    __test__ = False

    def __init__(self, workdir: Path, proxy_timeout: float = PROXY_TIMEOUT, heartbeat: float = HEARTBEAT) -> None:
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.ports = {m: free_port() for m in MEMBERS}
        self.targets = {m: f"127.0.0.1:{p}" for m, p in self.ports.items()}
        self.daemons = {m: DaemonProcess(daemon_config(m, self.ports[m], heartbeat), state_dir=workdir / m,
                                         listen=self.targets[m]) for m in MEMBERS}
        self.proxies = {kind: Proxy(kind, workdir, self.targets, proxy_timeout) for kind in ("nginx", "haproxy")}

    def start(self) -> "TestFleet":
        for d in self.daemons.values():
            d.start()
        for p in self.proxies.values():
            p.start()
        return self

    def stop(self) -> None:
        for p in self.proxies.values():
            p.stop()
        for d in self.daemons.values():
            d.kill()

    def owner(self, task_id: str) -> str:
        return placement.owner_of(task_id, MEMBERS)

    def tasks_on(self, member: str, want: str) -> list[str]:
        """Tasks (among ``want``'s prefix) the member's own ListTasks reports."""
        from executor.client import Client

        with Client(self.targets[member], token=AGENT, deadline=30) as c:
            return sorted(t.task_id for t in c.list_tasks().tasks if t.task_id.startswith(want))

    def task_for(self, member: str, prefix: str) -> str:
        """A task id owned by ``member``."""
        for i in range(10000):
            task = f"{prefix}-{i}"
            if self.owner(task) == member:
                return task
        raise AssertionError("no task id found")

    def log(self) -> str:
        return "\n".join(f"--- {name}\n{d.log()}" for name, d in self.daemons.items()) + "\n".join(
            f"--- {k}\n{p.log()}" for k, p in self.proxies.items())


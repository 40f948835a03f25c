"""A private OpenSSH server for tests and benchmarks that kill or reconfigure a server.

The shared test sshd (scripts/sshd-up.sh, 127.0.0.1:22022) is used by every engineer's test run
and must never be stopped. A test that kills a server, or needs OpenSSH's default limits, starts
one of these instead: its own config, pid file and log under a temp dir, its own port, the same
test account, host key and client key as the shared one (made by sshd-up.sh). It runs in the
foreground (``sshd -D``) as our child, so ``kill()`` only ever hits a process we started.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.infra import ssh as shared


def _free_port() -> int:
    """A free port below the ephemeral range (32768+), so that no outgoing connection is handed it
    while the server is down between a kill and a restart."""
    for _ in range(200):
        port = random.randint(23000, 29999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 23000-29999")


class PrivateSSHD:
    def __init__(self, workdir: Path, config: str = "", port: int | None = None) -> None:
        self.facts = shared.facts()  # the account and keys come from the shared setup
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = port or _free_port()
        self.extra = config
        self.proc: subprocess.Popen | None = None
        self.config = self.dir / "sshd_config"
        self.log = self.dir / "sshd.log"
        self.known_hosts = self.dir / "known_hosts"
        host_pub = Path(self.facts["host_key_pub"]).read_text().split()
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        cache = Path(self.facts["key_file"]).parent
        self.config.write_text(
            f"ListenAddress 127.0.0.1\nPort {self.port}\n"
            f"HostKey {Path(self.facts['host_key_pub']).with_suffix('')}\n"
            f"PidFile {self.dir / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {cache / 'authorized_keys'}\nAllowUsers {self.facts['user']}\n"
            "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PubkeyAuthentication yes\nPermitRootLogin no\nPrintMotd no\nPrintLastLog no\nUseDNS no\n"
            "ClientAliveInterval 0\nLogLevel INFO\n" + config)

    def start(self, timeout: float = 10.0) -> "PrivateSSHD":
        subprocess.run(["/usr/sbin/sshd", "-t", "-f", str(self.config)], check=True, capture_output=True)
        self.proc = subprocess.Popen(["/usr/sbin/sshd", "-D", "-f", str(self.config), "-E", str(self.log)],
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the private sshd exited with {self.proc.returncode}: {self.tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return self
            except OSError:
                pass
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"the private sshd did not answer on port {self.port}: {self.tail()}")

    def tail(self) -> str:
        try:
            return "\n".join(self.log.read_text().splitlines()[-5:])
        except OSError:
            return ""

    def options(self, **overrides) -> dict:
        """Options for ``SSHOptions`` (without ``kind``) against this server."""
        f = self.facts
        return {"host": "127.0.0.1", "port": self.port, "user": f["user"], "key_file": f["key_file"],
                "known_hosts": str(self.known_hosts), **overrides}

    def kill_listener(self) -> None:
        """SIGKILL the listening sshd (ours); established connections keep their own processes."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def session_pids(self) -> list[int]:
        """The per-connection sshd processes of our listener: its children (the privileged monitors)
        and their sshd children (which hold the connections); not the users' programs."""
        if self.proc is None:
            return []
        found: list[int] = []
        todo = [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
            except OSError:
                continue
            for kid in kids:
                try:
                    comm = Path(f"/proc/{kid}/comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith("sshd"):
                    found.append(kid)
                    todo.append(kid)
        return found

    def stop(self) -> None:
        """Kill the listener and every per-connection process it forked."""
        kids = self.session_pids()
        self.kill_listener()
        for pid in kids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

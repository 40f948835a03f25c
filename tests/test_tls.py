"""TLS on TCP: a server certificate, client-certificate authentication, and tokens on top."""

from __future__ import annotations

import shutil
import socket
import subprocess

import pytest

from executor.client import Client, Unauthenticated, Unavailable, tls_credentials
from tests.daemon import DaemonProcess

TOKEN = "tls-agent-token-0123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1, a client certificate, and a stranger's."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (apt-get install openssl)")
    d = tmp_path_factory.mktemp("pki")
    for name in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
                "-keyout", f"{name}.key", "-out", f"{name}.crt", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, ca in (("server", "ca"), ("client", "ca"), ("stranger", "other-ca")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", cwd=d)
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
                "-days", "2", "-out", f"{name}.crt", *(["-extfile", "san.ext"] if name == "server" else []), cwd=d)
    return d


@pytest.fixture(scope="module")
def daemon(pki, tmp_path_factory):
    port = free_port()
    d = DaemonProcess({
        "backend": "local", "backends": {"local": {"kind": "local"}},
        "tls": {"cert": str(pki / "server.crt"), "key": str(pki / "server.key"), "client_ca": str(pki / "ca.crt")},
        "auth": {"tokens": [{"name": "agent", "token": TOKEN, "roles": ["exec"]}]},
    }, state_dir=tmp_path_factory.mktemp("tls") / "state", listen=f"127.0.0.1:{port}").start()
    yield d
    d.kill()


def creds(pki, cert: str | None):
    """The client library's own TLS helper (the CLI's --ca/--cert/--key use it too)."""
    return tls_credentials(str(pki / "ca.crt"), cert and str(pki / f"{cert}.crt"), cert and str(pki / f"{cert}.key"))


def test_tls_with_client_certificate_and_token(daemon, pki):
    with Client(daemon.target, token=TOKEN, credentials=creds(pki, "client"), deadline=30) as c:
        assert c.run("tls", "echo secure").stdout == b"secure\n"
    with Client(daemon.target, token="wrong", credentials=creds(pki, "client"), deadline=30) as c:
        with pytest.raises(Unauthenticated):
            c.run("tls", "true")


@pytest.mark.parametrize("cert", [None, "stranger"])
def test_without_a_trusted_client_certificate_the_handshake_fails(daemon, pki, cert):
    with Client(daemon.target, token=TOKEN, credentials=creds(pki, cert), deadline=10) as c:
        with pytest.raises(Unavailable):
            c.run("tls", "true")


def test_plaintext_is_refused(daemon):
    with Client(daemon.target, token=TOKEN, deadline=10) as c:
        with pytest.raises(Unavailable):
            c.run("tls", "true")


def test_tls_credentials_say_what_is_wrong(pki, tmp_path):
    assert tls_credentials() is None  # plaintext (unix sockets)
    with pytest.raises(ValueError, match="give both or neither"):
        tls_credentials(str(pki / "ca.crt"), cert=str(pki / "client.crt"))
    with pytest.raises(ValueError, match=r"cannot read the CA certificate file .*nope\.crt"):
        tls_credentials(str(tmp_path / "nope.crt"))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os
    import sys

    return subprocess.run([sys.executable, "-m", "executor", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def test_the_command_line_speaks_tls(daemon, pki):
    tls = ["--ca", str(pki / "ca.crt"), "--cert", str(pki / "client.crt"), "--key", str(pki / "client.key")]
    r = cli("exec", "--target", daemon.target, "--token", TOKEN, *tls, "--task", "tls-cli", "--", "echo", "over tls")
    assert (r.returncode, r.stdout) == (0, "over tls\n"), r.stderr
    r = cli("approvals", "--target", daemon.target, "--json", "--deadline", "10",
            env={"EXECUTOR_TOKEN": TOKEN, "EXECUTOR_CA": str(pki / "ca.crt"), "EXECUTOR_CERT": str(pki / "client.crt"),
                 "EXECUTOR_KEY": str(pki / "client.key")})
    # through TLS (from the environment) to the daemon, which answers: this token may not approve
    assert r.returncode != 0 and "lacks the 'approve' role" in r.stderr, r.stdout + r.stderr
    r = cli("ps", "--target", daemon.target, "--token", TOKEN, *tls, "--json")
    assert r.returncode == 0, r.stderr
    plain = cli("ps", "--target", daemon.target, "--token", TOKEN, "--json", "--deadline", "10")
    assert plain.returncode != 0
    missing = cli("ps", "--target", daemon.target, "--token", TOKEN, "--ca", str(pki / "ca.crt"), "--cert",
                  str(pki / "client.crt"))
    assert missing.returncode != 0 and "give both or neither" in missing.stderr

"""The ssh backend's spawn error path, without a server: a start the remote wrapper refuses is
reported with what the remote shell printed on stderr (tests/test_ssh_backend.py runs the rest
against a real sshd)."""

from __future__ import annotations

import pytest

from executor.backends.base import BackendError, ByteQueue, ErrorKind
from executor.backends.ssh import SSHBackend, SSHOptions
from executor.backends.ssh import backend as ssh_backend


class _RefusedStart:
    """A channel process whose handshake failed after the remote shell said why on stderr."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        self.stdout = ByteQueue()
        self.stderr = ByteQueue()
        self.stderr.feed(b"bash: /nonexistent/python3: No such file or directory\n")
        self.aborted = False

    async def started(self, timeout: float) -> None:
        raise BackendError("the remote shell ended before starting the command", ErrorKind.FAILED_PRECONDITION)

    def abort(self) -> None:
        self.aborted = True


async def test_a_refused_start_says_what_the_remote_shell_printed(tmp_path, monkeypatch):
    backend = SSHBackend("ssh", SSHOptions(host="127.0.0.1"), state_dir=tmp_path)

    async def open_any(build, pty):
        return object(), object()

    monkeypatch.setattr(backend, "_open_any", open_any)
    monkeypatch.setattr(ssh_backend, "_ChannelProcess", _RefusedStart)
    try:
        with pytest.raises(BackendError) as info:
            await backend._spawn(["true"], cwd="/", env={}, pty=None)
    finally:
        await backend.close()
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    assert info.value.message == ("the remote shell ended before starting the command: "
                                  "bash: /nonexistent/python3: No such file or directory")

"""The ssh backend against a real OpenSSH server on 127.0.0.1 (scripts/sshd-up.sh).

Everything here runs for real: the server, the test account, host-key checks, the
remote processes. The backend-independent behaviour (shell state, timeouts, files
through the daemon) is covered by tests/conformance with this backend as default.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import tarfile
import time
from pathlib import Path

import paramiko
import pytest

from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.ssh import SSHBackend, SSHOptions, fingerprint
from tests.infra import ssh as infra
from tests.infra.private_sshd import PrivateSSHD

pytestmark = pytest.mark.backend("ssh")

ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture(scope="module")
def facts() -> dict:
    return infra.facts()


@pytest.fixture
async def make_backend(facts, tmp_path):
    """Backends built from the test server's facts plus overrides; closed after the test."""
    made: list[SSHBackend] = []

    def make(state_dir: Path | None = None, **overrides) -> SSHBackend:
        opts = {k: v for k, v in infra.provision().items() if k != "kind"}
        opts.update(overrides)
        backend = SSHBackend("ssh", SSHOptions(**opts), state_dir=state_dir or tmp_path / f"state{len(made)}")
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()


async def read_until(stream, needle: bytes, timeout: float = 10.0) -> bytes:
    buf = b""
    async with asyncio.timeout(timeout):
        while needle not in buf:
            chunk = await stream.read()
            if not chunk:
                raise AssertionError(f"EOF before {needle!r}; got {buf!r}")
            buf += chunk
    return buf


async def run(sb, argv, env=ENV, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    proc = await sb.spawn(argv, cwd=sb.root, env=env)
    if stdin:
        await proc.write(stdin)
    await proc.close_stdin()
    out, err = await drain(proc)
    return await proc.wait(), out, err


GONE = ('gone() {{ s=$(cat /proc/{pid}/stat 2>/dev/null) || return 0; s=${{s##*) }}; [ "${{s%% *}}" = Z ]; }}; '
        'for i in $(seq 100); do gone && {{ echo gone; exit 0; }}; sleep 0.05; done; echo alive')


async def session_alive(sb, sid: int) -> list[str]:
    """Live (not zombie) processes of session ``sid`` on the remote host: their stat lines."""
    code, out, _ = await run(sb, ["/bin/sh", "-c",
                                  'for d in /proc/[0-9]*; do read -r s <"$d/stat" 2>/dev/null || continue; '
                                  'r=${s##*) }; set -- $r; '
                                  '[ "$1" != Z ] && [ "$4" = "' + str(sid) + '" ] && echo "$s"; done; exit 0'])
    assert code == 0
    return [line for line in out.decode().splitlines() if line]


def server_side_pids(local_port: int, server_port: int) -> list[int]:
    """The sshd processes serving the TCP connection from our ``local_port`` (from /proc:
    the server-side socket's inode, then the processes holding it)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == server_port and int(remote.rsplit(":", 1)[1], 16) == local_port:
                inodes.add(f"socket:[{inode}]")
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    pids.add(int(proc.name))
                    break
        except OSError:
            continue
    return sorted(pids)


def _status(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return ""


def kill_all(pids: list[int], sig: int) -> None:
    """Signal processes that may already be gone (one sshd process ending takes its partner along)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# ---------------------------------------------------------------------------


async def test_spawn_env_is_exact_and_process_leads_its_session(make_backend):
    b = make_backend()
    sb = await b.sandbox("env-exact")
    env = {"PATH": "/usr/bin:/bin", "QUOTES": "a'b\"c $HOME `x` \\", "NL": "line1\nline2", "EMPTY": "",
           "UNI": "héllo ✓", "SPACES": "  two  spaces  "}
    code, out, err = await run(sb, ["/usr/bin/env", "-0"], env=env)
    assert (code, err) == (0, b"")
    got = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
    assert got == env

    code, out, _ = await run(sb, ["/bin/sh", "-c", 'read -r s </proc/$$/stat; r=${s##*) }; set -- $r; '
                                                  'echo "$$ $4 $(pwd)"'])
    pid, sid, cwd = out.decode().split()
    assert code == 0 and pid == sid and cwd == sb.root


async def test_stdin_stdout_stderr_and_exit_codes(make_backend):
    b = make_backend()
    sb = await b.sandbox("pipes")
    payload = bytes(range(256)) * 4000  # 1 MB, every byte value
    code, out, err = await run(sb, ["/bin/sh", "-c", "cat; echo oops >&2; exit 42"], stdin=payload)
    assert code == 42 and out == payload and err == b"oops\n"
    code, _, _ = await run(sb, ["/bin/sh", "-c", "kill -TERM $$"])
    assert code == -signal.SIGTERM


async def test_missing_cwd_and_program(make_backend):
    b = make_backend()
    sb = await b.sandbox("missing")
    with pytest.raises(BackendError) as info:
        await sb.spawn(["true"], cwd=sb.root + "/nope", env=ENV)
    assert info.value.kind is ErrorKind.NOT_FOUND and "nope" in info.value.message
    code, _, err = await run(sb, ["no-such-program-xyz"])
    assert code == 127 and b"no-such-program-xyz" in err


async def test_long_lived_shell_keeps_state(make_backend):
    b = make_backend()
    sb = await b.sandbox("shell")
    shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
    await shell.write(b"mkdir -p sub && cd sub && X=42 && f() { echo fn$1; }\n")
    await shell.write(b"echo $X $(pwd) $(f 7) __done__\n")
    out = await read_until(shell.stdout, b"__done__")
    assert out.decode().split() == ["42", sb.root + "/sub", "fn7", "__done__"]
    await shell.close_stdin()
    await drain(shell)
    assert await shell.wait() == 0


async def test_signal_session_kills_the_whole_tree(make_backend):
    b = make_backend()
    sb = await b.sandbox("kill-tree")
    proc = await sb.spawn(SH + ["-c", "sleep 300 & (sleep 301; true) & echo $$ ready; wait"], cwd=sb.root, env=ENV)
    first = await read_until(proc.stdout, b"ready")
    sid = int(first.split()[0])  # the command leads its own session; proc.pid is its reaper
    assert len(await session_alive(sb, sid)) >= 3
    await sb.signal_session(sid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    deadline = time.monotonic() + 30  # bounds a hang only: the loop ends once the session is gone
    while (left := await session_alive(sb, sid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert left == []


async def test_pty_size_resize_and_ctrl_c(make_backend):
    b = make_backend()
    sb = await b.sandbox("pty")
    proc = await sb.spawn(SH, cwd=sb.root, env={**ENV, "TERM": "xterm", "PS1": "$ "}, pty=PtySize(30, 100))
    assert proc.stderr is None
    # Markers are computed by the shell, so the terminal's echo of the input never matches them.
    await proc.write(b"stty size; tty >/dev/null && echo IS-A-$((6*7))\n")
    out = await read_until(proc.stdout, b"IS-A-42\r\n")
    assert b"30 100" in out
    await proc.resize(PtySize(40, 132))
    await proc.write(b"stty size\n")
    assert b"40 132" in await read_until(proc.stdout, b"40 132")
    await proc.write(b"sleep 300\n")
    await read_until(proc.stdout, b"sleep 300\r\n")  # the echo: the shell has the line
    # Ctrl-C until the foreground sleep is gone and the shell runs the next line (the first
    # ^C may land before sleep starts; bash then just discards its input line).
    async with asyncio.timeout(10):
        out = b""
        while b"after=2" not in out:
            await proc.write(b"\x03")
            await proc.write(b"echo after=$((1+1))\n")
            try:
                out += await asyncio.wait_for(read_until(proc.stdout, b"after=2"), 0.5)
            except TimeoutError:
                pass
    # A late ^C from the loop above can make the shell discard a line typed after it: repeat the
    # exit until the shell ends (every wait is bounded, so a lost line cannot hang the test).
    drained = asyncio.ensure_future(drain(proc))
    async with asyncio.timeout(30):
        while not drained.done():
            try:
                await proc.write(b"exit 5\n")
            except BackendError:
                break  # the shell is gone already
            await asyncio.wait({drained}, timeout=2)
        await drained
    assert await asyncio.wait_for(proc.wait(), 10) == 5


async def test_files_round_trip(make_backend):
    b = make_backend()
    sb = await b.sandbox("files")

    async def chunks():
        yield tar_single_file("hello.txt", b"hi there\n")

    await sb.put_archive(sb.root + "/in", chunks())
    data = b"".join([c async for c in sb.get_archive(sb.root + "/in/hello.txt")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("hello.txt").read() == b"hi there\n"
    await sb.release(remove_files=True)
    sb2 = await b.sandbox("files")
    code, out, _ = await run(sb2, ["ls", "-A"])
    assert code == 0 and out == b""


async def test_changed_host_key_is_refused_with_fingerprints(make_backend, facts, tmp_path):
    real = paramiko.PKey.from_path(facts["host_key_pub"].removesuffix(".pub"))
    other = paramiko.PKey.from_path(facts["other_key_file"])
    known = tmp_path / "known_hosts"
    known.write_text(f"[{facts['host']}]:{facts['port']} {other.get_name()} {other.get_base64()}\n")
    b = make_backend(known_hosts=str(known))
    with pytest.raises(BackendError) as info:
        await b.sandbox("x")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    assert "CHANGED" in info.value.message
    assert fingerprint(real) in info.value.message and fingerprint(other) in info.value.message
    health = await b.health()
    assert not health.available and fingerprint(real) in health.reason


async def test_unknown_host_refused_unless_accept_new(make_backend, facts, tmp_path):
    real = paramiko.PKey.from_path(facts["host_key_pub"].removesuffix(".pub"))
    known = tmp_path / "kh" / "known_hosts"
    with pytest.raises(BackendError) as info:
        await make_backend(known_hosts=str(known)).sandbox("x")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    assert "not in known_hosts" in info.value.message and fingerprint(real) in info.value.message
    assert not known.exists()

    sb = await make_backend(known_hosts=str(known), accept_new_host_keys=True).sandbox("x")
    assert (await run(sb, ["true"]))[0] == 0
    assert real.get_base64() in known.read_text()
    # Recorded: a strict backend now connects.
    assert (await run(await make_backend(known_hosts=str(known)).sandbox("x"), ["true"]))[0] == 0


async def test_wrong_key_or_user_is_unauthenticated(make_backend, facts):
    for overrides in ({"key_file": facts["other_key_file"]}, {"user": "no-such-user-here"}):
        b = make_backend(**overrides)
        with pytest.raises(BackendError) as info:
            await b.sandbox("x")
        assert info.value.kind is ErrorKind.UNAUTHENTICATED, overrides
        assert "refused" in info.value.message and "authorized_keys" in info.value.message
        health = await b.health()
        assert not health.available and "refused" in health.reason
        await b.start()  # never raises for an unreachable backend


async def test_unreachable_port_is_unavailable(make_backend):
    b = make_backend(port=1, connect_timeout=2)
    with pytest.raises(BackendError) as info:
        await b.sandbox("x")
    assert info.value.kind is ErrorKind.UNAVAILABLE and "refused" in info.value.message
    assert not (await b.health()).available


async def test_policy_shows_no_secrets(make_backend, monkeypatch):
    monkeypatch.setenv("EXECUTOR_TEST_SSH_PASSWORD", "hunter2-secret")
    b = make_backend(password_env="EXECUTOR_TEST_SSH_PASSWORD")
    assert (await run(await b.sandbox("p"), ["true"]))[0] == 0
    text = repr(b.policy()) + repr(await b.health())
    assert "hunter2" not in text
    assert "verified" in b.policy()["host_keys"]


async def test_connection_drop_gives_lost_then_reconnects(make_backend, facts):
    b = make_backend()
    sb = await b.sandbox("drop")
    shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
    await shell.write(b"sleep 300 & echo bg=$!\n")
    bg = int((await read_until(shell.stdout, b"\n")).split(b"=")[1])
    await shell.write(b"sleep 200\n")  # a command running when the connection goes
    local_port = b._conn.transport.sock.getsockname()[1]
    pids = server_side_pids(local_port, facts["port"])
    assert pids, "found no sshd process serving our connection"
    kill_all(pids, signal.SIGKILL)

    with pytest.raises(BackendError) as info:
        async with asyncio.timeout(10):
            while await shell.stdout.read():
                pass
    assert info.value.kind is ErrorKind.LOST and "lost" in info.value.message
    with pytest.raises(BackendError) as info:
        await shell.wait()
    assert info.value.kind is ErrorKind.LOST

    # The next use reconnects, and the sessions of the lost connection are ended (no orphans).
    sb = await b.sandbox("drop")
    assert b.reconnects == 1 and b.orphans_ended >= 1
    assert "server closed the connection" in (await b.health()).details["last_loss"]
    code, out, _ = await run(sb, ["/bin/sh", "-c", GONE.format(pid=bg)])
    assert out == b"gone\n"
    assert (await b.health()).available


async def test_start_ends_sessions_a_previous_daemon_left(make_backend, tmp_path):
    state = tmp_path / "daemon-state"
    first = make_backend(state_dir=state)
    sb = await first.sandbox("crash")
    proc = await sb.spawn(["sleep", "300"], cwd=sb.root, env=ENV)
    pid = proc.pid
    await first.close()  # the "crash": the connection goes, sleep does not notice

    other = make_backend()  # another daemon's backend (own registry): must not touch it
    await other.start()
    assert other.orphans_ended == 0
    code, out, _ = await run(await other.sandbox("probe"), ["/bin/sh", "-c", f"kill -0 {pid} && echo alive"])
    assert out == b"alive\n"

    second = make_backend(state_dir=state)
    await second.start()
    assert second.orphans_ended == 1
    code, out, _ = await run(await second.sandbox("probe"), ["/bin/sh", "-c", GONE.format(pid=pid)])
    assert out == b"gone\n"


async def test_concurrent_tasks_share_one_connection(make_backend, facts):
    b = make_backend()

    async def task(i: int) -> bytes:
        sb = await b.sandbox(f"conc-{i}")
        shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
        for n in range(20):
            await shell.write(f"echo task{i}-{n}\n".encode())
        await shell.write(b"exit 0\n")
        out, _ = await drain(shell)
        assert await shell.wait() == 0
        return out

    outs = await asyncio.gather(*(task(i) for i in range(20)))
    for i, out in enumerate(outs):
        assert out == "".join(f"task{i}-{n}\n" for n in range(20)).encode()
    local_port = b._conn.transport.sock.getsockname()[1]
    assert len(server_side_pids(local_port, facts["port"])) >= 1
    assert b.reconnects == 0


async def test_jump_host(make_backend, facts):
    b = make_backend(jump_host=f"{facts['user']}@{facts['host']}:{facts['port']}")
    sb = await b.sandbox("jump")
    code, out, _ = await run(sb, ["/bin/sh", "-c", "echo via-jump"])
    assert (code, out) == (0, b"via-jump\n")
    assert b._conn.jump is not None and b._conn.jump.is_active()


async def test_sshd_down_is_unavailable_then_recovers(tmp_path):
    """On a private sshd: the shared one serves every other test running meanwhile (other xdist
    workers, other checkouts) and must never be stopped (tests/infra/private_sshd.py)."""
    server = PrivateSSHD(tmp_path / "sshd").start()
    b = SSHBackend("ssh", SSHOptions(**server.options(connect_timeout=3)), state_dir=tmp_path / "state")
    try:
        sb = await b.sandbox("restart")
        assert (await run(sb, ["true"]))[0] == 0
        server.stop()  # sshd goes away: the listener (waited for: its socket is closed) and our connection
        async with asyncio.timeout(30):
            while b._conn.alive():
                await asyncio.sleep(0.02)
        with pytest.raises(BackendError) as info:
            await b.sandbox("restart")
        assert info.value.kind is ErrorKind.UNAVAILABLE and "refused" in info.value.message
        health = await b.health()
        assert not health.available and "refused" in health.reason
        server = PrivateSSHD(server.dir, server.extra, port=server.port).start()  # the same server again
        sb = await b.sandbox("restart")
        assert (await run(sb, ["true"]))[0] == 0
        assert (await b.health()).available and b.reconnects >= 1
    finally:
        await b.close()
        server.stop()


async def test_more_channels_than_max_sessions_opens_overflow_connections(make_backend, facts):
    """On a server with MaxSessions 3, ten long-lived shells still work: the backend opens
    another connection only when the server refuses a channel."""
    b = make_backend(port=facts["low_sessions_port"])
    shells = []
    for i in range(10):
        sb = await b.sandbox(f"many-{i}")
        shells.append(await sb.spawn(SH, cwd=sb.root, env=ENV))
    for i, shell in enumerate(shells):
        await shell.write(f"echo shell-$((1+{i}))\n".encode())
    for i, shell in enumerate(shells):
        assert await read_until(shell.stdout, f"shell-{i + 1}\n".encode()) == f"shell-{i + 1}\n".encode()
    # ceil(10/3) = 4 connections, or a few more when a just-closed channel still counted on the
    # server (the limit seen is then lower); never one connection per channel.
    assert 4 <= 1 + len(b._extra) <= 7
    assert b._conn.limit in (2, 3)
    for shell in shells:
        await shell.close_stdin()
        await drain(shell)
        assert await shell.wait() == 0
    # Room again on the primary: the next channel goes there, no new connection.
    extra = len(b._extra)
    assert (await run(await b.sandbox("many-0"), ["true"]))[0] == 0
    assert len(b._extra) == extra


async def test_slow_reader_pauses_and_resumes_without_loss(make_backend):
    b = make_backend()
    sb = await b.sandbox("flow")
    size = 24 << 20
    proc = await sb.spawn(["/bin/sh", "-c", f"head -c {size} /dev/zero; echo done >&2"], cwd=sb.root, env=ENV)
    await proc.close_stdin()
    deadline = time.monotonic() + 10
    while len(proc.stdout) < (4 << 20) and time.monotonic() < deadline:  # buffered up to the high-water mark
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.2)
    assert (4 << 20) <= len(proc.stdout) < size  # paused: not everything was pulled in
    out, err = await drain(proc)
    assert len(out) == size and out.count(0) == size and err == b"done\n"
    assert await proc.wait() == 0


async def test_a_server_that_stops_answering_is_lost_by_keepalive(make_backend, facts):
    """A hung server (its kernel still ACKs, so TCP notices nothing) is detected by the
    keepalive pings: the running command fails as LOST with that reason."""
    b = make_backend(keepalive_interval=0.3)
    sb = await b.sandbox("hung")
    shell = await sb.spawn(SH, cwd=sb.root, env=ENV)
    await shell.write(b"echo up\n")
    await read_until(shell.stdout, b"up\n")
    pids = server_side_pids(b._conn.transport.sock.getsockname()[1], facts["port"])
    assert pids
    try:
        kill_all(pids, signal.SIGSTOP)
        with pytest.raises(BackendError) as info:
            async with asyncio.timeout(15):
                while await shell.stdout.read():
                    pass
        assert info.value.kind is ErrorKind.LOST and "keepalives" in info.value.message
    finally:
        kill_all(pids, signal.SIGKILL)  # SIGKILL ends stopped processes too
    assert (await run(await b.sandbox("hung"), ["true"]))[0] == 0  # reconnected


async def test_keys_from_an_ssh_agent(make_backend, facts, tmp_path, monkeypatch):
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30  # bounds a hang only
        while not sock.exists() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", "-q", facts["key_file"]], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        b = make_backend(key_file=None)
        assert b.policy()["auth"] == "publickey (ssh-agent)"
        code, out, _ = await run(await b.sandbox("agent"), ["/bin/sh", "-c", "echo via-agent"])
        assert (code, out) == (0, b"via-agent\n")
    finally:
        agent.kill()
        agent.wait()


async def test_no_credentials_is_a_config_error(make_backend, monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    b = make_backend(key_file=None)
    with pytest.raises(BackendError) as info:
        await b.sandbox("x")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION and "no credentials" in info.value.message
    assert not (await b.health()).available


async def test_unreadable_key_file_is_a_config_error(make_backend, tmp_path):
    garbage = tmp_path / "not-a-key"
    garbage.write_text("garbage\n")
    for path in (garbage, tmp_path / "missing-key"):
        with pytest.raises(BackendError) as info:
            await make_backend(key_file=str(path)).sandbox("x")
        assert info.value.kind is ErrorKind.FAILED_PRECONDITION and str(path) in info.value.message


async def test_closing_stdin_as_processes_exit_never_drops_the_connection(make_backend):
    """Regression: paramiko can send an EOF after its reply to the server's CLOSE (its issue
    #1115); OpenSSH then drops the whole connection. Hundreds of quick processes whose stdin
    is closed just as they exit, twenty at a time, must all succeed on one connection."""
    b = make_backend()
    sb = await b.sandbox("close-race")

    async def quick() -> int:
        proc = await sb.spawn(["true"], cwd=sb.root, env=ENV)
        await proc.close_stdin()
        await drain(proc)
        return await proc.wait()

    for _ in range(15):
        assert await asyncio.gather(*(quick() for _ in range(20))) == [0] * 20
    assert b.reconnects == 0


async def test_writing_to_an_ended_process_is_not_a_lost_connection(make_backend):
    b = make_backend()
    sb = await b.sandbox("ended")
    proc = await sb.spawn(["true"], cwd=sb.root, env=ENV)
    await drain(proc)
    assert await proc.wait() == 0
    deadline = time.monotonic() + 30  # bounds a hang only: the loop ends at the first refused write
    with pytest.raises(BackendError) as info:
        while time.monotonic() < deadline:  # the channel closes just after the exit status
            await proc.write(b"x")
            await asyncio.sleep(0.01)
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION
    assert b._conn.alive()


async def test_signal_session_also_gets_processes_forked_during_the_walk(make_backend):
    """A session that keeps forking while it is killed: processes forked after a /proc walk
    began would survive one pass (and hold the channel open); none may survive."""
    b = make_backend()
    sb = await b.sandbox("forking")
    proc = await sb.spawn(SH + ["-c", "echo go; for i in $(seq 3000); do sleep 300 & done; wait"], cwd=sb.root, env=ENV)
    await read_until(proc.stdout, b"go\n")
    await asyncio.sleep(0.05)  # forking in full swing
    await sb.signal_session(proc.pid, signal.SIGKILL)
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGKILL
    await asyncio.wait_for(drain(proc), 10)  # nothing of the session holds the channel open
    assert await session_alive(sb, proc.pid) == []

"""The daytona backend through the real ``daytona`` SDK against the local server
(tests/fakes/daytona_server.py), which runs every command for real and records every request.

Backend-independent behaviour through the daemon is covered by tests/conformance; here: what
only this backend does (the launcher, the log framing, stdin framing, labels, faults) and the
exact requests the SDK sends.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import re
import signal
import tarfile
import time
from pathlib import Path

import pytest

from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.daytona import DaytonaBackend, DaytonaOptions, LogDecoder, encode_input, kill_sessions_command
from tests.infra import daytona as infra
from tests.rendezvous import RELEASE, WAIT_FOR_RELEASE

pytestmark = pytest.mark.backend("daytona")

SH = ["bash", "--noprofile", "--norc"]


@pytest.fixture
async def fake(tmp_path):
    server = await infra.in_process(tmp_path / "fake")
    yield server
    await server.stop()


@pytest.fixture
async def make_backend(fake, tmp_path):
    made: list[DaytonaBackend] = []

    def make(state_dir: Path | None = None, **overrides) -> DaytonaBackend:
        opts = {k: v for k, v in infra.options(fake.api_url).items() if k != "kind"}
        opts.update(overrides)
        backend = DaytonaBackend("dt", DaytonaOptions(**opts), state_dir=state_dir or tmp_path / f"state{len(made)}")
        made.append(backend)
        return backend

    yield make
    for backend in made:
        await backend.close()


def env_for(sb) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": sb.root, "LANG": "C.UTF-8"}


async def read_until(stream, needle: bytes, timeout: float = 10.0) -> bytes:
    buf = b""
    async with asyncio.timeout(timeout):
        while needle not in buf:
            chunk = await stream.read()
            if not chunk:
                break
            buf += chunk
    return buf


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper counts as dead)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except FileNotFoundError:
        return False


async def run(sb, script: str, env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
    proc = await sb.spawn([*SH, "-c", script], cwd=sb.root, env=env or env_for(sb))
    await proc.close_stdin()
    out, err = await drain(proc)
    return await proc.wait(), out, err


# -- pure helpers ---------------------------------------------------------------------------

def test_log_decoder_restores_exact_bytes_across_split_frames():
    chunks = [b"one\n", b"err \x01\x01\x01 \x00 inside", b"tail no newline \xe1\x01"]
    log = (b"\x01\x01\x01S42\n" + b"\x01\x01\x01B" + base64.b64encode(chunks[0]) + b"\n"
           + b"\x02\x02\x02B" + base64.b64encode(chunks[1]) + b"\n"
           + b"\x01\x01\x01B" + base64.b64encode(chunks[2]) + b"\n" + b"\x02\x02\x02not ours\n")
    for step in (1, 2, 5, len(log)):
        decoder = LogDecoder()
        got: list[tuple[str, bytes]] = []
        for i in range(0, len(log), step):
            got += decoder.feed(log[i:i + step])
        assert got == [("pid", b"42"), ("stdout", chunks[0]), ("stderr", chunks[1]), ("stdout", chunks[2]),
                       ("stderr", b"not ours\n")]


def test_encode_input_is_base64_lines():
    assert encode_input(b"ab\x00c") == "BYWIAYw==\n"
    big = os.urandom(100_000)
    lines = encode_input(big).splitlines()
    assert len(lines) == 3 and b"".join(base64.b64decode(line[1:]) for line in lines) == big


def test_helper_commands_survive_the_toolbox_argument_splitting():
    """process.execute is not a shell: it splits on spaces and quotes only (tests/fakes does
    the same); the commands we send through it must come out as the argv we meant."""
    from tests.fakes.daytona_server import split_command

    assert split_command(kill_sessions_command([12, 34], 9))[:2] == ["/bin/sh", "-c"]
    script = split_command(kill_sessions_command([12, 34], 9))[2]
    assert script.startswith("for p in 12 34; do") and "_extree" in script


def test_options_reject_contradictions():
    with pytest.raises(ValueError):
        DaytonaOptions(snapshot="a", image="b")
    with pytest.raises(ValueError):
        DaytonaOptions(cpu=2)  # resources only apply when building from an image
    with pytest.raises(ValueError):
        DaytonaOptions(network_block_all=True, network_allow_list=["10.0.0.0/8"])
    with pytest.raises(ValueError):
        DaytonaOptions(bogus=1)


# -- through the SDK and the server ----------------------------------------------------------

async def test_create_payload_carries_the_options(fake, make_backend):
    backend = make_backend(snapshot="snap-1", target="eu", auto_stop_interval=7, auto_delete_interval=60,
                           network_allow_list=["10.0.0.0/8", "192.168.0.0/16"], labels={"team": "x"})
    await backend.start()
    sb = await backend.sandbox("task-a")
    [create] = fake.requests_to("POST", "/api/sandbox")
    body = create.body
    assert body["snapshot"] == "snap-1"
    assert body["target"] == "eu"
    assert body["autoStopInterval"] == 7
    assert body["autoDeleteInterval"] == 60
    assert body["networkAllowList"] == "10.0.0.0/8,192.168.0.0/16"
    labels = body["labels"]
    assert labels["team"] == "x" and labels["executor.task"] == "task-a" and labels["executor.backend"] == "dt"
    assert len(labels["executor.daemon"]) == 16
    assert create.headers["authorization"] == f"Bearer {infra.API_KEY}"
    assert create.headers["x-daytona-source"] == "sdk-python-async"
    assert sb.root.endswith("/tasks/task-a") and os.path.isdir(sb.root)


async def test_image_build_carries_resources(fake, make_backend):
    backend = make_backend(image="debian:12", cpu=2, memory=4, disk=10, network_block_all=True)
    await backend.sandbox("t")
    [create] = fake.requests_to("POST", "/api/sandbox")
    assert (create.body["cpu"], create.body["memory"], create.body["disk"]) == (2, 4, 10)
    assert "FROM debian:12" in create.body["buildInfo"]["dockerfileContent"]
    assert create.body["networkBlockAll"] is True
    assert backend.capabilities.network_policy == "blocked"


async def test_spawn_streams_exact_output_with_session_leader_and_exact_env(fake, make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    env = {**env_for(sb), "ODD": "a b\tc'$x\"", "EMPTY": ""}
    code, out, err = await run(sb, 'echo "$$ $(ps -o sid= -p $$)"; env | sort; pwd; printf "no newline \\xff"; '
                                   'echo to-err >&2; exit 3', env)
    assert code == 3
    lines = out.split(b"\n")
    pid, sid = lines[0].split()
    assert pid == sid  # a session leader: $$ is the session id
    env_lines = sorted(f"{k}={v}".encode() for k, v in {**env, "PWD": sb.root, "SHLVL": "1", "_": "/usr/bin/env"}.items())
    assert [ln for ln in lines[1:] if b"=" in ln] == env_lines
    assert out.endswith(sb.root.encode() + b"\nno newline \xff")
    assert err == b"to-err\n"
    # one toolbox session per process, run async, input echo suppressed
    [exec_req] = fake.requests_to("POST", "/exec")
    assert exec_req.body["runAsync"] is True and exec_req.body["suppressInputEcho"] is True
    assert "setsid -w /bin/sh -c" in exec_req.body["command"] and "exec env -i --" in exec_req.body["command"]


async def test_output_streams_while_the_command_runs(make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    release = Path(sb.root, RELEASE)
    # The command cannot end before the test creates `release`, which it does only once it has read "first".
    proc = await sb.spawn([*SH, "-c", f"echo first; {WAIT_FOR_RELEASE}; echo second"], cwd=sb.root, env=env_for(sb))
    exited = asyncio.ensure_future(proc.wait())
    assert await read_until(proc.stdout, b"first\n", timeout=30) == b"first\n"
    assert not exited.done()  # read while the command runs (held back to its end, the read would time out)
    release.touch()
    assert await read_until(proc.stdout, b"second\n", timeout=30) == b"second\n"
    assert await proc.stdout.read() == b""
    assert await exited == 0


async def test_binary_output_is_exact_including_nul(make_backend, tmp_path):
    sb = await make_backend().sandbox("t")
    blob = os.urandom(300_000) + b"\x00\x01\x01\x01\x02\x02\x02\xe1\x01 end without newline"
    Path(sb.root, "blob").write_bytes(blob)
    code, out, err = await run(sb, "cat blob; cat blob >&2")
    assert (code, out, err) == (0, blob, blob)


async def test_output_without_newline_is_not_held_back(make_backend):
    sb = await make_backend().sandbox("t")
    # Never ends by itself (nor writes a newline): the prompt can only be read if it is not held back.
    proc = await sb.spawn([*SH, "-c", "printf 'prompt> '; exec sleep 300"], cwd=sb.root, env=env_for(sb))
    try:
        assert await read_until(proc.stdout, b"prompt> ", timeout=30) == b"prompt> "
    finally:
        await sb.signal_session(proc.pid, signal.SIGKILL)
        await drain(proc)
    assert await proc.wait() == -signal.SIGKILL  # it was still running when the prompt was read


async def test_persistent_shell_over_stdin(fake, make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    shell = await sb.spawn(SH, cwd=sb.root, env=env_for(sb))
    await shell.write(b"cd /tmp; X=kept\n")
    await shell.write(b"echo \"$PWD $X\"\n")
    assert await read_until(shell.stdout, b"\n") == b"/tmp kept\n"
    # a command reading stdin gets bytes as written (partial lines, NUL), and a real EOF
    await shell.write(b"cat; echo cat-done\n")
    await shell.write(b"one\ntw")
    assert await read_until(shell.stdout, b"tw") == b"one\ntw"
    await shell.write(b"o\x00\xff no newline")
    await shell.close_stdin()
    out, _ = await drain(shell)
    assert out == b"o\x00\xff no newlinecat-done\n"
    assert await shell.wait() == 0
    inputs = [r.body["data"] for r in fake.requests_to("POST", "/input")]
    assert inputs[:2] == ["B" + base64.b64encode(b"cd /tmp; X=kept\n").decode() + "\n",
                          "B" + base64.b64encode(b'echo "$PWD $X"\n').decode() + "\n"]
    assert inputs[-1] == "E\n"


async def test_signal_session_kills_the_tree_not_the_sandbox(make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    proc = await sb.spawn([*SH, "-c", "sleep 300 & echo $$ $!; wait"], cwd=sb.root, env=env_for(sb))
    pid, child = map(int, (await read_until(proc.stdout, b"\n")).split())
    await sb.signal_session(pid, signal.SIGTERM)
    async with asyncio.timeout(10):
        await drain(proc)
        assert await proc.wait() == -signal.SIGTERM
    deadline = time.monotonic() + 30  # bounds a hang only: the loop ends as soon as the child is gone
    while alive(child) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not alive(child)
    assert (await run(sb, "echo still-here"))[1] == b"still-here\n"


async def test_sigint_is_not_ignored(make_backend):
    sb = await make_backend().sandbox("t")
    proc = await sb.spawn(["sleep", "60"], cwd=sb.root, env=env_for(sb))
    await sb.signal_session(proc.pid, signal.SIGINT)
    async with asyncio.timeout(10):
        await drain(proc)
        assert await proc.wait() == -signal.SIGINT


async def test_exit_code_128_plus_n_without_a_signal_stays_a_code(make_backend):
    sb = await make_backend().sandbox("t")
    assert (await run(sb, "exit 143"))[0] == 143


async def test_files_round_trip_exact_bytes(fake, make_backend):
    sb = await make_backend().sandbox("t")
    payload = bytes(range(256)) * 100

    async def chunks():
        yield tar_single_file("blob.bin", payload)

    await sb.put_archive(f"{sb.root}/in", chunks())
    assert Path(sb.root, "in", "blob.bin").read_bytes() == payload
    data = b"".join([c async for c in sb.get_archive(f"{sb.root}/in/blob.bin")])
    assert tarfile.open(fileobj=io.BytesIO(data)).extractfile("blob.bin").read() == payload
    assert fake.requests_to("POST", "/files/bulk-upload") and fake.requests_to("POST", "/files/bulk-download")
    with pytest.raises(BackendError) as err:
        [c async for c in sb.get_archive(f"{sb.root}/missing")]
    assert err.value.kind is ErrorKind.NOT_FOUND


async def test_a_restarted_daemon_finds_its_sandbox_by_labels(fake, make_backend, tmp_path):
    first = make_backend(state_dir=tmp_path / "state", on_close="keep")
    sb = await first.sandbox("t")
    await run(sb, "echo data > kept.txt")
    shell = await sb.spawn(SH, cwd=sb.root, env=env_for(sb))  # left running by a "crashed" daemon
    await shell.write(b"sleep 300 & echo $!\n")
    orphans = [shell.pid, int(await read_until(shell.stdout, b"\n"))]
    await shell.detach()
    await first.close()
    second = make_backend(state_dir=tmp_path / "state")
    await second.start()
    assert second.adopted == 1
    again = await second.sandbox("t")
    assert second.orphans_ended == 1
    deadline = time.monotonic() + 10
    while any(map(alive, orphans)) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not any(map(alive, orphans))  # the left-over shell and its background job are ended
    assert (await run(again, "cat kept.txt"))[1] == b"data\n"
    assert len(fake.requests_to("POST", "/api/sandbox")) == 1
    # another daemon (other state dir) does not take it
    other = make_backend(state_dir=tmp_path / "other")
    await other.sandbox("t")
    assert len(fake.requests_to("POST", "/api/sandbox")) == 2


async def test_release_deletes_or_stops_per_config(fake, make_backend):
    deleting = make_backend()
    sb = await deleting.sandbox("t1")
    [sandbox_id] = fake.sandboxes
    await sb.release()
    assert fake.requests_to("DELETE", f"/api/sandbox/{sandbox_id}")
    assert not fake.sandboxes
    stopping = make_backend(on_close="stop")
    sb = await stopping.sandbox("t2")
    await sb.release()
    [stopped] = fake.sandboxes.values()
    assert stopped.dto["state"] == "stopped"
    # the next use of that task starts it again
    again = await make_backend(state_dir=stopping.state_dir).sandbox("t2")
    assert (await run(again, "echo up"))[1] == b"up\n"
    assert fake.requests_to("POST", "/start")


async def test_sandbox_per_daemon_shares_one_sandbox(fake, make_backend):
    backend = make_backend(sandbox_per="daemon")
    a, b = await backend.sandbox("a"), await backend.sandbox("b")
    assert a.root != b.root and len(fake.sandboxes) == 1
    await run(a, "echo x > f")
    await a.release(remove_files=True)
    assert not os.path.exists(a.root) and len(fake.sandboxes) == 1
    await backend.close()
    assert not fake.sandboxes


async def test_vanished_sandbox_is_lost_then_recreated(fake, make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    running = await sb.spawn([*SH, "-c", "echo up; sleep 300"], cwd=sb.root, env=env_for(sb))
    await read_until(running.stdout, b"up\n")
    [sandbox_id] = fake.sandboxes
    fake.vanish(sandbox_id)
    with pytest.raises(BackendError) as err:
        async with asyncio.timeout(10):
            await drain(running)
            await running.wait()
    assert err.value.kind is ErrorKind.LOST
    code, out, _ = await run(sb, "echo recreated")  # the same Sandbox object keeps working
    assert (code, out) == (0, b"recreated\n")
    assert "vanished" in sb.take_notice() and sb.take_notice() is None
    assert len(fake.requests_to("POST", "/api/sandbox")) == 2


async def test_sandbox_stopped_by_daytona_is_started_again(fake, make_backend):
    backend = make_backend()
    sb = await backend.sandbox("t")
    Path(sb.root, "kept").write_text("yes")
    [fake_sb] = fake.sandboxes.values()
    await fake._kill_all(fake_sb)  # what an idle auto-stop does
    fake_sb.dto["state"] = "stopped"
    with pytest.raises(BackendError) as err:
        await run(sb, "true")
    assert err.value.kind is ErrorKind.LOST
    assert fake_sb.dto["state"] == "started"
    assert (await run(sb, "cat kept"))[1] == b"yes"  # same sandbox, files kept
    assert "stopped (idle)" in sb.take_notice()
    assert len(fake.requests_to("POST", "/api/sandbox")) == 1


async def test_missing_credentials_is_a_clear_precondition(make_backend, monkeypatch):
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    backend = make_backend(api_key=None, api_key_env="EXECUTOR_TEST_NO_SUCH_KEY")
    await backend.start()  # never raises
    health = await backend.health()
    assert not health.available and "EXECUTOR_TEST_NO_SUCH_KEY" in health.reason
    with pytest.raises(BackendError) as err:
        await backend.sandbox("t")
    assert err.value.kind is ErrorKind.FAILED_PRECONDITION


async def test_refused_key_is_unauthenticated_and_never_shown(fake, make_backend):
    backend = make_backend(api_key="wrong-secret-key")
    health = await backend.health()
    assert not health.available and "refused" in health.reason and "wrong-secret-key" not in health.reason
    assert "wrong-secret-key" not in json.dumps(backend.policy()) + repr(backend.options)
    with pytest.raises(BackendError) as err:
        await backend.sandbox("t")
    assert err.value.kind is ErrorKind.UNAUTHENTICATED


async def test_quota_is_resource_exhausted(fake, make_backend):
    fake.max_sandboxes = 0
    with pytest.raises(BackendError) as err:
        await make_backend().sandbox("t")
    assert err.value.kind is ErrorKind.RESOURCE_EXHAUSTED and "quota" in err.value.message


async def test_unreachable_api_is_unavailable(make_backend):
    backend = make_backend(api_url="http://127.0.0.1:9/api", request_timeout=5)
    health = await backend.health()
    assert not health.available and "unreachable" in health.reason
    with pytest.raises(BackendError) as err:
        await backend.sandbox("t")
    assert err.value.kind is ErrorKind.UNAVAILABLE


async def test_pty_session_leader_resize_ctrl_c_and_exit_code(fake, make_backend):
    backend = make_backend()
    assert backend.capabilities.pty and backend.capabilities.resize
    sb = await backend.sandbox("t")
    env = {**env_for(sb), "TERM": "xterm", "PS1": "$ "}
    proc = await sb.spawn(SH, cwd=sb.root, env=env, pty=PtySize(30, 100))
    assert proc.stderr is None
    await proc.write(b"echo \"<$$ $(ps -o sid= -p $$) $(stty size) $(tty)>\"\n")
    out = await read_until(proc.stdout, b">\r\n")
    pid, sid, rows, cols, tty = re.search(rb"<(\d+) +(\d+) (\d+) (\d+) (\S+)>\r\n", out).groups()
    assert pid == sid and (rows, cols) == (b"30", b"100") and tty.startswith(b"/dev/pts/")
    await proc.resize(PtySize(40, 120))
    await proc.write(b"stty size\n")
    assert b"40 120" in await read_until(proc.stdout, b"40 120")
    await proc.write(b"sleep 300; echo after-sleep\n")
    await asyncio.sleep(0.2)
    await proc.write(b"\x03")
    await proc.write(b"exit 7\n")
    async with asyncio.timeout(10):
        out, _ = await drain(proc)
        assert await proc.wait() == 7
    assert b"\nafter-sleep" not in out and b"^C" in out  # Ctrl-C interrupted the sleep and the list
    assert fake.requests_to("GET", "/process/pty/create-connect")
    assert fake.requests_to("POST", "/resize")[0].body == {"cols": 120, "rows": 40}


async def test_dotenv_in_the_working_directory_is_ignored(fake, make_backend, tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    (tmp_path / "cwd" / ".env").write_text("DAYTONA_TARGET=from-dotenv\n")
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.delenv("DAYTONA_TARGET", raising=False)
    await make_backend().sandbox("t")
    [create] = fake.requests_to("POST", "/api/sandbox")
    assert create.body.get("target") in (None, "")


async def test_pty_output_is_bounded_the_sdk_waits_while_the_reader_is_behind():
    from executor.backends.daytona.process import DaytonaPtyProcess

    class Sandbox:
        def remember(self, pid):
            self.pid = pid

    proc = DaytonaPtyProcess(Sandbox(), "t")
    marker = b"executor-pty-t:"
    assert proc.on_data(b"prompt " + marker + b"42\nhello") is None  # below the bound: no wait
    assert proc.pid == 42
    big = b"x" * proc.stdout.limit
    held = proc.on_data(big)
    assert held is not None  # full: the SDK awaits this before reading the websocket again
    waiting = asyncio.ensure_future(held)
    await asyncio.sleep(0)
    assert not waiting.done()
    assert (await proc.stdout.read()).startswith(b"hello")
    while len(proc.stdout):
        await proc.stdout.read()
    await asyncio.wait_for(waiting, 1)

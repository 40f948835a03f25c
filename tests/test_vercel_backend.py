"""The vercel_sandbox backend through the real vercel-sandbox SDK and the local fake of the Sandbox API.

The fake (tests/fakes/vercel_server.py) runs every command for real, so these tests check what the
backend does (environment, sessions, streaming, signals, files, faults) and the exact requests the
SDK sends for it.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import signal
import socket
import tarfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from executor.backends import backend_class
from executor.backends.base import BackendError, ErrorKind, PtySize, drain, tar_single_file
from executor.backends.vercel_sandbox import IO_WRAPPER
from tests.infra.vercel_sandbox import PROJECT, TEAM, TOKEN, in_process, options

Backend = backend_class("vercel_sandbox")


@pytest.fixture(scope="module")
def fake():
    server = in_process()
    yield server
    server.stop_thread()


def make(fake, state_dir: Path, **extra):
    opts = options(fake.base_url, **extra)
    opts.pop("kind")
    return Backend("vercel", Backend.Options(**opts), state_dir=state_dir)


@pytest.fixture
async def backend(fake, tmp_path):
    b = make(fake, tmp_path)
    await b.start()
    yield b
    await b.close()


async def read_until(stream, needle: bytes, timeout: float = 10) -> bytes:
    """Read chunks until ``needle`` appears (or EOF / deadline)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while needle not in buf:
        chunk = await asyncio.wait_for(stream.read(), max(0.01, deadline - time.monotonic()))
        if not chunk:
            break
        buf += chunk
    return buf


async def run(sb, script: str, env: dict | None = None) -> tuple[int, bytes, bytes]:
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", script], cwd=sb.root,
                          env=env if env is not None else {"PATH": "/usr/bin:/bin"})
    await proc.close_stdin()
    out, err = await drain(proc)
    return await proc.wait(), out, err


def session_members(sid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                raw = open(f"/proc/{entry}/stat", "rb").read()
            except OSError:
                continue
            if raw[raw.rfind(b")") + 2:].split()[3] == str(sid).encode():
                members.append(int(entry))
    return members


def sleep_in_foreground(sid: int) -> bool:
    """A ``sleep`` of session ``sid`` is the terminal's foreground process group."""
    for pid in session_members(sid):
        try:
            raw = open(f"/proc/{pid}/stat", "rb").read()
        except OSError:
            continue
        comm = raw[raw.index(b"(") + 1:raw.rfind(b")")]
        fields = raw[raw.rfind(b")") + 2:].split()
        if comm == b"sleep" and fields[2] == fields[5]:  # pgrp == tpgid
            return True
    return False


async def wait_gone(sid: int, timeout: float = 10) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := session_members(sid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return left


# ---------------------------------------------------------------------------
# Requests the SDK sends
# ---------------------------------------------------------------------------


async def test_create_and_spawn_send_exact_requests(fake, tmp_path):
    b = make(fake, tmp_path, vcpus=2, memory_mb=4096, timeout=600, ports=[3000], network="deny-all",
             image="my-repo:latest")
    fake.clear()
    sb = await b.sandbox("task-A")
    code, out, _ = await run(sb, "echo hi", env={"PATH": "/usr/bin:/bin", "X": "1"})
    assert (code, out) == (0, b"hi\n")

    lookup, create = fake.recorded("GET", "/v2/sandboxes/")[0], fake.recorded("POST", "/v3/sandboxes")[0]
    name = f"executor-{b.daemon_id()}-task-a-" + hashlib.sha256(b"task-A").hexdigest()[:10]
    assert lookup["path"] == f"/v2/sandboxes/{name}"
    assert lookup["query"] == {"teamId": TEAM, "projectId": PROJECT, "resume": "true"}
    assert create["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert create["query"] == {"teamId": TEAM}
    assert create["json"] == {
        "projectId": PROJECT,
        "name": name,
        "image": "my-repo:latest",
        "ports": [3000],
        "timeout": 600_000,
        "resources": {"vcpus": 2, "memory": 4096},
        "networkPolicy": {"mode": "deny-all"},
        "tags": {"executor-daemon": b.daemon_id(), "executor-backend": "vercel", "executor-task": "task-A"},
    }
    lookup_cmd, cmd = fake.recorded("POST", "/cmd")[:2]
    assert lookup_cmd["json"]["args"][-3:] == ["-c", "command -v perl || command -v python3", "executor"]
    assert lookup_cmd["query"] == {"teamId": TEAM, "wait": "true", "logs": "true"}
    assert cmd["json"] == {
        "command": "/bin/bash",
        "args": ["--noprofile", "--norc", "-c", IO_WRAPPER, "executor-io", "/usr/bin/perl",
                 "/usr/bin/env", "-i", "PATH=/usr/bin:/bin", "X=1", "/usr/bin/setsid", "-w",
                 "bash", "--noprofile", "--norc", "-c", "echo hi"],
        "cwd": sb.root,
        "sudo": False,
        "attachStdin": True,
    }
    session = cmd["path"].split("/")[4]
    cid = fake.recorded("GET", "/logs")[0]["path"].split("/")[6]
    paths = [(r["method"], r["path"]) for r in fake.recorded(path_contains="/cmd")]
    assert ("GET", f"/v2/sandboxes/sessions/{session}/cmd/{cid}/logs") in paths
    assert ("GET", f"/v2/sandboxes/sessions/{session}/cmd/{cid}") in paths  # wait
    assert fake.recorded("GET", f"/cmd/{cid}")[-1]["query"] == {"teamId": TEAM, "wait": "true"}
    await sb.release(remove_files=True)
    await b.close()


async def test_allowlist_network_policy_is_sent(fake, tmp_path):
    b = make(fake, tmp_path, allow_domains=["pypi.org", "github.com"])
    fake.clear()
    sb = await b.sandbox("net")
    create = fake.recorded("POST", "/v3/sandboxes")[0]
    assert create["json"]["networkPolicy"] == {"allow": {"pypi.org": [], "github.com": []}}
    assert b.capabilities.network_policy == "allowlist: pypi.org,github.com"
    await sb.release(remove_files=True)
    await b.close()


# ---------------------------------------------------------------------------
# What runs: environment, sessions, streaming, stdin, signals
# ---------------------------------------------------------------------------


async def test_environment_is_exactly_the_given_one(backend):
    sb = await backend.sandbox("env")
    env = {"PATH": "/usr/bin:/bin", "ODD": "a b\nc=d", "EMPTY": ""}
    code, out, _ = await run(sb, "env -0", env=env)
    assert code == 0
    got = dict(item.split("=", 1) for item in out.decode().split("\0") if item)
    got.pop("_", None)  # bash sets $_ for its child
    got.pop("PWD", None), got.pop("SHLVL", None)  # bash's own
    assert got == env


async def test_spawned_process_leads_its_own_session(backend):
    sb = await backend.sandbox("sid")
    code, out, _ = await run(sb, 'echo "$$ $(cut -d" " -f6 /proc/$$/stat) $(cut -d" " -f5 /proc/$$/stat)"')
    pid, sid, pgid = out.split()
    assert code == 0 and pid == sid == pgid


async def test_cwd_and_exit_code_and_stderr_apart(backend):
    sb = await backend.sandbox("cwd")
    code, out, err = await run(sb, "pwd; echo oops >&2; exit 7")
    assert code == 7
    assert out == sb.root.encode() + b"\n"
    assert err == b"oops\n"


async def test_output_streams_while_the_process_runs(backend):
    sb = await backend.sandbox("stream")
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "echo first; read line; echo \"got $line\""],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    # The process is blocked on stdin: "first" can only arrive if output streams while it runs.
    assert await read_until(proc.stdout, b"first\n", timeout=5) == b"first\n"
    await proc.write(b"two\n")
    assert await read_until(proc.stdout, b"got two\n") == b"got two\n"
    assert await proc.stdout.read() == b""
    assert await proc.wait() == 0


async def test_persistent_shell_keeps_state_between_writes(backend):
    sb = await backend.sandbox("shell")
    shell = await sb.spawn(["bash", "--noprofile", "--norc"], cwd=sb.root, env=backend.base_env(sb))
    await shell.write(b"cd /tmp && export FOO=bar && f() { echo fn-$1; }\n")
    await shell.write(b"echo \"$PWD $FOO $(f x) $HOME\"; echo __done\n")
    out = await read_until(shell.stdout, b"__done\n")
    assert out == f"/tmp bar fn-x {sb.root}\n__done\n".encode()
    await shell.close_stdin()
    assert await shell.wait() == 0
    assert await shell.stdout.read() == b""


async def test_large_stdin_and_output_arrive_whole(backend):
    sb = await backend.sandbox("big")
    payload = os.urandom(300_000).hex().encode()  # 600 kB: more than one stdin request
    script = "sha256sum; head -c 200000 /dev/zero | tr '\\0' x"
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", script],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    await proc.write(payload)
    await proc.close_stdin()
    out, _ = await drain(proc)
    assert await proc.wait() == 0
    assert out == hashlib.sha256(payload).hexdigest().encode() + b"  -\n" + b"x" * 200_000


async def test_signal_session_kills_the_tree_while_the_shell_is_busy(backend):
    sb = await backend.sandbox("kill")
    shell = await sb.spawn(["bash", "--noprofile", "--norc"], cwd=sb.root, env=backend.base_env(sb))
    await shell.write(b"echo $$; sleep 300 & sleep 301 & sleep 302\n")
    sid = int((await read_until(shell.stdout, b"\n")).strip())
    deadline = time.monotonic() + 10
    while len(session_members(sid)) < 4 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(session_members(sid)) == 4  # bash and three sleeps, all in the shell's session

    await sb.signal_session(sid, signal.SIGKILL)
    assert await asyncio.wait_for(shell.wait(), 10) == 128 + signal.SIGKILL  # the fake reports 128+N
    assert await wait_gone(sid) == []


async def test_signal_session_term_lets_a_trap_run(backend):
    sb = await backend.sandbox("trap")
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c",
                           "trap 'echo trapped; exit 5' TERM; echo $$; while :; do sleep 0.05; done"],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    sid = int((await read_until(proc.stdout, b"\n")).strip())
    await sb.signal_session(sid, signal.SIGTERM)
    assert await read_until(proc.stdout, b"trapped\n") == b"trapped\n"
    assert await asyncio.wait_for(proc.wait(), 10) == 5


async def test_output_is_byte_exact_through_the_encoder(backend):
    sb = await backend.sandbox("bytes")
    blob = bytes(range(256)) * 64
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "cat; printf '\\377\\000x' >&2"],
                          cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    await proc.write(blob)
    await proc.close_stdin()
    out, err = await drain(proc)
    assert (await proc.wait(), out, err) == (0, blob, b"\xff\x00x")
    assert "byte-exact" in backend.policy()["output"]


async def test_text_output_mode_replaces_invalid_utf8(fake, tmp_path):
    """output: text skips the encoder; the API's text stream then replaces invalid bytes."""
    b = make(fake, tmp_path, output="text")
    sb = await b.sandbox("text")
    fake.clear()
    code, out, _ = await run(sb, r"printf 'a\377b \xc3\xa9\n'")
    assert (code, out) == (0, "a\ufffdb é\n".encode())
    assert fake.recorded("POST", "/cmd")[0]["json"]["command"] == "/usr/bin/env"
    assert "U+FFFD" in b.policy()["output"]
    await sb.release(remove_files=True)
    await b.close()


async def test_missing_command_is_exit_127(backend):
    sb = await backend.sandbox("nocmd")
    proc = await sb.spawn(["/no/such/program"], cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    out, err = await drain(proc)
    assert await proc.wait() == 127
    assert b"No such file" in err


async def test_pty_session_leader_resize_ctrl_c_and_exact_bytes(fake, backend):
    sb = await backend.sandbox("pty")
    assert backend.capabilities.pty and backend.capabilities.resize
    fake.clear()
    term = await sb.spawn(["bash", "--noprofile", "--norc"], cwd=sb.root,
                          env={"PATH": "/usr/bin:/bin", "TERM": "dumb", "PS1": "$ "}, pty=PtySize(30, 100))
    deadline = time.monotonic() + 10
    while not fake.recorded("WS") and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    start = fake.recorded("WS")[0]["json"]
    assert start["type"] == "start" and start["command"] == "/usr/bin/env"
    assert start["args"] == ["-i", "PATH=/usr/bin:/bin", "TERM=dumb", "PS1=$ ", "bash", "--noprofile", "--norc"]
    assert (start["rows"], start["cols"], start["cwd"]) == (30, 100, sb.root)

    await term.write(b"echo \"$$:$(cut -d' ' -f6 /proc/$$/stat):$(stty size)\"\n")
    out = await read_until(term.stdout, b":30 100")
    match = re.search(rb"(\d+):(\d+):30 100", out)
    assert match and match[1] == match[2], f"the terminal's process leads its session: {out!r}"
    await term.resize(PtySize(40, 120))
    await term.write(b"stty size; sleep 300\n")
    assert b"40 120" in await read_until(term.stdout, b"40 120")
    deadline = time.monotonic() + 10  # Ctrl-C goes to the foreground job: wait until sleep is it
    while not sleep_in_foreground(int(match[1])) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await term.write(b"\x03")  # Ctrl-C ends the sleep, not the shell
    await term.write(b"printf 'x\\377\\001y\\n'; exit 3\n")
    rest = b""
    try:
        while chunk := await asyncio.wait_for(term.stdout.read(), 10):
            rest += chunk
    except asyncio.TimeoutError:
        pytest.fail(f"no end of terminal output; got {rest!r}")
    assert b"x\xff\x01y" in rest, "terminal output is byte-exact"
    assert await term.wait() == 3
    assert term.stderr is None


# ---------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------


async def chunks(data: bytes, size: int = 4096) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i:i + size]


async def test_files_round_trip_byte_exact(fake, backend):
    sb = await backend.sandbox("files")
    blob = bytes(range(256)) * 1000
    fake.clear()
    await sb.put_archive(sb.root + "/in", chunks(tar_single_file("blob.bin", blob, 0o755)))
    assert fake.recorded("POST", "/fs/write"), "the upload goes through the file API"
    code, out, _ = await run(sb, "stat -c %a in/blob.bin; sha256sum < in/blob.bin")
    assert out.split() == [b"755", hashlib.sha256(blob).hexdigest().encode(), b"-"]

    data = b"".join([c async for c in sb.get_archive(sb.root + "/in")])
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("in/blob.bin").read() == blob
    assert fake.recorded("POST", "/fs/read")
    code, out, _ = await run(sb, "ls /tmp | grep -c executor-get- || true")
    assert out.strip() == b"0", "the scratch tar is removed"


async def test_get_archive_of_a_missing_path_is_not_found(backend):
    sb = await backend.sandbox("nofile")
    with pytest.raises(BackendError) as info:
        _ = [c async for c in sb.get_archive(sb.root + "/nope")]
    assert info.value.kind == ErrorKind.NOT_FOUND


# ---------------------------------------------------------------------------
# Lifecycle: release, per-daemon sandboxes, restart, vanished sandboxes
# ---------------------------------------------------------------------------


async def test_release_stops_or_deletes(fake, backend):
    sb = await backend.sandbox("rel-stop")
    fake.clear()
    await sb.release()
    assert [r["method"] for r in fake.recorded(path_contains="/stop")] == ["POST"]
    assert not fake.recorded("DELETE")
    assert sb.name in fake.sandboxes, "stop keeps the sandbox (and its files)"

    sb = await backend.sandbox("rel-del")
    fake.clear()
    await sb.release(remove_files=True)
    assert fake.recorded("DELETE")[0]["path"] == f"/v2/sandboxes/{sb.name}"
    assert sb.name not in fake.sandboxes


async def test_one_sandbox_per_daemon_gives_each_task_a_directory(fake, tmp_path):
    b = make(fake, tmp_path, sandbox_per="daemon")
    fake.clear()
    one, two = await b.sandbox("one"), await b.sandbox("two")
    assert len(fake.recorded("POST", "/v3/sandboxes")) == 1
    assert one.name == two.name and one.root != two.root
    assert one.root.endswith("/tasks/one")
    code, out, _ = await run(one, "pwd; touch mine")
    assert out.decode().strip() == one.root
    await one.release(remove_files=True)
    assert not os.path.exists(one.root) and os.path.isdir(two.root)
    await b.close()
    assert one.name in fake.sandboxes
    fake.call(fake.vanish(one.name))


async def test_a_restarted_daemon_finds_its_sandbox_and_ends_leftovers(fake, tmp_path):
    first = make(fake, tmp_path, on_close="keep")
    await first.start()
    sb = await first.sandbox("restart")
    await run(sb, "echo kept > file")
    shell = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "echo $$; exec sleep 300"], cwd=sb.root,
                           env={"PATH": "/usr/bin:/bin"})
    sid = int((await read_until(shell.stdout, b"\n")).strip())
    await shell.detach()
    await first.close()  # the daemon dies; on_close=keep leaves the sandbox running
    assert session_members(sid)

    second = make(fake, tmp_path)
    fake.clear()
    await second.start()
    assert second.recovered == [sb.name]
    assert await wait_gone(sid) == [], "the previous daemon's processes are ended"
    again = await second.sandbox("restart")
    assert again.name == sb.name
    assert not fake.recorded("POST", "/v3/sandboxes"), "re-attached by name, not created"
    code, out, _ = await run(again, "cat file")
    assert out == b"kept\n"
    await again.release(remove_files=True)
    await second.close()


async def test_a_vanished_sandbox_is_lost_then_recreated(fake, backend):
    sb = await backend.sandbox("vanish")
    name = sb.name
    proc = await sb.spawn(["bash", "--noprofile", "--norc", "-c", "echo up; sleep 300"], cwd=sb.root,
                          env={"PATH": "/usr/bin:/bin"})
    assert await read_until(proc.stdout, b"up\n") == b"up\n"
    fake.call(fake.vanish(name))

    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.stdout.read(), 10)
    assert info.value.kind == ErrorKind.LOST
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 10)
    assert info.value.kind == ErrorKind.LOST

    fake.clear()
    code, out, _ = await run(sb, "echo again")
    assert (code, out) == (0, b"again\n")
    assert fake.recorded("POST", "/v3/sandboxes")[0]["json"]["name"] == name


# ---------------------------------------------------------------------------
# Faults
# ---------------------------------------------------------------------------


async def test_missing_credentials_fail_clearly_without_a_request(fake, tmp_path, monkeypatch):
    for var in ("VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID"):
        monkeypatch.delenv(var, raising=False)
    b = Backend("vercel", Backend.Options(base_url=fake.base_url), state_dir=tmp_path)
    fake.clear()
    await b.start()
    health = await b.health()
    assert not health.available
    assert "VERCEL_TOKEN" in health.reason and "missing a token, a team id, a project id" in health.reason
    with pytest.raises(BackendError) as info:
        await b.sandbox("t")
    assert info.value.kind == ErrorKind.FAILED_PRECONDITION
    assert fake.recorded() == []


async def test_credentials_from_the_environment(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("MY_TOKEN", TOKEN)
    monkeypatch.setenv("VERCEL_TEAM_ID", TEAM)
    monkeypatch.setenv("VERCEL_PROJECT_ID", PROJECT)
    b = Backend("vercel", Backend.Options(base_url=fake.base_url, token_env="MY_TOKEN"), state_dir=tmp_path)
    assert (await b.health()).available
    await b.close()


async def test_a_refused_token_is_unauthenticated(fake, tmp_path):
    b = make(fake, tmp_path, token="wrong")
    health = await b.health()
    assert not health.available and health.details["kind"] == "unauthenticated"
    with pytest.raises(BackendError) as info:
        await b.sandbox("t")
    assert info.value.kind == ErrorKind.UNAUTHENTICATED
    assert "wrong" not in info.value.message and "wrong" not in str(b.policy())
    await b.close()


async def test_an_unreachable_api_is_unavailable(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    opts = options(f"http://127.0.0.1:{port}")
    opts.pop("kind")
    b = Backend("vercel", Backend.Options(**opts), state_dir=tmp_path)
    await b.start()  # never raises
    health = await b.health()
    assert not health.available and health.details["kind"] == "unavailable"
    assert f"127.0.0.1:{port}" in health.reason
    with pytest.raises(BackendError) as info:
        await b.sandbox("t")
    assert info.value.kind == ErrorKind.UNAVAILABLE
    await b.close()


async def test_quota_is_resource_exhausted_after_bounded_retries(fake, backend):
    fake.clear()
    fake.add_fault("POST", "/v3/sandboxes", 429, "rate_limited", times=10)
    try:
        with pytest.raises(BackendError) as info:
            await backend.sandbox("quota")
    finally:
        fake.faults.clear()
    assert info.value.kind == ErrorKind.RESOURCE_EXHAUSTED
    assert len(fake.recorded("POST", "/v3/sandboxes")) == backend.opts.retries


async def test_payment_required_quota_is_resource_exhausted_at_once(fake, backend):
    fake.clear()
    fake.add_fault("POST", "/v3/sandboxes", 402, "sandbox_quota_exceeded", times=1)
    with pytest.raises(BackendError) as info:
        await backend.sandbox("quota2")
    assert info.value.kind == ErrorKind.RESOURCE_EXHAUSTED
    assert len(fake.recorded("POST", "/v3/sandboxes")) == 1


async def test_a_transient_server_error_is_retried_when_safe(fake, backend):
    fake.clear()
    fake.add_fault("POST", "/v3/sandboxes", 503, "unavailable", times=1)
    sb = await backend.sandbox("flaky")
    assert len(fake.recorded("POST", "/v3/sandboxes")) == 2
    # Starting a command has effects: a 503 there is not retried.
    fake.add_fault("POST", "/cmd", 503, "unavailable", times=1)
    with pytest.raises(BackendError) as info:
        await sb.spawn(["true"], cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    assert info.value.kind == ErrorKind.UNAVAILABLE
    assert len(fake.recorded("POST", "/cmd")) == 1


def test_options_forbid_unknown_keys_and_hide_the_token():
    with pytest.raises(Exception):
        Backend.Options(tokn="x")
    opts = Backend.Options(token="s3cret")
    assert "s3cret" not in repr(opts) and "s3cret" not in str(opts.model_dump())


async def test_the_lifetime_ends_running_processes_and_the_next_use_resumes(fake, tmp_path):
    b = make(fake, tmp_path, timeout=1.5)
    sb = await b.sandbox("lifetime")
    await run(sb, "echo kept > file")
    proc = await sb.spawn(["sleep", "300"], cwd=sb.root, env={"PATH": "/usr/bin:/bin"})
    with pytest.raises(BackendError) as info:
        await asyncio.wait_for(proc.wait(), 10)
    assert info.value.kind == ErrorKind.LOST
    fake.clear()
    code, out, _ = await run(sb, "cat file")
    assert (code, out) == (0, b"kept\n"), "resumed with its files"
    resume = fake.recorded("GET", f"/v2/sandboxes/{sb.name}")
    assert resume and resume[0]["query"]["resume"] == "true"
    assert not fake.recorded("POST", "/v3/sandboxes")
    await sb.release(remove_files=True)
    await b.close()


async def test_idle_sandboxes_are_stopped_and_resumed_on_use(fake, tmp_path):
    b = make(fake, tmp_path, idle_timeout=0.4)
    await b.start()
    sb = await b.sandbox("idle")
    await run(sb, "echo kept > file")
    deadline = time.monotonic() + 10
    while not b.reaped and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert b.reaped == [sb.name]
    assert fake.sessions[fake.sandboxes[sb.name].current_session_id].status == "stopped"
    code, out, _ = await run(sb, "cat file")
    assert (code, out) == (0, b"kept\n")
    await sb.release(remove_files=True)
    await b.close()


async def test_many_live_processes_do_not_exhaust_the_connection_pool(fake, tmp_path):
    """Each live process holds an output stream, and a second connection while waited for."""
    b = make(fake, tmp_path, output="text")
    sb = await b.sandbox("many")
    procs = [await sb.spawn(["cat"], cwd=sb.root, env={"PATH": "/usr/bin:/bin"}) for _ in range(60)]
    waits = [asyncio.ensure_future(p.wait()) for p in procs]
    await asyncio.sleep(0.2)
    for i, p in enumerate(procs):
        await asyncio.wait_for(p.write(f"{i}\n".encode()), 10)
        await asyncio.wait_for(p.close_stdin(), 10)
    assert await asyncio.wait_for(asyncio.gather(*waits), 30) == [0] * 60
    outs = [await read_until(p.stdout, b"\n") for p in procs]
    assert outs == [f"{i}\n".encode() for i in range(60)]
    await sb.release(remove_files=True)
    await b.close()

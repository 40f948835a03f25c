"""The singularity backend against a recording fake ``apptainer`` (tests/fakes/fake_apptainer.py).

This tier always runs: it pins the exact argv and environment the backend hands the executable
(instance start flags, exec, stop, binds, network, env) and runs the in-instance launcher for real
on the host (the fake execs it), so env exactness and session leadership are checked even where
the real Apptainer cannot be provisioned. tests/test_singularity_real.py is the real tier.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
from pathlib import Path

import pydantic
import pytest

from executor.backends.base import BackendError, ErrorKind, drain
from executor.backends.base import reaper_argv
from executor.backends.singularity import LAUNCHER, SingularityBackend, SingularityOptions, escape_env_value

FAKE = Path(__file__).parent / "fakes" / "fake_apptainer.py"


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """The fake's log and state files, wired through the EXECUTOR_APPTAINER_* variables."""
    FAKE.chmod(FAKE.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    log = tmp_path / "calls.jsonl"
    state = tmp_path / "instances.json"
    monkeypatch.setenv("EXECUTOR_APPTAINER_FAKE_LOG", str(log))
    monkeypatch.setenv("EXECUTOR_APPTAINER_FAKE_STATE", str(state))
    image = tmp_path / "image.sif"
    image.write_text("sif")

    class Fake:
        def __init__(self) -> None:
            self.image = str(image)
            self.state = state

        def calls(self) -> list[dict]:
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def argvs(self, *prefix: str) -> list[list[str]]:
            """Recorded argvs whose arguments (after argv[0] and --quiet) start with prefix."""
            out = []
            for call in self.calls():
                args = [a for a in call["argv"][1:] if a != "--quiet"]
                if args[: len(prefix)] == list(prefix):
                    out.append(call["argv"])
            return out

        def instances(self) -> dict:
            return json.loads(state.read_text()) if state.exists() else {}

    yield Fake()
    for info in json.loads(state.read_text()).values() if state.exists() else []:
        try:
            os.kill(info["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def make_backend(tmp_path: Path, fake, **options) -> SingularityBackend:
    opts = SingularityOptions(executable=str(FAKE), image=options.pop("image", fake.image), **options)
    return SingularityBackend("sing", opts, state_dir=tmp_path / "state" / "backends" / "sing")


async def test_instance_start_argv_defaults(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    await backend.start()
    sandbox = await backend.sandbox("t1")
    (start,) = fake.argvs("instance", "start")
    host_dir = tmp_path / "state" / "backends" / "sing" / "tasks" / "t1"
    assert start == [str(FAKE), "--quiet", "instance", "start", "--containall", "--no-home", "--cleanenv",
                     "--net", "--network", "none", "--bind", f"{host_dir}:/workspace:rw",
                     fake.image, sandbox.instance]
    assert sandbox.instance.startswith(backend.prefix) and sandbox.instance.startswith("exr-")
    assert sandbox.root == "/workspace" and host_dir.is_dir()
    assert backend.capabilities.network_policy == "none"


async def test_instance_start_argv_options(tmp_path, fake):
    backend = make_backend(tmp_path, fake, binds=["/data", "/src:/opt/src:rw", "/etc/ssl:/ssl:ro"],
                           overlay="dir", memory="512M", cpus=1.5, userns=True, network="host",
                           containall=False, no_home=False, cleanenv=False, workdir="/w/")
    sandbox = await backend.sandbox("odd task/ü")
    (start,) = fake.argvs("instance", "start")
    overlay = backend.overlays_root / sandbox.instance[len(backend.prefix):]
    flags = start[4:-2]
    expected = ["--pid", "--userns", "--bind", f"{sandbox.host_dir}:/w:rw",
                "--bind", "/data:/data:ro", "--bind", "/src:/opt/src:rw", "--bind", "/etc/ssl:/ssl:ro",
                "--overlay", str(overlay)]
    if os.geteuid() == 0:
        expected += ["--memory", "512M", "--cpus", "1.5"]
    assert flags == expected
    assert overlay.is_dir()
    assert "/" not in sandbox.host_dir.name and sandbox.host_dir.parent == backend.tasks_root
    assert backend.capabilities.network_policy == "host"
    assert backend.policy()["binds"] == "/data:/data:ro, /src:/opt/src:rw, /etc/ssl:/ssl:ro"


async def test_writable_tmpfs_and_overlay_image(tmp_path, fake):
    backend = make_backend(tmp_path, fake, overlay="writable_tmpfs")
    await backend.sandbox("a")
    assert "--writable-tmpfs" in fake.argvs("instance", "start")[0]
    backend2 = make_backend(tmp_path / "2", fake, overlay="image", overlay_size_mb=64)
    sb = await backend2.sandbox("b")
    (create,) = fake.argvs("overlay", "create")
    img = backend2.overlays_root / (sb.instance[len(backend2.prefix):] + ".img")
    assert create[-3:] == ["--size", "64", str(img)] and img.exists()
    assert fake.argvs("instance", "start")[1][-4:-2] == ["--overlay", str(img)]


async def test_exec_argv_and_env(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("DAEMON_SECRET", "must-not-leak")
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    proc = await sandbox.spawn(["true"], cwd="/workspace", env={"PATH": "/usr/bin:/bin", "A": 'x$y"`\\'})
    await proc.close_stdin()
    await drain(proc)
    assert await proc.wait() == 0
    (call,) = [c for c in fake.calls() if c["argv"][2:3] == ["exec"]]
    assert call["argv"] == [str(FAKE), "--quiet", "exec", "--cleanenv", "--pwd", "/",
                            f"instance://{sandbox.instance}", "/bin/sh", "-c", LAUNCHER, "executor",
                            "/workspace", "pipe", *reaper_argv(["true"])]
    assert call["env"] == {"APPTAINERENV_EXRV_PATH": "/usr/bin:/bin",
                           "APPTAINERENV_EXRV_A": 'x\\$y"\\`\\\\',
                           "APPTAINERENV_EXR_KEEP": "PATH A"}
    assert "must-not-leak" not in json.dumps(fake.calls())


def test_escape_env_value():
    assert escape_env_value('a\\b$c`d"e') == 'a\\\\b\\$c\\`d"e'


async def test_launcher_gives_exact_env_and_session(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    env = {"PATH": "/usr/bin:/bin", "HOME": "/workspace", "NASTY": 'multi\nexport PS1=x\n$(no) `no` "q" \\',
           "EMPTY": "", "UNI": "é☃"}
    proc = await sandbox.spawn(
        ["/bin/sh", "-c", 'pwd; cut -d" " -f1,6 /proc/$$/stat; echo $$; exec env -0'],
        cwd="/workspace", env=env)
    await proc.close_stdin()
    out, err = await drain(proc)
    assert await proc.wait() == 0, err
    lines = out.split(b"\n", 3)
    assert lines[0].decode() == str(sandbox.host_dir)  # the fake maps /workspace to the task dir
    pid, sid = lines[1].split()
    assert pid == sid == lines[2]  # the command leads its own session
    got = dict(item.split("=", 1) for item in lines[3].decode().split("\0") if item)
    got.pop("PWD", None)  # dash exports PWD itself, as any sh would
    assert got == env


async def test_bad_env_names_are_refused(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    for name in ("BAD-NAME", "EXRV_X", "EXR_KEEP", "1X"):
        with pytest.raises(BackendError) as info:
            await sandbox.spawn(["true"], cwd="/workspace", env={name: "v"})
        assert info.value.kind is ErrorKind.INVALID_ARGUMENT


async def test_missing_cwd_is_reported(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    proc = await sandbox.spawn(["true"], cwd="/workspace/nope", env={})
    await proc.close_stdin()
    _, err = await drain(proc)
    assert await proc.wait() == 127
    assert b"working directory /workspace/nope" in err or b"nope does not exist" in err


async def test_release_stops_the_instance_and_removes_files(tmp_path, fake):
    backend = make_backend(tmp_path, fake, overlay="dir")
    sandbox = await backend.sandbox("t1")
    (sandbox.host_dir / "f").write_text("x")
    await sandbox.release(remove_files=True)
    (stop,) = fake.argvs("instance", "stop")
    assert stop == [str(FAKE), "--quiet", "instance", "stop", "--timeout", "10", sandbox.instance]
    assert fake.instances() == {}
    assert not sandbox.host_dir.exists()


async def test_start_stops_only_our_leftovers(tmp_path, fake):
    first = make_backend(tmp_path, fake)
    ours = await first.sandbox("t1")
    other = make_backend(tmp_path / "other", fake)  # another daemon's state dir
    theirs = await other.sandbox("t1")
    assert ours.instance != theirs.instance
    restarted = make_backend(tmp_path, fake)
    await restarted.start()
    assert restarted.leftovers_stopped == 1
    assert set(fake.instances()) == {theirs.instance}
    stops = fake.argvs("instance", "stop")
    assert [s[-1] for s in stops] == [ours.instance]


async def test_close_stops_every_instance(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    await backend.sandbox("a")
    await backend.sandbox("b")
    await backend.close()
    assert fake.instances() == {}


async def test_sandbox_is_reused_while_alive(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    a = await backend.sandbox("t1")
    assert await backend.sandbox("t1") is a
    assert len(fake.argvs("instance", "start")) == 1


async def test_died_instance_is_lost(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    os.kill(sandbox.instance_pid, signal.SIGKILL)
    for _ in range(500):  # poll until the kernel has it gone (or a zombie)
        if not sandbox.instance_alive():
            break
        await asyncio.sleep(0.01)
    with pytest.raises(BackendError) as info:
        await sandbox.spawn(["true"], cwd="/workspace", env={})
    assert info.value.kind is ErrorKind.LOST and sandbox.instance in info.value.message
    # the next sandbox() call starts a fresh instance
    fake.state.write_text("{}")
    again = await backend.sandbox("t1")
    assert again is not sandbox and again.instance_alive()


async def test_missing_executable(tmp_path, fake):
    backend = SingularityBackend("sing", SingularityOptions(executable="no-such-apptainer-xyz", image=fake.image),
                                 state_dir=tmp_path / "s")
    await backend.start()  # must not raise
    health = await backend.health()
    assert not health.available and "no-such-apptainer-xyz" in health.reason and "PATH" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t1")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION


async def test_missing_image(tmp_path, fake):
    backend = make_backend(tmp_path, fake, image=str(tmp_path / "nope.sif"))
    health = await backend.health()
    assert not health.available and "nope.sif does not exist" in health.reason
    with pytest.raises(BackendError) as info:
        await backend.sandbox("t1")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION and "nope.sif" in info.value.message
    assert fake.argvs("instance", "start") == []


async def test_remote_image_built_once_and_cached(tmp_path, fake):
    backend = make_backend(tmp_path, fake, image="docker://debian:bookworm")
    health = await backend.health()
    assert health.available and "built into" in health.details["image"]
    await backend.sandbox("a")
    await backend.sandbox("b")
    (build,) = fake.argvs("build")
    sif = backend._cached_sif()
    assert build == [str(FAKE), "--quiet", "build", "--force", str(sif) + ".tmp", "docker://debian:bookworm"]
    assert sif.exists()
    assert all(s[-2] == str(sif) for s in fake.argvs("instance", "start"))


async def test_unbuildable_image(tmp_path, fake):
    backend = make_backend(tmp_path, fake, image="oras://registry.invalid/unbuildable:1")
    with pytest.raises(BackendError) as info:
        await backend.sandbox("a")
    assert info.value.kind is ErrorKind.FAILED_PRECONDITION and "failed to get checksum" in info.value.message
    health = await backend.health()
    assert not health.available and "building oras://registry.invalid/unbuildable:1" in health.reason


async def test_limits_policy_says_when_they_cannot_apply(tmp_path, fake, monkeypatch):
    backend = make_backend(tmp_path, fake, memory="1G")
    if os.geteuid() == 0:
        assert backend.policy()["limits"] == "memory=1G"
    monkeypatch.setattr(SingularityBackend, "_limits_support", staticmethod(lambda: (False, "rootless here")))
    rootless = make_backend(tmp_path / "r", fake, memory="1G", cpus=2)
    assert rootless.policy()["limits"] == "memory=1G, cpus=2 NOT APPLIED: rootless here"
    await rootless.sandbox("t")
    start = fake.argvs("instance", "start")[-1]
    assert "--memory" not in start and "--cpus" not in start
    assert (await rootless.health()).details["limits"] == "not applied: rootless here"


def test_options_are_validated():
    with pytest.raises(pydantic.ValidationError):
        SingularityOptions(image="x", binds=["relative/path"])
    with pytest.raises(pydantic.ValidationError):
        SingularityOptions(image="x", binds=["/a:/b:/c"])
    with pytest.raises(pydantic.ValidationError):
        SingularityOptions(image="x", memory="lots")
    with pytest.raises(pydantic.ValidationError):
        SingularityOptions(image="x", surprise=1)
    with pytest.raises(pydantic.ValidationError):
        SingularityOptions()  # image is required


async def test_signal_session_ends_the_whole_session(tmp_path, fake):
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    proc = await sandbox.spawn(["/bin/sh", "-c", 'sleep 300 & echo "$$ $!"; wait'], cwd="/workspace",
                               env={"PATH": "/usr/bin:/bin"})
    sid, child = (int(x) for x in (await proc.stdout.read()).split())
    await sandbox.signal_session(sid, signal.SIGTERM)
    # killed by a signal this backend sent: -N, although the exec reports 128+N or -N
    assert await asyncio.wait_for(proc.wait(), 10) == -signal.SIGTERM
    for _ in range(500):
        if not os.path.exists(f"/proc/{child}") or open(f"/proc/{child}/stat").read().split()[2] == "Z":
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError(f"the session's background child {child} survived")
    code_proc = await sandbox.spawn(["/bin/sh", "-c", "exit 143"], cwd="/workspace", env={})
    await code_proc.close_stdin()
    assert await code_proc.wait() == 143  # not signalled by us: the number as it came


async def test_singularity_ce_gets_singularityenv(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("EXECUTOR_APPTAINER_FAKE_VERSION", "singularity-ce version 4.1.0")
    backend = make_backend(tmp_path, fake)
    sandbox = await backend.sandbox("t1")
    proc = await sandbox.spawn(["/bin/sh", "-c", "echo $A"], cwd="/workspace", env={"A": "x$y"})
    await proc.close_stdin()
    out, _ = await drain(proc)
    assert (await proc.wait(), out) == (0, b"x$y\n")
    (call,) = [c for c in fake.calls() if c["argv"][2:3] == ["exec"]]
    assert call["env"] == {"SINGULARITYENV_EXRV_A": "x\\$y", "SINGULARITYENV_EXR_KEEP": "A"}

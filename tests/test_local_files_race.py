"""The local backend's file operations under a racing command, made certain.

A background process of the task can swap a directory of its task for a symlink between the
daemon's path check and the use of the path (``renameat2(RENAME_EXCHANGE)`` in a loop). These tests
make that interleaving certain instead of timing it: the daemon-side checks are patched to have
*lost the race* (to see the links as the plain directories they were a moment before), the links
are in place, and the file operation runs. What must hold anyway:

* PutArchive unpacks inside the task's sandbox, never in the daemon: a member that goes through a
  link to a host directory the sandbox cannot see writes nothing there, and a hard link to a file in
  the daemon's hidden state directory links nothing in (the old code unpacked in the daemon, as
  root, on the host: both happened).
* ReadFile / WriteFile walk the checked path without following links: a directory that became a
  link since the check is refused, even to a place the sandbox sees (the old ``cat`` followed it).
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from executor.backends.base import BackendError, ErrorKind, Resolved

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

TOKEN = b"human-token-HHHHHHHHHHHHHHHHHHHH5678\n"


def _tar(members: list[tarfile.TarInfo], data: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info in members:
            body = data.get(info.name)
            if body is not None:
                info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body is not None else None)
    return buf.getvalue()


async def _chunks(blob: bytes):
    yield blob


def _lose_the_race(monkeypatch) -> None:
    """The daemon's checks see every path as if no link were on it (the directories a racing command
    swaps for links were plain directories when they looked), on the old and the new code alike."""
    from executor.backends.local import LocalSandbox

    async def resolve_paths(self, paths):
        return [Resolved(os.path.normpath(p)) for p in paths]

    monkeypatch.setattr(LocalSandbox, "resolve_paths", resolve_paths)
    # the old code's check: tarfile's data filter (realpath just before each member is written)
    monkeypatch.setattr(tarfile, "data_filter", lambda member, dest: member)


@pytest.fixture
def outside():
    """A host directory outside the task's directory that the sandbox sees (not under the
    sandbox's private /tmp), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="executor-race-", dir="/var/tmp"))
    (path / "keep").write_text("outside\n")
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _backend(tmp_path: Path, **options):
    from executor.backends.local import LocalBackend, LocalOptions

    backend = LocalBackend("local", LocalOptions(**options), state_dir=tmp_path / "state" / "backends" / "local")
    await backend.start()
    return backend


async def _raced_put(tmp_path: Path, monkeypatch, member: tarfile.TarInfo, body: bytes | None):
    """PutArchive of one member into a task whose links ``l`` (to a host directory under /tmp: on the
    host, not in the sandbox, whose /tmp is private) and ``s`` (to a token file's directory inside the
    daemon's hidden state directory) the checks took for plain directories."""
    backend = await _backend(tmp_path)
    secret_dir = tmp_path / "state" / "secrets"
    secret_dir.mkdir(parents=True)
    (secret_dir / "human.token").write_bytes(TOKEN)
    host_only = tmp_path / "victim"
    host_only.mkdir()
    sandbox = await backend.sandbox("race")
    root = Path(sandbox.root)
    (root / "l").symlink_to(host_only)  # the racing command's links, as the use finds them
    (root / "s").symlink_to(secret_dir)
    _lose_the_race(monkeypatch)
    try:
        await sandbox.put_archive(".", _chunks(_tar([member], {member.name: body} if body is not None else {})))
    except BackendError:
        pass  # refused, or failed inside the sandbox: either is fine, what matters is what it reached
    return root, host_only, secret_dir


async def test_put_archive_that_lost_the_race_writes_nothing_outside_the_sandbox(tmp_path, monkeypatch):
    root, host_only, _ = await _raced_put(tmp_path, monkeypatch, tarfile.TarInfo("l/pwned"), b"PWNED\n")
    assert os.listdir(host_only) == [], "the unpacking wrote into a host directory outside the sandbox"


async def test_put_archive_that_lost_the_race_links_no_hidden_file_in(tmp_path, monkeypatch):
    hard = tarfile.TarInfo("h")
    hard.type, hard.linkname = tarfile.LNKTYPE, "s/human.token"
    root, _, secret_dir = await _raced_put(tmp_path, monkeypatch, hard, None)
    assert not (root / "h").exists(), "the approver's token was hard-linked into the task's directory"
    assert (secret_dir / "human.token").stat().st_nlink == 1


async def test_put_archive_unpacks_as_the_commands_user_with_data_filter_modes(tmp_path):
    """tar runs in the sandbox: what it makes belongs to the commands' user; modes as the stdlib's
    data filter gives them (no setuid, no group/other write; directories usable)."""
    backend = await _backend(tmp_path)
    sandbox = await backend.sandbox("modes")
    d = tarfile.TarInfo("d")
    d.type, d.mode = tarfile.DIRTYPE, 0o644  # a directory without x: still usable
    f = tarfile.TarInfo("d/suid")
    f.mode, f.uid, f.gid = 0o6777, 4242, 4242
    await sandbox.put_archive("in", _chunks(_tar([d, f], {"d/suid": b"x"})))
    st = os.stat(Path(sandbox.root) / "in" / "d" / "suid")
    assert oct(st.st_mode & 0o7777) == oct(0o755) and (st.st_uid, st.st_gid) == (os.geteuid(), os.getegid())
    assert os.stat(Path(sandbox.root) / "in" / "d").st_mode & 0o777 == 0o755


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
async def test_read_file_through_a_directory_that_became_a_link_is_refused(tmp_path, monkeypatch, outside, isolation):
    backend = await _backend(tmp_path, isolation=isolation)
    sandbox = await backend.sandbox("read")
    (outside / "hostname").write_text("the host's file\n")
    (Path(sandbox.root) / "d").symlink_to(outside)
    _lose_the_race(monkeypatch)
    with pytest.raises(BackendError) as info:
        data = b"".join([chunk async for chunk in sandbox.read_file("d/hostname")])
        assert data != b"the host's file\n", "ReadFile followed a link that appeared after the check"
    assert info.value.kind == ErrorKind.INVALID_ARGUMENT and "became a link" in info.value.message


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
async def test_write_file_through_a_directory_that_became_a_link_is_refused(tmp_path, monkeypatch, outside, isolation):
    # writable_paths: a place every sandbox may write, outside the task's directory
    options = {"writable_paths": [str(outside)]} if isolation == "sandbox" else {"isolation": "none"}
    backend = await _backend(tmp_path, **options)
    sandbox = await backend.sandbox("write")
    (Path(sandbox.root) / "d").symlink_to(outside)
    (Path(sandbox.root) / "f").symlink_to(outside / "keep")
    _lose_the_race(monkeypatch)
    for path in ("d/new", "d/keep", "f"):
        with pytest.raises(BackendError) as info:
            await sandbox.write_file(path, _chunks(b"PWNED\n"), mode=0o777)
        assert info.value.kind == ErrorKind.INVALID_ARGUMENT and "became a link" in info.value.message
    assert sorted(os.listdir(outside)) == ["keep"]
    assert (outside / "keep").read_text() == "outside\n"
    assert (outside / "keep").stat().st_mode & 0o777 != 0o777


@pytest.mark.parametrize("isolation", ["sandbox", "none"])
async def test_get_archive_through_a_directory_that_became_a_link_is_refused(tmp_path, monkeypatch, outside, isolation):
    backend = await _backend(tmp_path, isolation=isolation)
    sandbox = await backend.sandbox("get")
    (Path(sandbox.root) / "d").symlink_to(outside)
    _lose_the_race(monkeypatch)
    with pytest.raises(BackendError) as info:
        blob = b"".join([chunk async for chunk in sandbox.get_archive("d/keep")])
        assert b"outside" not in blob
    assert info.value.kind == ErrorKind.INVALID_ARGUMENT and "became a link" in info.value.message


@pytest.mark.skipif(os.geteuid() != 0, reason="uid/gid needs a root daemon")
async def test_file_operations_run_as_the_commands_user(tmp_path):
    """With ``uid``/``gid`` the helper runs as that user (an interpreter it can run: the daemon's own
    may sit under a directory it cannot reach, such as /root); what it writes is that user's."""
    base = Path(tempfile.mkdtemp(prefix="executor-files-uid-", dir="/var/tmp"))
    base.chmod(0o755)
    try:
        from executor.backends.local import LocalBackend, LocalOptions

        backend = LocalBackend("local", LocalOptions(uid=65534, gid=65534, root=str(base / "tasks")),
                               state_dir=tmp_path / "state" / "backends" / "local")
        await backend.start()
        sandbox = await backend.sandbox("uid")
        await sandbox.write_file("w/a.txt", _chunks(b"A"), make_parents=True)
        await sandbox.put_archive("p", _chunks(_tar([tarfile.TarInfo("b.txt")], {"b.txt": b"B"})))
        root = Path(sandbox.root)
        for path in (root / "w" / "a.txt", root / "p" / "b.txt", root / "p"):
            assert (os.stat(path).st_uid, os.stat(path).st_gid) == (65534, 65534), path
        assert b"".join([c async for c in sandbox.read_file("p/b.txt")]) == b"B"
        with tarfile.open(fileobj=io.BytesIO(b"".join([c async for c in sandbox.get_archive("w")]))) as tar:
            assert tar.extractfile("w/a.txt").read() == b"A"
    finally:
        shutil.rmtree(base, ignore_errors=True)

"""Paths on every backend: a symlink a command planted in its task directory must not lead
PutArchive, GetArchive or a workdir outside it. Each attack test plants links with a command (to
/etc and to a sacrificial directory the test made outside the task directory on the backend),
tries to go through them, expects INVALID_ARGUMENT, and checks the sacrificial directory is
untouched. The legitimate cases (links inside, nested dirs, spaces, big archives) must still work."""

from __future__ import annotations

import io
import tarfile

import pytest

from executor.client import InvalidArgument


def tar_bytes(members) -> bytes:
    """members: (name, kind, data) with kind file | dir | sym (data = target) | hard (data = target)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "dir" else 0o644
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE}[kind]
            if kind in ("sym", "hard"):
                info.linkname = data
            tar.addfile(info)
    return buf.getvalue()


def sh(client, task, command: str) -> str:
    result = client.run(task, command)
    assert result.exit.exit_code == 0, (command, result.stdout, result.stderr)
    return result.stdout.decode()


@pytest.fixture
def planted(client, task):
    """A sacrificial directory outside the task directory (holding one file), and in the task
    directory: x -> /etc, y -> the sacrificial directory, z -> a file in it, w -> a missing
    name in it. Yields the sacrificial directory's path; removes it afterwards."""
    sac = sh(client, task, "d=$(mktemp -d /tmp/executor-sacrificial.XXXXXX) && printf keep > \"$d/secret\" && "
                           "ln -s /etc x && ln -s \"$d\" y && ln -s \"$d/secret\" z && ln -s \"$d/new\" w && "
                           "printf %s \"$d\"").strip()
    assert sac.startswith("/tmp/executor-sacrificial.")
    yield sac
    untouched(client, task, sac)
    client.run(task, f"rm -rf '{sac}'")


def untouched(client, task, sac: str) -> None:
    listing = sh(client, task, f"cd '{sac}' && ls -A && cat secret")
    assert listing == "secret\nkeep", f"the sacrificial directory {sac} was written to: {listing!r}"


def refused(call, *args, **kwargs) -> str:
    with pytest.raises(InvalidArgument) as info:
        call(*args, **kwargs)
    return info.value.message


ONE = tar_bytes([("evil.txt", "file", b"pwned")])


# -- attacks ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["x", "y", "y/sub", "x/cron.d", "./y/../y"])
def test_put_archive_into_a_planted_link_is_refused(client, task, planted, path):
    message = refused(client.put_archive, task, path, ONE)
    assert "outside the task's directory" in message


@pytest.mark.parametrize("member", ["x/evil.txt", "y/evil.txt", "y/deep/evil.txt", "z", "w"])
def test_member_through_or_over_a_planted_link_is_refused(client, task, planted, member):
    refused(client.put_archive, task, ".", tar_bytes([(member, "file", b"pwned")]))


def test_member_through_a_planted_link_in_a_subdirectory_is_refused(client, task, planted):
    sh(client, task, f"mkdir -p sub && ln -s '{planted}' sub/out")
    refused(client.put_archive, task, "sub", tar_bytes([("out/evil.txt", "file", b"pwned")]))
    refused(client.put_archive, task, ".", tar_bytes([("sub/out/evil.txt", "file", b"pwned")]))


@pytest.mark.parametrize("members", [
    [("l", "sym", ".."), ("l/evil.txt", "file", b"pwned")],  # the archive's own link leads out
    [("l", "sym", "y"), ("l/evil.txt", "file", b"pwned")],  # ... through a link already on disk
    [("l", "sym", "y")],  # a link the archive makes that leads out through a planted one
    [("l", "sym", "y/secret")],
    [("d", "sym", "."), ("e", "sym", "d/.."), ("e/evil.txt", "file", b"pwned")],
    [("h", "hard", "y/secret")],  # a hard link to a file outside, through a planted link
    [("h", "hard", "z")],
], ids=["dotdot", "via-planted", "link-only", "link-to-file", "chain", "hardlink", "hardlink-to-link"])
def test_archive_links_that_lead_out_are_refused(client, task, planted, members):
    refused(client.put_archive, task, ".", tar_bytes(members))
    # whatever was refused, no link leading out is left behind by the archive
    out = sh(client, task, "for f in l e h; do [ -e \"$f\" ] || [ -L \"$f\" ] && readlink -f \"$f\"; done; true")
    assert planted not in out and "/etc" not in out, out


@pytest.mark.parametrize("path", ["x", "x/passwd", "y", "y/secret", "z", "./x/../x/hostname"])
def test_get_archive_through_a_planted_link_is_refused(client, task, planted, path):
    message = refused(client.get_archive, task, path)
    assert "outside the task's directory" in message


def test_get_archive_stores_links_inside_as_links(client, task, planted):
    """tar without -h: a directory holding a link to outside is archived with the link, not its target."""
    sh(client, task, f"mkdir -p box && printf in > box/in.txt && ln -s '{planted}' box/out && ln -s /etc/passwd box/pw")
    data = client.get_archive(task, "box")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar}
        assert members["box/out"].issym() and members["box/out"].linkname == planted
        assert members["box/pw"].issym() and members["box/pw"].linkname == "/etc/passwd"
        assert "box/out/secret" not in members
        assert tar.extractfile("box/in.txt").read() == b"in"


def test_workdir_through_a_planted_link_is_refused(client, task, planted):
    """Needs the core to call ``Sandbox.resolve_path(workdir, what="workdir")`` (lead's change)."""
    for workdir in ("x", "y", "y/sub"):
        message = refused(client.run, task, "pwd > here.txt", workdir=workdir)
        assert "workdir" in message and "outside the task's directory" in message
    sh(client, task, "test ! -e here.txt")


def test_nul_in_path_is_invalid(client, task):
    refused(client.put_archive, task, "a\0b", ONE)


# -- what must keep working ------------------------------------------------------------------------


def test_links_inside_the_task_directory_work(client, task, planted):
    sh(client, task, "mkdir -p real/deeper && ln -s real inlink && ln -s .. real/deeper/up")
    client.put_archive(task, "inlink", tar_bytes([("a.txt", "file", b"A")]))
    client.put_archive(task, ".", tar_bytes([("inlink/b.txt", "file", b"B"), ("real/deeper/up/c.txt", "file", b"C")]))
    assert sh(client, task, "cat real/a.txt real/b.txt real/c.txt") == "ABC"
    data = client.get_archive(task, "inlink/a.txt")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile(tar.getmembers()[0]).read() == b"A"
    # an archive's own links that stay inside are unpacked as links
    client.put_archive(task, "pkg", tar_bytes([("lib", "dir", None), ("lib/real.so", "file", b"so"),
                                               ("lib/link.so", "sym", "real.so"), ("top", "sym", "lib"),
                                               ("hard.so", "hard", "lib/real.so")]))
    assert sh(client, task, "readlink pkg/lib/link.so; readlink pkg/top; cat pkg/top/link.so pkg/hard.so") == \
        "real.so\nlib\nsoso"


def test_nested_dirs_and_names_with_spaces_round_trip(client, task):
    members = [("my dir", "dir", None), ("my dir/sub dir", "dir", None),
               ("my dir/sub dir/a file.txt", "file", b"spaced\n"), ("my dir/new\nline", "file", b"nl"),
               ("my dir/back\\slash", "file", b"bs"), ("my dir/é ü", "file", b"u")]
    client.put_archive(task, "in here/deep", tar_bytes(members))
    data = client.get_archive(task, "in here/deep/my dir")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = set(tar.getnames())
        assert {"my dir/sub dir/a file.txt", "my dir/new\nline", "my dir/back\\slash", "my dir/é ü"} <= names
        assert tar.extractfile("my dir/sub dir/a file.txt").read() == b"spaced\n"
        assert tar.extractfile("my dir/new\nline").read() == b"nl"


def test_large_archive_round_trips(client, task):
    blob = bytes(range(256)) * (12 * 4096)  # 12 MiB
    members = [("big", "dir", None), ("big/blob.bin", "file", blob)]
    members += [(f"big/d{i % 20}/f{i}.txt", "file", str(i).encode()) for i in range(2000)]
    client.put_archive(task, ".", tar_bytes(members))
    assert sh(client, task, "find big -type f | wc -l").strip() == "2001"
    data = client.get_archive(task, "big/blob.bin")
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert tar.extractfile("blob.bin").read() == blob

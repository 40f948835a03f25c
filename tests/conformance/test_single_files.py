"""ReadFile / WriteFile on every backend: bytes round-trip at any size, mode, parents made on
request, and the archives' confinement (a link planted by a command cannot lead a read or a write
outside the task's directory)."""

from __future__ import annotations

import os

import pytest

from executor.client import InvalidArgument, NotFound
from tests.conformance.test_paths import planted, refused, sh, untouched  # noqa: F401 (fixture)


def test_write_then_read_round_trip(client, task):
    data = bytes(range(256)) * 4 + b"\0\n\r\xff"
    r = client.write_file(task, "a.bin", data)
    assert r.bytes_written == len(data) and r.path.endswith("/a.bin")
    assert client.read_file(task, "a.bin") == data
    assert client.read_file(task, r.path) == data  # absolute inside the task directory
    assert sh(client, task, "wc -c < a.bin").strip() == str(len(data))
    client.write_file(task, "a.bin", "shorter, text")  # replaces the content
    assert client.read_file(task, "a.bin") == b"shorter, text"
    client.write_file(task, "empty", b"")
    assert client.read_file(task, "empty") == b""


def test_big_file_streams_both_ways(client, task):
    block = os.urandom(1 << 20)
    blocks = [block[i:] + block[:i] for i in range(0, 9 * 4096, 4096)]  # 9 MiB, more than one message
    r = client.write_file(task, "big", iter(blocks))
    assert r.bytes_written == 9 << 20
    got = b"".join(client.iter_file(task, "big"))
    assert len(got) == 9 << 20 and got == b"".join(blocks)


def test_mode_and_parents(client, task):
    client.write_file(task, "bin/deep/run.sh", "#!/bin/sh\necho ran\n", mode=0o755, make_parents=True)
    assert sh(client, task, "bin/deep/run.sh") == "ran\n"
    assert sh(client, task, "stat -c %a bin/deep/run.sh").strip() == "755"
    client.write_file(task, "bin/deep/run.sh", "#!/bin/sh\necho again\n")  # mode kept when not given
    assert sh(client, task, "bin/deep/run.sh") == "again\n"
    client.write_file(task, "plain.txt", "x")
    assert sh(client, task, "stat -c %a plain.txt").strip() == "644"
    with pytest.raises(NotFound):
        client.write_file(task, "missing/dir/f.txt", "x")


def test_errors(client, task):
    with pytest.raises(NotFound):
        client.read_file(task, "no-such-file")
    sh(client, task, "mkdir -p d")
    refused(client.read_file, task, "d")
    refused(client.write_file, task, "d", "x")
    refused(client.write_file, task, ".", "x")
    refused(client.read_file, task, "../../etc/passwd")
    refused(client.write_file, task, "/etc/executor-evil", "x")
    refused(client.read_file, task, "a\0b")
    with pytest.raises(InvalidArgument):
        client.read_file(task, "")


@pytest.mark.parametrize("path", ["x/passwd", "y/secret", "z", "./x/../x/hostname"])
def test_read_through_a_planted_link_is_refused(client, task, planted, path):  # noqa: F811
    assert "outside the task's directory" in refused(client.read_file, task, path)


@pytest.mark.parametrize("path", ["x/evil", "y/evil", "y/deep/evil", "z", "w"])
def test_write_through_a_planted_link_is_refused(client, task, planted, path):  # noqa: F811
    assert "outside the task's directory" in refused(client.write_file, task, path, b"pwned", make_parents=True)


def test_links_inside_are_followed(client, task):
    sh(client, task, "mkdir -p real && ln -s real inlink && printf in > real/f")
    assert client.read_file(task, "inlink/f") == b"in"
    client.write_file(task, "inlink/g", b"G")
    assert sh(client, task, "cat real/g") == "G"

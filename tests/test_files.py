"""PutArchive / GetArchive: round trips, and archives that try to leave the task's directory."""

from __future__ import annotations

import io
import tarfile

import grpc
import pytest

from executor.v1 import executor_pb2 as pb


def tar_bytes(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "sym":
                info.type = tarfile.SYMTYPE
                info.linkname = data
                tar.addfile(info)
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
    return buf.getvalue()


def put(stub, task, path, data):
    chunks = [pb.PutArchiveChunk(task_id=task, path=path, data=data[:1000])]
    chunks += [pb.PutArchiveChunk(data=data[i:i + 1000]) for i in range(1000, len(data), 1000)]
    return stub.PutArchive(iter(chunks), timeout=30)


@pytest.fixture
def stub(local_daemon):
    channel, stub = local_daemon.stub()
    yield stub
    channel.close()


def test_round_trip(stub, local_daemon):
    data = tar_bytes([("d", "dir", None), ("d/a.txt", "file", b"hello"), ("d/link", "sym", "a.txt")])
    resp = put(stub, "files", "in", data)
    assert resp.entries == 3
    with local_daemon.client() as c:
        assert c.run("files", "cat in/d/a.txt; readlink in/d/link").stdout == b"helloa.txt\n"
    blob = b"".join(ch.data for ch in stub.GetArchive(pb.GetArchiveRequest(task_id="files", path="in/d"), timeout=30))
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        names = sorted(tar.getnames())
        assert names == ["d", "d/a.txt", "d/link"]
        assert tar.extractfile("d/a.txt").read() == b"hello"


@pytest.mark.parametrize("members, words", [
    ([("../evil", "file", b"x")], "leaves the destination"),
    ([("/etc/evil", "file", b"x")], "leaves the destination"),
    ([("ok/../../evil", "file", b"x")], "leaves the destination"),
    ([("l", "sym", "/etc/passwd")], "points outside"),
    ([("d/l", "sym", "../../x")], "points outside"),
])
def test_hostile_archives_refused(stub, members, words):
    with pytest.raises(grpc.RpcError) as info:
        put(stub, "files2", ".", tar_bytes(members))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in info.value.details()


@pytest.mark.parametrize("path", ["..", "../other", "/etc", "a/../../x"])
def test_paths_cannot_leave_the_task(stub, path):
    with pytest.raises(grpc.RpcError) as info:
        put(stub, "files3", path, tar_bytes([("a", "file", b"x")]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as info:
        b"".join(ch.data for ch in stub.GetArchive(pb.GetArchiveRequest(task_id="files3", path=path), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_not_a_tar(stub):
    with pytest.raises(grpc.RpcError) as info:
        put(stub, "files4", ".", b"this is not a tar archive" * 50)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_missing_path_is_not_found(stub):
    with pytest.raises(grpc.RpcError) as info:
        b"".join(ch.data for ch in stub.GetArchive(pb.GetArchiveRequest(task_id="files5", path="nope"), timeout=30))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

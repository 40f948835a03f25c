"""The path resolver, both spellings: RESOLVE_SCRIPT (run by a real /bin/sh here, as in every
sandbox) and resolve_with (in-process, local) must agree with each other and with the kernel."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile

import pytest

from executor.backends.base import (
    RESOLVE_SCRIPT,
    BackendError,
    ErrorKind,
    encode_path_lines,
    parse_resolved,
    plan_archive,
    resolve_with,
)


def _readlink(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


@pytest.fixture
def tree(tmp_path):
    t = tmp_path / "t"
    (t / "sub" / "deep").mkdir(parents=True)
    (t / "we ird\nname\\x").mkdir()
    for name, target in [("x", "/etc"), ("d", "."), ("s", "sub/deep"), ("loop1", "loop2"), ("loop2", "loop1"),
                         ("dang", "/nonexistent/dir"), ("nl", "we ird\nname\\x")]:
        os.symlink(target, t / name)
    return str(t)


CASES = ["", "/x", "/x/passwd", "/d/..", "/s/../..", "/s/..", "/dang/new", "/miss/../x/a",
         "/we ird\nname\\x/f", "/sub//./deep/", "/nl/../s", "/d/d/d/s/..", "/loop1/a"]


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_script_and_in_process_agree_with_the_kernel(tree, shell):
    paths = [tree + c for c in CASES] + ["/"]
    out = subprocess.run([shell, "-c", RESOLVE_SCRIPT], input=encode_path_lines(paths), capture_output=True,
                         check=True)
    answers = parse_resolved(out.stdout)
    assert len(answers) == len(paths)
    for path, got in zip(paths, answers):
        assert got == resolve_with(path, _readlink), path
        if got.loop:
            assert path.endswith("/loop1/a") and len(got.links) == 40
        elif not path.startswith(tree + "/miss"):  # realpath also walks ".." after a missing name lexically
            assert got.path == os.path.realpath(path), path
    assert answers[1].links == ((tree + "/x", "/etc"),)


def _tar(members) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.type = {"sym": tarfile.SYMTYPE, "hard": tarfile.LNKTYPE, "fifo": tarfile.FIFOTYPE}[kind]
                info.linkname = data or ""
                tar.addfile(info)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("members, words", [
    ([("../e", "file", b"")], "leaves the destination"),
    ([("/e", "file", b"")], "leaves the destination"),
    ([("p", "fifo", None)], "device or FIFO"),
    ([("l", "sym", "/etc")], "absolute link targets"),
    ([("a/l", "sym", "../../x")], "points outside"),
    ([("l", "sym", "sub"), ("l/f", "file", b"")], "through the link 'l'"),
    ([("l", "sym", "sub"), ("l", "file", b"")], "through the link 'l'"),
    ([("l", "sym", "sub"), ("h", "hard", "l/f")], "goes through the link 'l'"),
])
def test_plan_refuses(members, words):
    with pytest.raises(BackendError) as info:
        plan_archive(_tar(members))
    assert info.value.kind is ErrorKind.INVALID_ARGUMENT and words in info.value.message


def test_plan_lists_paths_links_and_hard_link_targets():
    plan = plan_archive(_tar([("./a/f", "file", b"1"), ("a/l", "sym", "f"), ("h", "hard", "a/f"), ("a/f", "file", b"")]))
    assert plan.count == 4
    assert plan.paths == ["a/f", "a/l", "h"]
    assert plan.symlinks == ["a/l"] and plan.hardlinks == ["a/f"]

"""The local backend's file helper: ReadFile, WriteFile, PutArchive's unpacking and GetArchive's
packing, run inside the task's sandbox (``backends/local.py``, ``LocalSandbox``), never in the daemon."""

from __future__ import annotations

#: The local backend's file helper, run by an interpreter *inside the task's sandbox* (with
#: ``isolation: none``: a child process as the commands' user), never in the daemon.
#: argv: OP ROOT REL [ARGS]. It opens ROOT, then walks REL (already resolved and checked by the
#: daemon: no component of it was a symlink then) one component at a time with O_NOFOLLOW from the
#: directory before, so a component that a command turned into a symlink since the check is refused
#: instead of followed: nothing is read or written outside the path that was checked.
#: Exit codes: 3 missing, 4 not a regular file (or not a directory), 5 a link appeared; 1 other.
FILE_HELPER = r'''
import errno, os, stat, sys
op, root, rel = sys.argv[1:4]
args = sys.argv[4:]
def fail(code, message):
    if op in ("write", "put"):
        sys.stdin.buffer.read()  # the daemon is writing the data: take it all, then say why
    sys.stderr.write(message + "\n")
    sys.exit(code)
def why(exc, path):
    if exc.errno == errno.ENOENT:
        fail(3, path + ": No such file or directory")
    fail(1, path + ": " + (exc.strerror or str(exc)))
os.umask(0o022)
parts = [p for p in rel.split("/") if p]
if any(p == ".." for p in parts):
    fail(1, rel + ": .. in a resolved path")
try:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
except OSError as exc:
    why(exc, root)
def walk(fd, names, create):
    done = root
    for name in names:
        done = done + "/" + name
        try:
            nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
        except OSError as exc:
            if exc.errno == errno.ENOENT and create:
                try:
                    os.mkdir(name, 0o777, dir_fd=fd)
                except FileExistsError:
                    pass
                except OSError as exc2:
                    why(exc2, done)
                try:
                    nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                except OSError as exc3:
                    exc = exc3
                else:
                    os.close(fd)
                    fd = nxt
                    continue
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    st = None
                if st is not None and stat.S_ISLNK(st.st_mode):
                    fail(5, done + " became a link")
                fail(3, done + " is not a directory")
            if exc.errno == errno.ENOENT and op == "write":
                fail(3, done + ": no such directory (make_parents creates it)")
            why(exc, done)
        os.close(fd)
        fd = nxt
    return fd
def open_file(fd, name, flags, mode=0):
    path = root + "/" + "/".join(parts)
    try:
        out = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            fail(5, path + " became a link")
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            fail(4, path + " is not a regular file")
        why(exc, path)
    if not stat.S_ISREG(os.fstat(out).st_mode):
        fail(4, path + " is not a regular file")
    os.set_blocking(out, True)
    return out
if op == "read":
    if not parts:
        fail(4, root + " is not a regular file")
    f = open_file(walk(fd, parts[:-1], False), parts[-1], os.O_RDONLY)
    while True:
        data = os.read(f, 1 << 20)
        if not data:
            break
        sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
elif op == "write":
    mode, parents = args
    if not parts:
        fail(4, root + " is not a regular file")
    d = walk(fd, parts[:-1], parents == "1")
    f = open_file(d, parts[-1], os.O_WRONLY | os.O_CREAT, 0o644)
    os.ftruncate(f, 0)
    while True:
        data = sys.stdin.buffer.read1(1 << 20)
        if not data:
            break
        while data:
            data = data[os.write(f, data):]
    if mode:
        os.fchmod(f, int(mode, 8))
    os.close(f)
elif op == "put":
    os.fchdir(walk(fd, parts, True))
    os.execvp("tar", ["tar", "-x", "-f", "-", "--no-same-owner", "--no-same-permissions"])
elif op == "get":
    if parts:
        os.fchdir(walk(fd, parts[:-1], False))
        name = parts[-1]
    else:
        os.chdir(os.path.dirname(root.rstrip("/")) or "/")
        name = os.path.basename(root.rstrip("/")) or "."
    os.execvp("tar", ["tar", "-c", "-f", "-", "--", name])
else:
    fail(1, "unknown operation " + op)
'''


__all__ = ["FILE_HELPER"]

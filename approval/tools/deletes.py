"""Deletion: ``rm`` and its kin, ``find -delete``/``-exec rm``, ``rsync --delete``, moving a
system directory away, ``userdel -r``.  Deleting the root, a home or a system directory is on
the floor; deleting inside one, or a path built from an unknown variable, asks.
"""

from __future__ import annotations

import posixpath
import re
from typing import TYPE_CHECKING

from ..commands import (
    getopt,
    has_opt,
    opt_values,
    short_flags,
    split_options,
)
from ..model import UNKNOWN, Cmd, Kinds
from ..paths import delete_class, is_block_device, normalize_path, write_class
from .base import Ctx, Examples, handles
from .options import SPECS, parse

if TYPE_CHECKING:
    from ..detect import Detector


# -- deletion


RM_NAMES = ("rm", "unlink", "srm", "rimraf", "del-cli", "trash-put", "gio-trash")


@handles(*RM_NAMES)
def _h_rm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``rm`` and its kin: recursive deletes are judged by their targets (root, home or system directory:
    floor; inside one, or an unknown variable path: ask); see ``_judge_delete``."""
    recursive, ops = rm_recursive(name, args)
    for t in ops:
        _judge_delete(d, t, recursive, cmd, ctx)


def rm_recursive(name: str, args: list[str]) -> tuple[bool, list[str]]:
    """Whether ``rm``-like ``args`` delete recursively (``-r``, ``-R``, ``-fr``, ``--recursive``, ``--recu``:
    read as the tool's getopt does, after operands too), and the operands."""
    if name in SPECS:
        p = parse(name, args)
        return has_opt(p, "-r", "-R", "--recursive") or name in ("rimraf", "del-cli"), p[1]
    opts, ops = split_options(args)
    return bool(short_flags(opts) & {"r", "R"}) or "--recursive" in opts or name in ("rimraf", "del-cli"), ops


def _judge_delete(
    d: Detector, target: str, recursive: bool, cmd: Cmd, ctx: Ctx, floor_rule: str = "rm_recursive_root"
) -> None:
    cls = delete_class(target, cmd.cwd)
    if cls in ("root", "home", "sysdir"):
        if recursive:
            what = {
                "root": "the filesystem root",
                "home": "a home directory",
                "sysdir": f"the system directory {normalize_path(target, cmd.cwd)}",
            }[cls]
            d.add(ctx, floor_rule, cmd.text, f"Deletes {what} and everything under it.")
        else:
            d.add(ctx, "rm_system_path", cmd.text, f"Deletes files directly inside {normalize_path(target, cmd.cwd)}.")
    elif cls == "system":
        d.add(
            ctx,
            "rm_system_path",
            cmd.text,
            f"Deletes {normalize_path(target, cmd.cwd)}, inside a system or sensitive directory.",
        )
    elif cls == "unresolved" and recursive:
        d.add(ctx, "rm_unresolved_path", cmd.text)
    elif recursive and UNKNOWN not in target:
        path = normalize_path(target, cmd.cwd).rstrip("/")
        top = re.fullmatch(r"~/([^/*?\[]+)", path)
        if top and top.group(1) not in _HOME_CACHES:
            d.add(ctx, "rm_system_path", cmd.text, f"Deletes {path}, a whole top-level directory of the home (user data).")
        elif path == ".git" or path.endswith("/.git"):
            d.add(ctx, "rm_system_path", cmd.text, "Deletes a repository's .git: its whole history and every unpushed commit.")


# Top-level home directories that only hold caches and tools: deleting them loses nothing of the user's.
_HOME_CACHES = frozenset(
    {".cache", ".npm", ".yarn", ".pnpm-store", ".gradle", ".m2", ".cargo", ".rustup", ".nvm", ".node-gyp", ".ccache",
     ".bundle", ".gem", ".pyenv", ".rbenv", ".virtualenvs", ".pip", ".composer", ".cpan", ".cpanm", ".deno", ".bun",
     ".expo", ".vscode-server", "tmp", ".tmp", ".Trash", ".sbt", ".ivy2", ".stack", ".cabal", ".julia", ".conda",
     ".mypy_cache", ".pytest_cache", ".terraform.d", ".docker", ".minikube", ".kind", ".vagrant.d", ".local"}
)


@handles("shred", "wipe", "nwipe", "scrub")
def _h_shred(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``shred``/``wipe`` of a block device: the disk's contents are overwritten for good (files are ordinary)."""
    _, ops = split_options(args, {"-n", "-s", "--iterations", "--size", "--random-source"})
    if name == "nwipe" or any(is_block_device(t) for t in ops):
        d.add(ctx, "disk_format", cmd.text, "Overwrites a whole disk or partition.")
        return
    for t in ops:
        _judge_delete(d, t, name == "wipe" and "-r" in args, cmd, ctx)


@handles("find", "fd", "fdfind")
def _h_find(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``find … -delete`` and ``find -exec rm`` (also ``fd -x rm``): judged by the start directories, so
    ``find / -delete`` is the root and ``find ./build -delete`` is ordinary; ``-exec`` commands are judged."""
    if name != "find":
        if any(a in ("-x", "--exec", "-X", "--exec-batch") for a in args):
            i = next(i for i, a in enumerate(args) if a in ("-x", "--exec", "-X", "--exec-batch"))
            run = args[i + 1 :]
            d.command(
                Cmd([s if s != "{}" else "./" + UNKNOWN for s in run], [frozenset()] * len(run), cmd.text, cwd=cmd.cwd),
                ctx,
            )
        return
    paths: list[str] = []
    i = 0
    while i < len(args) and args[i] in ("-H", "-L", "-P", "-O0", "-O1", "-O2", "-O3", "-D"):
        i += 2 if args[i] == "-D" else 1
    while i < len(args) and not args[i].startswith(("-", "(", "!", "\\(")):
        paths.append(args[i])
        i += 1
    expr = args[i:]
    paths = paths or ["."]
    # ``-name '*'`` (and -path/-wholename '*') filter nothing: find still reaches every file
    filtered = any(
        e in FIND_FILTERS and not (e in ("-name", "-iname", "-path", "-ipath", "-wholename") and expr[n + 1 : n + 2] in (["*"], ["*.*"], [".*"]))
        for n, e in enumerate(expr)
    )
    # ``-name .git`` (a literal, no glob): the files reached are named that
    names = [expr[n + 1] for n, e in enumerate(expr[:-1]) if e in ("-name", "-iname")]
    literal_name = names[0] if len(names) == 1 and not re.search(r"[*?\[]", names[0]) else ""
    destroyer = _find_exec_destroyer(expr)
    if destroyer and "-delete" not in expr:
        for p in paths:
            cls = delete_class(p, cmd.cwd)
            where = normalize_path(p, cmd.cwd)
            if destroyer == "perm" and cls in ("root", "sysdir", "system"):
                d.add(ctx, "chmod_recursive_system", cmd.text, f"find runs chmod/chown on every file under {where}.")
            elif destroyer == "delete" and cls in ("root", "home", "sysdir") and not filtered:
                d.add(ctx, "find_delete_root", cmd.text, f"find destroys every file under {where}, one by one.")
            elif destroyer == "delete" and cls in ("root", "home", "sysdir", "system"):
                d.add(ctx, "rm_system_path", cmd.text, f"find destroys the matching files under {where}.")
    if "-delete" in expr:
        for p in paths:
            target = p if not filtered else posixpath.join(p, UNKNOWN + "x")
            cls = delete_class(p, cmd.cwd)
            if cls in ("root", "home", "sysdir") and not filtered:
                d.add(ctx, "find_delete_root", cmd.text)
            elif cls in ("root", "sysdir", "system") or delete_class(target, cmd.cwd) == "system":
                d.add(ctx, "rm_system_path", cmd.text, f"find deletes files under {normalize_path(p, cmd.cwd)}.")
    j = 0
    while j < len(expr):
        if expr[j] in ("-exec", "-execdir", "-ok", "-okdir"):
            k = j + 1
            sub: list[str] = []
            while k < len(expr) and expr[k] not in (";", "+", "\\;"):
                sub.append(expr[k])
                k += 1
            for p in paths[:4]:
                target = p if not filtered else posixpath.join(p, literal_name or "x" + UNKNOWN)
                argv = [target if s == "{}" else s.replace("{}", target) for s in sub]
                d.command(Cmd(argv, [frozenset()] * len(argv), cmd.text, cwd=cmd.cwd), ctx)
            j = k
        j += 1


_FIND_DESTROYERS = frozenset({"rm", "unlink", "shred", "srm", "wipe", "truncate", "rmdir"})


def _find_exec_destroyer(expr: list[str]) -> str:
    """What ``find -exec``/``-execdir``/``-ok`` does to each file it reaches, if it destroys: "delete"
    (rm, unlink, shred, truncate, a shell emptying ``$1``) or "perm" (chmod/chown). find recurses,
    so a non-recursive destroyer still reaches every file."""
    for j, e in enumerate(expr):
        if e not in ("-exec", "-execdir", "-ok", "-okdir") or j + 1 >= len(expr):
            continue
        sub = expr[j + 1 :]
        prog = sub[0].rsplit("/", 1)[-1]
        while prog in ("sudo", "env", "nice", "nohup", "command") and len(sub) > 1:
            sub = sub[1:]
            prog = sub[0].rsplit("/", 1)[-1]
        if prog in _FIND_DESTROYERS:
            return "delete"
        if prog in ("chmod", "chown", "chgrp", "setfacl"):
            return "perm"
        if prog in ("sh", "bash", "dash", "zsh") and "-c" in sub[:3]:
            code = sub[sub.index("-c") + 1] if sub.index("-c") + 1 < len(sub) else ""
            if re.search(r"(?:^|[;&|\s])(?::\s*)?>\s*\"?\$(?:1|@|\{1\})|\b(?:rm|shred|truncate|unlink)\b", code):
                return "delete"
    return ""


FIND_FILTERS = frozenset(
    {
        "-name",
        "-iname",
        "-path",
        "-ipath",
        "-regex",
        "-iregex",
        "-newer",
        "-mtime",
        "-mmin",
        "-atime",
        "-amin",
        "-ctime",
        "-cmin",
        "-size",
        "-user",
        "-group",
        "-perm",
        "-empty",
        "-wholename",
        "-iwholename",
        "-lname",
        "-ilname",
        "-uid",
        "-gid",
        "-nouser",
        "-nogroup",
        "-links",
        "-inum",
        "-samefile",
        "-newermt",
        "-used",
        "-fstype",
        "-context",
    }
)


@handles("rsync")
def _h_rsync(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``rsync --delete`` (and its variants) makes the destination match the source: an empty or wrong
    source wipes the destination, so a root, home or system destination is on the floor."""
    opts, ops = split_options(
        args,
        {
            "-e",
            "--rsh",
            "-f",
            "--filter",
            "--exclude",
            "--include",
            "-T",
            "--temp-dir",
            "--log-file",
            "--password-file",
            "--port",
            "--chmod",
            "--chown",
            "-B",
            "--block-size",
            "--timeout",
            "--bwlimit",
            "--max-size",
            "--min-size",
            "--backup-dir",
            "--suffix",
            "--exclude-from",
            "--include-from",
            "--files-from",
            "--link-dest",
            "--compare-dest",
            "--copy-dest",
            "--partial-dir",
        },
    )
    if len(ops) < 2 or "n" in short_flags(opts) or "--dry-run" in opts:
        return
    dest = ops[-1]
    if ":" in dest.split("/", 1)[0]:
        return  # remote destination
    if any(o.startswith(("--delete", "--del", "--remove-source-files")) and o != "--delay-updates" for o in opts):
        cls = delete_class(dest, cmd.cwd)
        if cls in ("root", "home", "sysdir"):
            d.add(ctx, "rsync_delete_root", cmd.text)
        elif cls == "system":
            d.add(ctx, "rm_system_path", cmd.text, f"rsync --delete removes files under {dest}.")
    d.write_target(dest, cmd, ctx)


_COPY_LONGS = ("--target-directory", "--no-target-directory", "--suffix", "--backup", "--force", "--interactive",
               "--no-clobber", "--update", "--verbose", "--archive", "--recursive", "--symbolic", "--relative",
               "--dereference", "--no-dereference", "--preserve", "--no-preserve", "--parents", "--link", "--logical",
               "--physical", "--strip-trailing-slashes", "--one-file-system", "--remove-destination", "--reflink",
               "--sparse", "--attributes-only", "--copy-contents", "--debug", "--exchange", "--directory", "--mode",
               "--owner", "--group", "--compare", "--strip", "--strip-program", "--context", "--preserve-timestamps",
               "--preserve-context", "--no-copy", "--keep-directory-symlink")


@handles("mv")
def _h_mv(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``mv`` of a system directory or the home away (the system breaks), or into a system path (a write)."""
    p = getopt(args, "tS", _COPY_LONGS, ("--target-directory", "--suffix", "--backup"))
    ops = p[1]
    dirs = opt_values(p, "-t", "--target-directory")
    target_dir = dirs[-1] if dirs else None
    sources = ops if target_dir else ops[:-1]
    dest = target_dir or (ops[-1] if len(ops) >= 2 else None)
    for s in sources:
        if delete_class(s, cmd.cwd) in ("root", "home", "sysdir"):
            d.add(ctx, "move_system_path", cmd.text, f"Moves {normalize_path(s, cmd.cwd)} away.")
        elif write_class(s, cmd.cwd) in ("system", "persist"):
            d.add(ctx, "system_write", cmd.text, f"Moves {s} out of a system path.")
    if dest:
        d.write_target(dest, cmd, ctx)


@handles("cp", "install", "ln", "link", "rcp", "ditto", "gcp")
def _h_copy(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``cp``/``install``/``ln`` onto a system path, a persistence point or a block device: judged as a write
    to the destination."""
    p = getopt(
        args,
        "tSmog" if name == "install" else "tS",
        _COPY_LONGS,
        ("--target-directory", "--suffix", "--mode", "--owner", "--group", "--backup", "--context", "--reflink",
         "--sparse", "--preserve", "--no-preserve", "--strip-program")
        if name != "ln" else ("--target-directory", "--suffix", "--backup"),
    )
    ops = p[1]
    dirs = opt_values(p, "-t", "--target-directory")
    target_dir = dirs[-1] if dirs else None
    if target_dir:
        d.write_target(target_dir, cmd, ctx)
    elif name == "install" and any(o in ("-d", "--directory") for o, _ in p[0]):
        for t in ops:
            d.write_target(t, cmd, ctx)
    elif len(ops) >= 2 or (name == "ln" and ops):
        d.write_target(ops[-1], cmd, ctx)


@handles("userdel", "deluser", "homectl", "dscl", "sysadminctl", "luser-del", "rmuser")
def _h_userdel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Deleting a user together with its home (``userdel -r``, ``deluser --remove-home``, ``homectl remove``,
    FreeBSD ``rmuser`` (which removes the home and mail spool), macOS ``sysadminctl -deleteUser``)."""
    hit = name == "userdel" and has_opt(parse(name, args), "-r", "--remove")
    hit = hit or (name == "deluser" and has_opt(parse(name, args), "--remove-home", "--remove-all-files"))
    hit = hit or (name == "homectl" and any(a in ("remove", "rm") for a in args[:2]))
    hit = hit or (name == "dscl" and "-delete" in args and any(a.startswith("/Users/") for a in args))
    hit = hit or (name == "sysadminctl" and "-deleteUser" in args and "-keepHome" not in args)
    hit = hit or (name == "rmuser" and any(not a.startswith("-") for a in args))
    if hit:
        d.add(ctx, "user_home_delete", cmd.text)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "rm_recursive_root",
        match=("rm -rf /", "rm / -rf", "srm -r /", "rm -rf ~", "rm -rf /*", "sudo rm -rf --no-preserve-root /", "rm -rf /e*",
               "find / -exec rm -rf {} +", "rm --recu --for /", "rm -v --recursive -- ~"),
        no_match=("rm -r build", "rm -rf ./node_modules", "rm notes/todo.txt", "rm --help", "echo rm -rf /",
                  "rm --recu ./build"),
    ),
    Examples(
        "find_delete_root",
        match=("find / -delete", "find ~ -delete", "find /etc -delete", "find /usr -depth -delete"),
        no_match=("find . -name '*.pyc' -delete", "find / -name '*.conf' -print", "find build -type f -delete"),
    ),
    Examples(
        "rsync_delete_root",
        match=("rsync -a --delete empty/ ~/", "rsync -a --delete /tmp/empty/ /", "rsync --delete -a /dev/null/ /home/"),
        no_match=("rsync -a --delete src/ build/", "rsync -av src/ build/", "rsync -n -a --delete empty/ /"),
    ),
    Examples(
        "rm_system_path",
        match=("rm -f /etc/passwd", "unlink /etc/shadow", "shred -u ~/.ssh/id_rsa"),
        no_match=("rm -f /tmp/x.log", "rm build/out.o", "unlink ./socket"),
    ),
    Examples(
        "rm_unresolved_path",
        match=('rm -rf "$STEAMROOT/"*', "xargs -a paths.txt rm -r", "cat /etc/list | xargs rm -rf"),
        no_match=('D=build; rm -rf "$D"/*', "rm -rf ./build/*", "find . -name '*.o' | xargs rm -f"),
    ),
    Examples(
        "move_system_path",
        match=("mv ~ /tmp/trash", "mv /etc /etc.bak", "mv /usr/bin /tmp/"),
        no_match=("mv build/out dist/", "mv ~/notes.txt ~/archive/", "mv a.txt b.txt"),
    ),
    Examples(
        "user_home_delete",
        match=("sudo userdel -r alice", "deluser --remove-home bob", "userdel -fr carol", "pw userdel dave -r",
               "rmuser -y erin", "user del -r frank", "deluser --remove-hom bob", "deluser -Remove-All-Files bob",
               "userdel --remo carol", "userdel -Zr carol"),
        no_match=("userdel alice", "id alice", "deluser bob", "pw userdel dave", "pw usershow dave", "rmuser",
                  "deluser --remove bob", "deluser --backup bob", "userdel -R /mnt/r alice"),
    ),
)

"""What each tool does with its arguments: one handler per tool family, plus generic semantics.

A handler receives the unwrapped argv of one simple command and reports findings through the
detector (``d.add``), or hands code it carries back to the detector (``d.payload``,
``d.command``) to be judged recursively.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import inline
from .commands import (
    CODE_FLAGS,
    SHELLS,
    base_name,
    classify,
    command_start,
    interpreter_lang,
    option_value,
    short_flags,
    split_options,
    unwrap,
)
from .parser import UNKNOWN, Cmd, Kinds, echo_output
from .paths import delete_class, is_block_device, normalize_path, write_class

if TYPE_CHECKING:
    from .detect import Detector


@dataclass
class Found:
    rule: str
    segment: str
    reason: str = ""


@dataclass
class Ctx:
    """State of one script being judged (payloads get their own)."""

    depth: int
    env: dict[str, str] = field(default_factory=dict)
    downloaded: set[str] = field(default_factory=set)
    written: dict[str, str] = field(default_factory=dict)
    out: list[Found] = field(default_factory=list)
    net_socket: bool = False


# ---------------------------------------------------------------------------------------------
# generic semantics for tools without a handler

HELP_FLAGS = frozenset(
    {"-h", "-?", "--help", "-help", "--usage", "-V", "--version", "-version", "help", "version", "--long-help"}
)
DRY_RUN = frozenset(
    {
        "--dry-run",
        "--dryrun",
        "--generate-cli-skeleton",
        "--what-if",
        "-WhatIf",
        "--whatif",
        "--simulate",
        "--no-act",
        "--just-print",
        "--plan-only",
    }
)
_POWER_WORDS = frozenset({"reboot", "poweroff", "shutdown", "halt", "power-off", "restart-system"})
_STOP_WORDS = frozenset({"stop", "shutdown", "kill", "disable", "stopall", "stop-all", "killall"})
_SERVICE_NOUNS = frozenset(
    {"service", "services", "server", "daemon", "svc", "agent", "node", "cluster", "instance", "all"}
)
_DAEMONISH = re.compile(
    r"(?:ctl|ctrl|adm|admin|cli|-server|server|daemon|d|-service|service|console|mgr|manager|supervisor)$"
)
# Task runners and local dev environments: their "stop" stops the developer's own stack.
_DEV_RUNNERS = frozenset(
    {
        "make",
        "just",
        "task",
        "mage",
        "invoke",
        "gulp",
        "grunt",
        "sail",
        "ddev",
        "supabase",
        "tilt",
        "skaffold",
        "devcontainer",
        "docker-machine",
        "lima",
        "colima",
        "orb",
        "vagrant",
        "ngrok",
        "expo",
        "turbo",
        "nx",
        "lerna",
        "foreman",
        "overmind",
        "honcho",
        "hivemind",
        "procfile",
        "devenv",
        "devbox",
        "flox",
        "garden",
        "okteto",
        "telepresence",
        "mutagen",
        "earthly",
        "forever",
        "nodemon",
        "pm2-dev",
        "localstack",
        "lando",
        "warden",
        "docksal",
        "minikube-dev",
        "firebase",
        "netlify",
        "vercel",
        "wrangler",
        "miniflare",
        "act",
    }
)
_NOT_DAEMONS = frozenset(
    {
        "npm",
        "yarn",
        "pnpm",
        "bun",
        "mpc",
        "timew",
        "watson",
        "dmypy",
        "bazel",
        "jupyter",
        "git",
        "docker",
        "podman",
        "minikube",
        "colima",
        "vagrant",
        "lima",
        "limactl",
        "multipass",
        "orb",
        "orbctl",
        "kind",
        "in-toto-record",
        "ollama",
        "tmux",
        "screen",
        "find",
        "sed",
        "cargo",
        "gradle",
        "gradlew",
        "mvn",
        "emulator",
        "adb",
        "fastboot",
        "xcrun",
        "simctl",
        "ngrok",
        "tailscale",
        "ssh-agent",
        "gpg-agent",
        "gpgconf",
        "spotifyd",
        "mpd",
        "cmus",
        "playerctl",
        "nvim",
        "vim",
        "hyprctl",
        "swaymsg",
        "i3-msg",
        "gsettings",
        "flatpak",
        "pueue",
        "task",
        "toggl",
        "hamster",
        "kubectl",
    }
)
_READERS = frozenset(
    {
        "last",
        "lastb",
        "lastlog",
        "journalctl",
        "who",
        "w",
        "uptime",
        "grep",
        "egrep",
        "rg",
        "ag",
        "man",
        "tldr",
        "info",
        "apropos",
        "whatis",
        "echo",
        "printf",
        "systemd-inhibit",
        "cbatticon",
        "adb",
        "fastboot",
        "help",
        "type",
        "which",
        "whereis",
        "locate",
        "history",
        "stat",
        "ls",
        "cat",
        "less",
        "awk",
        "sed",
        "tr",
        "cut",
        "sort",
        "uniq",
        "wc",
        "jq",
        "yq",
        "test",
        "[",
        "true",
        "false",
        ":",
    }
)
READ_ONLY_DEVICE = frozenset(
    {
        "lsblk",
        "blkid",
        "smartctl",
        "hddtemp",
        "udisksctl",
        "mount",
        "umount",
        "pmount",
        "pumount",
        "eject",
        "findmnt",
        "df",
        "du",
        "dumpe2fs",
        "e2freefrag",
        "e2image",
        "ioping",
        "hd-idle",
        "fls",
        "file",
        "stat",
        "udevadm",
        "partprobe",
        "blockdev",
        "cat",
        "less",
        "more",
        "head",
        "tail",
        "od",
        "hexdump",
        "xxd",
        "strings",
        "pv",
        "cmp",
        "losetup",
        "isoinfo",
        "ntfsinfo",
        "xfs_info",
        "swapon",
        "swapoff",
        "grub-mount",
        "udiskie-mount",
        "udiskie-umount",
        "setserial",
        "stty",
        "mlabel",
        "tune.exfat",
        "dump.exfat",
        "virt-xml",
        "systemd-dissect",
        "iostat",
        "ls",
        "lsof",
        "fuser",
        "echo",
        "printf",
        "test",
        "[",
        "mpremote",
        "kcat",
        "lvmsadc",
        "lvmsar",
        "lvmpersist",
        "lvs",
        "vgs",
        "pvs",
        "lvdisplay",
        "vgdisplay",
        "pvdisplay",
        "lvscan",
        "vgscan",
        "pvscan",
        "sg_inq",
        "sg_map",
        "sg_scan",
        "hdparm",
        "testdisk",
        "photorec",
        "fatlabel",
        "exfatlabel",
        "e2label",
        "findfs",
        "wipefs",
        "docker-volume",
        "lvm_import_vdo",
        "fswebcam",
        "mount.ntfs",
        "ntfs-3g",
        "ntfsls",
        "ntfscat",
        "xfs_db",
        "fsstat",
        "mmls",
        "img_stat",
        "istat",
        "icat",
        "ffind",
        "ils",
        "blkcat",
        "jls",
        "tsk_recover",
        "zdb",
        "iotop",
        "dstat",
        "watch",
        "grep",
        "rg",
        "sensors",
        "inxi",
        "hwinfo",
        "lshw",
        "fdisk",
        "sfdisk",
        "gdisk",
        "sgdisk",
        "parted",
        "cfdisk",
        "mkswap",
        "cryptsetup",
        "dd",
        "ddrescue",
        "nvme",
        "bmaptool",
        "btrfs",
        "zpool",
        "zfs",
        "qemu-img-info",
        "virt-filesystems",
        "virt-df",
        "guestfish-ro",
        "kpartx",
        "partx",
        "dmsetup",
        "multipath",
        "mdadm-detail",
        "sudo",
        "doas",
        "nbd-client",
        "ntfsfix-n",
        "hdparm-I",
        "exfatinfo",
        "f3probe",
        "f3read",
        "bcache-super-show",
        "veritysetup",
    }
)


_H_IS_HELP = frozenset(
    {"helm", "kubectl", "oc", "gh", "glab", "docker", "podman", "nerdctl", "terraform", "tofu", "pulumi", "eksctl",
     "kind", "k3d", "minikube", "argocd", "flux", "doctl", "az", "gcloud", "vault", "nomad", "consul", "packer", "git",
     "setcap", "useradd", "usermod", "chattr", "loginctl", "nsenter"}
)


def is_help(name: str, args: list[str]) -> bool:
    """``X --help``, ``X -help``, ``X help ...``, and ``-h`` of tools where it means help: the tool only prints usage."""
    if "--help" in args or "--version" in args:
        return True
    if "-help" in args and name not in ("shutdown", "halt", "poweroff", "reboot", "kill"):
        return True
    if "-h" in args and name in _H_IS_HELP and not (name in ("git",) and args[:1] != ["-h"] and "-h" not in args[1:2]):
        return True
    if name in ("shutdown", "halt", "poweroff", "reboot", "kill", "sort", "df", "du", "ls"):
        return False
    if args and all(a in HELP_FLAGS for a in args):
        return True
    return bool(args[:1] == ["help"] and name not in SHELLS)


def _plain_operands(args: list[str]) -> list[str]:
    """Operands not directly after an option (which may be that option's value)."""
    out: list[str] = []
    prev_opt = False
    for a in args:
        if a.startswith("-"):
            prev_opt = "=" not in a and not a.startswith("--")
            if a.startswith("--") and "=" not in a:
                prev_opt = False
            continue
        if not prev_opt:
            out.append(a)
        prev_opt = False
    return out


SQL_AT_PROMPT = re.compile(
    r"(?i)^(?:drop\s+[a-z_]+|truncate\s+table|truncate\s+[a-z_][\w.]*\s*;?\s*$|delete\s+from|update\s+\S+\s+set|alter\s+table\s+\S+\s+drop|flushall|flushdb)\b"
)
_IMAGE_FILE = re.compile(
    r"(?i)\.(?:img|image|raw|iso|erofs|squashfs|sqsh|sfs|qcow2|bin|vhd|vhdx|vmdk|vdi|ext[234]|fat|vfat|btrfs|xfs|swap|fs|disk|part)$"
)
_DB_WORD = re.compile(
    r"^(?:drop|delete|destroy|wipe|purge|reset|truncate)[-_:]?(?:table|tables|database|databases|db|dbs|schema|schemas|vhost|collection|collections|keyspace|index|indices|bucket|all)$|^db:(?:drop|reset|purge|wipe)$|^migrate:(?:fresh|reset)$|^db:migrate:undo:all$"
)


NO_GENERIC = (
    frozenset(
        {
            "systemctl",
            "kill",
            "pkill",
            "killall",
            "git",
            "docker",
            "podman",
            "kubectl",
            "service",
            "brew",
            "snap",
            "echo",
            "printf",
            "sudo",
        }
    )
    | SHELLS
)
_READ_VERBS = frozenset(
    {
        "report",
        "list",
        "ls",
        "show",
        "info",
        "status",
        "get",
        "print",
        "dump",
        "query",
        "check",
        "scan",
        "inspect",
        "stat",
        "stats",
        "display",
        "probe",
        "detect",
        "identify",
        "read",
        "test",
        "verify",
    }
)
_FS_TOOL = re.compile(
    r"(?:^|[-_.])(?:bcachefs|btrfs|ntfs|exfat|vfat|fat|ext[234]|xfs|f2fs|jfs|reiserfs|nilfs|zfs|hfs|apfs|ufs|udf|squashfs|erofs|fs)(?:[-_.]|$)|fs$"
)


def generic_semantics(
    d: Detector, name: str, args: list[str], cmd: Cmd, ctx: Ctx, handled: bool = False, path: str = ""
) -> None:
    """Semantics that hold across tools: stop verbs on daemons, power verbs, drops, block devices."""
    ops = _plain_operands(args)
    low = [o.lower() for o in ops[:4]]
    if name in _READERS:
        return
    # block devices handed to a tool that can write
    if (
        not handled
        and name not in READ_ONLY_DEVICE
        and not name.startswith(("ls", "mount.", "fsck", "e2fsck", "dm"))
        and not (low[:1] and low[0] in _READ_VERBS)
        and not any(
            a in ("-n", "-h", "--no-act", "-l", "--list") or re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", a) for a in args
        )
        and (name != "debugfs" or "-w" in args)  # debugfs opens read-only unless -w
    ):
        prev = ""
        for a in args:
            v = a.split("=", 1)[1] if "=" in a and (a.startswith("-") or a.startswith(("of=", "if="))) else a
            if (
                v.startswith("/dev/")
                and is_block_device(v)
                and prev not in ("-i", "--input", "--source", "-s", "--src", "--from")
                and not a.startswith("if=")
            ):
                d.add(ctx, "device_write", cmd.text, f"{name} is pointed at the block device {v} and may overwrite it.")
                break
            prev = a
    if _FS_TOOL.search(name) and any(w in ("format", "mkfs", "wipe", "erase") for w in low[:2]):
        d.add(ctx, "disk_format", cmd.text, f"{name} formats a filesystem.")
    # daemons told to stop (not task runners and dev environments, not the project's own scripts)
    if handled and name in HANDLERS and HANDLERS[name] in (_h_daemon_stop, _h_service) or name in _DEV_RUNNERS:
        pass
    elif "/" in path and not path.startswith("/"):
        pass
    elif (
        re.search(r"(?:^|[-_])stop(?:[-_.]|$)", name) and name not in _NOT_DAEMONS and not name.startswith("stopwatch")
    ):
        d.add(ctx, "service_stop", cmd.text, f"{name} stops a service.")
    elif low[:1] and low[0] in ("stop", "shutdown") and name not in _NOT_DAEMONS:
        d.add(ctx, "service_stop", cmd.text, f"{name} {low[0]} stops a service.")
    elif any(w in _STOP_WORDS for w in low[:3]) and name not in _NOT_DAEMONS:
        if "firewall" in name:
            d.add(ctx, "firewall_flush", cmd.text, f"{name} stops the firewall.")
        elif _DAEMONISH.search(name) or any(w in _SERVICE_NOUNS for w in low[:3]) or "--service" in args:
            d.add(ctx, "service_stop", cmd.text, f"{name} {' '.join(ops[:3])} stops a service.")
    # power verbs and flags
    if (
        not handled
        and name not in _NOT_DAEMONS
        and name not in _DEV_RUNNERS
        and not ("/" in path and not path.startswith("/"))
        and (
            any(w in _POWER_WORDS for w in low[:2])
            or any(a in ("--reboot", "--poweroff", "--shutdown", "--halt") for a in args)
        )
    ):
        d.add(ctx, "power", cmd.text, f"{name} reboots or powers off the machine.")
    # database drops spelled as subcommands
    if any(_DB_WORD.match(w) for w in low[:3]) or any(
        a in ("database", "db", "schema") and b in ("drop", "reset", "wipe", "purge", "destroy")
        for a, b in zip(low, low[1:])
    ):
        d.add(ctx, "db_drop", cmd.text, f"{name} {' '.join(ops[:3])} drops a database or its tables.")
    # factory resets, destroy verbs
    if any(w in ("factory-reset", "factory_reset", "factoryreset") for w in low):
        d.add(ctx, "system_restore", cmd.text, f"{name} factory-resets a device or system.")
    elif any(w == "destroy" or w.startswith("destroy-") for w in low[:2]):
        d.add(ctx, "infra_destroy", cmd.text, f"{name} {' '.join(ops[:3])} destroys resources.")
    elif any(w in ("delete", "remove", "rm") for w in low[:2]) and any(
        w in ("cluster", "clusters", "vcluster", "namespace", "namespaces") for w in low[:3]
    ):
        d.add(ctx, "cluster_delete", cmd.text)
    # output options pointed at system paths (``--save /etc/x``, ``-o /usr/local/bin/x``)
    for i, a in enumerate(args[:-1]):
        if a in (
            "-o",
            "--output",
            "--out",
            "--save",
            "--output-file",
            "--outfile",
            "--out-file",
            "-O",
            "--target",
            "--write",
            "--dest",
            "--destination",
        ):
            d.write_target(args[i + 1], cmd, ctx)


# ---------------------------------------------------------------------------------------------
# handlers: one per tool family


Handler = Callable[["Detector", str, list[str], list[Kinds], Cmd, "Ctx"], None]
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    def deco(fn: Handler) -> Handler:
        for n in names:
            HANDLERS[n] = fn
        return fn

    return deco


def pattern_handler(name: str) -> Handler | None:
    if name.startswith(("mkfs", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs", "mkswap", "newfs")) or name in ("mkfs",):
        return _h_mkfs
    if interpreter_lang(name):
        return _h_interpreter
    return None


# -- deletion


RM_NAMES = ("rm", "unlink", "srm", "rimraf", "del-cli", "trash-put", "gio-trash")


@handles(*RM_NAMES)
def _h_rm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, ops = split_options(args)
    for t in ops:
        _judge_delete(d, t, _rm_recursive(name, opts), cmd, ctx)


def _rm_recursive(name: str, opts: list[str]) -> bool:
    return bool(short_flags(opts) & {"r", "R"}) or "--recursive" in opts or name in ("rimraf", "del-cli")


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


@handles("shred", "wipe", "nwipe", "scrub")
def _h_shred(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(args, {"-n", "-s", "--iterations", "--size", "--random-source"})
    if name == "nwipe" or any(is_block_device(t) for t in ops):
        d.add(ctx, "disk_format", cmd.text, "Overwrites a whole disk or partition.")
        return
    for t in ops:
        _judge_delete(d, t, name == "wipe" and "-r" in args, cmd, ctx)


@handles("find", "fd", "fdfind")
def _h_find(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name != "find":
        if any(a in ("-x", "--exec", "-X", "--exec-batch") for a in args):
            i = next(i for i, a in enumerate(args) if a in ("-x", "--exec", "-X", "--exec-batch"))
            sub = args[i + 1 :]
            d.command(
                Cmd([s if s != "{}" else "./" + UNKNOWN for s in sub], [frozenset()] * len(sub), cmd.text, cwd=cmd.cwd),
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
    filtered = any(e in FIND_FILTERS for e in expr)
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
                target = p if not filtered else posixpath.join(p, "x" + UNKNOWN)
                argv = [target if s == "{}" else s.replace("{}", target) for s in sub]
                d.command(Cmd(argv, [frozenset()] * len(argv), cmd.text, cwd=cmd.cwd), ctx)
            j = k
        j += 1


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


@handles("mv")
def _h_mv(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, ops = split_options(args, {"-t", "-S", "--target-directory", "--suffix"})
    target_dir = option_value(opts, ("-t", "--target-directory"))
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
    opts, ops = split_options(
        args,
        {"-t", "-S", "-m", "-o", "-g", "--target-directory", "--suffix", "--mode", "--owner", "--group", "-T"}
        if name != "ln"
        else {"-t", "-S", "--target-directory", "--suffix"},
    )
    target_dir = option_value(opts, ("-t", "--target-directory"))
    if target_dir:
        d.write_target(target_dir, cmd, ctx)
    elif name == "install" and "-d" in opts:
        for t in ops:
            d.write_target(t, cmd, ctx)
    elif len(ops) >= 2 or (name == "ln" and ops):
        d.write_target(ops[-1], cmd, ctx)


@handles("tee", "sponge")
def _h_tee(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(args, {"--output-error"})
    for t in ops:
        d.write_target(t, cmd, ctx)


@handles("dd", "ddrescue", "dcfldd", "dc3dd")
def _h_dd(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    targets = [a.split("=", 1)[1] for a in args if a.startswith("of=")]
    if name == "ddrescue":
        _, ops = split_options(args)
        targets = ops[1:2]
    for t in targets:
        d.write_target(t, cmd, ctx)


@handles("sed", "gsed", "perl-i")
def _h_sed(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if not any(
        a == "-i" or a.startswith("--in-place") or (a.startswith("-") and not a.startswith("--") and "i" in a[1:2])
        for a in args
    ):
        return
    opts, ops = split_options(args, {"-e", "-f", "--expression", "--file", "-l", "--line-length"})
    has_script_opt = any(
        o in ("-e", "-f", "--expression", "--file") or o.startswith(("--expression=", "--file=")) for o in opts
    )
    files = ops if has_script_opt else ops[1:]
    for f in files:
        d.write_target(f, cmd, ctx)


@handles("truncate", "fallocate")
def _h_truncate(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(args, {"-s", "-r", "--size", "--reference", "-l", "-o", "--length", "--offset"})
    for f in ops:
        d.write_target(f, cmd, ctx)


@handles("tar", "bsdtar", "gtar", "unzip", "7z", "7za", "cpio")
def _h_extract(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    dest = (
        option_value(args, ("-C", "--directory", "-d"))
        if name != "7z"
        else next((a[2:] for a in args if a.startswith("-o")), None)
    )
    if dest is None and name in ("tar", "bsdtar", "gtar"):
        dest = next((a.split("=", 1)[1] for a in args if a.startswith("--directory=")), None)
    extracting = (
        name in ("unzip", "cpio")
        or (name in ("7z", "7za") and args[:1] in (["x"], ["e"]))
        or any(a in ("-x", "--extract", "--get") or re.fullmatch(r"-[A-Za-z]*x[A-Za-z]*", a) for a in args)
        or bool(args and re.fullmatch(r"[A-Za-z]*x[A-Za-z]*", args[0]))
    )
    if dest and extracting:
        cls = write_class(dest.rstrip("/") + "/x", cmd.cwd)
        if cls in ("system", "persist"):
            d.add(ctx, "system_write", cmd.text, f"Extracts an archive into the system path {dest}.")
        elif normalize_path(dest, cmd.cwd) == "/":
            d.add(ctx, "system_write", cmd.text, "Extracts an archive over the filesystem root.")


@handles("chmod", "chown", "chgrp", "setfacl", "chattr", "chcon")
def _h_chmod(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, ops = split_options(args, {"--reference", "--from", "-m", "-x", "-M", "-X"})
    recursive = "R" in short_flags(opts) or "--recursive" in opts or (name == "chattr" and "R" in "".join(opts))
    targets = ops[1:] if name not in ("setfacl",) else ops
    if (
        name == "chmod"
        and ops
        and ops[0].startswith(("-", "+")) is False
        and not re.match(r"^[0-7]{3,4}$|^[ugoa]*[-+=]", ops[0])
    ):
        targets = ops
    mode = ops[0] if ops and name == "chmod" else ""
    if re.fullmatch(r"[0-7]*[4267][0-7]{3}", mode) and len(mode) == 4 or re.search(r"[ugoa]*[+=][rwxXt]*s", mode):
        d.add(ctx, "chmod_setuid", cmd.text)
    for t in targets:
        cls = delete_class(t, cmd.cwd)
        if recursive and cls in ("root", "home", "sysdir", "system"):
            d.add(
                ctx, "chmod_recursive_system", cmd.text, f"Recursively changes {name} on {normalize_path(t, cmd.cwd)}."
            )
        elif cls in ("root", "sysdir") or write_class(t, cmd.cwd) == "persist" and name != "chmod":
            d.add(
                ctx,
                "chmod_recursive_system",
                cmd.text,
                f"Changes {name} on the system path {normalize_path(t, cmd.cwd)}.",
            )


# -- disks


def _h_mkfs(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if re.fullmatch(r"mke2fs|mkfs\.ext[234]", name) and "-n" in args:
        return  # mke2fs -n: show what would be done
    operands = [a for a in args if not a.startswith("-")]
    if not any(is_block_device(a) for a in operands) and any(_IMAGE_FILE.search(a) for a in operands):
        return  # building a filesystem image in a regular file
    d.add(ctx, "disk_format", cmd.text, f"{name} writes a new filesystem, erasing what is on the target.")


@handles("wipefs")
def _h_wipefs(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, _ = split_options(args, {"-o", "--offset", "-t", "--types", "-O", "--output", "-b", "--backup"})
    if any(
        o in ("-a", "--all", "-o", "--offset") or (o.startswith("-") and not o.startswith("--") and "a" in o)
        for o in opts
    ):
        d.add(ctx, "disk_format", cmd.text, "wipefs erases filesystem signatures from a device.")


@handles("blkdiscard", "mkswap", "mke2fs", "mkfs", "zerofree")
def _h_blkdiscard(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    d.add(ctx, "disk_format", cmd.text, f"{name} erases a device.")


@handles("cryptsetup")
def _h_cryptsetup(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if any(a in ("luksFormat", "erase", "luksErase", "reencrypt") for a in args) or (
        "format" in args and args.index("format") < 3
    ):
        d.add(ctx, "disk_format", cmd.text, "cryptsetup formats or erases an encrypted volume.")


@handles("mdadm")
def _h_mdadm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if any(a in ("--create", "-C", "--zero-superblock", "--build") for a in args):
        d.add(ctx, "disk_format", cmd.text, "mdadm writes RAID metadata onto devices.")


@handles("nvme")
def _h_nvme(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if args[:1] and args[0] in ("format", "sanitize", "write-zeroes", "delete-ns"):
        d.add(ctx, "disk_format", cmd.text, "Erases an NVMe namespace.")


@handles("hdparm", "sg_format", "badblocks")
def _h_hdparm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if (
        name == "sg_format"
        or (name == "badblocks" and any(a.startswith("-") and "w" in a for a in args))
        or any(a.startswith(("--security-erase", "--trim-sector", "--write-sector", "--make-bad-sector")) for a in args)
    ):
        d.add(ctx, "disk_format", cmd.text, f"{name} destroys data on a device.")


@handles(
    "fdisk",
    "gdisk",
    "cfdisk",
    "cgdisk",
    "sfdisk",
    "sgdisk",
    "parted",
    "gparted",
    "fixparts",
    "partx",
    "growpart",
    "kpartx",
)
def _h_partition(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, ops = split_options(
        args,
        {"-s", "--script", "-u", "--unit", "-o", "-b", "-t", "-n", "-c", "-L", "-d", "-B", "-D", "-N"}
        - ({"-s", "-d", "-D", "-N"} if name in ("sfdisk", "partx", "kpartx") else set()),
    )
    listing = {
        "fdisk": ("-l", "--list", "-x", "--list-details"),
        "gdisk": ("-l",),
        "cfdisk": (),
        "cgdisk": (),
        "sfdisk": (
            "-l",
            "--list",
            "-d",
            "--dump",
            "-s",
            "--show-size",
            "-V",
            "--verify",
            "-J",
            "--json",
            "-F",
            "--list-free",
            "-g",
            "--show-geometry",
            "-r",
            "--reorder",
        ),
        "sgdisk": (
            "-p",
            "--print",
            "-v",
            "--verify",
            "-i",
            "--info",
            "-b",
            "--backup",
            "-O",
            "--print-mbr",
            "-L",
            "--list-types",
        ),
        "parted": ("-l", "--list"),
        "partx": ("-s", "--show", "-l", "--list"),
        "growpart": ("-N", "--dry-run"),
        "kpartx": ("-l",),
        "gparted": (),
        "fixparts": (),
    }.get(name, ())
    if name in ("partx",) and "-a" not in opts and "-d" not in opts and "-u" not in opts:
        return
    if name == "kpartx":
        return
    if name == "sgdisk" and any(o in ("-Z", "--zap-all", "-o", "--clear", "-z", "--zap") for o in opts):
        d.add(ctx, "disk_format", cmd.text, "sgdisk wipes the partition table.")
        return
    if name == "sfdisk" and any(o in ("--delete", "--wipe", "-w") for o in opts):
        d.add(ctx, "disk_partition", cmd.text)
        return
    if any(o in listing or o.split("=")[0] in listing for o in opts):
        return
    if name == "parted":
        words = [w.lower() for w in ops[1:]]
        if words and all(
            w
            in (
                "print",
                "unit",
                "s",
                "b",
                "mb",
                "gb",
                "mib",
                "gib",
                "free",
                "list",
                "all",
                "help",
                "align-check",
                "opt",
                "min",
            )
            or w.isdigit()
            for w in words
        ):
            return
    if name == "sfdisk" and not ops:
        return
    d.add(ctx, "disk_partition", cmd.text, f"{name} edits a partition table.")


@handles(
    "zpool", "zfs", "lvremove", "vgremove", "pvremove", "pvcreate", "vgcreate", "btrfs", "vgreduce", "lvm", "stratis"
)
def _h_volume(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    sub = next((a for a in args if not a.startswith("-")), "")
    if name == "zpool" and sub in ("create", "destroy", "labelclear", "split"):
        d.add(ctx, "volume_destroy", cmd.text, f"zpool {sub} destroys or overwrites a storage pool.")
    elif name == "zfs" and sub in ("destroy", "rollback"):
        d.add(ctx, "volume_destroy", cmd.text, f"zfs {sub} discards datasets or snapshots.")
    elif name == "btrfs" and ("delete" in args and "subvolume" in args or "mkfs" in args):
        d.add(ctx, "volume_destroy", cmd.text)
    elif name == "stratis" and ("destroy" in args or "create" in args or "add-data" in args or "add-cache" in args):
        d.add(ctx, "volume_destroy", cmd.text, "stratis creates or destroys a storage pool or filesystem.")
    elif name == "lvm" and sub in ("lvremove", "vgremove", "pvremove", "pvcreate", "vgcreate"):
        d.add(ctx, "volume_destroy", cmd.text)
    elif name in ("lvremove", "vgremove", "pvremove", "pvcreate", "vgcreate", "lvreduce", "vgreduce"):
        d.add(ctx, "volume_destroy", cmd.text, f"{name} removes or overwrites LVM volumes.")


@handles(
    "ventoy",
    "Ventoy2Disk.sh",
    "woeusb",
    "bmaptool",
    "rpi-imager",
    "caligula",
    "etcher",
    "balena-etcher",
    "etcher-cli",
    "popsicle",
    "usbimager",
    "mkusb",
    "unetbootin",
    "dfu-util-image",
)
def _h_imagewriter(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name == "bmaptool" and args[:1] != ["copy"]:
        return
    if name == "rpi-imager" and "--cli" not in args:
        return
    if name in ("ventoy", "Ventoy2Disk.sh") and not any(a in ("-i", "-I", "-u") for a in args):
        return
    if name == "caligula" and "burn" not in args:
        return
    d.add(ctx, "disk_image_write", cmd.text, f"{name} writes an image onto a drive.")


@handles(
    "fastboot",
    "rkdeveloptool",
    "heimdall",
    "flashrom",
    "balena",
    "odin4",
    "upgrade_tool",
    "sunxi-fel",
    "mtd",
    "nandwrite",
    "flash_erase",
    "flashcp",
    "archinstall",
)
def _h_flasher(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Tools that overwrite a device's storage or firmware (not dev-board uploaders)."""
    ops = [a for a in args if not a.startswith("-")]
    hit = False
    if name == "fastboot":
        hit = (
            bool(ops[:1])
            and ops[0] in ("flash", "flashall", "erase", "format", "update", "oem", "flashing", "wipe")
            or "-w" in args
        )
    elif name == "rkdeveloptool":
        hit = bool(ops[:1]) and ops[0] in ("wl", "wlx", "ul", "db", "ef", "gpt", "prm", "wlba")
    elif name == "heimdall":
        hit = ops[:1] == ["flash"]
    elif name == "flashrom":
        hit = any(a in ("-w", "--write", "-E", "--erase") for a in args)
    elif name == "balena":
        hit = ops[:2] == ["local", "flash"] or ops[:2] == ["os", "initialize"]
    elif name == "archinstall":
        hit = True
    else:
        hit = any(w in ("write", "erase", "flash") for w in ops[:2]) or name in ("nandwrite", "flash_erase", "flashcp")
    if hit:
        d.add(
            ctx,
            "disk_image_write" if name != "archinstall" else "disk_partition",
            cmd.text,
            f"{name} overwrites a device's storage.",
        )


@handles("userdel", "deluser", "homectl", "dscl", "sysadminctl", "luser-del")
def _h_userdel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    hit = name == "userdel" and any(a in ("-r", "--remove") or re.fullmatch(r"-[a-zA-Z]*r[a-zA-Z]*", a) for a in args)
    hit = hit or (name == "deluser" and any(a in ("--remove-home", "--remove-all-files") for a in args))
    hit = hit or (name == "homectl" and any(a in ("remove", "rm") for a in args[:2]))
    hit = hit or (name == "dscl" and "-delete" in args and any(a.startswith("/Users/") for a in args))
    hit = hit or (name == "sysadminctl" and "-deleteUser" in args and "-keepHome" not in args)
    if hit:
        d.add(ctx, "user_home_delete", cmd.text)


@handles("lvresize", "lvreduce", "resize2fs")
def _h_shrink(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    size = option_value(args, ("-L", "--size", "-l", "--extents"))
    if name == "lvreduce" or (size or "").startswith("-"):
        d.add(ctx, "volume_destroy", cmd.text, f"{name} shrinks a volume; data beyond the new end is lost.")


@handles("diskutil")
def _h_diskutil(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    verb = next((a for a in args if not a.startswith("-")), "").lower()
    if verb in (
        "erasedisk",
        "erasevolume",
        "zerodisk",
        "randomdisk",
        "secureerase",
        "reformat",
        "partitiondisk",
        "splitpartition",
        "mergepartitions",
    ):
        d.add(ctx, "disk_format", cmd.text, f"diskutil {verb} erases or repartitions a disk.")
    elif verb in ("apfs", "cs", "appleraid", "ar") and any(
        a.lower() in ("deletecontainer", "deletevolume", "erasevolume", "delete", "deletevolumegroup") for a in args
    ):
        d.add(ctx, "volume_destroy", cmd.text)


@handles("awk", "gawk")
def _h_awk(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if any("/inet/tcp/" in a or "/inet/udp/" in a or "/inet4/" in a or "/inet6/" in a for a in args):
        d.add(ctx, "reverse_shell", cmd.text, "awk opens a network connection and runs what comes back.")
    program = next((a for a in args if not a.startswith("-")), "")
    m = re.search(r"\bsystem\s*\(\s*\"([^\"]*)\"", program)
    if m:
        d.payload(ctx, m.group(1), frozenset(), cmd.text)


@handles("alias")
def _h_alias(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    for a in args:
        if "=" in a and not a.startswith("-"):
            d.payload(ctx, a.split("=", 1)[1], frozenset(), cmd.text)


# -- power, processes, services


@handles("shutdown", "reboot", "halt", "poweroff", "kexec", "uadmin", "systemd-reboot")
def _h_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name == "shutdown" and any(a in ("-c", "--show") for a in args):
        return
    if name == "kexec" and not any(a in ("-e", "--exec", "-f", "--force") for a in args):
        return
    if name in ("halt", "reboot", "poweroff") and any(a in ("-w", "--wtmp-only") for a in args):
        return  # only writes the wtmp record
    d.add(ctx, "power", cmd.text, f"{name} takes the machine down.")


@handles("init", "telinit")
def _h_init(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if args and args[0] in ("0", "6", "1", "s", "S", "single", "halt", "reboot"):
        d.add(ctx, "power", cmd.text, f"{name} {args[0]} switches to a runlevel that halts, reboots or stops services.")


@handles("rtcwake")
def _h_rtcwake(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    mode = option_value(args, ("-m", "--mode"))
    if mode in ("off", "disk", "mem", "standby", "freeze"):
        d.add(ctx, "power", cmd.text, "rtcwake puts the machine to sleep or powers it off.")


@handles("ipmitool")
def _h_ipmitool(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if "power" in args and any(a in ("off", "reset", "cycle", "soft") for a in args):
        d.add(ctx, "power", cmd.text)


@handles("systemctl")
def _h_systemctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(
        args,
        {
            "-H",
            "--host",
            "-M",
            "--machine",
            "-t",
            "--type",
            "-s",
            "--signal",
            "-p",
            "--property",
            "--state",
            "-o",
            "--output",
            "-n",
            "--lines",
            "--kill-whom",
            "--root",
            "--when",
            "--boot-loader-entry",
            "--message",
        },
    )
    if not ops:
        return
    verb = ops[0]
    if verb in ("poweroff", "reboot", "halt", "kexec", "soft-reboot", "emergency", "rescue", "exit", "switch-root"):
        d.add(ctx, "power", cmd.text, f"systemctl {verb} takes the machine down.")
    elif verb == "default" or (
        verb in ("isolate", "start", "restart")
        and any(
            u in ("poweroff.target", "reboot.target", "halt.target", "kexec.target", "rescue.target") for u in ops[1:]
        )
    ):
        d.add(ctx, "power", cmd.text)
    elif (
        verb in ("stop", "disable", "mask", "kill", "isolate", "freeze")
        and len(ops) > 1
        or (verb == "disable" and "--now" in args)
    ):
        d.add(ctx, "service_stop", cmd.text, f"systemctl {verb} {' '.join(ops[1:3])} stops or disables a service.")


@handles(
    "service",
    "rc-service",
    "rc-update",
    "update-rc.d",
    "chkconfig",
    "sv",
    "s6-svc",
    "initctl",
    "rcctl",
    "svcadm",
    "dinitctl",
    "launchctl",
    "supervisorctl",
    "brew",
    "snap",
)
def _h_service(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    stop_words = {
        "stop",
        "disable",
        "mask",
        "kill",
        "down",
        "exit",
        "off",
        "del",
        "delete",
        "remove",
        "unload",
        "bootout",
        "force-stop",
        "force-shutdown",
        "shutdown",
        "graceful-stop",
    }
    if name == "brew":
        if ops[:1] == ["services"] and len(ops) > 1 and ops[1] in ("stop", "kill"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "snap":
        if ops[:1] and ops[0] in ("stop", "disable"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "s6-svc":
        if any(a in ("-d", "-k", "-x", "-D") for a in args):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "supervisorctl":
        if ops[:1] and ops[0] in ("stop", "shutdown", "remove"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name in ("service", "rc-service") and "--status-all" in args:
        return
    if any(w in stop_words for w in ops[:3]):
        d.add(ctx, "service_stop", cmd.text, f"{name} {' '.join(ops[:2])} stops or disables a service.")


@handles(
    "nginx",
    "apachectl",
    "apache2ctl",
    "httpd",
    "pg_ctl",
    "pg_ctlcluster",
    "rabbitmqctl",
    "mysqladmin",
    "mongod",
    "redis-server",
    "caddy",
    "traefik",
    "haproxy",
    "php-fpm",
    "pm2",
    "neo4j",
    "elasticsearch",
    "consul",
    "nomad",
    "vault",
    "kong",
    "openresty",
    "ejabberdctl",
    "couchbase-cli",
    "asadmin",
    "catalina.sh",
    "zkServer.sh",
    "kafka-server-stop.sh",
    "emqx",
    "riak",
    "cassandra",
    "nodetool",
    "mongosh-shutdown",
)
def _h_daemon_stop(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name in ("nginx", "openresty") and "-s" in args:
        sig = args[args.index("-s") + 1] if args.index("-s") + 1 < len(args) else ""
        if sig in ("stop", "quit"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "mysqladmin":
        if "shutdown" in args:
            d.add(ctx, "service_stop", cmd.text)
        elif "drop" in args:
            d.add(ctx, "db_drop", cmd.text)
        return
    if name == "mongod" and "--shutdown" in args:
        d.add(ctx, "service_stop", cmd.text)
        return
    if name == "pm2":
        if args[:1] and args[0] in ("kill", "stop", "delete"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "nodetool":
        if args and args[-1] in ("stopdaemon", "drain", "decommission"):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "rabbitmqctl":
        if any(a in ("stop", "stop_app", "shutdown", "reset", "force_reset") for a in args):
            d.add(ctx, "service_stop", cmd.text)
        return
    if name == "consul" and args[:1] == ["leave"] or name == "nomad" and args[:2] == ["node", "drain"]:
        d.add(ctx, "service_stop", cmd.text)
        return
    ops = [a for a in args if not a.startswith("-")]
    if (
        any(w in ("stop", "graceful-stop", "shutdown", "kill", "stop_app") for w in ops[:3])
        or any(a in ("-k",) for a in args)
        and "stop" in args
    ):
        d.add(ctx, "service_stop", cmd.text, f"{name} is told to stop.")


@handles("kill")
def _h_kill(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if any(a in ("-l", "-L", "--list", "--table") for a in args):
        return
    i = 0
    signal_given = False
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if a in ("-s", "-n", "--signal", "-q", "--queue", "--timeout"):
            i += 2 if a in ("-s", "-n", "--signal") else 3
            signal_given = True
            continue
        if a.startswith("-") and not signal_given and not (a == "-1" and i + 1 >= len(args)):
            signal_given = True
            i += 1
            continue
        break
    pids = args[i:]
    classes = [_pid_class(p, k) for p, k in zip(args[i:], kinds[i:] if len(kinds) >= len(args) else [frozenset()] * len(pids))]
    if "all" in classes or (not pids and args[-1:] and _pid_class(args[-1], frozenset()) == "all"):
        d.add(ctx, "kill_all", cmd.text)
    elif "init" in classes or "group0" in classes or any(k and "mass" in k for k in kinds):
        d.add(ctx, "kill_broad", cmd.text, "Signals init (pid 1) or the whole process group.")
    elif "unknown" in classes:
        d.add(ctx, "kill_broad", cmd.text, "Signals a process id the gate cannot know (it could be -1: every process).")
    elif "critical" in classes:
        d.add(ctx, "kill_broad", cmd.text, "Kills a daemon the machine depends on (sshd, dockerd, init...).")
    elif _fed_by_ps(cmd) or any(UNKNOWN in p and "pslist" in k for p, k in zip(args, kinds)):
        d.add(ctx, "kill_broad", cmd.text, "Kills every process listed by ps.")


_PID_NUMBER = re.compile(r"(-?)(?:0[xX]([0-9a-fA-F]+)|(\d+))")


def _pid_class(word: str, kind: Kinds) -> str:
    """A pid argument read as bash (and /bin/kill) would: ``-001``, ``-0x1`` and ``$((0-1))`` are -1.

    "all" (-1), "init" (1), "group0" (0, the caller's process group), "unknown" (an
    expansion the gate cannot evaluate that could be negative: ``-$x``, ``$((n))``),
    "critical" (the pid of a daemon the machine depends on) or "" (an ordinary pid or job).
    """
    if "critical" in kind:
        return "critical"
    if UNKNOWN in word:
        return "unknown" if word.startswith("-") or "arith" in kind else ""
    m = _PID_NUMBER.fullmatch(word)
    if not m:
        return ""
    value = int(m.group(2), 16) if m.group(2) else int(m.group(3))
    value = -value if m.group(1) else value
    return {-1: "all", 1: "init", 0: "group0"}.get(value, "")


def _fed_by_ps(cmd: Cmd) -> bool:
    names = [base_name(unwrap(m.argv)[0][0]) for g in cmd.upstream for m in g if unwrap(m.argv)[0]]
    return "ps" in names and not any(
        n in ("grep", "egrep", "fgrep", "rg", "pgrep", "head", "tail", "sed") for n in names
    )


_CRITICAL_PROC = re.compile(
    r"(?:^|[\^/ ])(?:sshd|dockerd|containerd|systemd|init|kubelet|journald|systemd-journald|dbus-daemon|udevd|"
    r"systemd-logind|NetworkManager|networkd|systemd-networkd|cron|crond|rsyslogd|auditd|polkitd|executord)"
    r"(?:\$|\b|$)"
)


@handles("killall5")
def _h_killall5(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    d.add(ctx, "kill_all", cmd.text)


@handles("pkill", "killall", "slay", "skill", "pkill.sh")
def _h_pkill(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    with_arg = {
        "-u",
        "-U",
        "-g",
        "-G",
        "-P",
        "-s",
        "-t",
        "-F",
        "--signal",
        "--euid",
        "--uid",
        "--pgroup",
        "--group",
        "--parent",
        "--session",
        "--terminal",
        "--pidfile",
        "--older",
        "--newer",
        "-o",
        "-y",
        "-n",
        "--ns",
        "--nslist",
        "-e",
        "--exact",
        "-c",
        "--context",
        "-q",
        "--queue",
    }
    if name == "killall":
        with_arg = {
            "-u",
            "--user",
            "-s",
            "--signal",
            "-o",
            "--older-than",
            "-y",
            "--younger-than",
            "-Z",
            "--context",
            "-n",
            "--ns",
        }
    opts, ops = split_options(args, with_arg)
    selectors = any(
        o
        in (
            "-u",
            "-U",
            "-g",
            "-G",
            "-P",
            "-s",
            "-t",
            "--euid",
            "--uid",
            "--user",
            "--pgroup",
            "--group",
            "--session",
            "--terminal",
            "--parent",
        )
        or o.startswith(("--user=", "--uid=", "--euid="))
        for o in opts
    )
    catch_all = any(re.fullmatch(r"\.\*?|\.\+|\^|\$|\^\.\*\$?|\*|\[\^\]\]\*|.?\*", p) or p == "" for p in ops)
    if (selectors and not ops) or catch_all or (name == "killall" and "-r" in opts and catch_all):
        d.add(ctx, "kill_broad", cmd.text)
    elif any(_CRITICAL_PROC.search(p) for p in ops) and not any(o in ("-0", "--signal=0") for o in opts):
        d.add(ctx, "kill_broad", cmd.text, f"{name} kills a daemon the machine depends on (sshd, dockerd, init...).")


@handles("loginctl")
def _h_loginctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("terminate-user", "kill-user", "terminate-session", "kill-session", "terminate-seat"):
        d.add(ctx, "kill_broad", cmd.text, f"loginctl {verb} kills every process of a user or session.")
    elif verb in ("poweroff", "reboot", "halt"):
        d.add(ctx, "power", cmd.text)


# -- system writes that are tools


@handles(
    "genkernel",
    "eclean-kernel",
    "mkinitfs",
    "grub-bios-setup",
    "grub2-bios-setup",
    "kernelstub",
    "bootupctl",
    "grub-install",
    "grub2-install",
    "update-grub",
    "update-grub2",
    "mkinitcpio",
    "update-initramfs",
    "dracut",
    "mkinitramfs",
    "kernel-install",
    "refind-install",
    "installkernel",
    "grub-reboot",
    "grub-set-default",
    "grub2-set-default",
    "limine-deploy",
    "syslinux",
    "extlinux",
    "bootctl",
    "efibootmgr",
    "grub-mkconfig",
    "grub2-mkconfig",
    "sbctl",
    "update-bootloader",
    "mkosi-kernel-install",
)
def _h_boot(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name in ("grub-mkconfig", "grub2-mkconfig"):
        if not any(a in ("-o", "--output") or a.startswith("--output=") for a in args):
            return
    elif name == "bootctl":
        if not any(
            a in ("install", "update", "remove", "set-default", "set-oneshot", "random-seed", "unlink", "cleanup")
            for a in args
        ):
            return
    elif name == "efibootmgr":
        if not any(
            a
            in (
                "-c",
                "--create",
                "-B",
                "--delete-bootnum",
                "-o",
                "--bootorder",
                "-n",
                "--bootnext",
                "-a",
                "--active",
                "-A",
                "--inactive",
                "-C",
                "--create-only",
                "-O",
                "--delete-bootorder",
                "-N",
                "--delete-bootnext",
                "-t",
                "--timeout",
            )
            for a in args
        ):
            return
    elif name == "sbctl":
        if not any(a in ("sign", "sign-all", "enroll-keys", "reset", "remove-file") for a in args):
            return
    elif name == "dracut" and any(a in ("--list-modules", "-h") for a in args):
        return
    elif (
        name in ("mkinitcpio", "mkinitfs")
        and any(a in ("-L", "-l", "--listhooks", "-H", "--hookhelp", "-M", "--automods") for a in args)
        or name == "mkinitcpio"
        and not args
    ):
        return
    elif name == "update-initramfs" and not any(a in ("-u", "-c", "-d", "-k") for a in args):
        return
    elif name == "kernel-install" and not any(a in ("add", "remove", "add-all") for a in args):
        return
    elif name == "genkernel" and not any(a in ("all", "bzImage", "kernel", "initramfs", "--install") for a in args):
        return
    elif name == "eclean-kernel" and any(a in ("-l", "--list-kernels", "-p", "--pretend") for a in args):
        return
    d.add(ctx, "boot_write", cmd.text, f"{name} rewrites the boot loader or initramfs.")


@handles(
    "rpm-ostree",
    "ostree",
    "limine-snapper-restore",
    "timeshift",
    "steamos-factory-reset",
    "steamos-factory-reset-config",
    "snapper",
    "restic",
    "borg",
    "systemrescue",
    "factory-reset",
    "recovery",
    "nixos-rebuild",
    "dism",
)
def _h_restore(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if (
        name == "timeshift"
        and "--restore" in args
        or name.startswith(("steamos-factory-reset", "factory-reset"))
        or (name in ("snapper", "rpm-ostree", "ostree") and "rollback" in args)
        or ("snapper" in name and "restore" in name)
    ):
        d.add(ctx, "system_restore", cmd.text)
    elif name == "restic" and "restore" in args:
        target = option_value(args, ("--target", "-t"))
        if target and delete_class(target, cmd.cwd) in ("root", "sysdir"):
            d.add(ctx, "system_restore", cmd.text)
    elif name == "borg" and "extract" in args and cmd.cwd == "/":
        d.add(ctx, "system_restore", cmd.text)


@handles("crontab", "scrontab", "fcrontab")
def _h_crontab(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    opts, _ = split_options(args, {"-u"})
    if "r" in short_flags(opts) or "--remove" in opts:
        d.add(ctx, "crontab_remove", cmd.text)


@handles(
    "iptables",
    "ip6tables",
    "iptables-legacy",
    "ip6tables-legacy",
    "iptables-nft",
    "ip6tables-nft",
    "ebtables",
    "arptables",
    "nft",
    "ufw",
    "firewall-cmd",
    "pfctl",
    "netsh",
    "csf",
    "shorewall",
    "ipfw",
    "iptables-restore",
    "setenforce",
)
def _h_firewall(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    flush = False
    if name.startswith(("iptables", "ip6tables", "ebtables", "arptables")) and not name.endswith("restore"):
        flush = any(
            a in ("-F", "--flush", "-X", "--delete-chain")
            or re.fullmatch(r"-[A-Za-z]*F[A-Za-z]*", a)
            and "-" + "F" in ("-" + a[1:2])
            for a in args
        )
        if "-P" in args or "--policy" in args:
            i = args.index("-P") if "-P" in args else args.index("--policy")
            flush = flush or (args[i + 2 : i + 3] == ["ACCEPT"] and args[i + 1 : i + 2] == ["INPUT"])
    elif name == "nft":
        flush = (
            ("flush" in args and "ruleset" in args)
            or ("flush" in args and "table" in args)
            or ("delete" in args and "table" in args)
        )
    elif name == "ufw":
        flush = any(a in ("disable", "reset") for a in args)
    elif name == "firewall-cmd":
        flush = "--panic-on" in args
    elif name == "pfctl":
        flush = "-d" in args or ("-F" in args and any(a in ("all", "rules") for a in args))
    elif name == "netsh":
        flush = "advfirewall" in args and "off" in [a.lower() for a in args]
    elif name == "csf":
        flush = any(a in ("-x", "--disable", "-f", "--stop") for a in args)
    elif name == "shorewall":
        flush = any(a in ("clear", "stop") for a in args)
    elif name == "ipfw":
        flush = "flush" in args
    if flush:
        d.add(ctx, "firewall_flush", cmd.text, f"{name} flushes or disables the firewall.")


# -- git and forges


_GIT_GLOBAL_WITH_ARG = {
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--exec-path",
    "--super-prefix",
    "--config-env",
}


def git_subcommand(args: list[str]) -> tuple[str, list[str]] | None:
    """git's subcommand and its arguments, past the global options (``-C dir``, ``-c k=v`` ...)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_GLOBAL_WITH_ARG else 1
    return (args[i], args[i + 1 :]) if i < len(args) else None


@handles("git")
def _h_git(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    found = git_subcommand(args)
    if found is None:
        return
    sub, rest = found
    if sub == "push":
        opts, ops = split_options(rest, {"-o", "--push-option", "--repo", "--receive-pack", "--exec"})
        force = any(
            o in ("-f", "--force", "--mirror", "--force-if-includes")
            or o.startswith("--force-with-lease")
            or (o.startswith("-") and not o.startswith("--") and "f" in o[1:])
            for o in opts
        )
        force = force or any(op.startswith("+") for op in ops[1:])
        if force:
            d.add(ctx, "git_force_push", cmd.text)
    elif sub == "reset":
        if "--hard" in rest:
            d.add(ctx, "git_reset_hard", cmd.text)
    elif sub == "clean":
        opts, _ = split_options(rest, {"-e", "--exclude"})
        flags = short_flags(opts)
        if ("f" in flags or "--force" in opts) and not ("n" in flags or "--dry-run" in opts):
            d.add(ctx, "git_clean_force", cmd.text)
    elif sub in ("sync", "clear", "clear-soft", "force-clone", "obliterate", "nuke", "reset-hard"):
        d.add(ctx, "git_history_destroy", cmd.text, f"git {sub} (git-extras) discards local work or history.")


@handles("gh", "hub", "glab", "tea", "bb")
def _h_forge(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    if (
        name == "hub"
        and ops[:1] == ["delete"]
        or ops[:2] in (["repo", "delete"], ["repos", "delete"], ["project", "delete"])
    ):
        d.add(ctx, "repo_delete", cmd.text)


# -- containers, clusters, clouds


@handles("docker", "podman", "nerdctl", "docker-compose", "podman-compose", "finch", "lima-nerdctl", "crictl", "ctr")
def _h_docker(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(
        args,
        {
            "-H",
            "--host",
            "--context",
            "-c",
            "--config",
            "-f",
            "--file",
            "-p",
            "--project-name",
            "--env-file",
            "--profile",
            "--log-level",
            "-l",
            "--project-directory",
            "--namespace",
            "-n",
            "--address",
            "-a",
        },
    )
    words = ops
    if words[:1] == ["compose"]:
        words = words[1:]
        name = "docker-compose"
    if name in ("docker-compose", "podman-compose"):
        if words[:1] == ["down"] and any(a in ("-v", "--volumes", "--rmi") for a in args):
            d.add(ctx, "container_mass_delete", cmd.text, "compose down -v deletes the project's volumes.")
        return
    if name == "crictl":
        if words[:1] and words[0] in ("rm", "rmi", "rmp") and any(a in ("-a", "--all", "--prune") for a in args):
            d.add(ctx, "container_mass_delete", cmd.text)
        return
    if (
        len(words) >= 2
        and words[1] == "prune"
        and words[0] in ("system", "container", "volume", "image", "network", "builder", "buildx")
    ):
        if words[0] in ("system", "container", "volume") or (
            words[0] == "image" and any(a in ("-a", "--all") for a in args)
        ):
            d.add(ctx, "container_mass_delete", cmd.text, f"{name} {words[0]} prune deletes {words[0]}s in bulk.")
        return
    if (
        words[:2] == ["system", "reset"]
        or words[:1] == ["rm"]
        and "--all" in args
        or words[:2] in (["volume", "rm"], ["container", "rm"])
        and "--all" in args
    ):
        d.add(ctx, "container_mass_delete", cmd.text)
        return
    if (
        words[:1]
        and words[0] in ("rm", "rmi", "kill", "stop")
        or words[:2]
        in (
            ["volume", "rm"],
            ["container", "rm"],
            ["image", "rm"],
            ["container", "kill"],
            ["container", "stop"],
            ["network", "rm"],
        )
    ):
        if any("mass" in k for k in kinds) or _fed_by_listing(cmd):
            d.add(ctx, "container_mass_delete", cmd.text, "Deletes every container, image or volume listed.")


def _fed_by_listing(cmd: Cmd) -> bool:
    for g in cmd.upstream[-1:]:
        for m in g:
            a = unwrap(m.argv)[0]
            if (
                a
                and base_name(a[0]) in ("docker", "podman", "nerdctl")
                and any(x in ("-q", "--quiet", "-aq", "-qa") for x in a)
                and not any(x.startswith(("--filter", "-f")) for x in a)
            ):
                return True
    return False


@handles("kubectl", "oc", "k", "microk8s.kubectl", "kubecolor")
def _h_kubectl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(
        args,
        {
            "-n",
            "--namespace",
            "--context",
            "--cluster",
            "--kubeconfig",
            "-l",
            "--selector",
            "-f",
            "--filename",
            "-o",
            "--output",
            "--user",
            "-s",
            "--server",
            "--field-selector",
            "--grace-period",
            "--timeout",
            "-c",
            "--container",
            "--cascade",
            "--token",
        },
    )
    if not ops or ops[0] != "delete":
        return
    res = ops[1] if len(ops) > 1 else ""
    everything = any(a in ("--all", "-A", "--all-namespaces") for a in args) or "all" in ops[1:2]
    if everything or res.split("/")[0] in (
        "namespace",
        "namespaces",
        "ns",
        "node",
        "nodes",
        "no",
        "pv",
        "persistentvolume",
        "persistentvolumes",
        "crd",
        "crds",
        "customresourcedefinition",
        "customresourcedefinitions",
        "clusterrole",
        "clusterroles",
    ):
        d.add(ctx, "cluster_delete", cmd.text, f"kubectl delete {res} removes a namespace or every resource of a kind.")


@handles(
    "kind",
    "k3d",
    "eksctl",
    "kops",
    "minikube",
    "kubeadm",
    "microk8s",
    "talosctl",
    "k0s",
    "k3s-uninstall.sh",
    "rke",
    "rke2-uninstall.sh",
    "ctlptl",
    "vcluster",
    "clusterctl",
    "helm",
    "k9s",
    "argocd",
    "kubefed",
)
def _h_cluster(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    hit = False
    if name in ("kind", "k3d", "eksctl", "kops", "ctlptl", "vcluster", "clusterctl"):
        hit = (
            "delete" in ops[:2]
            and (any(w in ("cluster", "clusters") for w in ops[:3]) or name in ("vcluster", "ctlptl", "clusterctl"))
            or (name == "clusterctl" and "delete" in ops)
        )
    elif name == "minikube":
        hit = ops[:1] == ["delete"]
    elif name in ("kubeadm", "microk8s", "talosctl", "k0s"):
        hit = ops[:1] == ["reset"]
    elif name in ("k3s-uninstall.sh", "rke2-uninstall.sh"):
        hit = True
    elif name == "helm":
        hit = ops[:1] in (["uninstall"], ["delete"]) and any(a in ("--all",) for a in args)
    elif name == "argocd":
        hit = ops[:2] in (["app", "delete"], ["cluster", "rm"]) and "--all" in args
    if hit:
        d.add(ctx, "cluster_delete", cmd.text, f"{name} {' '.join(ops[:2])} deletes a cluster.")


@handles(
    "terraform",
    "tofu",
    "opentofu",
    "terragrunt",
    "pulumi",
    "cdk",
    "cdktf",
    "serverless",
    "sls",
    "sam",
    "azd",
    "copilot",
    "juju",
    "sst",
    "amplify",
    "cdk8s",
    "tf",
    "terramate",
    "atmos",
    "ansible-playbook-destroy",
)
def _h_iac(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    hit = "destroy" in ops[:3] or (
        name in ("terraform", "tofu", "opentofu", "terragrunt", "tf") and "apply" in ops[:2] and "-destroy" in args
    )
    hit = (
        hit
        or (name == "pulumi" and (ops[:1] == ["down"] or ops[:2] == ["stack", "rm"]))
        or (name in ("serverless", "sls") and ops[:1] == ["remove"])
    )
    hit = (
        hit
        or (name in ("sam", "copilot", "amplify") and "delete" in ops[:3])
        or (name == "azd" and ops[:1] == ["down"])
    )
    hit = (
        hit
        or (
            name == "juju"
            and any(
                w.startswith(("destroy-", "kill-controller", "remove-"))
                and w in ("destroy-model", "destroy-controller", "kill-controller")
                for w in ops[:1]
            )
        )
        or (name == "sst" and ops[:1] == ["remove"])
    )
    if hit:
        d.add(ctx, "infra_destroy", cmd.text, f"{name} destroys every resource of the stack.")


_CLOUD_VERB = re.compile(
    r"^(?:delete|destroy|terminate|purge|rb|remove|delete-\S+|terminate-\S+|destroy-\S+|remove-\S+|apps:destroy|pg:reset|[a-z-]+:destroy|[a-z-]+:delete|deprovision)$"
)


@handles(
    "aws",
    "gcloud",
    "az",
    "gsutil",
    "doctl",
    "hcloud",
    "linode-cli",
    "vultr-cli",
    "scw",
    "oci",
    "ibmcloud",
    "heroku",
    "fly",
    "flyctl",
    "openstack",
    "exo",
    "upcloud",
    "civo",
    "vercel",
    "netlify",
    "railway",
    "render",
    "aliyun",
    "tccli",
    "yc",
    "s3cmd",
    "rclone",
    "gcs",
    "mc",
    "b2",
    "azcopy",
    "supabase",
    "neonctl",
    "planetscale",
    "pscale",
    "turso",
    "wrangler",
    "firebase",
    "qm",
    "pct",
    "virsh",
    "VBoxManage",
    "vboxmanage",
    "multipass",
    "prlctl",
    "lxc",
    "incus",
    "vagrant",
    "utmctl",
    "xl",
)
def _h_cloud(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    rec = any(a in ("--recursive", "-r", "-R", "--force", "-rf") for a in args)
    if name in ("qm", "pct"):
        if ops[:1] and len(ops[0]) >= 3 and "destroy".startswith(ops[0]):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "virsh":
        if (
            ops[:1] == ["undefine"]
            and any(a.startswith(("--remove-all-storage", "--storage", "--wipe-storage")) for a in args)
            or ops[:1] in (["pool-delete"], ["vol-wipe"], ["pool-undefine"])
        ):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name.lower() == "vboxmanage":
        if ops[:1] == ["unregistervm"] and any(a.startswith("--delete") for a in args):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "multipass":
        if ops[:1] == ["delete"] and any(a in ("--purge", "-p", "--all") for a in args) or ops[:1] == ["purge"]:
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "vagrant":
        if ops[:1] == ["destroy"]:
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name in ("prlctl", "utmctl", "xl", "lxc", "incus"):
        return
    if name == "aws":
        if ops[:2] == ["s3", "rb"] or (ops[:2] == ["s3", "rm"] and rec):
            d.add(ctx, "cloud_delete", cmd.text, "Deletes an S3 bucket or every object under a prefix.")
        elif len(ops) >= 2 and _CLOUD_VERB.match(ops[1]) and ops[0] != "s3":
            d.add(ctx, "cloud_delete", cmd.text, f"aws {ops[0]} {ops[1]} deletes cloud resources.")
        return
    if name == "rclone" and any(a in ("-n", "--dry-run", "-i", "--interactive") for a in args):
        return
    if name in ("gsutil", "s3cmd", "gcs", "mc", "b2", "azcopy", "rclone"):
        if (
            any(w in ("rb", "purge", "rmdir") for w in ops[:2])
            or (any(w in ("rm", "del", "remove", "delete") for w in ops[:2]) and rec)
            or (name == "rclone" and ops[:1] in (["purge"], ["delete"], ["deletefile"]) and ops[:1] != ["deletefile"])
        ):
            d.add(ctx, "cloud_delete", cmd.text, f"{name} deletes a bucket or everything under a prefix.")
        return
    if any(_CLOUD_VERB.match(w) for w in ops[:5]) or (
        rec and any(w in ("rm", "rb") for w in ops[:3]) and name in ("gcloud", "az", "bq", "oci", "ibmcloud", "scw")
    ):
        d.add(ctx, "cloud_delete", cmd.text, f"{name} {' '.join(ops[:4])} deletes cloud resources.")


# -- data stores


_SQL_CLIENTS = {
    "psql": ({"-c", "--command"}, {"-f", "--file"}),
    "mysql": ({"-e", "--execute"}, set()),
    "mariadb": ({"-e", "--execute"}, set()),
    "sqlite3": (set(), set()),
    "sqlite": (set(), set()),
    "duckdb": ({"-c", "-s"}, set()),
    "clickhouse-client": ({"-q", "--query"}, set()),
    "clickhouse": ({"-q", "--query"}, set()),
    "clickhouse-local": ({"-q", "--query"}, set()),
    "cqlsh": ({"-e", "--execute"}, set()),
    "sqlcmd": ({"-Q", "-q", "--query"}, set()),
    "usql": ({"-c", "--command"}, set()),
    "mycli": ({"-e", "--execute"}, set()),
    "pgcli": ({"-c"}, set()),
    "litecli": ({"-e"}, set()),
    "cockroach": ({"-e", "--execute"}, set()),
    "snowsql": ({"-q", "--query"}, set()),
    "spark-sql": ({"-e"}, set()),
    "hive": ({"-e"}, set()),
    "beeline": ({"-e"}, set()),
    "trino": ({"--execute"}, set()),
    "presto": ({"--execute"}, set()),
    "odpscmd": ({"-e"}, set()),
    "vsql": ({"-c", "--command"}, set()),
    "db2": (set(), set()),
    "sqlplus": (set(), set()),
    "isql": (set(), set()),
    "influx": ({"-execute", "--execute"}, set()),
    "bq": (set(), set()),
    "mysqlsh": ({"-e", "--execute", "--sql"}, set()),
    "tsql": (set(), set()),
    "osqueryi": (set(), set()),
    "ysqlsh": ({"-c", "--command"}, set()),
    "gsql": ({"-c"}, set()),
    "psql-wrapper": ({"-c"}, set()),
    "sqlite-utils": (set(), set()),
    "csvsql": ({"--query"}, set()),
    "dolt": ({"-q", "--query"}, set()),
    "surreal": (set(), set()),
    "edgedb": (set(), set()),
    "turso": (set(), set()),
}


@handles(*_SQL_CLIENTS)
def _h_sql(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    code_flags, _ = _SQL_CLIENTS[name]
    if (
        name == "bq"
        and args[:1] in (["rm"], ["remove"])
        and any(a in ("-r", "-d", "--dataset", "--recursive", "-t", "--table") for a in args)
    ):
        d.add(ctx, "cloud_delete", cmd.text, "bq rm deletes a BigQuery dataset or table.")
    texts: list[str] = []
    for i, a in enumerate(args):
        if a in code_flags and i + 1 < len(args):
            texts.append(args[i + 1])
        elif "=" in a and a.split("=", 1)[0] in code_flags:
            texts.append(a.split("=", 1)[1])
        elif re.match(r"^-[ce].+", a) and a[:2] in code_flags:
            texts.append(a[2:])
    if name in ("sqlite3", "sqlite", "duckdb", "bq", "db2", "sqlite-utils", "turso", "dolt", "mysqlsh", "influx"):
        texts.extend(a for a in args if not a.startswith("-") and " " in a)
    texts.extend(_stdin_texts(cmd))
    for t in texts:
        for f in inline.sql_findings(t):
            d.add(ctx, f.rule, cmd.text, f"Destructive SQL that drops or wipes data: {f.detail[:80]}")


@handles("dropdb", "dropuser", "mongo-drop", "dropdb.exe", "pg_resetwal", "pg_resetxlog")
def _h_dropdb(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name.startswith("pg_reset") and "-n" in args:
        return
    d.add(ctx, "db_drop", cmd.text, f"{name} drops a database.")


@handles("redis-cli", "valkey-cli", "keydb-cli", "memtier", "dragonfly-cli")
def _h_redis(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    _, ops = split_options(
        args,
        {
            "-h",
            "-p",
            "-a",
            "-n",
            "-u",
            "-s",
            "-r",
            "-i",
            "-d",
            "--user",
            "--pass",
            "--askpass",
            "--tls",
            "--cacert",
            "--cert",
            "--key",
            "--sni",
            "-e",
            "--pattern",
            "--count",
            "--quoted-pattern",
            "--rdb",
            "--functions-rdb",
            "--eval",
            "--memkeys-samples",
            "-D",
            "--lru-test",
            "--intrinsic-latency",
            "--pipe-timeout",
        },
    )
    words = [o.lower() for o in ops[:2]]
    if words[:1] and words[0] in ("flushall", "flushdb"):
        d.add(ctx, "redis_flush", cmd.text)
    elif words[:1] == ["shutdown"]:
        d.add(ctx, "service_stop", cmd.text)
    for t in _stdin_texts(cmd):
        if re.search(r"(?im)^\s*(flushall|flushdb)\b", t):
            d.add(ctx, "redis_flush", cmd.text)


@handles("mongo", "mongosh", "mongodb")
def _h_mongo(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    texts = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--eval"] + _stdin_texts(cmd)
    for t in texts:
        for f in inline.mongo_findings(t):
            d.add(ctx, f.rule, cmd.text)


@handles(
    "rails",
    "rake",
    "bin/rails",
    "artisan",
    "console.php",
    "manage.py",
    "django-admin",
    "prisma",
    "sequelize",
    "mix",
    "wp",
    "knex",
    "typeorm",
    "drizzle-kit",
    "alembic",
    "flask",
    "symfony",
    "console",
)
def _h_framework_db(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    ops = [a for a in args if not a.startswith("-")]
    joined = " ".join(ops[:3])
    if re.search(
        r"\bdb:(drop|reset|purge|schema:load|migrate:reset|wipe)\b|\bmigrate:(fresh|reset)\b|\bdb:wipe\b|\bdb:migrate:undo:all\b|\becto\.(drop|reset)\b|\bdoctrine:(database|schema):drop\b",
        joined,
    ):
        d.add(ctx, "db_drop", cmd.text)
    elif (
        name in ("manage.py", "django-admin")
        and ops[:1] in (["flush"], ["reset_db"], ["sqlflush"])
        and ops[0] != "sqlflush"
    ):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "prisma" and (ops[:2] == ["migrate", "reset"] or "--force-reset" in args):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "wp" and ops[:2] in (["db", "reset"], ["db", "drop"], ["db", "clean"], ["site", "empty"]):
        d.add(ctx, "db_drop", cmd.text)
    elif name == "typeorm" and ops[:1] == ["schema:drop"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "drizzle-kit" and ops[:1] == ["drop"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "alembic" and ops[:2] == ["downgrade", "base"]:
        d.add(ctx, "db_drop", cmd.text)
    elif name == "knex" and ops[:1] == ["migrate:rollback"] and "--all" in args:
        d.add(ctx, "db_drop", cmd.text)


@handles(
    "gitlab-backup",
    "gitlab-rake",
    "neo4j-admin",
    "pg_restore",
    "mongorestore",
    "influxd",
    "etcdctl",
    "arangorestore",
    "cbrestore",
    "mysqlpump",
    "dgraph",
    "rethinkdb",
)
def _h_data_restore(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    hit = (name == "gitlab-backup" and "restore" in args) or (
        name == "gitlab-rake" and any("backup:restore" in a for a in args)
    )
    hit = hit or (
        name == "neo4j-admin"
        and any(a.startswith("--overwrite-destination") and not a.endswith("=false") or a == "--force" for a in args)
    )
    hit = hit or (
        name == "etcdctl"
        and "del" in args
        and any(a in ("--prefix", "--from-key") for a in args)
        and any(a in ('""', "", "/", "\x00") for a in args)
    )
    hit = hit or (name == "arangorestore" and "--overwrite" in args and "true" in args)
    if hit:
        d.add(ctx, "data_restore_overwrite", cmd.text)


# -- shells, eval, interpreters, remote code


def _stdin_texts(cmd: Cmd) -> list[str]:
    """Literal text fed to ``cmd`` on stdin: heredoc, here-string, or a plain echo/printf upstream."""
    out: list[str] = []
    if cmd.stdin_text is not None:
        out.append(cmd.stdin_text)
    if cmd.upstream:
        near = cmd.upstream[-1]
        if len(near) == 1:
            src = near[0]
            text = echo_output(unwrap(src.argv)[0]) if src.argv else None
            if (
                text is None
                and src.stdin_text is not None
                and src.argv
                and base_name(src.argv[0]) == "cat"
                and len(src.argv) == 1
            ):
                text = src.stdin_text
            if text is not None:
                out.append(text)
    return out


def _stdin_kinds(cmd: Cmd) -> set[str]:
    kinds: set[str] = set(cmd.stdin_kinds)
    for group in cmd.upstream:
        for m in group:
            kinds |= classify(m)
    # literal text pushed through a transforming filter is hidden code
    if len(cmd.upstream) >= 2 and "decode" not in kinds:
        first = cmd.upstream[0]
        if (
            len(first) == 1
            and first[0].argv
            and base_name(first[0].argv[0]) in ("echo", "printf")
            and any(
                m.argv and base_name(m.argv[0]) in ("tr", "rev", "sed", "awk", "xxd", "od", "perl", "python3", "python")
                for g in cmd.upstream[1:]
                for m in g
            )
        ):
            kinds.add("decode")
    return kinds


def _reads_stdin_from_net(cmd: Cmd) -> bool:
    return any(op == "<" and t.startswith(("/dev/tcp/", "/dev/udp/")) for op, t in cmd.redirects)


@handles(*SHELLS)
def _h_shell(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    interactive = False
    read_stdin = False
    i = 0
    c_flag = False
    while i < len(args):
        a = args[i]
        if a == "--" or a == "-":
            i += 1
            read_stdin = read_stdin or a == "-"
            break
        if a in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file", "-C" if name == "fish" else "\x01"):
            i += 2
            continue
        if a.startswith("--"):
            if a in ("--command",):
                c_flag = True
            i += 1
            continue
        if a.startswith(("-", "+")) and len(a) > 1:
            letters = a[1:]
            c_flag = c_flag or "c" in letters
            interactive = interactive or "i" in letters
            read_stdin = read_stdin or "s" in letters
            i += 1
            continue
        break
    operands = args[i:]
    op_kinds = kinds[i:] if len(kinds) >= len(args) else [frozenset()] * len(operands)
    if c_flag and operands:
        env = {str(n): v for n, v in enumerate(operands[1:])}
        d.payload(ctx, operands[0], op_kinds[0] if op_kinds else frozenset(), cmd.text, env)
        return
    if operands and not read_stdin:
        _judge_script_file(d, operands[0], op_kinds[0] if op_kinds else frozenset(), cmd, ctx)
        return
    # the shell reads its program from stdin
    if (
        _reads_stdin_from_net(cmd)
        or interactive
        and any(t.startswith(("/dev/tcp/", "/dev/udp/")) for _, t in cmd.redirects)
    ):
        d.add(ctx, "reverse_shell", cmd.text)
        return
    sk = _stdin_kinds(cmd)
    if "download" in sk:
        d.add(ctx, "pipe_to_shell", cmd.segment)
    elif "decode" in sk:
        d.add(ctx, "decode_to_shell", cmd.segment)
    for text in _stdin_texts(cmd):
        d.payload(ctx, text, frozenset(), cmd.segment)


def _judge_script_file(d: Detector, path: str, kinds: Kinds, cmd: Cmd, ctx: Ctx) -> None:
    if "download" in kinds:
        d.add(ctx, "pipe_to_shell", cmd.text)
    elif "decode" in kinds:
        d.add(ctx, "decode_to_shell", cmd.text)
    elif base_name(path) in ctx.downloaded or path in ctx.downloaded:
        d.add(ctx, "download_then_run", cmd.text)
    elif base_name(path) in ctx.written:
        d.payload(ctx, ctx.written[base_name(path)], frozenset(), cmd.text)


@handles("eval", "trap")
def _h_eval(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if name == "trap":
        if not args or args[0].startswith("-"):
            return
        code, k = args[0], kinds[0] if kinds else frozenset()
    else:
        code = " ".join(args)
        k = frozenset().union(*kinds) if kinds else frozenset()
    d.payload(ctx, code, k - {"procsub"}, cmd.text)


@handles("source", ".")
def _h_source(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if args and args[0] in ("/dev/stdin", "-", "/proc/self/fd/0", "/dev/fd/0"):
        _h_shell(d, "sh", ["-s"], [], cmd, ctx)
    elif args:
        _judge_script_file(d, args[0], kinds[0] if kinds else frozenset(), cmd, ctx)


@handles("xargs")
def _h_xargs(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    i = command_start(
        args,
        {"-d", "-E", "-I", "-L", "-n", "-P", "-s", "-a", "-e"},
        {
            "--delimiter",
            "--eof",
            "--replace",
            "--max-lines",
            "--max-args",
            "--max-procs",
            "--max-chars",
            "--arg-file",
            "--process-slot-var",
        },
    )
    sub = args[i:] or ["echo"]
    replace = option_value(args[:i], ("-I", "--replace"))
    item = UNKNOWN
    if cmd.stdin_text and cmd.stdin_text.split():
        item = cmd.stdin_text.split()[0]
    for g in cmd.upstream[-1:]:
        for m in g:
            a = unwrap(m.argv)[0]
            literal = echo_output(a) if a else None
            if literal is not None and literal.split():
                item = literal.split()[0]
            if a and base_name(a[0]) == "find":
                paths = [x for x in a[1:] if not x.startswith(("-", "(", "!"))][:1] or ["."]
                filtered = any(x in FIND_FILTERS for x in a)
                item = paths[0] if not filtered else posixpath.join(paths[0], "x" + UNKNOWN)
    if item == UNKNOWN:  # the paths come from input the gate cannot read (a file, another program)
        inner = unwrap(sub)[0]
        if inner and base_name(inner[0]) in RM_NAMES and _rm_recursive(base_name(inner[0]), split_options(inner[1:])[0]):
            d.add(ctx, "rm_unresolved_path", cmd.text,
                  "Recursively deletes whatever paths its input lists; the gate cannot see them.")
    argv = [s.replace(replace, item) for s in sub] if replace else sub + [item]
    mass = frozenset({"mass"}) if _fed_by_listing(cmd) or _fed_by_ps(cmd) else frozenset()
    inner = Cmd(argv, [mass] * len(argv), cmd.text, upstream=cmd.upstream, cwd=cmd.cwd)
    d.command(inner, ctx)


@handles("parallel")
def _h_parallel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    if ":::" in args:
        j = args.index(":::")
        template = [a for a in args[:j] if not a.startswith("-")]
        for v in args[j + 1 : j + 5]:
            argv = [t.replace("{}", v) for t in template] if any("{}" in t for t in template) else template + [v]
            d.command(Cmd(argv, [frozenset()] * len(argv), cmd.text, cwd=cmd.cwd), ctx)


def _h_interpreter(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    lang = interpreter_lang(name) or ""
    flags, long_flags = CODE_FLAGS.get(lang, (set(), set()))
    codes: list[str] = []
    code_kinds: set[str] = set()
    file_op: str | None = None
    file_kinds: Kinds = frozenset()
    module = False
    in_place = False
    i = 0
    while i < len(args):
        a = args[i]
        k = kinds[i] if i < len(kinds) else frozenset()
        if a in flags or a in long_flags or a.lower() in {f.lower() for f in flags} and lang == "powershell":
            if i + 1 < len(args):
                codes.append(args[i + 1] if lang != "powershell" else " ".join(args[i + 1 :]))
                code_kinds |= kinds[i + 1] if i + 1 < len(kinds) else frozenset()
            i += 2
            continue
        if lang == "powershell" and a.lower() in ("-encodedcommand", "-enc", "-e", "-ec"):
            d.add(ctx, "decode_to_shell", cmd.text, "PowerShell runs a base64-encoded command the gate cannot read.")
            return
        if lang == "perl" and re.fullmatch(r"-[a-zA-Z]*[eE]", a) and i + 1 < len(args):
            in_place = in_place or "i" in a
            codes.append(args[i + 1])
            code_kinds |= kinds[i + 1] if i + 1 < len(kinds) else frozenset()
            i += 2
            continue
        if lang == "python" and re.fullmatch(r"-[a-zA-Z]*c", a) and i + 1 < len(args):
            codes.append(args[i + 1])
            code_kinds |= kinds[i + 1] if i + 1 < len(kinds) else frozenset()
            break
        if lang == "node" and name == "deno" and a == "eval" and i + 1 < len(args):
            codes.append(args[i + 1])
            break
        if a in ("-m", "-M") and lang == "python":
            module = True
            break
        if a.startswith("-") and a != "-":
            if lang == "perl" and "i" in a[1:]:
                in_place = True
            i += 1
            continue
        file_op = a
        file_kinds = k
        break
    if name in ("irb", "ipython", "ipython3", "R") and not codes:
        return
    for code in codes:
        _judge_code(d, lang, code, frozenset(code_kinds), cmd, ctx)
    if codes:
        if in_place:
            _, ops = split_options(args[i + 2 :])
            for f in ops:
                d.write_target(f, cmd, ctx)
        return
    if module:
        return
    if file_op is not None and file_op != "-":
        _judge_script_file(d, file_op, file_kinds, cmd, ctx)
        script = base_name(file_op)
        if script in HANDLERS and script not in SHELLS:
            j = args.index(file_op) + 1 if file_op in args else len(args)
            HANDLERS[script](d, script, args[j:], kinds[j:], cmd, ctx)
        return
    sk = _stdin_kinds(cmd)
    if "download" in sk:
        d.add(ctx, "pipe_to_shell", cmd.segment)
    elif "decode" in sk:
        d.add(ctx, "decode_to_shell", cmd.segment)
    for text in _stdin_texts(cmd):
        _judge_code(d, lang, text, frozenset(), cmd, ctx)


def _judge_code(d: Detector, lang: str, code: str, kinds: Kinds, cmd: Cmd, ctx: Ctx) -> None:
    if "download" in kinds:
        d.add(ctx, "pipe_to_shell", cmd.text)
    elif "decode" in kinds:
        d.add(ctx, "decode_to_shell", cmd.text)
    for f in inline.code_findings(lang, code):
        if f.rule == "inline_code_shell":
            before = len(ctx.out)
            if f.shell:
                d.payload(ctx, f.shell, frozenset(), cmd.text)
            if len(ctx.out) == before:
                d.add(ctx, "inline_code_shell", cmd.text, f"Inline {lang} code runs shell commands ({f.detail}).")
        elif f.rule == "inline_code_delete":
            worst = None
            for s in inline.strings_in(code):
                cls = delete_class(s, cmd.cwd)
                if cls in ("root", "home", "sysdir"):
                    worst = s
                    break
            if worst is not None:
                d.add(ctx, "rm_recursive_root", cmd.text, f"Inline {lang} code deletes {worst}.")
            elif (targets := inline.delete_targets(lang, code)) is not None and all(
                delete_class(s, cmd.cwd) == "other" for s in targets
            ):
                pass  # deletes named project-relative paths only: judged like ``rm -rf ./build``
            else:
                d.add(ctx, "inline_code_delete", cmd.text, f"Inline {lang} code deletes files ({f.detail}).")
        elif f.rule == "write_path":
            d.write_target(f.detail, cmd, ctx)
        elif f.rule == "inline_code_kill" and re.search(r"kill\s*\(\s*-1\b|killpg\s*\(\s*(0|-1)", code):
            d.add(ctx, "kill_all", cmd.text)
        else:
            d.add(ctx, f.rule, cmd.text, f"Inline {lang} code: {f.detail}." if f.detail else "")


@handles(
    "nc",
    "ncat",
    "netcat",
    "nc.traditional",
    "nc.openbsd",
    "socat",
    "gotty",
    "rc",
    "ttyd",
    "pwncat",
    "sbd",
    "cryptcat",
    "rcat",
    "websocketd",
    "telnetd",
    "shellinaboxd",
)
def _h_netshell(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    shells = SHELLS | {"cmd", "cmd.exe", "powershell", "pwsh"}
    if name in ("nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "cryptcat", "sbd", "pwncat", "rcat"):
        if any(
            a in ("-e", "-c", "--exec", "--sh-exec", "--lua-exec") or re.fullmatch(r"-[a-zA-Z]*[ec]", a) for a in args
        ):
            d.add(ctx, "reverse_shell", cmd.text)
    elif name == "socat":
        if any(re.search(r"(?i)\b(exec|system):", a) for a in args):
            d.add(ctx, "reverse_shell", cmd.text)
    elif name in ("gotty", "ttyd", "websocketd", "shellinaboxd", "telnetd"):
        writable = {"gotty": ("-w", "--permit-write"), "ttyd": ("-W", "--writable")}.get(name)
        if any(base_name(a) in shells for a in args) and (writable is None or any(a in writable for a in args)):
            d.add(ctx, "reverse_shell", cmd.text)
    elif name == "rc" and "-r" in args and any(base_name(a) in shells for a in args):
        d.add(ctx, "reverse_shell", cmd.text)


@handles("curl", "wget", "wget2", "aria2c", "fetch", "http", "xh")
def _h_download(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Remember files a download writes (a later run of them is download-then-run) and system targets."""
    out = option_value(args, ("-o", "--output", "-O", "--output-document", "--out"))
    urls = [a for a in args if re.match(r"^[a-z][a-z0-9+.-]*://", a)]
    if name in ("curl",) and out == "-":
        out = None
    if out and out not in ("-",):
        ctx.downloaded.add(base_name(out))
        d.write_target(out, cmd, ctx)
    elif urls and (
        name != "curl"
        or any(
            a in ("-O", "--remote-name", "--remote-name-all") or re.fullmatch(r"-[a-zA-Z]*O[a-zA-Z]*", a) for a in args
        )
    ):
        ctx.downloaded.add(base_name(urls[0].split("?")[0].rstrip("/")))
    for op, target in cmd.redirects:
        if ">" in op and not target.isdigit():
            ctx.downloaded.add(base_name(target))
    if name == "wget":
        prefix = option_value(args, ("-P", "--directory-prefix"))
        if prefix:
            d.write_target(prefix.rstrip("/") + "/x", cmd, ctx)

"""Generic semantics for tools without a handler of their own: help and dry-run spellings, the
``stop``/``shutdown`` verbs of daemon-control tools, writing tools pointed at block devices,
readers that never write, and the other rules that follow from what a tool does with its
arguments rather than from its name.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from ..commands import SHELLS, WRAPPER_NAMES, base_name, interpreter_lang
from ..model import UNKNOWN, Cmd
from ..paths import is_block_device
from ..rules import reason_for
from .base import COMMAND_OPERANDS, HANDLERS, JUDGES_CARRIED, Ctx, Examples
from .services import _h_daemon_stop, _h_service, rc_verb

if TYPE_CHECKING:
    from ..detect import Detector


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
        "erl",  # ``erl -s init stop``: the VM it started stops itself
        "init",  # not a runlevel: ``init stop`` is no verb of init (``init 0|6|1`` is the power family's)
        "telinit",
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
        # tracers and file-recovery tools read the device; what they recover is written elsewhere
        "blktrace",
        "btrace",
        "blkparse",
        "extundelete",
        "ext4magic",
        "photorec",
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
    """``X --help``, ``X -help``, ``X help ...``, and ``-h`` of tools where it means help: the tool only prints usage.
    Only the tool's own words count: not those after ``--``, nor those of the command a container
    tool runs (``docker exec c dropdb -h host`` runs dropdb; ``kubectl exec pod -- x --help``)."""
    args = _own_words(name, args)
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


_RUNS_INNER = {"exec", "run", "debug", "attach", "enter", "shell", "ssh"}


def _own_words(name: str, args: list[str]) -> list[str]:
    """The words a tool reads as its own: up to ``--``, and for ``docker|podman|kubectl|… exec|run``
    up to the command it runs (its third operand: ``exec``, the container, the command)."""
    if "--" in args:
        args = args[: args.index("--")]
    if args and args[0] in _RUNS_INNER or args[:2] in (["compose", "exec"], ["compose", "run"], ["container", "exec"], ["container", "run"]):
        ops = [i for i, a in enumerate(args) if not a.startswith("-")]
        first = 2 if args[0] in ("compose", "container") else 1
        if len(ops) > first + 1:
            args = args[: ops[first + 1]]
    return args


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


class _Tool(NamedTuple):
    """A tool as the generic checks see it: its name, arguments, the first plain operands (and
    their lower-case spellings), whether a handler of its own judged it, and how it was invoked."""

    name: str
    args: list[str]
    ops: list[str]
    low: list[str]
    cmd: Cmd
    ctx: Ctx
    handled: bool
    path: str

    @property
    def project_script(self) -> bool:
        """Invoked by a relative path with a directory (``./stop.sh``, ``bin/stop``): the project's own."""
        return "/" in self.path and not self.path.startswith("/")


def generic_semantics(
    d: Detector, name: str, args: list[str], cmd: Cmd, ctx: Ctx, handled: bool = False, path: str = ""
) -> None:
    """Semantics that hold across tools: stop verbs on daemons, power verbs, drops, block devices."""
    if name in _READERS:
        return
    ops = _plain_operands(args)
    t = _Tool(name, args, ops, [o.lower() for o in ops[:4]], cmd, ctx, handled, path)
    for check in _CHECKS:
        check(d, t)


def _may_write_devices(t: _Tool) -> bool:
    """Whether a tool without a handler may write the block devices it is given (not a reader,
    a listing verb, a no-act/list option, nor ``debugfs`` without ``-w``)."""
    name, args, low = t.name, t.args, t.low
    return (
        not t.handled
        and name not in READ_ONLY_DEVICE
        and not name.startswith(("ls", "mount.", "fsck", "e2fsck", "dm"))
        and not (low[:1] and low[0] in _READ_VERBS)
        and not any(
            a in ("-n", "-h", "--no-act", "-l", "--list") or re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", a) for a in args
        )
        and (name != "debugfs" or "-w" in args)  # debugfs opens read-only unless -w
    )


def _device_write(d: Detector, t: _Tool) -> None:
    """Block devices handed to a tool that can write (``of=/dev/sda``; not an input option's value)."""
    if not _may_write_devices(t):
        return
    prev = ""
    for a in t.args:
        v = a.split("=", 1)[1] if "=" in a and (a.startswith("-") or a.startswith(("of=", "if="))) else a
        if (
            v.startswith("/dev/")
            and is_block_device(v)
            and prev not in ("-i", "--input", "--source", "-s", "--src", "--from")
            and not a.startswith("if=")
        ):
            d.add(t.ctx, "device_write", t.cmd.text, f"{t.name} is pointed at the block device {v} and may overwrite it.")
            break
        prev = a


def _disk_format(d: Detector, t: _Tool) -> None:
    """Filesystem tools told to format, mkfs, wipe or erase."""
    if _FS_TOOL.search(t.name) and any(w in ("format", "mkfs", "wipe", "erase") for w in t.low[:2]):
        d.add(t.ctx, "disk_format", t.cmd.text, f"{t.name} formats a filesystem.")


def _service_stop(d: Detector, t: _Tool) -> None:
    """Daemons told to stop (not task runners and dev environments, not the project's own scripts,
    not tools whose own stop handler judged them)."""
    name, low, cmd, ctx = t.name, t.low, t.cmd, t.ctx
    if t.handled and name in HANDLERS and HANDLERS[name] in (_h_daemon_stop, _h_service) or name in _DEV_RUNNERS:
        return
    if t.project_script:
        return
    if re.search(r"(?:^|[-_])stop(?:[-_.]|$)", name) and name not in _NOT_DAEMONS and not name.startswith("stopwatch"):
        d.add(ctx, "service_stop", cmd.text, f"{name} stops a service.")
    elif low[:1] and rc_verb(low[0]) in ("stop", "shutdown") and name not in _NOT_DAEMONS:
        d.add(ctx, "service_stop", cmd.text, f"{name} {low[0]} stops a service.")
    elif any(w in _STOP_WORDS or rc_verb(w) in _STOP_WORDS for w in low[:3]) and name not in _NOT_DAEMONS:
        if "firewall" in name or "firewall" in low[:2]:
            d.add(ctx, "firewall_flush", cmd.text, f"{name} stops the firewall.")
        elif _DAEMONISH.search(name) or any(w in _SERVICE_NOUNS for w in low[:3]) or "--service" in t.args:
            d.add(ctx, "service_stop", cmd.text, f"{name} {' '.join(t.ops[:3])} stops a service.")


def _power(d: Detector, t: _Tool) -> None:
    """Power verbs and flags (``X reboot``, ``--poweroff``) of tools without a handler; a verb aimed at a
    drive (``udisksctl power-off -b /dev/sdb``, ``--block-device``) powers off that drive, not the machine."""
    if any(a.startswith("/dev/") or a.startswith("--block-device") for a in t.args):
        return
    if (
        not t.handled
        and t.name not in _NOT_DAEMONS
        and t.name not in _DEV_RUNNERS
        and not t.project_script
        and (
            any(w in _POWER_WORDS for w in t.low[:2])
            or any(a in ("--reboot", "--poweroff", "--shutdown", "--halt") for a in t.args)
        )
    ):
        d.add(t.ctx, "power", t.cmd.text, f"{t.name} reboots or powers off the machine.")


def _db_drop(d: Detector, t: _Tool) -> None:
    """Database drops spelled as subcommands (``db:drop``, ``drop-database``, ``database drop``, ``sql flush``,
    ``db truncate``): a data noun followed by a verb that empties it."""
    low = t.low
    if any(_DB_WORD.match(w) for w in low[:3]) or any(
        a in ("database", "databases", "db", "schema", "sql", "keyspace", "datastore")
        and b in ("drop", "reset", "wipe", "purge", "destroy", "flush", "flushall", "truncate", "nuke", "empty")
        for a, b in zip(low[:3], low[1:4])
    ):
        d.add(t.ctx, "db_drop", t.cmd.text, f"{t.name} {' '.join(t.ops[:3])} drops a database or its tables.")


# Factory resets spelled as an intent or an option: Android's ``am broadcast -a android.intent.action.MASTER_CLEAR``,
# ``…FACTORY_RESET``, recovery's ``--wipe_data``.
_FACTORY_RESET = re.compile(r"(?:^|[._])(?:MASTER_CLEAR|FACTORY_RESET)$|^--wipe[_-](?:data|all)$")


def _destroy(d: Detector, t: _Tool) -> None:
    """Factory resets, destroy verbs, and deleting clusters or namespaces."""
    low = t.low
    if any(w in ("factory-reset", "factory_reset", "factoryreset") for w in low) or any(_FACTORY_RESET.search(a) for a in t.args):
        d.add(t.ctx, "system_restore", t.cmd.text, f"{t.name} factory-resets a device or system.")
    elif any(w == "destroy" or w.startswith("destroy-") for w in low[:2]):
        d.add(t.ctx, "infra_destroy", t.cmd.text, f"{t.name} {' '.join(t.ops[:3])} destroys resources.")
    elif any(w in ("delete", "remove", "rm") for w in low[:2]) and any(
        w in ("cluster", "clusters", "vcluster", "namespace", "namespaces") for w in low[:3]
    ):
        d.add(t.ctx, "cluster_delete", t.cmd.text)


_OUTPUT_OPTIONS = frozenset(
    {"-o", "--output", "--out", "--save", "--output-file", "--outfile", "--out-file", "-O", "--target", "--write",
     "--dest", "--destination", "-out"}
)


_LONG_OUTPUTS = ("--output", "--output-document", "--output-file", "--output-dir", "--output-directory", "--outfile",
                 "--out-file", "--save", "--target", "--target-directory", "--destination", "--dest", "--write")
_ATTACHED_OUTPUT = re.compile(r"^-[A-Za-z]*[oO]([/~].*)$")


def _output_targets(d: Detector, t: _Tool) -> None:
    """Output options pointed at system paths (``--save /etc/x``, ``-o /usr/local/bin/x``), also
    attached or clustered (``-O/etc/passwd``, ``-qO /etc/x``) and as unique long prefixes
    (``--output-doc=/etc/passwd``)."""
    args = t.args
    for i, a in enumerate(args):
        nxt = args[i + 1] if i + 1 < len(args) else None
        m = _ATTACHED_OUTPUT.match(a)
        name, eq, value = a.partition("=")
        if a in _OUTPUT_OPTIONS and nxt is not None:
            d.write_target(nxt, t.cmd, t.ctx)
        elif m:
            d.write_target(m.group(1), t.cmd, t.ctx)
        elif re.fullmatch(r"-[A-Za-z]+[oO]", a) and nxt is not None and nxt.startswith(("/", "~")):
            d.write_target(nxt, t.cmd, t.ctx)
        elif len(name) >= 5 and name.startswith("--") and any(lo.startswith(name) for lo in _LONG_OUTPUTS):
            if eq:
                d.write_target(value, t.cmd, t.ctx)
            elif nxt is not None and name not in _OUTPUT_OPTIONS:
                d.write_target(nxt, t.cmd, t.ctx)


# Programs whose arguments are text, not a command: a message, a search, a name to look up.
_DATA_ARGS = frozenset(
    {"notify-send", "logger", "wall", "write", "say", "espeak", "spd-say", "figlet", "toilet", "cowsay", "banner",
     "cheat", "zenity", "kdialog", "dialog", "whiptail", "yad", "xmessage", "pbcopy", "xclip", "xsel", "wl-copy",
     "alias", "unalias", "complete", "compgen", "declare", "typeset", "local", "readonly", "export", "read",
     "hash", "fgrep", "ack", "ug", "zgrep", "pgrep", "pkill", "ps", "column", "tee", "base64", "md5sum", "sha256sum",
     "hg", "svn", "jj", "bzr", "fossil", "glab", "gh", "jira", "git-cliff", "commitizen", "cz", "sl",
     "test", "expr", "let", "getopt", "getopts", "basename", "dirname", "realpath", "readlink", "seq", "sleep",
     "ssh-keygen", "apt", "apt-get", "apt-cache", "dnf", "yum", "brew", "pip", "pip3", "npm", "yarn", "pnpm",
     "cargo", "go", "gem", "conda", "snap", "flatpak", "pacman", "zypper", "apk", "port", "nix-env", "winget",
     "choco", "scoop", "mas", "pipx", "uv", "poetry", "pdm", "composer", "bundle", "dotnet", "nuget", "helm",
     "curl", "wget", "http", "xh", "mail", "mailx", "sendmail", "mutt", "msmtp"}
)
# Options whose value is a message or a title, never run: ``hg commit -m 'rm -rf /'``.
_MESSAGE_OPTIONS = frozenset(
    {"-m", "--message", "-t", "--title", "--body", "--description", "--comment", "--subject", "--summary", "--text",
     "--note", "--reason", "--label", "--name", "-n", "--tag", "--help-text", "--prompt", "-p"}
)
_TAIL_SKIP_RULES = frozenset({"too_complex", "analysis_error"})
# A verb that runs what follows it: ``run``, ``exec``, ``ssh``, ``shell``, ``console``, ``enter``, ``rsh``,
# ``attach``, ``foreach``, also inside a word (``run-task``, ``execute-command``, ``cmd.run``, ``run:detached``)
_RUN_VERB = re.compile(r"(?:^|[-_.:])(?:run|exec|execute|ssh|rsh|shell|console|enter|attach|foreach)(?:$|[-_.:])")
# An option whose value is a command (``--exec reboot``, ``--command=CMD``, ``--run-command``; not ``-c``: ``tar -c``)
_COMMAND_OPTION = re.compile(r"^--?(?:\w+[-_])*(?:exec|execute|command|commands|cmd|run|script|scripts)$")
# ``KEY=shell text`` (``--parameters commands='…'``, ``--metadata startup-script='…'``): the text after = is the value
_KEY_VALUE = re.compile(r"^[A-Za-z_][\w.-]*=\S.*\s")


def _known_program(word: str) -> bool:
    name = base_name(word)
    return bool(name) and (
        name in HANDLERS
        or name in SHELLS
        or name in WRAPPER_NAMES
        or interpreter_lang(name) is not None
        or name.startswith(("mkfs", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs", "mkswap", "newfs"))
    )


def _tail_candidates(args: list[str], after_verb: bool = False) -> list[tuple[str, str]]:
    """Where an unknown program's arguments could hold a command: (shell text, how it is shown).
    A word naming a known program starts one (``X -l 5 rm -rf /``); an argument with spaces that
    starts with a known program's name is one as a shell string (``X -c 'rm -rf /'``, ``--run='cmd'``).
    With ``after_verb`` (a handled tool, whose own verbs may be program names: ``vagrant halt``,
    ``VBoxManage controlvm vm poweroff``) a word starts one only after a verb that runs something
    (``heroku run rm -rf /``, ``hcloud server ssh web reboot``, ``multipass exec vm -- …``)."""
    out: list[tuple[str, str]] = []
    verb_seen = not after_verb
    for i, a in enumerate(args):
        if i and not verb_seen and (
            _RUN_VERB.search(args[i - 1]) and not args[i - 1].startswith("-") or _COMMAND_OPTION.match(args[i - 1])
        ):
            verb_seen = True
        if i and args[i - 1] in _MESSAGE_OPTIONS:
            continue
        value = a.split("=", 1)[1] if a.startswith("-") and "=" in a else a
        if value is a and _KEY_VALUE.match(a):  # ``commands='cmd'``, ``startup-script='cmd'``: a key's value
            value = a.split("=", 1)[1]
        if value.startswith("-") or not value:
            continue
        first = value.split(None, 1)[0] if value.split() else ""
        if i == 0 and len(args) == 1 and value is a and not any(c.isspace() for c in a):
            continue  # ``bazel shutdown``, ``vagrant reboot``: the tool's own verb (see _power)
        if value is a and verb_seen and _known_program(a) and not any(c.isspace() for c in a):
            text = shlex.join([w.replace(UNKNOWN, " ") for w in args[i:]])
            out.append((text, " ".join(args[i:])))
        elif any(c.isspace() for c in value) and _known_program(first):
            out.append((value.replace(UNKNOWN, " "), value))
        elif value is not a and _COMMAND_OPTION.match(a.split("=", 1)[0]) and _known_program(value):
            out.append((value.replace(UNKNOWN, " "), value))  # ``--exec=reboot``: one word, still a command
        elif value is a and "=" in a and _COMMAND_OPTION.match("--" + a.split("=", 1)[0]) and _known_program(a.split("=", 1)[1]):
            out.append((a.split("=", 1)[1].replace(UNKNOWN, " "), a))  # ``commands=reboot``, ``startup-script=reboot``
        if len(out) >= 3:
            break
    return out


def _runs_tail(d: Detector, t: _Tool) -> None:
    """A program the gate does not know, whose arguments hold a command that is dangerous when run
    on its own: it may run it (``trickle2 -d 10 rm -rf /``, ``mywrapper -c 'reboot'``).  At least
    ASK, naming the command and why; programs whose arguments are data (messages, searches,
    package names) are left alone.  Handled programs get the same check from ``carried_commands``."""
    if not t.handled and t.name not in HANDLERS:
        carried_commands(d, t.name, t.args, t.cmd, t.ctx)


def carried_commands(d: Detector, name: str, args: list[str], cmd: Cmd, ctx: Ctx, handled: bool = False) -> None:
    """The command-carrying fallback: ``name``'s arguments hold a command that is dangerous on its own
    (a word naming a known program, from there on, or shell text starting with one): ``name`` may run
    it.  Run for every program, after its handler for a handled one (``heroku run rm -rf /``, ``fly ssh
    console -C 'reboot'``, ``git rebase --exec '…'``) unless that handler judged what it carries
    (``base.JUDGES_CARRIED``, or it reported something)."""
    if name in _DATA_ARGS or name in _READERS or name in SHELLS or interpreter_lang(name) or not args:
        return
    if name.endswith(("grep", "sum")):
        return
    if handled:
        verbs = JUDGES_CARRIED.get(name)
        ops = _plain_operands(args)
        if verbs is not None and (not verbs or ops[:1] and ops[0] in verbs):
            return
    for text, shown in _tail_candidates(args, after_verb=handled and name not in COMMAND_OPERANDS):
        found = [f for f in d.script(text, ctx.depth + 1) if f.rule not in _TAIL_SKIP_RULES]
        if found:
            f = found[0]
            why = (f.reason or reason_for(f.rule)).rstrip(". ")
            why = why[:1].lower() + why[1:]
            known = "runs commands it is given" if handled else "is a program the gate does not know"
            d.add(
                ctx,
                "unknown_wrapper",
                cmd.text,
                f"{name} {known} and may run `{shown[:120]}`, which {why} ({f.rule}).",
            )
            return


# The generic checks, in the order their findings are reported.
_CHECKS: tuple[Callable[[Detector, _Tool], None], ...] = (
    _device_write,
    _disk_format,
    _service_stop,
    _power,
    _db_drop,
    _destroy,
    _output_targets,
    _runs_tail,
)

EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "unknown_wrapper",
        match=("frobnicate -l 5 rm -rf /", "frobnicate --slow -- reboot", "frobnicate -c 'kill -9 -1'",
               "frobnicate --run='mkfs.ext4 /dev/sda1'", "frobnicate x git push --force",
               # handled tools too, after their handler: a verb that runs, or shell text
               "heroku run -a api reboot", "fly ssh console -C 'kill -9 -1'", "git rebase --exec 'rm -rf ~' main",
               "gcloud compute instances add-metadata vm --metadata startup-script='kill -9 -1'"),
        no_match=("frobnicate rm", "frobnicate -c 'ls -la'", "notify-send 'rm -rf /'", "hg commit -m 'rm -rf /'",
                  "frobnicate --message 'reboot now'", "apt install git",
                  "vagrant halt -f", "VBoxManage controlvm dev poweroff", "git rebase --exec 'make test' main",
                  "docker run --rm alpine reboot"),
    ),
)

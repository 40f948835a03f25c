"""Path semantics: which paths are the root, a home, a system directory, a device...

Paths arrive resolved by the parser (``$HOME`` -> ``~``); this module normalises them
(``/usr/../`` -> ``/``, ``/home/alice`` -> ``~``) and classifies them for deletion and for
writes.  Deliberately small tables: the point is to generalise by meaning, not to list
commands.
"""

from __future__ import annotations

import posixpath
import re

from .parser import UNKNOWN

# Top-level directories whose loss breaks the system.
SYSTEM_TOP = frozenset(
    {
        "bin",
        "boot",
        "dev",
        "etc",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "opt",
        "proc",
        "root",
        "sbin",
        "srv",
        "sys",
        "usr",
        "var",
        "snap",
        "run",
        "mnt",
        "media",
        "nix",
        "System",
        "Library",
        "Applications",
        "Users",
        "private",
        "Volumes",
    }
)
# Second-level directories deleting which (recursively) is as bad as deleting the top.
SYSTEM_SECOND = frozenset(
    {
        "usr/bin",
        "usr/sbin",
        "usr/lib",
        "usr/lib64",
        "usr/lib32",
        "usr/libexec",
        "usr/local",
        "usr/share",
        "usr/include",
        "usr/src",
        "var/lib",
        "var/log",
        "var/spool",
        "var/mail",
        "var/www",
        "var/cache",
        "var/opt",
        "etc/ssh",
        "etc/ssl",
        "etc/systemd",
        "etc/pam.d",
        "etc/init.d",
        "etc/default",
        "etc/apt",
        "etc/security",
        "usr/local/bin",
        "usr/local/lib",
        "usr/local/sbin",
        "boot/efi",
        "boot/grub",
        "private/etc",
        "private/var",
    }
)
# Scratch areas: deleting under them is ordinary.
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run/user", "/private/tmp", "/private/var/folders", "/var/folders")
# Writing under these is a system change.
WRITE_PROTECTED = (
    "/etc",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/sys",
    "/proc",
    "/private/etc",
    "/System",
    "/Library/LaunchDaemons",
    "/Library/LaunchAgents",
)
# Sensitive directories inside a home.
HOME_SENSITIVE = frozenset(
    {
        ".ssh",
        ".gnupg",
        ".aws",
        ".kube",
        ".config",
        ".local",
        ".docker",
        ".password-store",
        ".mozilla",
        ".azure",
        ".gcloud",
        ".bash_history",
    }
)

_PERSIST_HOME = re.compile(
    r"^~/(\.(bash_profile|bashrc|bash_login|bash_logout|bash_aliases|profile|zshrc|zshenv|zprofile|zlogin|zlogout"
    r"|kshrc|mkshrc|cshrc|tcshrc|login|xinitrc|xprofile|xsession|xsessionrc|pam_environment)"
    r"|\.ssh/(authorized_keys2?|rc|environment)"
    r"|\.config/(fish/(config\.fish|conf\.d/.*)|autostart/.*|systemd/user/.*|environment\.d/.*)"
    r"|\.local/share/systemd/user/.*|Library/LaunchAgents/.*)$"
)
_PERSIST_SYSTEM = re.compile(
    r"^/(etc/(sudoers(\.d(/.*)?)?|profile(\.d(/.*)?)?|bash\.bashrc|bashrc|zsh/.*|zshrc|zshenv|zprofile|environment"
    r"|ld\.so\.preload|crontab|cron\.(d|daily|hourly|weekly|monthly)(/.*)?|anacrontab|rc\.local"
    r"|systemd/system/.*|init\.d/.*|xdg/autostart/.*|ssh/sshd_config(\.d/.*)?|passwd|shadow|group|gshadow)"
    r"|var/spool/cron(/.*)?|root/\.ssh/authorized_keys2?)$"
)
BLOCK_DEVICE = re.compile(
    r"^/dev/(sd[a-z]+\d*|hd[a-z]+\d*|vd[a-z]+\d*|xvd[a-z]+\d*|nvme\d+(n\d+)?(p\d+)?|mmcblk\d+(p\d+)?|md\d+|md/.+"
    r"|dm-\d+|loop\d+|mapper/.+|disk/.+|fd\d+|mtdblock\d+|mtd\d+|nbd\d+|rbd\d+|zd\d+|r?disk\d+(s\d+)?"
    r"|mem|kmem|port|ubi.*|bcache\d+|zram\d+|[a-z]+vg/.+)$"
)


def normalize_path(p: str, cwd: str | None = None) -> str:
    """A comparable form: ``~`` for any home, absolute paths collapsed, relative joined to cwd."""
    if not p:
        return p
    if p.startswith("~"):
        rest = p[1:]
        slash = rest.find("/")
        p = "~" + ("" if slash < 0 else rest[slash:])  # ~user -> ~
    elif not p.startswith("/") and cwd is not None and not p.startswith(UNKNOWN) and not p.startswith("-"):
        p = posixpath.join(cwd, p)
    if p.startswith("/"):
        p = posixpath.normpath(p)
        if p.startswith("//"):
            p = "/" + p.lstrip("/")
        m = re.match(r"^/(home|Users)/([^/*?\[]+)(/.*)?$", p)
        if m:
            p = "~" + (m.group(3) or "")
        elif p == "/root" or p.startswith("/root/"):
            p = "~" + p[5:]
    elif p.startswith("~"):
        norm = posixpath.normpath(p)
        p = norm if norm.startswith("~") else "/home"
    return p


_GLOB_ONLY = re.compile(r"^[*?.\[\]{}!^-]*[*?\[][*?.\[\]{}!^-]*$")


def strip_globs(p: str) -> str:
    """``/etc/*`` -> ``/etc``; ``~/.*`` -> ``~``: a wildcard over a directory is that directory."""
    while True:
        head, _, tail = p.rpartition("/")
        if not _ or not _GLOB_ONLY.match(tail):
            return p
        p = head or "/"


def delete_class(raw: str, cwd: str | None = None) -> str:
    """How bad deleting ``raw`` would be.

    ``root``/``home``/``sysdir``: the floor; ``system``: something inside a system or
    sensitive directory; ``unresolved``: an unknown prefix right before ``/`` (``"$X"/*``);
    ``other``: ordinary.
    """
    p = normalize_path(raw, cwd)
    if not p:
        return "other"
    if p.startswith(UNKNOWN):
        rest = strip_globs(p.lstrip(UNKNOWN))
        if rest in ("", "/") or (rest.startswith("/") and rest[1:] in SYSTEM_TOP):
            return "unresolved" if p != UNKNOWN else "other"
        return "other"
    base = strip_globs(p)
    if base == "/":
        return "root"
    if base == "~":
        return "home"
    if base.startswith("/"):
        rel = base[1:]
        if rel in SYSTEM_TOP or rel in SYSTEM_SECOND:
            return "sysdir"
        if base.startswith(SCRATCH) and any(base == s or base.startswith(s + "/") for s in SCRATCH):
            return "other"
        top = rel.split("/", 1)[0]
        if top in SYSTEM_TOP and top not in ("home", "Users", "mnt", "media", "Volumes"):
            return "system"
        return "other"
    if base.startswith("~/"):
        first = base[2:].split("/", 1)[0]
        if first in HOME_SENSITIVE or _PERSIST_HOME.match(base):
            return "system"
    return "other"


def write_class(raw: str, cwd: str | None = None) -> str:
    """What writing to ``raw`` touches: blockdev, sysrq, net, persist, system or other."""
    p = normalize_path(raw, cwd)
    if not p:
        return "other"
    if p.startswith("/dev/"):
        if BLOCK_DEVICE.match(p):
            return "blockdev"
        if p.startswith(("/dev/tcp/", "/dev/udp/")):
            return "net"
        return "other"
    if p == "/proc/sysrq-trigger":
        return "sysrq"
    if _PERSIST_HOME.match(p) or _PERSIST_SYSTEM.match(p):
        return "persist"
    if p.startswith("/") and any(p == w or p.startswith(w + "/") for w in WRITE_PROTECTED):
        if p.startswith("/proc/") and not p.startswith("/proc/sys"):
            return "other"
        return "system"
    return "other"


def is_block_device(raw: str) -> bool:
    return bool(BLOCK_DEVICE.match(normalize_path(raw)))

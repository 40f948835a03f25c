"""Path semantics: which paths are the root, a home, a system directory, a device...

Paths arrive resolved by the parser (``$HOME`` -> ``~``); this module normalises them
(``/usr/../`` -> ``/``, ``/home/alice`` -> ``~``) and classifies them for deletion and for
writes.  Deliberately small tables: the point is to generalise by meaning, not to list
commands.
"""

from __future__ import annotations

import posixpath
import re

from .context import CURRENT, GateContext, within
from .model import UNKNOWN

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
        # FreeBSD's static tools and loader, Solaris' kernel and platform files, Android's system,
        # vendor and shared-storage partitions
        "rescue",
        "stand",
        "kernel",
        "platform",
        "system",
        "vendor",
        "sdcard",
        "storage",
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
    r"|\.ssh/(authorized_keys2?|rc|environment|config|id_[^/.]+)"
    r"|\.config/(fish/(config\.fish|conf\.d/.*)|autostart(/.*)?|systemd/user(/.*)?|environment\.d/.*)"
    r"|\.local/share/systemd/user(/.*)?|Library/LaunchAgents(/.*)?"
    # settings whose values run code or choose where code comes from: git aliases/pagers/hooks,
    # package registries and indexes
    r"|\.gitconfig|\.config/git/config|\.npmrc|\.yarnrc(\.yml)?|\.bunfig\.toml|\.pip/pip\.conf"
    r"|\.config/pip/pip\.conf|\.pydistutils\.cfg|\.condarc|\.gemrc|\.cargo/config(\.toml)?"
    # shims: directories that come first on PATH
    r"|bin(/.*)?|\.local/bin(/.*)?)$"
)
# Anywhere: git hooks, and files Python runs at every start (``.pth`` lines beginning with ``import``,
# ``usercustomize``/``sitecustomize``).
_PERSIST_ANYWHERE = re.compile(
    r"(?:^|/)(?:\.git/hooks(?:/.*)?|(?:site|dist)-packages/[^/]*\.pth|(?:user|site)customize\.py)$"
)
_PERSIST_SYSTEM = re.compile(
    r"^/(etc/(sudoers(\.d(/.*)?)?|profile(\.d(/.*)?)?|bash\.bashrc|bashrc|zsh/.*|zshrc|zshenv|zprofile|environment"
    r"|ld\.so\.preload|crontab|cron\.(d|daily|hourly|weekly|monthly)(/.*)?|anacrontab|rc\.local"
    r"|systemd/system/.*|init\.d/.*|xdg/autostart/.*|ssh/sshd_config(\.d/.*)?|passwd|shadow|group|gshadow)"
    r"|var/spool/cron(/.*)?|root/\.ssh/authorized_keys2?)$"
)
_PERSIST_HOME_NAMES = {
    ".bash_profile", ".bashrc", ".bash_login", ".bash_logout", ".bash_aliases", ".profile", ".zshrc", ".zshenv",
    ".zprofile", ".zlogin", ".kshrc", ".cshrc", ".tcshrc", ".login", ".xinitrc", ".xprofile", ".pam_environment",
    ".gitconfig", ".npmrc", ".yarnrc", ".condarc", ".gemrc",
}
BLOCK_DEVICE = re.compile(
    r"^/dev/(sd[a-z]+\d*|hd[a-z]+\d*|vd[a-z]+\d*|xvd[a-z]+\d*|nvme\d+(n\d+)?(p\d+)?|mmcblk\d+(p\d+)?|md\d+|md/.+"
    r"|dm-\d+|loop\d+|mapper/.+|disk/.+|fd\d+|mtdblock\d+|mtd\d+|nbd\d+|rbd\d+|zd\d+|r?disk\d+(s\d+)?"
    r"|mem|kmem|port|ubi.*|bcache\d+|zram\d+|[a-z]+vg/.+|root|block/.+|xvd[a-z]+\d*|mmcblk\d+boot\d+|sg\d+|r?disk\d+s\d+s\d+"
    # the BSDs and Solaris: FreeBSD ada0p2/da0s1a/nvd0/nda0/vtbd0/mmcsd0, NetBSD ld0/xbd0/raid0, OpenBSD and
    # NetBSD wd0c/sd0a and their raw twins rwd0c/rsd0c, GEOM labels and providers, Solaris /dev/[r]dsk/c0t0d0s2
    r"|(?:ada|da|ad|nvd|nda|vtbd|mmcsd|xbd|ld|raid)\d+(?:p\d+|s\d+[a-h]?)?(?:\.eli)?|r?(?:wd|sd|vnd)\d+[a-p]?"
    r"|(?:gpt|gptid|label|ufs|diskid|mirror|stripe|raid3|zvol|eli)/.+|r?dsk/.+)$"
)
# /proc/<pid>/root is the process's view of /: /proc/self/root/dev/sda is /dev/sda
_PROC_ROOT = re.compile(r"^/proc/(?:self|thread-self|\d+)/root(?=/)")
# names a /dev glob is tried against (``of=/dev/sd?``, ``/dev/nvme*``)
_DEV_SAMPLES = ("sda", "sda1", "sdb", "hda", "vda", "vda1", "xvda", "nvme0n1", "nvme0n1p1", "mmcblk0", "mmcblk0p1",
                "md0", "dm-0", "loop0", "root", "nbd0", "disk0", "disk2s1", "rdisk2", "ada0", "ada0p2", "da0",
                "sd0c", "wd0a", "nvd0")


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
_GLOB_CHAR = re.compile(r"[*?\[]")
from .globs import _BRACKET, glob_regex  # noqa: E402


def strip_globs(p: str) -> str:
    """``/etc/*`` -> ``/etc``; ``~/.*`` -> ``~``: a wildcard over a directory is that directory."""
    while True:
        head, _, tail = p.rpartition("/")
        if not _ or not _GLOB_ONLY.match(tail):
            return p
        p = head or "/"


def _wide(comp: str) -> bool:
    """A component that matches names without naming any (``*``, ``[a-z]*``, ``.[!.]*``, ``?*``)."""
    rest = _BRACKET.sub("", comp)
    return "*" in rest and not rest.replace("*", "").replace("?", "").replace(".", "")


def _known_children(prefix: str) -> set[str]:
    """Names under ``prefix`` whose loss or change the gate cares about (for matching globs)."""
    if prefix in ("", "/"):
        names = set(SYSTEM_TOP)
    elif prefix == "~":
        names = set(HOME_SENSITIVE) | _PERSIST_HOME_NAMES
    elif prefix.startswith("/"):
        rel = prefix[1:] + "/"
        names = {s[len(rel) :].split("/", 1)[0] for s in SYSTEM_SECOND if s.startswith(rel)}
        if prefix == "/etc":
            names |= {"passwd", "shadow", "sudoers", "sudoers.d", "crontab", "profile", "hosts", "fstab", "group"}
    elif prefix == "~/.ssh":
        names = {"authorized_keys", "authorized_keys2", "rc", "environment"}
    else:
        names = set()
    ctx = CURRENT.get()
    if ctx is not None:
        base = prefix if prefix.startswith("/") else ""
        for q in (*ctx.protected, ctx.root, ctx.home):
            if q and base and q.startswith(base.rstrip("/") + "/"):
                names.add(q[len(base.rstrip("/")) + 1 :].split("/", 1)[0])
            elif q and prefix in ("", "/"):
                names.add(q[1:].split("/", 1)[0])
    return names


MAX_CANDIDATES = 64


def glob_candidates(p: str) -> list[str]:
    """The paths a (normalised) path with glob characters could stand for, as far as the gate cares.

    A component that matches any name (``*``, ``[a-z]*``) over a directory stands for that
    directory when only such components follow (``/*`` is ``/``, ``~/[!.]*`` is ``~``); any
    other glob component is matched against the names the gate knows at that level
    (``/?sr`` is ``/usr``, ``/e*`` is ``/etc``), and also kept as written.
    """
    if not _GLOB_CHAR.search(p):
        return [p]
    comps = p.split("/")
    prefixes = [comps[0]]
    for i in range(1, len(comps)):
        comp = comps[i]
        if not comp or not _GLOB_CHAR.search(comp):
            prefixes = [x + "/" + comp for x in prefixes]
            continue
        if _wide(comp) and all(not c or _wide(c) or c in (".", "..") for c in comps[i + 1 :]):
            return [posixpath.normpath(x) if x else "/" for x in prefixes][:MAX_CANDIDATES]
        rx = glob_regex(comp)
        new: list[str] = []
        for x in prefixes:
            if rx is not None:
                new.extend(x + "/" + name for name in sorted(_known_children(x)) if rx.fullmatch(name))
            new.append(x + "/" + comp)
        prefixes = new[:MAX_CANDIDATES]
    return [posixpath.normpath(x) if x.startswith(("/", "~")) else x for x in prefixes]


_SEVERITY = {"root": 6, "home": 5, "sysdir": 4, "system": 3, "unresolved": 2, "other": 0}


def _worst(classes: list[str]) -> str:
    return max(classes, key=lambda c: _SEVERITY.get(c, 1), default="other")


def _delete_class_norm(p: str) -> str:
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
        if top in SYSTEM_TOP and top not in ("home", "Users", "mnt", "media", "Volumes", "sdcard", "storage"):
            return "system"
        return "other"
    if base.startswith("~/"):
        first = base[2:].split("/", 1)[0]
        if first in HOME_SENSITIVE or _PERSIST_HOME.match(base):
            return "system"
    return "other"


def _absolute(raw: str, cwd: str | None, ctx: GateContext) -> tuple[str | None, bool]:
    """``raw`` as an absolute path under ``ctx`` (None when it cannot be known), and whether it was spelled from ``~``."""
    if not raw or raw.startswith(UNKNOWN) or raw.startswith("-"):
        return None, False
    if raw.startswith("~"):
        rest = raw[1:]
        if (rest and not rest.startswith("/")) or not ctx.home:
            return None, True  # ~user, or the home is not known
        p = ctx.home + rest
        spelled_home = True
    elif raw.startswith("/"):
        p = raw
        spelled_home = False
    else:
        if cwd is None:
            return None, False
        if cwd.startswith("~"):
            if not ctx.home:
                return None, False
            cwd = ctx.home + cwd[1:]
        if not cwd.startswith("/"):
            return None, False
        p = posixpath.join(cwd, raw)
        spelled_home = False
    p = posixpath.normpath(p)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    return p, spelled_home


def _home_form(p: str, ctx: GateContext) -> str:
    """An absolute path in the comparable form: under the task's home -> ``~/...``."""
    if ctx.home and ctx.home != "/" and within(p, ctx.home):
        return "~" + p[len(ctx.home) :]
    return normalize_path(p)


def _ctx_delete_one(p: str, spelled_home: bool, ctx: GateContext) -> str:
    base = strip_globs(p)
    for q in ctx.protected:
        if within(q, base):
            return "sysdir"
    if ctx.root and ctx.root != "/" and within(base, ctx.root) and not spelled_home:
        cls = _delete_class_norm(_home_form(p, ctx))
        return "system" if cls == "system" and _home_form(base, ctx).startswith("~/") else "other"
    if any(within(base, q) for q in ctx.protected):
        return "system"
    return _delete_class_norm(_home_form(p, ctx))


def delete_class(raw: str, cwd: str | None = None) -> str:
    """How bad deleting ``raw`` would be.

    ``root``/``home``/``sysdir``: the floor; ``system``: something inside a system or
    sensitive directory; ``unresolved``: an unknown prefix right before ``/`` (``"$X"/*``);
    ``other``: ordinary.  Glob characters stand for every path they could match
    (:func:`glob_candidates`).  Under a :class:`GateContext` relative paths, ``~`` and ``..``
    are resolved against the task's cwd and home; a path inside the task's root (not spelled
    from ``~``) is the task's own, a protected path or an ancestor of one is a system directory.
    """
    ctx = CURRENT.get()
    if ctx is not None:
        absolute, spelled_home = _absolute(raw, cwd, ctx)
        if absolute is not None:
            return _worst([_ctx_delete_one(c, spelled_home, ctx) for c in glob_candidates(absolute)])
    p = normalize_path(raw, cwd)
    if not p:
        return "other"
    if p.startswith(UNKNOWN):
        rest = strip_globs(p.lstrip(UNKNOWN))
        if rest in ("", "/") or (rest.startswith("/") and rest[1:] in SYSTEM_TOP):
            return "unresolved" if p != UNKNOWN else "other"
        return "other"
    return _worst([_delete_class_norm(c) for c in glob_candidates(p)])


def write_class(raw: str, cwd: str | None = None) -> str:
    """What writing to ``raw`` touches: blockdev, sysrq, net, persist, system or other.

    Under a :class:`GateContext` relative names are resolved against the task's cwd, so
    ``>> .bashrc`` in the home directory is a persistence write; protected paths are system paths.
    """
    ctx = CURRENT.get()
    if ctx is not None:
        absolute, _ = _absolute(raw, cwd, ctx)
        if absolute is not None:
            found = set()
            for c in glob_candidates(absolute) if _GLOB_CHAR.search(absolute) else [absolute]:
                cls = _write_class_norm(_home_form(c, ctx))
                if ctx.root and ctx.root != "/" and within(c, ctx.root):
                    cls = cls if cls in ("persist", "blockdev") else "other"  # the task's own files
                elif any(within(c, q) for q in ctx.protected):
                    cls = "system" if cls == "other" else cls
                found.add(cls)
            return next((o for o in _WRITE_ORDER if o in found), "other")
    p = normalize_path(raw, cwd)
    if _GLOB_CHAR.search(p) and not p.startswith("/dev/"):
        found = {_write_class_norm(c) for c in glob_candidates(p)}
        return next((o for o in _WRITE_ORDER if o in found), "other")
    return _write_class_norm(p)


_WRITE_ORDER = ("blockdev", "sysrq", "persist", "system", "net")


def _dev_glob_is_block(p: str) -> bool:
    """``/dev/sd?``, ``/dev/sd[a-z]``, ``/dev/nvme*``: a glob under /dev that names a disk."""
    rx = glob_regex(p[len("/dev/") :]) if _GLOB_CHAR.search(p) else None
    if rx is not None and any(rx.fullmatch(n) for n in _DEV_SAMPLES):
        return True
    # ``/dev/sd[c]``, ``/dev/nvme[0-1]n1``: every name a bracket class spells out (bounded)
    return rx is not None and any(BLOCK_DEVICE.match(c) for c in _bracket_names(p, 64))


def _bracket_names(p: str, limit: int) -> list[str]:
    m = re.search(r"\[(!?\^?)([^\]]+)\]", p)
    if m is None:
        return [] if _GLOB_CHAR.search(p) else [p]
    if m.group(1):
        return []
    chars: list[str] = []
    body = m.group(2)
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.extend(chr(c) for c in range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.append(body[i])
            i += 1
    out: list[str] = []
    for ch in chars[:limit]:
        out.extend(_bracket_names(p[: m.start()] + ch + p[m.end() :], limit - len(out)))
        if len(out) >= limit:
            break
    return out


def _write_class_norm(p: str) -> str:
    if not p:
        return "other"
    p = _PROC_ROOT.sub("", p)
    if p.startswith("/dev/"):
        if BLOCK_DEVICE.match(p) or _dev_glob_is_block(p):
            return "blockdev"
        if p.startswith(("/dev/tcp/", "/dev/udp/")):
            return "net"
        return "other"
    if p == "/proc/sysrq-trigger":
        return "sysrq"
    if _PERSIST_HOME.match(p) or _PERSIST_SYSTEM.match(p) or _PERSIST_ANYWHERE.search(p):
        return "persist"
    if p.startswith("/") and any(p == w or p.startswith(w + "/") for w in WRITE_PROTECTED):
        if p.startswith("/proc/") and not p.startswith("/proc/sys"):
            return "other"
        return "system"
    return "other"


def is_block_device(raw: str) -> bool:
    p = _PROC_ROOT.sub("", normalize_path(raw))
    return bool(BLOCK_DEVICE.match(p)) or (p.startswith("/dev/") and _dev_glob_is_block(p))

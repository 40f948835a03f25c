"""System paths and security controls: copies, tees, ``dd``, ``sed -i``, extraction and
``chmod``/``chown`` that write into system directories; boot loaders and initramfs tools;
system restores; the firewall; uid-0 accounts, immutable bits, file capabilities, SELinux and
AppArmor switches, and entering the host's namespaces.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    getopt,
    has_opt,
    opt_values,
    option_value,
    short_flags,
    split_options,
)
from ..model import UNKNOWN, Cmd, Kinds
from ..paths import delete_class, is_block_device, normalize_path, write_class
from .base import Ctx, Examples, _inner, _opt_value, also, handles
from .options import SPECS, parse, setcap_sets

if TYPE_CHECKING:
    from ..detect import Detector


@handles("tee", "sponge")
def _h_tee(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``tee``/``sponge`` write their file operands: judged as writes to those paths."""
    _, ops = split_options(args, {"--output-error"})
    for t in ops:
        d.write_target(t, cmd, ctx)


@handles("dd", "ddrescue", "dcfldd", "dc3dd")
def _h_dd(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``dd of=…`` (and ddrescue-likes): the output is judged as a write (a block device is a raw disk write)."""
    targets = [a.split("=", 1)[1] for a in args if a.startswith("of=")]
    if name == "ddrescue":
        _, ops = split_options(args)
        targets = ops[1:2]
    for t in targets:
        d.write_target(t, cmd, ctx)


_SED_LONGS = ("--in-place", "--expression", "--file", "--line-length", "--null-data", "--zero-terminated", "--quiet",
              "--silent", "--debug", "--sandbox", "--posix", "--regexp-extended", "--separate", "--unbuffered",
              "--follow-symlinks", "--binary")


def sed_in_place(args: list[str]) -> tuple[bool, list[str]]:
    """Whether sed edits in place, and its file operands, parsed as GNU sed does: ``-i`` anywhere
    in a cluster (``-ni``, ``-Ei``; what follows ``i`` is the backup suffix), ``--in``/``--in-pl``
    (unique prefixes of ``--in-place``), ``-e``/``-f`` with attached or separate values."""
    in_place = False
    script_opt = False
    ops: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if a == "--":
            ops.extend(args[i:])
            break
        if a.startswith("--") and len(a) > 2:
            (o, v), = getopt([a], "", _SED_LONGS, ("--expression", "--file", "--line-length"))[0][:1] or [(a, None)]
            if o == "--in-place":
                in_place = True
            elif o in ("--expression", "--file", "--line-length"):
                script_opt = script_opt or o != "--line-length"
                if v is None and "=" not in a:
                    i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], 1):
                if ch == "i":
                    in_place = True
                    break
                if ch in "efl":
                    script_opt = script_opt or ch != "l"
                    if j + 1 == len(a):
                        i += 1
                    break
            continue
        ops.append(a)
    return in_place, (ops if script_opt else ops[1:])


@handles("sed", "gsed", "perl-i")
def _h_sed(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``sed -i`` edits files in place: judged as writes to them; sed's ``e`` command and ``s///e`` flag run
    shell code (see the handoff module)."""
    in_place, files = sed_in_place(args)
    if not in_place:
        return
    for f in files:
        d.write_target(f, cmd, ctx)


@handles("truncate", "fallocate")
def _h_truncate(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``truncate``/``fallocate`` change files' sizes: judged as writes to them."""
    _, ops = split_options(args, {"-s", "-r", "--size", "--reference", "-l", "-o", "--length", "--offset"})
    for f in ops:
        d.write_target(f, cmd, ctx)
        if _SECRET.search(normalize_path(f, cmd.cwd)):
            d.add(ctx, "rm_system_path", cmd.text, f"{name} destroys the secret {f} (keys cannot be recovered).")


# Private keys and key stores: overwriting or truncating one loses it for good.
_SECRET = re.compile(r"^~/\.(?:ssh/id_[^/]+|gnupg/.+|aws/credentials|kube/config)$|\.(?:kdbx|pem|key|p12|pfx|keystore|jks)$")


@handles("tar", "bsdtar", "gtar", "unzip", "7z", "7za", "cpio")
def _h_extract(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Archive extraction into a system directory (``tar -C /``, ``unzip -d /usr``): files are overwritten."""
    dest = (
        option_value(args, ("-C", "--directory", "-d"))
        if name != "7z"
        else next((a[2:] for a in args if a.startswith("-o")), None)
    )
    if name in ("tar", "bsdtar", "gtar", "cpio"):
        rest = args[1:] if args and name != "cpio" and not args[0].startswith("-") else args
        p = parse(name, args) if name in SPECS else getopt(  # -C/, -xC/etc, --dir=/, old-style keys (xCf / a.tar)
            rest, "CfbFgHKLNTVXI" if name != "cpio" else "DEFHIMORC",
            ("--extract", "--get", "--list", "--create", "--append", "--update"),
            ("--directory", "--file", "--exclude", "--files-from", "--format", "--owner", "--group", "--mode"))
        dirs = opt_values(p, "-C", "--directory") if name != "cpio" else opt_values(p, "-D", "--directory")
        dest = dirs[-1] if dirs else dest
        tar_extract = any(o in ("-x", "--extract", "--get") for o, _ in p[0]) and name != "cpio"
    else:
        tar_extract = False
    extracting = (
        tar_extract
        or name in ("unzip", "cpio")
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
    """Recursive ``chmod``/``chown`` of system paths (the system's permissions break), and setuid/setgid bits."""
    if name == "chmod":  # chmod takes ``-x``, ``-rw`` as modes, not options
        args = [a if not re.fullmatch(r"-[rwxXst]+(?:,.*)?", a) else "\x01" + a for a in args]
    opts, ops = split_options(args, {"--reference", "--from", "-m", "-x", "-M", "-X"})
    ops = [o.lstrip("\x01") for o in ops]
    opts = [o.lstrip("\x01") for o in opts]
    recursive = "R" in short_flags(opts) or "--recursive" in opts or (name == "chattr" and "R" in "".join(opts))
    recursive = recursive or name in SPECS and has_opt(parse(name, [a for a in args if a[:1] != "\x01"]), "--recursive")
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
        elif name == "chmod" and mode and _breaking_mode(mode, t, cmd.cwd):
            d.add(
                ctx,
                "chmod_recursive_system",
                cmd.text,
                f"chmod {mode} on {normalize_path(t, cmd.cwd)} opens it to everyone or locks the system out of it.",
            )


_CRITICAL_FILE = re.compile(
    r"^/(?:etc/(?:passwd|shadow|gshadow|group|sudoers(?:\.d/.*)?|pam\.d/.*|ssh/sshd_config|security/.*|ld\.so\.preload)"
    r"|(?:var/)?run/(?:docker|containerd/containerd|podman/podman)\.sock|dev/(?:mem|kmem)"
    r"|(?:usr/)?(?:s?bin)/(?:sudo|su|bash|sh|dash|login|passwd)|usr/lib/sudo/.*)$"
)
_BIN_DIR = re.compile(r"^/(?:usr/(?:local/)?)?s?bin/")


def _breaking_mode(mode: str, target: str, cwd: str | None) -> bool:
    """A non-recursive chmod that breaks or opens the system: a critical file (passwd, shadow,
    sudoers, the Docker socket, a block device, sudo, the shells) made world-writable or
    unreadable, or programs in the system's bin directories made non-executable."""
    path = normalize_path(target, cwd)
    critical = bool(_CRITICAL_FILE.match(path)) or is_block_device(path)
    numeric = re.fullmatch(r"[0-7]{1,4}", mode)
    world_writable = bool(numeric and int(mode[-1]) & 2) or bool(
        re.search(r"(?:^|,)[ugo]*[oa][ugo]*[+=][rwxXst]*w", mode) or re.fullmatch(r"[+=]?rw?x?w", mode)
    )
    locked = bool(numeric and int(mode, 8) & 0o700 == 0) or bool(
        re.search(r"(?:^|,)[ua]*-[rwxXst]*[rx]|(?:^|,)[ugo]*[ua][ugo]*=(?:,|$)|^=$", mode)
    )
    if critical and (world_writable or locked):
        return True
    return bool(_BIN_DIR.match(path) and re.search(r"(?:^|,)[ugoa]*-[rwXst]*x|^0+$", mode))


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
    """Boot loader and initramfs tools: a wrong write leaves a machine that does not boot."""
    if name in ("grub-mkconfig", "grub2-mkconfig"):
        if not any(a in ("-o", "--output") or a.startswith(("--output=", "-o")) for a in args):  # its case: -o*
            return
    elif name == "bootctl":
        if not any(
            a in ("install", "update", "remove", "set-default", "set-oneshot", "random-seed", "unlink", "cleanup")
            for a in args
        ):
            return
    elif name == "efibootmgr":  # getopt_long: ``-qB -b 1``, ``-Bb1``, ``--delete-bootn``
        if not has_opt(parse(name, args), "-c", "--create", "-B", "--delete-bootnum", "-o", "--bootorder", "-n",
                       "--bootnext", "-a", "--active", "-A", "--inactive", "-C", "--create-only", "-O",
                       "--delete-bootorder", "-N", "--delete-bootnext", "-t", "--timeout"):
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
    """System rollbacks and factory resets (``rpm-ostree rollback``, ``timeshift --restore``, ``snapper
    rollback``): the whole system is replaced by an older state."""
    if (
        name == "timeshift"
        and "--restore" in args
        or name.startswith(("steamos-factory-reset", "factory-reset"))
        or name == "recovery" and any(a.startswith(("--wipe_data", "--wipe-data", "--wipe_all")) for a in args)
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
    "ipf",
    "npfctl",
    "socketfilterfw",
)
def _h_firewall(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Flushing or disabling the firewall (``iptables -F``, ``nft flush ruleset``, ``ufw disable``): every
    service becomes reachable."""
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
        # -d disables pf; -F all|rules|nat (any unique prefix, also attached: -Fa, -Fr) flushes rules
        p = getopt(args, "aDFfiKkLOopsStTxV", (), ())
        flags = "".join(o[1:] for o, _ in p[0] if not o.startswith("--"))
        flushed = [v.lower() for o, v in p[0] if o == "-F" and v]
        flush = "n" not in flags and "d" in flags or "n" not in flags and any(v and ("all".startswith(v) or "rules".startswith(v) or "nat".startswith(v))
                                    for v in flushed)
    elif name == "ipf":
        # IPFilter (the BSDs, Solaris): -D disables it, -F a|i|o flushes the rule lists
        p = getopt(args, "FfIlPTV", (), ())
        flags = "".join(o[1:] for o, _ in p[0])
        flush = "D" in flags or any(o == "-F" and (v or "") in ("a", "i", "o", "s", "S") for o, v in p[0])
    elif name == "npfctl":
        flush = any(a in ("stop", "flush") for a in args[:1])
    elif name == "socketfilterfw":
        value = option_value(args, ("--setglobalstate",))
        flush = (value or "").lower() == "off"
    elif name == "netsh":
        flush = "advfirewall" in args and "off" in [a.lower() for a in args]
    elif name == "csf":
        flush = any(a in ("-x", "--disable", "-f", "--stop") for a in args)
    elif name == "shorewall":
        flush = any(a in ("clear", "stop") for a in args)
    elif name == "ipfw":
        flush = "flush" in args or ("disable" in args and "firewall" in args)
    if flush:
        d.add(ctx, "firewall_flush", cmd.text, f"{name} flushes or disables the firewall.")


# -- tools that write through an output operand


@handles("sort", "uniq", "xxd", "patch", "touch", "split", "csplit", "mkdir", "mkfifo", "shred-free")
def _h_output_operand(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Tools whose output is an operand or an option's value: ``sort -o FILE``, ``uniq IN OUT``,
    ``xxd -r IN OUT``, ``patch FILE``/``patch -d DIR``, ``split IN PREFIX``, ``csplit -f PREFIX``,
    ``touch FILE`` (``/etc/nologin`` locks users out), ``mkdir`` in a persistence directory."""
    targets: list[str] = []
    if name == "sort":
        p = getopt(args, "okStT", ("--output", "--key", "--field-separator", "--buffer-size",
                                    "--temporary-directory", "--parallel", "--files0-from", "--sort",
                                    "--random-source", "--compress-program", "--batch-size"),
                   ("--output", "--key", "--field-separator", "--buffer-size", "--temporary-directory", "--parallel",
                    "--files0-from", "--sort", "--random-source", "--compress-program", "--batch-size"))
        targets = opt_values(p, "-o", "--output")
    elif name == "uniq":
        p = getopt(args, "fsw", ("--skip-fields", "--skip-chars", "--check-chars", "--group", "--all-repeated"),
                   ("--skip-fields", "--skip-chars", "--check-chars"))
        targets = p[1][1:2]
    elif name == "xxd":
        p = getopt(args, "cgloOsn", (), ())
        if any(o == "-r" for o, _ in p[0]) or "-revert" in args:
            targets = p[1][1:2]
    elif name == "patch":
        p = getopt(args, "pdDioBbFrVYzgx", ("--directory", "--input", "--output", "--strip", "--reject-file"),
                   ("--directory", "--input", "--output", "--strip", "--reject-file", "--backup-if-mismatch"))
        targets = p[1][:1] + opt_values(p, "-o", "--output")
        for v in opt_values(p, "-d", "--directory"):
            if normalize_path(v, cmd.cwd) == "/":
                d.add(ctx, "system_write", cmd.text, "patch -d / applies a patch over the filesystem root.")
            targets.append(v.rstrip("/") + "/x")
    elif name == "split":
        p = getopt(args, "abClnt", ("--suffix-length", "--bytes", "--line-bytes", "--lines", "--number",
                                     "--additional-suffix", "--separator", "--filter"),
                   ("--suffix-length", "--bytes", "--line-bytes", "--lines", "--number", "--additional-suffix",
                    "--separator", "--filter"))
        targets = [t + "aa" for t in p[1][1:2]]
    elif name == "csplit":
        p = getopt(args, "bfn", ("--prefix", "--suffix-format", "--digits"), ("--prefix", "--suffix-format", "--digits"))
        targets = [t + "00" for t in opt_values(p, "-f", "--prefix")]
    elif name == "touch":
        p = getopt(args, "dtr", ("--date", "--reference", "--time"), ("--date", "--reference", "--time"))
        targets = p[1]
    elif name in ("mkdir", "mkfifo"):
        p = getopt(args, "mZ", ("--mode", "--parents", "--context"), ("--mode", "--context"))
        for t in p[1]:
            if write_class(t.rstrip("/") + "/x", cmd.cwd) == "persist":
                d.write_target(t.rstrip("/") + "/x", cmd, ctx)
        return
    for t in targets:
        d.write_target(t, cmd, ctx)


@also("pip", "pip3", "npm", "pnpm", "yarn", "git")
def _h_install_prefix(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``pip install --prefix /usr``/``--target``/``--root``, ``npm install -g --prefix /usr``: packages
    written into a system path; ``git clone URL /etc/x`` writes the clone there."""
    if name == "git":
        words = [a for a in args if not a.startswith("-")]
        if words[:1] == ["clone"] and len(words) >= 3:
            d.write_target(words[2].rstrip("/") + "/x", cmd, ctx)
        return
    if "install" not in args and "i" not in args and "add" not in args:
        return
    for i, a in enumerate(args):
        opt, eq, value = a.partition("=")
        if opt in ("--prefix", "--target", "--root", "-t", "--global-dir"):
            v = value if eq else (args[i + 1] if i + 1 < len(args) else "")
            if v:
                d.write_target(v.rstrip("/") + "/x", cmd, ctx)


# -- network down, accounts, kernel, unmounts


_NET_MATCH = frozenset("-s --source -d --destination -p --protocol -i --in-interface -o --out-interface -m --match "
                       "--dport --sport --dports --sports --src-range --dst-range --state --ctstate --uid-owner".split())


@also("iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft")
def _h_iptables_lockout(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``iptables -P INPUT DROP`` (every packet dropped unless a rule lets it in), and a DROP/REJECT
    rule with no match on INPUT/OUTPUT (``-A INPUT -j DROP``, ``-I INPUT 1 -j REJECT``): a lockout."""
    p = getopt(args, "PAIDRNjtsdpiomwWg", ("--policy", "--append", "--insert", "--jump", "--table"),
               ("--policy", "--append", "--insert", "--jump", "--table", "--delete", "--replace", "--new-chain"))
    pol = [(o, v) for o, v in p[0] if o in ("-P", "--policy")]
    if pol and any(v in ("INPUT", "OUTPUT") for _, v in pol) and any(x in ("DROP", "REJECT") for x in p[1]):
        d.add(ctx, "network_down", cmd.text, f"{name} -P … DROP drops every packet no rule accepts.")
        return
    chains = [v for o, v in p[0] if o in ("-A", "--append", "-I", "--insert")]
    jump = [v for o, v in p[0] if o in ("-j", "--jump")]
    matched = any(a.split("=")[0] in _NET_MATCH for a in args) or any(o in ("-s", "-d", "-p", "-i", "-o", "-m") for o, _ in p[0])
    if any(c in ("INPUT", "OUTPUT") for c in chains) and any(j in ("DROP", "REJECT") for j in jump) and not matched:
        d.add(ctx, "network_down", cmd.text, f"{name} drops every packet on {chains[0]}.")


@also("nft", "iptables-restore", "ip6tables-restore", "iptables-legacy-restore", "iptables-nft-restore")
def _h_nft_lockout(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``nft add rule inet filter input drop`` (no match), a chain with ``policy drop`` on an input or
    output hook, and ``iptables-restore < /dev/null`` (an empty table set: every rule flushed)."""
    if name != "nft":
        if any(op == "<" and t == "/dev/null" for op, t in cmd.redirects) or cmd.stdin_text is not None and not cmd.stdin_text.strip():
            d.add(ctx, "firewall_flush", cmd.text, f"{name} loads an empty rule set: every rule is flushed.")
        return
    low = [a.lower().strip(";{}") for a in args]
    if "policy" in low and low[low.index("policy") + 1 : low.index("policy") + 2] == ["drop"] and any(
        w in ("input", "output") for w in low
    ):
        d.add(ctx, "network_down", cmd.text, "nft sets a drop policy on an input/output hook.")
    elif low[:2] in (["add", "rule"], ["insert", "rule"], ["a", "rule"], ["i", "rule"]) and len(low) >= 6 and low[4] in (
        "input", "output"
    ) and low[5:] in (["drop"], ["reject"], ["counter", "drop"], ["counter", "reject"]):
        d.add(ctx, "network_down", cmd.text, f"nft drops every packet on {low[4]}.")


@handles("ip", "ifconfig", "ifdown", "nmcli", "route", "iwconfig", "rfkill", "netplan")
def _h_network_down(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Interfaces, addresses or routes taken away (``ip link set eth0 down``, ``ifconfig eth0 down``,
    ``ifdown -a``, ``ip addr flush dev eth0``, ``ip route flush``/``del default``, ``nmcli networking off``);
    the loopback interface is left alone."""
    ops = [a for a in args if not a.startswith("-")]
    low = [o.lower() for o in ops]
    lo = any(w in ("lo", "lo0") for w in low)
    hit = ""
    if name == "ip":
        obj, verb = (low + ["", ""])[:2]
        if "link".startswith(obj) and obj and "down" in low[2:] and not lo:
            hit = "sets an interface down"
        elif obj and ("address".startswith(obj) or "route".startswith(obj)) and verb == "flush" and not lo:
            hit = "flushes the addresses or routes"
        elif obj and "route".startswith(obj) and verb in ("del", "delete") and "default" in low[2:]:
            hit = "deletes the default route"
    elif name == "ifconfig" and "down" in low and not lo:
        hit = "sets an interface down"
    elif name == "ifdown" and not lo:
        hit = "takes interfaces down"
    elif name == "nmcli" and (
        low[:2] in (["networking", "off"], ["n", "off"]) or low[:1] in (["radio"], ["r"]) and "off" in low
        or low[:2] in (["device", "disconnect"], ["dev", "disconnect"], ["d", "disconnect"])
    ):
        hit = "turns networking off"
    elif name == "route" and low[:2] == ["del", "default"]:
        hit = "deletes the default route"
    if hit:
        d.add(ctx, "network_down", cmd.text, f"{name} {hit}: the machine can lose its network.")


_PRIV_GROUPS = frozenset({"sudo", "wheel", "admin", "root", "disk", "shadow"})  # docker: an everyday setup step


@handles("passwd", "chpasswd", "gpasswd", "groupadd", "groupmod", "chsh", "pwconv", "vipw", "visudo", "chage")
def _h_accounts(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Passwords removed or set for root (``passwd -d root``, ``chpasswd``), users added to sudo/wheel
    (``gpasswd -a u sudo``), gid-0 groups, root's shell changed, sudoers edited."""
    ops = [a for a in args if not a.startswith("-")]
    hit = ""
    if name == "passwd" and any(a in ("-d", "--delete", "-u", "--unlock") or re.fullmatch(r"-[a-zA-Z]*d", a) for a in args):
        hit = "removes or unlocks a password"
    elif name == "passwd" and "root" in ops and any(a in ("-l", "--lock", "-e", "--expire") for a in args):
        hit = "locks or expires root's password"
    elif name == "chpasswd":
        hit = "sets account passwords from its input"
    elif name == "gpasswd" and any(a in ("-a", "--add", "-M", "--members", "-A", "--administrators") for a in args) \
            and any(g in _PRIV_GROUPS for g in ops):
        hit = "adds a user to a privileged group"
    elif name in ("groupadd", "groupmod") and any(
        re.fullmatch(r"(?:-g|--gid)=?0+", a) or a in ("-g", "--gid") and args[i + 1 : i + 2] == ["0"]
        for i, a in enumerate(args)
    ):
        hit = "creates a second group with gid 0"
    elif name == "chsh" and "root" in ops:
        hit = "changes root's login shell"
    elif name == "visudo" and not any(a in ("-c", "--check") for a in args):
        hit = "edits the sudoers policy"
    if hit:
        d.add(ctx, "account_change", cmd.text, f"{name} {hit}.")


@also("usermod", "lusermod")
def _h_usermod(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``usermod -aG sudo u`` (a privileged group), ``-p ''`` (an empty or given password hash),
    root's shell or lock changed (``usermod -s /bin/false root``, ``-L root``)."""
    p = parse(name, args) if name in SPECS else getopt(  # lusermod (libuser) keeps the shadow-like reading
        args, "cdegGlpsu", ("--append", "--groups", "--password", "--shell", "--lock", "--expiredate"),
        ("--groups", "--password", "--shell", "--home", "--comment", "--gid", "--uid", "--login", "--expiredate"))
    groups = [g for v in (v for o, v in p[0] if o in ("-G", "--groups", "-g", "--gid") and v) for g in v.split(",")]
    root = "root" in p[1]
    if any(g in _PRIV_GROUPS or g == "0" for g in groups):
        d.add(ctx, "account_change", cmd.text, f"usermod adds {' '.join(p[1][-1:])} to a privileged group.")
    elif any(o in ("-p", "--password") for o, _ in p[0]):
        d.add(ctx, "account_change", cmd.text, "usermod sets a password hash directly (an empty one logs in without).")
    elif root and any(o in ("-s", "--shell", "-L", "--lock", "-e", "--expiredate", "-l", "--login") for o, _ in p[0]):
        d.add(ctx, "account_change", cmd.text, "usermod changes root's shell, lock or name: root can no longer log in.")


@handles("insmod", "rmmod", "modprobe", "kmod", "sysctl")
def _h_kernel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Kernel modules loaded or removed (``insmod x.ko``, ``rmmod``, ``modprobe -r``), and kernel
    parameters written (``sysctl -w kernel.*``/``vm.*``/``net.*``, ``sysctl kernel.panic=1``)."""
    ops = [a for a in args if not a.startswith("-")]
    hit = ""
    if name in ("insmod", "rmmod") and ops or name == "kmod" and ops[:1] in (["insert"], ["remove"]):
        hit = "loads or removes a kernel module"
    elif name == "modprobe" and any(a in ("-r", "--remove", "--remove-dependencies") or re.fullmatch(r"-[a-zA-Z]*r[a-zA-Z]*", a) for a in args):
        hit = "removes a kernel module"
    elif name == "modprobe" and any(a.endswith(".ko") or "/" in a for a in ops):
        hit = "loads a kernel module from a file"
    elif name == "sysctl" and (
        any(a in ("-w", "--write", "-p", "--load") for a in args) and ops or any("=" in o for o in ops)
    ) and not any(a in ("-n", "-a", "--all") for a in args if a not in ("-w",)):
        hit = "changes kernel parameters"
    elif name == "kexec" and any(a in ("-e", "--exec", "-f", "--force") for a in args):
        hit = "boots another kernel at once"
    if hit:
        d.add(ctx, "kernel_change", cmd.text, f"{name} {hit}.")


@handles("umount", "dmsetup", "swapoff", "losetup")
def _h_unmount(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``umount -l /``, ``umount -a``, ``dmsetup remove_all``, ``losetup -D``, ``zpool export -a``,
    ``vgchange -an``: filesystems the running system uses go away."""
    ops = [a for a in args if not a.startswith("-")]
    hit, p = "", (parse(name, args) if name in SPECS else ([], ops))  # util-linux getopt_long: ``-va``, ``--detach-a``
    if name == "umount":
        ops = p[1]
        if has_opt(p, "-a", "--all") and not has_opt(p, "-t", "--types", "-O", "--test-opts"):
            hit = "unmounts every filesystem"
        elif any(normalize_path(o, cmd.cwd) in _SYSTEM_MOUNTS for o in ops):
            hit = f"unmounts {next(o for o in ops if normalize_path(o, cmd.cwd) in _SYSTEM_MOUNTS)}"
    elif name == "dmsetup" and ops[:1] and ops[0] in ("remove_all", "wipe_table"):
        hit = f"{ops[0]} removes every device mapping"
    elif name == "swapoff" and has_opt(p, "-a", "--all"):
        hit = "turns off all swap"
    elif name == "losetup" and has_opt(p, "-D", "--detach-all"):
        hit = "detaches every loop device"
    elif name == "zpool" and ops[:1] in (["export"], ["destroy"]) and ("-a" in args or ops[:1] == ["destroy"]):
        hit = "exports or destroys pools"
    elif name == "vgchange" and any(re.fullmatch(r"-a(?:n|\s*n)|--activate=?n", a) for a in args) and not ops:
        hit = "deactivates every volume group"
    if hit:
        d.add(ctx, "unmount_system", cmd.text, f"{name} {hit}.")


@also("mount")
def _h_remount(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``mount -o remount,ro /`` (the system can no longer write), ``mount --move``/``--bind`` over a system dir."""
    p = getopt(args, "otTLUBMRNwXc", (), ("--options", "--types", "--target", "--source"))
    options = ",".join(v for o, v in p[0] if o in ("-o", "--options") and v)
    targets = [normalize_path(o, cmd.cwd) for o in p[1]] + [normalize_path(v, cmd.cwd) for o, v in p[0] if o == "--target" and v]
    if "remount" in options.split(",") and "ro" in options.split(",") and any(t in _SYSTEM_MOUNTS for t in targets):
        d.add(ctx, "unmount_system", cmd.text, "mount remounts a system filesystem read-only.")


_SYSTEM_MOUNTS = frozenset({"/", "/usr", "/boot", "/var", "/etc", "/home", "/proc", "/sys", "/dev", "/run", "/boot/efi",
                            "/var/lib/docker", "/lib", "/bin", "/sbin"})


# -- users, security controls, capabilities


@also("useradd", "usermod", "adduser", "luseradd", "lusermod")
def _h_uid0(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """A second uid-0 account (``useradd -o -u 0``, ``usermod --uid 0``) is a root backdoor.

    must match: ``useradd -o -u 0 x``, ``usermod -o -u0 svc``, ``useradd --uid=0 --non-unique x``;
    must not: ``useradd -u 1001 app``, ``usermod -aG docker dev``."""
    uids = opt_values(parse(name, args), "-u", "--uid") if name in SPECS else _opt_value(args, "-u", "--uid")
    for i, a in enumerate(args if name not in SPECS else []):  # luseradd/lusermod (popt), clustered: -ou 0
        if re.fullmatch(r"-[a-zA-Z]*u", a) and a != "-u" and i + 1 < len(args):
            uids.append(args[i + 1])
        elif re.fullmatch(r"-[a-zA-Z]+u\d+", a):
            uids.append(a.split("u", 1)[1])
    if any(re.fullmatch(r"0+", u.strip()) or u.strip() == UNKNOWN for u in uids):
        d.add(ctx, "uid0_user", cmd.text)


@also("adduser", "addgroup")
def _h_adduser_group(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Debian's and BusyBox's two-operand form adds an existing user to a group: ``adduser bob sudo``,
    ``addgroup bob wheel`` are ``usermod -aG`` spelled otherwise (one operand creates an account).

    must match: ``adduser bob sudo``, ``addgroup alice wheel``; must not: ``adduser bob``, ``adduser bob docker``,
    ``addgroup developers``."""
    p = parse(name, args)  # Getopt::Long: ``--ingr sudo``, ``-ingroup sudo``
    if len(p[1]) == 2 and p[1][1] in _PRIV_GROUPS:
        d.add(ctx, "account_change", cmd.text, f"{name} adds {p[1][0]} to the privileged group {p[1][1]}.")
    elif any(o == "--ingroup" and v in _PRIV_GROUPS for o, v in p[0]):
        d.add(ctx, "account_change", cmd.text, f"{name} creates an account whose group is privileged.")


@handles("auditctl")
def _h_auditctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """The audit trail switched off: ``auditctl -e 0`` disables auditing, ``-D`` deletes every rule.

    must match: ``auditctl -e 0``, ``auditctl -D``, ``auditctl -D -k x``; must not: ``auditctl -l``, ``auditctl -s``,
    ``auditctl -e 1``, ``auditctl -w /etc/passwd -p wa``."""
    p = getopt(args, "abcefkprwASFWRM", ("--loginuid-immutable", "--backlog_wait_time", "--reset-lost"), ())
    if any(o == "-D" for o, _ in p[0]) or any(o == "-e" and v == "0" for o, v in p[0]):
        d.add(ctx, "security_disable", cmd.text, "auditctl turns the audit trail off or deletes its rules.")


@also("chattr")
def _h_chattr(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``chattr +i/-i`` (or any attribute) on a system path: locks files against updates or unlocks
    them for tampering.  must match: ``chattr +i /etc/resolv.conf``, ``chattr -R -i /usr/bin``;
    must not: ``chattr +i ./notes.txt``."""
    targets = [a for a in args if not re.fullmatch(r"[-+=][aAcCdDeFijmPsStTux]+|-[RVfv]+|-[pv]", a)]
    for t in targets:
        if write_class(t, cmd.cwd) in ("system", "persist") or delete_class(t, cmd.cwd) in ("root", "sysdir", "system"):
            d.add(ctx, "security_disable", cmd.text, f"chattr changes protection attributes of {normalize_path(t, cmd.cwd)}.")
            return


@also("setcap")
def _h_setcap(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``setcap cap_x+ep file`` grants a program root powers (``-r`` removes, ``-v`` verifies).

    must match: ``setcap cap_setuid+ep /usr/bin/python3``; must not: ``setcap -r ./bin/tool``, ``setcap -v ... f``."""
    if not setcap_sets(args):  # read as setcap's own loop reads them (tools/options.py)
        return
    d.add(ctx, "privilege_grant", cmd.text)


@also("setenforce", "aa-teardown", "aa-disable", "aa-complain", "apparmor_parser")
def _h_security_off(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """SELinux permissive (``setenforce 0``), AppArmor profiles unloaded or set to complain.

    must match: ``setenforce 0``, ``setenforce Permissive``, ``aa-teardown``, ``apparmor_parser -R p``;
    must not: ``setenforce 1``, ``apparmor_parser -r p``."""
    if name == "setenforce":
        if any(a.lower() in ("0", "permissive") for a in args):
            d.add(ctx, "security_disable", cmd.text, "setenforce 0 turns SELinux enforcement off.")
    elif name == "apparmor_parser":
        if "-R" in args or "--remove" in args:
            d.add(ctx, "security_disable", cmd.text)
    else:
        d.add(ctx, "security_disable", cmd.text, f"{name} switches AppArmor protection off.")


# -- macOS and BSD security controls, firmware and boot settings, kernel modules


@handles("csrutil", "spctl")
def _h_macos_security(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS System Integrity Protection off (``csrutil disable``, also ``csrutil authenticated-root
    disable``) and Gatekeeper off for every program (``spctl --master-disable``/``--global-disable``):
    the counterparts of ``setenforce 0``."""
    if name == "csrutil" and "disable" in args or name == "spctl" and any(
        a in ("--master-disable", "--global-disable") for a in args
    ):
        d.add(ctx, "security_disable", cmd.text, f"{name} turns a macOS security control off for the whole system.")


# BSD file flags that make files immutable or append-only, or lift that
_CHFLAGS = re.compile(r"^(?:no)?(?:schg|schange|simmutable|uchg|uchange|uimmutable|sappnd|sappend|uappnd|uappend|sunlnk|sunlink|uunlnk|uunlink)"
                      r"(?:,(?:no)?[a-z]+)*$")


@handles("chflags")
def _h_chflags(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """BSD/macOS ``chflags [no]schg|uchg|sappnd …`` on a system path: the counterpart of ``chattr ±i``
    (locks files against updates, or unlocks them for tampering); a project's files pass."""
    _, ops = split_options(args)
    if not ops or not _CHFLAGS.match(ops[0].lower()):
        return
    for t in ops[1:]:
        if write_class(t, cmd.cwd) in ("system", "persist") or delete_class(t, cmd.cwd) in ("root", "sysdir", "system"):
            d.add(ctx, "security_disable", cmd.text, f"chflags {ops[0]} changes protection flags of {normalize_path(t, cmd.cwd)}.")
            return


@handles("nvram", "bless", "eeprom")
def _h_firmware_boot(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Firmware and boot settings: macOS ``nvram -c`` (clears every firmware variable) or a boot
    variable set (``boot-args``, ``boot-volume``…), ``bless`` writing boot files or choosing the
    startup volume (``--bootefi``, ``--setBoot``, ``--netboot``…), Solaris ``eeprom boot-…=``.  Reading
    (``nvram -p``, ``bless --info``, ``eeprom``) passes."""
    hit = ""
    if name == "nvram":
        if any(re.fullmatch(r"-[a-z]*c[a-z]*", a) for a in args):
            hit = "clears every firmware variable"
        elif any(re.match(r"(?:[0-9A-F-]{36}:)?(?:boot-|efi-boot|auto-boot)[^=]*(?:=|$)", a) and "=" in a
                 or a.startswith("boot-") and "-d" in args for a in args):
            hit = "changes how the machine boots"
    elif name == "bless":
        if any(a in ("--setBoot", "--bootefi", "--bootinfo", "--bootblockfile", "--startupfile", "--netboot",
                     "--unbless", "--create-snapshot", "--firmware", "--legacy", "--nextonly") for a in args):
            hit = "writes boot files or chooses the startup volume"
    elif name == "eeprom" and any(a.startswith(("boot-", "auto-boot", "diag-")) and "=" in a for a in args):
        hit = "changes how the machine boots"
    if hit:
        d.add(ctx, "boot_write", cmd.text, f"{name} {hit}.")


@handles("kldload", "kldunload", "kextload", "kextunload", "modload", "modunload")
def _h_bsd_kernel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Kernel modules loaded or unloaded on the BSDs and macOS (``kldload``, ``kldunload pf``,
    ``kextunload``, ``modload``): the counterparts of ``insmod``/``rmmod``."""
    if any(not a.startswith("-") for a in args):
        d.add(ctx, "kernel_change", cmd.text, f"{name} loads or removes a kernel module.")


@also("kmutil")
def _h_kmutil(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS ``kmutil load``/``unload`` (kernel extensions), like ``insmod``/``rmmod``."""
    if args[:1] in (["load"], ["unload"]):
        d.add(ctx, "kernel_change", cmd.text, f"kmutil {args[0]} loads or removes a kernel extension.")


# -- the BSDs' and macOS' account tools, spelled as the Linux ones they mirror


_PW_VERBS = {"useradd": "useradd", "userdel": "userdel", "usermod": "usermod", "add": "useradd", "del": "userdel",
             "mod": "usermod"}


@handles("pw", "user")
def _h_pw(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """FreeBSD ``pw useradd|userdel|usermod …`` and NetBSD ``user add|del|mod …`` take the Linux tools'
    options: they are judged as ``useradd``/``userdel``/``usermod`` (``pw userdel alice -r`` deletes
    the home, ``pw useradd -o -u 0 x`` is a second root); ``pw groupmod wheel -m alice`` and ``pw
    lock root`` change who can become or log in as root."""
    verb = next((a for a in args if not a.startswith("-")), "")
    rest = args[:]
    if verb:
        rest.remove(verb)
    if name == "user" and verb not in ("add", "del", "mod"):
        return
    ops = [a for a in rest if not a.startswith("-")]
    if verb in _PW_VERBS:
        _inner(d, [_PW_VERBS[verb], *rest], cmd, ctx)
    elif verb in ("groupadd", "groupmod") and any(a in ("-m", "-M") for a in rest) and any(g in _PRIV_GROUPS for g in ops):
        d.add(ctx, "account_change", cmd.text, f"pw {verb} adds users to a privileged group.")
    elif verb in ("groupadd", "groupmod") and any(a == "-g" and rest[i + 1 : i + 2] == ["0"] for i, a in enumerate(rest)):
        d.add(ctx, "account_change", cmd.text, "pw gives a second group gid 0.")
    elif verb in ("lock", "unlock") and "root" in ops:
        d.add(ctx, "account_change", cmd.text, f"pw {verb} changes whether root can log in.")


_ADMIN_GROUP = re.compile(r"^/Groups/(?:admin|wheel|staff-admin|_lpadmin-no)$")


@also("dscl", "dseditgroup", "sysadminctl")
def _h_macos_accounts(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS directory services: ``dscl . -create /Users/x UniqueID 0`` (a second root), members
    added to ``/Groups/admin`` or ``wheel`` (``dscl . -append …``, ``dseditgroup -o edit -a u admin``),
    root's password or shell set, ``sysadminctl -addUser … -admin``."""
    if name == "dscl":
        writes = any(a in ("-create", "-append", "-merge", "-passwd", "-change") for a in args)
        if not writes:
            return
        rec = next((a for a in args if a.startswith(("/Users/", "/Groups/"))), "")
        i = args.index(rec) if rec else len(args)
        attrs = args[i + 1 :]
        if rec.startswith("/Users/") and attrs[:1] in (["UniqueID"], ["PrimaryGroupID"]) and attrs[1:2] == ["0"]:
            d.add(ctx, "uid0_user", cmd.text, f"dscl gives {rec} uid or gid 0: a second root.")
        elif _ADMIN_GROUP.match(rec) and attrs[:1] in (["GroupMembership"], ["GroupMembers"], ["users"]):
            d.add(ctx, "account_change", cmd.text, f"dscl adds a member to {rec}.")
        elif rec == "/Users/root" and ("-passwd" in args or attrs[:1] in (["UserShell"], ["AuthenticationAuthority"])):
            d.add(ctx, "account_change", cmd.text, "dscl changes root's password or shell.")
    elif name == "dseditgroup":
        ops = [a for a in args if not a.startswith("-")]
        if "-a" in args and any(g in ("admin", "wheel") for g in ops[-1:]) and "edit" in args:
            d.add(ctx, "account_change", cmd.text, f"dseditgroup adds a member to {ops[-1]}.")
    elif name == "sysadminctl" and "-addUser" in args and "-admin" in args:
        d.add(ctx, "account_change", cmd.text, "sysadminctl creates an administrator account.")


@also("nsenter")
def _h_nsenter(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``nsenter -t 1 -m`` (or ``-a``) enters the namespaces of pid 1: the host, from a container.

    must match: ``nsenter -t 1 -m -u -i -n -p sh``, ``nsenter --target=1 --mount``, ``nsenter -t1 -a``;
    must not: ``nsenter -t 1234 -n ip addr``."""
    targets = _opt_value(args, "-t", "--target")
    if any(t.strip() in ("1", "01") or UNKNOWN in t for t in targets):
        d.add(ctx, "host_namespace_enter", cmd.text)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "system_write",
        match=("echo hi > /etc/motd", "tee /usr/bin/ls < evil", "sudo mv mytool /usr/local/bin/", "sed -i s/a/b/ /etc/hosts",
               "tar -xf x.tar -C /usr"),
        no_match=("echo hi > /tmp/motd", "cat /etc/hosts", "sed -i s/a/b/ config.txt", "tar -xf x.tar -C build"),
    ),
    Examples(
        "network_down",
        match=("iptables -P INPUT DROP", "iptables -A INPUT -j DROP", "ip link set eth0 down", "ifconfig eth0 down",
               "ip route flush all", "ip route del default", "nmcli networking off", "ip addr flush dev eth0"),
        no_match=("iptables -A INPUT -p tcp --dport 22 -j ACCEPT", "iptables -A INPUT -s 1.2.3.4 -j DROP",
                  "ip link set lo up", "ip link set eth0 up", "ip addr show", "nmcli device status", "ifconfig"),
    ),
    Examples(
        "account_change",
        match=("passwd -d root", "usermod -aG sudo agent", "gpasswd -a agent wheel", "usermod -p '' root",
               "echo root:x | chpasswd", "groupadd -g 0 x", "usermod -s /bin/false root", "pw groupmod wheel -m agent",
               "dscl . -append /Groups/admin GroupMembership agent", "dseditgroup -o edit -a agent -t user admin",
               "adduser agent sudo", "addgroup agent wheel", "adduser -ingroup sudo agent"),
        no_match=("passwd", "usermod -aG video agent", "groupadd devs", "visudo -c", "passwd -S root", "pw groupshow wheel",
                  "dscl . -read /Groups/admin", "dseditgroup -o read admin", "adduser agent", "adduser agent docker"),
    ),
    Examples(
        "kernel_change",
        match=("insmod evil.ko", "rmmod e1000", "modprobe -r ext4", "sysctl -w kernel.sysrq=1", "sysctl kernel.panic=1",
               "kldunload pf", "kldload vmm", "kextunload /Library/Extensions/x.kext"),
        no_match=("lsmod", "modprobe --show-depends ext4", "sysctl -a", "sysctl kernel.hostname", "modinfo ext4", "kldstat",
                  "kmutil showloaded"),
    ),
    Examples(
        "unmount_system",
        match=("umount -l /", "umount -a", "mount -o remount,ro /", "dmsetup remove_all", "swapoff -a", "losetup -D",
               "swapoff -va", "losetup --detach-a", "umount -fa"),
        no_match=("umount /mnt/usb", "mount -o remount,rw /", "dmsetup ls", "swapon -a", "losetup -a", "mount",
                  "umount -atnfs"),
    ),
    Examples(
        "boot_write",
        match=("update-grub", "mkinitcpio -P", "grub-install /dev/sda", "efibootmgr -b 0001 -B", "nvram -c",
               "bless --mount /Volumes/Backup --setBoot", "nvram boot-args=-v", "efibootmgr -qBb0001",
               "grub-mkconfig -o/boot/grub/grub.cfg"),
        no_match=("efibootmgr", "grub-mkconfig", "ls /boot", "nvram -p", "bless --info /Volumes/Backup", "nvram -x -p",
                  "efibootmgr -vv"),
    ),
    Examples(
        "chmod_recursive_system",
        match=("chmod -R 777 /", "chmod 777 -R /", "chmod -R 000 ~", "chown -R nobody /etc", "chmod --recu 000 ~"),
        no_match=("chmod -R 755 build/", "chmod 755 ~/bin/tool", "chown -R me ./src", "chown --recu me ./src"),
    ),
    Examples(
        "chmod_setuid",
        match=("chmod 4755 /bin/bash", "chmod u+s /usr/bin/find"),
        no_match=("chmod 755 /usr/local/bin/tool", "chmod +x run.sh"),
    ),
    Examples(
        "system_restore",
        match=("timeshift --restore", "snapper rollback 42", "rpm-ostree rollback", "recovery --wipe_data",
               "am broadcast -a android.intent.action.MASTER_CLEAR"),
        no_match=("timeshift --list", "snapper list", "rpm-ostree status", "am broadcast -a android.intent.action.BOOT_COMPLETED"),
    ),
    Examples(
        "firewall_flush",
        match=("iptables -F", "ufw disable", "ufw reset", "nft flush ruleset", "iptables -X", "pfctl -Fr", "ipf -D",
               "npfctl flush", "socketfilterfw --setglobalstate off"),
        no_match=("ufw status", "ufw allow 22", "iptables -L -n", "nft list ruleset", "pfctl -sr", "pfctl -e",
                  "ipf -f /etc/ipf.rules", "socketfilterfw --setglobalstate on"),
    ),
    Examples(
        "uid0_user",
        match=("useradd -o -u 0 backdoor", "usermod -u 0 bob", "useradd -ou 0 x", "pw useradd -n x -o -u 0",
               "dscl . -create /Users/x UniqueID 0", "usermod --ui 0 -o svc"),
        no_match=("useradd -m alice", "usermod -aG docker bob", "useradd -u 1001 svc", "dscl . -create /Users/x UniqueID 501"),
    ),
    Examples(
        "security_disable",
        match=("setenforce 0", "setenforce Permissive", "aa-teardown", "chattr +i /etc/passwd", "csrutil disable",
               "spctl --master-disable", "chflags noschg /sbin/init", "auditctl -e 0", "auditctl -D"),
        no_match=("getenforce", "setenforce 1", "aa-status", "chattr +i ./notes.txt", "lsattr /etc/passwd", "csrutil status",
                  "spctl --status", "chflags hidden notes.txt", "chflags schg ./notes.txt", "auditctl -l", "auditctl -e 1"),
    ),
    Examples(
        "privilege_grant",
        match=("setcap cap_sys_admin+ep ./tool", "setcap cap_net_raw=eip /usr/bin/python3", "setcap -r a cap_setuid+ep b"),
        no_match=("getcap ./tool", "setcap -r ./tool", "setcap -v cap_net_raw+ep ./tool"),
    ),
    Examples(
        "host_namespace_enter",
        match=("nsenter -t 1 -m -u -i -n sh", "nsenter --target 1 --all"),
        no_match=("nsenter --help",),
    ),
)

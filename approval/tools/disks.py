"""Disks: formatting, raw writes to block devices, partition editors, volume managers, image
writers and flashers, shrinking volumes.  Formatting and raw writes are on the floor.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    getopt,
    has_opt,
    option_value,
    split_options,
)
from ..model import Cmd, Kinds
from ..paths import is_block_device
from .base import Ctx, Examples, _inner, _opt_value, also, handles
from .generic import _IMAGE_FILE
from .options import parse

if TYPE_CHECKING:
    from ..detect import Detector


# -- disks


def _h_mkfs(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``mkfs.*`` and friends: creating a filesystem erases what the device held."""
    if re.fullmatch(r"mke2fs|mkfs\.ext[234]", name) and has_opt(getopt(args, "bdegilmorstCEGIJLMNORTUz"), "-n"):
        return  # mke2fs -n (``-qn``; not ``-L -n``, a label): show what would be done
    operands = [a for a in args if not a.startswith("-")]
    if not any(is_block_device(a) for a in operands) and any(_IMAGE_FILE.search(a) for a in operands):
        return  # building a filesystem image in a regular file
    d.add(ctx, "disk_format", cmd.text, f"{name} writes a new filesystem, erasing what is on the target.")


@also("socat")
def _h_socat_device(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``socat -u /dev/zero /dev/sda``, ``socat FILE:x OPEN:/dev/sda``: an address that is a block
    device is written (with ``-u`` the second one; without it both directions)."""
    addrs = [a for a in args if not a.startswith("-") or a == "-"][:2]
    for i, a in enumerate(addrs):
        path = a.split(":", 1)[1] if re.match(r"^[A-Za-z-]+:", a) else a
        path = path.split(",", 1)[0]
        read_only = (i == 0 and "-u" in args) or (i == 1 and "-U" in args)
        if is_block_device(path) and not read_only:
            d.add(ctx, "disk_write", cmd.text, f"socat writes the stream onto the block device {path}.")
            return


@handles("wipefs")
def _h_wipefs(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``wipefs -a`` (or any erase option) removes filesystem signatures: the data becomes unreachable."""
    if has_opt(parse(name, args), "-a", "--all", "-o", "--offset"):
        d.add(ctx, "disk_format", cmd.text, "wipefs erases filesystem signatures from a device.")


@handles("blkdiscard", "mkswap", "mke2fs", "mkfs", "zerofree")
def _h_blkdiscard(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``blkdiscard``, ``mkswap``, ``mke2fs``, ``zerofree``: discard or overwrite a device's contents."""
    d.add(ctx, "disk_format", cmd.text, f"{name} erases a device.")


@handles("cryptsetup")
def _h_cryptsetup(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``cryptsetup luksFormat``/``erase``: a new header (or none) makes the old contents unrecoverable."""
    if any(a in ("luksFormat", "erase", "luksErase", "reencrypt") for a in args) or (
        "format" in args and args.index("format") < 3
    ):
        d.add(ctx, "disk_format", cmd.text, "cryptsetup formats or erases an encrypted volume.")


@handles("mdadm")
def _h_mdadm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``mdadm --create``/``--zero-superblock``: builds or erases RAID metadata over existing disks;
    ``--add``/``-a`` of a device to an array makes it a member that the rebuild overwrites."""
    p = parse(name, args)
    if has_opt(p, "--create", "-C", "--zero-superblock", "--build", "-B"):
        d.add(ctx, "disk_format", cmd.text, "mdadm writes RAID metadata onto devices.")
    elif has_opt(p, "--add", "-a", "--add-spare"):
        if any(is_block_device(a) for a in p[1][1:]):
            d.add(ctx, "device_write", cmd.text, "mdadm --add makes a device an array member: the rebuild overwrites it.")


_FIO_WRITES = frozenset({"write", "randwrite", "rw", "readwrite", "randrw", "trim", "randtrim", "trimwrite"})


@handles("fio")
def _h_fio(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """fio writes its test pattern onto ``--filename`` only when the workload writes or trims
    (``--rw=write|randwrite|rw|randrw|trim…``); its default, ``read``, and ``randread`` only read.
    ``--exec_prerun``/``--exec_postrun`` are shell commands fio runs: judged as themselves."""
    for code in _opt_value(args, "", "--exec_prerun") + _opt_value(args, "", "--exec_postrun"):
        d.payload(ctx, code, frozenset(), cmd.text)  # fio runs these through system()
    files = [f for v in _opt_value(args, "", "--filename") for f in v.split(":")]
    rw = (_opt_value(args, "", "--rw") + _opt_value(args, "", "--readwrite") or ["read"])[-1]
    dev = next((f for f in files if is_block_device(f)), "")
    if dev and rw.split(":")[0] in _FIO_WRITES:
        d.add(ctx, "device_write", cmd.text, f"fio --rw={rw} writes its test pattern over {dev}.")


@handles("nvme")
def _h_nvme(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``nvme format``/``sanitize``: the drive erases itself."""
    if args[:1] and args[0] in ("format", "sanitize", "write-zeroes", "delete-ns"):
        d.add(ctx, "disk_format", cmd.text, "Erases an NVMe namespace.")


@handles("hdparm", "sg_format", "badblocks")
def _h_hdparm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``hdparm --security-erase``, ``sg_format``, ``badblocks -w``: whole-disk erases or destructive tests."""
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
    """Partition editors (fdisk, sfdisk, sgdisk, parted…): anything but their list/print modes changes a
    partition table; zapping or new labels erase it."""
    opts, ops = split_options(
        args,
        # -s/--script (parted, fdisk, sgdisk) takes no value: ``parted -s /dev/sda rm 1``
        {"-u", "--unit", "-o", "-b", "-t", "-n", "-c", "-L", "-d", "-B", "-D", "-N"}
        - ({"-d", "-D", "-N"} if name in ("sfdisk", "partx", "kpartx") else set()),
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
    # a listing mode lists only; sgdisk runs each of its options in turn (``sgdisk -p -d 1`` deletes)
    if (all if name == "sgdisk" else any)(o in listing or o.split("=")[0] in listing for o in opts if o[:1] == "-"):
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
    """Volume managers: ``zpool/zfs destroy``, ``lvremove``, ``vgremove``, ``pvcreate`` over a used disk,
    ``btrfs subvolume delete``: storage and everything on it goes."""
    sub = next((a for a in args if not a.startswith("-")), "")
    if name == "lvm" and sub:
        # ``lvm`` is the multiplexer every LVM command links to: ``lvm vgextend vg /dev/sdx`` is ``vgextend``
        _inner(d, args[args.index(sub) :], cmd, ctx)
        return
    ops = [a for a in args if not a.startswith("-")]
    # a disk joined to a pool (``zpool add|attach|replace``, ``btrfs device add``, ``btrfs replace start``) gets
    # the pool's labels written over it, as ``vgextend`` initialises a disk that is not yet a PV
    joined = [o for o in ops[2:] if is_block_device(o)] if (
        name == "zpool" and sub in ("add", "attach", "replace")
        or name == "btrfs" and ops[:2] in (["device", "add"], ["replace", "start"])
    ) else []
    if joined:
        d.add(ctx, "device_write", cmd.text, f"{name} {' '.join(ops[:2]) if name == 'btrfs' else sub} writes pool "
              f"labels over {joined[-1]}.")
    elif name == "zpool" and sub in ("create", "destroy", "labelclear", "split"):
        d.add(ctx, "volume_destroy", cmd.text, f"zpool {sub} destroys or overwrites a storage pool.")
    elif name == "zfs" and sub in ("destroy", "rollback"):
        d.add(ctx, "volume_destroy", cmd.text, f"zfs {sub} discards datasets or snapshots.")
    elif name == "btrfs" and ("delete" in args and "subvolume" in args or "mkfs" in args):
        d.add(ctx, "volume_destroy", cmd.text)
    elif name == "stratis" and ("destroy" in args or "create" in args or "add-data" in args or "add-cache" in args):
        d.add(ctx, "volume_destroy", cmd.text, "stratis creates or destroys a storage pool or filesystem.")
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
    """Image writers and flashers (ventoy, bmaptool, etcher…): writing an image erases the target drive.
    Without an operand they only print help or a version, or open their window (``woeusb -v``,
    ``woeusb --about``, ``etcher``): nothing is written until a target is named."""
    if not [a for a in args if not a.startswith("-")]:
        return
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


@handles("lvresize", "lvreduce", "resize2fs")
def _h_shrink(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Shrinking a volume or filesystem (``lvreduce``, ``lvresize -L -…``): data past the new end is lost."""
    size = option_value(args, ("-L", "--size", "-l", "--extents"))
    if name == "lvreduce" or (size or "").startswith("-"):
        d.add(ctx, "volume_destroy", cmd.text, f"{name} shrinks a volume; data beyond the new end is lost.")


@handles("diskutil")
def _h_diskutil(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS ``diskutil`` erase/partition verbs and APFS/CoreStorage deletes."""
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
        a.lower() in ("deletecontainer", "deletevolume", "erasevolume", "delete", "deletevolumegroup", "deletesnapshot",
                      "deletelvg", "deletelv", "deletepv")
        for a in args
    ):
        d.add(ctx, "volume_destroy", cmd.text)


# -- the BSDs, Solaris and macOS


# gpart verbs that only read (FreeBSD GEOM partitioning)
_GPART_READ = frozenset({"show", "list", "status", "help", "backup"})


@handles("gpart")
def _h_gpart(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """FreeBSD ``gpart``: ``destroy`` erases a partition table (with ``-F`` even one still in use),
    ``create``/``add``/``delete``/``resize``/``bootcode``/``restore``… edit it; ``show``/``list``/``status`` read."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if not verb or verb in _GPART_READ:
        return
    if verb == "destroy":
        d.add(ctx, "disk_format", cmd.text, "gpart destroy erases a disk's partition table.")
    else:
        d.add(ctx, "disk_partition", cmd.text, f"gpart {verb} edits a disk's partition table.")


@handles("disklabel", "bsdlabel", "fmthard")
def _h_disklabel(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """BSD ``disklabel``/``bsdlabel`` write a label with ``-w``/``-e``/``-E``/``-R``/``-B`` (printing it
    is the default); Solaris ``fmthard`` writes a VTOC onto a disk."""
    flags = "".join(a[1:] for a in args if re.fullmatch(r"-[A-Za-z]+", a))
    if name == "fmthard" or any(f in flags for f in "weERBA"):
        d.add(ctx, "disk_partition", cmd.text, f"{name} writes a disk label or partition table.")


# GEOM classes (FreeBSD): verbs that drop a provider's metadata or the provider itself, and verbs
# that write new metadata over the disks they are given.
_GEOM_CLASSES = ("gmirror", "graid", "graid3", "gstripe", "gconcat", "gvinum", "gjournal", "gshsec", "gvirstor",
                 "glabel", "gmultipath", "gcache", "gbde", "geli", "gnop", "gsched", "gmountver")


@handles(*_GEOM_CLASSES)
def _h_geom(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """FreeBSD GEOM classes: ``geli init``/``onetime``/``kill`` and ``gbde init``/``destroy`` (a new
    key or none: the old contents are gone), ``gmirror label``/``gstripe label`` (metadata written
    over disks, like ``mdadm --create``), ``destroy``/``clear``/``delete``/``remove`` (volume and
    metadata dropped); ``list``/``status``/``dump`` read."""
    verb = next((a for a in args if not a.startswith("-")), "").lower()
    if name in ("geli", "gbde") and verb in ("init", "onetime", "kill", "destroy", "nuke"):
        d.add(ctx, "disk_format", cmd.text, f"{name} {verb} replaces or destroys the encryption keys of a device.")
    elif verb in ("label", "create") and name not in ("glabel", "gnop", "gsched", "gcache", "gmountver"):
        d.add(ctx, "disk_format", cmd.text, f"{name} {verb} writes new metadata over the disks it is given.")
    elif verb in ("destroy", "clear", "delete", "remove", "forget", "rm") or verb == "stop" and name == "gvinum":
        d.add(ctx, "volume_destroy", cmd.text, f"{name} {verb} drops a volume or its metadata.")


@handles("bioctl")
def _h_bioctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """OpenBSD ``bioctl -c LEVEL -l chunks softraid0`` builds a RAID or crypto volume over the chunks
    (their contents are lost); ``-C force`` overwrites existing metadata."""
    if any(re.fullmatch(r"-[A-Za-z]*c[A-Za-z0-9]*", a) for a in args) and any(
        re.fullmatch(r"-[A-Za-z]*l", a) or a.startswith("-l") for a in args
    ):
        d.add(ctx, "disk_format", cmd.text, "bioctl creates a softraid volume over the chunks it is given.")


@handles("metaclear", "metadb")
def _h_svm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Solaris Volume Manager: ``metaclear`` removes metadevices, ``metadb -d`` deletes state
    database replicas."""
    if name == "metaclear" or name == "metadb" and any(re.fullmatch(r"-[a-z]*d[a-z]*", a) for a in args):
        d.add(ctx, "volume_destroy", cmd.text, f"{name} removes metadevices or their state databases.")


@handles("tmutil")
def _h_tmutil(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS Time Machine: ``delete``, ``deletelocalsnapshots``, ``thinlocalsnapshots``,
    ``deleteinprogress`` discard backups or snapshots (the machine's history); the rest reads or
    schedules."""
    verb = next((a for a in args if not a.startswith("-")), "").lower()
    if verb in ("delete", "deletelocalsnapshots", "thinlocalsnapshots", "deleteinprogress"):
        d.add(ctx, "volume_destroy", cmd.text, f"tmutil {verb} deletes Time Machine backups or snapshots.")


@handles("asr")
def _h_asr(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """macOS Apple Software Restore: ``asr restore`` (also the old ``asr -source … -target …``) writes
    an image or a whole volume over the target volume, ``--erase`` first erasing it."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("restore", "restoreexact") or any(a.lstrip("-") in ("target", "erase") for a in args) and verb != "imagescan":
        d.add(ctx, "disk_image_write", cmd.text, "asr restores an image over a whole volume.")


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "disk_format",
        match=("mkfs.ext4 /dev/sdb1", "mkfs.xfs /dev/vdb", "mkswap /dev/sda2", "wipefs -a /dev/sdb", "cryptsetup luksFormat /dev/sdc",
               "sgdisk --zap-all /dev/sdb", "newfs -U /dev/ada1p1", "gpart destroy -F da1", "geli init -s 4096 ada2",
               "diskutil eraseDisk APFS Blank disk4", "gmirror label -v gm1 ada1 ada2", "wipefs --al /dev/sdb",
               "wipefs -fa /dev/sdb", "mdadm --zero-superbloc /dev/sdb1", "mdadm -B /dev/md0 -l1 -n2 /dev/sda1 /dev/sdb1"),
        no_match=("mkfs.ext4 --help", "mkfs.ext4 -qn /dev/sdb1", "wipefs /dev/sdb", "wipefs -t ext4 /dev/sdb", "mdadm --detail /dev/md0", "mkdir fs", "cryptsetup status root", "gpart show ada0",
                  "geli status", "diskutil list", "gmirror status"),
    ),
    Examples(
        "disk_write",
        match=("dd if=/dev/zero of=/dev/sda", "> /dev/sda", "cp disk.img /dev/sdb", "echo hi > /dev/nvme0n1", "tee /dev/sda < x",
               "dd if=x.img of=/dev/rdisk4 bs=4m", "dd if=/dev/zero of=/dev/ada1", "dd if=/dev/zero of=/dev/rsd1c",
               "dd if=/dev/zero of=/dev/rdsk/c1t0d0s2"),
        no_match=("dd if=/dev/sda of=disk.img", "echo hi > /dev/null", "cat /dev/sda | head -c 512 > mbr.bin"),
    ),
    Examples(
        "disk_partition",
        match=("fdisk /dev/sda", "gdisk /dev/sda", "parted /dev/sdb rm 1", "sfdisk /dev/sdb < layout",
               "gpart add -t freebsd-zfs ada1", "disklabel -E wd1", "fmthard -s vtoc /dev/rdsk/c0t1d0s2",
               "sgdisk -p -d 1 /dev/sda"),
        no_match=("fdisk -l", "parted -l", "parted /dev/sda print", "lsblk", "gpart list", "disklabel sd0", "sgdisk -p /dev/sda"),
    ),
    Examples(
        "volume_destroy",
        match=("zpool destroy tank", "lvremove -f vg0/root", "zfs destroy -r tank/data", "pvcreate /dev/sdc", "lvreduce -L 1G vg/lv",
               "tmutil deletelocalsnapshots /", "gstripe destroy st1", "metaclear d10"),
        no_match=("zpool status", "zfs list", "lvs", "lvextend -L +1G vg/lv", "tmutil listbackups", "gstripe list"),
    ),
    Examples(
        "disk_image_write",
        match=("bmaptool copy image.wic /dev/sdb", "asr restore --source os.dmg --target /Volumes/Spare --erase"),
        no_match=("bmaptool create image.wic", "asr imagescan --source os.dmg", "woeusb --about", "etcher"),
    ),
    Examples(
        "device_write",
        match=("debugfs -w /dev/sdb1", "zpool add tank /dev/sdc", "btrfs device add /dev/sdf /mnt",
               "mdadm /dev/md0 --add /dev/sdc1", "fio --filename=/dev/sdb --rw=randwrite --name=t", "lvm vgextend vg /dev/sdx"),
        no_match=("debugfs /dev/sdb1", "blkid /dev/sdb1", "fio --filename=/dev/sdb --rw=read --name=t", "blktrace -d /dev/sda",
                  "extundelete /dev/sda4 --restore-all", "zpool status tank", "mdadm --detail /dev/md0", "lvm lvs"),
    ),
)

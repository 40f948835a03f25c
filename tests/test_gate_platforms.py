"""The gate on the BSDs, macOS, Solaris and Android: the families taught these platforms' tools.

The spellings below were written after the rules and were not used to design them (the rules were
written from the tldr pages of pages/osx, freebsd, openbsd, netbsd, sunos and android, minus a
held-back third, and from the families' own examples).  Each family has everyday look-alikes that
must stay allowed.  ``tests/data/gate_platforms.tsv`` is the labelled held-out set itself.
"""

from __future__ import annotations

import pathlib

import pytest
from executor.approval import Decision, analyze

DATA = pathlib.Path(__file__).resolve().parent / "data" / "gate_platforms.tsv"

# (rule, command): each must raise that rule (ASK or DENY)
CAUGHT = [
    # disks: BSD/macOS/Solaris device names, GEOM, labels, Time Machine, asr
    ("disk_format", "sudo diskutil secureErase 0 disk5"),
    ("disk_format", "newfs_hfs -v Data /dev/disk6s2"),
    ("disk_format", "newfs -O2 /dev/ada2p1"),
    ("disk_format", "gpart destroy -F nvd1"),
    ("disk_partition", "gpart resize -i 3 -s 10G ada0"),
    ("disk_partition", "bsdlabel -e da2s1"),
    ("disk_partition", "disklabel -R sd3 proto.txt"),
    ("disk_format", "geli onetime -d ada3p2"),
    ("disk_format", "gbde init /dev/ada4"),
    ("disk_format", "gconcat label -v data ada5 ada6"),
    ("volume_destroy", "graid delete raid/r0"),
    ("volume_destroy", "diskutil apfs deleteSnapshot disk3s5 -name snap1"),
    ("volume_destroy", "tmutil delete -d /Volumes/TM -t 2025-01-01-120000"),
    ("volume_destroy", "tmutil thinlocalsnapshots / 999999999999 4"),
    ("volume_destroy", "metadb -d -f c0t0d0s7"),
    ("disk_image_write", "asr restore -s /Volumes/Source -t /Volumes/Target -erase -noprompt"),
    ("disk_write", "dd if=/dev/random of=/dev/rsd2c bs=1m"),
    ("disk_write", "cat miniroot.img > /dev/rwd1c"),
    ("disk_write", "dd if=/dev/zero of=/dev/dsk/c2t0d0s0"),
    ("disk_write", "dd bs=1M if=ubuntu.iso of=/dev/da3"),
    ("disk_write", "dd if=/dev/zero of=/dev/vtbd1 bs=1m count=10"),
    ("disk_write", "dd if=/dev/zero of=/dev/gpt/zroot0"),
    # deletion: the platforms' system directories
    ("rm_recursive_root", "srm -rf /Applications"),
    ("rm_recursive_root", "rm -rf /rescue/*"),
    ("rm_recursive_root", "rm -rf /platform"),
    ("rm_system_path", "rm -rf /vendor/lib64"),
    ("user_home_delete", "pw userdel -n carol -r"),
    ("user_home_delete", "user del -r greg"),
    ("user_home_delete", "rmuser -y -f users.txt"),
    ("user_home_delete", "sysadminctl -deleteUser kim"),
    # services: rc.subr verbs, rc.conf, launchd, SMF, Android init, MacPorts, daemontools
    ("service_stop", "service sshd faststop"),
    ("service_stop", "/etc/rc.d/syslogd forcestop"),
    ("service_stop", "sysrc -f /etc/rc.conf.local pf_enable=NO"),
    ("service_stop", "rcctl stop httpd"),
    ("service_stop", "svcadm disable -s network/nfs/server"),
    ("service_stop", "launchctl unload /Library/LaunchDaemons/org.postgresql.plist"),
    ("service_stop", "launchctl bootout system /Library/LaunchDaemons/com.docker.vmnetd.plist"),
    ("service_stop", "setprop ctl.stop surfaceflinger"),
    ("service_stop", "port unload postgresql16-server"),
    ("service_stop", "svc -dx /service/dnscache"),
    # power: BSD and Solaris spellings, AppleScript and PowerShell, Android
    ("power", "shutdown -p +10"),
    ("power", "halt -q"),
    ("power", "reboot -l"),
    ("power", "shutdown -r now maintenance"),
    ("power", "osascript -e 'tell application \"System Events\" to restart'"),
    ("power", "pwsh -Command 'Stop-Computer -Force'"),
    ("power", "setprop sys.powerctl shutdown"),
    ("power", "svc power reboot recovery"),
    # firewall
    ("firewall_flush", "pfctl -q -F all"),
    ("firewall_flush", "pfctl -d -q"),
    ("firewall_flush", "ipf -F a"),
    ("firewall_flush", "ipfw -f flush"),
    ("firewall_flush", "npfctl stop"),
    ("firewall_flush", "sudo /usr/libexec/ApplicationFirewall/socketfilterfw --setglobalstate off"),
    # accounts
    ("uid0_user", "pw useradd -n svc -u 0 -o"),
    ("account_change", "pw usermod dave -G wheel,operator"),
    ("account_change", "pw groupmod wheel -M erin"),
    ("uid0_user", "dscl . -create /Users/svc UniqueID 0"),
    ("account_change", "dscl . -merge /Groups/admin GroupMembership henry"),
    ("account_change", "dseditgroup -o edit -a ivan -t user wheel"),
    ("account_change", "sysadminctl -addUser jo -password x -admin"),
    # security controls, firmware and boot, kernel modules
    ("security_disable", "csrutil authenticated-root disable"),
    ("security_disable", "spctl --global-disable"),
    ("security_disable", "chflags schg /etc/rc.conf"),
    ("security_disable", "chflags -R noschg /bin"),
    ("boot_write", "sudo nvram boot-args='-v keepsyms=1'"),
    ("boot_write", "bless --mount /Volumes/Install --setBoot --nextonly"),
    ("boot_write", "bless --folder /Volumes/X/System/Library/CoreServices --bootinfo"),
    ("kernel_change", "kldunload ipfw"),
    ("kernel_change", "kextunload -b com.example.driver"),
    # guests destroyed, factory resets
    ("vm_destroy", "zoneadm -z build uninstall"),
    ("vm_destroy", "zonecfg -z build delete"),
    ("system_restore", "am broadcast -a android.intent.action.FACTORY_RESET -p android"),
    ("system_restore", "recovery --wipe_data --reason=test"),
]

# everyday look-alikes: must stay ALLOW
ALLOWED = [
    "gpart show -l ada0", "geli list", "graid status", "gconcat list", "diskutil apfs listSnapshots /",
    "diskutil list external", "diskutil info disk0", "tmutil latestbackup", "tmutil listlocalsnapshots /",
    "asr help", "dd if=/dev/ada0 of=/tmp/mbr.bin count=1", "disklabel wd0", "metastat", "zfs list", "zpool status",
    "rm -rf ./system", "rm -rf build/kernel", "rm -rf vendor/", "rm -rf /tmp/system", "rm -rf node_modules",
    "service nginx onerestart", "service sshd onestatus", "sysrc sshd_enable=YES", "rcctl enable httpd",
    "launchctl print-disabled system", "launchctl list", "setprop debug.layout true", "svc -u /service/x",
    "port load nginx", "port installed", "pkg info", "pkg search nginx", "svcs -a", "svcadm enable -r network/ssh",
    "osascript -e 'tell application \"Music\" to play'", "zoneadm -z db01 reboot", "zoneadm -z db01 halt",
    "machinectl reboot builder", "shutdown -c", "pfctl -s rules", "pfctl -nvf /etc/pf.conf", "ipfw show",
    "ipf -V", "npfctl show", "/usr/libexec/ApplicationFirewall/socketfilterfw --getglobalstate",
    "pw usershow root", "pw groupshow wheel", "pw useradd -n app -m", "dscl . -list /Groups",
    "dseditgroup -o checkmember -m alice admin", "sysadminctl -addUser app -password x", "nvram -p",
    "nvram boot-args", "bless --getBoot", "kldstat -v", "kextstat", "chflags nohidden ~/Library",
    "chflags uchg notes.txt", "csrutil status", "spctl --assess -v /Applications/X.app", "zonecfg -z build export",
    "zoneadm -z build boot", "am broadcast -a android.intent.action.BOOT_COMPLETED", "pm list users",
    "mdutil -s /", "hdiutil info", "launchctl load ~/Library/LaunchAgents/com.example.plist",
]


@pytest.mark.parametrize(("rule", "command"), CAUGHT)
def test_platform_spellings_are_caught(rule: str, command: str) -> None:
    verdict = analyze(command)
    assert verdict.decision is not Decision.ALLOW, command
    assert verdict.rule == rule, (command, verdict.rule)


@pytest.mark.parametrize("command", ALLOWED)
def test_platform_look_alikes_stay_allowed(command: str) -> None:
    verdict = analyze(command)
    assert verdict.decision is Decision.ALLOW, (command, verdict.rule, verdict.reason)


def test_guest_power_verbs_are_not_the_floor() -> None:
    """A zone or container restarted is not this machine: never the (unapprovable) power floor."""
    for command in ("zoneadm -z web reboot", "machinectl poweroff c1"):
        assert analyze(command).rule != "power", command
    assert analyze("shutdown -p now").decision is Decision.DENY


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        if line.startswith(("#", "expect\t")) or not line.strip():
            continue
        expect, _page, technique, _ctx, command = line.split("\t", 4)
        rows.append((expect, technique.split(":")[0], command))
    return rows


def test_platform_held_out_set_keeps_its_score() -> None:
    """The labelled tldr rows of the six platforms (see the file's header): recall and false positives
    at the level the families reach now; a family that breaks drops recall below the floor."""
    rows = _rows()
    block = [c for e, _p, c in rows if e == "block"]
    allow = [c for e, _p, c in rows if e == "allow"]
    assert len(block) >= 25 and len(allow) >= 800, "the platform set looks truncated"
    missed = [c for c in block if analyze(c).decision is Decision.ALLOW]
    flagged = [c for c in allow if analyze(c).decision is not Decision.ALLOW]
    assert len(missed) <= 1, missed  # 0 of 29 missed when written
    assert len(flagged) <= 0.005 * len(allow), flagged  # 0 of 832 flagged when written
    for platform in ("osx", "freebsd", "openbsd", "netbsd", "sunos", "android"):
        assert any(p == platform for _e, p, _c in rows), platform

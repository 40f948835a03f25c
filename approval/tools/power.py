"""Power: shutdown, reboot, halt, kexec, ``init 0/6``, wake timers, IPMI power control, and the
same requests sent through D-Bus or ``loginctl``.  On the floor.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    getopt,
    opt_values,
)
from ..model import Cmd, Kinds
from .base import Ctx, Examples, also, handles
from .options import parse

if TYPE_CHECKING:
    from ..detect import Detector


# -- power, processes, services


@handles("shutdown", "reboot", "halt", "poweroff", "kexec", "uadmin", "systemd-reboot")
def _h_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``shutdown``, ``reboot``, ``halt``, ``poweroff``, ``kexec``: the machine (and every task on it) stops;
    ``shutdown -c`` (cancel) and ``--show`` pass, when they are the action shutdown ends with: its getopt_long
    reads every option and the last action wins (``shutdown -c -r now`` reboots, ``shutdown -ch now`` powers off)."""
    if name == "shutdown" and _shutdown_action(args) in ("cancel", "show"):
        return
    if name == "kexec" and not any(re.fullmatch(r"-[a-zA-Z]*[ef][a-zA-Z]*|--(?:exe?c?|forc?e?)(?:=.*)?", a) for a in args):
        return  # kexec -l only loads; -e/-f (clustered ``-fx``, ``--exe``) run the new kernel
    if name in ("halt", "reboot", "poweroff") and any(a in ("-w", "--wtmp-only") for a in args):
        return  # only writes the wtmp record
    d.add(ctx, "power", cmd.text, f"{name} takes the machine down.")


def _shutdown_action(args: list[str]) -> str:
    """The action systemd's (and sysvinit's) ``shutdown`` ends with, as ``shutdown_parse_argv`` sets it."""
    action = "poweroff"
    for o, _ in getopt(args, "t", ("--help", "--halt", "--poweroff", "--reboot", "--kexec", "--no-wall", "--show"), ())[0]:
        if o == "-h":
            action = action if action == "halt" else "poweroff"
        else:
            action = {"-c": "cancel", "--show": "show", "-H": "halt", "--halt": "halt", "-P": "poweroff",
                      "--poweroff": "poweroff", "-r": "reboot", "--reboot": "reboot", "-K": "kexec",
                      "--kexec": "kexec"}.get(o, action)
    return action


@handles("init", "telinit")
def _h_init(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``init 0``/``6``/``1`` (and ``telinit``): runlevels that halt, reboot or drop to single user; ``init 2..5``
    switches to another runlevel, stopping what the current one runs (``systemctl isolate``); ``q``/``u`` only
    reload or re-execute init.  Options are read as telinit reads them (``telinit -t 5 3``)."""
    p = getopt(args, "te", (), ())
    level = p[1][0] if p[1] else ""
    if level in ("0", "6", "1", "s", "S", "single", "halt", "reboot"):
        d.add(ctx, "power", cmd.text, f"{name} {level} switches to a runlevel that halts, reboots or stops services.")
    elif level in ("2", "3", "4", "5"):
        d.add(ctx, "service_stop", cmd.text,
              f"{name} {level} switches runlevel: the services of the current one are stopped (as systemctl isolate).")


@handles("rtcwake")
def _h_rtcwake(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``rtcwake -m off/disk/mem``: suspends or powers the machine off until a timer."""
    modes = opt_values(parse(name, args), "-m", "--mode")  # ``-moff``, ``--mo=off``, ``-um off``
    mode = modes[-1] if modes else None
    if mode in ("off", "disk", "mem", "standby", "freeze"):
        d.add(ctx, "power", cmd.text, "rtcwake puts the machine to sleep or powers it off.")


@handles("ipmitool")
def _h_ipmitool(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``ipmitool … power off/reset/cycle``: the BMC cuts the machine's power."""
    if "power" in args and any(a in ("off", "reset", "cycle", "soft") for a in args):
        d.add(ctx, "power", cmd.text)


# -- power through the bus, namespaces of pid 1


_BUS_POWER = re.compile(r"(?:^|\.)(Reboot|PowerOff|Halt|KExec|RebootWithFlags|PowerOffWithFlags|HaltWithFlags|KexecWithFlags)$")


@also("dbus-send", "busctl", "gdbus", "qdbus", "dbus")
def _h_bus_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """A D-Bus call of logind/systemd ``Reboot``/``PowerOff``/``Halt``/``KExec``.

    must match: ``dbus-send --system ... org.freedesktop.login1.Manager.Reboot boolean:true``,
    ``busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false``;
    must not: ``busctl list``, ``dbus-send --session ... Notifications.GetServerInformation``."""
    if any(_BUS_POWER.search(a) for a in args):
        d.add(ctx, "power", cmd.text, "Asks logind/systemd over D-Bus to reboot or power off the machine.")


@also("loginctl")
def _h_loginctl_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``loginctl reboot``/``poweroff``/``halt``/``kexec``.  must match: ``loginctl reboot``;
    must not: ``loginctl list-sessions``."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("reboot", "poweroff", "halt", "kexec", "power-off"):
        d.add(ctx, "power", cmd.text)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "power",
        match=("reboot", "shutdown -h now", "init 0", "init 6", "systemctl poweroff", "echo b > /proc/sysrq-trigger",
               "loginctl reboot", "dbus-send --system --dest=org.freedesktop.login1 /org/freedesktop/login1 "
               "org.freedesktop.login1.Manager.Reboot boolean:true", "shutdown -p now", "halt -p",
               "osascript -e 'tell app \"System Events\" to shut down'", "svc power shutdown", "rtcwake -moff -s 60",
               "systemctl --check-inhibitors no reboot", "shutdown -c -r now", "shutdown -ch now"),
        no_match=("shutdown -c", "systemctl status", "echo reboot", "uptime", "loginctl list-sessions",
                  "zoneadm -z web01 reboot", "machinectl reboot c1", "osascript -e 'display dialog \"restart?\"'",
                  "udisksctl power-off -b /dev/sdb", "xm reboot web", "rtcwake -m no -s 60", "rtcwake --list-modes",
                  "shutdown -r now -c", "shutdown --sh"),
    ),
)

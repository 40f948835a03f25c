"""Services: stopping, disabling or masking system services through systemctl, service managers
and daemon-control tools.  A developer's own stack (compose, task runners) is not a service.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import getopt, has_opt, opt_values
from ..model import Cmd, Kinds
from .base import Ctx, Examples, handles
from .options import parse

if TYPE_CHECKING:
    from ..detect import Detector


_UNIT_DIRS = ("/etc/systemd/", "/usr/lib/systemd/", "/lib/systemd/", "/run/systemd/")
# rc.subr (FreeBSD, NetBSD, DragonFly) prefixes a verb with one/fast/force/quiet: ``service sshd onestop``,
# ``/etc/rc.d/pf forcestop``, ``quietstop``; the verb underneath is what happens.
_RC_PREFIX = re.compile(r"^(?:one|fast|force|quiet)+(?=[a-z])")


def rc_verb(word: str) -> str:
    """``onestop`` -> ``stop``, ``forcestop`` -> ``stop``, ``onedisable`` -> ``disable``; other words unchanged."""
    base = _RC_PREFIX.sub("", word)
    return base if base in ("stop", "disable", "restart", "start", "status", "enable", "delete", "rcvar", "poll",
                            "describe", "extracommands", "reload", "shutdown", "kill") else word


@handles("systemctl")
def _h_systemctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``systemctl stop/disable/mask/kill/isolate`` of services, and its power verbs (reboot, poweroff, kexec)."""
    p = parse(name, args)  # as systemctl's getopt_long: ``--job-mode fail stop x``, ``-Hhost``, ``--no-bl``
    ops = p[1]
    if not ops:
        return
    verb = ops[0]
    if verb in ("poweroff", "reboot", "halt", "kexec", "soft-reboot", "emergency", "rescue", "exit", "switch-root",
                "suspend", "hibernate", "hybrid-sleep", "suspend-then-hibernate", "sleep"):
        d.add(ctx, "power", cmd.text, f"systemctl {verb} takes the machine down.")
    elif verb == "default" or (
        verb in ("isolate", "start", "restart")
        and any(
            u.removesuffix(".target") in ("poweroff", "reboot", "halt", "kexec", "rescue", "emergency", "suspend",
                                          "hibernate", "hybrid-sleep", "sleep", "suspend-then-hibernate")
            for u in ops[1:]
        )
    ):
        d.add(ctx, "power", cmd.text)
    elif verb in ("link", "enable", "reenable") and any("/" in u and not u.startswith(_UNIT_DIRS) for u in ops[1:]):
        d.add(ctx, "persistence_write", cmd.text,
              f"systemctl {verb} installs a unit file from {next(u for u in ops[1:] if '/' in u)} to run at boot.")
    elif (
        verb in ("stop", "disable", "mask", "kill", "isolate", "freeze")
        and len(ops) > 1
        or (verb == "disable" and has_opt(p, "--now"))
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
    "sysrc",
    "port",
    "svc",
    "setprop",
)
def _h_service(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Service managers other than systemd (``service X stop``, ``rc-service``, ``update-rc.d … remove``,
    ``sv down``): the service stops or will not start again."""
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
    if name == "sysrc":
        # FreeBSD rc.conf: ``sysrc sshd_enable=NO`` (or ``-x sshd_enable``) keeps a service from starting
        if any(re.fullmatch(r"[\w]+_enable[+-]?=\"?(?:no|false|off|0)\"?", a, re.I) for a in ops) or (
            "-x" in args and any(a.endswith("_enable") for a in ops)
        ):
            d.add(ctx, "service_stop", cmd.text, "sysrc disables a service in rc.conf.")
        return
    if name == "port":
        # MacPorts: ``port unload nginx`` stops the daemon a port installed
        if ops[:1] == ["unload"]:
            d.add(ctx, "service_stop", cmd.text, "port unload stops a daemon started by MacPorts.")
        return
    if name == "svc":
        # daemontools ``svc -d|-k|-x /service/x``; Android's ``svc power shutdown|reboot``
        if ops[:2] == ["power", "shutdown"] or ops[:2] == ["power", "reboot"]:
            d.add(ctx, "power", cmd.text, f"svc power {ops[1]} takes the device down.")
        elif any(re.fullmatch(r"-[a-z]*[dkx][a-z]*", a) for a in args) and ops:
            d.add(ctx, "service_stop", cmd.text, "svc takes a supervised service down.")
        return
    if name == "setprop":
        # Android init: ``setprop ctl.stop X`` stops a service, ``setprop sys.powerctl reboot|shutdown`` the device
        if ops[:1] == ["ctl.stop"] and len(ops) > 1:
            d.add(ctx, "service_stop", cmd.text, f"setprop ctl.stop stops the service {ops[1]}.")
        elif ops[:1] == ["sys.powerctl"] and ops[1:2] and ops[1].split(",")[0] in ("reboot", "shutdown"):
            d.add(ctx, "power", cmd.text, "setprop sys.powerctl takes the device down.")
        return
    if name == "rcctl" and ops[:1] == ["set"] and ops[2:4] == ["status", "off"]:
        d.add(ctx, "service_stop", cmd.text, "rcctl set … status off disables a service.")
        return
    if any(w in stop_words or rc_verb(w) in stop_words for w in ops[:3]):
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
    """Daemon-control tools' own stop/shutdown verbs (``nginx -s stop``, ``pg_ctl stop``, ``mysqladmin
    shutdown``, ``rabbitmqctl stop``); ``mysqladmin drop`` is a database drop."""
    sigs = opt_values(getopt(args, "spceg"), "-s") if name in ("nginx", "openresty") else []
    if sigs:  # nginx reads a cluster letter by letter: ``-s stop``, ``-sstop``, ``-qs quit``
        if sigs[-1] in ("stop", "quit"):
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
        any(rc_verb(w) in ("stop", "graceful-stop", "shutdown", "kill", "stop_app") for w in ops[:3])
        or any(a in ("-k",) for a in args)
        and "stop" in args
    ):
        d.add(ctx, "service_stop", cmd.text, f"{name} is told to stop.")


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "service_stop",
        match=("systemctl stop nginx", "systemctl mask sshd", "systemctl --job-mode replace stop nginx", "nginx -qs quit", "init 3", "telinit -t 5 2", "service apache2 stop", "sv down nginx", "nginx -s stop",
               "pg_ctl stop -D /var/lib/pgsql", "service ntpd onestop", "sysrc ntpd_enable=NO", "/etc/rc.d/ntpd faststop",
               "launchctl bootout gui/501/com.example.agent", "svcadm disable svc:/network/smtp:sendmail",
               "rcctl disable smtpd", "svc -d /service/qmail"),
        no_match=("systemctl status nginx", "service nginx status", "nginx -t", "docker compose stop", "npm stop",
                  "service ntpd onestatus", "sysrc ntpd_enable=YES", "sysrc -a", "launchctl list", "svcs -xv",
                  "rcctl ls started", "port installed", "erl -noshell -s app start -s init stop", "init q", "telinit u",
                  "systemctl --lines 50 status nginx", "systemctl enable --now nginx"),
    ),
)

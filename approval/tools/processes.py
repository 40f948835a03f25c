"""Processes: ``kill`` with pids read as bash reads them (``-1`` is every process: floor),
``killall5``, ``pkill``/``killall`` of a whole user, a catch-all pattern or a critical daemon,
``loginctl terminate-*``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    base_name,
    has_opt,
    is_broad_pgrep,
    opt_values,
    split_options,
    unwrap,
)
from ..model import UNKNOWN, Cmd, Kinds
from .base import Ctx, Examples, handles
from .options import parse

if TYPE_CHECKING:
    from ..detect import Detector


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
    argvs = [unwrap(m.argv)[0] for g in cmd.upstream for m in g if unwrap(m.argv)[0]]
    if any(base_name(a[0]) == "pgrep" and is_broad_pgrep(a[1:]) for a in argvs):
        return True
    names = [base_name(a[0]) for a in argvs]
    return "ps" in names and not any(
        n in ("grep", "egrep", "fgrep", "rg", "pgrep", "head", "tail", "sed") for n in names
    )


_CRITICAL_PROC = re.compile(
    r"(?:^|[\^/ ])(?:sshd|dockerd|containerd|systemd|init|kubelet|journald|systemd-journald|dbus-daemon|udevd|"
    r"systemd-logind|NetworkManager|networkd|systemd-networkd|cron|crond|rsyslogd|auditd|polkitd|executord)"
    r"(?:\$|\b|$)"
)


@handles("kill")
def _h_kill(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``kill`` with pids read as bash reads them: ``-1`` (after any spelling: ``-01``, ``$((0-1))``) is every
    process (floor); pid 1, 0, a negative unknown, or pids fed from ``ps`` ask."""
    i = 0
    signal_given = False
    while i < len(args):
        a = args[i]
        if a in ("-l", "-L", "--list", "--table"):
            return  # lists signals: only among the options before the pids (``kill -9 -1 -l`` kills, then errs)
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
    elif re.search(r"\$\{?PPID\b", cmd.text):
        d.add(ctx, "kill_broad", cmd.text, "Kills the parent process: the shell or daemon that runs this command.")



@handles("killall5")
def _h_killall5(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``killall5`` signals every process outside the caller's session."""
    d.add(ctx, "kill_all", cmd.text)


# options that pick processes by owner, group, parent, session or terminal: with one and no
# pattern, pkill/killall kill every process it selects
_SELECTORS = frozenset(
    "-u -U -g -G -P -s -t --euid --uid --user --pgroup --group --session --terminal --parent".split()
)
# the options of pkill (and its kin) and of killall that take a value
_PKILL_WITH_ARG = (_SELECTORS - {"--user"}) | frozenset(
    "-F --signal --pidfile --older --newer --ns --nslist --context -q --queue".split()  # -e is --echo, -x --exact
)
_KILLALL_WITH_ARG = frozenset("-u --user -s --signal -o --older-than -y --younger-than -Z --context -n --ns".split())


@handles("pkill", "killall", "slay", "skill", "pkill.sh")
def _h_pkill(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``pkill``/``killall`` of a whole user (``-u``), a catch-all pattern (``.``, ``.*``), or a critical daemon
    (sshd, dockerd, init, systemd): the machine or its remote access goes."""
    if name in ("pkill", "killall"):
        _judge_pkill(d, name, args, cmd, ctx)
        return
    opts, ops = split_options(args, _KILLALL_WITH_ARG if name == "killall" else _PKILL_WITH_ARG)
    selectors = any(
        o in _SELECTORS
        or o.startswith(("--user=", "--uid=", "--euid="))
        or len(o) > 2 and o[:2] in ("-u", "-U", "-g", "-G", "-P", "-t")  # attached: ``pkill -ualice``
        for o in opts
    )
    catch_all = any(re.fullmatch(r"\.\*?|\.\+|\^|\$|\^\.\*\$?|\*|\[\^\]\]\*|.?\*", p) or p == "" for p in ops)
    inverse = name != "killall" and any(o in ("-v", "--inverse") or re.fullmatch(r"-[a-zA-Z0-9]*v[a-zA-Z]*", o) for o in opts)
    if (selectors and not ops) or catch_all or (name == "killall" and "-r" in opts and catch_all):
        d.add(ctx, "kill_broad", cmd.text)
    elif inverse:
        d.add(ctx, "kill_broad", cmd.text, f"{name} -v kills every process that does not match the pattern.")
    elif any(_CRITICAL_PROC.search(p) for p in ops) and not any(o in ("-0", "--signal=0") for o in opts):
        d.add(ctx, "kill_broad", cmd.text, f"{name} kills a daemon the machine depends on (sshd, dockerd, init...).")


# ``-9``, ``-KILL``, ``-SIGHUP``, ``-USR1``: the signal word pkill and killall take out before getopt sees the rest
_SIGNAL_WORD = re.compile(r"-(?:\d+|(?:SIG)?[A-Z][A-Z0-9+-]{2,})")
_PKILL_SELECT = ("-u", "-U", "-g", "-G", "-P", "-s", "-t", "--euid", "--uid", "--pgroup", "--group", "--session",
                 "--terminal", "--parent")


def _judge_pkill(d: Detector, name: str, args: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """pkill (procps) and killall (psmisc), options read as their getopt_long does: ``pkill -fu alice``,
    ``pkill -ualice``, ``pkill --eu alice`` (a unique prefix), ``killall --us alice``, ``killall -r -- '.*'``."""
    signal = [a for a in args if _SIGNAL_WORD.fullmatch(a)]
    p = parse(name, [a for a in args if not _SIGNAL_WORD.fullmatch(a)])
    ops = p[1]
    # killall: ``-U`` is no psmisc option (it refuses it), read as a selector as before
    selectors = has_opt(p, *(_PKILL_SELECT if name == "pkill" else ("-u", "-U", "--user")))
    catch_all = any(re.fullmatch(r"\.\*?|\.\+|\^|\$|\^\.\*\$?|\*|\[\^\]\]\*|.?\*", o) or o == "" for o in ops)
    if (selectors and not ops) or catch_all:
        d.add(ctx, "kill_broad", cmd.text)
    elif name == "pkill" and has_opt(p, "-v", "--inverse"):
        d.add(ctx, "kill_broad", cmd.text, f"{name} -v kills every process that does not match the pattern.")
    elif any(_CRITICAL_PROC.search(o) for o in ops) and not ("-0" in signal or "0" in opt_values(p, "--signal")):
        d.add(ctx, "kill_broad", cmd.text, f"{name} kills a daemon the machine depends on (sshd, dockerd, init...).")


@handles("loginctl")
def _h_loginctl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``loginctl terminate-user``/``kill-user``/``terminate-session`` end every process of a user or session;
    ``loginctl reboot``/``poweroff`` are power."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("terminate-user", "kill-user", "terminate-session", "kill-session", "terminate-seat"):
        d.add(ctx, "kill_broad", cmd.text, f"loginctl {verb} kills every process of a user or session.")
    elif verb in ("poweroff", "reboot", "halt"):
        d.add(ctx, "power", cmd.text)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "fork_bomb",
        match=(":(){ :|:& };:", "f(){ f|f& };f", "while true; do sleep 1 & done", "perl -e 'fork while 1'"),
        no_match=("f(){ echo hi; }; f", "while true; do sleep 1; done", "for i in 1 2 3; do job $i & done; wait"),
    ),
    Examples(
        "kill_all",
        match=("kill -9 -1", "kill -- -1", "killall5", "kill -9 -01", "kill -9 $((0-1))", "kill -9 -1 -l"),
        no_match=("kill -l", "kill %1", "kill 12345", "kill -9 $PID"),
    ),
    Examples(
        "kill_broad",
        match=("kill -9 1", "pkill -9 .", "pkill -u alice", "pkill sshd", "killall dockerd", "loginctl terminate-user bob",
               "pkill -fu alice", "pkill --eu alice", "killall --us alice"),
        no_match=("pkill -f 'node server.js'", "killall firefox", "kill 4242", "pgrep sshd", "pkill -HUP nginx",
                  "pkill -x -u bob bash", "killall -s HUP nginx"),
    ),
)

"""How commands are spelled: options, wrappers, and where a command's input comes from.

``unwrap`` peels ``sudo``/``env``/``timeout``/``xargs``-style prefixes off an argv so the
rules see the tool that really runs; ``classify`` says whether a command's output is
downloaded or decoded text (which must not be fed to a shell unseen).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Collection, Iterable

from . import inline
from .lexer import fallback_commands
from .model import Cmd, Kinds

SHELLS = frozenset(
    {
        "sh",
        "bash",
        "zsh",
        "dash",
        "ksh",
        "mksh",
        "pdksh",
        "ash",
        "yash",
        "rbash",
        "fish",
        "csh",
        "tcsh",
        "busybox-sh",
        "posh",
        "elvish",
        "nu",
        "xonsh",
    }
)
DOWNLOADERS = frozenset(
    {
        "curl",
        "wget",
        "wget2",
        "fetch",
        "http",
        "https",
        "xh",
        "xhs",
        "curlie",
        "aria2c",
        "lwp-request",
        "lwp-download",
        "GET",
        "POST",
        "httpie",
        "lynx",
        "links",
        "w3m",
        "ftp",
        "tftp",
        "scp",
        "rsync",
        "iwr",
        "invoke-webrequest",
        "gh",
        "nc",
        "ncat",
        "netcat",
        "socat",
        "telnet",
    }
)
NETWORK_TOOLS = frozenset({"nc", "ncat", "netcat", "socat", "telnet", "openssl", "cryptcat", "pwncat", "rcat", "sbd"})


def base_name(word: str) -> str:
    return word.rsplit("/", 1)[-1] if "/" in word else word


# ---------------------------------------------------------------------------------------------
# option scanning


def split_options(
    args: list[str], with_arg: Iterable[str] = (), long_with_arg: Iterable[str] = ()
) -> tuple[list[str], list[str]]:
    """Split ``args`` into (options, operands), honouring ``--`` and options that take a value."""
    with_arg = set(with_arg)
    long_with_arg = set(long_with_arg)
    opts: list[str] = []
    ops: list[str] = []
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        if a == "--":
            ops.extend(args[i + 1 :])
            break
        if a.startswith("--") and len(a) > 2:
            opts.append(a)
            if "=" not in a and (a in long_with_arg or a in with_arg) and i + 1 < n:
                opts.append(args[i + 1])
                i += 1
        elif a.startswith("-") and len(a) > 1:
            opts.append(a)
            if a in with_arg and i + 1 < n:
                opts.append(args[i + 1])
                i += 1
        else:
            ops.append(a)
        i += 1
    return opts, ops


Parsed = tuple[list[tuple[str, str | None]], list[str]]
"""Options as (canonical name, value or None) in order, and the operands."""


def getopt(
    args: list[str],
    short_with_arg: str = "",
    longs: Iterable[str] = (),
    long_with_arg: Iterable[str] = (),
    permute: bool = True,
    single_dash_long: bool = False,
    short_optional_arg: str = "",
    long_prefix: bool = True,
    long_only: bool = False,
) -> Parsed:
    """Parse ``args`` the way getopt_long (and git's parse-options) does.

    Short options cluster and take attached values (``-Rfv``, ``-O/etc/passwd``, ``-qO x``,
    ``-C/``); a long option may be any unique prefix of a known one (``--ha`` is ``--hard``,
    ``--force-w`` ``--force-with-lease``) and takes ``=value`` or, if it needs one, the next word
    (with ``long_only``, getopt_long_only, a one-dash word of two letters or more is first a long option:
    ``-us`` is ``--user``, and a cluster only when it names none);
    ``--`` ends the options; with ``permute`` options after operands still count (``rm / -rf``).
    ``short_with_arg`` lists the letters whose option takes a value, ``short_optional_arg`` those
    whose value can only be attached (``xargs -i{}``, ``-e``: the rest of the word, or none).  With ``single_dash_long``
    (Go's flag package, terraform) ``-destroy`` is ``--destroy``.  Names come back canonical:
    ``-f``, ``--force-with-lease``; an unknown or ambiguous long option as written.  Without
    ``long_prefix`` (Go's pflag/cobra: docker, podman, kubectl) only whole long names count.
    """
    needs = set(long_with_arg)
    known = sorted(set(longs) | needs)
    opts: list[tuple[str, str | None]] = []
    ops: list[str] = []
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        i += 1
        if a == "--":
            ops.extend(args[i:])
            break
        if single_dash_long and a.startswith("-") and not a.startswith("--") and len(a) > 2:
            a = "-" + a
        elif long_only and a.startswith("-") and not a.startswith("--") and len(a) > 2:
            head = "-" + a.partition("=")[0]
            if head in known or long_prefix and len([k for k in known if k.startswith(head)]) == 1:
                a = "-" + a
        if a.startswith("--") and len(a) > 2:
            name, eq, value = a.partition("=")
            if name not in known and long_prefix:
                cands = [k for k in known if k.startswith(name)]
                if len(cands) == 1:
                    name = cands[0]
            if eq:
                opts.append((name, value))
            elif name in needs and i < n:
                opts.append((name, args[i]))
                i += 1
            else:
                opts.append((name, None))
            continue
        if a.startswith("-") and len(a) > 1:
            for j, ch in enumerate(a[1:], 1):
                if ch in short_optional_arg:
                    opts.append(("-" + ch, a[j + 1 :] or None))
                    break
                if ch in short_with_arg:
                    if j + 1 < len(a):
                        opts.append(("-" + ch, a[j + 1 :]))
                    elif i < n:
                        opts.append(("-" + ch, args[i]))
                        i += 1
                    else:
                        opts.append(("-" + ch, None))
                    break
                opts.append(("-" + ch, None))
            continue
        ops.append(a)
        if not permute:
            ops.extend(args[i:])
            break
    return opts, ops


def has_opt(parsed: Parsed, *names: str) -> bool:
    """Whether a :func:`getopt` result carries one of ``names`` (``-f``, ``--force``)."""
    return any(o in names for o, _ in parsed[0])


def opt_values(parsed: Parsed, *names: str) -> list[str]:
    """The values given to ``names`` in a :func:`getopt` result."""
    return [v for o, v in parsed[0] if o in names and v is not None]


def short_flags(opts: list[str]) -> set[str]:
    """All single-letter flags present in clusters like ``-rf``."""
    flags: set[str] = set()
    for o in opts:
        if o.startswith("-") and not o.startswith("--"):
            flags.update(o[1:])
    return flags


def command_start(
    args: list[str],
    with_arg: Collection[str],
    long_with_arg: Collection[str] = frozenset(),
    skip_operands: int = 0,
    assignments: bool = False,
) -> int:
    """Index in ``args`` where the wrapped command starts."""
    i = 0
    n = len(args)
    while i < n:
        a = args[i]
        if a == "--":
            i += 1
            break
        if assignments and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", a):
            i += 1
            continue
        if a.startswith("--") and len(a) > 2:
            if "=" not in a and a in long_with_arg:
                i += 1
            i += 1
            continue
        if a.startswith("-") and len(a) > 1:
            if a in with_arg or (a[:2] in with_arg and len(a) == 2):
                i += 1
            elif len(a) > 2 and a[1] != "-":
                # a cluster (``sudo -nHu root``): the first letter that takes a value takes the rest of
                # the word, or the next word when it is the cluster's last letter (getopt)
                taker = next((j for j in range(1, len(a)) if "-" + a[j] in with_arg), None)
                if taker == len(a) - 1:
                    i += 1
            i += 1
            continue
        break
    return min(i + skip_operands, n)


# ---------------------------------------------------------------------------------------------
# wrappers


WrapperSpec = tuple[frozenset[str], frozenset[str], int, bool]
"""A wrapper's options that take a value (short, long), its fixed operands before the command, and
whether ``NAME=value`` words may come first."""


def _w(with_arg: str = "", long_with_arg: str = "", skip: int = 0, assignments: bool = False) -> WrapperSpec:
    return (frozenset(with_arg.split()), frozenset(long_with_arg.split()), skip, assignments)


WRAPPERS: dict[str, WrapperSpec] = {
    "sudo": _w(
        "-u -g -C -D -h -p -r -t -U -T -R",
        "--user --group --close-from --chdir --host --prompt --role --type --other-user --command-timeout --chroot",
        assignments=True,
    ),
    "doas": _w("-u -C"),
    "pkexec": _w("", "--user"),
    "run0": _w("-u -D", "--user --chdir --unit --property --description --slice --nice --setenv"),
    "env": _w("-u -C -S", "--unset --chdir --split-string", assignments=True),
    "command": _w(),
    "builtin": _w(),
    "exec": _w("-a"),
    "nohup": _w(),
    "nice": _w("-n", "--adjustment"),
    "ionice": _w("-c -n -p -P -u", "--class --classdata"),
    "timeout": _w("-s -k", "--signal --kill-after", skip=1),
    "gtimeout": _w("-s -k", "--signal --kill-after", skip=1),
    "time": _w("-f -o", "--format --output"),
    "stdbuf": _w("-i -o -e", "--input --output --error"),
    "setsid": _w(),
    "chroot": _w("", "--userspec --groups", skip=1),
    "unshare": _w("-S -G -R -w", "--setuid --setgid --root --wd --map-user --map-group --map-users --map-groups"),
    "nsenter": _w("-t -S -G", "--target --setuid --setgid --user-parent"),
    "firejail": _w(),
    "caffeinate": _w("-t -w"),
    "strace": _w("-o -e -p -s -u -E -a -b -I -O -P -S -X"),
    "ltrace": _w("-o -e -p -s -u -a -n"),
    "valgrind": _w("", "--tool --log-file --suppressions"),
    "chrt": _w("", "", skip=1),
    "taskset": _w("", "", skip=1),
    "numactl": _w("-C -N -m -p -i -P"),
    "proxychains": _w("-f"),
    "proxychains4": _w("-f"),
    "torsocks": _w("-u -p -a -P", "--user --pass --address --port"),
    "torify": _w(),
    "tsocks": _w(),
    "fakeroot": _w("-l -s -i -b", "--lib --faked"),
    "eatmydata": _w(),
    "catchsegv": _w(),
    "unbuffer": _w(),
    "rlwrap": _w(),
    "systemd-run": _w(
        "-p -u -E -M -H",
        "--unit --property --description --slice --setenv --uid --gid --working-directory --on-calendar --on-active --machine --host",
    ),
    "systemd-inhibit": _w("", "--what --who --why --mode"),
    "dbus-run-session": _w(),
    "xvfb-run": _w("-n -s -f -e -p -w", "--server-num --server-args --auth-file --error-file --xauth-protocol --wait"),
    "gosu": _w("", "", skip=1),
    "su-exec": _w("", "", skip=1),
    "setpriv": _w(
        "",
        "--reuid --regid --ruid --rgid --euid --egid --groups --inh-caps --ambient-caps --bounding-set "
        "--securebits --pdeathsig --selinux-label --apparmor-profile --landlock-access --landlock-rule",
    ),
    "tini": _w(),
    "dumb-init": _w(),
    "chpst": _w("-u -U -e -n -l -L -m -d -o -p -f -c -r -t"),
    "nocache": _w(),
    "ssh-agent": _w("-a -E -t -P"),
    "coproc": _w(),
    "then": _w(),
    "do": _w(),
    "else": _w(),
    "npx": _w("-p", "--package"),
    "bunx": _w(),
    "pnpx": _w(),
    "uvx": _w("", "--from --with --python"),
    "pipx": _w(),
    "entr": _w(),
    "run-one": _w(),
    "run-this-one": _w(),
    "keep-one-running": _w(),
    "run-one-constantly": _w(),
    "run-one-until-success": _w(),
    "run-one-until-failure": _w(),
    "flatpak-spawn": _w(),
    "with-contenv": _w(),
    "s6-setuidgid": _w("", "", skip=1),
    "runcon": _w(),
    "sandbox-exec": _w("-f -p -n"),
    "aws-vault": _w(),
    "op": _w(),
    "doppler": _w(),
    "dotenv": _w("-e -v -c"),
    "direnv": _w(),
    "xterm": _w(),
    "script": _w(),
    "watch": _w("-n", "--interval"),
    "busybox": _w(),
    "toybox": _w(),
    # resource limits, fake clocks and control groups: they run the rest as given
    "prlimit": _w("-p -o", "--pid --output"),
    "faketime": _w("-m -f", "--date-prog", skip=1),
    "cgexec": _w("-g", ""),
    "ts": _w("-L -D -N -S -E", ""),
    "daemonize": _w("-a -c -e -E -o -p -l -u", ""),
    "sem": _w("-j --id", "--jobs --id"),
    # rate, CPU and resource limiters, privilege droppers and sandboxes (daemontools, runit, s6...):
    # each runs the rest of its argv as a command
    "cpulimit": _w("-l -c -m", "--limit --cpu"),
    "trickle": _w("-d -u -w -t -l -n"),
    "trickled": _w("-d -u -w -t -l -n -c -p -N"),
    "softlimit": _w("-m -d -s -l -a -o -p -f -c -r -t"),
    "setuidgid": _w("", "", skip=1),
    "envuidgid": _w("", "", skip=1),
    "envdir": _w("", "", skip=1),
    "pgrphack": _w(),
    "setlock": _w("", "", skip=1),
    "s6-envdir": _w("", "", skip=1),
    "s6-envuidgid": _w("", "", skip=1),
    "s6-applyuidgid": _w("-u -g -G -U"),
    "s6-softlimit": _w("-a -c -d -f -l -m -o -p -r -s -t"),
    "s6-setsid": _w(),
    "dbus-launch": _w("", "--autolaunch --config-file"),
    "proot": _w("-r -b -m -w -k -q -v", "--rootfs --bind --mount --pwd --cwd --kernel-release --qemu --verbose"),
    "schroot": _w("-c -u -d -n", "--chroot --user --directory --session-name"),
    "bwrap": _w("", "--args --userns --userns2 --pidns --uid --gid --hostname --chdir --unsetenv --lock-file --sync-fd "
                "--seccomp --add-seccomp-fd --info-fd --json-status-fd --block-fd --userns-block-fd --remount-ro "
                "--proc --dev --tmpfs --mqueue --dir --exec-label --file-label --cap-add --cap-drop --perms --size "
                "--chmod"),
    "nsjail": _w("-M -c -H -D -u -g -R -B -T -t -E -L -P", "--mode --config --hostname --cwd --user --group "
                 "--bindmount_ro --bindmount --tmpfsmount --time_limit --env --log --seccomp_policy --chroot"),
    "aa-exec": _w("-p -n", "--profile --namespace"),
    "setarch": _w("", "", skip=1),
    "linux32": _w(),
    "linux64": _w(),
    "systemd-cat": _w("-t -p", "--identifier --priority --stderr-priority"),
    "chronic": _w(),
    "ifne": _w(),
    "lckdo": _w("-w", ""),
    "nq": _w("-c", ""),
    "tsp": _w("-L -D -N", ""),
    "retry": _w("-t -d -m -x", "--tries --delay --min --max --until"),
    "ccache": _w(),
    "sccache": _w(),
    "distcc": _w(),
    "icecc": _w(),
    "mpirun": _w(
        "-n -np -N -c -H -x -host -hostfile -machinefile -wdir -ppn -f -genv -env -npernode -npersocket",
        "--n --np --host --hostfile --machinefile --map-by --bind-to --rank-by --wdir --prefix --npernode --report-bindings-file",
    ),
    "mpiexec": _w(
        "-n -np -N -c -H -x -host -hostfile -machinefile -wdir -ppn -f -genv -env -npernode -npersocket",
        "--n --np --host --hostfile --machinefile --map-by --bind-to --rank-by --wdir --prefix --npernode",
    ),
    "srun": _w("-n -N -c -p -t -J -o -e -w -A -q -G", "--ntasks --nodes --partition --time --job-name --output "
               "--error --nodelist --account --qos --gpus --mem --cpus-per-task"),
    "perf": _w(),  # peeled by _peel_perf
    "hyperfine": _w(),  # peeled by _peel_hyperfine
}
# Run-a-tool subcommands: `bundle exec X`, `poetry run X`...
SUBCOMMAND_WRAPPERS = {
    "bundle": {"exec"},
    "poetry": {"run"},
    "uv": {"run", "tool"},
    "pipenv": {"run"},
    "pdm": {"run"},
    "hatch": {"run"},
    "pnpm": {"exec", "dlx"},
    "yarn": {"exec", "dlx"},
    "npm": {"exec"},
    "conda": {"run"},
    "mamba": {"run"},
    "micromamba": {"run"},
    "rye": {"run"},
    "nix": {"develop", "shell", "run"},
    "devbox": {"run"},
    "mise": {"exec", "x"},
    "asdf": {"exec"},
    "rbenv": {"exec"},
    "pyenv": {"exec"},
    "nodenv": {"exec"},
    "direnv": {"exec"},
    "dotenvx": {"run"},
    "op": {"run"},
    "doppler": {"run"},
    "aws-vault": {"exec"},
    "dotenv": {"run"},
    "infisical": {"run"},
    "flox": {"activate"},
    "toolbox": {"run"},
    "distrobox": {"enter"},
    "lxc": {"exec"},
    "incus": {"exec"},  # LXD's fork: ``incus exec c -- cmd``
}


def unwrap(argv: list[str]) -> tuple[list[str], str | None]:
    """Peel wrappers off ``argv``.

    Returns (the command that really runs, a shell payload if a wrapper takes one as a
    string: ``watch 'cmd'``, ``su -c 'cmd'``, ``ssh host 'cmd'``...).  An empty argv means
    nothing runs (``command -v rm``).
    """
    for _ in range(16):
        argv, final = peel(argv)
        if final:
            break
    return argv, None


Peeled = tuple[list[str], bool]
"""One peeling step's result: (the argv inside the wrapper, whether it is final)."""
Peeler = Callable[[str, list[str]], Peeled | None]
"""A wrapper's own peeling step, given its name and whole argv; None: peel it by :data:`WRAPPERS`."""


def peel(argv: list[str]) -> Peeled:
    """One step of :func:`unwrap`: (``argv`` with its outermost wrapper peeled, whether that is final).

    ``final`` is True when ``argv`` is no wrapper (it is returned as is), or when the wrapper
    turned into what really runs (``sudo -i`` -> ``bash -i``, ``script`` without ``-c`` -> ``[]``).
    Wrappers with their own spelling have a peeler in :data:`_PEELERS`; the rest are peeled by
    their options (:data:`SUBCOMMAND_WRAPPERS`, then :data:`WRAPPERS`).
    """
    if not argv:
        return argv, True
    name = base_name(argv[0])
    if name.startswith("git-"):
        dashed = _peel_git_dashed(argv)
        if dashed is not None:
            return dashed, True
    own = _PEELERS.get(name)
    if own is not None:
        peeled = own(name, argv)
        if peeled is not None:
            return peeled
    args = argv[1:]
    if name in SUBCOMMAND_WRAPPERS and args and args[0] in SUBCOMMAND_WRAPPERS[name]:
        return _peel_subcommand(name, args[1:])
    return _peel_by_options(name, argv)


def _peel_sudo(name: str, argv: list[str]) -> Peeled | None:
    """``sudo -s``/``-i`` (and doas, run0) start a shell that runs the rest as one string, or an
    interactive shell; ``sudo -e`` is ``sudoedit``.  Otherwise a plain wrapper."""
    args = argv[1:]
    with_arg, long_with_arg, _, _ = WRAPPERS[name]
    i = command_start(args, with_arg, long_with_arg)
    if any(
        a in ("-s", "--shell", "-i", "--login") or re.fullmatch(r"-[a-zA-Z]*[si][a-zA-Z]*", a) and a[1:2] != "u"
        for a in args[:i]
    ):
        rest = args[i:]
        # sudo quotes each argument for the shell it runs (``sudo -i sqlite3 db 'DROP TABLE t'``)
        return (["bash", "-c", " ".join(shlex.quote(a) for a in rest)], True) if rest else (["bash", "-i"], True)
    if name in ("sudo", "doas") and args[:1] in (["-e"], ["--edit"]):
        return ["sudoedit", *args[1:]], True
    return None


def _peel_command(name: str, argv: list[str]) -> Peeled | None:
    """``command -v rm`` only looks a name up: nothing runs.  Otherwise a plain wrapper."""
    own = []
    for a in argv[1:]:  # command's own options come before the program (``command e2undo -v`` runs e2undo)
        if not a.startswith("-") or a == "--":
            break
        own.append(a)
    return ([], True) if any(a in ("-v", "-V") or re.fullmatch(r"-p?[vV]p?", a) for a in own) else None


def _peel_env(name: str, argv: list[str]) -> Peeled | None:
    """``env -S 'cmd args'`` splits its string into the command.  Otherwise a plain wrapper."""
    # only env's own options, read as its getopt_long ``+C:iS:u:v0`` does (``-S'cmd'``, ``-iS cmd``,
    # ``--split=cmd``); they end at the first operand (``env VAR=1 sudo ventoy -S …``: that -S is ventoy's)
    p = getopt(argv[1:], "CSu", _ENV_LONGS, ("--chdir", "--split-string", "--unset"), permute=False)
    splits = opt_values(p, "-S", "--split-string")
    if splits:
        return [w for c in fallback_commands(splits[-1]) for w in c.argv], False
    return None


_ENV_LONGS = ("--ignore-environment", "--null", "--unset", "--chdir", "--split-string", "--block-signal",
              "--default-signal", "--ignore-signal", "--list-signal-handling", "--debug", "--help", "--version")
# util-linux su/runuser (getopt_long ``+c:fg:G:lmpPs:u:hVw:``): ``--comm=CMD`` is ``--command``
_SU_LONGS = ("--command", "--session-command", "--fast", "--group", "--supp-group", "--login", "--preserve-environment",
             "--pty", "--no-pty", "--shell", "--whitelist-environment", "--user", "--help", "--version")
_SU_WITH_ARG = ("--command", "--session-command", "--group", "--supp-group", "--shell", "--whitelist-environment",
                "--user")


def _su_command(args: list[str]) -> str | None:
    """The shell string su/runuser is given with ``-c``/``--command``/``--session-command`` (any spelling)."""
    found = opt_values(getopt(args, "cgGsuw", _SU_LONGS, _SU_WITH_ARG, permute=False), "-c", "--command",
                       "--session-command")
    return found[-1] if found else None


def _peel_su(name: str, argv: list[str]) -> Peeled:
    """``su -c 'cmd'`` runs a shell string; ``runuser -u user cmd`` runs the rest; else a login shell."""
    args = argv[1:]
    i = command_start(
        args,
        {"-u", "-g", "-G", "-w", "-c", "-s"},
        {"--user", "--group", "--supp-group", "--whitelist-environment", "--command", "--session-command", "--shell"},
    )
    # su's/runuser's own -c, not an option of the command runuser runs (``runuser -u root -- badblocks -c 5``)
    own = args[:i] if "--" not in args[:i] else args[: args.index("--")]
    user_mode = name == "runuser" and has_opt(getopt(own, "cgGsuw", _SU_LONGS, _SU_WITH_ARG, permute=False), "-u", "--user")
    payload = _su_command(own)
    if payload is None and not user_mode:  # ``su - root -c 'cmd'``: after the user, -c goes to the shell
        rest = args[i:]
        payload = _su_command(rest[next((j for j, a in enumerate(rest) if a.startswith("-") and a != "-"), len(rest)):])
    if payload is not None:
        return ["sh", "-c", payload], True
    if user_mode:
        return args[i:], False
    return ["bash", "-i"], True


def _peel_sg(name: str, argv: list[str]) -> Peeled | None:
    """``sg [-] group [-c] cmd args`` (and newgrp) runs the words after the group as a shell string."""
    args = argv[1:]
    if args[:1] == ["-"]:
        args = args[1:]
    rest = args[1:]
    if rest[:1] == ["-c"]:
        rest = rest[1:]
    return (["sh", "-c", " ".join(rest)], True) if rest else None


def _peel_ip(name: str, argv: list[str]) -> Peeled | None:
    """``ip [opts] netns exec NS cmd`` and ``ip vrf exec NAME cmd`` run ``cmd`` (in another
    namespace or VRF); ``ip -n NS``/``ip netns`` otherwise run nothing.  Other ``ip`` commands: no wrapper."""
    args = argv[1:]
    for i, a in enumerate(args[:-2]):
        # ip takes unique prefixes: ``ip net e NS cmd`` is ``ip netns exec``
        if (len(a) >= 3 and "netns".startswith(a) or "vrf".startswith(a)) and a and "exec".startswith(args[i + 1]):
            return args[i + 3 :], False
        if not a.startswith("-") and args[i - 1 : i] not in (["-n"], ["-netns"], ["-b"], ["-batch"], ["-rc"]):
            break  # the object is the first word: ``ip link set netns x`` runs nothing
    return None


def _peel_capsh(name: str, argv: list[str]) -> Peeled:
    """``capsh [opts] -- args``: a shell (``--shell=``, else bash) runs ``args`` (``-c 'cmd'``, a
    script); ``capsh --`` alone is an interactive shell; without ``--`` nothing the gate sees runs."""
    args = argv[1:]
    if "--" not in args:
        return [], True
    shell = next((a.split("=", 1)[1] for a in args if a.startswith("--shell=")), "bash")
    rest = args[args.index("--") + 1 :]
    return ([shell, *rest] if rest else [shell, "-i"]), False


def _peel_after_dashes(*exec_options: str) -> Callable[[str, list[str]], Peeled]:
    """A wrapper that runs what follows ``--`` (or one of ``exec_options``): ``distrobox-enter box --
    cmd``, ``lxc-attach -n c -- cmd``; without them it opens a shell there (nothing the gate sees)."""

    def peel_dashes(name: str, argv: list[str]) -> Peeled:
        args = argv[1:]
        for i, a in enumerate(args):
            if a == "--" or a in exec_options:
                return args[i + 1 :], False
        return [], True

    return peel_dashes


def _peel_cpulimit(name: str, argv: list[str]) -> Peeled:
    """``cpulimit -l N [--] cmd`` runs ``cmd``; with ``-p PID``/``-e exe``/``-P path`` it only
    throttles a running process."""
    args = argv[1:]
    with_arg, long_with_arg, _, _ = WRAPPERS[name]
    i = command_start(args, with_arg | {"-p", "-e", "-P"}, long_with_arg | {"--pid", "--exe", "--path"})
    if any(a in ("-p", "-e", "-P") or a.startswith(("--pid", "--exe", "--path")) for a in args[:i]):
        return [], True
    return args[i:], False


def _peel_perf(name: str, argv: list[str]) -> Peeled:
    """``perf record|stat|trace [opts] [--] cmd`` runs ``cmd``; other perf commands run nothing."""
    args = argv[1:]
    if not args or args[0] not in ("record", "stat", "trace", "mem", "c2c", "sched", "kmem", "lock", "kvm"):
        return [], True
    rest = args[1:]
    if "--" in rest:
        return rest[rest.index("--") + 1 :], False
    i = command_start(
        rest,
        {"-e", "-o", "-p", "-t", "-c", "-F", "-C", "-G", "-u", "-r", "-I", "-m", "-g", "-x", "-j", "-D", "-b"},
        {"--event", "--output", "--pid", "--tid", "--count", "--freq", "--cpu", "--cgroup", "--uid", "--repeat",
         "--call-graph", "--field-separator", "--delay", "--mmap-pages", "--filter"},
    )
    return rest[i:], False


def _peel_hyperfine(name: str, argv: list[str]) -> Peeled:
    """``hyperfine [opts] 'cmd' ...`` runs each command string (and ``--prepare``/``--setup``/
    ``--cleanup`` strings) through a shell."""
    args = argv[1:]
    takes = {"-w", "-r", "-m", "-M", "-p", "-s", "-c", "-S", "-P", "-L", "-u", "-n", "--warmup", "--runs",
             "--min-runs", "--max-runs", "--prepare", "--setup", "--cleanup", "--shell", "--parameter-scan",
             "--parameter-list", "--time-unit", "--command-name", "--export-json", "--export-csv",
             "--export-markdown", "--export-asciidoc", "--export-orgmode", "--style", "--sort", "--output",
             "--reference", "--conclude"}
    scripts: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in takes and i + 1 < len(args):
            if a in ("-p", "-s", "-c", "--prepare", "--setup", "--cleanup", "--reference", "--conclude"):
                scripts.append(args[i + 1])
            i += 2
            continue
        if not a.startswith("-"):
            scripts.append(a)
        i += 1
    return (["sh", "-c", "; ".join(scripts)], True) if scripts else ([], True)


def _peel_flock(name: str, argv: list[str]) -> Peeled:
    """``flock file -c 'cmd'`` runs a shell string; ``flock file cmd args`` the command after the file."""
    args = argv[1:]
    i = command_start(args, {"-w", "-E", "-c"}, {"--timeout", "--conflict-exit-code", "--command"}, skip_operands=1)
    # flock's own -c (before or right after the lock file), not one of the command's (``flock l badblocks -c 5``)
    own = args[:i] + args[i : i + 2] if args[i : i + 1] in (["-c"], ["--command"]) else args[:i]
    payload = option_value(own, ("-c", "--command"))
    if payload is not None:
        return ["sh", "-c", payload], True
    return args[i:], False


def _shell_payload(*options: str) -> Peeler:
    """A peeler for a wrapper that runs only the shell string given with one of ``options``
    (``script -c``, ``nix-shell --run``); without one nothing the gate can see runs."""

    def peel_payload(name: str, argv: list[str]) -> Peeled:
        payload = option_value(argv[1:], options)
        return (["sh", "-c", payload], True) if payload is not None else ([], True)

    return peel_payload


def _peel_watch(name: str, argv: list[str]) -> Peeled:
    """``watch cmd args`` joins the rest into a shell string; with ``-x``/``--exec`` runs it as is."""
    args = argv[1:]
    with_arg, long_with_arg, _, _ = WRAPPERS["watch"]
    i = command_start(args, with_arg, long_with_arg)
    rest = args[i:]
    if "--exec" in args[:i] or any(re.fullmatch(r"-[a-zA-Z]*x[a-zA-Z]*", a) for a in args[:i]):
        return rest, False
    return (["sh", "-c", " ".join(rest)], True) if rest else ([], True)


_SSH_WITH_ARG = frozenset("-p -i -l -o -F -J -L -R -D -b -c -E -e -I -m -O -Q -S -W -w -B -M".split())


def _peel_ssh(name: str, argv: list[str]) -> Peeled:
    """``ssh host cmd args``: the words after the host form a shell string (run there)."""
    args = argv[1:]
    i = command_start(args, _SSH_WITH_ARG, skip_operands=1)
    rest = args[i:]
    if name == "mosh" and rest[:1] == ["--"]:  # ``mosh host -- cmd``: mosh's own end of options
        rest = rest[1:]
    if not rest:  # no command: the remote login shell runs what it reads (``echo cmd | ssh host``)
        return (["sh"], True) if i > 0 and not any(re.fullmatch(r"-[a-zA-Z]*[NfG][a-zA-Z]*", a) for a in args[:i]) else ([], True)
    if base_name(rest[0]) in SHELLS and not any(a.startswith("-") and "c" in a.lstrip("-")[:1] for a in rest[1:]):
        return rest, True  # ``ssh host bash -s``: a shell reading its program from ssh's input
    return ["sh", "-c", " ".join(rest)], True


def _peel_npx(name: str, argv: list[str]) -> Peeled | None:
    """``npx -c 'cmd'`` / ``npm exec -c 'cmd'`` (also pnpm/yarn ``exec``): ``-c``/``--call`` is shell code."""
    args = argv[1:]
    if name != "npx":
        if not args or args[0] not in ("exec", "x"):
            return None
        args = args[1:]
    code = option_value(args, ("-c", "--call"))
    if code is not None:
        return ["sh", "-c", code], True
    return None


def _peel_tool_of(tools: dict[str, str], skip_dashes: bool = True) -> Peeler:
    """``minikube kubectl -- get po``, ``microk8s kubectl …``, ``k3s kubectl …``: a bundled copy of a tool."""

    def peel_tool(name: str, argv: list[str]) -> Peeled | None:
        args = argv[1:]
        if not args or args[0] not in tools:
            return None
        rest = args[1:]
        if skip_dashes and rest[:1] == ["--"]:
            rest = rest[1:]
        return [tools[args[0]], *rest], False

    return peel_tool


def _peel_shell_string(sub: Collection[str], with_arg: Collection[str], operands: int = 0, last: bool = False) -> Peeler:
    """Tools whose subcommand runs a shell command string: ``vagrant ssh -c 'cmd'``, ``tmux new -d 'cmd'``,
    ``sops exec-env f 'cmd'``, ``scl enable coll 'cmd'`` (``last``: the last word is the command)."""

    def peel_string(name: str, argv: list[str]) -> Peeled | None:
        args = argv[1:]
        if not args or args[0] not in sub:
            return None
        rest = args[1:]
        code = option_value(rest, ("-c", "--command")) if name == "vagrant" else None
        # without a command the tool stays itself (it starts an interactive shell: judged as a terminal)
        if name == "vagrant":
            return (["sh", "-c", code], True) if code is not None else None
        if "--" in rest:
            words = rest[rest.index("--") + 1 :]
            return (words, False) if words else None
        if last:
            ops = [a for a in rest if not a.startswith("-")]
            return (["sh", "-c", ops[-1]], True) if len(ops) > operands else None
        i = command_start(rest, with_arg, (), operands)
        words = rest[i:]
        return (["sh", "-c", " ".join(words)], True) if words else None

    return peel_string


def _peel_screen(name: str, argv: list[str]) -> Peeled | None:
    """``screen -dmS s cmd args``: the program screen starts in its window."""
    args = argv[1:]
    i = command_start(args, {"-S", "-c", "-e", "-h", "-p", "-T", "-t", "-s", "-L", "-Logfile"})
    if any(a in ("-X", "-Q", "-r", "-R", "-x", "-ls", "-list", "-wipe") for a in args[:i]):
        return None  # attaching, listing or sending keys: screen itself
    if any(not re.fullmatch(r"-[aAdDmSceHhpTtsLlOqUvfi]+|-Logfile|--", a) for a in args[:i] if a.startswith("-")):
        return None  # not screen's options (``gpu-screen-recorder -w screen -o out.mp4``): not screen
    return (args[i:], False) if args[i:] else None


_GIT_DASHED = re.compile(r"^git-([a-z][a-z0-9-]*)$")


def _peel_git_dashed(argv: list[str]) -> list[str] | None:
    """``git-clean -f``, ``/usr/lib/git-core/git-push -f``: git runs ``git-X`` for ``git X``; the same command."""
    m = _GIT_DASHED.match(base_name(argv[0]))
    if m is None or m.group(1) in ("shell", "upload-pack", "receive-pack", "upload-archive"):
        return None
    return ["git", m.group(1), *argv[1:]]


def _peel_multicall(name: str, argv: list[str]) -> Peeled:
    """``busybox rm -rf /`` (and toybox) runs the applet named first; with options, nothing else."""
    args = argv[1:]
    if args and not args[0].startswith("-"):
        return args, False
    return argv, True


_PEELERS: dict[str, Peeler] = {
    "sudo": _peel_sudo,
    "doas": _peel_sudo,
    "run0": _peel_sudo,
    "command": _peel_command,
    "env": _peel_env,
    "su": _peel_su,
    "runuser": _peel_su,
    "sg": _peel_sg,
    "newgrp": _peel_sg,
    "ip": _peel_ip,
    "capsh": _peel_capsh,
    "distrobox-enter": _peel_after_dashes("-e", "--exec"),
    "lxc-attach": _peel_after_dashes(),
    "cpulimit": _peel_cpulimit,
    "perf": _peel_perf,
    "hyperfine": _peel_hyperfine,
    "flock": _peel_flock,
    "script": _shell_payload("-c", "--command"),
    "nix-shell": _shell_payload("--run", "--command"),
    "watch": _peel_watch,
    "ssh": _peel_ssh,
    "autossh": _peel_ssh,
    "mosh": _peel_ssh,
    "gcloud-ssh": _peel_ssh,
    "busybox": _peel_multicall,
    "toybox": _peel_multicall,
    "npx": _peel_npx,
    "npm": _peel_npx,
    "pnpm": _peel_npx,
    "yarn": _peel_npx,
    "minikube": _peel_tool_of({"kubectl": "kubectl"}),
    "microk8s": _peel_tool_of({"kubectl": "kubectl", "helm": "helm", "helm3": "helm", "ctr": "ctr"}),
    "k3s": _peel_tool_of({"kubectl": "kubectl", "crictl": "crictl", "ctr": "ctr"}),
    "k0s": _peel_tool_of({"kubectl": "kubectl", "ctr": "ctr"}),
    "vagrant": _peel_shell_string({"ssh"}, ()),
    "tmux": _peel_shell_string(
        {"new-session", "new", "new-window", "neww", "split-window", "splitw", "respawn-pane", "respawnp", "respawn-window", "respawnw"},
        {"-s", "-n", "-t", "-c", "-x", "-y", "-F", "-e", "-l", "-f"},
    ),
    "sops": _peel_shell_string({"exec-env", "exec-file"}, (), operands=1, last=True),
    "scl": _peel_shell_string({"enable"}, (), operands=1, last=True),
    "screen": _peel_screen,
}


WRAPPER_NAMES = frozenset(WRAPPERS) | frozenset(_PEELERS) | frozenset(SUBCOMMAND_WRAPPERS) | {"timeout", "xargs"}
"""Programs the gate peels as wrappers: a word naming one starts a command."""


def _peel_subcommand(name: str, rest: list[str]) -> Peeled:
    """``poetry run X``, ``bundle exec X``, ``nix develop -c X``: ``rest`` follows the subcommand."""
    if name in ("distrobox", "lxc", "incus"):
        return _peel_after_dashes("-e", "--exec")(name, ["", *rest])
    if name == "aws-vault":  # ``aws-vault exec PROFILE [--] cmd``
        i = command_start(rest, {"-d", "--duration", "-t", "--mfa-token", "-j", "--region"}, (), 1)
        return rest[i + 1 :] if rest[i : i + 1] == ["--"] else rest[i:], False
    if name == "doppler" and option_value(rest, ("--command",)) is not None:  # ``doppler run --command 'cmd'``: shell text
        return ["sh", "-c", option_value(rest, ("--command",)) or ""], True
    if name == "direnv":  # ``direnv exec DIR cmd``: the directory whose .envrc is loaded, then the command
        return rest[1:], False
    if name == "nix":
        payload = option_value(rest, ("-c", "--command"))
        if payload is None:
            return [], True
        j = rest.index(payload) if payload in rest else len(rest)
        return rest[j:], False
    j = command_start(
        rest,
        {"-n", "-p", "--name", "--prefix", "-e", "--env", "--from", "--with", "--python", "-c", "--config", "-d", "-r",
         "--container", "--distro", "--release"},
    )
    return rest[j:], False


def _peel_by_options(name: str, argv: list[str]) -> Peeled:
    """A wrapper in :data:`WRAPPERS` runs what follows its options (and fixed operands); any
    other command is no wrapper."""
    spec = WRAPPERS.get(name)
    if spec is None:
        return argv, True
    with_arg, long_with_arg, skip, assignments = spec
    args = argv[1:]
    if name in ("nice",) and args and re.fullmatch(r"-\d+", args[0]):
        args = args[1:]
    if name == "faketime" and any(a == "-f" or a.startswith("-f") for a in args[:2]):
        skip = 0  # the time comes with -f: no timestamp operand
    if name in ("taskset",) and args and args[0] in ("-c", "--cpu-list"):
        args = args[1:]
    i = command_start(args, with_arg, long_with_arg, skip, assignments)
    return args[i:], False


def option_value(args: list[str], names: tuple[str, ...]) -> str | None:
    for i, a in enumerate(args):
        if a in names and i + 1 < len(args):
            return args[i + 1]
        for n in names:
            if n.startswith("--") and a.startswith(n + "="):
                return a.split("=", 1)[1]
        if (
            len(a) > 2
            and a.startswith("-")
            and not a.startswith("--")
            and a[1:].isalpha()
            and "c" in a[1:]
            and "-c" in names
        ):
            # clustered short options ending in c: -lc 'cmd'
            if a.endswith("c") and i + 1 < len(args):
                return args[i + 1]
    return None


# ---------------------------------------------------------------------------------------------
# provenance: what feeds a command


def classify(cmd: Cmd) -> Kinds:
    """Kinds of output a command produces: downloaded code, decoded text."""
    argv, _ = unwrap(cmd.argv)
    if not argv:
        return frozenset()
    name = base_name(argv[0])
    args = argv[1:]
    kinds: set[str] = set()
    if name in DOWNLOADERS and name not in ("rsync", "scp", "gh") or (name == "openssl" and "s_client" in args):
        kinds.add("download")
    elif name in ("base64", "base32", "basenc", "gbase64") and any(
        a in ("-d", "--decode", "-D") or (a.startswith("-") and not a.startswith("--") and "d" in a) for a in args
    ):
        kinds.add("decode")
    elif name == "xxd" and any(a.startswith("-") and "r" in a for a in args):
        kinds.add("decode")
    elif name == "openssl" and any(a in ("enc", "base64", "aes-256-cbc") for a in args) and "-d" in args:
        kinds.add("decode")
    elif name in ("uudecode", "rev", "gunzip", "zcat", "bzcat", "xzcat", "zstdcat", "lzcat", "unxz", "bunzip2") or (
        name in ("gzip", "bzip2", "xz", "zstd") and "-d" in args
    ):
        kinds.add("decode")
    elif name == "tr" and len(args) >= 2 and not any(a.startswith("-") for a in args):
        kinds.add("decode")
    elif interpreter_lang(name) and any(inline._DECODE.search(a) for a in args):
        kinds.add("decode")
    elif container_listing_is_mass(name, args):
        kinds.add("mass")
    elif name == "ps" and not cmd.upstream:
        kinds.add("pslist")
    elif name in ("pidof", "pgrep") and any(_CRITICAL.search(a) for a in args if not a.startswith("-")):
        kinds.add("critical")
    elif name == "pgrep" and is_broad_pgrep(args):
        kinds.add("mass")
    for k in cmd.kinds:
        kinds |= k - {"procsub"}
    return frozenset(kinds)


# Listings of a container engine, by what they list, and the filters that select by state (what a prune
# would remove: exited containers, dangling volumes) rather than by name, label or image.
_ENGINE_LISTINGS = {
    ("ps",): "containers", ("container", "ls"): "containers", ("container", "list"): "containers",
    ("container", "ps"): "containers", ("images",): "images", ("image", "ls"): "images", ("image", "list"): "images",
    ("volume", "ls"): "volumes", ("volume", "list"): "volumes", ("network", "ls"): "networks",
    ("network", "list"): "networks", ("pod", "ps"): "pods", ("pod", "ls"): "pods", ("pod", "list"): "pods",
}
_STATE_FILTERS = {"containers": ("status", "exited", "health"), "volumes": ("dangling",), "pods": ("status",)}
_ENGINE_GLOBALS_WITH_ARG = frozenset(
    {"-H", "--host", "--context", "-c", "--config", "--log-level", "-l", "--namespace", "-n", "--address", "-a",
     "--url", "--connection", "--root", "--runroot", "--storage-driver"}
)


def container_listing_is_mass(name: str, args: list[str]) -> bool:
    """``docker ps -aq``, ``podman images -q``, ``docker volume ls -qf dangling=true``: the ids of every
    container, image or volume (or of every one a prune would remove), fed to ``rm``/``stop``.  Options
    are read as the engines read them (``-aqf status=exited``); a name, label or image filter, an
    operand (``images -q nginx``) or ``-n``/``--last``/``-l`` narrows the list, so it is not mass."""
    if name == "docker-machine":  # ``docker-machine ls -q``: every machine (``--filter``/``-f`` narrows it)
        opts, ops = getopt(args, "ft", ("--quiet",), ("--filter", "--format", "--timeout"), long_prefix=False)
        return ops[:1] == ["ls"] and any(o in ("-q", "--quiet") for o, _ in opts) and not any(
            o in ("-f", "--filter") for o, _ in opts)
    if name not in ("docker", "podman", "nerdctl", "finch"):
        return False
    i = 0
    while i < len(args) and args[i].startswith("-") and args[i] != "-":  # global options before the subcommand
        i += 2 if args[i] in _ENGINE_GLOBALS_WITH_ARG else 1
    rest = args[i:]
    what = next((w for k, w in _ENGINE_LISTINGS.items() if tuple(rest[: len(k)]) == k), "")
    if not what:
        return False
    sub = 2 if rest[:1] != ["ps"] and rest[:1] != ["images"] else 1
    opts, ops = getopt(rest[sub:], "fn", ("--all", "--quiet", "--no-trunc", "--latest", "--size", "--digests"),
                       ("--filter", "--format", "--last"), long_prefix=False)
    names = {o for o, _ in opts}
    if not names & {"-q", "--quiet"} or names & {"-n", "--last", "-l", "--latest"} or ops:
        return False
    filters = [v or "" for o, v in opts if o in ("-f", "--filter")]
    return all(f.split("=", 1)[0].lower() in _STATE_FILTERS.get(what, ()) for f in filters)


def is_broad_pgrep(args: list[str]) -> bool:
    """``pgrep .``, ``pgrep -f .*``, ``pgrep -v x``, ``pgrep -P 1``: a list of (nearly) every process."""
    ops = [a for i, a in enumerate(args) if not a.startswith("-") and args[i - 1 : i] not in (["-P"], ["-u"], ["-U"], ["-g"], ["-G"], ["-s"], ["-t"], ["--parent"])]
    if any(re.fullmatch(r"-[a-zA-Z]*v[a-zA-Z]*|--inverse", a) for a in args):
        return True
    if any(a in ("-P", "--parent") and args[i + 1 : i + 2] == ["1"] or a in ("-P1", "--parent=1") for i, a in enumerate(args)):
        return True
    return any(re.fullmatch(r"\^?(?:\.\*?|\.\+|\*|)\$?", p) for p in ops)


_CRITICAL = re.compile(
    r"^\^?(?:sshd|dockerd|containerd|systemd|init|kubelet|systemd-journald|dbus-daemon|systemd-logind)\$?$"
)


def interpreter_lang(name: str) -> str | None:
    if re.fullmatch(r"(python|pypy)[0-9.]*|ipython3?", name):
        return "python"
    return {
        "perl": "perl",
        "perl5": "perl",
        "ruby": "ruby",
        "irb": "ruby",
        "node": "node",
        "nodejs": "node",
        "deno": "node",
        "bun": "node",
        "php": "php",
        "lua": "lua",
        "luajit": "lua",
        "lua5.1": "lua",
        "lua5.3": "lua",
        "lua5.4": "lua",
        "Rscript": "r",
        "R": "r",
        "osascript": "applescript",
        "pwsh": "powershell",
        "powershell": "powershell",
        "powershell.exe": "powershell",
        "jrunscript": "node",
        "tclsh": "tcl",
        "wish": "tcl",
    }.get(name)


CODE_FLAGS = {
    "python": ({"-c"}, set()),
    "perl": ({"-e", "-E"}, set()),
    "ruby": ({"-e"}, set()),
    "node": ({"-e", "-p", "--eval", "--print"}, set()),
    "php": ({"-r"}, set()),
    "lua": ({"-e"}, set()),
    "r": ({"-e"}, {"--expr"}),
    "applescript": ({"-e"}, set()),
    "powershell": ({"-c", "-command", "-Command", "-C"}, set()),
    "tcl": (set(), set()),
}

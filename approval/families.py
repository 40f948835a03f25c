"""Handlers for families the per-tool table (tools.py) did not cover, added by family.

Each handler composes with a handler already registered for the same program (both run):
``_also`` wraps the existing one.  Every handler says what the tool does with its
arguments, not which spellings to match.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .commands import base_name, short_flags, split_options
from .parser import UNKNOWN, Cmd, Kinds
from .paths import delete_class, glob_regex, normalize_path, write_class
from .tools import HANDLERS, Ctx, Handler, git_subcommand

if TYPE_CHECKING:
    from .detect import Detector


def _also(*names: str):
    """Register ``fn`` for ``names``, running after any handler already registered for them."""

    def deco(fn: Handler) -> Handler:
        for n in names:
            prev = HANDLERS.get(n)
            if prev is None:
                HANDLERS[n] = fn
            else:

                def both(d, name, args, kinds, cmd, ctx, _prev=prev, _fn=fn):  # type: ignore[no-untyped-def]
                    _prev(d, name, args, kinds, cmd, ctx)
                    _fn(d, name, args, kinds, cmd, ctx)

                HANDLERS[n] = both
        return fn

    return deco


def _inner(d: Detector, argv: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """Judge a command that another program runs (container exec, mapped host paths)."""
    if argv:
        d.command(Cmd(argv, [frozenset()] * len(argv), cmd.text, cwd=None, upstream=cmd.upstream), ctx)


def _opt_value(args: list[str], short: str, long: str) -> list[str]:
    """Values of ``-X v``, ``-Xv``, ``--long v``, ``--long=v``."""
    out = []
    for i, a in enumerate(args):
        if a in (short, long) and i + 1 < len(args):
            out.append(args[i + 1])
        elif long and a.startswith(long + "="):
            out.append(a.split("=", 1)[1])
        elif short and a.startswith(short) and len(a) > len(short) and not a.startswith("--"):
            out.append(a[len(short) :])
    return out


# -- data: restores that drop objects first


@_also("pg_restore")
def _h_pg_restore(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``pg_restore --clean``/``-c`` drops every object before recreating it (``-l`` only lists).

    must match: ``pg_restore --clean -d prod x.dump``, ``pg_restore -cd app x``;
    must not: ``pg_restore -l x.dump``, ``pg_restore -d dev x.dump``."""
    opts, _ = split_options(args, {"-d", "-f", "-U", "-h", "-p", "-n", "-t", "-j", "-L", "-F", "-I", "-P", "-T", "-N", "-S"})
    if "-l" in opts or "--list" in opts:
        return
    if "--clean" in opts or "c" in short_flags([o for o in opts if not o.startswith("--")]):
        d.add(ctx, "data_restore_overwrite", cmd.text, "pg_restore --clean drops every object of the database first.")


# -- data: HTTP DELETE of whole stores


_URL = re.compile(r"^(?:[a-z][a-z0-9+.-]*://)?[A-Za-z0-9_.\-\[\]:@]+(?::\d+)?(/[^?#]*)?")


def _http_delete_target(url: str) -> bool:
    """A DELETE that names a whole index/bucket/store: at most one path segment, a wildcard or ``_all``."""
    if "://" not in url and not re.match(r"^[\w.-]+:\d+(/|$)", url) and not url.startswith(("localhost", "/")):
        return False
    m = _URL.match(url.split("?", 1)[0])
    path = (m.group(1) if m else "") or "/"
    segs = [s for s in path.split("/") if s]
    return len(segs) <= 1 or any(("*" in s or s in ("_all", "_data_stream", "*")) for s in segs) or UNKNOWN in path


@_also("curl", "wget", "http", "https", "xh", "curlie")
def _h_http_delete(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """An HTTP DELETE of an Elasticsearch/OpenSearch index, an S3/MinIO bucket or a store root.

    must match: ``curl -X DELETE http://es:9200/logs-*``, ``curl -XDELETE localhost:9200/_all``,
    ``http DELETE :9200/idx``; must not: ``curl -X DELETE http://api/items/42``, ``curl -X GET es:9200/x``."""
    if name in ("curl", "curlie"):
        methods = _opt_value(args, "-X", "--request")
    elif name == "wget":
        methods = _opt_value(args, "", "--method")
    else:
        methods = [a for a in args[:3] if a.isupper()]
    if not any(m.upper() == "DELETE" for m in methods):
        return
    urls = [a for a in args if not a.startswith("-") and a.upper() != "DELETE" and ("/" in a or ":" in a)]
    if any(_http_delete_target(u) for u in urls):
        d.add(ctx, "http_delete", cmd.text)


# -- data: scan-then-delete key loops


@_also("redis-cli", "valkey-cli", "keydb-cli")
def _h_redis_mass(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``redis-cli --scan | xargs redis-cli del``: deleting keys listed by another command.

    must match: ``redis-cli --scan --pattern 's:*' | xargs redis-cli DEL``, ``redis-cli KEYS '*' | xargs redis-cli unlink``;
    must not: ``redis-cli del session:42``, ``redis-cli --scan | wc -l``."""
    verbs = [a.lower() for a in args if not a.startswith("-")]
    if any(v in ("del", "unlink") for v in verbs) and (any(UNKNOWN in a for a in args) or _fed_by_redis_listing(cmd)):
        d.add(ctx, "redis_flush", cmd.segment, "Deletes every Redis key another command listed.")


def _fed_by_redis_listing(cmd: Cmd) -> bool:
    for g in cmd.upstream:
        for m in g:
            if m.argv and base_name(m.argv[0]).endswith("-cli") and any(
                a in ("--scan", "keys", "KEYS", "scan", "SCAN") for a in m.argv
            ):
                return True
    return False


# -- git: remote deletion and history rewrites




@_also("git")
def _h_git_more(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Remote branch deletion (``push origin :main``, ``--delete``, ``-d``), history rewrites
    (``filter-branch``, ``filter-repo``, ``reflog expire --expire=now``, ``gc --prune=now`` after it).

    must match: ``git push origin :main``, ``git -C r push -d origin x``, ``git filter-branch ...``;
    must not: ``git push origin main``, ``git push origin HEAD:refs/heads/x``, ``git gc``, ``git reflog``."""
    found = git_subcommand(args)
    if found is None:
        return
    sub, rest = found
    if sub == "push":
        opts, ops = split_options(rest, {"-o", "--push-option", "--repo", "--receive-pack", "--exec"})
        short = short_flags([o for o in opts if not o.startswith("--")])
        if "--delete" in opts or "d" in short or "--prune" in opts or any(op.startswith(":") and len(op) > 1 for op in ops[1:]):
            d.add(ctx, "git_remote_delete", cmd.text)
    elif sub in ("filter-branch", "filter-repo"):
        d.add(ctx, "git_history_destroy", cmd.text, f"git {sub} rewrites every commit of the history.")
    elif sub == "reflog" and rest[:1] == ["expire"]:
        if any(re.fullmatch(r"--expire(-unreachable)?=(now|all|0|never)?", a) for a in rest) or "--expire=now" in rest:
            d.add(ctx, "git_history_destroy", cmd.text, "Expires the reflog: commits only it remembers can be pruned.")
    elif sub == "gc" and any(a in ("--prune=now", "--prune=all") for a in rest):
        d.add(ctx, "git_history_destroy", cmd.text, "Prunes unreachable commits at once; they cannot be recovered.")
    elif sub == "update-ref" and ("-d" in rest or "--delete" in rest) and any("refs/remotes" not in a for a in rest if not a.startswith("-")):
        d.add(ctx, "git_history_destroy", cmd.text, "Deletes a ref directly.")


@_also("gh")
def _h_gh_api(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``gh api -X DELETE repos/...`` deletes a repository or its refs through the REST API.

    must match: ``gh api --method DELETE repos/o/r``, ``gh api -XDELETE /repos/o/r/git/refs/heads/main``;
    must not: ``gh api repos/o/r``, ``gh api -X DELETE /notifications/threads/1/subscription``."""
    if not args or args[0] != "api":
        return
    methods = _opt_value(args, "-X", "--method")
    if any(m.upper() == "DELETE" for m in methods):
        ep = [a for a in args[1:] if not a.startswith("-") and a.upper() != "DELETE"]
        if any(re.match(r"^/?(repos|orgs|projects|gists)/", e) or UNKNOWN in e for e in ep):
            d.add(ctx, "repo_delete", cmd.text, "gh api DELETE removes a repository, a ref or other hosted data.")


# -- clusters


_KUBE_WITH_ARG = {
    "-n", "--namespace", "--context", "--cluster", "--kubeconfig", "-l", "--selector", "-f", "--filename", "-o",
    "--output", "--user", "-s", "--server", "--field-selector", "--grace-period", "--timeout", "-c", "--container",
    "--cascade", "--token", "--replicas", "--as", "--request-timeout", "--pod-running-timeout",
}


@_also("kubectl", "oc", "k", "microk8s.kubectl", "kubecolor")
def _h_kube_more(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``scale --replicas=0``, ``drain``, and the command behind ``exec``/``debug`` (judged too).

    must match: ``kubectl -n prod scale --replicas=0 deploy/db``, ``kubectl drain node-1``,
    ``kubectl exec db -- psql -c 'DROP DATABASE x'``; must not: ``kubectl scale --replicas=3 deploy/x``,
    ``kubectl exec db -- psql -c 'SELECT 1'``, ``kubectl cordon node-1``."""
    if "--" in args:
        head, tail = args[: args.index("--")], args[args.index("--") + 1 :]
    else:
        head, tail = args, []
    opts, ops = split_options(head, _KUBE_WITH_ARG)
    if not ops:
        return
    verb = ops[0]
    if verb == "scale":
        reps = _opt_value(opts, "", "--replicas")
        if any(r.strip() in ("0", "00") or UNKNOWN in r for r in reps):
            d.add(ctx, "workload_stop", cmd.text, "Scales a workload to zero replicas: it stops serving.")
    elif verb == "drain":
        d.add(ctx, "workload_stop", cmd.text, "Drains a node: every pod on it is evicted.")
    elif verb in ("exec", "debug", "run") and tail:
        _inner(d, tail, cmd, ctx)


@_also("helm")
def _h_helm(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``helm uninstall``/``delete``/``del``/``un`` removes a release and its resources.

    must match: ``helm uninstall db -n prod``, ``helm -n prod delete api``; must not: ``helm list``, ``helm upgrade ...``."""
    _, ops = split_options(args, {"-n", "--namespace", "--kube-context", "--kubeconfig"})
    if ops[:1] and ops[0] in ("uninstall", "delete", "del", "un"):
        d.add(ctx, "workload_stop", cmd.text, "helm uninstall removes a release and everything it deployed.")


# -- containers: exec'd commands and host mounts


_DOCKER_RUN_WITH_ARG = set(
    "-v --volume --mount -e --env --env-file -w --workdir -u --user --name --network --net -p --publish --entrypoint "
    "-h --hostname -l --label --cpus -m --memory --platform --restart --pid --ipc --device --cap-add --cap-drop "
    "--security-opt --log-driver --log-opt --add-host --dns --tmpfs --ulimit --gpus --runtime --shm-size "
    "--stop-signal --cidfile --label-file -a --attach --pull --userns --uts --volumes-from --group-add --ip "
    "--expose --link --cgroupns --cpu-shares -c --memory-swap --stop-timeout --health-cmd --detach-keys "
    "--index --service-ports".split()
)
_DOCKER_GLOBAL_WITH_ARG = {"-H", "--host", "--context", "-c", "--config", "--log-level", "-l", "--namespace", "-n",
                           "-f", "--file", "-p", "--project-name", "--env-file", "--profile", "--project-directory"}


def _split_run(args: list[str], with_arg: set[str]) -> tuple[list[str], list[str]]:
    """(options, the rest) of ``docker run``-like args: the rest starts with the image/container."""
    opts: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            i += 1
            break
        if not a.startswith("-") or a == "-":
            break
        opts.append(a)
        if a in with_arg and "=" not in a and i + 1 < len(args):
            opts.append(args[i + 1])
            i += 1
        i += 1
    return opts, args[i:]


def _mounts(opts: list[str]) -> list[tuple[str, str, bool]]:
    """(host source, container target, read-only) of ``-v``/``--volume``/``--mount`` bind mounts."""
    out = []
    for v in _opt_value(opts, "-v", "--volume"):
        parts = v.split(":")
        if len(parts) >= 2 and parts[0].startswith(("/", "~", ".", UNKNOWN)):
            out.append((parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")))
    for m in _opt_value(opts, "", "--mount"):
        kv = dict(p.split("=", 1) if "=" in p else (p, "true") for p in m.split(","))
        src = kv.get("source") or kv.get("src")
        dst = kv.get("target") or kv.get("dst") or kv.get("destination")
        if src and dst and kv.get("type", "bind") == "bind":
            out.append((src, dst, kv.get("readonly", kv.get("ro", "false")) in ("true", "1", "")))
    return out


def _map_back(word: str, mounts: list[tuple[str, str, bool]]) -> str:
    for src, dst, _ in sorted(mounts, key=lambda m: -len(m[1])):
        dst = dst.rstrip("/") or "/"
        if dst == "/":
            continue
        # a glob in the container path (``/h?st/etc``) matches the mount point it names
        word = re.sub(
            r"(?<![\w.~-])/([^/\s'\";|&)]*[*?\[][^/\s'\";|&)]*)(?=/|$|[\s'\";|&)])",
            lambda m_, d_=dst: d_ if (rx := glob_regex(m_.group(1))) and rx.fullmatch(d_.lstrip("/").split("/")[0]) and d_.count("/") == 1 else m_.group(0),
            word,
        )
        word = re.sub(
            r"(?<![\w.~-])" + re.escape(dst) + r"(?=/|$|[\s'\";|&)])",
            lambda _m, s=src: s.rstrip("/") if s.rstrip("/") else "/",
            word,
        )
        word = word.replace("//", "/")
    return word


@_also("docker", "podman", "nerdctl", "docker-compose", "podman-compose", "finch")
def _h_container_inner(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """The command a container runs: ``exec`` into a live container is judged as that command
    (its data is real: ``docker exec pg psql -c 'DROP ...'``); ``run`` with a writable bind mount of
    the host root, a home or a system directory maps the mount back to the host and judges the
    command's paths there (``docker run -v /:/h alpine rm -rf /h/etc`` is ``rm -rf /etc``).

    must match: ``docker exec pg psql -c 'truncate users'``, ``docker run -v /:/host alpine rm -rf /host/etc``;
    must not: ``docker run -v /:/host:ro alpine ls /host``, ``docker run --rm -v $PWD:/src node npm test``,
    ``docker exec pg psql -c 'SELECT 1'``."""
    opts, rest = _split_run(args, _DOCKER_GLOBAL_WITH_ARG)
    if rest[:1] == ["compose"]:
        opts2, rest = _split_run(rest[1:], _DOCKER_GLOBAL_WITH_ARG)
        name = "docker-compose"
    if not rest:
        return
    verb, rest = rest[0], rest[1:]
    if verb == "container" and rest:
        verb, rest = rest[0], rest[1:]
    if verb == "exec":
        eopts, target = _split_run(rest, _DOCKER_RUN_WITH_ARG)
        _inner(d, target[1:], cmd, ctx)
    elif verb == "run":
        ropts, target = _split_run(rest, _DOCKER_RUN_WITH_ARG)
        if name in ("docker-compose", "podman-compose"):
            _inner(d, target[1:], cmd, ctx)  # a service of the project: its volumes are not on the line
            return
        mounts = [m for m in _mounts(ropts) if not m[2]]
        risky = [m for m in mounts if delete_class(m[0]) in ("root", "home", "sysdir", "system")]
        if risky and len(target) > 1:
            _inner(d, [_map_back(w, risky) for w in target[1:]], cmd, ctx)


# -- users, security controls, capabilities


@_also("useradd", "usermod", "adduser", "luseradd", "lusermod")
def _h_uid0(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """A second uid-0 account (``useradd -o -u 0``, ``usermod --uid 0``) is a root backdoor.

    must match: ``useradd -o -u 0 x``, ``usermod -o -u0 svc``, ``useradd --uid=0 --non-unique x``;
    must not: ``useradd -u 1001 app``, ``usermod -aG docker dev``."""
    uids = _opt_value(args, "-u", "--uid")
    for i, a in enumerate(args):  # clustered: -ou 0
        if re.fullmatch(r"-[a-zA-Z]*u", a) and a != "-u" and i + 1 < len(args):
            uids.append(args[i + 1])
        elif re.fullmatch(r"-[a-zA-Z]+u\d+", a):
            uids.append(a.split("u", 1)[1])
    if any(re.fullmatch(r"0+", u.strip()) or u.strip() == UNKNOWN for u in uids):
        d.add(ctx, "uid0_user", cmd.text)


@_also("chattr")
def _h_chattr(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``chattr +i/-i`` (or any attribute) on a system path: locks files against updates or unlocks
    them for tampering.  must match: ``chattr +i /etc/resolv.conf``, ``chattr -R -i /usr/bin``;
    must not: ``chattr +i ./notes.txt``."""
    targets = [a for a in args if not re.fullmatch(r"[-+=][aAcCdDeFijmPsStTux]+|-[RVfv]+|-[pv]", a)]
    for t in targets:
        if write_class(t, cmd.cwd) in ("system", "persist") or delete_class(t, cmd.cwd) in ("root", "sysdir", "system"):
            d.add(ctx, "security_disable", cmd.text, f"chattr changes protection attributes of {normalize_path(t, cmd.cwd)}.")
            return


@_also("setcap")
def _h_setcap(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``setcap cap_x+ep file`` grants a program root powers (``-r`` removes, ``-v`` verifies).

    must match: ``setcap cap_setuid+ep /usr/bin/python3``; must not: ``setcap -r ./bin/tool``, ``setcap -v ... f``."""
    if "-r" in args or "-v" in args:
        return
    d.add(ctx, "privilege_grant", cmd.text)


@_also("setenforce", "aa-teardown", "aa-disable", "aa-complain", "apparmor_parser")
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


# -- power through the bus, namespaces of pid 1


_BUS_POWER = re.compile(r"(?:^|\.)(Reboot|PowerOff|Halt|KExec|RebootWithFlags|PowerOffWithFlags|HaltWithFlags|KexecWithFlags)$")


@_also("dbus-send", "busctl", "gdbus", "qdbus", "dbus")
def _h_bus_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """A D-Bus call of logind/systemd ``Reboot``/``PowerOff``/``Halt``/``KExec``.

    must match: ``dbus-send --system ... org.freedesktop.login1.Manager.Reboot boolean:true``,
    ``busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false``;
    must not: ``busctl list``, ``dbus-send --session ... Notifications.GetServerInformation``."""
    if any(_BUS_POWER.search(a) for a in args):
        d.add(ctx, "power", cmd.text, "Asks logind/systemd over D-Bus to reboot or power off the machine.")


@_also("loginctl")
def _h_loginctl_power(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``loginctl reboot``/``poweroff``/``halt``/``kexec``.  must match: ``loginctl reboot``;
    must not: ``loginctl list-sessions``."""
    verb = next((a for a in args if not a.startswith("-")), "")
    if verb in ("reboot", "poweroff", "halt", "kexec", "power-off"):
        d.add(ctx, "power", cmd.text)


@_also("nsenter")
def _h_nsenter(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``nsenter -t 1 -m`` (or ``-a``) enters the namespaces of pid 1: the host, from a container.

    must match: ``nsenter -t 1 -m -u -i -n -p sh``, ``nsenter --target=1 --mount``, ``nsenter -t1 -a``;
    must not: ``nsenter -t 1234 -n ip addr``."""
    targets = _opt_value(args, "-t", "--target")
    if any(t.strip() in ("1", "01") or UNKNOWN in t for t in targets):
        d.add(ctx, "host_namespace_enter", cmd.text)

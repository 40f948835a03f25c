"""Containers, clusters and clouds: mass container/volume deletion, Kubernetes deletes, drains and
scale-to-zero, Helm uninstalls, cluster tools, infrastructure-as-code destroy, cloud CLIs'
delete verbs, VM destruction; the command behind ``docker exec``/``kubectl exec`` and host
bind mounts of ``docker run`` mapped back to the host path.
"""

from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING

from ..commands import (
    base_name,
    container_listing_is_mass,
    getopt,
    split_options,
    unwrap,
)
from ..globs import glob_regex
from ..model import UNKNOWN, Cmd, Kinds
from ..paths import delete_class, is_block_device
from .base import Ctx, Examples, _inner, _opt_value, also, handles

if TYPE_CHECKING:
    from ..detect import Detector


# -- containers, clusters, clouds


@handles("docker", "podman", "nerdctl", "docker-compose", "podman-compose", "finch", "lima-nerdctl", "crictl", "ctr",
         "buildah", "docker-machine")
def _h_docker(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Bulk deletes of containers, volumes and images (``system prune``, ``volume prune``, ``rm $(docker ps -aq)``,
    ``compose down -v``): they remove state other work depends on, and cannot be undone."""
    _, ops = split_options(
        args,
        {
            "-H",
            "--host",
            "--context",
            "-c",
            "--config",
            "-f",
            "--file",
            "-p",
            "--project-name",
            "--env-file",
            "--profile",
            "--log-level",
            "-l",
            "--project-directory",
            "--namespace",
            "-n",
            "--address",
            "-a",
        },
    )
    words = ops
    if name == "buildah" and words[:1] == ["run"]:
        # ``buildah run [opts] CTR [--] CMD``: CMD runs in the working container, judged as itself (as docker exec)
        _, target = _split_run(args[args.index("run") + 1 :], _DOCKER_RUN_WITH_ARG | {"--isolation", "--runtime",
                                                                                      "--user", "--mount"})
        _inner(d, target[1:][1:] if target[1:2] == ["--"] else target[1:], cmd, ctx)
        return
    if name == "docker-machine" and words[:1] == ["ssh"]:
        # ``docker-machine ssh MACHINE CMD``: CMD runs on the machine, judged as itself (as ``ssh host CMD``)
        rest = args[args.index("ssh") + 1 :]
        rest = rest[1:] if rest and not rest[0].startswith("-") else rest
        if rest:
            d.payload(ctx, " ".join(rest), frozenset(), cmd.text)
        return
    if words[:1] == ["compose"]:
        words = words[1:]
        name = "docker-compose"
    if words[:2] in (["stack", "rm"], ["stack", "remove"], ["stack", "down"]) or (
        words[:2] == ["swarm", "leave"] and any(a in ("-f", "--force") for a in args)
    ) or (words[:2] in (["service", "rm"], ["service", "remove"]) and (any(UNKNOWN in w for w in words[2:]) or _fed_by_listing(cmd))):
        d.add(ctx, "container_mass_delete", cmd.text, f"{name} {' '.join(words[:2])} removes every service of a stack or swarm.")
        return
    if name in ("docker-compose", "podman-compose"):
        if words[:1] == ["down"] and any(
            a in ("-v", "--volumes", "--rmi")
            or a.startswith(("--rmi=", "--volumes=")) and a != "--volumes=false"
            or re.fullmatch(r"-[a-uw-zA-Z]*v\w*", a)  # clustered: ``-vt5``
            for a in args
        ):
            d.add(ctx, "container_mass_delete", cmd.text, "compose down -v deletes the project's volumes.")
        return
    if name == "crictl":
        if words[:1] and words[0] in ("rm", "rmi", "rmp") and any(a in ("-a", "--all", "--prune") for a in args):
            d.add(ctx, "container_mass_delete", cmd.text)
        return
    if (
        len(words) >= 2
        and words[1] == "prune"
        and words[0] in ("system", "container", "volume", "image", "network", "builder", "buildx")
    ):
        if words[0] in ("system", "container", "volume") or (words[0] == "image" and _prune_all(args)):
            d.add(ctx, "container_mass_delete", cmd.text, f"{name} {words[0]} prune deletes {words[0]}s in bulk.")
        return
    if words[:2] == ["system", "reset"] or words[:2] == ["pod", "prune"] or _rm_all(words, args):
        d.add(ctx, "container_mass_delete", cmd.text, f"{name} {' '.join(words[:2])} --all deletes every one in bulk."
              if words[:2] != ["system", "reset"] else "")
        return
    if (
        words[:1]
        and words[0] in ("rm", "rmi", "kill", "stop")
        or words[:2]
        in (
            ["volume", "rm"],
            ["container", "rm"],
            ["image", "rm"],
            ["container", "kill"],
            ["container", "stop"],
            ["network", "rm"],
        )
    ):
        if any("mass" in k for k in kinds) or _fed_by_listing(cmd):
            d.add(ctx, "container_mass_delete", cmd.text, "Deletes every container, image or volume listed." if name !=
                  "docker-machine" else "Deletes or stops every machine docker-machine listed (with their disks).")


def _fed_by_listing(cmd: Cmd) -> bool:
    """``docker ps -aq | xargs docker rm``: the ids of every container (image, volume) are piped in."""
    for g in cmd.upstream[-1:]:
        for m in g:
            a = unwrap(m.argv)[0]
            if a and container_listing_is_mass(base_name(a[0]), a[1:]):
                return True
    return False


# ``rm``-like subcommands of the engines (and buildah), whose ``-a``/``--all`` removes every one
_ENGINE_RM = (["rm"], ["rmi"], ["container", "rm"], ["image", "rm"], ["volume", "rm"], ["pod", "rm"],
              ["container", "remove"], ["image", "remove"], ["volume", "remove"], ["pod", "remove"],
              ["manifest", "rm"], ["network", "rm"], ["secret", "rm"])


def _rm_all(words: list[str], args: list[str]) -> bool:
    """``podman rm -af``, ``podman rmi --all``, ``podman pod rm -a -f``, ``buildah rmi -a``: the ``-a``
    flag read as the engines parse their options (clustered ``-af``/``-fa``, ``--all``, ``--all=true``)."""
    for k in _ENGINE_RM:
        if words[: len(k)] == k:
            break
    else:
        return False
    i = args.index(k[-1]) + 1 if k[-1] in args else 0
    opts, _ = getopt(args[i:], "t", ("--all", "--force", "--ignore", "--volumes", "--depend", "--latest", "--prune"),
                     ("--time", "--cidfile", "--filter"), long_prefix=False)
    return any(o in ("-a", "--all") and (v is None or v.lower() in ("true", "1")) for o, v in opts)


def _prune_all(args: list[str]) -> bool:
    """``image prune -a`` as the engines' pflag reads it: ``-a``, ``-fa``, ``-af``, ``--all``, ``--all=true``
    (pflag takes no abbreviated long names: ``--al`` is an error, not ``--all``)."""
    i = args.index("prune") + 1 if "prune" in args else 0
    opts, _ = getopt(args[i:], "", ("--all", "--force", "--external"), ("--filter",), long_prefix=False)
    return any(o in ("-a", "--all") and (v is None or v.lower() in ("true", "1")) for o, v in opts)


@handles("kubectl", "oc", "k", "microk8s.kubectl", "kubecolor")
def _h_kubectl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``kubectl delete`` of namespaces, nodes, ``--all`` or every resource of a kind: a cluster emptied in one line."""
    _, ops = split_options(
        args,
        {
            "-n",
            "--namespace",
            "--context",
            "--cluster",
            "--kubeconfig",
            "-l",
            "--selector",
            "-f",
            "--filename",
            "-o",
            "--output",
            "--user",
            "-s",
            "--server",
            "--field-selector",
            "--grace-period",
            "--timeout",
            "-c",
            "--container",
            "--cascade",
            "--token",
        },
    )
    if not ops or ops[0] != "delete":
        return
    res = ops[1] if len(ops) > 1 else ""
    # pflag: ``-A`` clusters (``-RA``), a bool takes ``=true``, no abbreviated long names
    kopts, _ = getopt(args, "fkolnsv", (), ("--filename", "--kustomize", "--output", "--selector", "--namespace"),
                      long_prefix=False)
    everything = any(o in ("--all", "-A", "--all-namespaces") and (v is None or v.lower() in ("true", "1", "t"))
                     for o, v in kopts) or "all" in ops[1:2]
    # a kind that IS a cluster (Cluster API ``clusters.cluster.x-k8s.io``, Rancher's
    # ``clusters.management.cattle.io``, CloudNativePG's ``clusters.postgresql.cnpg.io``): its controller
    # deprovisions the whole cluster or database with it; kinds may be listed (``cluster,ns``) and qualified
    kinds_named = {k.split(".")[0].lower() for k in res.split("/")[0].split(",")}
    if kinds_named & {"cluster", "clusters"}:
        d.add(ctx, "cluster_delete", cmd.text, f"kubectl delete {res} deletes a whole cluster through its controller.")
        return
    if everything or kinds_named & {
        "project",
        "projects",
        "namespace",
        "namespaces",
        "ns",
        "node",
        "nodes",
        "no",
        "pv",
        "persistentvolume",
        "persistentvolumes",
        "crd",
        "crds",
        "customresourcedefinition",
        "customresourcedefinitions",
        "clusterrole",
        "clusterroles",
    }:
        d.add(ctx, "cluster_delete", cmd.text, f"kubectl delete {res} removes a namespace or every resource of a kind.")
        return
    why = _kube_bulk_delete(args, ops, cmd)
    if why:
        d.add(ctx, "cluster_delete", cmd.text, f"kubectl delete {why}.")


def _kube_bulk_delete(args: list[str], ops: list[str], cmd: Cmd) -> str:
    """Bulk spellings of ``kubectl delete``: ``--all=true``, a label selector, a whole directory or
    kustomization (``-f .``, ``-k .``, ``-R``), or a list made by ``kubectl get`` (``$(…)``, ``| xargs``)."""
    p = getopt(args, "nlfokcs", ("--all", "--recursive", "--all-namespaces"),
               ("--namespace", "--selector", "--filename", "--kustomize", "--output", "--context", "--cluster",
                "--kubeconfig", "--field-selector", "--grace-period", "--timeout", "--user", "--server", "--cascade"))
    for o, v in p[0]:
        if o == "--all" and (v is None or v.lower() in ("true", "1", "t")):
            return "--all removes every resource of the kind"
        if o in ("-l", "--selector", "--field-selector") and v is not None:
            return f"by selector {v} removes every resource it matches"
        if o in ("-k", "--kustomize") or o in ("-R", "--recursive"):
            return "removes every resource of a whole directory or kustomization"
        if o in ("-f", "--filename") and v is not None and (
            v in (".", "./", "..") or v.endswith("/") or not re.search(r"\.(?:ya?ml|json)$|^-$|^https?://", v)
        ):
            return f"-f {v} removes every resource defined in a directory"
    if any(UNKNOWN in o for o in ops[1:]):
        return "removes resources from a list the gate cannot see"
    for g in cmd.upstream[-1:]:
        for m in g:
            a = unwrap(m.argv)[0]
            if a and base_name(a[0]) in ("kubectl", "oc", "k", "kubecolor") and "get" in a:
                return "removes every resource kubectl get listed"
    return ""


@handles(
    "kind",
    "k3d",
    "eksctl",
    "kops",
    "minikube",
    "kubeadm",
    "microk8s",
    "talosctl",
    "k0s",
    "k3s-uninstall.sh",
    "rke",
    "rke2-uninstall.sh",
    "ctlptl",
    "vcluster",
    "clusterctl",
    "helm",
    "k9s",
    "argocd",
    "kubefed",
)
def _h_cluster(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Cluster tools' delete/reset verbs (``kind/k3d/eksctl/kops delete cluster``, ``minikube delete``,
    ``kubeadm reset``): the whole cluster goes."""
    ops = [a for a in args if not a.startswith("-")]
    hit = False
    if name in ("kind", "k3d", "eksctl", "kops", "ctlptl", "vcluster", "clusterctl"):
        # the delete verb with the aliases the tools accept (k3d: ``cluster delete|del|rm``; k3d v1 had no
        # ``cluster`` noun: ``k3d delete --name x``, ``k3d d -a``)
        hit = (
            any(w in _CLUSTER_DELETE for w in ops[:2])
            and (any(w in ("cluster", "clusters") for w in ops[:3]) or name in ("vcluster", "ctlptl", "clusterctl"))
            or (name == "clusterctl" and "delete" in ops)
            or (name == "k3d" and ops[:1] in (["delete"], ["del"], ["d"]))
        )
    elif name == "minikube":
        hit = ops[:1] == ["delete"]
    elif name in ("kubeadm", "microk8s", "talosctl", "k0s"):
        hit = ops[:1] == ["reset"]
    elif name in ("k3s-uninstall.sh", "rke2-uninstall.sh"):
        hit = True
    elif name == "rke":
        hit = ops[:1] == ["remove"]  # tears the cluster's components and data off every node
    elif name == "helm":
        hit = ops[:1] in (["uninstall"], ["delete"]) and any(a in ("--all",) for a in args)
    elif name == "argocd":
        hit = ops[:2] in (["app", "delete"], ["cluster", "rm"]) and "--all" in args
    if hit:
        d.add(ctx, "cluster_delete", cmd.text, f"{name} {' '.join(ops[:2])} deletes a cluster.")


_CLUSTER_DELETE = frozenset({"delete", "del", "rm", "remove", "destroy"})


_TF_ENV = re.compile(r"(?:^|[\s;&|(])(?:export\s+)?TF_CLI_ARGS(?:_apply)?=(?:'[^']*|\"[^\"]*|\S*)-destroy\b")


def _tf_destroy(args: list[str], cmd: Cmd) -> bool:
    """``apply -destroy`` in the spellings Go's flag package takes (``--destroy``, ``-destroy=true``),
    or through ``TF_CLI_ARGS``/``TF_CLI_ARGS_apply`` set on the command."""
    p = getopt(args, "", ("--destroy", "--auto-approve", "--refresh-only"), (), single_dash_long=True)
    if any(o == "--destroy" and (v is None or v.lower() in ("true", "1", "t")) for o, v in p[0]):
        return True
    return bool(_TF_ENV.search(cmd.text))


@handles(
    "terraform",
    "tofu",
    "opentofu",
    "terragrunt",
    "pulumi",
    "cdk",
    "cdktf",
    "serverless",
    "sls",
    "sam",
    "azd",
    "copilot",
    "juju",
    "sst",
    "amplify",
    "cdk8s",
    "tf",
    "terramate",
    "atmos",
    "ansible-playbook-destroy",
)
def _h_iac(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Infrastructure-as-code destroy (``terraform destroy``, ``apply -destroy``, ``pulumi destroy``,
    ``serverless remove``): every resource the stack manages is deleted."""
    ops = [a for a in args if not a.startswith("-")]
    hit = "destroy" in ops[:3] or (ops[:2] == ["workspace", "delete"] and any(a in ("-force", "--force") for a in args)) or (
        name in ("terraform", "tofu", "opentofu", "terragrunt", "tf")
        and ("apply" in ops[:2] or "plan" in ops[:2] and any(a.startswith(("-out", "--out")) for a in args))
        and _tf_destroy(args, cmd)
    )
    hit = (
        hit
        or (name == "pulumi" and (ops[:1] == ["down"] or ops[:2] == ["stack", "rm"]))
        or (name in ("serverless", "sls") and ops[:1] == ["remove"])
    )
    hit = (
        hit
        or (name in ("sam", "copilot", "amplify") and "delete" in ops[:3])
        or (name == "azd" and ops[:1] == ["down"])
    )
    hit = (
        hit
        or (
            name == "juju"
            and any(
                w.startswith(("destroy-", "kill-controller", "remove-"))
                and w in ("destroy-model", "destroy-controller", "kill-controller")
                for w in ops[:1]
            )
        )
        or (name == "sst" and ops[:1] == ["remove"])
    )
    if hit:
        d.add(ctx, "infra_destroy", cmd.text, f"{name} destroys every resource of the stack.")


_CLOUD_VERB = re.compile(
    r"^(?:delete|destroy|terminate|purge|purge-\S+|rb|remove|delete-\S+|terminate-\S+|destroy-\S+|remove-\S+|apps:destroy|pg:reset|[a-z-]+:destroy|[a-z-]+:delete|deprovision"
    r"|schedule-key-deletion|disable-key|deregister-\S+"
    # ibmcloud's ``service-instance-delete``/``resource-group-delete``, firebase's ``database:remove``
    r"|[a-z]+(?:-[a-z]+)*-delete|[a-z-]+:remove)$"
)
# ``rm``/``del``: the short delete verb of many CLIs (``doctl compute droplet rm``, ``linode-cli linodes rm``,
# ``ibmcloud ks cluster rm``), after the resource noun; gcloud/az/oci storage ``rm`` of one object is not
_CLOUD_RM = frozenset({"rm", "del"})
# Words that make the deleted thing the CLI's own local configuration, not a cloud resource: ``gcloud
# config configurations delete``, ``hcloud context delete``, ``doctl auth remove``, ``scw config profile
# delete``, ``civo apikey remove``, Concourse ``fly -t x delete-target``, ``heroku plugins:remove`` (a cloud
# resource named like one, ``az cdn profile delete``, ``gcloud deploy targets delete``, stays a delete)
_LOCAL_CONFIG = frozenset(
    {"config", "configuration", "configurations", "context", "contexts", "auth", "apikey", "apikeys", "plugins",
     "plugin", "completion"}
)


def _cloud_delete_verb(name: str, ops: list[str]) -> str:
    """The delete verb among a cloud CLI's first operands, unless it deletes the CLI's local
    configuration (a context, profile, saved target, API key)."""
    for i, w in enumerate(ops[:5]):
        verb = _CLOUD_VERB.match(w) or (i >= 1 and w in _CLOUD_RM and name not in ("gcloud", "az", "oci"))
        if not verb:
            continue
        nouns = {x.lower() for x in ops[:i]} | {w.split(":")[0].lower()}
        if nouns & _LOCAL_CONFIG or w.lower() in ("delete-target", "delete-context", "delete-profile", "remove-context"):
            return ""
        return w
    return ""


@handles(
    "aws",
    "gcloud",
    "az",
    "azure",  # the classic Azure CLI (``azure vm disk delete``, ``azure group delete``)
    "gsutil",
    "doctl",
    "hcloud",
    "linode-cli",
    "vultr-cli",
    "scw",
    "oci",
    "ibmcloud",
    "heroku",
    "fly",
    "flyctl",
    "cf",
    "cf8",
    "openstack",
    "exo",
    "upcloud",
    "civo",
    "vercel",
    "netlify",
    "railway",
    "render",
    "aliyun",
    "tccli",
    "yc",
    "s3cmd",
    "rclone",
    "gcs",
    "mc",
    "b2",
    "azcopy",
    "supabase",
    "neonctl",
    "planetscale",
    "pscale",
    # turso: owned by the SQL handler (data.py)
    "wrangler",
    "firebase",
    "qm",
    "pct",
    "virsh",
    "VBoxManage",
    "vboxmanage",
    "multipass",
    "prlctl",
    "lxc",
    "incus",
    "vagrant",
    "utmctl",
    "xl",
    "xm",  # Xen's older toolstack: ``xm reboot|shutdown|destroy DOM`` stops a guest, not this machine
)
def _h_cloud(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Cloud CLIs' delete/terminate verbs (``aws s3 rb``, ``s3 rm --recursive``, ``ec2 terminate-instances``,
    ``gcloud … delete``, ``gsutil rm -r``) and VM tools' destroy verbs (``qm destroy``, ``virsh undefine
    --remove-all-storage``, ``vagrant destroy``)."""
    ops = [a for a in args if not a.startswith("-")]
    rec = any(a in ("--recursive", "-r", "-R", "--force", "-rf") for a in args)
    if name in ("qm", "pct"):
        if ops[:1] and len(ops[0]) >= 3 and "destroy".startswith(ops[0]):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "virsh":
        if (
            ops[:1] == ["undefine"]
            and any(a.startswith(("--remove-all-storage", "--storage", "--wipe-storage")) for a in args)
            or ops[:1] in (["pool-delete"], ["vol-wipe"], ["pool-undefine"])
        ):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name.lower() == "vboxmanage":
        if ops[:1] == ["unregistervm"] and any(a.startswith("--delete") for a in args):
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "multipass":
        if ops[:1] == ["delete"] and any(a in ("--purge", "-p", "--all") for a in args) or ops[:1] == ["purge"]:
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name == "vagrant":
        if ops[:1] == ["destroy"]:
            d.add(ctx, "vm_destroy", cmd.text)
        return
    if name in ("cf", "cf8") and ops[:1] in (["ssh"], ["run-task"], ["rt"]):
        # ``cf ssh APP -c CMD`` / ``cf run-task APP --command CMD`` (v6/v7 also ``run-task APP CMD``): CMD runs in
        # the app's container, judged as itself
        texts = _opt_value(args, "-c", "--command") + (ops[2:3] if ops[0] != "ssh" and "--command" not in args
                                                          and "-c" not in args else [])
        for t in texts:
            d.payload(ctx, t, frozenset(), cmd.text)
        return
    if name in ("prlctl", "utmctl", "xl", "xm", "lxc", "incus"):
        return
    if name == "aws":
        ops = _aws_operands(args)
        # sync --delete deploys are everyday; an empty or unknown source (``/empty``, ``$(mktemp -d)``)
        # empties the bucket
        if ops[:2] == ["s3", "sync"] and "--delete" in args and any(o.startswith("s3://") for o in ops[3:4]) and any(
            UNKNOWN in o or re.search(r"(?:^|/)(?:empty|null|nothing)/?$", o) for o in ops[2:3]
        ):
            d.add(ctx, "cloud_delete", cmd.text, "aws s3 sync --delete removes every object of the bucket the source lacks.")
        elif ops[:2] == ["s3", "mv"] and rec and any(o.startswith("s3://") for o in ops[2:3]):
            d.add(ctx, "cloud_delete", cmd.text, "aws s3 mv --recursive empties the source bucket or prefix.")
        elif ops[:2] == ["s3", "rb"] or (ops[:2] == ["s3", "rm"] and rec):
            d.add(ctx, "cloud_delete", cmd.text, "Deletes an S3 bucket or every object under a prefix.")
        elif len(ops) >= 2 and _CLOUD_VERB.match(ops[1]) and ops[0] != "s3":
            d.add(ctx, "cloud_delete", cmd.text, f"aws {ops[0]} {ops[1]} deletes cloud resources.")
        return
    if name == "rclone" and any(a in ("-n", "--dry-run", "-i", "--interactive") for a in args):
        return
    if name in ("gsutil", "s3cmd", "gcs", "mc", "b2", "azcopy", "rclone"):
        wild = any(re.match(r"^[a-z0-9]+://[^/]+/?(?:\*\*?)?$", o) and "*" in o for o in ops[1:])
        if (
            any(w in ("rb", "purge", "rmdir") for w in ops[:2])
            or (any(w in ("rm", "del", "remove", "delete") for w in ops[:2]) and wild)
            or (any(w in ("rm", "del", "remove", "delete") for w in ops[:2]) and rec)
            or (name == "rclone" and ops[:1] in (["purge"], ["delete"], ["deletefile"]) and ops[:1] != ["deletefile"])
        ):
            d.add(ctx, "cloud_delete", cmd.text, f"{name} deletes a bucket or everything under a prefix.")
        return
    if _cloud_delete_verb(name, ops) or (
        rec and any(w in ("rm", "rb") for w in ops[:3]) and name in ("gcloud", "az", "bq", "oci", "ibmcloud", "scw")
    ):
        d.add(ctx, "cloud_delete", cmd.text, f"{name} {' '.join(ops[:4])} deletes cloud resources.")


@handles("zoneadm", "zonecfg", "machinectl")
def _h_guests(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Solaris zones and systemd-nspawn machines are guests: ``zoneadm -z z uninstall`` deletes the
    zone's files and ``zonecfg -z z delete`` its configuration (like ``qm destroy``); ``zoneadm -z z
    halt|reboot`` and ``machinectl poweroff|reboot NAME`` stop or restart the guest, not this
    machine, so they are not the power floor."""
    p = getopt(args, "zRuf", (), ())
    ops = p[1]
    if name == "zoneadm" and ops[:1] == ["uninstall"] or name == "zonecfg" and ops[:1] == ["delete"]:
        d.add(ctx, "vm_destroy", cmd.text, f"{name} {ops[0]} deletes a zone.")
    elif name == "machinectl" and ops[:1] == ["remove"]:
        d.add(ctx, "vm_destroy", cmd.text, "machinectl remove deletes a machine image.")


@also("aws", "az", "gcloud")
def _h_cloud_run_command(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Commands run on remote machines by cloud run-command services are judged as themselves:
    ``aws ssm send-command --parameters 'commands=[…]'``, ``az vm run-command invoke --scripts …``,
    ``gcloud compute ssh vm --command …``."""
    texts: list[str] = []
    if name == "aws" and "send-command" in args:
        for v in _opt_value(args, "", "--parameters"):
            texts += re.findall(r'"((?:[^"\\]|\\.)*)"', v.split("=", 1)[1] if "=" in v else v)
    elif name == "az" and "run-command" in args:
        i = args.index("--scripts") if "--scripts" in args else -1
        texts += [a for a in args[i + 1 :] if not a.startswith("-")][:8] if i >= 0 else []
    elif name == "gcloud" and "ssh" in args:
        texts += _opt_value(args, "", "--command")
    for t in texts:
        d.payload(ctx, t, frozenset(), cmd.text)


@handles("ansible", "salt", "salt-ssh", "pssh", "parallel-ssh", "pdsh", "clush", "mussh")
def _h_fleet(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Fleet runners: the command they run on every host is judged as itself (``ansible all -a CMD``,
    ``-m shell|command|raw -a CMD``, ``salt '*' cmd.run CMD``, ``pssh -h hosts CMD``, ``pdsh -w h CMD``)."""
    texts: list[str] = []
    if name == "ansible":
        module = (_opt_value(args, "-m", "--module-name") or ["command"])[-1]
        if module in ("shell", "command", "raw", "ansible.builtin.shell", "ansible.builtin.command",
                      "ansible.builtin.raw", "script"):
            texts += _opt_value(args, "-a", "--args")
    elif name in ("salt", "salt-ssh"):
        ops = [a for a in args if not a.startswith("-")]
        for i, o in enumerate(ops):
            if o in ("cmd.run", "cmd.run_all", "cmd.shell", "cmd.script", "cmd.exec_code") and i + 1 < len(ops):
                texts.append(" ".join(ops[i + 1 :]))
                break
    else:
        with_arg = {"-h", "-H", "-l", "-p", "-t", "-o", "-e", "-O", "-x", "-X", "-w", "-g", "-R", "-f", "-u", "-b",
                    "--hosts", "--host", "--user", "--par", "--timeout", "--outdir", "--errdir", "--option"}
        _, ops = split_options(args, with_arg)
        if ops:
            texts.append(" ".join(ops))
    for t in texts:
        d.payload(ctx, t, frozenset(), cmd.text)


# aws options that take no value (the others take the next word: ``--profile prod``, ``--region x``)
_AWS_FLAGS = frozenset(
    "--debug --no-verify-ssl --no-paginate --no-sign-request --no-cli-pager --cli-auto-prompt --no-cli-auto-prompt "
    "--recursive --force --dryrun --dry-run --no-dry-run --quiet --only-show-errors --no-progress --delete "
    "--exact-timestamps --follow-symlinks --no-follow-symlinks --human-readable --summarize --size-only "
    "--no-guess-mime-type --ignore-glacier-warnings --force-glacier-transfer --include-deleted --no-include-deleted "
    "--skip-final-snapshot --no-skip-final-snapshot --force-delete-without-recovery --version".split()
)


def _aws_operands(args: list[str]) -> list[str]:
    """aws's operands (service, operation, paths), past its options wherever they stand: a global
    option with a value before the service (``aws --profile prod s3 rm``) or between service and
    operation (``aws s3 --region x rb``) does not shift them."""
    ops: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" not in a and a not in _AWS_FLAGS:
            i += 2
            continue
        if not a.startswith("-"):
            ops.append(a)
        i += 1
    return ops


# -- clusters


_KUBE_WITH_ARG = {
    "-n", "--namespace", "--context", "--cluster", "--kubeconfig", "-l", "--selector", "-f", "--filename", "-o",
    "--output", "--user", "-s", "--server", "--field-selector", "--grace-period", "--timeout", "-c", "--container",
    "--cascade", "--token", "--replicas", "--as", "--request-timeout", "--pod-running-timeout",
}


@also("kubectl", "oc", "k", "microk8s.kubectl", "kubecolor")
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
    if verb == "apply" and "--prune" in args and any(a in ("--all", "--all=true") for a in args):
        d.add(ctx, "cluster_delete", cmd.text, "kubectl apply --prune --all deletes every resource missing from the files.")
    elif verb == "taint" and "--all" in args and any(o.endswith((":NoExecute", ":NoSchedule")) for o in ops):
        d.add(ctx, "workload_stop", cmd.text, "Taints every node: pods are evicted or cannot be scheduled.")
    if verb == "scale":
        reps = _opt_value(opts, "", "--replicas")
        if any(r.strip() in ("0", "00") or UNKNOWN in r for r in reps):
            d.add(ctx, "workload_stop", cmd.text, "Scales a workload to zero replicas: it stops serving.")
    elif verb == "drain":
        d.add(ctx, "workload_stop", cmd.text, "Drains a node: every pod on it is evicted.")
    elif verb in ("exec", "debug", "run") and tail:
        _inner(d, tail, cmd, ctx)


@also("helm")
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
        kv: dict[str, str] = {}
        for p in m.split(","):
            key, eq, value = p.partition("=")
            kv[key] = value if eq else "true"
        src = kv.get("source") or kv.get("src")
        dst = kv.get("target") or kv.get("dst") or kv.get("destination")
        if src and dst and kv.get("type", "bind") == "bind":
            out.append((src, dst, kv.get("readonly", kv.get("ro", "false")) in ("true", "1", "")))
    return out


def _glob_to_mount(m: re.Match[str], mount: str) -> str:
    """A glob first path component (``/h?st``) that matches the one-level ``mount`` point names it."""
    rx = glob_regex(m.group(1))
    return mount if rx and rx.fullmatch(mount.lstrip("/").split("/")[0]) and mount.count("/") == 1 else m.group(0)


def _map_back(word: str, mounts: list[tuple[str, str, bool]]) -> str:
    for src, dst, _ in sorted(mounts, key=lambda m: -len(m[1])):
        dst = dst.rstrip("/") or "/"
        if dst == "/":
            continue
        # a glob in the container path (``/h?st/etc``) matches the mount point it names
        word = re.sub(
            r"(?<![\w.~-])/([^/\s'\";|&)]*[*?\[][^/\s'\";|&)]*)(?=/|$|[\s'\";|&)])",
            functools.partial(_glob_to_mount, mount=dst),
            word,
        )
        host = src.rstrip("/") or "/"
        word = re.sub(r"(?<![\w.~-])" + re.escape(dst) + r"(?=/|$|[\s'\";|&)])", lambda _m: host, word)
        word = word.replace("//", "/")
    return word


def _host_access(opts: list[str]) -> str:
    """Why a ``docker run`` reaches the host itself: ``--privileged``, the host's pid namespace,
    a block device, ``SYS_ADMIN``/``ALL`` capabilities, the Docker socket or the host root mounted."""
    flat = [o.split("=", 1) if o.startswith("--") and "=" in o else [o] for o in opts]
    words = [w for f in flat for w in f]
    if "--privileged" in words and not any(o in ("--privileged=false",) for o in opts):
        return "--privileged"
    for i, w in enumerate(words[:-1]):
        v = words[i + 1]
        if w == "--pid" and v == "host":
            return "--pid=host"
        if w == "--device" and is_block_device(v.split(":", 1)[0]):
            return f"--device {v}"
        if w == "--cap-add" and v.upper().removeprefix("CAP_") in ("SYS_ADMIN", "ALL", "SYS_MODULE", "SYS_RAWIO"):
            return f"--cap-add {v}"
    net_host = any(w in ("--net", "--network") and v == "host" for w, v in zip(words, words[1:]))
    if net_host and any(w == "--cap-add" and v.upper().removeprefix("CAP_") == "NET_ADMIN" for w, v in zip(words, words[1:])):
        return "the host network with NET_ADMIN"
    for src, _dst, ro in _mounts(opts):
        if not ro and (src.rstrip("/") == "" or src.endswith("docker.sock") or src.endswith("containerd.sock")):
            return f"the host path {src} mounted"
    return ""


@also("docker", "podman", "nerdctl", "docker-compose", "podman-compose", "finch")
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
        compose = name in ("docker-compose", "podman-compose")
        mounts = [m for m in _mounts(ropts) if not m[2]]
        risky = [m for m in mounts if delete_class(m[0]) in ("root", "home", "sysdir", "system")]
        host = _host_access(ropts)
        if host:
            d.add(ctx, "host_namespace_enter", cmd.text,
                  f"The container gets the host: {host}; what it runs can change the machine itself.")
        if host and len(target) > 1:
            # with the host's devices/processes: judged as if run on the host (mounts mapped back)
            _inner(d, [_map_back(w, risky) for w in target[1:]], cmd, ctx)
        elif risky and len(target) > 1:
            _inner(d, [_map_back(w, risky) for w in target[1:]], cmd, ctx)
        elif compose:
            _inner(d, target[1:], cmd, ctx)  # a service of the project: its volumes are not on the line


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "container_mass_delete",
        match=("docker system prune -af", "docker volume prune", "podman system reset", "docker compose down -v",
               "docker rm -f $(docker ps -aq)", "podman rm -af", "podman rmi --all", "buildah rm -a",
               "docker rm $(docker ps -aqf status=exited)", "docker volume rm $(docker volume ls -qf dangling=true)",
               "docker-machine rm -y $(docker-machine ls -q)", "docker image prune -fa", "podman image prune --all=true"),
        no_match=("docker ps -a", "docker rm web", "docker stop web", "docker compose down", "podman rm -f web",
                  "docker rm $(docker ps -qf name=web)", "docker rmi $(docker images -qf dangling=true)",
                  "docker rmi $(docker images -q nginx)", "docker-machine rm -y dev", "docker image prune -f",
                  "docker image prune --al"),
    ),
    Examples(
        "cluster_delete",
        match=("kubectl delete ns prod", "kubectl delete pods --all", "kind delete cluster", "kubeadm reset -f",
               "minikube delete --all", "k3d cluster rm dev", "k3d delete --name dev", "rke remove",
               "kubectl delete clusters.cluster.x-k8s.io prod"),
        no_match=("kubectl get pods", "kubectl delete pod web-1", "kind get clusters", "k3d node delete k3d-agent-1",
                  "kubectl get clusters.management.cattle.io", "rke up"),
    ),
    Examples(
        "workload_stop",
        match=("helm uninstall web", "kubectl scale deploy web --replicas=0", "kubectl drain node1 --ignore-daemonsets"),
        no_match=("helm list", "kubectl scale deploy web --replicas=3", "kubectl cordon node1"),
    ),
    Examples(
        "infra_destroy",
        match=("terraform destroy", "tofu destroy", "pulumi down -y", "terraform apply -destroy"),
        no_match=("terraform plan", "terraform apply", "pulumi preview"),
    ),
    Examples(
        "cloud_delete",
        match=("aws s3 rb s3://bucket --force", "aws s3 rm s3://bucket --recursive", "gsutil rm -r gs://bucket",
               "az vm delete -g rg -n vm1 --yes", "aws ec2 terminate-instances --instance-ids i-1",
               "doctl compute droplet rm web", "cf delete-space prod -f", "ibmcloud resource service-instance-delete db"),
        no_match=("aws s3 ls s3://bucket", "aws s3 sync . s3://bucket", "aws ec2 describe-instances",
                  "gcloud config configurations delete old", "hcloud context delete old", "fly -t ci delete-target",
                  "gcloud storage rm gs://bucket/one.txt"),
    ),
    Examples(
        "vm_destroy",
        match=("qm destroy 100", "pct destroy 101", "virsh undefine vm --remove-all-storage", "vagrant destroy -f",
               "zoneadm -z web01 uninstall -F", "zonecfg -z web01 delete -F"),
        no_match=("qm list", "virsh list --all", "vagrant status", "zoneadm -z web01 halt", "zonecfg -z web01 info"),
    ),
)

"""The gate on community cheat sheets: the families taught by a different author population than tldr.

The rules were written from cheat/cheatsheets and navi sheets (denisidoro/cheats, papanito/cheats, …) minus a
held-back third, then checked on chubin/cheat.sheets, extracted afterwards.  The spellings below were written after
the rules and were not used to design them; each family has everyday look-alikes that must stay allowed.
``tests/data/gate_cheats.tsv`` is the labelled held-out set itself (see its header).
"""

from __future__ import annotations

import pathlib

import pytest
from executor.approval import Decision, analyze

DATA = pathlib.Path(__file__).resolve().parent / "data" / "gate_cheats.tsv"

# (rule, command): each must raise that rule (ASK or DENY)
CAUGHT = [
    # containers: -a/--all as the engines parse it, listings narrowed only by state
    ("container_mass_delete", "podman rm -fa --time 3"),
    ("container_mass_delete", "sudo podman pod rm -fa"),
    ("container_mass_delete", "podman image rm -af"),
    ("container_mass_delete", "buildah rmi --all --force"),
    ("container_mass_delete", "docker rm -v $(docker ps --all --quiet --filter status=exited)"),
    ("container_mass_delete", "docker container ls -aq -f status=created | xargs -r docker container rm"),
    ("container_mass_delete", "podman volume rm $(podman volume ls -q --filter dangling=true)"),
    ("container_mass_delete", "docker-machine kill $(docker-machine ls --quiet)"),
    ("power", "docker-machine ssh swarm-1 'sudo reboot'"),
    # clusters: delete aliases, kinds that are clusters
    ("cluster_delete", "k3d cluster del staging"),
    ("cluster_delete", "k3d d -a"),
    ("cluster_delete", "kubectl -n fleet-default delete cluster.provisioning.cattle.io/downstream"),
    ("cluster_delete", "kubectl delete clusters.postgresql.cnpg.io pg-main -n db"),
    ("cluster_delete", "rke remove --config cluster.yml"),
    # clouds: short and suffixed delete verbs, cf, the classic azure CLI; resources named like local config
    ("cloud_delete", "doctl kubernetes cluster rm prod"),
    ("cloud_delete", "ibmcloud resource group-delete old-rg -f"),
    ("cloud_delete", "cf delete-service-broker legacy -f"),
    ("cloud_delete", "cf purge-service-instance orphan -f"),
    ("cloud_delete", "firebase database:remove / --project prod"),
    ("cloud_delete", "azure storage account delete oldacct"),
    ("cloud_delete", "az cdn profile delete -n edge -g rg"),
    ("cloud_delete", "gcloud deploy targets delete qa --region us-central1"),
    # disks: image writers given a target, disks joined to pools, lvm's multiplexer, fio writing
    ("disk_image_write", "woeusb --target-filesystem NTFS --device Win11.iso /dev/sdd"),
    ("device_write", "zpool attach rpool nvme0n1p3 /dev/nvme1n1p3"),
    ("device_write", "btrfs replace start 2 /dev/sdg /srv"),
    ("device_write", "mdadm --manage /dev/md1 --add-spare /dev/sdh1"),
    ("device_write", "fio --name=burn --filename=/dev/nvme1n1 --rw=randrw --bs=4k"),
    ("device_write", "lvm vgextend data /dev/vdc"),
    ("volume_destroy", "lvm lvremove -y vg0/scratch"),
    # data stores other than SQL: their drops and truncates
    ("db_drop", "consul kv delete -recurse=true config/"),
    ("db_drop", "vault secrets disable -namespace=team pki_int"),
    ("db_drop", "influx bucket delete --name telemetry --org acme"),
    ("db_drop", "zkCli.sh -server zk1:2181 deleteall /hbase"),
    ("db_drop", "kafka-topics --bootstrap-server b1:9092 --topic 'events.*' --delete"),
    ("db_drop", "rabbitmqctl purge_queue -p /prod invoices"),
    ("db_drop", "nats stream purge EVENTS --force"),
    ("db_drop", "nats object rm artifacts -f"),
    ("db_drop", "shopctl --env prod sql truncate"),  # a tool the gate does not know: a data noun, an emptying verb
    ("http_delete", "curl -s -XPOST 'http://localhost:9200/logs-2024.*/_delete_by_query?conflicts=proceed' "
                    "-H 'Content-Type: application/json' -d '{\"query\":{\"match_all\":{}}}'"),
    # git-extras commands that push or reset, options read as their scripts read them
    ("git_force_push", "git magic -a -m 'release' -f -p"),
    ("git_remote_delete", "git delete-branch hotfix/login"),
    ("git_reset_hard", "git undo 2 --hard"),
    # etckeeper: its uninit deletes /etc's history, its vcs runs git there
    ("git_clean_force", "sudo etckeeper -d /etc vcs clean -fdx"),
    ("git_history_destroy", "etckeeper -d /srv/etc uninit"),
    # crontabs emptied, accounts, the audit trail
    ("crontab_remove", "crontab -u www-data /dev/null"),
    ("crontab_remove", "printf '' | crontab -u deploy -"),
    ("crontab_remove", "crontab - </dev/null"),
    ("account_change", "adduser deploy admin"),
    ("account_change", "sudo addgroup ci sudo"),
    ("account_change", "adduser --ingroup wheel ops"),
    ("security_disable", "sudo auditctl -e 0"),
    # runlevels other than halt/reboot/single still stop the current one's services (as systemctl isolate)
    ("service_stop", "sudo telinit 4"),
    ("power", "telinit -t 10 0"),
    # a command substitution that is a bare operand of a declaration runs
    ("power", "local a b $(shutdown -h now)"),
    # tools the families now handle still judge the commands they run (as the unknown-wrapper rule did)
    ("service_stop", "fio --exec_prerun='systemctl stop nginx' job.fio"),
    ("rm_recursive_root", "buildah run --user root ctr -- rm -rf /usr"),
    ("sql_destructive", "cf ssh api -c \"psql -c 'DROP TABLE orders'\""),
    ("git_force_push", "cf run-task builder --command 'git push -f origin main'"),
]

# everyday look-alikes: must stay ALLOW
ALLOWED = [
    "podman rm -f mycontainer", "podman rmi alpine:3.19", "podman pod ps", "buildah images",
    "docker rm $(docker ps -aq --filter name=test_)", "docker rmi $(docker images -q --filter dangling=true)",
    "docker stop $(docker ps -q -n 1)", "docker rmi $(docker images -q redis)", "docker-machine rm -f old-vm",
    "docker-machine ssh dev 'docker ps'", "docker-machine ls --filter driver=virtualbox",
    "k3d cluster list", "k3d registry delete myreg", "kubectl get cluster -A", "kubectl describe clusters.cluster.x-k8s.io prod",
    "rke up --config cluster.yml", "kubectl delete clusterissuer letsencrypt-staging",
    "gcloud config configurations delete scratch --quiet", "scw config profile delete dev", "hcloud context delete staging",
    "civo apikey remove old", "fly -t main delete-target", "heroku plugins:remove heroku-repo",
    "gcloud storage rm gs://assets/logo.png", "doctl compute droplet list", "azure vm list",
    "woeusb --help", "woeusb --version", "etcher",
    "fio --name=seq --filename=/dev/nvme0n1 --rw=randread --readonly", "blktrace -d /dev/nvme0n1 -w 30",
    "photorec /log /dev/sdb", "extundelete /dev/sdb1 --restore-file home/alice/notes.txt", "zpool iostat -v tank 5",
    "btrfs device stats /srv", "mdadm --examine /dev/sdh1", "lvm version",
    "consul kv delete config/feature-flag", "vault kv delete secret/app/api-key", "vault secrets enable -path=kv2 kv-v2",
    "influx bucket list", "kafka-topics --describe --topic events --bootstrap-server b1:9092", "rabbitmqctl list_queues",
    "nats stream info EVENTS", "shopctl --env prod sql dump", "shopctl db migrate", "nats kv del config flags", "zkCli.sh -server zk1:2181 ls /",
    "curl -XPOST es:9200/logs/_delete_by_query -d '{\"query\":{\"range\":{\"@timestamp\":{\"lt\":\"now-30d\"}}}}'",
    "crontab -l > backup.cron", "crontab backup.cron", "printf '*/5 * * * * /usr/local/bin/sync\\n' | crontab -",
    "adduser --disabled-password deploy", "adduser deploy www-data", "addgroup ci", "auditctl -l", "auditctl -s",
    "auditctl -a always,exit -F arch=b64 -S execve", "erl -noshell -s release start -s init stop",
    "etckeeper vcs diff", "etckeeper init", "git magic -a -m 'force it'", "git undo --soft 2", "git delete-squashed-branches main", "telinit q", "init U", "runlevel", "export A B", "declare -x PATH", "local x $(date +%s)",
    "buildah run ctr -- ls /", "cf ssh api -c 'ls /home/vcap'", "fio --exec_prerun='sync' job.fio",
]

# not the machine's power floor (they may still ask as a service or guest stop)
NOT_POWER = ["udisksctl power-off -b /dev/sdc", "udisksctl power-off --block-device /dev/sdc", "xm reboot guest1",
             "xl reboot guest1"]


@pytest.mark.parametrize(("rule", "command"), CAUGHT)
def test_cheat_sheet_spellings_are_caught(rule: str, command: str) -> None:
    verdict = analyze(command)
    assert verdict.decision is not Decision.ALLOW, command
    assert verdict.rule == rule, (command, verdict.rule)


@pytest.mark.parametrize("command", ALLOWED)
def test_cheat_sheet_look_alikes_stay_allowed(command: str) -> None:
    verdict = analyze(command)
    assert verdict.decision is Decision.ALLOW, (command, verdict.rule, verdict.reason)


@pytest.mark.parametrize("command", NOT_POWER)
def test_drive_and_guest_power_verbs_are_not_the_floor(command: str) -> None:
    verdict = analyze(command)
    assert verdict.rule != "power" and verdict.decision is not Decision.DENY, (command, verdict.rule)


def _rows() -> list[tuple[str, str, str]]:
    rows = []
    for line in DATA.read_text(encoding="utf-8").splitlines():
        if line.startswith(("#", "expect\t")) or not line.strip():
            continue
        expect, _sheet, technique, _ctx, command = line.split("\t", 4)
        rows.append((expect, technique, command))
    return rows


def test_cheat_sheet_held_out_set_keeps_its_score() -> None:
    """The labelled cheat-sheet rows (see the file's header): recall and false positives at the level the
    families reach now; a family that breaks drops recall below the floor or flags everyday rows."""
    rows = _rows()
    block = [c for e, _t, c in rows if e == "block"]
    allow = [c for e, _t, c in rows if e == "allow"]
    assert len(block) >= 130 and len(allow) >= 5500, "the cheat-sheet set looks truncated"
    missed = [c for c in block if analyze(c).decision is Decision.ALLOW]
    flagged = [c for c in allow if analyze(c).decision is not Decision.ALLOW]
    assert len(missed) <= 2, missed  # 1 of 138 missed when written (an upper-case /dev/sdX placeholder)
    assert len(flagged) <= 12, flagged  # 9 of 5793 flagged when written (junk lines, core.hooksPath)
    for source in ("cheatsheets", "navi", "cheat.sh"):
        assert any(t.split(":")[0] == source for _e, t, _c in rows), source
    assert any(t.endswith(":back") for _e, t, _c in rows) and any(t.endswith(":after") for _e, t, _c in rows)

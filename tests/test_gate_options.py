"""Options read as each tool's own parser reads them (approval/tools/options.py, commands.getopt).

For every tool whose handler reads options through a getopt spec: spellings the rules were not
written on (abbreviated long options where the tool takes them, clusters, attached values, options
after operands) that must be caught, and everyday look-alikes (and spellings the tool itself
rejects, such as an abbreviated long option of a pflag/cobra tool) that must stay allowed.
"""

from __future__ import annotations

import re

import pytest
from executor.approval import Decision, analyze, findings
from executor.approval.commands import getopt, has_opt
from executor.approval.tools.options import SPECS, parse

CAUGHT = {
    "rm_recursive_root": [
        "tar -xf a.tar --to-comman='rm -rf /'", "tar -xf a.tar --checkpoint=1 --checkpoint-ac exec='rm -rf /'",
        "tar -czf a.tgz --use-compress='rm -rf ~' src", "tar -cvI 'rm -rf /' -f a.tar src", "tar cvIf 'rm -rf /' a.tar src",
        "tar -cf a.tar --rsh-c='rm -rf /' host:x",
        "bash -euxo pipefail -c 'rm -rf /'", "sh -eo pipefail -c 'rm -rf ~'", "zsh -fo extendedglob -c 'rm -rf /'",
        "rm -vfR /", "env -S'rm -rf /'", "env -vS 'rm -rf /'", "env --split 'rm -rf /'", "env -iS'rm -rf ~'",
        "su --comm='rm -rf /'", "su --sess='rm -rf /'", "su -lc 'rm -rf /' root", "runuser root --comm 'rm -rf /'",
        "runuser - root -c 'rm -rf /'", "runuser -uroot rm -rf /", "rm --rec --fo ~", "rm ~ --recursive", "rm -d -r -- /usr", "rm --verbose --recurs /etc",
        "srm -fr /",
    ],
    "user_home_delete": [
        "userdel --force --remove dave", "userdel dave --remove", "userdel --rem dave", "userdel -frZ dave",
        "deluser -remove-home dave", "deluser --REMOVE-HOME dave", "deluser dave --remove-home",
        "deluser --remove-a dave", "deluser --quiet --remove-ho dave",
    ],
    "disk_format": [
        "wipefs --all --force /dev/sdc", "wipefs -qa /dev/sdc", "wipefs /dev/sdc -a", "wipefs --offs 0x438 /dev/sdc",
        "wipefs -o0x438 /dev/sdc", "mdadm --zero-s /dev/sdb1", "mdadm --zero /dev/sdb1 /dev/sdc1",
        "mdadm --cre /dev/md1 --level=1 -n2 /dev/sdb /dev/sdc", "mdadm -Cv /dev/md1 -l1 -n2 /dev/sdb /dev/sdc",
        "mdadm --buil /dev/md2 -l0 -n2 /dev/sdb /dev/sdc", "mkfs.ext4 -L -n /dev/sdb1", "mke2fs -t ext4 -L -n /dev/sdb1",
    ],
    "data_restore_overwrite": [
        "pg_restore --cle --if-exists -d prod x.dump", "pg_restore -vc -d prod x.dump", "pg_restore -d prod -j4 -c x.dump",
        "pg_restore -Upostgres -hdb -cdprod x.dump", "pg_restore x.dump -d prod --clean",
    ],
    "http_delete": [
        "curl -fsSL -X DELETE http://es:9200/logs-2024*", "curl -kXDELETE https://es:9200/_all",
        "curl -u elastic:pw -sk -XDELETE es:9200/idx", "curl http://es:9200/idx --request DELETE",
        "curl -H 'Content-Type: application/json' -sX DELETE http://es:9200/idx",
        "wget --method DELETE -qO- http://es:9200/idx", "wget -q --metho=DELETE http://minio:9000/backups",
    ],
    "container_mass_delete": [
        "docker image prune -af", "docker image prune --force --all", "podman image prune -fa",
        "docker image prune -a=true", "docker image prune --all=true -f", "nerdctl image prune -fa",
    ],
    "cluster_delete": ["kubectl delete pods --all=true -n x", "kubectl delete deploy -RA"],
    "chmod_recursive_system": ["chmod --recursive 000 /etc", "chown --rec root: /usr", "chgrp --recu -v staff /var",
                               "chown --recu nobody ~", "chmod 777 ~ --rec", "setfacl --rec -m o::rwx ~",
                               "chcon --recu -t tmp_t ~"],
    "system_write": ["tar xCf / a.tar", "tar xvC /etc -f a.tar", "tar --extr --file a.tar --direc=/usr"],
    "persistence_write": ["wget --directory-pre=/etc/cron.d https://x/job", "curl -sSLo/etc/cron.d/job https://x/j"],
    "kill_broad": [
        "pkill -ef -u alice", "pkill -KILL -U 1000", "pkill --eui=alice", "pkill -9 -g 0", "killall -qwu alice",
        "killall --use=alice", "pkill -USR1 sshd", "killall -user alice", "killall -us alice", "killall -egu alice",
        "killall -regexp '.*'",
    ],
    "service_stop": [
        "systemctl --job-mode fail stop nginx", "systemctl -q --no-bl stop nginx", "systemctl stop nginx --no-block",
        "systemctl --kill-who main kill nginx", "systemctl disable nginx --now", "nginx -sstop", "nginx -tqs quit",
        "openresty -p /srv -sstop",
    ],
    "power": ["kexec -fx", "kexec --exe", "kexec -l /boot/vmlinuz -e", "shutdown -cr now", "shutdown -c --reboot now", "shutdown -c -H +5", "shutdown --show -P now",
              "rtcwake --mode off -s 60", "rtcwake -a -moff -s 60", "systemctl --message 'x y' reboot",
              "systemctl --when +5min poweroff"],
    "uid0_user": ["usermod --ui 0 -o svc", "useradd --non-u --ui=0 x", "useradd -mou0 x", "usermod svc -ou 0"],
    "account_change": ["usermod --app --gr sudo agent", "usermod --sh /bin/false root", "adduser --ingr sudo bob",
                       "adduser -ingroup sudo bob", "usermod root -L"],
    "kill_all": ["kill -9 -1 -l", "kill -s KILL -1 --list", "kill -- -1 -L"],
    "disk_partition": ["sgdisk -p -d 1 /dev/sda", "sgdisk --print --new=1:0:0 /dev/sdb", "sgdisk -d 2 -v /dev/sdb"],
    "boot_write": ["efibootmgr -qB -b 0001", "efibootmgr --delete-bootnu --bootnu 0001", "efibootmgr -qo 0002,0001",
                   "grub-mkconfig -o/boot/grub/grub.cfg"],
    "privilege_grant": ["setcap cap_setuid+ep /usr/bin/python3 -v", "setcap -r ./old cap_sys_admin+ep ./tool",
                        "setcap -q -n 1000 cap_net_raw+ep ./x"],
    "unmount_system": ["swapoff --a", "swapoff -v -a", "losetup -vD", "losetup --detach-al", "umount -va", "umount --all -f"],
    "inline_code_kill": [
        "python3 -Bc'import os; os.kill(1, 9)'", "python3 -X dev -c 'import os; os.kill(1, 9)'",
        "python3 -Wignore::DeprecationWarning -Ic 'import os; os.kill(1, 9)'", "perl -lwe'kill 9, -1'",
        "perl -I lib -e 'kill 9, -1'", "ruby -ne'Process.kill(9, -1)' /dev/null", "ruby -r json -e 'Process.kill(9, -1)'",
        "node -pe 'process.kill(1)'", "node --print='process.kill(1)'", "node -r dotenv/config -e 'process.kill(1)'",
    ],
    "git_force_push": ["git push --force-w origin main", "git push origin main -fu", "git push --force-if origin main"],
}

ALLOWED = [
    # rm: not recursive, or not a protected place
    "rm -f ./a.txt", "rm --force --verbose build.log", "rm -i notes.txt", "rm --dir emptydir", "rm -- -r",
    "rm --recu ./build", "rm -fr ./node_modules",
    # users: no home removal
    "userdel --force dave", "userdel -R /chroot dave", "userdel --root /mnt dave", "deluser dave sudo",
    "deluser --system dave", "deluser --remove dave",
    # wipefs/mdadm: listing and inspection
    "wipefs --no-act /dev/sdc", "wipefs -J /dev/sdc", "wipefs -t ext4 /dev/sdc", "wipefs -O DEVICE,TYPE /dev/sdc",
    "mdadm --misc --detail /dev/md0", "mdadm -E /dev/sdb1", "mdadm --examine --scan", "mdadm -Ds", "mdadm --detail --scan",
    "mdadm --manage /dev/md0 --ad /dev/sdc",
    # pg_restore: listing, other targets
    "pg_restore -f out.sql x.dump", "pg_restore --lis x.dump", "pg_restore -L list.txt -d dev x.dump",
    "pg_restore -d cdb x.dump", "pg_restore -cl x.dump", "pg_restore --c -d prod x.dump",
    # HTTP: other methods, a single object, a header that names DELETE
    "curl -sX GET http://es:9200/_all/_search", "curl -sXPUT es:9200/idx", "curl -H 'X-Method: DELETE' es:9200/idx",
    "curl -sX DELETE http://api/users/42/sessions/9", "curl --req DELETE http://es:9200/idx",
    "wget --method=GET http://es:9200/idx", "wget -qO- https://example.com/install.txt",
    # docker/kubectl (pflag: no abbreviated long names)
    "docker image prune", "docker image prune -f --filter until=24h", "docker image prune --al", "docker image prune --all=false",
    "docker ps --qui | xargs docker rm -f", "kubectl get pods -A", "kubectl delete pods --all=false web-1",
    # chmod/chown
    "chown --reference=a.txt b.txt", "chmod --recu 644 ./docs", "chown -R me ./src", "chmod --recu 700 ~/proj",
    "setfacl -m u:bob:rwx ~", "setfacl --re -m o::rwx ~/x",
    # pkill/killall: a pattern narrows a selector, a signal word is not an option cluster
    "pkill -HUP nginx", "pkill -USR1 -x nginx", "pkill -x -u bob bash", "killall -s HUP nginx", "killall -9 node",
    "pkill --signal 0 sshd", "pkill -0 sshd", "pkill -P 1234 worker", "killall -sHUP nginx", "killall -w -v node",
    "killall -qu alice",  # getopt_long_only: -qu is --quiet, alice a process name
    # systemctl/rtcwake: values are not verbs, non-stopping verbs
    "systemctl --lines 50 status nginx", "systemctl -n50 status nginx", "systemctl --type service list-units",
    "systemctl enable --now nginx", "systemctl --user restart app", "nginx -s reload", "nginx -sreopen", "nginx -t", "rtcwake -m no -s 60", "rtcwake -m show",
    # umount/swapoff/losetup: narrowed or single
    "umount -a -t nfs", "umount -at nfs,cifs", "umount -aO _netdev", "umount --al", "swapoff /swapfile",
    "losetup -d /dev/loop0", "losetup --all", "losetup -l", "umount -l /mnt/usb",
    # tar: ordinary compressors, stdout, ambiguous prefixes tar refuses, local extraction
    "tar --use=zstd -cf x.tar.zst src", "tar -cvIzstd -f a.tar src", "tar -xf a.tar --to-stdout", "tar xf a.tar",
    "tar tvf a.tar", "tar xzf a.tgz --strip-components=1 -C ./vendor", "tar --ex --fi a.tar --dir=/usr",
    "tar xCf ./out a.tar",
    # interpreters and shells: values of options are not scripts or code
    "python3 -W ignore -m pytest", "python3 -Im venv .venv", "python3 -X importtime -c 'import json'",
    "perl -I lib -e 'print 1'", "ruby -r json -e 'p JSON.parse(\"{}\")'", "node -r dotenv/config -e 'console.log(1)'",
    "node --eval='console.log(1)'", "bash -euxo pipefail -c 'make test'", "bash -eo pipefail ./ci.sh",
    # shutdown: cancel or show is the action it ends with
    "shutdown -c", "shutdown -c 'maintenance over'", "shutdown -rc", "shutdown now -c", "shutdown --show",
    "shutdown -P +5 --show",
    # listing and dry-run modes where the tool reads them
    "kill -l", "kill -l 9", "kill -L", "kill -9 -l", "mkfs.ext4 -n /dev/sdb1", "mkfs.ext4 -qn /dev/sdb1",
    "sgdisk -p /dev/sda", "sgdisk --print -v /dev/sda", "kexec -l /boot/vmlinuz --initrd=/boot/initrd.img",
    "efibootmgr -v", "efibootmgr -vv", "efibootmgr --delete-bootn --bootn 0001",  # --delete-bootnum or -bootnext
    # setcap: verify (-v before the pair) and remove (-r) set nothing
    "setcap -v cap_net_raw+ep /usr/bin/ping", "setcap -r ./bin/tool", "setcap -q -r a -r b",
    # accounts: other uids and groups, an ambiguous prefix usermod refuses
    "useradd -u 1001 app", "useradd -mu 1000 dev", "usermod -aG docker dev", "usermod --lo root", "adduser bob",
    "adduser --system --no-create-home svc", "adduser --ingr staff bob",
    # wrappers: their own options only
    "env VAR=1 ventoy -S x", "env -u HOME ls", "env -S 'echo hi'", "su -c whoami", "su --login bob --comm=ls",
    "runuser -u root -- badblocks -c 5 /dev/sda",
    # git
    "git push -u origin main", "git push --follow-tags origin main", "git push --force-w --dry-run origin main",
]


@pytest.mark.parametrize(("rule", "command"), [(r, c) for r, cs in CAUGHT.items() for c in cs])
def test_spelling_is_caught(rule: str, command: str) -> None:
    v = analyze(command)
    assert v.decision is not Decision.ALLOW, (rule, command)
    assert rule in {f.rule for f in findings(command)}, (rule, command, v)


@pytest.mark.parametrize("command", ALLOWED)
def test_look_alike_stays_allowed(command: str) -> None:
    v = analyze(command)
    assert v.decision is Decision.ALLOW, (command, v)


def test_getopt_prefixes_only_where_the_parser_takes_them() -> None:
    longs = ("--all", "--force", "--filter")
    assert has_opt(getopt(["--al"], "", longs, ()), "--all")
    assert not has_opt(getopt(["--al"], "", longs, (), long_prefix=False), "--all")
    assert has_opt(getopt(["-fa"], "", longs, (), long_prefix=False), "-a")
    assert getopt(["--fi=x"], "", longs, ("--filter",))[0] == [("--filter", "x")]
    assert getopt(["--f"], "", longs, ())[0] == [("--f", None)]  # ambiguous: as written
    # getopt_long_only (psmisc killall): a one-dash word is a long option when it names one, else a cluster
    assert getopt(["-fil=x"], "", longs, ("--filter",), long_only=True)[0] == [("--filter", "x")]
    assert getopt(["-af"], "", longs, (), long_only=True)[0] == [("-a", None), ("-f", None)]


def test_specs_resolve_like_the_tools() -> None:
    assert has_opt(parse("pg_restore", ["--cl", "x"]), "--clean")
    assert not has_opt(parse("pg_restore", ["--c", "x"]), "--clean")  # --clean or --create: refused by pg_restore
    assert parse("curl", ["-sXDELETE", "u"])[0] == [("-s", None), ("-X", "DELETE")]
    assert parse("curl", ["--req", "DELETE", "u"])[0] == [("--req", None)]  # --request or --request-target
    assert parse("mdadm", ["--zero", "/dev/sdb"])[0] == [("--zero-superblock", None)]
    assert not has_opt(parse("mdadm", ["--ad", "/dev/sdb"]), "--add")  # --add, --add-spare, --add-journal
    assert parse("deluser", ["-Remove-Home", "bob"]) == ([("--remove-home", None)], ["bob"])
    assert parse("userdel", ["-R", "/mnt", "-r", "bob"]) == ([("-R", "/mnt"), ("-r", None)], ["bob"])


def test_specs_are_well_formed() -> None:
    for name, s in SPECS.items():
        for long in s.longs + s.long_with_arg:
            assert re.fullmatch(r"--[a-zA-Z0-9][a-zA-Z0-9._-]*", long), (name, long)
        assert set(s.long_with_arg) <= set(s.longs) | set(s.long_with_arg)
        assert len(set(s.longs)) == len(s.longs), name


# Every spelling of a long option its tool takes: each unique prefix, from the shortest that names it
# alone among the tool's long options (as listed in its spec) to the whole name.
PREFIXED = [
    ("deluser", "--remove-home", "deluser {} bob", "user_home_delete"),
    ("userdel", "--remove", "userdel {} bob", "user_home_delete"),
    ("mdadm", "--zero-superblock", "mdadm {} /dev/sdb1", "disk_format"),
    ("wipefs", "--all", "wipefs {} /dev/sdb", "disk_format"),
    ("pg_restore", "--clean", "pg_restore {} -d prod x.dump", "data_restore_overwrite"),
    ("rm", "--recursive", "rm -f {} /", "rm_recursive_root"),
    ("tar", "--to-command", "tar -xf a.tar {}='rm -rf /'", "rm_recursive_root"),
    ("tar", "--use-compress-program", "tar -cf a.tar {}='rm -rf /' src", "rm_recursive_root"),
    ("wget", "--method", "wget -q {}=DELETE http://es:9200/idx", "http_delete"),
    ("killall", "--user", "killall {} alice", "kill_broad"),
    ("pkill", "--euid", "pkill {} alice", "kill_broad"),
    ("swapoff", "--all", "swapoff {}", "unmount_system"),
    ("losetup", "--detach-all", "losetup {}", "unmount_system"),
    ("usermod", "--uid", "usermod -o {} 0 svc", "uid0_user"),
    ("chown", "--recursive", "chown {} nobody ~", "chmod_recursive_system"),
]


def _prefixes(tool: str, long: str) -> list[str]:
    spec = SPECS[tool]
    known = set(spec.longs) | set(spec.long_with_arg)
    return [long[:n] for n in range(3, len(long) + 1)
            if long[:n] == long or [k for k in known if k.startswith(long[:n])] == [long]]


@pytest.mark.parametrize(("tool", "long", "template", "rule"), PREFIXED)
def test_every_unique_prefix_is_the_option(tool: str, long: str, template: str, rule: str) -> None:
    spellings = _prefixes(tool, long)
    assert long in spellings and len(spellings) > 1, (tool, long)
    for word in spellings:
        command = template.format(word)
        assert rule in {f.rule for f in findings(command)}, command


@pytest.mark.parametrize("command", ["docker image prune {} -f", "podman image prune {}", "kubectl delete pods {}"])
def test_pflag_takes_no_abbreviation(command: str) -> None:
    assert analyze(command.format("--all")).decision is not Decision.ALLOW
    for n in range(3, len("--all")):
        assert analyze(command.format("--all"[:n])).decision is Decision.ALLOW, command.format("--all"[:n])

"""Families added by family (approval/families.py): each with commands it must catch and
commands it must let pass."""

from __future__ import annotations

import pytest
from executor.approval import Decision, analyze

CASES = {
    "data_restore_overwrite": (
        ["pg_restore --clean -d prod x.dump", "pg_restore -d prod --clean --if-exists db.dump", "pg_restore -cd app x"],
        ["pg_restore -l x.dump", "pg_restore -d dev x.dump", "pg_restore --help"],
    ),
    "http_delete": (
        ["curl -X DELETE http://es:9200/logs-*", "curl -XDELETE 'http://localhost:9200/_all'",
         "curl --request DELETE http://minio:9000/backups", "curl -s -X DELETE localhost:9200/metrics",
         "wget --method=DELETE http://es:9200/idx", "http DELETE http://es:9200/idx"],
        ["curl -X DELETE http://localhost:8080/api/items/42", "curl -X GET http://es:9200/logs-*/_search",
         "curl -s http://localhost:9200/_cat/indices", "curl -X POST -d @a.json http://api/v1/things"],
    ),
    "redis_flush": (
        ["redis-cli --scan | xargs redis-cli del", "redis-cli --scan --pattern 'sess:*' | xargs -n 100 redis-cli DEL",
         "redis-cli KEYS '*' | xargs redis-cli unlink"],
        ["redis-cli del session:42", "redis-cli --scan | wc -l", "redis-cli --scan --pattern 'a:*' | head"],
    ),
    "git_remote_delete": (
        ["git push origin :main", "git push origin --delete release", "git push -d origin feature/x",
         "git -C repo push origin :refs/heads/main", "git push --delete upstream v1.0"],
        ["git push origin main", "git push origin HEAD:refs/heads/feature", "git push -u origin x", "git push --tags"],
    ),
    "git_history_destroy": (
        ["git filter-branch --tree-filter 'rm -f s' HEAD", "git filter-repo --path x --invert-paths",
         "git reflog expire --expire=now --all", "git reflog expire --expire=now --all && git gc --prune=now"],
        ["git gc", "git reflog", "git log --all"],
    ),
    "repo_delete": (
        ["gh api -X DELETE repos/o/r", "gh api --method DELETE /repos/o/r/git/refs/heads/main", "gh api -XDELETE repos/o/r"],
        ["gh api repos/o/r", "gh api -X GET repos/o/r/pulls"],
    ),
    "workload_stop": (
        ["helm uninstall db -n prod", "helm -n prod delete api", "kubectl scale deploy/api --replicas 0",
         "kubectl -n prod scale --replicas=0 statefulset/db", "kubectl drain node-1 --ignore-daemonsets"],
        ["helm list -A", "helm upgrade --install api ./chart", "kubectl scale deploy/api --replicas=3", "kubectl cordon node-1"],
    ),
    "cluster_delete": (
        ["kubectl delete ns prod", "kubectl -n prod delete deployment --all", "kubectl --namespace prod delete pod --all"],
        ["kubectl -n prod get pods", "kubectl delete pod web-1"],
    ),
    "uid0_user": (
        ["useradd -o -u 0 -g 0 backdoor", "usermod --uid 0 --non-unique bob", "useradd --non-unique --uid=0 x", "usermod -o -u0 s"],
        ["useradd -m -s /bin/bash dev", "usermod -aG docker dev", "useradd -u 1001 app"],
    ),
    "security_disable": (
        ["chattr +i /etc/resolv.conf", "chattr -i /etc/passwd", "chattr -R +i /usr/bin", "setenforce 0",
         "setenforce Permissive", "aa-teardown"],
        ["chattr +i ./notes.txt", "lsattr /etc/passwd", "setenforce 1", "getenforce"],
    ),
    "privilege_grant": (
        ["setcap cap_setuid+ep /usr/bin/python3", "setcap 'cap_net_raw+ep' ./bin/tool"],
        ["getcap /usr/bin/ping", "setcap -r ./bin/tool"],
    ),
    "power": (
        ["dbus-send --system --print-reply --dest=org.freedesktop.login1 /org/freedesktop/login1 "
         "org.freedesktop.login1.Manager.Reboot boolean:true",
         "busctl call org.freedesktop.login1 /org/freedesktop/login1 org.freedesktop.login1.Manager PowerOff b false",
         "loginctl reboot", "loginctl poweroff", "systemctl kexec"],
        ["loginctl list-sessions", "busctl list", "systemctl status sshd"],
    ),
    "kill_broad": (
        ["kill -9 1", "pkill sshd", "killall dockerd", "pkill -9 -x sshd", "kill -9 $(pidof sshd)"],
        ["pkill -f my_worker.py", "killall -q vite", "pgrep sshd"],
    ),
    "host_namespace_enter": (
        ["nsenter -t 1 -m -u -i -n -p -- sh", "nsenter --target 1 --mount sh", "nsenter -t1 -a bash"],
        ["nsenter -t 1234 -n ip addr"],
    ),
    "rm_recursive_root": (
        ["docker run -v /:/h alpine rm -rf /h/etc", "docker run --rm -v /:/host alpine rm -rf /host/etc",
         "docker run -v /:/mnt busybox sh -c 'rm -rf /mnt/*'", "podman run --volume=/:/rootfs alpine rm -rf /rootfs/usr",
         "nsenter -t 1 -m -- rm -rf /var/lib", "/bin/r? -rf /", "/usr/bin/sh* -c 'rm -rf /'"],
        ["docker run -v /:/host:ro alpine ls /host/etc", "docker run --rm -v $PWD:/src -w /src node:20 npm test",
         "docker run --rm -v /tmp/x:/x alpine rm -rf /x/cache"],
    ),
    "persistence_write": (
        ["docker run -it --mount type=bind,source=/,target=/host alpine sh -c 'echo x >> /host/etc/passwd'"],
        ["docker run alpine sh -c 'echo x >> /tmp/y'"],
    ),
    "sql_destructive": (
        ["kubectl exec -it db-0 -- psql -U postgres -c 'DROP DATABASE prod'", "docker exec pg psql -c \"truncate users\"",
         "docker compose exec db mysql -e 'drop table x'"],
        ["kubectl exec db-0 -- psql -c 'SELECT count(*) FROM users'", "docker exec pg psql -c '\\dt'"],
    ),
    "redis_flush ": (
        ["kubectl -n prod exec deploy/redis -- redis-cli flushall"], ["kubectl -n prod exec deploy/redis -- redis-cli info"]
    ),
    "mongo_drop": (["docker exec -i mongo mongosh --eval 'db.dropDatabase()'"], ["docker exec mongo mongosh --eval 'db.stats()'"]),
    "git_force_push": (["git -C repo push -f", "git -c user.name=x push --force origin main"], ["git -C repo push"]),
}


@pytest.mark.parametrize(
    ("rule", "command"), [(r.strip(), c) for r, (yes, _) in CASES.items() for c in yes]
)
def test_family_must_match(rule: str, command: str) -> None:
    v = analyze(command)
    assert v.decision is not Decision.ALLOW, (rule, command)


@pytest.mark.parametrize(("rule", "command"), [(r.strip(), c) for r, (_, no) in CASES.items() for c in no])
def test_family_must_not_match(rule: str, command: str) -> None:
    v = analyze(command)
    assert v.decision is Decision.ALLOW, (rule, command, v)


def test_rule_ids_reported() -> None:
    assert analyze("git push origin :main").rule == "git_remote_delete"
    assert analyze("helm uninstall x").rule == "workload_stop"
    assert analyze("useradd -o -u 0 x").rule == "uid0_user"
    assert analyze("docker run -v /:/h alpine rm -rf /h/etc").decision is Decision.DENY
    assert analyze("loginctl reboot").decision is Decision.DENY

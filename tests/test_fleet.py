"""Several daemons, one fleet: task pinning by rendezvous hashing, and the Kubernetes manifest."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import yaml

from executor.config import load_config
from executor.fleet import Fleet, pick_target
from tests.daemon import DaemonProcess

ROOT = Path(__file__).resolve().parents[1]


def test_pinning_is_stable_balanced_and_moves_little():
    targets = [f"unix:///run/executor-{i}.sock" for i in range(4)]
    tasks = [f"task-{i}" for i in range(4000)]
    owner = {t: pick_target(t, targets) for t in tasks}
    assert owner == {t: pick_target(t, list(reversed(targets))) for t in tasks}  # order does not matter
    counts = Counter(owner.values())
    assert all(800 < n < 1200 for n in counts.values()), counts
    grown = targets + ["unix:///run/executor-4.sock"]
    moved = [t for t in tasks if pick_target(t, grown) != owner[t]]
    assert all(pick_target(t, grown) == grown[-1] for t in moved)  # only tasks for the new daemon move
    assert 600 < len(moved) < 1000


def test_fleet_routes_each_task_to_one_daemon(tmp_path):
    daemons = [DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}}},
                             state_dir=tmp_path / f"d{i}").start() for i in range(2)]
    try:
        with Fleet([d.target for d in daemons]) as fleet:
            for i in range(8):
                fleet.run(f"ft-{i}", f"export MINE={i}")
            for i in range(8):
                assert fleet.run(f"ft-{i}", "echo $MINE").stdout == f"{i}\n".encode()
            per_daemon = {t: {x.task_id for x in r.tasks} for t, r in fleet.list_tasks().items()}
            assert sum(len(v) for v in per_daemon.values()) == 8
            assert all(per_daemon.values()), "both daemons serve some tasks"
    finally:
        for d in daemons:
            d.kill()


def test_kubernetes_manifest_is_valid():
    import kubernetes_validate

    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()) if d]
    assert {d["kind"] for d in docs} == {"ConfigMap", "Deployment", "Service"}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(container)
    assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_kubernetes_config_map_is_a_valid_daemon_config(tmp_path, monkeypatch):
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()) if d]
    config_map = next(d for d in docs if d["kind"] == "ConfigMap")
    path = tmp_path / "config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    for name in ("agent", "approver"):  # token files are mounted secrets in the cluster
        (tmp_path / name).write_text("x" * 32)
    text = path.read_text().replace("/etc/executor/tokens/", f"{tmp_path}/")
    path.write_text(text)
    config = load_config(path)
    assert config.backend == "cloud" and config.tls is not None

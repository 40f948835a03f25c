"""The committed gRPC stubs match proto/executor/v1/executor.proto, and the fixed names are there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from executor.v1 import executor_pb2 as pb

ROOT = Path(__file__).resolve().parents[1]


def test_stubs_are_fresh():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_proto.py"), "--check"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def test_fixed_names_of_the_contract():
    service = pb.DESCRIPTOR.services_by_name["Executor"]
    assert pb.DESCRIPTOR.package == "executor.v1"
    for rpc in ("Exec", "Run", "CloseTask", "ListTasks", "ResolveApproval", "WatchApprovals", "CheckCommand",
                "StartProcess", "ListProcesses", "GetProcess", "ReadProcessOutput", "StreamProcessOutput",
                "WaitProcess", "WriteProcessStdin", "SignalProcess", "Pty", "PutArchive", "GetArchive",
                "ListBackends"):
        assert rpc in service.methods_by_name, rpc
    assert {f.name for f in pb.ExecRequest.DESCRIPTOR.fields} >= {
        "task_id", "command", "workdir", "env", "timeout_seconds", "stdin", "backend", "pty", "idempotency_key"}
    assert {o.name for o in pb.ExecEvent.DESCRIPTOR.oneofs_by_name["event"].fields} == {
        "started", "stdout", "stderr", "approval_required", "exit"}
    assert {f.name for f in pb.Exit.DESCRIPTOR.fields} >= {
        "exit_code", "status", "cwd", "duration_seconds", "stdout_bytes", "stderr_bytes", "truncated", "message"}
    assert set(pb.ExitStatus.keys()) >= {"EXIT_STATUS_UNSPECIFIED", "EXIT_STATUS_COMPLETED", "EXIT_STATUS_TIMED_OUT",
                                         "EXIT_STATUS_CANCELLED", "EXIT_STATUS_DENIED", "EXIT_STATUS_BACKEND_ERROR"}
    assert set(pb.ApprovalDecision.keys()) >= {"APPROVAL_DECISION_APPROVE_ONCE", "APPROVAL_DECISION_APPROVE_SESSION",
                                               "APPROVAL_DECISION_APPROVE_ALWAYS", "APPROVAL_DECISION_DENY"}
    assert set(pb.GateDecision.keys()) >= {"GATE_DECISION_ALLOW", "GATE_DECISION_ASK", "GATE_DECISION_DENY"}
    assert set(pb.ProcessState.keys()) >= {"PROCESS_STATE_RUNNING", "PROCESS_STATE_EXITED", "PROCESS_STATE_KILLED",
                                           "PROCESS_STATE_LOST"}
    assert {f.name for f in pb.ProcessInfo.DESCRIPTOR.fields} >= {
        "process_id", "task_id", "command", "state", "exit_code", "signal", "started_at", "ended_at"}
    assert {o.name for o in pb.PtyInput.DESCRIPTOR.oneofs_by_name["input"].fields} == {"open", "data", "resize", "signal"}
    assert {o.name for o in pb.PtyOutput.DESCRIPTOR.oneofs_by_name["output"].fields} >= {"data", "exit"}


def test_reflection_lists_the_service(local_daemon):
    from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
    import grpc

    with grpc.insecure_channel(local_daemon.target) as channel:
        services = ProtoReflectionDescriptorDatabase(channel).get_services()
    assert "executor.v1.Executor" in services and "grpc.health.v1.Health" in services

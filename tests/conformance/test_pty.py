"""Terminals on every backend that claims them: Exec with pty, the Pty stream (size,
resize, Ctrl-C, TERM, signals, interactive shell through the gate, half-close, cancel)
and background processes on a terminal."""

from __future__ import annotations

import queue
import threading
import time
import uuid

import grpc
import pytest

from executor.v1 import executor_pb2 as pb
from tests.conformance.conftest import on_this_host, require
from tests.conformance.test_processes import call, count_marker, poll, read_all, start, wait

COMPLETED = pb.EXIT_STATUS_COMPLETED


@pytest.fixture(autouse=True)
def _pty(client, daemon):
    require(client, daemon, "pty")


class PtyCall:
    """A Pty stream driven from a test: input through a queue, output collected by a thread."""

    def __init__(self, client, command: str, task: str, rows: int = 0, cols: int = 0, **open_kwargs) -> None:
        self.inputs: queue.Queue = queue.Queue()
        self.inputs.put(pb.PtyInput(open=pb.PtyOpen(task_id=task, command=command, size=pb.PtySize(rows=rows, cols=cols),
                                                    **open_kwargs)))
        self.call = client.stub.Pty(self._requests(), timeout=120)
        self.out = bytearray()
        self.exit: pb.Exit | None = None
        self.approvals: list[pb.ApprovalRequired] = []
        self.error: grpc.RpcError | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self):
        while True:
            item = self.inputs.get()
            if item is None:
                return
            yield item

    def _read(self) -> None:
        try:
            for msg in self.call:
                kind = msg.WhichOneof("output")
                if kind == "data":
                    self.out += msg.data
                elif kind == "exit":
                    self.exit = msg.exit
                elif kind == "approval_required":
                    self.approvals.append(msg.approval_required)
        except grpc.RpcError as exc:
            self.error = exc

    def send(self, data: bytes) -> None:
        self.inputs.put(pb.PtyInput(data=data))

    def resize(self, rows: int, cols: int) -> None:
        self.inputs.put(pb.PtyInput(resize=pb.PtySize(rows=rows, cols=cols)))

    def signal(self, name: str) -> None:
        self.inputs.put(pb.PtyInput(signal=name))

    def half_close(self) -> None:
        self.inputs.put(None)

    def expect(self, needle: bytes, timeout: float = 20) -> bool:
        return bool(poll(lambda: needle in self.out or self.error is not None, timeout, 0.02)) and needle in self.out

    def finished(self, timeout: float = 30) -> pb.Exit:
        self._reader.join(timeout)
        assert self.error is None, self.error
        assert self.exit is not None, f"no exit within {timeout} s; output so far: {bytes(self.out)!r}"
        return self.exit

    def cancel(self) -> None:
        self.call.cancel()
        self.half_close()


def test_exec_with_pty_runs_on_a_terminal_with_task_state(client, task):
    client.run(task, "mkdir -p sub && cd sub && export SEEN=yes")
    result = client.run(task, 'tty; test -t 0 && test -t 1 && echo in-tty; stty size; echo "$TERM $SEEN"; '
                              'basename "$PWD"; exit 4', pty=True)
    out = result.stdout.decode()
    assert "/dev/" in out and "in-tty" in out and "24 80" in out
    assert "xterm-256color yes" in out and "sub" in out
    assert result.exit.status == COMPLETED and result.exit.exit_code == 4
    assert "\r\n" in out  # the terminal's line discipline, not a pipe


def test_exec_with_pty_timeout_kills_the_tree(client, task):
    marker = f"executor-ptyto-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    result = client.run(task, f"echo started; exec -a {marker} sleep 300", pty=True, timeout=1.5)
    assert result.exit.status == pb.EXIT_STATUS_TIMED_OUT
    assert b"started" in result.stdout
    assert time.monotonic() - t0 < 20
    assert poll(lambda: count_marker(client, task, marker) == 0)


def test_size_follows_resize(client, daemon, task):
    require(client, daemon, "resize")
    p = PtyCall(client, 'stty size; x=; until [ "$x" = hi ]; do read x; stty size; done; echo got=$x', task,
                rows=30, cols=100)
    assert p.expect(b"30 100"), bytes(p.out)
    p.resize(40, 120)
    # The resize and a line are separate messages, the backend may apply the size on its own: each
    # empty line shows the size again, until it is the new one (bounded only against a hang).
    assert poll(lambda: p.send(b"\n") or b"40 120" in p.out, 30, 0.2), bytes(p.out)
    p.send(b"hi\n")
    assert p.expect(b"got=hi"), bytes(p.out)
    exit_ = p.finished()
    assert b"40 120" in p.out
    assert exit_.status == COMPLETED and exit_.exit_code == 0


def test_ctrl_c_interrupts_the_foreground_program(client, task):
    # The program that gets Ctrl-C announces itself: wherever the byte lands (before or after the
    # exec), the foreground group is interrupted, the trap runs and the script goes on.
    p = PtyCall(client, "trap 'echo caught' INT; sh -c 'echo ready; exec sleep 100'; echo after", task)
    assert p.expect(b"ready")
    t0 = time.monotonic()
    p.send(b"\x03")
    exit_ = p.finished()
    assert b"caught" in p.out and b"after" in p.out
    assert exit_.status == COMPLETED and time.monotonic() - t0 < 15


def test_signal_message_reaches_the_program(client, daemon, task):
    require(client, daemon, "signals")
    p = PtyCall(client, "echo ready; sleep 100", task)
    assert p.expect(b"ready")
    p.signal("TERM")
    exit_ = p.finished()
    assert exit_.exit_code in (-15, 143)


def test_interactive_shell_asks_the_gate_and_keeps_task_state(patient_client, task):
    client = patient_client  # its approvals wait long enough for this test's answer on a loaded machine
    client.run(task, "export SEEN=shell-state")
    p = PtyCall(client, "", task)
    assert poll(lambda: p.approvals or p.exit is not None, 60)
    assert p.approvals and p.approvals[0].rule == "interactive_shell"
    client.resolve_approval(p.approvals[0].approval_id, pb.APPROVAL_DECISION_APPROVE_ONCE)
    p.send(b"echo $((6*7)) $SEEN\n")
    assert p.expect(b"42 shell-state"), bytes(p.out)
    # Ctrl-C once the program is in the foreground (it says so; the echoed line cannot show "42ready"):
    # sent earlier, it would hit the shell, and the program would hold the terminal for 100 s.
    p.send(b"sh -c 'echo $((6*7))ready; exec sleep 100'\n")
    assert p.expect(b"42ready"), bytes(p.out)
    p.send(b"\x03")
    p.send(b"echo alive\n")
    assert p.expect(b"alive\r\n"), bytes(p.out)
    p.send(b"exit 3\n")
    exit_ = p.finished()
    assert exit_.status == COMPLETED and exit_.exit_code == 3
    client.close_task(task, remove_files=True)


def test_half_close_ends_nothing(client, task):
    p = PtyCall(client, "sleep 1; echo done", task)
    p.half_close()
    exit_ = p.finished()
    assert b"done" in p.out and exit_.status == COMPLETED and exit_.exit_code == 0


def test_cancel_ends_the_session_inside_the_backend(client, task):
    marker = f"executor-ptycancel-{uuid.uuid4().hex[:8]}"
    p = PtyCall(client, f"echo go; (exec -a {marker} sleep 300) & exec -a {marker} sleep 300", task)
    assert p.expect(b"go")
    assert poll(lambda: count_marker(client, task, marker) == 2)
    p.cancel()
    assert poll(lambda: count_marker(client, task, marker) == 0)


def test_denied_command_exits_denied(client, task):
    p = PtyCall(client, "rm -rf /", task)
    exit_ = p.finished()
    assert exit_.status == pb.EXIT_STATUS_DENIED and exit_.message


def test_first_message_must_be_open(client):
    def requests():
        yield pb.PtyInput(data=b"x")

    with pytest.raises(grpc.RpcError) as info:
        list(client.stub.Pty(requests(), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_background_process_on_a_terminal(client, daemon, task):
    require(client, daemon, "background")
    info = start(client, task, 'stty size; test -t 1 && echo tty; echo "$TERM"', pty=True,
                 size=pb.PtySize(rows=10, cols=50))
    assert info.pty
    done = wait(client, info.process_id)
    out = read_all(client, info.process_id)
    assert done.state == pb.PROCESS_STATE_EXITED and done.exit_code == 0
    assert out == b"10 50\r\ntty\r\nxterm-256color\r\n"
    assert read_all(client, info.process_id, "stderr") == b""
    # stdin of a terminal process is the terminal: close sends end-of-file
    cat = start(client, task, "cat", pty=True)
    call(client, "WriteProcessStdin", pb.WriteProcessStdinRequest(process_id=cat.process_id, data=b"typed\n",
                                                                   close=True))
    assert wait(client, cat.process_id).state == pb.PROCESS_STATE_EXITED
    assert b"typed" in read_all(client, cat.process_id)


def test_exec_with_pty_cancel_kills_the_tree(client, task):
    marker = f"executor-ptyexeccancel-{uuid.uuid4().hex[:8]}"
    events = client.exec(task, f"(exec -a {marker} sleep 300) & sleep 0.5; echo go; exec -a {marker} sleep 300",
                         pty=True)
    for event in events:
        if event.WhichOneof("event") == "stdout" and b"go" in event.stdout:
            break
    # Both are running (counted on this kernel: the busy task's own ps cannot run until the cancel).
    assert poll(lambda: on_this_host(marker) == 2)
    events.close()  # cancels the RPC
    assert poll(lambda: count_marker(client, task, marker) == 0)

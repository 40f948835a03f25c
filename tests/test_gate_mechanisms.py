"""The hardline floor by mechanism (globs, pids, endless background loops) and paths judged
against the task's real location (GateContext).  Spellings here are not the ones the rules
were written from."""

from __future__ import annotations

import pytest
from executor.approval import Decision, GateConfig, GateContext, analyze, evaluate

DENY, ASK, ALLOW = Decision.DENY, Decision.ASK, Decision.ALLOW
TASK = "/srv/executor/tasks/t7"
CTX = GateContext(cwd=TASK, root=TASK, home=TASK, protected=("/srv/executor/state", "/srv/executor/tasks"))
SUB = GateContext(cwd=TASK + "/app", root=TASK, home="/home/agent", protected=("/srv/executor/state",))


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf /*",
        "rm -rf /[a-z]*",
        "rm -fr /?sr",
        "rm -rf ~/*",
        "rm -rf /e*",
        "rm -r -f /b?n",
        "rm -rf /{u,e}?[rt]*",
        "rm -rf /[[:lower:]]*",
        "rm -rf $HOME/[!.]*",
        "find /u* -delete",
        "rsync -a --delete empty/ /v?r/",
        "/bin/r? -rf /",
        "/usr/bin/r[m] -fr /etc",
    ],
)
def test_glob_is_every_path_it_could_match(command: str) -> None:
    assert analyze(command).decision is DENY, command


@pytest.mark.parametrize(
    "command", ["rm -rf ./*.log", "rm -f *.pyc", "rm -rf /tmp/build-*", "rm -rf build/[a-z]*", "ls /[a-z]*", "echo /e*"]
)
def test_ordinary_globs_pass(command: str) -> None:
    assert analyze(command).decision is ALLOW, command


@pytest.mark.parametrize(
    "command",
    [
        "kill -9 -01",
        "kill -9 $((0-1))",
        "kill -- -0x1",
        "kill -KILL -00001",
        "kill -s 9 -- -1",
        "kill -9 $[1-2]",
        "kill -n 9 -$((0x1))",
        "x=-1; kill -9 $x",
        "n=2; kill -9 $((1-n))",
    ],
)
def test_pids_read_as_bash_reads_them(command: str) -> None:
    v = analyze(command)
    assert v.decision is DENY and v.rule == "kill_all", (command, v)


@pytest.mark.parametrize(
    "command", ["kill -9 1", "kill -9 0001", "kill -9 -$x", "kill -9 $((n))", "pkill sshd", "killall -9 dockerd",
                "kill -9 $(pidof sshd)", "kill -TERM 0"],
)
def test_risky_pids_ask(command: str) -> None:
    assert analyze(command).decision is ASK, command


@pytest.mark.parametrize(
    "command", ["kill -9 12345", "kill %1", "kill -9 -12345", "kill -HUP $(cat app.pid)", "kill $PID", "kill -l",
                "pkill -f my_worker.py", "kill -0 $$"],
)
def test_ordinary_kills_pass(command: str) -> None:
    assert analyze(command).decision is ALLOW, command


@pytest.mark.parametrize(
    "command",
    [
        "bomb(){ bomb|bomb& };bomb",
        "z(){ z & z; }; z",
        "while :; do $0 & done",
        "while true; do sleep 100 & done",
        "for((;;)){ sh -c 'sleep 1' & }",
        "for ((i=0;;i++)); do yes >/dev/null & done",
        "until false; do ( : ) & done",
        "while (( 1 )); do python3 worker.py & done",
        "python3 -c 'import os\nwhile True:\n    os.fork()'",
        "perl -e 'fork while 1'",
        "ruby -e 'loop { fork }'",
        "node -e 'for(;;){require(\"child_process\").spawn(\"node\")}'",
    ],
)
def test_endless_background_loops_are_fork_bombs(command: str) -> None:
    v = analyze(command)
    assert v.decision is DENY and v.rule == "fork_bomb", (command, v)


@pytest.mark.parametrize(
    "command",
    [
        "while true; do sleep 5; done",
        "while :; do worker & sleep 60; done",
        "while true; do job & wait; done",
        "for i in 1 2 3; do worker & done; wait",
        "for ((i=0;i<4;i++)); do worker & done; wait",
        "python3 -c 'import os; pid = os.fork()'",
        "perl -e 'print \"fork while 1\\n\"'",
    ],
)
def test_bounded_or_throttled_loops_pass(command: str) -> None:
    assert analyze(command).decision is ALLOW, command


@pytest.mark.parametrize(
    ("command", "context", "decision"),
    [
        ("rm -rf ..", CTX, DENY),  # the tasks directory (protected)
        ("rm -rf ../*", CTX, DENY),
        ("rm -rf $PWD/..", CTX, DENY),
        ('rm -rf "${PWD%/*}"', CTX, DENY),
        ("cd ..; rm -rf *", CTX, DENY),
        ("rm -rf ../t2", CTX, ASK),  # another task
        ("rm -rf ../../state", CTX, DENY),
        ("echo 'curl x|sh' >> .bashrc", CTX, ASK),
        ("echo ssh-ed25519 AAAA >> .ssh/authorized_keys", CTX, ASK),
        ("cp x.sh .profile", CTX, ASK),
        ("rm -rf *", GateContext(cwd="/etc", root=TASK), DENY),
        ("rm -rf bin", GateContext(cwd="/usr/local", root=TASK), DENY),
        ("sed -i s/a/b/ hosts", GateContext(cwd="/etc", root=TASK), ASK),
        ("rm -rf ../../..", SUB, DENY),  # /srv
        ("rm -rf ../../../state", SUB, DENY),
        # inside the task: ordinary
        ("rm -rf build", CTX, ALLOW),
        ("rm -rf *", CTX, ALLOW),
        ("rm -rf ../build", SUB, ALLOW),
        ("echo x >> .bashrc", SUB, ALLOW),  # a project file: cwd is not the home
        ("echo hi >> notes.txt", CTX, ALLOW),
        ("cd ../docs && rm -rf _build", SUB, ALLOW),
    ],
)
def test_paths_against_the_task_location(command: str, context: GateContext, decision: Decision) -> None:
    assert analyze(command, context=context).decision is decision, (command, context)


def test_no_context_behaves_as_before() -> None:
    assert analyze("rm -rf ..").decision is ALLOW
    assert analyze("echo x >> .bashrc").decision is ALLOW
    assert evaluate("rm -rf ..", GateConfig()).decision is ALLOW
    assert evaluate("rm -rf ..", GateConfig(), context=CTX).decision is DENY
    # the cache is keyed by context too
    assert analyze("rm -rf ..", context=CTX).decision is DENY
    assert analyze("rm -rf ..").decision is ALLOW


@pytest.mark.parametrize(
    "command",
    [
        "python3 -c 'import shutil; shutil.rmtree(\"build\")'",
        "python3 -c 'import shutil, os; shutil.rmtree(os.path.join(\"out\", \"cache\"), ignore_errors=True)'",
        "node -e 'require(\"fs\").rmSync(\"dist\",{recursive:true,force:true})'",
        "ruby -e 'require \"fileutils\"; FileUtils.rm_rf(\"tmp/cache\")'",
        "perl -e 'use File::Path; rmtree(\"blib\")'",
        "python3 -c 'print(\"rm -rf /\")'",
        "node -e 'console.log(\"kill -9 -1\")'",
        "terraform destroy -help",
        "helm uninstall -h",
        "kubectl drain --help",
        "gh help repo delete",
        "go help clean",
    ],
)
def test_false_alarms_fixed(command: str) -> None:
    assert analyze(command).decision is ALLOW, command


@pytest.mark.parametrize(
    "command",
    [
        "python3 -c 'import shutil,sys; shutil.rmtree(sys.argv[1])' x",
        "python3 -c 'import shutil; shutil.rmtree(\"/etc\")'",
        "python3 -c 'import shutil; shutil.rmtree(\"../other\")'",
        "node -e 'require(\"fs\").rmSync(`${process.env.HOME}`,{recursive:true})'",
        "python3 -c 'from pathlib import Path; Path(x).unlink()'",
        "redis-cli -h cache flushall",
        "dropdb -h db.example.com prod",
    ],
)
def test_computed_or_system_deletes_still_caught(command: str) -> None:
    assert analyze(command).decision is not ALLOW, command

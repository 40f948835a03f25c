"""The hermes-agent plugin (integrations/hermes) inside a real hermes-agent 0.19.0 install, against a real
daemon: hermes' loader discovers it, hermes' registry dispatches terminal and process to it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.daemon import agent_daemon

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-hermes" / "bin" / "python"
DRIVER = Path(__file__).with_name("hermes_driver.py")
AGENT, HUMAN = "hermes-agent-token-123456", "hermes-human-token-123456"

pytestmark = pytest.mark.skipif(not (ROOT / ".venv-hermes" / ".installed").exists(),
                                reason="no .venv-hermes: `make .venv-hermes/.installed` (part of make test-infra)")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = agent_daemon(tmp_path_factory.mktemp("hermes") / "state", AGENT, HUMAN)
    yield d
    d.kill()


def drive(daemon, tmp_path, scenario: str, **env_extra) -> dict:
    home = tmp_path / "hermes-home"
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {
        "enabled": ["executor"], "entries": {"executor": {"allow_tool_override": True}}}}))
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "HERMES_HOME": str(home),
           "LANG": "C.UTF-8", "EXECUTOR_TARGET": daemon.target, "EXECUTOR_TOKEN": AGENT, **env_extra}
    r = subprocess.run([str(PYTHON), str(DRIVER), scenario], capture_output=True, text=True, timeout=240, env=env,
                       cwd=str(tmp_path))
    checks = {}
    for line in r.stdout.splitlines():
        if line.startswith('{"check"'):
            item = json.loads(line)
            checks[item["check"]] = item["value"]
    assert r.returncode == 0, f"driver failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return checks


def test_hermes_runs_its_tools_through_executor(daemon, tmp_path):
    c = drive(daemon, tmp_path, "tools")
    assert c["plugin"]["executor"] == {"enabled": True, "error": None, "tools": ["process", "terminal"]}
    assert c["handlers"] == {"terminal": "executor_hermes", "process": "executor_hermes"}
    assert c["schemas_are_hermes"] == {"terminal": True, "process": True}

    # foreground, in hermes' shape; shell state persists across calls
    assert c["state1"] == {"output": "ok", "exit_code": 0, "error": None}
    out = c["state2"]["output"].splitlines()
    assert out[0].endswith("/sub") and out[1] == "kept"
    assert c["exit"]["exit_code"] == 1 and "exit_code_meaning" in c["exit"]  # hermes' own note for grep
    assert c["other_task"]["output"] == "kept"  # hermes collapses task ids onto its default environment
    # the gate denies through it, as hermes' blocked shape
    assert c["denied"]["exit_code"] == -1 and c["denied"]["status"] == "blocked"
    assert "Agents never apply terraform." in c["denied"]["error"]
    assert "exceeds the maximum of 600s" in c["cap"]["error"]
    assert c["timeout"]["exit_code"] == 124 and "timed out after 1 seconds" in c["timeout"]["error"]
    assert c["timeout"]["output"].startswith("before")
    assert c["workdir_out"]["status"] == "blocked" and "outside this task's sandbox" in c["workdir_out"]["error"]
    assert c["workdir_in"]["output"].endswith("/sub") and c["workdir_in"]["exit_code"] == 0

    # background: start, poll, list, wait, log by line
    assert c["bg"]["output"] == "Background process started" and c["bg"]["notify_on_complete"] is True
    sid = c["bg"]["session_id"]
    assert c["poll_running"]["session_id"] == sid and c["poll_running"]["status"] in ("running", "exited")
    assert sid in {p["session_id"] for p in c["list"]["processes"]}
    assert c["wait"]["status"] == "exited" and c["wait"]["exit_code"] == 0
    assert c["log"]["output"] == "line1\nline2\nline3\n1" and c["log"]["total_lines"] == 4  # PYTHONUNBUFFERED=1
    assert c["log_page"]["output"] == "line2\nline3" and c["log_page"]["showing"] == "2 lines"
    assert c["poll_exited"]["status"] == "exited" and c["poll_exited"]["exit_code"] == 0
    # notify_on_complete and watch_patterns reach hermes' own notification queue
    assert len(c["notified"]) == 1 and "completed normally" in c["notified"][0] and "finished" in c["notified"][0]
    assert c["watched"] and 'matched watch pattern "READY"' in c["watched"][0]
    assert c["kill"]["status"] == "killed" and c["kill_again"]["status"] == "already_exited"
    assert c["kill_again"]["exit_code"] == -15
    # stdin: submit (with Enter), write, close
    assert c["submit"]["status"] == "ok" and c["write"]["status"] == "ok" and c["close"]["status"] == "ok"
    assert c["reader_done"]["status"] == "exited" and "got:hello" in c["reader_done"]["output"]
    assert "raw" in c["reader_done"]["output"] and "eof" in c["reader_done"]["output"]
    assert c["missing"]["status"] == "not_found"
    assert c["no_id"]["error"] == "session_id is required for poll"


def test_approval_bridge_is_opt_in(daemon, tmp_path):
    c = drive(daemon, tmp_path, "bridge", EXECUTOR_HERMES_APPROVAL_BRIDGE="1", EXECUTOR_APPROVER_TOKEN=HUMAN)
    assert c["bridged"]["output"] == "pushed" and c["bridged"]["exit_code"] == 0, c
    assert len(c["asked"]) == 1 and "force" in c["asked"][0].lower()


def test_the_plugin_is_refused_without_the_operators_opt_in(daemon, tmp_path):
    home = tmp_path / "hermes-home"
    home.mkdir()
    (home / "config.yaml").write_text(yaml.safe_dump({"plugins": {"enabled": ["executor"]}}))
    code = ("import model_tools; from hermes_cli.plugins import get_plugin_manager; from tools.registry import "
            "registry; p = get_plugin_manager()._plugins['executor']; "
            "print(registry.get_entry('terminal').handler.__module__); print(p.error)")
    r = subprocess.run([str(PYTHON), "-c", code], capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
                       env={**os.environ, "HOME": str(tmp_path), "HERMES_HOME": str(home),
                            "EXECUTOR_TARGET": daemon.target})
    handler, error = r.stdout.splitlines()[-2:]
    assert handler == "tools.terminal_tool" and "allow_tool_override" in error

"""executor.integrations.openai_agents against the real openai-agents package (its own venv,
.venv-openai-agents: the SDK pins mcp 1.x) and a real daemon; the tools are invoked as the SDK's runner
invokes them, with no model call."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.daemon import agent_daemon

ROOT = Path(__file__).resolve().parents[2]
PYTHON = ROOT / ".venv-openai-agents" / "bin" / "python"
AGENT = "oa-agent-token-1234567"

pytestmark = pytest.mark.skipif(not (ROOT / ".venv-openai-agents" / ".installed").exists(),
                                reason="no .venv-openai-agents: `make .venv-openai-agents/.installed` (make test-infra)")


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = agent_daemon(tmp_path_factory.mktemp("oa") / "state", AGENT)
    yield d
    d.kill()


def test_function_tools_in_the_agents_sdk(daemon, tmp_path):
    r = subprocess.run([str(PYTHON), str(Path(__file__).with_name("openai_agents_driver.py"))], capture_output=True,
                       text=True, timeout=180, cwd=str(tmp_path),
                       env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "EXECUTOR_TARGET": daemon.target,
                            "EXECUTOR_TOKEN": AGENT})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    c = {}
    for line in r.stdout.splitlines():
        if line.startswith('{"check"'):
            item = json.loads(line)
            c[item["check"]] = item["value"]
    assert c["tools"] == [["terminal", "FunctionTool", True], ["process", "FunctionTool", True]]
    schema = c["schema"]
    assert schema["additionalProperties"] is False and set(schema["required"]) == set(schema["properties"])
    assert schema["properties"]["timeout"]["type"] == ["number", "null"]
    assert c["state1"]["exit_code"] == 0
    out = c["state2"]["output"].splitlines()
    assert out[0].endswith("/w") and out[1] == "yes"
    assert c["other_task"]["output"] == "unset\n"  # task_id from the run context
    assert c["denied"]["status"] == "denied" and "Agents never apply terraform." in c["denied"]["error"]
    assert "unknown arguments: colour" in c["bad"]["error"]
    assert c["bg"]["process_id"] and c["wait"]["state"] == "exited" and c["wait"]["exit_code"] == 0
    assert c["log"]["output"] == "one\ntwo\n"
    assert c["bg"]["process_id"] in {p["process_id"] for p in c["list"]["processes"]}

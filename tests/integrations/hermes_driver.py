"""Runs inside a real hermes-agent 0.19.0 install (.venv-hermes): hermes' own plugin loader finds the
executor plugin through its entry point, hermes' tool registry dispatches terminal and process to it.
Prints one JSON line per check; tests/integrations/test_hermes.py judges them.

argv: the scenario ("tools" or "bridge"). Env: HERMES_HOME (config.yaml enabling the plugin),
EXECUTOR_TARGET, EXECUTOR_TOKEN (and for the bridge EXECUTOR_APPROVER_TOKEN)."""

from __future__ import annotations

import json
import sys
import time


def emit(name: str, value) -> None:
    print(json.dumps({"check": name, "value": value}), flush=True)


def main(scenario: str) -> None:
    import model_tools  # noqa: F401  (registers hermes' built-in tools and discovers plugins)
    from hermes_cli.plugins import get_plugin_manager
    from tools.registry import registry

    plugins = {k: {"enabled": p.enabled, "error": p.error, "tools": sorted(p.tools_registered or [])}
               for k, p in get_plugin_manager()._plugins.items() if k == "executor"}
    emit("plugin", plugins)
    emit("handlers", {n: registry.get_entry(n).handler.__module__ for n in ("terminal", "process")})
    emit("schemas_are_hermes", {
        "terminal": registry.get_entry("terminal").schema is __import__("tools.terminal_tool",
                                                                          fromlist=["x"]).TERMINAL_SCHEMA,
        "process": registry.get_entry("process").schema is __import__("tools.process_registry",
                                                                        fromlist=["x"]).PROCESS_SCHEMA})

    def call(name: str, args: dict, task_id: str = "hermes-test-1") -> dict:
        return json.loads(registry.dispatch(name, args, task_id=task_id))

    if scenario == "bridge":
        from tools import terminal_tool

        asked = []
        terminal_tool.set_approval_callback(lambda command, description, **kw: asked.append(description) or "once")
        emit("bridged", call("terminal", {"command": "git push --force 2>/dev/null; echo pushed"}))
        emit("asked", asked)
        return

    emit("state1", call("terminal", {"command": "mkdir -p sub && cd sub && export HERMES_MARK=kept && echo ok"}))
    emit("state2", call("terminal", {"command": "pwd; echo $HERMES_MARK"}))
    emit("exit", call("terminal", {"command": "grep -q nothing-here /dev/null"}))
    emit("denied", call("terminal", {"command": "terraform apply -auto-approve"}))
    emit("cap", call("terminal", {"command": "true", "timeout": 100000}))
    emit("timeout", call("terminal", {"command": "echo before; sleep 30", "timeout": 1}))
    emit("workdir_out", call("terminal", {"command": "pwd", "workdir": "/etc"}))
    root = call("terminal", {"command": 'printf %s "$HOME"'})["output"]
    emit("workdir_in", call("terminal", {"command": "pwd", "workdir": root + "/sub"}))
    emit("other_task", call("terminal", {"command": "echo ${HERMES_MARK:-unset}"}, task_id="other"))

    from tools.process_registry import process_registry

    bg = call("terminal", {"command": "for i in 1 2 3; do echo line$i; sleep 0.3; done; python3 -c 'import os; "
                                      "print(os.environ.get(\"PYTHONUNBUFFERED\"))'",
                           "background": True, "notify_on_complete": True})
    emit("bg", bg)
    sid = bg["session_id"]
    emit("poll_running", call("process", {"action": "poll", "session_id": sid}))
    emit("list", call("process", {"action": "list"}))
    emit("wait", call("process", {"action": "wait", "session_id": sid, "timeout": 30}))
    emit("log", call("process", {"action": "log", "session_id": sid}))
    emit("log_page", call("process", {"action": "log", "session_id": sid, "offset": 1, "limit": 2}))
    emit("poll_exited", call("process", {"action": "poll", "session_id": sid}))

    # notify_on_complete without a wait: hermes' own drain sees the completion event
    quiet = call("terminal", {"command": "sleep 0.5; echo finished", "background": True, "notify_on_complete": True})
    deadline = time.monotonic() + 20
    drained = []
    while time.monotonic() < deadline and not drained:
        drained = [text for evt, text in process_registry.drain_notifications() if evt["session_id"] == quiet["session_id"]]
        time.sleep(0.2)
    emit("notified", drained)

    watched = call("terminal", {"command": "echo booting; sleep 0.5; echo server READY on 8000; sleep 300",
                                "background": True, "watch_patterns": ["READY"]})
    deadline = time.monotonic() + 20
    matched = []
    while time.monotonic() < deadline and not matched:
        matched = [text for evt, text in process_registry.drain_notifications() if evt["type"] == "watch_match"]
        time.sleep(0.2)
    emit("watched", matched)
    emit("kill", call("process", {"action": "kill", "session_id": watched["session_id"]}))
    emit("kill_again", call("process", {"action": "kill", "session_id": watched["session_id"]}))

    reader = call("terminal", {"command": "read a; echo got:$a; cat; echo eof", "background": True})
    rid = reader["session_id"]
    emit("submit", call("process", {"action": "submit", "session_id": rid, "data": "hello"}))
    emit("write", call("process", {"action": "write", "session_id": rid, "data": "raw"}))
    emit("close", call("process", {"action": "close", "session_id": rid}))
    emit("reader_done", call("process", {"action": "wait", "session_id": rid, "timeout": 20}))
    emit("missing", call("process", {"action": "poll", "session_id": "p-nope"}))
    emit("no_id", call("process", {"action": "poll"}))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tools")

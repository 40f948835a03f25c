"""Wiring the terminal tool into an agent loop.

A real agent sends TOOLS to its model and runs the tool calls the model returns. Here a scripted
"model" stands in for the LLM so the example runs anywhere:

    python examples/agent_loop.py --target unix:///path/to/executor.sock
"""

from __future__ import annotations

import argparse
import json

from executor.tool import TOOLS, check_terminal, handle_process, handle_terminal

HANDLERS = {"terminal": handle_terminal, "process": handle_process}


def scripted_model(messages: list[dict]) -> dict | None:
    """Stands in for an LLM: asks for three tool calls, then answers."""
    plan = [
        ("terminal", {"command": "mkdir -p demo && cd demo && printf 'print(6*7)\\n' > answer.py"}),
        ("terminal", {"command": "python3 answer.py"}),
        ("terminal", {"command": "sleep 30", "background": True}),
    ]
    step = sum(1 for m in messages if m["role"] == "tool")
    if step < len(plan):
        name, args = plan[step]
        return {"role": "assistant", "tool_calls": [
            {"id": f"call{step}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}
    return None


def agent(target: str | None, task_id: str, model=scripted_model) -> list[dict]:
    if not check_terminal(target=target):
        raise SystemExit("the executor daemon is not reachable, or its backend is unavailable")
    messages: list[dict] = [{"role": "user", "content": "What is 6*7? Use the terminal."}]
    while (reply := model(messages)) is not None:  # a real agent: client.chat(messages, tools=TOOLS)
        messages.append(reply)
        for call in reply["tool_calls"]:
            fn = call["function"]
            result = HANDLERS[fn["name"]](fn["arguments"], target=target, task_id=task_id)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return messages


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default=None)
    parser.add_argument("--task", default="agent-demo")
    args = parser.parse_args()
    print(f"{len(TOOLS)} tools offered to the model")
    for message in agent(args.target, args.task):
        if message["role"] == "tool":
            print(json.loads(message["content"]))

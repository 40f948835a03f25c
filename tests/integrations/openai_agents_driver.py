"""Runs inside .venv-openai-agents (the real openai-agents package): executor's function tools invoked
the way the SDK's runner invokes them (``on_invoke_tool`` with a ToolContext), no model call.
Prints one JSON line per check; tests/integrations/test_openai_agents.py judges them."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from dataclasses import dataclass


def emit(name: str, value) -> None:
    print(json.dumps({"check": name, "value": value}), flush=True)


@dataclass
class Ctx:
    task_id: str


async def main() -> None:
    from agents import Agent, FunctionTool, RunContextWrapper
    from agents.tool_context import ToolContext

    from executor.integrations.openai_agents import executor_tools

    target, token = os.environ["EXECUTOR_TARGET"], os.environ["EXECUTOR_TOKEN"]
    tools = executor_tools(target=target, token=token, task_id=lambda ctx: ctx.context.task_id)
    agent = Agent(name="dev", instructions="Use the terminal.", tools=tools)
    listed = await agent.get_all_tools(RunContextWrapper(Ctx("oa-1")))
    emit("tools", [[t.name, type(t).__name__, t.strict_json_schema] for t in listed])
    emit("schema", tools[0].params_json_schema)

    async def call(tool: FunctionTool, args: dict, task: str = "oa-1") -> dict:
        raw = json.dumps(args)
        ctx = ToolContext(context=Ctx(task), tool_name=tool.name, tool_call_id=f"call-{time.monotonic_ns()}",
                          tool_arguments=raw)
        return json.loads(await tool.on_invoke_tool(ctx, raw))

    terminal, process = tools
    nulls = {"timeout": None, "workdir": None, "background": None, "pty": None}
    emit("state1", await call(terminal, {"command": "mkdir -p w && cd w && export OA=yes", **nulls}))
    emit("state2", await call(terminal, {"command": "pwd; echo $OA", **nulls}))
    emit("other_task", await call(terminal, {"command": "echo ${OA:-unset}", **nulls}, task="oa-2"))
    emit("denied", await call(terminal, {"command": "terraform apply", **nulls}))
    emit("bad", await call(terminal, {"command": "ls", "colour": "red"}))
    bg = await call(terminal, {"command": "echo one; echo two", "timeout": None, "workdir": None, "background": True,
                               "pty": None})
    emit("bg", bg)
    pnulls = {"offset": None, "limit": None, "timeout": None, "signal": None, "data": None, "close": None}
    emit("wait", await call(process, {"action": "wait", "process_id": bg["process_id"], **{**pnulls, "timeout": 20}}))
    emit("log", await call(process, {"action": "log", "process_id": bg["process_id"], **pnulls}))
    emit("list", await call(process, {"action": "list", "process_id": None, **pnulls}))


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)

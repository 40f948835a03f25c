"""The terminal and process tools as OpenAI Agents SDK function tools (``pip install openai-agents``).

    from agents import Agent
    from executor.integrations.openai_agents import executor_tools

    agent = Agent(name="dev", instructions="...", tools=executor_tools(target=T, token=TOKEN, task_id="agent-7"))

The tools are ``executor.tool``'s handlers (same schemas, same JSON answers, one shared channel); they
never raise, so a denied or failed command reaches the model as a result it can read. ``task_id`` is a
string, or a function of the SDK's ``RunContextWrapper`` (e.g. ``lambda ctx: ctx.context.task_id``)
to give each run its own task. With ``strict=True`` (the default) the schemas are made strict for
structured outputs: every property is required and the optional ones accept ``null``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from executor.tool import PROCESS_SCHEMA, TERMINAL_SCHEMA, handle_process_async, handle_terminal_async

if TYPE_CHECKING:  # the SDK is imported when the tools are made
    from agents import FunctionTool, RunContextWrapper


def strict_parameters(parameters: dict[str, Any]) -> dict[str, Any]:
    """A function schema in the form OpenAI's strict mode takes: all properties required, the
    optional ones nullable (the handlers read ``null`` as absent)."""
    schema = copy.deepcopy(parameters)
    required = set(schema.get("required", []))
    for name, prop in schema["properties"].items():
        if name not in required:
            kind = prop.get("type")
            prop["type"] = [kind, "null"] if isinstance(kind, str) else [*kind, "null"]
            if "enum" in prop:
                prop["enum"] = [*prop["enum"], None]
    schema["required"] = list(schema["properties"])
    schema["additionalProperties"] = False
    return schema


def _without_nulls(raw: str) -> object:
    """The arguments without their nulls (an object; anything else as it came, for the handler to refuse)."""
    args = json.loads(raw) if raw and raw.strip() else {}
    return {k: v for k, v in args.items() if v is not None} if isinstance(args, dict) else args


def executor_tools(*, target: str | None = None, token: str | None = None,
                   task_id: str | Callable[[RunContextWrapper[Any]], str] = "default", backend: str = "",
                   wait_for_approval: bool = False, deadline: float | None = None,
                   strict: bool = True) -> list[FunctionTool]:
    """``[terminal, process]`` as ``agents.FunctionTool``s bound to one daemon."""
    from agents import FunctionTool

    def task_of(ctx: RunContextWrapper[Any]) -> str:
        return task_id(ctx) if callable(task_id) else task_id

    async def terminal(ctx: RunContextWrapper[Any], raw: str) -> str:
        try:
            args = _without_nulls(raw)
        except ValueError as exc:
            return json.dumps({"error": f"bad arguments: {exc}"})
        return await handle_terminal_async(args, target=target, token=token, task_id=task_of(ctx), backend=backend,
                                           wait_for_approval=wait_for_approval, deadline=deadline)

    async def process(ctx: RunContextWrapper[Any], raw: str) -> str:
        try:
            args = _without_nulls(raw)
        except ValueError as exc:
            return json.dumps({"error": f"bad arguments: {exc}"})
        return await handle_process_async(args, target=target, token=token, task_id=task_of(ctx), deadline=deadline)

    tools: list[FunctionTool] = []
    for schema, handler in ((TERMINAL_SCHEMA, terminal), (PROCESS_SCHEMA, process)):
        fn = schema["function"]
        params = strict_parameters(fn["parameters"]) if strict else copy.deepcopy(fn["parameters"])
        tools.append(FunctionTool(name=fn["name"], description=fn["description"], params_json_schema=params,
                                  on_invoke_tool=handler, strict_json_schema=strict))
    return tools


__all__ = ["executor_tools", "strict_parameters"]

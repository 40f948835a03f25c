"""`executor mcp`: the terminal and process tools over the Model Context Protocol.

Any MCP client (desktop assistants, IDE agents) can then use executor with no code: stdio by default,
streamable HTTP with `--http HOST:PORT`. Built on the official `mcp` SDK (2.x, its low-level server, so the
tools' input schemas are published exactly as `executor.tool` defines them, `additionalProperties: false`
included); the tools are the same handlers as `executor.tool`, so a command that needs approval answers
with what is pending and how to resolve it.

Every answer carries the handler's JSON twice: as text and as `structuredContent`; a failure (bad or
unknown arguments, denied, timed out, not found, daemon unreachable) is `isError: true`.

Tasks: each MCP session gets a fresh task id (`mcp-<hex>`; stdio is one session per process, streamable
HTTP one per `Mcp-Session-Id`); `--task` pins one task for every session; a call's own `task_id`
argument wins over both.
"""

from __future__ import annotations

import copy
import hmac
import ipaddress
import json
import secrets
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from executor.tool import PROCESS_SCHEMA, TERMINAL_SCHEMA, handle_process_async, handle_terminal_async

if TYPE_CHECKING:  # the SDK is imported when a server is built
    from mcp.server.context import ServerRequestContext
    from mcp.server.lowlevel import Server

INSTRUCTIONS = (
    "Run shell commands in a sandboxed task with the `terminal` tool; state (cwd, variables) persists "
    "between calls. Start servers with background=true and manage them with `process`. Some commands need "
    "a human's approval: the result then says so; call again later with the same command. Each session "
    "has its own task; pass the same `task_id` to share one between sessions.")

TASK_ID_PROPERTY = {"type": "string", "minLength": 1, "maxLength": 128,
                    "description": "Task to run in (default: this session's own task). Calls with the same "
                                   "task_id share the working directory, variables and processes."}
MAX_SESSIONS = 10_000  # session -> task ids remembered by one HTTP server


def input_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The MCP inputSchema of one of `executor.tool`'s functions: its parameters verbatim, plus `task_id`."""
    params: dict[str, Any] = copy.deepcopy(schema["function"]["parameters"])
    params["properties"]["task_id"] = dict(TASK_ID_PROPERTY)
    return params


def executor_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("executor-daemon")
    except PackageNotFoundError:
        return "0+unknown"


class _Tasks:
    """Which task a call runs in: its `task_id`, else the pinned one, else its session's own."""

    def __init__(self, pinned: str | None) -> None:
        self.pinned = pinned
        self.process_task = f"mcp-{secrets.token_hex(6)}"  # stdio: the process is the session
        self.by_session: OrderedDict[str, str] = OrderedDict()

    def for_call(self, ctx: ServerRequestContext, arguments: dict[str, Any]) -> str:
        if arguments.get("task_id"):
            return str(arguments["task_id"])
        if self.pinned:
            return self.pinned
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        session = headers.get("mcp-session-id") if headers is not None else None
        if not session:
            return self.process_task
        task = self.by_session.get(session)
        if task is None:
            task = self.by_session[session] = f"mcp-{secrets.token_hex(6)}"
            while len(self.by_session) > MAX_SESSIONS:
                self.by_session.popitem(last=False)
        self.by_session.move_to_end(session)
        return task


def build_server(*, target: str | None, token: str | None, task_id: str | None = None,
                 backend: str = "") -> Server:
    import jsonschema
    import mcp.types as types
    from mcp.server.lowlevel import Server

    schemas = {"terminal": TERMINAL_SCHEMA, "process": PROCESS_SCHEMA}
    inputs = {name: input_schema(s) for name, s in schemas.items()}
    validators = {name: jsonschema.Draft202012Validator(s) for name, s in inputs.items()}
    tools = [types.Tool(name=name, description=s["function"]["description"], input_schema=inputs[name])
             for name, s in schemas.items()]
    tasks = _Tasks(task_id)

    def result(payload: dict[str, Any]) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(payload))],
                                    structured_content=payload, is_error="error" in payload)

    async def list_tools(ctx: ServerRequestContext,
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        if name not in validators:
            return result({"error": f"unknown tool {name!r}: the tools are {', '.join(validators)}"})
        problems = sorted(validators[name].iter_errors(arguments), key=lambda e: list(e.path))
        if problems:
            def where(e: jsonschema.ValidationError) -> str:
                return "/".join(map(str, e.path)) or "arguments"
            return result({"error": "bad arguments: " + "; ".join(f"{where(e)}: {e.message}" for e in problems)})
        task = tasks.for_call(ctx, arguments)
        arguments.pop("task_id", None)
        if name == "terminal":
            text = await handle_terminal_async(arguments, target=target, token=token, task_id=task, backend=backend)
        else:
            text = await handle_process_async(arguments, target=target, token=token, task_id=task)
        try:
            payload = json.loads(text)
        except ValueError:  # the handlers always answer JSON; say so plainly if one ever does not
            payload = {"error": f"the {name} handler answered something that is not JSON: {text[:200]}"}
        if not isinstance(payload, dict):
            payload = {"error": f"the {name} handler answered a JSON {type(payload).__name__}, not an object"}
        payload.setdefault("task_id", task)
        return result(payload)

    return Server("executor", version=executor_version(), instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


MIN_HTTP_TOKEN = 16


def http_address(http: str) -> tuple[str, int]:
    """HOST:PORT for the HTTP front, loopback only: it speaks plaintext and every caller who passes its
    token holds the daemon token's exec role, so a wider address belongs behind a TLS proxy."""
    host, _, port = http.rpartition(":")
    host = (host or "127.0.0.1").strip("[]")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http {http!r}: expected HOST:PORT with a port from 1 to 65535")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise ValueError(f"--http {http!r}: the MCP HTTP front listens on loopback only (127.0.0.1, ::1, "
                         "localhost); put a TLS-terminating proxy in front of it to reach it from elsewhere")
    return host, int(port)


class BearerGuard:
    """ASGI middleware: every HTTP request carries ``Authorization: Bearer <token>`` or gets 401.

    A sandboxed command may reach loopback (the local backend's default network is the host's), so
    an open front would let any task run commands in any other task under the daemon token."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope.get("type") == "http":
            given = dict(scope.get("headers") or ()).get(b"authorization", b"")
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error": "missing or wrong bearer token (executor mcp --http-token)"}'
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def serve(*, target: str | None, token: str | None, task_id: str | None = None, backend: str = "",
          http: str | None = None, http_token: str | None = None) -> int:
    import anyio

    host, port, guard = "", 0, ""
    if http:
        host, port = http_address(http)
        guard = http_token or ""
        if len(guard) < MIN_HTTP_TOKEN:
            raise ValueError(f"--http needs --http-token (or EXECUTOR_MCP_HTTP_TOKEN) of at least {MIN_HTTP_TOKEN} "
                             "characters: the token HTTP clients must send as 'Authorization: Bearer …'")
    server = build_server(target=target, token=token, task_id=task_id, backend=backend)
    if http:
        import uvicorn

        app = BearerGuard(server.streamable_http_app(host=host), guard)
        uvicorn.run(app, host=host, port=port, log_level="warning")
        return 0

    async def stdio() -> None:
        from mcp.server.stdio import stdio_server

        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(stdio)
    return 0

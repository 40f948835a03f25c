"""`executor mcp`: the terminal and process tools over the Model Context Protocol.

Any MCP client (desktop assistants, IDE agents) can then use executor with no code: stdio by default,
streamable HTTP with `--http HOST:PORT`. Built on the official `mcp` SDK; the tools are the same handlers
as `executor.tool`, so a command that needs approval answers with what is pending and how to resolve it.
"""

from __future__ import annotations

from executor.tool import PROCESS_SCHEMA, TERMINAL_SCHEMA, handle_process_async, handle_terminal_async

INSTRUCTIONS = (
    "Run shell commands in a sandboxed task with the `terminal` tool; state (cwd, variables) persists "
    "between calls. Start servers with background=true and manage them with `process`. Some commands need "
    "a human's approval: the result then says so; call again later with the same command.")


def build_server(*, target: str | None, token: str | None, task_id: str, backend: str = ""):
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("executor", instructions=INSTRUCTIONS)
    common = {"target": target, "token": token, "task_id": task_id}

    @server.tool(name="terminal", description=TERMINAL_SCHEMA["function"]["description"])
    async def terminal(command: str, timeout: float | None = None, workdir: str | None = None,
                       background: bool = False, pty: bool = False) -> str:
        args = {"command": command, "background": background, "pty": pty}
        if timeout is not None:
            args["timeout"] = timeout
        if workdir:
            args["workdir"] = workdir
        return await handle_terminal_async(args, backend=backend, **common)

    @server.tool(name="process", description=PROCESS_SCHEMA["function"]["description"])
    async def process(action: str, process_id: str | None = None, offset: int | None = None,
                      limit: int | None = None, timeout: float | None = None, signal: str | None = None,
                      data: str | None = None, close: bool = False) -> str:
        args = {"action": action, "process_id": process_id, "offset": offset, "limit": limit, "timeout": timeout,
                "signal": signal, "data": data, "close": close}
        return await handle_process_async({k: v for k, v in args.items() if v is not None}, **common)

    return server


def serve(*, target: str | None, token: str | None, task_id: str, backend: str = "", http: str | None = None) -> int:
    server = build_server(target=target, token=token, task_id=task_id, backend=backend)
    if http:
        host, _, port = http.rpartition(":")
        server.run("streamable-http", host=host or "127.0.0.1", port=int(port))
    else:
        server.run("stdio")
    return 0

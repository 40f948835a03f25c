"""A local server that speaks Vercel Sandbox's REST/NDJSON API, as vercel-sandbox 0.10 uses it.

Why it exists: there is no Vercel cloud on the test machines, yet the backend must be tested through
the real SDK. This server answers the endpoints the SDK calls and *runs the commands for real*
(asyncio subprocesses, one temporary directory per sandbox), so the backend's behaviour is tested,
not only the requests it makes. Every request is recorded, so tests can assert on exactly what the
SDK sends.

What it models (read from the SDK source, ``vercel/sandbox/_internal/api_client.py``):

* ``POST /v3/sandboxes`` create (409 when the name exists), ``GET/DELETE /v2/sandboxes/{name}``
  (``resume=true`` starts a new session when the current one stopped), ``GET /v2/sandboxes`` list
  (``namePrefix``, ``tags=key:value``), ``POST /v2/sandboxes/sessions/{sid}/stop``.
* Commands: ``POST .../sessions/{sid}/cmd`` (detached, or ``wait&logs`` as one NDJSON stream),
  ``GET .../cmd/{id}?wait=true``, ``GET .../cmd/{id}/logs`` (NDJSON, replayed from the start on
  every connection, live while the process runs), ``POST .../cmd/{id}/stdin`` (base64, offsets
  make a resent write idempotent), ``POST .../cmd/{id}/kill``.
* Files: ``POST .../fs/mkdir``, ``POST .../fs/read`` (raw bytes), ``POST .../fs/write`` (gzip tar).
* Terminals: ``POST .../interactive`` then a websocket (``start``/``resize``/``exit`` JSON,
  binary terminal bytes), the process on a real pty as session leader with a controlling tty.
* Bearer-token auth (401 otherwise). A sandbox's lifetime (``timeout``) stops its session.

What it does not model: isolation (commands run on this host as this user; paths are host paths),
snapshots, drives, network policies (recorded, not enforced), TLS (so the SDK's https health
probe before a terminal session fails and it proceeds after about a second).

Test hooks under ``/_fake/``: ``GET|DELETE requests`` (the record), ``POST faults`` (answer the next
matching requests with an error status), ``POST vanish/{name}`` (the sandbox disappears as if
deleted elsewhere, killing its processes).

Output is UTF-8 text on this API (``data`` is a JSON string); invalid bytes become U+FFFD, as the
SDK itself decodes with ``errors="replace"``.

Run it alone: ``python -m tests.fakes.vercel_server --port 0 --token T`` prints ``PORT <n>``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import codecs
import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

Json = dict[str, Any]
MAX_RECORDS = 20_000
KEEP_FINISHED = 256  # finished commands (and their logs) kept per session

#: The sandbox environment every command starts from (the API adds the request's env on top).
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG": "C.UTF-8",
    "VERCEL_SANDBOX": "1",
}


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error": {"code": code, "message": message}}, status=status)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


# ---------------------------------------------------------------------------
# Model
# ---------------------------------------------------------------------------


@dataclass
class Command:
    id: str
    name: str
    args: list[str]
    cwd: str
    session_id: str
    started_at: int
    attach_stdin: bool
    proc: asyncio.subprocess.Process | None = None
    exit_code: int | None = None
    logs: list[tuple[str, str]] = field(default_factory=list)
    stdin_written: int = 0
    stdin_closed: bool = False
    stop_error: Json | None = None  # set when the session stopped under the command
    done: asyncio.Event = field(default_factory=asyncio.Event)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    stdin_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def payload(self) -> Json:
        return {
            "id": self.id,
            "name": self.name,
            "args": self.args,
            "cwd": self.cwd,
            "sessionId": self.session_id,
            "exitCode": self.exit_code,
            "startedAt": self.started_at,
        }

    def notify(self) -> None:
        old, self.changed = self.changed, asyncio.Event()
        old.set()


@dataclass
class Session:
    id: str
    sandbox_name: str
    project_id: str
    status: str
    requested_at: int
    started_at: int
    stopped_at: int | None = None
    commands: dict[str, Command] = field(default_factory=dict)
    timer: asyncio.TimerHandle | None = None
    interactive: dict[str, str] = field(default_factory=dict)  # pending PTY id -> token
    pty_pids: set[int] = field(default_factory=set)


@dataclass
class Sandbox:
    name: str
    project_id: str
    dir: Path
    config: Json
    created_at: int
    current_session_id: str
    sessions: list[str] = field(default_factory=list)

    @property
    def cwd(self) -> str:
        return str(self.dir / "vercel" / "sandbox")


# ---------------------------------------------------------------------------
# Server
# ---------------------------------------------------------------------------


class FakeVercel:
    """The fake API. ``start_in_thread()`` for tests in this process, or ``serve()`` in a loop."""

    def __init__(self, *, token: str = "test-token", root: str | None = None) -> None:
        self.token = token
        self.root = Path(root or tempfile.mkdtemp(prefix="vercel-fake-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.requests: list[Json] = []
        self._lock = threading.Lock()
        self.sandboxes: dict[str, Sandbox] = {}
        self.sessions: dict[str, Session] = {}
        self.faults: list[Json] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.port: int = 0
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 << 20)
        r = app.router
        r.add_post("/v3/sandboxes", self.create_sandbox)
        r.add_get("/v2/sandboxes", self.list_sandboxes)
        r.add_get("/v2/sandboxes/sessions/{sid}", self.get_session)
        r.add_post("/v2/sandboxes/sessions/{sid}/stop", self.stop_session)
        r.add_post("/v2/sandboxes/sessions/{sid}/cmd", self.create_command)
        r.add_get("/v2/sandboxes/sessions/{sid}/cmd", self.list_commands)
        r.add_get("/v2/sandboxes/sessions/{sid}/cmd/{cid}", self.get_command)
        r.add_get("/v2/sandboxes/sessions/{sid}/cmd/{cid}/logs", self.command_logs)
        r.add_post("/v2/sandboxes/sessions/{sid}/cmd/{cid}/stdin", self.command_stdin)
        r.add_post("/v2/sandboxes/sessions/{sid}/cmd/{cid}/kill", self.command_kill)
        r.add_post("/v2/sandboxes/sessions/{sid}/fs/mkdir", self.fs_mkdir)
        r.add_post("/v2/sandboxes/sessions/{sid}/fs/read", self.fs_read)
        r.add_post("/v2/sandboxes/sessions/{sid}/fs/write", self.fs_write)
        r.add_post("/v2/sandboxes/sessions/{sid}/interactive", self.open_interactive)
        r.add_get("/_pty/{sid}/{pid}", self.pty_socket)
        r.add_get("/health", self.health)
        r.add_get("/v2/sandboxes/{name}", self.get_sandbox)
        r.add_delete("/v2/sandboxes/{name}", self.delete_sandbox)
        r.add_get("/_fake/requests", self.fake_requests)
        r.add_delete("/_fake/requests", self.fake_clear)
        r.add_post("/_fake/faults", self.fake_fault)
        r.add_post("/_fake/vanish/{name}", self.fake_vanish)
        return app

    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.loop = asyncio.get_running_loop()
        self._runner = web.AppRunner(self.app(), access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def shutdown(self) -> None:
        for sb in list(self.sandboxes.values()):
            await self._destroy(sb)
        if self._runner is not None:
            await self._runner.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)

    def start_in_thread(self) -> "FakeVercel":
        """Serve from a thread with its own event loop (so a blocked test loop cannot stall it)."""
        ready = threading.Event()
        errors: list[BaseException] = []

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.serve())
            except BaseException as exc:  # pragma: no cover - reported to the caller
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self.shutdown())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-vercel", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            raise errors[0]
        return self

    def stop_thread(self) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)

    def call(self, coro: Any, timeout: float = 10) -> Any:
        """Run a coroutine on the server's loop from another thread."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    # -- test hooks ----------------------------------------------------------------------------

    def recorded(self, method: str | None = None, path_contains: str = "") -> list[Json]:
        with self._lock:
            return [r for r in self.requests
                    if (method is None or r["method"] == method) and path_contains in r["path"]]

    def clear(self) -> None:
        with self._lock:
            self.requests.clear()

    def add_fault(self, method: str, path_contains: str, status: int, code: str, message: str = "",
                  times: int = 1) -> None:
        with self._lock:
            self.faults.append({"method": method, "path": path_contains, "status": status, "code": code,
                                "message": message or f"injected {code}", "times": times})

    async def vanish(self, name: str) -> None:
        sb = self.sandboxes.get(name)
        if sb is not None:
            await self._destroy(sb)

    async def fake_requests(self, request: web.Request) -> web.Response:
        with self._lock:
            return web.json_response(list(self.requests))

    async def fake_clear(self, request: web.Request) -> web.Response:
        self.clear()
        return web.json_response({})

    async def fake_fault(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.add_fault(body["method"], body.get("path", ""), int(body["status"]), body["code"],
                       body.get("message", ""), int(body.get("times", 1)))
        return web.json_response({})

    async def fake_vanish(self, request: web.Request) -> web.Response:
        await self.vanish(request.match_info["name"])
        return web.json_response({})

    # -- middleware: record, inject faults, authenticate ---------------------------------------

    def _record(self, entry: Json) -> None:
        with self._lock:
            self.requests.append(entry)
            if len(self.requests) > MAX_RECORDS:  # a long-lived server keeps the latest only
                del self.requests[: len(self.requests) - MAX_RECORDS]

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.path.startswith("/_fake/"):
            return await handler(request)
        if request.path.startswith("/_pty/") or request.path == "/health":
            self._record({"method": request.method, "path": request.path,
                          "query": dict(request.query), "headers": {}, "time": time.time()})
            return await handler(request)
        body = await request.read()
        record: Json = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "headers": {k.lower(): v for k, v in request.headers.items()
                        if k.lower() in ("authorization", "content-type", "x-cwd", "user-agent")},
            "time": time.time(),
        }
        if request.content_type == "application/json" or (body[:1] in (b"{", b"[")):
            try:
                record["json"] = json.loads(body) if body else None
            except ValueError:
                record["body_size"] = len(body)
        else:
            record["body_size"] = len(body)
        self._record(record)
        with self._lock:
            fault = next((f for f in self.faults if f["method"] == request.method
                          and f["path"] in request.path and f["times"] > 0), None)
            if fault is not None:
                fault["times"] -= 1
        if fault is not None:
            return _error(fault["status"], fault["code"], fault["message"])
        if request.headers.get("authorization") != f"Bearer {self.token}":
            return _error(401, "forbidden", "Not authorized: the token is missing or invalid")
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message)

    # -- payloads ------------------------------------------------------------------------------

    def _session_payload(self, s: Session) -> Json:
        sb = self.sandboxes.get(s.sandbox_name)
        cfg = sb.config if sb else {}
        res = cfg.get("resources") or {}
        return {
            "id": s.id,
            "sourceSandboxName": s.sandbox_name,
            "projectId": s.project_id,
            "status": s.status,
            "cwd": sb.cwd if sb else None,
            "region": cfg.get("region") or "iad1",
            "memory": res.get("memory", 2048),
            "vcpus": res.get("vcpus", 1),
            "timeout": cfg.get("timeout", 300_000),
            "networkPolicy": cfg.get("networkPolicy"),
            "requestedAt": s.requested_at,
            "startedAt": s.started_at,
            "stoppedAt": s.stopped_at,
        }

    def _sandbox_payload(self, sb: Sandbox) -> Json:
        cfg = sb.config
        res = cfg.get("resources") or {}
        session = self.sessions[sb.current_session_id]
        return {
            "name": sb.name,
            "currentSessionId": sb.current_session_id,
            "image": cfg.get("image") or "vercel/sandbox/universal:latest",
            "status": session.status,
            "persistent": cfg.get("persistent", True),
            "projectId": sb.project_id,
            "cwd": sb.cwd,
            "region": cfg.get("region") or "iad1",
            "memory": res.get("memory", 2048),
            "vcpus": res.get("vcpus", 1),
            "timeout": cfg.get("timeout", 300_000),
            "networkPolicy": cfg.get("networkPolicy"),
            "tags": cfg.get("tags") or {},
            "createdAt": sb.created_at,
            "updatedAt": sb.created_at,
            "statusUpdatedAt": session.stopped_at or session.started_at,
        }

    def _sandbox_response(self, sb: Sandbox, **extra: Any) -> web.Response:
        return web.json_response({
            "sandbox": self._sandbox_payload(sb),
            "session": self._session_payload(self.sessions[sb.current_session_id]),
            "routes": [{"url": f"http://127.0.0.1:{p}", "port": p, "subdomain": f"p{p}"}
                       for p in sb.config.get("ports") or []],
            **extra,
        })

    # -- sandboxes -----------------------------------------------------------------------------

    def _new_session(self, sb: Sandbox) -> Session:
        now = _now_ms()
        s = Session(id=f"sbx_{uuid.uuid4().hex[:20]}", sandbox_name=sb.name, project_id=sb.project_id,
                    status="running", requested_at=now, started_at=now)
        self.sessions[s.id] = s
        sb.sessions.append(s.id)
        sb.current_session_id = s.id
        timeout_ms = sb.config.get("timeout")
        if timeout_ms:
            assert self.loop is not None
            s.timer = self.loop.call_later(timeout_ms / 1000, lambda: asyncio.ensure_future(
                self._stop_session(s, "sandbox_stopped", "the sandbox reached its timeout")))
        return s

    async def create_sandbox(self, request: web.Request) -> web.Response:
        body = await request.json()
        name = body.get("name") or f"sbx-{uuid.uuid4().hex[:12]}"
        if name in self.sandboxes:
            raise ApiError(409, "sandbox_already_exists", f"a sandbox named {name!r} already exists")
        directory = self.root / name  # stable, like /vercel/sandbox in every real sandbox
        await asyncio.to_thread(shutil.rmtree, directory, True)
        (directory / "vercel" / "sandbox").mkdir(parents=True)
        sb = Sandbox(name=name, project_id=body.get("projectId", ""), dir=directory, config=body,
                     created_at=_now_ms(), current_session_id="")
        self.sandboxes[name] = sb
        self._new_session(sb)
        return self._sandbox_response(sb)

    def _sandbox(self, name: str) -> Sandbox:
        sb = self.sandboxes.get(name)
        if sb is None:
            raise ApiError(404, "not_found", f"sandbox {name!r} was not found")
        return sb

    async def get_sandbox(self, request: web.Request) -> web.Response:
        sb = self._sandbox(request.match_info["name"])
        resumed = False
        if request.query.get("resume") == "true" and self.sessions[sb.current_session_id].status != "running":
            self._new_session(sb)
            resumed = True
        return self._sandbox_response(sb, resumed=resumed)

    async def list_sandboxes(self, request: web.Request) -> web.Response:
        prefix = request.query.get("namePrefix", "")
        tag = request.query.get("tags")
        out = []
        for sb in self.sandboxes.values():
            if not sb.name.startswith(prefix):
                continue
            if tag:
                key, _, value = tag.partition(":")
                if (sb.config.get("tags") or {}).get(key) != value:
                    continue
            out.append(self._sandbox_payload(sb))
        return web.json_response({"sandboxes": out, "pagination": {"count": len(out), "next": None}})

    async def delete_sandbox(self, request: web.Request) -> web.Response:
        sb = self._sandbox(request.match_info["name"])
        response = self._sandbox_response(sb)
        await self._destroy(sb)
        return response

    async def _destroy(self, sb: Sandbox) -> None:
        for sid in sb.sessions:
            await self._stop_session(self.sessions[sid], "sandbox_stopped", "the sandbox was deleted")
        self.sandboxes.pop(sb.name, None)
        await asyncio.to_thread(shutil.rmtree, sb.dir, True)

    # -- sessions ------------------------------------------------------------------------------

    def _session(self, sid: str, *, running: bool = True) -> Session:
        s = self.sessions.get(sid)
        if s is None or s.sandbox_name not in self.sandboxes:
            raise ApiError(404, "not_found", f"session {sid!r} was not found")
        if running and s.status != "running":
            raise ApiError(410, "sandbox_stopped", f"session {sid!r} is {s.status}")
        return s

    async def get_session(self, request: web.Request) -> web.Response:
        s = self._session(request.match_info["sid"], running=False)
        sb = self.sandboxes[s.sandbox_name]
        return web.json_response({"session": self._session_payload(s), "sandbox": self._sandbox_payload(sb)})

    async def stop_session(self, request: web.Request) -> web.Response:
        s = self._session(request.match_info["sid"], running=False)
        await self._stop_session(s, "sandbox_stopped", "the session was stopped")
        sb = self.sandboxes[s.sandbox_name]
        return web.json_response({"session": self._session_payload(s), "sandbox": self._sandbox_payload(sb)})

    async def _stop_session(self, s: Session, code: str, message: str) -> None:
        if s.status == "stopped":
            return
        s.status = "stopping"
        if s.timer is not None:
            s.timer.cancel()
        for pid in list(s.pty_pids):
            _kill_session_tree(pid)
        for cmd in s.commands.values():
            if cmd.exit_code is None and cmd.proc is not None:
                cmd.stop_error = {"code": code, "message": message}
                _kill_session_tree(cmd.proc.pid)
        for cmd in s.commands.values():
            if cmd.proc is not None:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(cmd.done.wait(), 5)
        s.status = "stopped"
        s.stopped_at = _now_ms()

    # -- commands ------------------------------------------------------------------------------

    async def create_command(self, request: web.Request) -> web.StreamResponse:
        s = self._session(request.match_info["sid"])
        sb = self.sandboxes[s.sandbox_name]
        body = await request.json()
        cwd = body.get("cwd") or sb.cwd
        env = {**BASE_ENV, "HOME": sb.cwd, **(sb.config.get("env") or {}), **(body.get("env") or {})}
        cmd = Command(id=f"cmd_{uuid.uuid4().hex[:20]}", name=body["command"], args=list(body.get("args") or []),
                      cwd=cwd, session_id=s.id, started_at=_now_ms(), attach_stdin=bool(body.get("attachStdin")))
        try:
            cmd.proc = await asyncio.create_subprocess_exec(
                cmd.name, *cmd.args, cwd=cwd, env=env,
                stdin=asyncio.subprocess.PIPE if cmd.attach_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        except FileNotFoundError as exc:
            raise ApiError(400, "command_failed", f"cannot start {cmd.name!r}: {exc.strerror}: {exc.filename}")
        except NotADirectoryError as exc:
            raise ApiError(400, "command_failed", f"cannot start {cmd.name!r}: {exc}")
        s.commands[cmd.id] = cmd
        finished = [k for k, c in s.commands.items() if c.done.is_set()]
        for k in finished[: max(0, len(finished) - KEEP_FINISHED)]:  # output is not kept forever
            del s.commands[k]
        asyncio.ensure_future(self._run(cmd, body.get("timeout")))
        wait = request.query.get("wait") == "true" or body.get("wait")
        if not wait:
            return web.json_response({"command": cmd.payload()})
        # wait + logs: one NDJSON stream of the start, the output, then the final state.
        response = _ndjson_response()
        await response.prepare(request)
        await response.write(_line({"command": cmd.payload()}))
        await self._stream_logs(cmd, response)
        await cmd.done.wait()
        await response.write(_line({"command": cmd.payload()}))
        await response.write_eof()
        return response

    async def _run(self, cmd: Command, kill_after_ms: int | None) -> None:
        proc = cmd.proc
        assert proc is not None
        timer = None
        if kill_after_ms:
            timer = asyncio.get_running_loop().call_later(kill_after_ms / 1000, _kill_session_tree, proc.pid)

        async def pump(stream: asyncio.StreamReader, name: str) -> None:
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            while True:
                chunk = await stream.read(65536)
                text = decoder.decode(chunk, final=not chunk)
                if text:
                    cmd.logs.append((name, text))
                    cmd.notify()
                if not chunk:
                    return

        assert proc.stdout is not None and proc.stderr is not None
        await asyncio.gather(pump(proc.stdout, "stdout"), pump(proc.stderr, "stderr"))
        code = await proc.wait()
        if timer is not None:
            timer.cancel()
        cmd.exit_code = 128 - code if code < 0 else code
        cmd.done.set()
        cmd.notify()

    def _command(self, request: web.Request, *, running: bool = False) -> tuple[Session, Command]:
        s = self._session(request.match_info["sid"], running=running)
        cmd = s.commands.get(request.match_info["cid"])
        if cmd is None:
            raise ApiError(404, "not_found", f"command {request.match_info['cid']!r} was not found")
        return s, cmd

    async def list_commands(self, request: web.Request) -> web.Response:
        s = self._session(request.match_info["sid"], running=False)
        return web.json_response({"commands": [c.payload() for c in s.commands.values()]})

    async def get_command(self, request: web.Request) -> web.Response:
        _, cmd = self._command(request)
        if request.query.get("wait") == "true":
            await cmd.done.wait()
        if cmd.stop_error is not None:
            raise ApiError(410, cmd.stop_error["code"], cmd.stop_error["message"])
        return web.json_response({"command": cmd.payload()})

    async def command_logs(self, request: web.Request) -> web.StreamResponse:
        _, cmd = self._command(request)
        response = _ndjson_response()
        await response.prepare(request)
        await self._stream_logs(cmd, response)
        if cmd.stop_error is not None:
            await response.write(_line({"stream": "error", "data": cmd.stop_error}))
        await response.write_eof()
        return response

    async def _stream_logs(self, cmd: Command, response: web.StreamResponse) -> None:
        """Replay the output from the start, then follow it live until the process exits."""
        sent = 0
        while True:
            changed = cmd.changed
            while sent < len(cmd.logs):
                stream, data = cmd.logs[sent]
                await response.write(_line({"stream": stream, "data": data}))
                sent += 1
            if cmd.done.is_set() and sent == len(cmd.logs):
                return
            await changed.wait()

    async def command_stdin(self, request: web.Request) -> web.Response:
        _, cmd = self._command(request)
        body = await request.json()
        async with cmd.stdin_lock:
            if not cmd.attach_stdin:
                raise ApiError(400, "command_stdin_unavailable", "the command was started without stdin")
            data = base64.b64decode(body.get("data") or "")
            offset = body.get("offset")
            if data or body.get("close"):
                if cmd.exit_code is not None or cmd.stdin_closed:
                    raise ApiError(400, "command_stdin_unavailable", "the command no longer reads its stdin")
            if offset is not None and offset > cmd.stdin_written:
                raise ApiError(400, "invalid_offset", f"offset {offset} is past {cmd.stdin_written} bytes written")
            if data:
                skip = cmd.stdin_written - (offset if offset is not None else cmd.stdin_written)
                fresh = data[skip:]
                assert cmd.proc is not None and cmd.proc.stdin is not None
                try:
                    cmd.proc.stdin.write(fresh)
                    await cmd.proc.stdin.drain()
                except (BrokenPipeError, ConnectionResetError):
                    raise ApiError(400, "command_stdin_unavailable", "the command closed its stdin")
                cmd.stdin_written += len(fresh)
            if body.get("close"):
                assert cmd.proc is not None and cmd.proc.stdin is not None
                cmd.proc.stdin.close()
                cmd.stdin_closed = True
        return web.json_response({"command": cmd.payload(), "bytesWritten": cmd.stdin_written})

    async def command_kill(self, request: web.Request) -> web.Response:
        _, cmd = self._command(request, running=True)
        body = await request.json()
        if cmd.exit_code is None and cmd.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(cmd.proc.pid, int(body["signal"]))
        return web.json_response({"command": cmd.payload()})

    # -- interactive (PTY) sessions -------------------------------------------------------------

    async def open_interactive(self, request: web.Request) -> web.Response:
        s = self._session(request.match_info["sid"])
        pty_id, token = uuid.uuid4().hex[:16], uuid.uuid4().hex
        s.interactive[pty_id] = token
        return web.json_response({"url": f"ws://127.0.0.1:{self.port}/_pty/{s.id}/{pty_id}", "token": token})

    async def health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def pty_socket(self, request: web.Request) -> web.StreamResponse:
        s = self._session(request.match_info["sid"])
        token = s.interactive.pop(request.match_info["pid"], None)
        if token is None or request.query.get("token") != token:
            raise ApiError(403, "forbidden", "unknown interactive session or token")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        first = await ws.receive()
        if first.type != web.WSMsgType.TEXT:
            await ws.close()
            return ws
        start = json.loads(first.data)
        self._record({"method": "WS", "path": request.path, "query": {}, "headers": {},
                      "json": start, "time": time.time()})
        await _pty_session(self, ws, s, self.sandboxes[s.sandbox_name], start)
        await ws.close()
        return ws

    # -- files ---------------------------------------------------------------------------------

    def _fs_path(self, request: web.Request, body: Json) -> Path:
        s = self._session(request.match_info["sid"])
        base = body.get("cwd") or self.sandboxes[s.sandbox_name].cwd
        return Path(base) / body["path"]

    async def fs_mkdir(self, request: web.Request) -> web.Response:
        body = await request.json()
        path = self._fs_path(request, body)
        try:
            path.mkdir(parents=body.get("recursive", True), exist_ok=True)
        except FileNotFoundError:
            raise ApiError(404, "path_not_found", f"a parent of {path} does not exist")
        return web.json_response({})

    async def fs_read(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        path = self._fs_path(request, body)
        if not path.is_file():
            raise ApiError(404, "file_not_found", f"{path} is not a file")
        response = web.StreamResponse(headers={"content-type": "application/octet-stream"})
        await response.prepare(request)
        with open(path, "rb") as f:
            while chunk := f.read(65536):
                await response.write(chunk)
        await response.write_eof()
        return response

    async def fs_write(self, request: web.Request) -> web.Response:
        s = self._session(request.match_info["sid"])
        del s
        body = await request.read()
        base = Path(request.headers.get("x-cwd", "/"))
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(body)), mode="r:") as tar:
            for member in tar.getmembers():
                target = base / member.name
                target.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                if source is None:
                    continue
                with open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
                os.chmod(target, member.mode)
        return web.json_response({})


# Interactive sessions: ``POST .../interactive`` hands out a websocket URL and token; on the
# socket, a JSON ``start`` message runs the command on a terminal (session leader, controlling
# tty), binary frames are terminal bytes both ways, ``resize`` sets the size, and a JSON ``exit``
# message ends it. The SDK first probes ``https://<host>/health``; this server speaks plain HTTP,
# so that probe fails and the SDK goes on after its retries (about a second per session).


async def _pty_session(fake: "FakeVercel", ws: web.WebSocketResponse, s: Session, sb: Sandbox,
                       start: Json) -> None:
    import fcntl
    import struct
    import termios

    def winsize(fd: int, rows: int, cols: int) -> None:
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    env = {**BASE_ENV, "HOME": sb.cwd, **(sb.config.get("env") or {})}
    env.update(item.split("=", 1) for item in start.get("env") or [] if "=" in item)
    master, slave = os.openpty()
    winsize(slave, int(start.get("rows", 24)), int(start.get("cols", 80)))

    def ctty() -> None:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    import subprocess

    try:
        proc = subprocess.Popen([start["command"], *start.get("args", [])], cwd=start.get("cwd") or sb.cwd,
                                env=env, stdin=slave, stdout=slave, stderr=slave, preexec_fn=ctty,
                                close_fds=True)
    except OSError as exc:
        os.close(slave)
        os.close(master)
        await ws.send_bytes(f"cannot start {start['command']!r}: {exc}\r\n".encode())
        await ws.send_str(json.dumps({"type": "exit", "code": 127}))
        return
    os.close(slave)
    s.pty_pids.add(proc.pid)
    loop = asyncio.get_running_loop()
    output: asyncio.Queue[bytes] = asyncio.Queue()
    os.set_blocking(master, False)

    def readable() -> None:
        try:
            data = os.read(master, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            loop.remove_reader(master)
        output.put_nowait(data)

    loop.add_reader(master, readable)

    async def send_output() -> None:
        while chunk := await output.get():
            await ws.send_bytes(chunk)

    async def receive_input() -> None:
        async for msg in ws:
            if msg.type == web.WSMsgType.BINARY:
                view = memoryview(msg.data)
                while view:
                    try:
                        view = view[os.write(master, view):]
                    except BlockingIOError:
                        await asyncio.sleep(0.005)
            elif msg.type == web.WSMsgType.TEXT:
                control = json.loads(msg.data)
                if control.get("type") == "resize":
                    winsize(master, int(control["rows"]), int(control["cols"]))

    sender = asyncio.ensure_future(send_output())
    receiver = asyncio.ensure_future(receive_input())
    try:
        code = await asyncio.to_thread(proc.wait)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(sender), 5)  # the rest of the output, up to EIO
        await ws.send_str(json.dumps({"type": "exit", "code": 128 - code if code < 0 else code}))
    finally:
        s.pty_pids.discard(proc.pid)
        receiver.cancel()
        sender.cancel()
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(master)
        os.close(master)


def _ndjson_response() -> web.StreamResponse:
    return web.StreamResponse(headers={"content-type": "application/x-ndjson"})


def _line(record: Json) -> bytes:
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def _kill_session_tree(pid: int) -> None:
    """SIGKILL ``pid``, its descendants, and every process of a session one of them leads (what a
    stopped VM does to everything a command started, including orphans of its sessions)."""
    procs: dict[int, tuple[int, int]] = {}  # pid -> (ppid, sid)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2:].split()
        procs[int(entry)] = (int(fields[1]), int(fields[3]))
    victims = {pid}
    grew = True
    while grew:
        grew = False
        for p, (ppid, sid) in procs.items():
            if p not in victims and (ppid in victims or sid in victims):
                victims.add(p)
                grew = True
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--token", default="test-token")
    parser.add_argument("--root", default=None, help="where sandbox directories are made")
    args = parser.parse_args(argv)

    async def run() -> None:
        fake = FakeVercel(token=args.token, root=args.root)
        await fake.serve(args.host, args.port)
        print(f"PORT {fake.port}", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await fake.shutdown()

    asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())

"""A local server that speaks Daytona's REST API the way the ``daytona`` SDK (0.226) uses it.

It exists so the daytona backend is tested through the real SDK without the cloud:

* the control plane (``/api``): create, get, list (by labels), stop, start and delete sandboxes,
  with bearer-token auth, a quota knob and request recording;
* the toolbox (``/toolbox/{sandboxId}``): work/home dir, ``process/execute``, sessions, session
  commands with ``runAsync``, their logs over a websocket (follow) or plain GET, ``input``, and
  the bulk file upload/download endpoints.

Commands run FOR REAL on this host, one directory per sandbox, and with the real toolbox's
semantics, because those are what the backend has to survive:

* a session is one long-lived shell reading commands from its stdin, so the commands of one
  session run one after another and share the shell's state;
* a command's stdout and stderr are labelled *line by line* (``\\x01\\x01\\x01`` / ``\\x02\\x02\\x02``
  before each line) into one log file; a last line without a newline gets one at EOF;
* the log websocket sends the log file's bytes as they grow and closes (1000) once the exit code
  is written, which happens only after the labellers drained;
* input is written to the command's stdin FIFO with a newline appended when missing, and echoed
  into the log unless ``suppressInputEcho``.

Run standalone with ``python tests/fakes/daytona_server.py --port 0 --url-file F`` (prints and
writes its base URL), or embed with :class:`FakeDaytona` (``await fake.start()``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import json
import os
import struct
import termios
import shutil
import signal
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import WSMsgType, web

STDOUT_PREFIX = b"\x01\x01\x01"
STDERR_PREFIX = b"\x02\x02\x02"

#: The shell text written to a session shell's stdin for each command: labels each stream line by
#: line into the log, holds stdin open for async commands, writes the exit code last.
_WRAPPER = r"""
{
  _d=%(dir)s
  rm -f "$_d/out" "$_d/err" "$_d/in"; mkfifo "$_d/out" "$_d/err" "$_d/in"
  ( while IFS= read -r _l || [ -n "$_l" ]; do printf '\001\001\001%%s\n' "$_l"; done < "$_d/out" ) >> "$_d/output.log" & _ro=$!
  ( while IFS= read -r _l || [ -n "$_l" ]; do printf '\002\002\002%%s\n' "$_l"; done < "$_d/err" ) >> "$_d/output.log" & _re=$!
  %(holder)s
  _hp=$!
  { . "$_d/cmd.sh"; } < "$_d/in" > "$_d/out" 2> "$_d/err"
  _ec=$?
  kill "$_hp" 2>/dev/null; wait "$_hp" 2>/dev/null
  wait "$_ro" "$_re"
  echo "$_ec" > "$_d/exit_code.tmp" && mv "$_d/exit_code.tmp" "$_d/exit_code"
}
"""
_HOLD_ASYNC = 'sleep 2147483647 > "$_d/in" &'
_HOLD_SYNC = ': > "$_d/in" &'


@dataclass
class Recorded:
    """One request as the SDK sent it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeCommand:
    id: str
    command: str
    dir: Path
    suppress_echo: bool

    def exit_code(self) -> int | None:
        try:
            return int((self.dir / "exit_code").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None


@dataclass
class FakeSession:
    id: str
    proc: asyncio.subprocess.Process
    dir: Path
    commands: dict[str, FakeCommand] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass
class FakePty:
    """A PTY session: the sandbox's shell on a terminal, bridged to one websocket."""

    id: str
    pid: int
    master: int
    cwd: str
    envs: dict[str, str]
    rows: int
    cols: int
    created: str
    exit_code: int | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def info(self) -> dict[str, Any]:
        return {"id": self.id, "active": self.exit_code is None, "cols": self.cols, "rows": self.rows,
                "createdAt": self.created, "cwd": self.cwd, "envs": self.envs, "lazyStart": False}


@dataclass
class FakeSandbox:
    dto: dict[str, Any]
    home: Path
    state_dir: Path
    sessions: dict[str, FakeSession] = field(default_factory=dict)
    ptys: dict[str, FakePty] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.dto["id"]


def _proc_table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, session id) for every process on the host."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        table[int(entry)] = (int(fields[1]), int(fields[3]))
    return table


def _cwd_under(pid: int, root: Path) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd").startswith(str(root))
    except OSError:
        return False


class FakeDaytona:
    """The server's state and its aiohttp application."""

    def __init__(self, root: Path | None = None, api_key: str = "test-daytona-key") -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="fake-daytona-"))
        self.api_key = api_key
        self.requests: list[Recorded] = []
        self.sandboxes: dict[str, FakeSandbox] = {}
        #: Maximum number of live sandboxes; creating one more answers 403 like a quota.
        self.max_sandboxes: int | None = None
        self.url = ""
        self._runner: web.AppRunner | None = None
        self.app = self._build_app()

    # -- lifecycle --------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._runner = web.AppRunner(self.app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        self.url = f"http://{host}:{sock.getsockname()[1]}"
        return self.url

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"

    async def stop(self) -> None:
        for sb in list(self.sandboxes.values()):
            await self._destroy(sb)
        if self._runner is not None:
            await self._runner.cleanup()
        shutil.rmtree(self.root, ignore_errors=True)

    def requests_to(self, method: str, suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path.endswith(suffix)]

    def vanish(self, sandbox_id: str) -> None:
        """Make a sandbox disappear as if deleted behind our back (for fault tests)."""
        sb = self.sandboxes.get(sandbox_id)
        if sb is not None:
            asyncio.get_running_loop().create_task(self._destroy(sb))

    # -- app --------------------------------------------------------------------------------
    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._record, self._auth], client_max_size=1 << 30)
        r = app.router
        r.add_post("/api/sandbox", self.create_sandbox)
        r.add_get("/api/sandbox", self.list_sandboxes)
        r.add_get("/api/sandbox/{sid}", self.get_sandbox)
        r.add_delete("/api/sandbox/{sid}", self.delete_sandbox)
        r.add_post("/api/sandbox/{sid}/stop", self.stop_sandbox)
        r.add_post("/api/sandbox/{sid}/start", self.start_sandbox)
        r.add_get("/api/sandbox/{sid}/toolbox-proxy-url", self.toolbox_url)
        t = "/toolbox/{sid}"
        r.add_get(t + "/work-dir", self.work_dir)
        r.add_get(t + "/user-home-dir", self.work_dir)
        r.add_post(t + "/process/execute", self.execute)
        r.add_post(t + "/process/session", self.create_session)
        r.add_get(t + "/process/session", self.list_sessions)
        r.add_get(t + "/process/session/{sess}", self.get_session)
        r.add_delete(t + "/process/session/{sess}", self.delete_session)
        r.add_post(t + "/process/session/{sess}/exec", self.session_exec)
        r.add_get(t + "/process/session/{sess}/command/{cmd}", self.get_command)
        r.add_get(t + "/process/session/{sess}/command/{cmd}/logs", self.command_logs)
        r.add_post(t + "/process/session/{sess}/command/{cmd}/input", self.command_input)
        r.add_get(t + "/process/pty/create-connect", self.pty_create_connect)
        r.add_get(t + "/process/pty", self.pty_list)
        r.add_get(t + "/process/pty/{pty}", self.pty_get)
        r.add_delete(t + "/process/pty/{pty}", self.pty_delete)
        r.add_post(t + "/process/pty/{pty}/resize", self.pty_resize)
        r.add_post(t + "/files/folder", self.create_folder)
        r.add_post(t + "/files/bulk-upload", self.bulk_upload)
        r.add_post(t + "/files/bulk-download", self.bulk_download)
        return app

    @web.middleware
    async def _record(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body: Any = None
        if request.content_type == "application/json" and request.can_read_body:
            raw = await request.read()
            body = json.loads(raw) if raw else None
        self.requests.append(Recorded(request.method, request.path, dict(request.query),
                                      {k.lower(): v for k, v in request.headers.items()}, body))
        return await handler(request)

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.api_key}":
            return _error(401, "Unauthorized: invalid API key")
        try:
            return await handler(request)
        except _Fail as exc:
            return _error(exc.status, exc.message)

    # -- control plane ----------------------------------------------------------------------
    async def create_sandbox(self, request: web.Request) -> web.Response:
        body = await request.json()
        live = [s for s in self.sandboxes.values() if s.dto["state"] != "destroyed"]
        if self.max_sandboxes is not None and len(live) >= self.max_sandboxes:
            return _error(403, f"Total sandbox quota exceeded. Maximum allowed: {self.max_sandboxes}")
        sid = str(uuid.uuid4())
        state_dir = self.root / sid
        home = state_dir / "home"
        home.mkdir(parents=True)
        (state_dir / "sessions").mkdir()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        dto = {
            "id": sid, "organizationId": "org-fake", "name": body.get("name") or sid,
            "snapshot": body.get("snapshot") or "daytonaio/sandbox:fake", "user": body.get("user") or "daytona",
            "env": body.get("env") or {}, "labels": body.get("labels") or {}, "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")), "kvm": False,
            "networkAllowList": body.get("networkAllowList"), "target": body.get("target") or "us",
            "cpu": body.get("cpu") or 1, "gpu": 0, "memory": body.get("memory") or 1, "disk": body.get("disk") or 3,
            "state": "started", "desiredState": "started", "autoStopInterval": body.get("autoStopInterval", 15),
            "autoArchiveInterval": body.get("autoArchiveInterval", 10080),
            "autoDeleteInterval": body.get("autoDeleteInterval", -1), "createdAt": now, "updatedAt": now,
            "toolboxProxyUrl": f"{self.url}/toolbox",
        }
        self.sandboxes[sid] = FakeSandbox(dto, home, state_dir)
        return web.json_response(dto)

    def _find(self, key: str) -> FakeSandbox | None:
        sb = self.sandboxes.get(key)
        if sb is None:
            sb = next((s for s in self.sandboxes.values() if s.dto["name"] == key), None)
        return sb

    async def get_sandbox(self, request: web.Request) -> web.Response:
        sb = self._find(request.match_info["sid"])
        if sb is None:
            return _error(404, f"Sandbox with ID or name {request.match_info['sid']} not found")
        return web.json_response(sb.dto)

    async def list_sandboxes(self, request: web.Request) -> web.Response:
        wanted = json.loads(request.query.get("labels") or "{}")
        items = [s.dto for s in self.sandboxes.values()
                 if all(s.dto["labels"].get(k) == v for k, v in wanted.items())]
        return web.json_response({"items": items, "nextCursor": None})

    async def delete_sandbox(self, request: web.Request) -> web.Response:
        sb = self._find(request.match_info["sid"])
        if sb is None:
            return _error(404, "Sandbox not found")
        await self._destroy(sb)
        return web.json_response({**sb.dto, "state": "destroyed"})

    async def stop_sandbox(self, request: web.Request) -> web.Response:
        sb = self._find(request.match_info["sid"])
        if sb is None:
            return _error(404, "Sandbox not found")
        await self._kill_all(sb)
        sb.dto["state"] = "stopped"
        return web.json_response(sb.dto)

    async def start_sandbox(self, request: web.Request) -> web.Response:
        sb = self._find(request.match_info["sid"])
        if sb is None:
            return _error(404, "Sandbox not found")
        sb.dto["state"] = "started"
        return web.json_response(sb.dto)

    async def toolbox_url(self, request: web.Request) -> web.Response:
        return web.json_response({"url": f"{self.url}/toolbox"})

    async def _destroy(self, sb: FakeSandbox) -> None:
        await self._kill_all(sb)
        sb.dto["state"] = "destroyed"
        self.sandboxes.pop(sb.id, None)
        shutil.rmtree(sb.state_dir, ignore_errors=True)

    async def _kill_all(self, sb: FakeSandbox) -> None:
        """End every process of the sandbox: the session shells, their descendants, the sessions
        those started, and anything still working in the sandbox's directory."""
        table = _proc_table()
        doomed = {s.proc.pid for s in sb.sessions.values() if s.proc.returncode is None}
        doomed |= {p.pid for p in sb.ptys.values() if p.exit_code is None}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, sid) in table.items():
                if pid not in doomed and (ppid in doomed or sid in doomed or _cwd_under(pid, sb.state_dir)):
                    doomed.add(pid)
                    grew = True
        doomed.discard(os.getpid())
        for pid in doomed:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        sessions = list(sb.sessions.values())  # a concurrent DELETE of a session may change the dict
        sb.sessions.clear()
        for s in sessions:
            with contextlib.suppress(ProcessLookupError, asyncio.TimeoutError):
                await asyncio.wait_for(s.proc.wait(), 5)
        for p in list(sb.ptys.values()):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(p.done.wait(), 5)
        sb.ptys.clear()

    # -- toolbox ----------------------------------------------------------------------------
    def _sandbox(self, request: web.Request) -> FakeSandbox:
        sb = self.sandboxes.get(request.match_info["sid"])
        if sb is None:
            raise _http_error(404, "sandbox not found")
        if sb.dto["state"] != "started":
            raise _http_error(400, f"sandbox is {sb.dto['state']}, not started")
        return sb

    def _session(self, request: web.Request) -> tuple[FakeSandbox, FakeSession]:
        sb = self._sandbox(request)
        sess = sb.sessions.get(request.match_info["sess"])
        if sess is None:
            raise _http_error(404, "session not found")
        return sb, sess

    def _command(self, request: web.Request) -> tuple[FakeSession, FakeCommand]:
        _, sess = self._session(request)
        cmd = sess.commands.get(request.match_info["cmd"])
        if cmd is None:
            raise _http_error(404, "command not found")
        return sess, cmd

    def _shell_env(self, sb: FakeSandbox) -> dict[str, str]:
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(sb.home),
               "LANG": "C.UTF-8"}
        env.update(sb.dto["env"])
        return env

    async def work_dir(self, request: web.Request) -> web.Response:
        return web.json_response({"dir": str(self._sandbox(request).home)})

    async def execute(self, request: web.Request) -> web.Response:
        """Like the toolbox: NO shell. The command is split on spaces with '...'/"..." quoting
        (no escapes, empty words dropped) and exec'd in its own process group; output combined."""
        sb = self._sandbox(request)
        body = await request.json()
        argv = split_command(body.get("command") or "")
        if not argv:
            return _error(400, "empty command")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=body.get("cwd") or str(sb.home), env=self._shell_env(sb), process_group=0,
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        except OSError as exc:
            return web.json_response({"exitCode": -1, "result": str(exc)})
        timeout = body.get("timeout") or None
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
            return _error(408, f"Command execution timed out after {timeout} seconds.")
        code = proc.returncode if proc.returncode >= 0 else -1  # Go's ExitCode(): -1 when signalled
        return web.json_response({"exitCode": code, "result": out.decode(errors="replace")})

    async def create_session(self, request: web.Request) -> web.Response:
        sb = self._sandbox(request)
        sess_id = (await request.json())["sessionId"]
        if sess_id in sb.sessions:
            return _error(409, "session already exists")
        proc = await asyncio.create_subprocess_exec(
            "/bin/bash", "--noprofile", "--norc", cwd=str(sb.home), env=self._shell_env(sb),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
            process_group=0)
        directory = sb.state_dir / "sessions" / sess_id
        directory.mkdir(parents=True)
        sb.sessions[sess_id] = FakeSession(sess_id, proc, directory)
        return web.Response(status=201)

    async def list_sessions(self, request: web.Request) -> web.Response:
        sb = self._sandbox(request)
        return web.json_response([_session_json(s) for s in sb.sessions.values()])

    async def get_session(self, request: web.Request) -> web.Response:
        _, sess = self._session(request)
        return web.json_response(_session_json(sess))

    async def delete_session(self, request: web.Request) -> web.Response:
        sb, sess = self._session(request)
        sb.sessions.pop(sess.id, None)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(sess.proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(sess.proc.wait(), 1)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(sess.proc.pid, signal.SIGKILL)
            await sess.proc.wait()
        sb.sessions.pop(sess.id, None)
        shutil.rmtree(sess.dir, ignore_errors=True)
        return web.Response(status=204)

    async def session_exec(self, request: web.Request) -> web.Response:
        _, sess = self._session(request)
        body = await request.json()
        command = body.get("command", "")
        if not command.strip():
            return _error(400, "command cannot be empty")
        run_async = bool(body.get("runAsync") or body.get("async"))
        cmd = FakeCommand(str(uuid.uuid4()), command, sess.dir / "cmds" / "", bool(body.get("suppressInputEcho")))
        cmd.dir = sess.dir / "cmds" / cmd.id
        cmd.dir.mkdir(parents=True)
        (cmd.dir / "cmd.sh").write_text(command)
        (cmd.dir / "output.log").write_bytes(b"")
        sess.commands[cmd.id] = cmd
        wrapper = _WRAPPER % {"dir": _sh_quote(str(cmd.dir)), "holder": _HOLD_ASYNC if run_async else _HOLD_SYNC}
        assert sess.proc.stdin is not None
        try:
            sess.proc.stdin.write(wrapper.encode())
            await sess.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            return _error(400, "failed to write command: session shell has exited")
        if run_async:
            return web.json_response({"cmdId": cmd.id}, status=202)
        while (code := cmd.exit_code()) is None:
            if sess.proc.returncode is not None:
                return _error(400, "session cancelled")
            await asyncio.sleep(0.02)
        stdout, stderr = _demux((cmd.dir / "output.log").read_bytes())
        combined = (cmd.dir / "output.log").read_bytes().replace(STDOUT_PREFIX, b"").replace(STDERR_PREFIX, b"")
        return web.json_response({"cmdId": cmd.id, "exitCode": code, "output": combined.decode(errors="replace"),
                                  "stdout": stdout.decode(errors="replace"), "stderr": stderr.decode(errors="replace")})

    async def get_command(self, request: web.Request) -> web.Response:
        _, cmd = self._command(request)
        return web.json_response({"id": cmd.id, "command": cmd.command, "exitCode": cmd.exit_code()})

    async def command_logs(self, request: web.Request) -> web.StreamResponse:
        sess, cmd = self._command(request)
        log = cmd.dir / "output.log"
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return web.Response(body=log.read_bytes(), content_type="text/plain")
        follow = request.query.get("follow") == "true"
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        reader = asyncio.ensure_future(_drain_client(ws))
        try:
            with open(log, "rb") as f:
                while not reader.done():
                    finished = cmd.exit_code() is not None or sess.proc.returncode is not None
                    data = f.read(65536)
                    if data:
                        await ws.send_bytes(data)
                        continue
                    if finished or not follow:
                        break
                    await asyncio.sleep(0.005)
        except (ConnectionResetError, FileNotFoundError):
            pass
        finally:
            reader.cancel()
            if not ws.closed:
                await ws.close(code=1000)
        return ws

    async def command_input(self, request: web.Request) -> web.Response:
        sess, cmd = self._command(request)
        if sess.proc.returncode is not None:
            return _error(410, "session process has exited")
        if (code := cmd.exit_code()) is not None:
            return _error(410, f"command has already completed with exit code {code}")
        data: str = (await request.json())["data"]
        if not data.endswith("\n"):
            data += "\n"
        try:
            await asyncio.to_thread(_write_fifo, cmd.dir / "in", data.encode())
        except OSError as exc:
            return _error(500, f"failed to write to input pipe: {exc}")
        if not cmd.suppress_echo:
            with open(cmd.dir / "output.log", "ab") as f:
                f.write(STDOUT_PREFIX + data.encode())
        return web.Response(status=204)

    # -- PTY: the shell on a terminal; output as binary frames, exit as a control message ----
    async def pty_create_connect(self, request: web.Request) -> web.StreamResponse:
        sb = self._sandbox(request)
        q = request.query
        pty_id, rows, cols = q["id"], int(q.get("rows", 24)), int(q.get("cols", 80))
        if pty_id in sb.ptys:
            return _error(409, "PTY session already exists")
        protocols = [p.strip() for p in request.headers.get("Sec-WebSocket-Protocol", "").split(",") if p.strip()]
        envs: dict[str, str] = {}
        for p in protocols:
            if p.startswith("X-Daytona-Pty-Envs~"):
                raw = p.split("~", 1)[1]
                envs = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        cwd = q.get("cwd") or str(sb.home)
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        env = {**self._shell_env(sb), "TERM": "xterm-256color", **envs}
        pid = os.fork()
        if pid == 0:  # child: a new session with the terminal as its controlling tty
            try:
                os.setsid()
                fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
                for fd in (0, 1, 2):
                    os.dup2(slave, fd)
                os.closerange(3, 65536)
                os.chdir(cwd)
                os.execve("/bin/bash", ["/bin/bash", "--noprofile", "--norc", "-i"], env)
            finally:
                os._exit(127)
        os.close(slave)
        os.set_blocking(master, False)
        pty = FakePty(pty_id, pid, master, cwd, envs, rows, cols,
                      time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        sb.ptys[pty_id] = pty
        ws = web.WebSocketResponse(protocols=[p for p in protocols if p == "X-Daytona-Pty-Exit-Control"])
        await ws.prepare(request)
        await ws.send_str(json.dumps({"type": "control", "status": "connected"}))
        loop = asyncio.get_running_loop()
        output: asyncio.Queue[bytes] = asyncio.Queue()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            output.put_nowait(data)
            if not data:
                loop.remove_reader(master)

        loop.add_reader(master, readable)

        async def pump_input() -> None:
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    data = msg.data
                elif msg.type == WSMsgType.TEXT:
                    data = msg.data.encode()
                else:
                    break
                with contextlib.suppress(OSError):
                    os.write(master, data)

        inputs = asyncio.ensure_future(pump_input())
        try:
            while (data := await output.get()):
                await ws.send_bytes(data)
        finally:
            inputs.cancel()
            _, status = await asyncio.to_thread(os.waitpid, pid, 0)
            code = os.waitstatus_to_exitcode(status)
            pty.exit_code = code if code >= 0 else -1  # like Go's ExitCode(): -1 when signalled
            with contextlib.suppress(OSError):
                os.close(master)
            pty.done.set()
            sb.ptys.pop(pty_id, None)
            if not ws.closed:
                await ws.send_str(json.dumps({"type": "control", "status": "exited", "exitCode": pty.exit_code}))
                await ws.close(code=1000, message=json.dumps({"exitCode": pty.exit_code}).encode())
        return ws

    def _pty(self, request: web.Request) -> FakePty:
        pty = self._sandbox(request).ptys.get(request.match_info["pty"])
        if pty is None:
            raise _http_error(404, "PTY session not found")
        return pty

    async def pty_list(self, request: web.Request) -> web.Response:
        return web.json_response({"sessions": [p.info() for p in self._sandbox(request).ptys.values()]})

    async def pty_get(self, request: web.Request) -> web.Response:
        return web.json_response(self._pty(request).info())

    async def pty_delete(self, request: web.Request) -> web.Response:
        pty = self._pty(request)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pty.pid, signal.SIGKILL)
        return web.json_response({"message": "PTY session deleted"})

    async def pty_resize(self, request: web.Request) -> web.Response:
        pty = self._pty(request)
        body = await request.json()
        pty.rows, pty.cols = int(body["rows"]), int(body["cols"])
        fcntl.ioctl(pty.master, termios.TIOCSWINSZ, struct.pack("HHHH", pty.rows, pty.cols, 0, 0))
        return web.json_response(pty.info())

    async def create_folder(self, request: web.Request) -> web.Response:
        self._sandbox(request)
        path = Path(request.query["path"])
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(KeyError, ValueError):
            path.chmod(int(request.query["mode"], 8))
        return web.Response(status=201)

    async def bulk_upload(self, request: web.Request) -> web.Response:
        self._sandbox(request)
        reader = await request.multipart()
        paths: dict[str, str] = {}
        while (part := await reader.next()) is not None:
            name = part.name or ""
            if name.endswith(".path"):
                paths[name[: -len(".path")]] = (await part.read()).decode()  # type: ignore[union-attr]
            elif name.endswith(".file"):
                key = name[: -len(".file")]
                if key not in paths:
                    return _error(400, "file part before its path")
                dest = Path(paths[key])
                dest.parent.mkdir(parents=True, exist_ok=True)
                with open(dest, "wb") as f:
                    while chunk := await part.read_chunk(65536):  # type: ignore[union-attr]
                        f.write(chunk)
        return web.Response(status=200)

    async def bulk_download(self, request: web.Request) -> web.StreamResponse:
        self._sandbox(request)
        paths = (await request.json())["paths"]
        boundary = uuid.uuid4().hex
        resp = web.StreamResponse(headers={"Content-Type": f"multipart/form-data; boundary={boundary}"})
        await resp.prepare(request)
        for p in paths:
            try:
                f = open(p, "rb")
            except OSError as exc:
                payload = json.dumps({"message": f"{exc.strerror}: {p}", "statusCode": 404, "code": "FILE_NOT_FOUND"})
                await resp.write(f'--{boundary}\r\nContent-Disposition: form-data; name="error"; filename="{p}"\r\n'
                                 f"Content-Type: application/json\r\n\r\n{payload}\r\n".encode())
                continue
            with f:
                size = os.fstat(f.fileno()).st_size
                await resp.write(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{p}"\r\n'
                                 f"Content-Type: application/octet-stream\r\nContent-Length: {size}\r\n\r\n".encode())
                while chunk := f.read(65536):
                    await resp.write(chunk)
                await resp.write(b"\r\n")
        await resp.write(f"--{boundary}--\r\n".encode())
        await resp.write_eof()
        return resp


def split_command(command: str) -> list[str]:
    """The toolbox's ``/process/execute`` argument splitting (not a shell): spaces separate
    words outside quotes; a quote char starts/ends a quoted run unless inside the other kind;
    no escapes; empty words vanish."""
    args: list[str] = []
    current: list[str] = []
    quote = ""
    for ch in command:
        if ch in "'\"":
            if not quote:
                quote = ch
            elif quote == ch:
                quote = ""
            else:
                current.append(ch)
        elif ch == " " and not quote:
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        args.append("".join(current))
    return args


def _write_fifo(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    try:
        os.set_blocking(fd, True)
        os.write(fd, data)
    finally:
        os.close(fd)


async def _drain_client(ws: web.WebSocketResponse) -> None:
    async for msg in ws:
        if msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
            break


def _demux(log: bytes) -> tuple[bytes, bytes]:
    out, err = bytearray(), bytearray()
    current = out
    i = 0
    while i < len(log):
        if log.startswith(STDOUT_PREFIX, i):
            current, i = out, i + 3
        elif log.startswith(STDERR_PREFIX, i):
            current, i = err, i + 3
        else:
            current.append(log[i])
            i += 1
    return bytes(out), bytes(err)


def _session_json(sess: FakeSession) -> dict[str, Any]:
    return {"sessionId": sess.id,
            "commands": [{"id": c.id, "command": c.command, "exitCode": c.exit_code()} for c in sess.commands.values()]}


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"statusCode": status, "message": message, "error": message}, status=status)


class _Fail(Exception):
    """An API error answered as Daytona's JSON error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _http_error(status: int, message: str) -> _Fail:
    return _Fail(status, message)


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--api-key", default="test-daytona-key")
    parser.add_argument("--root", default=None, help="where sandbox directories live (default: a temp dir)")
    parser.add_argument("--url-file", default=None, help="write the API URL here once listening")
    args = parser.parse_args()
    fake = FakeDaytona(Path(args.root) if args.root else None, api_key=args.api_key)
    await fake.start(args.host, args.port)
    if args.url_file:
        tmp = args.url_file + ".tmp"
        Path(tmp).write_text(fake.api_url)
        os.replace(tmp, args.url_file)
    print(fake.api_url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await fake.stop()


if __name__ == "__main__":
    asyncio.run(_main())

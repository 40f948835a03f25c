"""A SWE-ReX runtime over executor (``pip install swe-rex``): SWE-agent's shell sessions run as executor
tasks, behind its gate, in whatever backend the daemon's operator configured.

    from executor.integrations.swerex import ExecutorRuntime
    runtime = ExecutorRuntime(target=T, token=TOKEN)          # an swerex AbstractRuntime
    await runtime.create_session(CreateBashSessionRequest())
    obs = await runtime.run_in_session(BashAction(command="ls", check="raise"))

Sessions are tasks: the ``default`` session is the task ``task_prefix`` (also where ``execute``,
``read_file``, ``write_file`` and ``upload`` work), another session ``s`` is ``<task_prefix>-s``, with
its own shell and directory. ``check`` as SWE-ReX: ``raise`` raises ``NonZeroExitCodeError``,
``silent`` returns the exit code, ``ignore`` returns none. A timeout raises ``CommandTimeoutError``
(executor has killed the command's tree by then, so a following ``BashInterruptAction`` has nothing
to interrupt). A command the gate denies is a failure with the gate's reason. Interactive actions
(``is_interactive_command`` / ``is_interactive_quit``) run a program under a terminal (the Pty RPC)
and wait for the ``expect`` strings.
"""

from __future__ import annotations

import asyncio
import io
import os
import shlex
import shutil
import subprocess
import tarfile
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from swerex.exceptions import (BashIncorrectSyntaxError, CommandTimeoutError, NonZeroExitCodeError,
                               SessionDoesNotExistError, SessionExistsError)
from swerex.runtime.abstract import (AbstractRuntime, BashAction, BashInterruptAction, BashObservation,
                                     CloseBashSessionResponse, CloseResponse, Command, CommandResponse,
                                     CreateBashSessionResponse, IsAliveResponse, ReadFileResponse, UploadResponse,
                                     WriteFileResponse)

from executor.client import AsyncClient, ExecutorError, ExitStatus, NotFound
from executor.v1 import executor_pb2 as pb

if TYPE_CHECKING:
    from swerex.runtime.abstract import (Action, CloseSessionRequest, CreateSessionRequest, ReadFileRequest,
                                         UploadRequest, WriteFileRequest)


class _Interactive:
    """One interactive program on a terminal (SWE-ReX's ``is_interactive_command``)."""

    def __init__(self, client: AsyncClient, task: str, command: str, backend: str) -> None:
        self.inputs: asyncio.Queue[pb.PtyInput | None] = asyncio.Queue()
        self.inputs.put_nowait(pb.PtyInput(open=pb.PtyOpen(task_id=task, command=command, backend=backend,
                                                           size=pb.PtySize(rows=40, cols=200))))
        self.buffer = ""
        self.changed = asyncio.Event()
        self.ended = False
        self.reader = asyncio.ensure_future(self._read(client))

    async def _inputs(self) -> AsyncIterator[pb.PtyInput]:
        while (item := await self.inputs.get()) is not None:
            yield item

    async def _read(self, client: AsyncClient) -> None:
        try:
            async for out in client.pty(self._inputs()):
                if out.WhichOneof("output") == "data":
                    self.buffer += out.data.decode("utf-8", errors="replace")
                    self.changed.set()
        finally:
            self.ended = True
            self.changed.set()

    async def expect(self, strings: list[str], timeout: float | None) -> tuple[str, str]:
        """Waits for one of ``strings`` (or the program's end); returns the output before it and it."""
        async def wait() -> tuple[str, str]:
            while True:
                hits = [(self.buffer.find(s), s) for s in strings if s and s in self.buffer]
                if hits:
                    at, hit = min(hits)
                    before, self.buffer = self.buffer[:at], self.buffer[at + len(hit):]
                    return before, hit
                if self.ended:
                    before, self.buffer = self.buffer, ""
                    return before, ""
                self.changed.clear()
                await self.changed.wait()
        return await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        await self.inputs.put(None)
        self.reader.cancel()


class ExecutorRuntime(AbstractRuntime):  # type: ignore[misc, unused-ignore]  # Any where swerex is not installed
    def __init__(self, *, target: str | None = None, token: str | None = None, backend: str = "",
                 task_prefix: str | None = None, client: AsyncClient | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = client or AsyncClient(target, token=token, deadline=60)
        self.backend = backend
        self.task_prefix = task_prefix or f"swerex-{uuid.uuid4().hex[:10]}"
        self.sessions: set[str] = set()
        self._interactive: dict[str, _Interactive] = {}

    def task(self, session: str = "default") -> str:
        return self.task_prefix if session == "default" else f"{self.task_prefix}-{session}"

    async def task_root(self, session: str = "default") -> str:
        """The session's directory in the backend (made if new)."""
        task = self.task(session)
        for _ in range(2):
            roots = [t.root for t in (await self.client.list_tasks()).tasks if t.task_id == task]
            if roots:
                return roots[0]
            await self.client.run(task, "true", backend=self.backend, timeout=60)
        raise RuntimeError(f"task {task} did not appear")

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        try:
            await asyncio.wait_for(self.client.list_backends(), timeout)
        except (ExecutorError, asyncio.TimeoutError) as exc:
            return IsAliveResponse(is_alive=False, message=str(exc) or type(exc).__name__)
        return IsAliveResponse(is_alive=True)

    async def create_session(self, request: CreateSessionRequest) -> CreateBashSessionResponse:
        if request.session in self.sessions:
            raise SessionExistsError(f"session {request.session} already exists")
        self.sessions.add(request.session)
        output = ""
        for path in request.startup_source:
            r = await self.client.run(self.task(request.session), f"source {shlex.quote(path)}", backend=self.backend,
                                      timeout=max(request.startup_timeout, 1.0), merge_stderr=True)
            output += r.stdout_text
        if not request.startup_source:
            await self.client.run(self.task(request.session), "true", backend=self.backend, timeout=60)
        return CreateBashSessionResponse(output=output)

    async def run_in_session(self, action: Action) -> BashObservation:
        if action.session not in self.sessions:
            raise SessionDoesNotExistError(f"session {action.session!r} does not exist")
        if isinstance(action, BashInterruptAction):
            interactive = self._interactive.pop(action.session, None)
            if interactive:
                await interactive.close()
            return BashObservation(output="", exit_code=0)
        if action.is_interactive_command or action.is_interactive_quit:
            return await self._run_interactive(action)
        if not action.command.strip():  # bash does nothing with an empty line, successfully
            return BashObservation(output="", exit_code=None if action.check == "ignore" else 0)
        _check_syntax(action.command)
        try:
            r = await self.client.run(self.task(action.session), action.command, backend=self.backend,
                                      timeout=action.timeout or 0.0, merge_stderr=True)
        except ExecutorError as exc:
            raise NonZeroExitCodeError(f"{action.error_msg + ': ' if action.error_msg else ''}{exc.message}") from None
        output = r.stdout_text
        if r.status is ExitStatus.TIMED_OUT:
            raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command "
                                      f"{action.command!r}")
        failure = "" if r.status is ExitStatus.COMPLETED else (r.message or str(r.status))
        code = r.exit_code if not failure else (126 if r.status is ExitStatus.DENIED else -1)
        if action.check == "raise" and code != 0:
            msg = f"Command {action.command!r} failed with exit code {code}. Here is the output:\n{output!r}"
            if failure:
                msg += f"\n{failure}"
            raise NonZeroExitCodeError(f"{action.error_msg}: {msg}" if action.error_msg else msg)
        return BashObservation(output=output, exit_code=None if action.check == "ignore" else code,
                               failure_reason=failure)

    async def _run_interactive(self, action: BashAction) -> BashObservation:
        current = self._interactive.get(action.session)
        expect = list(action.expect)
        try:
            if current is None:  # the program starts: SWE-ReX sends it as a command line
                current = self._interactive[action.session] = _Interactive(
                    self.client, self.task(action.session), action.command, self.backend)
            else:
                current.inputs.put_nowait(pb.PtyInput(data=(action.command.rstrip("\n") + "\n").encode()))
            if action.is_interactive_quit:  # it ends: back to the task's shell
                before, _ = await current.expect([], action.timeout)
                self._interactive.pop(action.session, None)
                await current.close()
                return BashObservation(output=before.strip(), exit_code=0)
            before, hit = await current.expect(expect, action.timeout)
        except asyncio.TimeoutError:
            raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command "
                                      f"{action.command!r}") from None
        return BashObservation(output=before.replace("\r\n", "\n").lstrip().removeprefix(action.command).strip(),
                               exit_code=0, expect_string=hit)

    async def close_session(self, request: CloseSessionRequest) -> CloseBashSessionResponse:
        if request.session not in self.sessions:
            raise SessionDoesNotExistError(f"session {request.session!r} does not exist")
        self.sessions.discard(request.session)
        interactive = self._interactive.pop(request.session, None)
        if interactive:
            await interactive.close()
        if request.session != "default":  # the default task also holds execute's and the files' work
            await self.client.close_task(self.task(request.session))
        return CloseBashSessionResponse()

    async def execute(self, command: Command) -> CommandResponse:
        line = command.command if isinstance(command.command, str) else shlex.join(command.command)
        if not command.shell and isinstance(command.command, str):
            line = shlex.quote(command.command)
        if not line.strip():
            return CommandResponse(stdout="", stderr="", exit_code=0)
        line = f"( {line}\n)"  # a subshell: execute leaves no state in the session's shell
        r = await self.client.run(self.task(), line, backend=self.backend, timeout=command.timeout or 0.0,
                                  env=command.env, workdir=command.cwd or "", merge_stderr=command.merge_output_streams)
        if r.status is ExitStatus.TIMED_OUT:
            raise CommandTimeoutError(f"Timeout ({command.timeout}s) exceeded while running command")
        code = r.exit_code if r.status is ExitStatus.COMPLETED else -1
        result = CommandResponse(stdout=r.stdout.decode(errors="backslashreplace"),
                                 stderr=r.stderr.decode(errors="backslashreplace") or
                                 ("" if r.status is ExitStatus.COMPLETED else r.message), exit_code=code)
        if command.check and code != 0:
            msg = (f"Command {command.command!r} failed with exit code {code}. Stdout:\n{result.stdout!r}\n"
                   f"Stderr:\n{result.stderr!r}")
            raise NonZeroExitCodeError(f"{command.error_msg}: {msg}" if command.error_msg else msg)
        return result

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        try:
            data = await self.client.read_file(self.task(), request.path, backend=self.backend)
        except NotFound as exc:
            raise FileNotFoundError(exc.message) from None
        return ReadFileResponse(content=data.decode(request.encoding or "utf-8", errors=request.errors or "strict"))

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        await self.client.write_file(self.task(), request.path, request.content, make_parents=True,
                                     backend=self.backend)
        return WriteFileResponse()

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """A file or a directory of this machine into the sandbox (a directory as one archive)."""
        if not os.path.isdir(request.source_path):
            with open(request.source_path, "rb") as f:
                await self.client.write_file(self.task(), request.target_path, f.read(), make_parents=True,
                                             mode=os.stat(request.source_path).st_mode & 0o777, backend=self.backend)
            return UploadResponse()
        parent, name = os.path.split(request.target_path.rstrip("/"))
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(request.source_path, arcname=name)
        await self.client.put_archive(self.task(), parent or ".", buf.getvalue(), backend=self.backend)
        return UploadResponse()

    async def close(self) -> CloseResponse:
        for session in list(self._interactive):
            await self._interactive.pop(session).close()
        for session in list(self.sessions - {"default"}):
            try:
                await self.client.close_task(self.task(session))
            except ExecutorError:
                pass
        self.sessions.clear()
        await self.client.close()
        return CloseResponse()


def _check_syntax(command: str) -> None:
    """SWE-ReX refuses a command bash cannot parse before running it (here with this machine's bash)."""
    bash = shutil.which("bash")
    if not bash:
        return
    r = subprocess.run([bash, "-n"], input=command.encode(), capture_output=True)
    if r.returncode != 0:
        stdout, stderr = r.stdout.decode(errors="backslashreplace"), r.stderr.decode(errors="backslashreplace")
        raise BashIncorrectSyntaxError(
            f"Error (exit code {r.returncode}) while checking bash command \n{command!r}\n---- Stderr ----\n"
            f"{stderr}\n---- Stdout ----\n{stdout}", extra_info={"bash_stdout": stdout, "bash_stderr": stderr})


__all__ = ["ExecutorRuntime"]

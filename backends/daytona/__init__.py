"""The daytona backend: each task in a Daytona sandbox, driven through the ``daytona`` SDK (async).

How a process runs (read ``docs/backends/daytona.md`` for the why):

* ``spawn`` opens one toolbox *session* per process and runs one ``runAsync`` command in it: a
  small POSIX-sh launcher that starts ``argv`` with ``setsid -w sh -c '... exec env -i ...'``
  (a new session leader with exactly ``env``, so ``$$`` is the session id ``signal_session``
  needs), in the foreground so its signals keep their defaults.
* Output streams over the command's log websocket while it runs. The toolbox labels each stream
  *line by line* (a partial line waits for its newline, a last one gets a newline added, some
  invalid UTF-8 is mangled), so the launcher re-frames every chunk of the process's output as a
  ``Z<base64 of gzip>`` line, reports the pid as ``S<pid>``, and we undo that here: the bytes
  come back exactly, as they are produced.
* Stdin goes through ``send_session_command_input``, which carries text and appends a newline,
  so each write travels as ``B<base64>`` lines and the end of input as ``E``: the launcher's
  reader turns those back into the exact bytes, at once, and a real EOF.
* Files move through the toolbox's file API (a tar uploaded/downloaded as one file), one-shot
  helpers (tar, the /proc walk that signals a session) through ``process.exec``.

Faults map to ``BackendError`` kinds; a sandbox that vanished is ``LOST`` and recreated on the
next use; idle sandboxes are stopped by Daytona itself (``auto_stop_interval``) and started again
on the next use. Never a fallback.

The package: ``options`` (DaytonaOptions), ``api`` (the SDK and its errors), ``launcher`` (what runs
inside the sandbox, and its decoder), ``process`` (a session or a PTY as a Process), ``backend``
(the sandbox and the backend).
"""

from __future__ import annotations

from .backend import DaytonaBackend, DaytonaSandbox
from .launcher import LogDecoder, encode_input, kill_sessions_command, launcher
from .options import STDERR_PREFIX, STDOUT_PREFIX
from .options import DaytonaOptions
from .process import DaytonaProcess, DaytonaPtyProcess

__all__ = ["DaytonaBackend", "DaytonaSandbox", "DaytonaOptions", "DaytonaProcess", "DaytonaPtyProcess", "LogDecoder",
           "encode_input", "kill_sessions_command", "launcher", "STDOUT_PREFIX", "STDERR_PREFIX"]

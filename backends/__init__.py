"""Backends: where commands really run. Installed as ``executor.backends``.

Each kind lives in its own module and is imported only when configured, so a
cloud SDK is never imported by a daemon that does not use it.
"""

from __future__ import annotations

import importlib

from .base import Backend, BackendError, Capabilities, ErrorKind, Health, Options, Process, PtySize, Sandbox

#: kind -> "module:Class", relative to this package.
KINDS: dict[str, str] = {
    "local": "local:LocalBackend",
    "docker": "docker:DockerBackend",
    "ssh": "ssh:SSHBackend",
    "singularity": "singularity:SingularityBackend",
    "modal": "modal:ModalBackend",
    "daytona": "daytona:DaytonaBackend",
    "vercel_sandbox": "vercel_sandbox:VercelSandboxBackend",
}


def backend_class(kind: str) -> type[Backend]:
    """The Backend class of a kind; KeyError for an unknown kind."""
    module, _, cls = KINDS[kind].partition(":")
    found: type[Backend] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return found


__all__ = ["KINDS", "backend_class", "Backend", "BackendError", "Capabilities", "ErrorKind", "Health",
           "Options", "Process", "PtySize", "Sandbox"]

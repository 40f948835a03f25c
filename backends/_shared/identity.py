"""The per-daemon instance id: names (or labels) what a backend makes outside the daemon, so a
restarted daemon finds its own sandboxes, containers and registries again, and two daemons
sharing an account never take (or clean up) each other's.

One file (``<backend state dir>/instance-id``) and one length (``ID_LENGTH`` hex digits) for a new
id. An id an older version wrote is kept as it is, whatever its length: docker's and ssh's
``instance-id`` (32 and 16 hex digits), modal's, vercel_sandbox's and daytona's ``daemon-id`` (8, 8
and 16): what they named stays reachable.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

from .files import atomic_write

FILE = "instance-id"
#: Files older versions kept it in, read when ``FILE`` is missing.
LEGACY_FILES = ("daemon-id",)
ID_LENGTH = 16
_VALID = re.compile(r"[0-9a-f]{8,64}")


def instance_id(state_dir: Path) -> str:
    """This backend's id, read from its state directory, or made and saved there (atomically)."""
    for name in (FILE, *LEGACY_FILES):
        try:
            value = (state_dir / name).read_text().strip()
        except (FileNotFoundError, NotADirectoryError):
            continue
        if _VALID.fullmatch(value):
            return value
    value = secrets.token_hex(ID_LENGTH // 2)
    atomic_write(state_dir / FILE, (value + "\n").encode(), mode=0o644)
    return value


__all__ = ["instance_id", "FILE", "LEGACY_FILES", "ID_LENGTH"]

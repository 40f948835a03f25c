"""Small state files on the daemon's own disk, written so a reader never sees half of one.

``atomic_write`` writes a new file beside the old one under a name no other writer uses, syncs it,
and renames it over the old; concurrent writers of the same file each land whole (the last rename
wins) instead of one renaming the other's temporary file away (ENOENT) or mixing their bytes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` in one step (parent made if missing); nothing is left behind on failure."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


__all__ = ["atomic_write"]

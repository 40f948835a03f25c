"""Where a command runs: the task's directories, so relative paths can be judged.

``GateContext`` is passed by the daemon to ``evaluate(..., context=...)``.  Without one the
gate judges paths as it always did (relative paths are relative to an unknown directory).
The active context of a scan is kept in a ``ContextVar`` so the path classifiers in
``paths.py`` can read it without threading it through every handler; the scan is
synchronous, so it never leaks into another command's analysis.
"""

from __future__ import annotations

import contextvars
import functools
import posixpath
from dataclasses import dataclass


@dataclass(frozen=True)
class GateContext:
    """The task's location in its backend.

    ``cwd``: the task's current directory; ``root``: the task's directory; ``home``: ``$HOME``
    of the task's shell (on several backends the task directory); ``protected``: extra
    absolute paths judged like system paths (the daemon's state directory, the parent of the
    task roots).  Empty strings mean unknown; relative or empty entries are ignored.
    ``shell_state``: what the task's bash prints for its state (``builtin printf 'builtin cd --
    %q\n' "$PWD"; builtin export -p; builtin declare -f; builtin alias -p``, ``declare -p``
    lines welcome); aliases, functions and variables defined by earlier commands are then
    judged where they are used (see ``state.py``).
    """

    cwd: str = ""
    root: str = ""
    home: str = ""
    protected: tuple[str, ...] = ()
    shell_state: str = ""

    def normalized(self) -> "GateContext":
        """The same context with clean absolute paths (cached: the core passes equal contexts for a
        task's every command)."""
        return _normalized(self)

    def _normalize(self) -> "GateContext":
        def clean(p: str) -> str:
            if not p or not p.startswith("/"):
                return ""
            p = posixpath.normpath(p)
            return "/" + p.lstrip("/") if p.startswith("//") else p

        prot = tuple(q for q in (clean(p) for p in self.protected) if q and q != "/")
        return GateContext(clean(self.cwd), clean(self.root), clean(self.home), prot, self.shell_state)


@functools.lru_cache(maxsize=1024)
def _normalized(ctx: GateContext) -> GateContext:
    return ctx._normalize()


CURRENT: contextvars.ContextVar[GateContext | None] = contextvars.ContextVar("gate_context", default=None)


def within(p: str, base: str) -> bool:
    """``p`` is ``base`` or below it (both absolute, normalised)."""
    return bool(base) and (p == base or base == "/" or p.startswith(base + "/"))

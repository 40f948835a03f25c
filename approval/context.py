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

#: The most of a script the core reads for the gate; a longer one is not judged but asked about.
MAX_SCRIPT_BYTES = 64 * 1024


@dataclass(frozen=True)
class ScriptFile:
    """A file the command runs as code (a script, a sourced file, a makefile…), as the core read it
    from the task's backend.  ``text`` is its content, or None when it could not be judged; then
    ``note`` says why: ``missing``, ``unreadable`` (not a regular file, no permission), ``too_big``
    (over ``MAX_SCRIPT_BYTES``), ``binary`` (a compiled program: judged by name, as always) or
    ``not_read`` (scripts nested too deeply for the core to follow)."""

    path: str
    text: str | None
    note: str = ""


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
    ``files``: the scripts the command runs, read from the task's backend by the core (it asks
    ``needed_files`` which ones); each is judged as if it were inline.  A script the command runs
    that is not listed is judged as before (by name only).
    """

    cwd: str = ""
    root: str = ""
    home: str = ""
    protected: tuple[str, ...] = ()
    shell_state: str = ""
    files: tuple[ScriptFile, ...] = ()

    def file(self, path: str) -> ScriptFile | None:
        """The read file at absolute ``path``, if the core passed it."""
        for f in self.files:
            if f.path == path:
                return f
        return None

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
        return GateContext(clean(self.cwd), clean(self.root), clean(self.home), prot, self.shell_state, self.files)


@functools.lru_cache(maxsize=1024)
def _normalized(ctx: GateContext) -> GateContext:
    return ctx._normalize()


CURRENT: contextvars.ContextVar[GateContext | None] = contextvars.ContextVar("gate_context", default=None)


def within(p: str, base: str) -> bool:
    """``p`` is ``base`` or below it (both absolute, normalised)."""
    return bool(base) and (p == base or base == "/" or p.startswith(base + "/"))

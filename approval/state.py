"""The task shell's state (aliases, functions, variables, directory) as the gate reads it.

The task's bash is persistent: ``alias ll='rm -rf /'`` in one Exec changes what ``ll`` does in
the next.  The core captures the shell's own description of its state after commands that may
change it (:func:`changes_shell_state`)::

    builtin printf 'builtin cd -- %q\\n' "$PWD"; builtin export -p; builtin declare -f; builtin alias -p

and passes the text as ``GateContext.shell_state``.  :func:`read_state` reads that text (bash
wrote it, so it is regular bash) once per distinct text (cached) with the same tree-sitter parser
as commands.  ``declare -p`` lines (plain and array variables) are read too when present.
Anything that cannot be read is left out; a function or alias whose *name* is seen but whose
definition cannot be read is recorded in ``unreadable`` so a call of it asks (fail closed).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from tree_sitter import Node

from .model import DEFAULT_ENV, UNKNOWN
from .parser import _PARSER, _Walker

MAX_STATE = 1024 * 1024  # characters of state read; beyond that, nothing is trusted


@dataclass(frozen=True)
class ShellState:
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)  # variables (arrays joined by spaces)
    arrays: dict[str, list[str]] = field(default_factory=dict)
    functions: dict[str, str] = field(default_factory=dict)  # name -> body text (``{ ...; }``)
    aliases: dict[str, str] = field(default_factory=dict)  # name -> replacement text
    unreadable: frozenset[str] = frozenset()  # names defined but not readable: calls ask

    def defines(self, name: str) -> bool:
        return name in self.functions or name in self.aliases or name in self.unreadable


EMPTY = ShellState()

# variables the gate keeps its own notion of (``$HOME`` -> ``~`` so home paths are recognised,
# ``$PWD`` from the tracked directory) or that never matter
_KEEP_OWN = frozenset({"HOME", "PWD", "SHLVL", "_", "PATH"})
_FUNC_HEAD = re.compile(r"^(\S+) \(\) ?\n\{ ?$", re.M)
_SUBSCRIPTED = re.compile(r"^\[[^\]]*\]=(.*)$", re.S)
_ALIAS_HEAD = re.compile(r"^alias (?:-- )?([^=\s]+)=", re.M)


def read_state(text: str) -> ShellState:
    """The aliases, functions, variables and directory described by ``text`` (cached)."""
    if not text or not text.strip():
        return EMPTY
    return _read_cached(text)


@functools.lru_cache(maxsize=256)
def _read_cached(text: str) -> ShellState:
    if len(text) > MAX_STATE:
        # too much to read: every name it seems to define asks when called
        names = set(_FUNC_HEAD.findall(text)) | set(_ALIAS_HEAD.findall(text))
        return ShellState(unreadable=frozenset(names))
    try:
        return _read(text)
    except Exception:  # noqa: BLE001 - unreadable state: names seen ask, nothing else is trusted
        names = set(_FUNC_HEAD.findall(text)) | set(_ALIAS_HEAD.findall(text))
        return ShellState(unreadable=frozenset(names))


def _read(text: str) -> ShellState:
    src = text.encode("utf-8", "replace")
    root = _PARSER.parse(src).root_node
    w = _Walker(src, None, None)
    w.env = {}
    cwd = ""
    functions: dict[str, str] = {}
    aliases: dict[str, str] = {}

    def walk(node: Node, depth: int) -> None:
        nonlocal cwd
        for c in node.children:
            t = c.type
            if t == "function_definition":
                name = ""
                body = ""
                for k in c.children:
                    if k.type == "word" and not name:
                        name = w.text(k)
                    elif k.is_named and k.type != "word":
                        body = w.text(k)
                if name and body and not c.has_error:
                    functions[name] = body
            elif t == "declaration_command":
                if not c.has_error:
                    w.declaration(c, 0)
            elif t in ("command", "redirected_statement"):
                cmd = c if t == "command" else next((k for k in c.children if k.type == "command"), None)
                if cmd is None or cmd.has_error:
                    continue
                words: list[str] = []
                for k in cmd.children:
                    if k.type == "command_name":
                        words.extend(f for f, _ in w.word(k.children[0] if k.child_count else k, 0))
                    elif k.is_named and k.type not in ("comment", "file_redirect"):
                        words.extend(f for f, _ in w.word(k, 0))
                if words[:1] == ["alias"]:
                    for a in words[1:]:
                        name, eq, value = a.partition("=")
                        if eq and name and name != "--" and UNKNOWN not in value:
                            aliases[name] = value
                elif words[:3] == ["builtin", "cd", "--"] and len(words) == 4 and UNKNOWN not in words[3]:
                    cwd = words[3] if words[3].startswith("/") else ""
            elif t in ("program", "ERROR", "list") and depth < 4:
                walk(c, depth + 1)

    walk(root, 0)
    seen = set(_FUNC_HEAD.findall(text)) | set(_ALIAS_HEAD.findall(text))
    unreadable = frozenset(n for n in seen if n not in functions and n not in aliases)
    env = {k: v for k, v in w.env.items() if k not in _KEEP_OWN}
    arrays: dict[str, list[str]] = {}
    for name, items in w.arrays.items():  # ``declare -a a=([0]="/" [1]="/etc")``
        arrays[name] = [m.group(1) if (m := _SUBSCRIPTED.match(x)) else x for x in items]
        env[name] = " ".join(arrays[name])
    home = w.env.get("HOME")
    if home is not None:
        env["__STATE_HOME"] = home
    return ShellState(cwd, env, arrays, functions, aliases, unreadable)


def state_env(state: ShellState, context_home: str = "") -> dict[str, str]:
    """The variables to seed a scan with: the state's, ``$HOME`` only when it is not the task's."""
    env = dict(state.env)
    home = env.pop("__STATE_HOME", None)
    if home is not None and home.rstrip("/") != (context_home or "").rstrip("/") and home != DEFAULT_ENV["HOME"]:
        env["HOME"] = home if home else "/"
    return env


# ---------------------------------------------------------------------------------------------
# which commands may change the state


_CHANGERS = frozenset(
    {
        "alias", "unalias", "declare", "typeset", "local", "readonly", "export", "unset",
        "cd", "pushd", "popd", "source", ".", "eval", "set", "shopt", "enable", "read",
        "mapfile", "readarray", "printf", "getopts", "let", "trap", "builtin", "command",
        "exec", "hash", "shift", "umask", "dirs", "complete", "bind", "fc", "history",
    }
)  # fmt: skip
_WORD = re.compile(r"[A-Za-z0-9_./:@%+,~^-]+")
# anything that may define, assign or run code in the shell itself: (), =, {, $(( )), [[, arrays...
_SUSPECT = re.compile(r"[=(){}`\\\[\]$]|\bfunction\b|\n|;|&&|\|\||&|\|")


def changes_shell_state(command: str) -> bool:
    """Whether ``command`` may define or change what the gate needs to judge later commands.

    True for function and alias definitions, assignments (``x=1``, ``declare``, ``export``,
    ``readonly``, ``local``, ``unset``...), ``cd``/``pushd``/``popd``, ``source``/``.``,
    ``eval``, ``set``/``shopt``, ``read``/``mapfile``, ``printf -v``, ``exec``...; False only
    for commands whose every word is plain (``ls -la``, ``git status``, ``make -j4``,
    ``pytest -q tests/x.py``) and whose program cannot change the shell.  When unsure: True.
    """
    text = command.strip()
    if not text:
        return False
    if _SUSPECT.search(text):
        return _changes_parsed(text)
    words = text.split()
    return words[0] in _CHANGERS or any(not _WORD.fullmatch(w) for w in words)


@functools.lru_cache(maxsize=2048)  # agents repeat commands: a repeat costs a lookup, not a parse
def _changes_parsed(text: str) -> bool:
    """Commands with structure (lists, pipes, quotes, substitutions): look at each simple command."""
    from .commands import classify  # noqa: F401  (keeps import order like detect.py)
    from .model import TooComplex
    from .parser import parse

    if "(" in text and re.search(r"(?:^|[\s;&|{(])(?:function\s+)?[^\s;&|()=]+\s*\(\s*\)", text):
        return True  # a function definition
    if "((" in text or re.search(r"\$\{[^}]*=", text):
        return True  # arithmetic (``$((i++))``, ``((n=1))``) and ``${x:=v}`` assign
    if re.search(r"(?:^|[\s;&|({])(?:function\s)", text):
        return True
    try:
        sc = parse(text)
    except (TooComplex, RecursionError):
        return True
    if sc.has_error or sc.functions:
        return True
    # an assignment anywhere (``x=1``, ``a[0]=/``, ``x+=y``) is a statement the walker does not
    # turn into a Cmd: look for one in the text instead
    if re.search(r"(?:^|[\s;&|({`])[A-Za-z_]\w*(?:\[[^\]]*\])?\+?=", text):
        return True
    for c in sc.cmds:
        if not c.argv:
            continue
        if c.argv[0] in _CHANGERS or UNKNOWN in c.argv[0]:
            return True
    return False

"""What an awk program hands to a shell.

awk runs shell commands four ways: ``system(EXPR)``, ``EXPR | getline``, ``print … | EXPR`` and
``printf … | EXPR`` (the printed text is the input of the command EXPR, so when EXPR is a shell the
printed text is its program).  :func:`shell_code` reads a program with a small tokenizer and
returns, for each of these, the shell code it would run, with the value of every expression the
gate can know: string literals and their concatenation, variables given with ``-v`` or
``name=value`` operands, variables the program assigns only literal text.  A part that cannot be
known (a field ``$1``, ``ENVIRON[…]``, a function's result, a variable read from input) stands as
:data:`HOLE`, which the caller turns into an unknown word, or into a question when it is the
program itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HOLE = "\x00"

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+|\\\n)
  | (?P<nl>\n)
  | (?P<comment>\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*")
  | (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\|\||\|&|&&|==|!=|<=|>=|>>|\+\+|--|[-+*/%^]=|[{}()\[\];,|<>=!?:~$+\-*/%^.&])
    """,
    re.X,
)

_ESC = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "/": "/", "a": "\a", "b": "\b", "r": "\r", "f": "\f", "v": "\v"}

# tokens after which a ``/`` starts a regular expression rather than a division
_REGEX_AFTER = {
    "",
    "(",
    ",",
    "{",
    "}",
    ";",
    "\n",
    "!",
    "~",
    "&&",
    "||",
    "=",
    "==",
    "!=",
    "?",
    ":",
    "print",
    "printf",
    "return",
}


@dataclass(frozen=True)
class Tok:
    kind: str
    text: str


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            if n in "01234567":
                m = re.match(r"[0-7]{1,3}", s[i + 1 :])
                assert m is not None
                out.append(chr(int(m.group(0), 8)))
                i += 1 + len(m.group(0))
                continue
            out.append(_ESC.get(n, "\\" + n))
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def tokens(program: str) -> list[Tok] | None:
    """The program's tokens (None when it cannot be read)."""
    out: list[Tok] = []
    i = 0
    prev = ""
    while i < len(program):
        if program[i] == "/" and prev in _REGEX_AFTER:
            m = re.compile(r"/(?:[^/\\\n\[]|\\.|\[(?:[^\]\\]|\\.)*\])*/").match(program, i)
            if m:
                out.append(Tok("regex", m.group(0)))
                prev = "regex"
                i = m.end()
                continue
        m = _TOKEN.match(program, i)
        if m is None:
            return None
        kind = m.lastgroup or ""
        i = m.end()
        if kind in ("ws", "comment"):
            continue
        text = m.group(0)
        if kind == "str":
            out.append(Tok("str", _unescape(text[1:-1])))
        else:
            out.append(Tok(kind, text))
        prev = text if kind in ("op", "nl", "name") else kind
    return out


_STOP = {
    ";",
    "\n",
    "}",
    "{",
    ",",
    ")",
    "|",
    "|&",
    ">",
    ">>",
    "<",
    "&&",
    "||",
    "?",
    ":",
    "==",
    "!=",
    "<=",
    ">=",
    "~",
    "=",
}


def _expr(toks: list[Tok], i: int, env: dict[str, str]) -> tuple[str, int]:
    """Value of a concatenation starting at ``i`` (HOLE for what cannot be known) and where it ends."""
    parts: list[str] = []
    while i < len(toks):
        t = toks[i]
        if t.kind == "op" and t.text in _STOP or t.kind == "nl":
            break
        if t.kind == "str":
            parts.append(t.text)
            i += 1
        elif t.kind == "num":
            parts.append(t.text)
            i += 1
        elif t.kind == "op" and t.text == "(":
            val, j = _expr(toks, i + 1, env)
            depth_ok = j < len(toks) and toks[j].text == ")"
            parts.append(val if depth_ok else HOLE)
            i = _skip_group(toks, i) if not depth_ok else j + 1
        elif t.kind == "name" and i + 1 < len(toks) and toks[i + 1].text in ("(", "["):
            parts.append(HOLE)  # a function call, ENVIRON["X"], an array element
            i = _skip_group(toks, i + 1)
        elif t.kind == "name" and t.text not in ("getline", "in"):
            parts.append(env.get(t.text, HOLE))
            i += 1
        elif t.kind == "op" and t.text == "$":
            parts.append(HOLE)  # a field of the input
            i += 1
            if i < len(toks) and toks[i].kind in ("num", "name"):
                i += 1
            elif i < len(toks) and toks[i].text == "(":
                i = _skip_group(toks, i)
        else:
            parts.append(HOLE)  # arithmetic, regexes…: not literal text
            i += 1
    return "".join(parts) if parts else HOLE, i


def _skip_group(toks: list[Tok], i: int) -> int:
    """Index after the bracket group opening at ``i``."""
    depth = 0
    while i < len(toks):
        if toks[i].text in ("(", "["):
            depth += 1
        elif toks[i].text in (")", "]"):
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return i


def _assignments(toks: list[Tok], env: dict[str, str]) -> dict[str, str]:
    """Variables the program sets: literal values are kept, anything else makes the variable unknown."""
    out = dict(env)
    seen: dict[str, set[str]] = {}
    for i, t in enumerate(toks):
        if t.kind != "name" or i + 1 >= len(toks):
            continue
        nxt = toks[i + 1].text
        if nxt == "=" and (i == 0 or toks[i - 1].text != "$"):
            val, _ = _expr(toks, i + 2, out)
            seen.setdefault(t.text, set()).add(val)
        elif nxt in ("+=", "-=", "*=", "/=", "%=", "^=", "++", "--") or (
            i > 0 and toks[i - 1].text in ("getline", "++", "--")
        ):
            seen.setdefault(t.text, set()).add(HOLE)
        elif t.text in ("split", "sub", "gsub", "match") and nxt == "(":
            pass
    for name, vals in seen.items():
        out[name] = vals.pop() if len(vals) == 1 else HOLE
    return out


@dataclass(frozen=True)
class Handoff:
    code: str  # shell code (HOLE where unknown)
    how: str  # "system", "getline", "pipe"


def _stmt_end(toks: list[Tok], i: int) -> int:
    depth = 0
    while i < len(toks):
        t = toks[i].text
        if t in ("(", "["):
            depth += 1
        elif t in (")", "]"):
            if depth == 0:
                return i
            depth -= 1
        elif depth == 0 and (t in (";", "}") or toks[i].kind == "nl"):
            return i
        i += 1
    return i


def _back_start(toks: list[Tok], i: int) -> int:
    """Start of the expression that ends just before ``i`` (for ``EXPR | getline``)."""
    depth = 0
    j = i - 1
    while j >= 0:
        t = toks[j].text
        if t in (")", "]"):
            depth += 1
        elif t in ("(", "["):
            if depth == 0:
                return j + 1
            depth -= 1
        elif depth == 0 and (t in (";", "{", "}", ",", "=", "&&", "||", "!") or toks[j].kind == "nl"):
            return j + 1
        j -= 1
    return 0


SHELL_NAMES = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox sh", "/bin/sh", "/bin/bash"})


def _is_shell(code: str) -> bool:
    words = code.split()
    if not words:
        return False
    name = words[0].rsplit("/", 1)[-1]
    return (
        name in {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "yash"}
        and not any(w.startswith("-") and "c" in w[1:] for w in words[1:] if not w.startswith("--"))
        and len([w for w in words[1:] if not w.startswith("-")]) == 0
    )


def shell_code(program: str, variables: dict[str, str]) -> list[Handoff] | None:
    """The shell code ``program`` runs (None if the program cannot be read)."""
    toks = tokens(program)
    if toks is None:
        return None
    env = _assignments(toks, variables)
    out: list[Handoff] = []
    for i, t in enumerate(toks):
        if t.kind != "name":
            continue
        if t.text == "system" and i + 1 < len(toks) and toks[i + 1].text == "(":
            val, _ = _expr(toks, i + 2, env)
            out.append(Handoff(val, "system"))
        elif t.text == "getline" and i > 0 and toks[i - 1].text in ("|", "|&"):
            start = _back_start(toks, i - 1)
            val, _ = _expr(toks, start, env)
            out.append(Handoff(val, "getline"))
        elif t.text in ("print", "printf") and (i == 0 or toks[i - 1].text != "."):
            end = _stmt_end(toks, i + 1)
            bar = next(
                (k for k in range(i + 1, end) if toks[k].text in ("|", "|&") and _depth(toks, i + 1, k) == 0), None
            )
            if bar is None:
                continue
            command, _ = _expr(toks, bar + 1, env)
            data_parts = []
            k = i + 1
            if k < bar and toks[k].text == "(" and _skip_group(toks, k) == bar:
                k += 1
            while k < bar:
                val, k = _expr(toks, k, env)
                data_parts.append(val)
                if k < bar and toks[k].text == ",":
                    k += 1
                elif k < bar:
                    data_parts.append(HOLE)
                    break
            data = " ".join(data_parts) if data_parts else HOLE
            if t.text == "printf" and data_parts:
                data = data_parts[0]  # the format: the text printed, less the conversions
            out.append(Handoff(command, "pipe"))
            if _is_shell(command):
                out.append(Handoff(data, "stdin"))
    return out


def _depth(toks: list[Tok], start: int, end: int) -> int:
    depth = 0
    for k in range(start, end):
        if toks[k].text in ("(", "["):
            depth += 1
        elif toks[k].text in (")", "]"):
            depth -= 1
    return depth


def awk_args(args: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """(program texts, variables, program files) of an awk command line."""
    programs: list[str] = []
    files: list[str] = []
    variables: dict[str, str] = {}
    i = 0
    operands: list[str] = []
    while i < len(args):
        a = args[i]
        if a == "--":
            operands.extend(args[i + 1 :])
            break
        if a in ("-v", "--assign") and i + 1 < len(args):
            if "=" in args[i + 1]:
                k, v = args[i + 1].split("=", 1)
                variables[k] = _unescape(v)
            i += 2
            continue
        if a.startswith("-v") and "=" in a:
            k, v = a[2:].split("=", 1)
            variables[k] = _unescape(v)
        elif a in ("-f", "--file", "-i", "--include") and i + 1 < len(args):
            files.append(args[i + 1])
            i += 2
            continue
        elif a.startswith("--file=") or a.startswith("--include="):
            files.append(a.split("=", 1)[1])
        elif a in ("-e", "--source") and i + 1 < len(args):
            programs.append(args[i + 1])
            i += 2
            continue
        elif a.startswith("--source="):
            programs.append(a.split("=", 1)[1])
        elif a in ("-F", "-W", "-l", "--load", "--field-separator") and i + 1 < len(args):
            i += 2
            continue
        elif a.startswith("-") and len(a) > 1:
            pass
        else:
            operands.append(a)
        i += 1
    if not programs and not files and operands:
        programs.append(operands.pop(0))
    for op in operands:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", op, re.S)
        if m:
            variables[m.group(1)] = _unescape(m.group(2))
    return programs, variables, files

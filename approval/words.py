"""Word-level shell semantics that need no syntax tree.

Escapes (``$'...'``, ``echo -e``, double quotes), brace expansion, ``$((...))`` arithmetic,
``${v%pat}`` trimming, ``${v/pat/rep}`` replacement, ``${v^^}``-style case changes, what a plain
``echo``/``printf`` prints and what ``pwd``/``dirname``/``basename``/``realpath``/``ls -d`` print.
The tree walk (parser.py) and the error-tolerant lexer (lexer.py) both resolve words with these.
"""

from __future__ import annotations

import ast
import base64
import posixpath
import re

from .globs import glob_regex
from .model import MAX_FIELDS, UNKNOWN

_ANSI_C = re.compile(r"\\(x[0-9a-fA-F]{1,2}|u[0-9a-fA-F]{1,4}|U[0-9a-fA-F]{1,8}|[0-7]{1,3}|c.|.)", re.S)
_SIMPLE_ESC = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "e": "\x1b", "E": "\x1b"}


def decode_escapes(s: str) -> str:
    """Decode backslash escapes as in ``$'...'``, ``echo -e`` and printf formats."""
    if "\\" not in s:
        return s

    def rep(m: re.Match[str]) -> str:
        e = m.group(1)
        c = e[0]
        try:
            if c == "x" or c == "u" or c == "U":
                return chr(int(e[1:], 16))
            if c.isdigit():
                return chr(int(e, 8))
        except (ValueError, OverflowError):
            return ""
        if c == "c":
            return chr(ord(e[1]) & 0x1F) if len(e) > 1 else ""
        return _SIMPLE_ESC.get(c, e if c in "\\'\"?" else "\\" + e)

    return _ANSI_C.sub(rep, s)


_UNESCAPE = re.compile(r"\\(\n|.)", re.S)


def unescape_unquoted(s: str) -> str:
    if "\\" not in s:
        return s
    return _UNESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), s)


_DQ_ESC = re.compile(r'\\([\\"$`\n])')


def unescape_dq(s: str) -> str:
    if "\\" not in s:
        return s
    return _DQ_ESC.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), s)


# -- brace expansion -------------------------------------------------------------------------


def brace_expand(word: str, limit: int = MAX_FIELDS) -> list[str]:
    """Bash brace expansion (comma lists and simple ranges), capped at ``limit`` results."""
    depth = 0
    start = -1
    for i, ch in enumerate(word):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                inner = word[start + 1 : i]
                alts = _brace_alternatives(inner)
                if alts is None:
                    continue
                pre, post = word[:start], word[i + 1 :]
                out: list[str] = []
                for alt in alts:
                    for tail in brace_expand(alt + post, limit):
                        out.append(pre + tail)
                        if len(out) >= limit:
                            return out
                return out
    return [word]


_RANGE = re.compile(r"^(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.(-?\d+))?$")


def _brace_alternatives(inner: str) -> list[str] | None:
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in inner:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    if len(parts) > 1:
        return parts
    m = _RANGE.match(inner)
    if not m:
        return None
    a, b = m.group(1), m.group(2)
    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
        lo, hi = int(a), int(b)
        step = abs(int(m.group(3) or 1)) or 1
        rng = range(lo, hi + 1, step) if lo <= hi else range(lo, hi - 1, -step)
        return [str(x) for x in list(rng)[:MAX_FIELDS]]
    if len(a) == 1 and len(b) == 1 and not a.isdigit() and not b.isdigit():
        lo, hi = ord(a), ord(b)
        rng = range(lo, hi + 1) if lo <= hi else range(lo, hi - 1, -1)
        return [chr(x) for x in list(rng)[:MAX_FIELDS]]
    return None


_ARITH_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+)|(\d+)#([0-9a-zA-Z@_]+)|(\d+)|([A-Za-z_]\w*)|(\*\*|[-+*/%()]))")


def arithmetic(text: str, env: dict[str, str]) -> int | None:
    """The value of ``$((expr))`` / ``$[expr]`` with integer literals (``-1``, ``0x1``, ``010``,
    ``2#1``), known variables and ``+ - * / % **`` and parentheses; None when unknown."""
    if text.startswith("$(("):
        expr = text[3:-2]
    elif text.startswith("$["):
        expr = text[2:-1]
    else:
        return None
    expr = re.sub(r"\$\{?([A-Za-z_]\w*)\}?", r"\1", expr)
    out: list[str] = []
    pos = 0
    expr = expr.rstrip()
    while pos < len(expr):
        m = _ARITH_TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            return None
        pos = m.end()
        hexa, base, digits, dec, var, op = m.groups()
        try:
            if hexa:
                out.append(str(int(hexa, 16)))
            elif base:
                out.append(str(int(digits, int(base))))
            elif dec:
                out.append(str(int(dec, 8) if len(dec) > 1 and dec.startswith("0") else int(dec)))
            elif var:
                v = env.get(var)
                if v is None or not re.fullmatch(r"-?\d+", v.strip()):
                    return None
                out.append("(" + str(int(v)) + ")")
            else:
                out.append("//" if op == "/" else op)
        except ValueError:
            return None
    if len(out) > 64:
        return None
    try:
        tree = ast.parse(" ".join(out), mode="eval")
    except SyntaxError:
        return None
    return _arith_eval(tree.body)


def _arith_eval(n: object) -> int | None:
    if isinstance(n, ast.Constant) and isinstance(n.value, int):
        return n.value
    if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
        v = _arith_eval(n.operand)
        return None if v is None else (-v if isinstance(n.op, ast.USub) else v)
    if isinstance(n, ast.BinOp):
        a, b = _arith_eval(n.left), _arith_eval(n.right)
        if a is None or b is None:
            return None
        if isinstance(n.op, ast.Add):
            return a + b
        if isinstance(n.op, ast.Sub):
            return a - b
        if isinstance(n.op, ast.Mult):
            return a * b if abs(a) < 2**63 and abs(b) < 2**63 else None
        if isinstance(n.op, (ast.FloorDiv, ast.Mod)) and b != 0:
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if isinstance(n.op, ast.FloorDiv) else a - q * b
        if isinstance(n.op, ast.Pow) and 0 <= b < 64 and abs(a) < 2**16:
            return int(a**b)  # b >= 0: an int (typeshed cannot know)
    return None


def trim_pattern(value: str, pattern: str, op: str) -> str:
    """``${v%pat}``, ``${v%%pat}``, ``${v#pat}``, ``${v##pat}``."""
    rx = glob_regex(pattern)
    if rx is None:
        return UNKNOWN
    n = len(value)
    if op.startswith("%"):
        order = range(n, -1, -1) if op == "%" else range(0, n + 1)
        for i in order:
            if rx.fullmatch(value[i:]):
                return value[:i]
    else:
        order = range(0, n + 1) if op == "#" else range(n, -1, -1)
        for i in order:
            if rx.fullmatch(value[:i]):
                return value[i:]
    return value


def echo_output(argv: list[str]) -> str | None:
    """What a plain ``echo``/``printf`` with literal arguments prints, else None."""
    if not argv:
        return None
    name = argv[0].rsplit("/", 1)[-1]
    args = argv[1:]
    if name == "echo":
        escapes = False
        newline = True
        while args and re.fullmatch(r"-[neE]+", args[0]):
            escapes = escapes or "e" in args[0]
            newline = newline and "n" not in args[0]
            args = args[1:]
        out = " ".join(args)
        return (decode_escapes(out) if escapes else out) + ("\n" if newline else "")
    if name == "printf":
        if args and args[0] == "--":
            args = args[1:]
        if not args:
            return None
        if args[0] == "-v":
            return None
        fmt, rest = args[0], args[1:]
        return printf_output(fmt, rest)
    return None


def printf_output(fmt: str, args: list[str]) -> str:
    """What ``printf FMT ARGS`` prints; the format is reused while arguments are left
    (``printf '%s\\n' a b`` prints two lines)."""
    out: list[str] = []
    pending = list(args)
    used = [0]

    def conv(m: re.Match[str]) -> str:
        spec = m.group(1)
        if spec == "%":
            return "%"
        used[0] += 1
        v = pending.pop(0) if pending else ""
        return decode_escapes(v) if spec == "b" else v

    rx = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?([sbdiouxXfeEgGc%])")
    text = decode_escapes(fmt)
    for _ in range(4096):
        used[0] = 0
        out.append(rx.sub(conv, text))
        if not pending or not used[0]:
            break
    return "".join(out)


def pipe_output(stages: list[list[str]]) -> str | None:
    """What ``echo TEXT | cut … | sed s/…/…/ | tr … | rev`` prints, when every stage is one the gate
    evaluates exactly (``echo``/``printf`` first; ``cut -c/-b/-d -f``, ``sed`` of ``s`` commands,
    ``tr`` of plain sets, ``rev``, ``head``/``tail`` of lines); None when any stage is not."""
    if not stages or len(stages) > 8:
        return None
    text = echo_output(stages[0])
    for argv in stages[1:]:
        if text is None or not argv:
            return None
        text = _filter(argv[0].rsplit("/", 1)[-1], argv[1:], text)
    return text


def _lines(text: str) -> list[str]:
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


def _ranges(spec: str) -> list[tuple[int, int]] | None:
    out: list[tuple[int, int]] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d*)-?(\d*)", part)
        if not m or not part:
            return None
        a, b = m.group(1), m.group(2)
        lo = int(a) if a else 1
        hi = int(b) if b else (lo if "-" not in part else 1 << 30)
        out.append((lo, hi))
    return out


def _filter(name: str, args: list[str], text: str) -> str | None:
    if UNKNOWN in text or any(UNKNOWN in a for a in args):
        return None
    lines = _lines(text)
    if name in ("base64", "base32") and args and all(a in ("-d", "--decode", "-i", "--ignore-garbage", "-di") for a in args):
        try:  # ``$(echo ZGVsZXRl | base64 -d)``: the decoded word
            packed = "".join(text.split())
            raw = base64.b64decode(packed) if name == "base64" else base64.b32decode(packed)
            return raw.decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return None
    if name == "rev" and not args:
        return "\n".join(line[::-1] for line in lines) + "\n"
    if name == "cut":
        opts = " ".join(args)
        if len(args) in (2, 4) and all(len(a) == 2 and a.startswith("-") for a in args[::2]):
            opts = " ".join(a + b for a, b in zip(args[::2], args[1::2], strict=True))  # ``-d ' ' -f 2``
        m = re.fullmatch(r"-([cb])\s*(\S+)", opts)
        if m:
            rs = _ranges(m.group(2))
            if rs is None:
                return None
            return "\n".join("".join(ch for i, ch in enumerate(line, 1) if any(lo <= i <= hi for lo, hi in rs)) for line in lines) + "\n"
        m = re.fullmatch(r"-d(.)\s*-f\s*(\S+)|-f\s*(\S+)\s+-d(.)", opts)
        if m:
            delim = m.group(1) or m.group(4)
            rs = _ranges(m.group(2) or m.group(3))
            if rs is None:
                return None
            out = []
            for line in lines:
                fields = line.split(delim)
                out.append(line if len(fields) == 1 else delim.join(f for i, f in enumerate(fields, 1) if any(lo <= i <= hi for lo, hi in rs)))
            return "\n".join(out) + "\n"
        return None
    if name == "tr":
        delete = args[:1] == ["-d"]
        sets = args[1:] if delete else args
        if len(sets) != (1 if delete else 2) or any(re.search(r"\[|\\", x) for x in sets):
            return None

        def expand(x: str) -> str:
            return re.sub(r"(.)-(.)", lambda m: "".join(chr(c) for c in range(ord(m.group(1)), ord(m.group(2)) + 1)), x)

        a = expand(sets[0])
        if delete:
            return text.translate({ord(c): None for c in a})
        b = expand(sets[1])
        if not b:
            return None
        b = b + b[-1] * max(0, len(a) - len(b))
        return text.translate({ord(c): b[i] for i, c in enumerate(a)})
    if name == "sed":
        scripts = [a for a in args if a != "-e"]
        if len(scripts) != 1:
            return None
        out = lines
        for cmd in scripts[0].split(";"):
            m = re.fullmatch(r"\s*s(.)(.*?)\1(.*?)\1([gI0-9]*)\s*", cmd)
            if not m or re.search(r"\\[^./*\[\]^$]|[(){}+?|]", m.group(2)) or "\\" in m.group(3) or "&" in m.group(3):
                return None
            try:
                rx = re.compile(m.group(2), re.I if "I" in m.group(4) else 0)
            except re.error:
                return None
            count = 0 if "g" in m.group(4) else 1
            out = [rx.sub(lambda _m: m.group(3), line, count=count) for line in out]
        return "\n".join(out) + "\n"
    if name in ("head", "tail") and len(args) <= 2:
        opts = " ".join(args)
        mc = re.fullmatch(r"-c\s*(\d+)", opts)
        if mc:
            k = int(mc.group(1))
            return text[:k] if name == "head" else text[len(text) - k :] if k else ""
        mm = re.fullmatch(r"(?:-n\s*)?-?(\d+)", opts) if opts else None
        n = int(mm.group(1)) if mm else (10 if not opts else -1)
        if n < 0:
            return None
        keep = lines[:n] if name == "head" else lines[len(lines) - n :] if n else []
        return "\n".join(keep) + "\n"
    return None


def path_output(argv: list[str], cwd: str | None) -> str:
    """What ``pwd``, ``dirname P``, ``basename P``, ``realpath P``/``readlink -f P`` and ``ls -d P…``
    print (``rm -rf $(dirname $HOME)``), or UNKNOWN."""
    if not argv or any(UNKNOWN in a for a in argv):
        return UNKNOWN
    name, args = argv[0], argv[1:]
    if name == "pwd" and not args:
        return cwd if cwd is not None else UNKNOWN
    if name == "dirname" and len(args) == 1:
        p = args[0].rstrip("/") or "/"
        if p == "~":
            return "/home"  # the home's parent: /home (or / for root's)
        return posixpath.dirname(p) or "."
    if name == "basename" and len(args) == 1:
        return posixpath.basename(args[0].rstrip("/")) or "/"
    if (name == "realpath" and len(args) == 1) or (name == "readlink" and len(args) == 2 and args[0] in ("-f", "-e", "-m")):
        p = args[-1]
        return posixpath.normpath(p) if p.startswith(("/", "~")) else UNKNOWN
    if name == "ls" and args and args[0] == "-d" and all(not a.startswith("-") for a in args[1:]):
        return " ".join(args[1:])
    return UNKNOWN


def case_convert(value: str, op: str, pattern: str) -> str:
    """``${v^^pat}``, ``${v^pat}``, ``${v,,pat}``, ``${v,pat}``, ``${v~~pat}``, ``${v~pat}``: the case of
    every character (or the first) matching ``pattern`` (any when empty) changed."""
    rx = glob_regex(pattern) if pattern else None

    def conv(ch: str) -> str:
        if pattern and (rx is None or not rx.fullmatch(ch)):
            return ch
        if op.startswith("^"):
            return ch.upper()
        if op.startswith(","):
            return ch.lower()
        return ch.swapcase()

    if len(op) == 2:
        return "".join(conv(c) for c in value)
    return conv(value[:1]) + value[1:] if value else value


def pattern_replace(value: str, rx: re.Pattern[str], op: str, rep: str) -> str:
    """``${v/pat/rep}`` (first match), ``${v//pat/rep}`` (every match), ``${v/#pat/rep}`` (at the
    start), ``${v/%pat/rep}`` (at the end): the longest matches of ``rx`` replaced by ``rep``."""
    n = len(value)
    if op == "/#":
        for j in range(n, -1, -1):
            if rx.fullmatch(value[:j]):
                return rep + value[j:]
        return value
    if op == "/%":
        for i in range(0, n + 1):
            if rx.fullmatch(value[i:]):
                return value[:i] + rep
        return value
    out: list[str] = []
    i = 0
    while i <= n:
        hit = -1
        for j in range(n, i - 1, -1):
            if rx.fullmatch(value[i:j]):
                hit = j
                break
        if hit < 0 or hit == i:
            if i < n:
                out.append(value[i])
            i += 1
            continue
        out.append(rep)
        i = hit
        if op == "/":
            out.append(value[i:])
            return "".join(out)
    return "".join(out)

"""From bash text to the simple commands that would run.

tree-sitter-bash gives the structure; this module walks it and resolves every word the
way bash would see it: quotes removed (``r''m``), ANSI-C strings decoded (``$'\\x72m'``),
variables assigned earlier on the line substituted (``x=rm; $x``), ``${IFS}`` and other
unquoted expansions word-split, brace expansion applied (``{rm,-rf,/}``), ``$(echo rm)``
evaluated when it is a plain echo/printf.  Whatever cannot be known becomes ``UNKNOWN``.

Nested code (``$( )``, backticks, ``<( )``, subshells, functions, loops) is walked too,
because it runs.  Payloads handed to other programs (``bash -c``, ``eval``, heredocs) are
left to the detector, which calls back into :func:`parse` recursively.

The walk is bounded: too many nodes or too deep a tree raises :class:`TooComplex`.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from .globs import glob_regex

UNKNOWN = "\x00"  # stands for text the gate cannot know (NUL never survives normalisation)

MAX_NODES = 20_000
MAX_TREE_DEPTH = 120
MAX_FIELDS = 64  # brace expansion cap
MAX_VALUE = 16_384  # longest variable value tracked

_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)

Kinds = frozenset[str]
_NOKINDS: Kinds = frozenset()


class TooComplex(Exception):
    """The input is too large or too deeply nested to analyse within bounds."""


@dataclass(slots=True, eq=False)
class Cmd:
    """One simple command as bash would run it."""

    argv: list[str]
    kinds: list[Kinds]  # per argument: provenance of its value ("download", "decode", "procsub")
    text: str  # the segment: the command's own text
    redirects: list[tuple[str, str]] = field(default_factory=list)  # (operator, resolved target)
    stdin_text: str | None = None  # heredoc / here-string content fed to it
    stdin_kinds: Kinds = frozenset()  # provenance of a here-string (``<<< "$(curl ...)"``)
    upstream: list[list["Cmd"]] = field(default_factory=list)  # pipeline predecessors, nearest last
    pipe_text: str = ""
    background: bool = False
    cwd: str | None = None
    function: str = ""  # name of the function whose body holds it
    loop_forever: bool = False
    loop: int = 0  # id of the innermost endless loop holding it (0: none)
    fallback: bool = False  # produced by the error-tolerant tokenizer
    procsub: str = ""  # "<" or ">": it runs inside a process substitution of that direction

    @property
    def segment(self) -> str:
        return self.pipe_text or self.text


@dataclass(slots=True)
class Script:
    cmds: list[Cmd]
    functions: set[str]
    has_error: bool


@dataclass(slots=True)
class _Piece:
    text: str
    split: bool = False  # unquoted expansion result: word-split
    brace: bool = False  # unquoted literal that may hold a brace expansion
    kinds: Kinds = _NOKINDS


Classifier = Callable[[Cmd], Kinds]

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


def _unescape_unquoted(s: str) -> str:
    if "\\" not in s:
        return s
    return _UNESCAPE.sub(lambda m: "" if m.group(1) == "\n" else m.group(1), s)


_DQ_ESC = re.compile(r'\\([\\"$`\n])')


def _unescape_dq(s: str) -> str:
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
    cur = []
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


# -- the walker ------------------------------------------------------------------------------

_STATEMENT_CONTAINERS = {
    "program",
    "list",
    "compound_statement",
    "subshell",
    "do_group",
    "if_statement",
    "elif_clause",
    "else_clause",
    "case_statement",
    "case_item",
    "negated_command",
    "c_style_for_statement",
}
_REDIRECTS = {"file_redirect", "herestring_redirect", "heredoc_redirect"}
_DEFAULT_ENV = {
    "HOME": "~",
    "IFS": " ",
    "PWD": ".",
    "USER": "user",
    "LOGNAME": "user",
    "SHELL": "/bin/bash",
    "TMPDIR": "/tmp",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
}


class _Walker:
    def __init__(
        self, src: bytes, env: dict[str, str] | None, classify: Classifier | None, cwd: str | None = None
    ) -> None:
        self.src = src
        self.env: dict[str, str] = dict(_DEFAULT_ENV)
        if env:
            self.env.update(env)
        self.env_kinds: dict[str, Kinds] = {}
        self.classify = classify
        self.cmds: list[Cmd] = []
        self.functions: set[str] = set()
        self.nodes = 0
        self.cwd: str | None = cwd
        self.func = ""
        self.forever = False
        self.loop = 0
        self.loop_seq = 0
        self.extra_args: list[str] = []
        self.arrays: dict[str, list[str]] = {}
        self.stdin_kinds: Kinds = _NOKINDS
        self.redirect_kinds: Kinds = _NOKINDS  # provenance of a ``< <( )`` stdin

    # ---- statements

    def tick(self, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_TREE_DEPTH:
            raise TooComplex("the command is too large or too deeply nested")

    def text(self, node: Node) -> str:
        return node.text.decode("utf-8", "replace") if node.text is not None else ""

    def stmt(self, node: Node, depth: int) -> None:
        self.tick(depth)
        t = node.type
        if t == "command":
            self.command(node, depth, [], None)
        elif t == "pipeline":
            self.pipeline(node.children, self.text(node), depth, [])
        elif t == "redirected_statement":
            self.redirected(node, depth)
        elif t in ("variable_assignment", "variable_assignments"):
            self.assignments(node, depth)
        elif t == "declaration_command" or t == "unset_command":
            self.declaration(node, depth)
        elif t == "function_definition":
            self.function(node, depth)
        elif t == "for_statement":
            self.for_loop(node, depth)
        elif t == "while_statement":
            self.while_loop(node, depth)
        elif t == "c_style_for_statement":
            self.c_for_loop(node, depth)
        elif t == "comment" or not node.is_named:
            return
        elif t == "ERROR" and any(c.type == "command_name" for c in node.children):
            self.command(node, depth, [], None)
        else:
            self.children(node, depth)

    def children(self, node: Node, depth: int) -> None:
        kids = node.children
        n = len(kids)
        for i, c in enumerate(kids):
            if not c.is_named:
                continue
            if c.type in ("command_substitution", "process_substitution"):
                self.substitution(c, depth + 1)
                continue
            start = len(self.cmds)
            self.stmt(c, depth + 1)
            if i + 1 < n and kids[i + 1].type == "&":
                for cmd in self.cmds[start:]:
                    cmd.background = True

    def pipeline(self, elements: list[Node], text: str, depth: int, upstream: list[list[Cmd]]) -> None:
        upstream = list(upstream)
        for el in elements:
            if not el.is_named or el.type == "comment":
                continue
            start = len(self.cmds)
            self.stmt(el, depth + 1)
            new = self.cmds[start:]
            for cmd in new:
                if not cmd.upstream:
                    cmd.upstream = upstream
                cmd.pipe_text = text
            if new:
                upstream = upstream + [new]

    def redirected(self, node: Node, depth: int) -> None:
        body: Node | None = None
        redirects: list[tuple[str, str]] = []
        stdin: str | None = None
        after: list[Node] = []
        for c in node.children:
            if c.type in _REDIRECTS:
                stdin = self.redirect(c, depth, redirects, after) or stdin
            elif c.is_named and body is None:
                body = c
        start = len(self.cmds)
        extra, self.extra_args = self.extra_args, []
        if body is not None:
            if body.type == "command":
                self.command(body, depth + 1, redirects, stdin, extra)
                if len(self.cmds) > start:
                    self.cmds[start].text = self.text(node).split("\n", 1)[0] if stdin is not None else self.text(node)
            else:
                self.stmt(body, depth + 1)
                for cmd in self.cmds[start:]:
                    cmd.redirects.extend(redirects)
                    if stdin is not None and cmd.stdin_text is None:
                        cmd.stdin_text = stdin
        else:
            self.cmds.append(Cmd([], [], self.text(node), list(redirects), stdin, cwd=self.cwd, function=self.func))
        head = self.cmds[start:]
        for c in after:
            if c.type == "pipeline":
                self.pipeline(c.children, self.text(node), depth + 1, [head] if head else [])
                for cmd in head:
                    cmd.pipe_text = self.text(node)
            else:
                self.stmt(c, depth + 1)

    def redirect(self, node: Node, depth: int, out: list[tuple[str, str]], after: list[Node]) -> str | None:
        """Record a redirect; return stdin text for heredocs and here-strings."""
        t = node.type
        if t == "heredoc_redirect":
            body = ""
            strip_tabs = False
            for c in node.children:
                if c.type == "heredoc_body":
                    body = self.text(c)
                    self.substitutions_in(c, depth + 1)
                elif c.type == "<<-":
                    strip_tabs = True
                elif c.type in _REDIRECTS:
                    self.redirect(c, depth + 1, out, after)
                elif c.is_named and c.type not in ("heredoc_start", "heredoc_end", "heredoc_content"):
                    after.append(c)
            if strip_tabs:
                body = "\n".join(line.lstrip("\t") for line in body.split("\n"))
            return body
        ops = []
        targets: list[str] = []
        herestring_kinds: list[Kinds] = []
        for c in node.children:
            if c.type == "file_descriptor":
                continue
            if not c.is_named or c.type == "ERROR":
                ops.append(self.text(c))
                continue
            fields = self.word(c, depth + 1)
            targets.append(" ".join(f for f, _ in fields))
            herestring_kinds.extend(k for _, k in fields)
        op = "".join(ops)
        if op == "<" and any("procsub" in k for k in herestring_kinds):  # sh < <(curl …): stdin from a program
            self.redirect_kinds = self.redirect_kinds.union(*herestring_kinds)
        if t == "herestring_redirect":
            self.stdin_kinds = frozenset().union(*herestring_kinds) if herestring_kinds else _NOKINDS
            return " ".join(targets) + "\n"
        out.append((op, targets[0] if targets else ""))
        # tree-sitter folds the words after a redirect target into the redirect; bash passes
        # them to the command as arguments (``cmd < in arg``)
        self.extra_args.extend(x for x in targets[1:] if not x.isdigit())
        return None

    def command(
        self,
        node: Node,
        depth: int,
        redirects: list[tuple[str, str]],
        stdin: str | None,
        extra: list[str] | None = None,
    ) -> None:
        argv: list[str] = []
        saved_extra, self.extra_args = self.extra_args, []
        prev_end = -1
        prev_count = 0
        prev_arg: int | None = None
        kinds: list[Kinds] = []
        redirects = list(redirects)
        after: list[Node] = []
        for c in node.children:
            t = c.type
            if t == "variable_assignment":
                self.assign(c, depth + 1)
            elif t == "command_name":
                fields = self.word(c.children[0] if c.child_count else c, depth + 1)
                for w, k in fields:
                    argv.append(w)
                    kinds.append(k)
                prev_count = len(fields)
                prev_end = c.end_byte
                prev_arg = c.start_byte
            elif t in _REDIRECTS:
                stdin = self.redirect(c, depth + 1, redirects, after) or stdin
            elif t == "comment" or not c.is_named:
                continue
            else:
                if argv and prev_end == c.start_byte and prev_arg is not None:
                    # tree-sitter split one shell word in two (``$IFS-rf$IFS/``): re-read it whole
                    del argv[len(argv) - prev_count :]
                    del kinds[len(kinds) - prev_count :]
                    run = self.src[prev_arg : c.end_byte].decode("utf-8", "replace")
                    words = [w for fc in fallback_commands(run, self.env) for w in fc.argv]
                    for w in words:
                        argv.append(w)
                        kinds.append(_NOKINDS)
                    prev_end = c.end_byte
                    prev_count = len(words)
                    continue
                prev_arg = c.start_byte
                fields = self.word(c, depth + 1)
                for w, k in fields:
                    argv.append(w)
                    kinds.append(k)
                prev_count = len(fields)
            prev_end = c.end_byte
        for x in self.extra_args + (extra or []):
            argv.append(x)
            kinds.append(_NOKINDS)
        self.extra_args = saved_extra
        cmd = Cmd(
            argv,
            kinds,
            self.text(node),
            redirects,
            stdin,
            cwd=self.cwd,
            function=self.func,
            loop_forever=self.forever,
            loop=self.loop,
            stdin_kinds=(self.stdin_kinds if stdin is not None else _NOKINDS) | self.redirect_kinds,
        )
        self.stdin_kinds = _NOKINDS
        self.redirect_kinds = _NOKINDS
        self.cmds.append(cmd)
        if argv and argv[0] in ("cd", "pushd"):
            self.change_dir(argv[1:])
        elif argv[:2] == ["printf", "-v"] and len(argv) >= 4:
            self.env[argv[2]] = _printf(argv[3], argv[4:])
        elif argv[:1] == ["read"] and stdin is not None:
            self.read_into(argv[1:], stdin)
        elif argv[:2] == ["set", "--"]:
            for n, v in enumerate(argv[2:], 1):
                self.env[str(n)] = v
            self.env["@"] = self.env["*"] = " ".join(argv[2:])
        for c in after:
            self.stmt(c, depth + 1)

    def read_into(self, args: list[str], text: str) -> None:
        """``read -r a b <<< "..."``: the variables get the words of the first line."""
        names: list[str] = []
        skip = False
        for a in args:
            if skip:
                skip = False
            elif a in ("-p", "-d", "-t", "-n", "-N", "-u", "-i", "-a"):
                skip = a != "-a"
            elif not a.startswith("-"):
                names.append(a)
        line = text.split("\n", 1)[0]
        if not names:
            names = ["REPLY"]
        words = line.split(None, len(names) - 1)
        for i, n in enumerate(names):
            self.env[n] = words[i] if i < len(words) else ""

    def change_dir(self, args: list[str]) -> None:
        operands = [a for a in args if not a.startswith("-") or a == "-"]
        if not operands:
            self.cwd = "~"
            return
        target = operands[0]
        if UNKNOWN in target or target == "-":
            self.cwd = None
        elif target.startswith(("/", "~")):
            self.cwd = posixpath.normpath(target)
        elif self.cwd is not None:
            self.cwd = posixpath.normpath(posixpath.join(self.cwd, target))

    def assignments(self, node: Node, depth: int) -> None:
        if node.type == "variable_assignment":
            self.assign(node, depth)
        else:
            for c in node.children:
                if c.type == "variable_assignment":
                    self.assign(c, depth + 1)

    def assign(self, node: Node, depth: int) -> None:
        name = ""
        value_node: Node | None = None
        for c in node.children:
            if c.type in ("variable_name", "subscript") and not name:
                name = self.text(c).split("[", 1)[0]
            elif c.is_named and c.type not in ("variable_name", "subscript"):
                value_node = c
        if not name:
            return
        if value_node is None:
            self.env[name] = ""
            self.env_kinds.pop(name, None)
            return
        pieces = self.pieces(value_node, depth + 1, quoted=True)
        if value_node.type == "array":
            self.arrays[name] = [w for c in value_node.children if c.is_named for w, _ in self.word(c, depth + 1)]
        value = "".join(p.text for p in pieces)
        # a value that keeps doubling (``a=$a$a``) must not eat memory: past a cap it is unknown
        self.env[name] = value if len(value) <= MAX_VALUE else UNKNOWN
        k = frozenset().union(*(p.kinds for p in pieces)) if pieces else _NOKINDS
        if k:
            self.env_kinds[name] = k
        else:
            self.env_kinds.pop(name, None)

    def declaration(self, node: Node, depth: int) -> None:
        for c in node.children:
            if c.type == "variable_assignment":
                self.assign(c, depth + 1)
            elif c.is_named:
                self.substitutions_in(c, depth + 1)

    def function(self, node: Node, depth: int) -> None:
        name = ""
        outer = self.func
        for c in node.children:
            if c.type == "word" and not name:
                name = self.text(c)
            elif c.is_named and c.type != "word":
                self.functions.add(name)
                self.func = name
                try:
                    self.stmt(c, depth + 1)
                finally:
                    self.func = outer

    def for_loop(self, node: Node, depth: int) -> None:
        var = ""
        values: list[str] = []
        body: Node | None = None
        seen_in = False
        for c in node.children:
            if c.type == "variable_name" and not var:
                var = self.text(c)
            elif c.type == "in":
                seen_in = True
            elif c.type == "do_group":
                body = c
            elif seen_in and c.is_named and c.type != "comment":
                values.extend(w for w, _ in self.word(c, depth + 1))
        if body is None:
            return
        if not var or not values:
            self.stmt(body, depth + 1)
            return
        saved = self.env.get(var)
        for v in values[:4]:
            self.env[var] = v
            self.stmt(body, depth + 1)
        if saved is None:
            self.env.pop(var, None)
        else:
            self.env[var] = saved

    def while_loop(self, node: Node, depth: int) -> None:
        until = node.children and node.children[0].type == "until"
        cond = ""
        for c in node.children:
            if c.type == "do_group":
                words = cond.strip().rstrip(";").strip()
                forever = words in (
                    ("false", "/bin/false", "! true", "! :")
                    if until
                    else ("true", ":", "[ 1 ]", "[[ 1 ]]", "(( 1 ))", "((1))", "/bin/true", "test 1", "! false")
                ) or (not until and bool(re.fullmatch(r"\(\(\s*0*[1-9]\d*\s*\)\)|\[\[? [1-9a-z]\w* \]\]?", words)))
                self.loop_body(c, depth, forever)
            elif c.is_named and c.type != "comment":
                cond += self.text(c) + ";"
                self.stmt(c, depth + 1)

    def c_for_loop(self, node: Node, depth: int) -> None:
        """``for ((;;))`` (no condition, or a constant non-zero one) never ends."""
        cond: Node | None = None
        body: Node | None = None
        for i, c in enumerate(node.children):
            fname = node.field_name_for_child(i)
            if fname == "condition":
                cond = c
            elif fname == "body":
                body = c
            elif c.is_named and c.type != "comment":
                self.substitutions_in(c, depth + 1)
        forever = cond is None or bool(re.fullmatch(r"0*[1-9]\d*", self.text(cond).strip()))
        if body is not None:
            self.loop_body(body, depth, forever)

    def loop_body(self, body: Node, depth: int, forever: bool) -> None:
        outer, outer_loop = self.forever, self.loop
        self.forever = outer or forever
        if forever:
            self.loop_seq += 1
            self.loop = self.loop_seq
        try:
            self.stmt(body, depth + 1)
        finally:
            self.forever, self.loop = outer, outer_loop

    # ---- substitutions

    def substitutions_in(self, node: Node, depth: int) -> None:
        """Walk command substitutions hidden anywhere under ``node`` (they run)."""
        self.tick(depth)
        for c in node.children:
            if c.type in ("command_substitution", "process_substitution"):
                self.substitution(c, depth + 1)
            elif c.child_count:
                self.substitutions_in(c, depth + 1)

    def substitution(self, node: Node, depth: int) -> tuple[str, Kinds]:
        """Walk ``$( )`` / backticks / ``<( )``; return its value (when it is a plain echo) and kinds."""
        start = len(self.cmds)
        saved_forever = self.forever
        for c in node.children:
            if c.is_named:
                self.stmt(c, depth + 1)
        self.forever = saved_forever
        inner = self.cmds[start:]
        kinds: set[str] = set()
        if self.classify is not None:
            for cmd in inner:
                kinds |= self.classify(cmd)
        value = UNKNOWN
        if len(inner) == 1:
            value = echo_output(inner[0].argv)
            if value is None:
                value = UNKNOWN
            else:
                value = value.rstrip("\n")
        if node.type == "process_substitution":
            kinds.add("procsub")
            value = "/dev/fd/63"
            direction = ">" if self.text(node).startswith(">") else "<"
            for cmd in inner:
                cmd.procsub = cmd.procsub or direction
        return value, frozenset(kinds)

    # ---- words

    def word(self, node: Node, depth: int) -> list[tuple[str, Kinds]]:
        pieces = self.pieces(node, depth, quoted=False)
        fields: list[list[str]] = []
        cur: list[str] | None = None
        brace = False
        kinds: set[str] = set()
        for p in pieces:
            kinds |= p.kinds
            brace = brace or p.brace
            if p.split:
                if not p.text:
                    continue
                parts = self.ifs_split(p.text)
                for i, part in enumerate(parts):
                    if i > 0:
                        cur = None
                    if part:
                        if cur is None:
                            cur = []
                            fields.append(cur)
                        cur.append(part)
            else:
                if cur is None:
                    cur = []
                    fields.append(cur)
                cur.append(p.text)
        k = frozenset(kinds)
        out: list[tuple[str, Kinds]] = []
        for f in fields:
            w = "".join(f)
            if brace and "{" in w:
                out.extend((x, k) for x in brace_expand(w))
            else:
                out.append((w, k))
        return out[: MAX_FIELDS * 4]

    def ifs_split(self, text: str) -> list[str]:
        """Word splitting by the current ``$IFS`` (``IFS=_; cmd=rm_-rf_/; $cmd``)."""
        ifs = self.env.get("IFS", " \t\n")
        if ifs == " " or UNKNOWN in ifs:
            ifs = " \t\n"
        if not ifs:
            return [text]
        return re.split("[" + re.escape(ifs) + "]+", text)

    def pieces(self, node: Node, depth: int, quoted: bool) -> list[_Piece]:
        self.tick(depth)
        t = node.type
        if t == "raw_string":
            return [_Piece(self.text(node)[1:-1])]
        if t == "ansi_c_string":
            return [_Piece(decode_escapes(self.text(node)[2:-1]))]
        if t in ("string", "translated_string"):
            out = [_Piece("")]
            prev_end = -1
            for c in node.children:
                if prev_end >= 0 and c.start_byte > prev_end:
                    # tree-sitter leaves newlines (and other gaps) between string_content nodes out
                    out.append(_Piece(self.src[prev_end : c.start_byte].decode("utf-8", "replace")))
                prev_end = c.end_byte
                if c.type == "string_content":
                    out.append(_Piece(_unescape_dq(self.text(c))))
                elif c.is_named:
                    out.extend(self.pieces(c, depth + 1, quoted=True))
            return out
        if t == "concatenation":
            out = []
            for c in node.children:
                out.extend(self.pieces(c, depth + 1, quoted))
            return out
        if t == "simple_expansion":
            name = self.text(node)[1:]
            return [
                _Piece(
                    self.env.get(name, UNKNOWN),
                    split=not quoted or name in ("@", "*"),
                    kinds=self.env_kinds.get(name, _NOKINDS),
                )
            ]
        if t == "expansion":
            return [self.expansion(node, depth, quoted)]
        if t in ("command_substitution", "process_substitution"):
            value, kinds = self.substitution(node, depth + 1)
            return [_Piece(value, split=not quoted, kinds=kinds)]
        if t == "arithmetic_expansion":
            self.substitutions_in(node, depth + 1)
            value = arithmetic(self.text(node), self.env)
            return [_Piece(UNKNOWN if value is None else str(value), kinds=_ARITH if value is None else _NOKINDS)]
        if t == "brace_expression":
            return [_Piece(self.text(node), brace=not quoted)]
        if t == "array":
            vals = []
            for c in node.children:
                if c.is_named:
                    vals.extend(p.text for p in self.pieces(c, depth + 1, quoted))
            return [_Piece(" ".join(vals), split=not quoted)]
        text = self.text(node)
        if node.child_count and t not in ("word", "number"):
            self.substitutions_in(node, depth + 1)
        if quoted:
            return [_Piece(text)]
        return [_Piece(_unescape_unquoted(text), brace="{" in text)]

    def expansion(self, node: Node, depth: int, quoted: bool) -> _Piece:
        name = ""
        op = ""
        subscript = ""
        arg_nodes: list[Node] = []
        length = False
        for c in node.children:
            ct = c.type
            if ct in ("${", "}"):
                continue
            if ct in ("variable_name", "special_variable_name") and not name:
                name = self.text(c)
            elif ct == "subscript" and not name:
                name, _, rest = self.text(c).partition("[")
                subscript = rest.rstrip("]")
            elif ct == "#" and not name:
                length = True
            elif not name:
                continue
            elif not c.is_named and not op:
                op = self.text(c)
            else:
                arg_nodes.append(c)
        value = self.env.get(name)
        kinds = self.env_kinds.get(name, _NOKINDS)
        if subscript in ("@", "*"):
            return _Piece(value if value is not None else UNKNOWN, split=True, kinds=kinds)
        if subscript and subscript.isdigit() and name in self.arrays:
            items = self.arrays[name]
            i = int(subscript)
            return _Piece(items[i] if i < len(items) else "", split=not quoted, kinds=kinds)
        if length:
            return _Piece(str(len(value)) if value is not None and UNKNOWN not in value else UNKNOWN)
        arg = "".join(p.text for n in arg_nodes for p in self.pieces(n, depth + 1, True)) if arg_nodes else ""
        if op in (":-", "-", ":=", "="):
            if value is None or (op.startswith(":") and value == ""):
                value = arg
        elif op in (":+", "+"):
            value = arg if value else ("" if value is not None else UNKNOWN)
        elif op in ("%", "%%", "#", "##") and value is not None and UNKNOWN not in value and UNKNOWN not in arg:
            value = _trim(value, arg, op)
        elif op == ":" and value is not None and UNKNOWN not in value:
            nums = [int(x) for x in re.findall(r"-?\d+", arg)][:2]
            if nums:
                s = nums[0]
                value = value[s : s + nums[1]] if len(nums) > 1 else value[s:]
            else:
                value = UNKNOWN
        elif op:
            value = UNKNOWN
        return _Piece(UNKNOWN if value is None else value, split=not quoted, kinds=kinds)


_ARITH: Kinds = frozenset({"arith"})
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
    import ast

    try:
        tree = ast.parse(" ".join(out), mode="eval")
    except SyntaxError:
        return None
    return _arith_eval(tree.body)


def _arith_eval(n: object) -> int | None:
    import ast

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
            return a**b
    return None


def _trim(value: str, pattern: str, op: str) -> str:
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
        return _printf(fmt, rest)
    return None


def _printf(fmt: str, args: list[str]) -> str:
    out: list[str] = []
    it = iter(args)

    def conv(m: re.Match[str]) -> str:
        spec = m.group(1)
        if spec == "%":
            return "%"
        v = next(it, "")
        return decode_escapes(v) if spec == "b" else v

    out.append(re.sub(r"%[-+ #0]*\d*(?:\.\d+)?([sbdiouxXfeEgGc%])", conv, decode_escapes(fmt)))
    return "".join(out)


# -- the error-tolerant fallback -------------------------------------------------------------

_OPS = re.compile(r"(\|\||&&|;;|[;&|()\n`]|\$\(|<\(|>\()")
_REDIR = re.compile(r"\d*(<<<|<<-?|<>|>>|>\||&>>|&>|>&|<&|>|<)(?![(])")


def fallback_commands(text: str, env: dict[str, str] | None = None) -> list[Cmd]:
    """A crude lexer for input tree-sitter could not parse: quotes honoured, operators split."""
    cmds: list[Cmd] = []
    words: list[str] = []
    buf: list[str] = []
    in_word = False
    i, n = 0, len(text)
    variables = dict(_DEFAULT_ENV)
    if env:
        variables.update(env)

    pending_redirect: list[str] = []
    redirects: list[tuple[str, str]] = []

    def flush_word() -> None:
        nonlocal in_word
        if in_word:
            w = "".join(buf)
            buf.clear()
            in_word = False
            if pending_redirect:
                redirects.append((pending_redirect.pop(), w))
                return
            words.extend(brace_expand(w) if "{" in w else [w])

    def flush_cmd() -> None:
        flush_word()
        pending_redirect.clear()
        if words or redirects:
            cmds.append(Cmd(list(words), [_NOKINDS] * len(words), " ".join(words), list(redirects), fallback=True))
            words.clear()
            redirects.clear()

    while i < n:
        ch = text[i]
        if ch == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            buf.append(text[i + 1 : j])
            in_word = True
            i = j + 1
        elif ch == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            buf.append(_unescape_dq(text[i + 1 : j]))
            in_word = True
            i = j + 1
        elif ch == "$" and text.startswith("$'", i):
            j = i + 2
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            buf.append(decode_escapes(text[i + 2 : j]))
            in_word = True
            i = j + 1
        elif ch == "\\" and i + 1 < n:
            buf.append(text[i + 1])
            in_word = True
            i += 2
        elif ch in " \t":
            flush_word()
            i += 1
        elif ch == "#" and not in_word:
            j = text.find("\n", i)
            i = n if j < 0 else j
        else:
            m = _REDIR.match(text, i) if not in_word or ch in "<>" else None
            if m:
                flush_word()
                i = m.end()
                pending_redirect.append(m.group(1))
                continue
            m = _OPS.match(text, i)
            if m:
                flush_cmd()
                i = m.end()
                continue
            m = re.match(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text[i:])
            if m:
                value = variables.get(m.group(1), UNKNOWN)
                for k, part in enumerate(re.split(r"[ \t\n]", value)):
                    if k:
                        flush_word()
                    if part:
                        buf.append(part)
                        in_word = True
                i += m.end()
                continue
            buf.append(ch)
            in_word = True
            i += 1
    flush_cmd()
    return cmds


# -- entry point -----------------------------------------------------------------------------


def parse(
    text: str, *, env: dict[str, str] | None = None, classify: Classifier | None = None, cwd: str | None = None
) -> Script:
    """Parse normalised bash text into the simple commands that would run."""
    if not text.isascii():
        # see normalize.py: tree-sitter-bash may crash outside the BMP; payloads decoded from
        # $'\U...' escapes reach here without passing normalize()
        text = _ASTRAL.sub("\ufffd", text).encode("utf-8", "replace").decode("utf-8")
    src = text.encode("utf-8")
    tree = _PARSER.parse(src)
    root = tree.root_node
    w = _Walker(src, env, classify, cwd)
    w.stmt(root, 0)
    cmds = w.cmds
    if root.has_error:
        cmds = cmds + fallback_commands(text, w.env)
    return Script(cmds, w.functions, root.has_error)

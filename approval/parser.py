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

This module is the tree walk and :func:`parse`.  What it produces lives in ``model.py`` (``Cmd``,
``Script``, ``UNKNOWN``, the limits), word semantics that need no tree in ``words.py`` (escapes,
brace expansion, arithmetic, what ``echo``/``printf`` print) and the error-tolerant lexer for
text tree-sitter cannot parse in ``lexer.py``; the names below are re-exported for importers.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from .commands import getopt
from .globs import glob_regex
from .lexer import fallback_commands
from .model import (
    DEFAULT_ENV,
    MAX_FIELDS,
    MAX_NODES,
    MAX_TREE_DEPTH,
    MAX_VALUE,
    NOKINDS,
    UNKNOWN,
    Classifier,
    Reader,
    ARGSEP,
    Cmd,
    Kinds,
    Script,
    TooComplex,
)
from .words import (
    case_convert,
    path_output,
    pattern_replace,
    pipe_output,
    arithmetic,
    brace_expand,
    decode_escapes,
    echo_output,
    printf_output,
    trim_pattern,
    unescape_dq,
    unescape_unquoted,
)

# the parser's public names, wherever they are defined
__all__ = [
    "UNKNOWN",
    "Classifier",
    "Cmd",
    "Kinds",
    "Script",
    "TooComplex",
    "arithmetic",
    "brace_expand",
    "decode_escapes",
    "echo_output",
    "fallback_commands",
    "parse",
]

# ``time f(){ …; }`` / ``! function f { …; }``: bash allows the reserved words before a function
# definition (they apply to it); tree-sitter does not, so they are read without them
_TIMED_DEF = re.compile(r"(^|[;&|(){}\n]\s*)(?:time(?:\s+-p)?|!)(?=\s+(?:function\s+[^\s(){}]+|[^\s(){};&|]+\s*\(\s*\)))")
_COPROC = re.compile(r"(^|[;&|(){}\n]\s*|\b(?:then|do|else|time)\s+)coproc(?:\s+[A-Za-z_]\w*)?(?=\s*[{(])")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]")
_LANGUAGE = Language(tree_sitter_bash.language())
_PARSER = Parser(_LANGUAGE)


@dataclass(slots=True)
class _Piece:
    text: str
    split: bool = False  # unquoted expansion result: word-split
    brace: bool = False  # unquoted literal that may hold a brace expansion
    at: bool = False  # ``"$@"``: split only between the arguments
    kinds: Kinds = NOKINDS


# -- the walker ------------------------------------------------------------------------------

_REDIRECTS = {"file_redirect", "herestring_redirect", "heredoc_redirect"}
_ARITH: Kinds = frozenset({"arith"})
# a value computed by an expansion the gate does not evaluate (``${a/X/r}`` of an unknown, ``$(… | awk …)``):
# in the program position it is a program the gate cannot know
OPAQUE: Kinds = frozenset({"opaque"})
_CODE_IN_VALUE = re.compile(r"\$\(|`")
_LOOKUP = re.compile(
    r"(?:which|command -v|type -[Pp]|whereis -b|(?:pyenv|rbenv|nodenv|goenv|asdf|mise) which|xcrun (?:-f|--find)"
    r"|rustup which|xcrun -find) [A-Za-z0-9_][\w.+-]*"
)
_POSITIONAL = frozenset({"@", "*", "#", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "PWD"})
_KEYED = re.compile(r"^\[([^\]]*)\]=(.*)$", re.S)
_ARITH_TEST = re.compile(r"\s-(?:eq|ne|lt|le|gt|ge)\s")


class _Walker:
    def __init__(
        self,
        src: bytes,
        env: dict[str, str] | None,
        classify: Classifier | None,
        cwd: str | None = None,
        read: Reader | None = None,
    ) -> None:
        self.src = src
        self.read = read  # the text of a file of the task (read by the core), or None
        self.env: dict[str, str] = dict(DEFAULT_ENV)
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
        self.keyed: dict[str, dict[str, str]] = {}
        self.files: dict[str, str] = {}  # files written on the line from literal text: path -> text  # ``declare -A m=([k]=v)`` / ``a=([3]=x)``: subscript -> value
        self.namerefs: dict[str, str] = {}  # ``declare -n r=a``
        self.procsub_text: str | None = None  # what the last ``<( )`` printed, when known
        self.arith_seen: set[tuple[str, str]] = set()  # (variable, value) arithmetic already walked as code
        self.bodies: dict[str, str] = {}  # functions defined on the line: name -> body text
        self.stdin_kinds: Kinds = NOKINDS
        self.redirect_kinds: Kinds = NOKINDS  # provenance of a ``< <( )`` stdin

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
        elif t == "test_command" and _ARITH_TEST.search(self.text(node)) or (
            t == "compound_statement" and node.children and node.children[0].type == "(("
        ):
            self.arith_code(self.text(node), depth)
            self.children(node, depth)
        elif t == "subshell":  # ``(cd / && ls); rm -rf *``: the subshell's cd does not move the line
            saved = self.cwd
            self.children(node, depth)
            self.cwd = saved
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
                if extra and len(self.cmds) > start:
                    # ``true && tool < in arg``: tree-sitter hangs the redirect (and the words after
                    # it) on the whole list; bash gives those words to the last command
                    last = self.cmds[-1]
                    last.argv.extend(extra)
                    last.kinds.extend([NOKINDS] * len(extra))
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
            quoted_delim = False
            for c in node.children:
                if c.type == "heredoc_start":
                    quoted_delim = any(q in self.text(c) for q in "'\"\\")
                if c.type == "heredoc_body":
                    body = self.text(c)
                    self.substitutions_in(c, depth + 1)
                    # tree-sitter leaves backticks in an unquoted heredoc body as text; bash runs them
                    for m in () if quoted_delim else re.finditer(r"(?<!\\)`((?:[^`\\]|\\.)*)`", body, re.S):
                        self.nested(m.group(1).replace("\\`", "`"), depth + 1)
                elif c.type == "<<-":
                    strip_tabs = True
                elif c.type in _REDIRECTS:
                    self.redirect(c, depth + 1, out, after)
                elif c.is_named and c.type not in ("heredoc_start", "heredoc_end", "heredoc_content"):
                    after.append(c)
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            end = next((c for c in node.children if c.type == "heredoc_end"), None)
            nl = self.src.find(b"\n", start.end_byte) if start is not None else -1
            if (
                start is not None
                and end is not None
                and 0 <= nl < end.start_byte
                and any(c.type == "word" and c.start_byte > nl for c in node.children)
            ):
                # tree-sitter reads a body line that starts with a backslash (``\rm -rf ~``) as words of
                # the ``<<EOF`` line and leaves the body empty: the body is the source between the lines
                body = self.src[nl + 1 : end.start_byte].decode("utf-8", "replace")
                after[:] = [c for c in after if not (c.type == "word" and c.start_byte > nl)]
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
            self.stdin_kinds = frozenset().union(*herestring_kinds) if herestring_kinds else NOKINDS
            return " ".join(targets) + "\n"
        out.append((op, targets[0] if targets else ""))
        text = self.file_text(targets[0]) if op == "<" and targets else None
        if text is not None:  # ``xargs kubectl < args``: a file written on the line or read from the task
            self.extra_args.extend(targets[1:])
            return text
        # tree-sitter folds the words after a redirect target into the redirect; bash passes
        # them to the command as arguments (``cmd < in arg``, numbers too: ``kill -9 2>/dev/null 1``; a
        # descriptor of a next redirect is its own node)
        self.extra_args.extend(targets[1:])
        return None

    def command(
        self,
        node: Node,
        depth: int,
        redirects: list[tuple[str, str]],
        stdin: str | None,
        extra: list[str] | None = None,
    ) -> None:
        """One simple command: its words read, the code it hands to callbacks walked, the command
        recorded, what it changes in the shell (cwd, variables) applied, then its heredocs' code."""
        saved_extra, self.extra_args = self.extra_args, []
        redirects = list(redirects)
        after: list[Node] = []
        argv, kinds, stdin = self.command_words(node, depth, redirects, after, stdin)
        for x in self.extra_args + (extra or []):
            argv.append(x)
            kinds.append(NOKINDS)
        self.extra_args = saved_extra
        _drop_prefix(argv, kinds)
        if argv[:1] == ["let"]:
            self.arith_code(" ".join(argv[1:]), depth)
        elif argv[:1] and argv[0] in ("mapfile", "readarray"):
            for i, a in enumerate(argv[:-1]):
                if a == "-C":  # the callback is code run for every chunk read
                    self.nested(argv[i + 1] + " 0 ''", depth)
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
            stdin_kinds=(self.stdin_kinds if stdin is not None else NOKINDS) | self.redirect_kinds,
            env={k: v for k, v in self.env.items() if k not in _POSITIONAL and DEFAULT_ENV.get(k) != v},
        )
        self.stdin_kinds = NOKINDS
        self.redirect_kinds = NOKINDS
        self.cmds.append(cmd)
        self.remember_file(argv, redirects, stdin)
        self.apply_effects(argv, stdin)
        for c in after:
            self.stmt(c, depth + 1)

    def command_words(
        self, node: Node, depth: int, redirects: list[tuple[str, str]], after: list[Node], stdin: str | None
    ) -> tuple[list[str], list[Kinds], str | None]:
        """A simple command's fields (program and arguments) with their kinds, and its stdin; the
        assignments before it are made, its redirects added to ``redirects`` and the heredoc
        bodies to walk after it to ``after``."""
        argv: list[str] = []
        kinds: list[Kinds] = []
        prev_end = -1
        prev_count = 0
        prev_arg: int | None = None
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
                if argv and prev_arg is not None and self.joined(prev_end, c.start_byte):
                    prev_count = self.rejoin(argv, kinds, prev_count, prev_arg, c)
                    prev_end = c.end_byte
                    continue
                prev_arg = c.start_byte
                fields = self.word(c, depth + 1)
                for w, k in fields:
                    argv.append(w)
                    kinds.append(k)
                prev_count = len(fields)
            prev_end = c.end_byte
        return argv, kinds, stdin

    def rejoin(self, argv: list[str], kinds: list[Kinds], count: int, start: int, node: Node) -> int:
        """tree-sitter split one shell word in two (``$IFS-rf$IFS/``): the last ``count`` fields are
        replaced by the whole word, from byte ``start`` to the end of ``node``, re-read by the
        lexer; how many fields it gave."""
        del argv[len(argv) - count :]
        del kinds[len(kinds) - count :]
        run = self.src[start : node.end_byte].decode("utf-8", "replace").replace("\\\n", "")
        words = [w for fc in fallback_commands(run, self.env) for w in fc.argv]
        for w in words:
            argv.append(w)
            kinds.append(NOKINDS)
        return len(words)

    def apply_effects(self, argv: list[str], stdin: str | None) -> None:
        """What a command changes in the shell the next commands see: the directory (``cd``,
        ``pushd``), variables (``printf -v``, ``read``) and positional parameters (``set --``,
        ``shift``)."""
        if argv and argv[0] in ("cd", "pushd"):
            self.change_dir(argv[1:])
        elif argv[:2] == ["printf", "-v"] and len(argv) >= 4:
            self.env[argv[2]] = printf_output(argv[3], argv[4:])
        elif argv[:1] == ["read"] and stdin is not None:
            self.read_into(argv[1:], stdin)
        elif argv[:1] in (["mapfile"], ["readarray"]) and stdin is not None:
            self.map_into(argv[1:], stdin)
        elif argv[:2] == ["set", "--"]:
            for n, v in enumerate(argv[2:], 1):
                self.env[str(n)] = v
            self.env["@"] = ARGSEP.join(argv[2:])
            self.env["*"] = " ".join(argv[2:])
        elif argv[:1] == ["shift"] and "@" in self.env and UNKNOWN not in self.env["@"]:
            n = int(argv[1]) if len(argv) > 1 and argv[1].isdigit() else 1
            words = (self.env["@"].split(ARGSEP) if self.env["@"] else [])[n:]
            for i in range(1, 10):
                self.env[str(i)] = words[i - 1] if i <= len(words) else ""
            self.env["@"] = ARGSEP.join(words)
            self.env["*"] = " ".join(words)
            self.env["#"] = str(len(words))

    def file_text(self, path: str) -> str | None:
        """What file ``path`` holds: written on the line from literal text, or read by the core from
        the task (then the core is asked for it first)."""
        if path in self.files:
            return self.files[path]
        if self.read is None or UNKNOWN in path or not path:
            return None
        return self.read(path, self.cwd)

    def remember_file(self, argv: list[str], redirects: list[tuple[str, str]], stdin: str | None) -> None:
        """``echo 'delete ns prod' > args`` (or ``cat > f <<EOF``): what the file holds, for a later
        ``$(cat args)`` / ``$(< args)`` on the line."""
        for op, target in redirects:
            if op not in (">", ">>", ">|") or UNKNOWN in target:
                continue
            text = echo_output(argv)
            if text is None and argv == ["cat"] and stdin is not None:
                text = stdin
            if text is None:
                self.files.pop(target, None)
            else:
                self.files[target] = (self.files.get(target, "") + text) if op == ">>" else text

    def joined(self, end: int, start: int) -> bool:
        """Two tree-sitter words are one shell word: nothing between them, or only line
        continuations (``r\\<newline>m`` is ``rm``)."""
        if end < 0:
            return False
        gap = self.src[end:start]
        return not gap or (gap.replace(b"\\\n", b"") == b"" and end < start)

    def read_into(self, args: list[str], text: str) -> None:
        """``read -r a b <<< "..."``: the variables get the words of the first line."""
        names = getopt(args, "dinNptu")[1]  # -a's array name stays among them (the last)
        line = text.split("\n", 1)[0]
        if not names:
            names = ["REPLY"]
        ifs = self.env.get("IFS", " \t\n")
        if UNKNOWN in ifs or not ifs.strip(" \t\n"):
            words = line.split(None, len(names) - 1)
        else:  # ``IFS=, read -r c d <<< 'rm,x'``: fields end at IFS characters
            words = re.split("[" + re.escape(ifs) + "]", line.strip(" \t"), maxsplit=len(names) - 1)
        if "-a" in args or any(re.fullmatch(r"-[a-zA-Z]*a", a) for a in args):  # ``read -ra a``: an array of the words
            self.arrays[names[-1]] = line.split()
            self.env[names[-1]] = line.split()[0] if line.split() else ""
            return
        for i, n in enumerate(names):
            self.env[n] = words[i] if i < len(words) else ""

    def map_into(self, args: list[str], text: str) -> None:
        """``mapfile -t a <<< "..."`` / ``readarray``: the array gets the lines of the input."""
        names = getopt(args, "dnOsuCc")[1]
        name = names[-1] if names else "MAPFILE"
        strip = any(re.fullmatch(r"-[a-zA-Z]*t[a-zA-Z]*", a) for a in args)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        items = lines if strip else [x + "\n" for x in lines]
        self.arrays[name] = items
        self.keyed.pop(name, None)
        self.env[name] = items[0] if items else ""

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
        append = any(not c.is_named and self.text(c) == "+=" for c in node.children)
        if value_node.type == "array":
            items = [w for c in value_node.children if c.is_named for w, _ in self.word(c, depth + 1)]
            keyed = {m.group(1): m.group(2) for x in items if (m := _KEYED.match(x))}
            if keyed:  # ``declare -A m=([k]=aws)``, ``a=([0]=rm [1]=-rf)``: ${m[k]} is aws
                self.keyed[name] = {**self.keyed.get(name, {}), **keyed} if append else keyed
                items = [m.group(2) if (m := _KEYED.match(x)) else x for x in items]
            elif not append:
                self.keyed.pop(name, None)
            # ``a+=(x y)`` appends elements
            self.arrays[name] = self.arrays.get(name, [self.env[name]] if self.env.get(name) else []) + items if append else items
        value = "".join(p.text for p in pieces)
        if append and value_node.type != "array":  # ``a+=x`` appends to the string (element 0)
            value = self.env.get(name, "") + value
        elif append and name in self.arrays:
            value = " ".join(self.arrays[name])
        if name == "PROMPT_COMMAND" or name in ("PS0", "PS1", "PS2", "PS4") and _CODE_IN_VALUE.search(value):
            # bash runs PROMPT_COMMAND before each prompt and expands $( ) in the prompts (PS4 under set -x)
            self.nested(value, depth + 1)
        elif name in ("BASH_ENV", "ENV") and value and UNKNOWN not in value:
            # every non-interactive bash (BASH_ENV) / interactive sh (ENV) started with it sources the file
            kinds = frozenset().union(*(p.kinds for p in pieces)) if pieces else NOKINDS
            if "procsub" in kinds and self.procsub_text is not None:  # ``BASH_ENV=<(echo 'code')``
                self.cmds.append(Cmd(["sh"], [NOKINDS], self.text(node), stdin_text=self.procsub_text, cwd=self.cwd))
            else:
                self.cmds.append(
                    Cmd(["source", value], [NOKINDS, kinds], self.text(node), cwd=self.cwd, function=self.func)
                )
        # a value that keeps doubling (``a=$a$a``) must not eat memory: past a cap it is unknown
        self.env[name] = value if len(value) <= MAX_VALUE else UNKNOWN
        k = frozenset().union(*(p.kinds for p in pieces)) if pieces else NOKINDS
        if k:
            self.env_kinds[name] = k
        else:
            self.env_kinds.pop(name, None)

    def declaration(self, node: Node, depth: int) -> None:
        nameref = any(
            c.type == "word" and re.fullmatch(r"-[a-zA-Z]*n[a-zA-Z]*", self.text(c)) for c in node.children
        )
        for c in node.children:
            if c.type == "variable_assignment":
                if nameref:  # ``declare -n r=a``: $r is $a from now on
                    ref = self.text(c).split("=", 1)
                    target = unescape_unquoted(ref[1].strip("'\"")) if len(ref) == 2 else ""
                    if re.fullmatch(r"[A-Za-z_]\w*", target):
                        self.namerefs[ref[0]] = target
                    else:
                        self.namerefs[ref[0]] = "\x00"
                    continue
                self.assign(c, depth + 1)
            elif c.type in ("command_substitution", "process_substitution"):
                self.substitution(c, depth + 1)  # ``export A $(cmd)``: a bare operand that runs
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
                self.bodies[name] = self.text(c)
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

    def nested(self, code: str, depth: int) -> list[Cmd]:
        """Walk ``code`` (text that bash runs as code at this point: backticks in a heredoc body,
        ``${x@P}`` of a value holding ``$( )``, an array subscript in arithmetic) as part of the line."""
        self.tick(depth)
        src = code.encode("utf-8", "replace")
        w = _Walker(src, None, self.classify, self.cwd, self.read)
        w.env, w.env_kinds, w.arrays, w.namerefs, w.bodies = self.env, self.env_kinds, self.arrays, self.namerefs, self.bodies
        w.keyed, w.files = self.keyed, self.files
        w.nodes, w.func, w.forever, w.loop, w.loop_seq = self.nodes, self.func, self.forever, self.loop, self.loop_seq
        w.arith_seen = self.arith_seen
        root = _PARSER.parse(src).root_node
        w.stmt(root, depth + 1)
        cmds = w.cmds
        if root.has_error:
            cmds = cmds + fallback_commands(code, self.env)
        self.nodes, self.loop_seq = w.nodes, w.loop_seq
        self.functions |= w.functions
        self.cmds.extend(cmds)
        return cmds

    def arith_code(self, text: str, depth: int) -> None:
        """Arithmetic evaluates the variables it names, recursively, and the subscripts in their
        values run command substitutions (``v='x[$(rm -rf /)]'; echo $((v))``): walk that code."""
        budget = [64]
        for name in re.findall(r"[A-Za-z_]\w*", text)[:32]:
            self._arith_var(name, depth, budget)

    def _arith_var(self, name: str, depth: int, budget: list[int]) -> None:
        name = self.namerefs.get(name, name)
        value = self.env.get(name)
        if not value or (name, value) in self.arith_seen or budget[0] <= 0:
            return
        budget[0] -= 1
        self.arith_seen.add((name, value))  # shared with nested walks: a value naming itself stops here
        if _CODE_IN_VALUE.search(value):
            self.nested(value, depth + 1)
        for inner in re.findall(r"[A-Za-z_]\w*", value)[:32]:
            self._arith_var(inner, depth + 1, budget)

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
        saved_cwd = self.cwd
        for c in node.children:
            if c.is_named:
                self.stmt(c, depth + 1)
        self.forever = saved_forever
        inner_cwd, self.cwd = self.cwd, saved_cwd  # a subshell: its cd does not change ours
        inner = self.cmds[start:]
        kinds: set[str] = set()
        if self.classify is not None:
            for cmd in inner:
                kinds |= self.classify(cmd)
        value = UNKNOWN
        named = [c for c in node.children if c.is_named]
        read = _file_read(inner[0]) if len(inner) == 1 else None
        if not inner and len(named) == 1 and named[0].type == "file_redirect":
            target = "".join(f for c in named[0].children if c.is_named and c.type != "file_descriptor" for f, _ in self.word(c, depth + 1))
            if self.text(named[0]).lstrip().startswith("<"):
                read = target if target else None
            elif target:  # ``x=$(> /dev/sda)``: the redirect alone still opens (truncates) its target
                op = "".join(self.text(c) for c in named[0].children if not c.is_named)
                self.cmds.append(Cmd([], [], self.text(node), [(op, target)], cwd=self.cwd, function=self.func))
        text = self.file_text(read) if read is not None else None
        if text is not None:  # ``$(cat f)`` / ``$(< f)`` of a file written on the line or read from the task
            value = text.rstrip("\n")
        elif len(inner) == 1 and inner[0].argv == ["cat"] and inner[0].stdin_text is not None:
            value = inner[0].stdin_text.rstrip("\n")  # ``$(cat <<EOF … EOF)``
        elif len(inner) == 1:
            printed = echo_output(inner[0].argv)
            if printed is not None:
                value = printed.rstrip("\n")
            elif _LOOKUP.fullmatch(" ".join(inner[0].argv)):  # ``$(which python3)``: that program's path
                value = "/usr/bin/" + inner[0].argv[-1]
            else:
                value = path_output(inner[0].argv, inner_cwd)
        elif len(inner) >= 2 and inner[-1].argv == ["pwd"] and all(c.argv[:1] in (["cd"], ["pushd"]) for c in inner[:-1]):
            value = inner_cwd if inner_cwd is not None and UNKNOWN not in inner_cwd else UNKNOWN
        elif inner and all(c.upstream or i == 0 for i, c in enumerate(inner)):
            printed = pipe_output([c.argv for c in inner])
            if printed is not None:
                value = printed.rstrip("\n")
        if value == UNKNOWN:
            kinds.add("opaque")
        if node.type == "process_substitution":
            self.procsub_text = None if value == UNKNOWN else value + "\n"
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
                parts = p.text.split(ARGSEP) if p.at else self.ifs_split(p.text.replace(ARGSEP, " "))
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
                    out.append(_Piece(unescape_dq(self.text(c))))
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
            name = self.namerefs.get(name, name)
            return [
                _Piece(
                    self.env.get(name, UNKNOWN),
                    split=not quoted or name in ("@", "*"),
                    at=quoted and name == "@",
                    kinds=self.env_kinds.get(name, NOKINDS),
                )
            ]
        if t == "expansion":
            return [self.expansion(node, depth, quoted)]
        if t in ("command_substitution", "process_substitution"):
            value, kinds = self.substitution(node, depth + 1)
            return [_Piece(value, split=not quoted, kinds=kinds)]
        if t == "arithmetic_expansion":
            self.substitutions_in(node, depth + 1)
            self.arith_code(self.text(node), depth + 1)
            number = arithmetic(self.text(node), self.env)
            return [_Piece(UNKNOWN if number is None else str(number), kinds=_ARITH if number is None else NOKINDS)]
        if t == "brace_expression":
            return [_Piece(self.text(node), brace=not quoted)]
        if t == "array":
            vals: list[str] = []
            for c in node.children:
                if c.is_named:
                    vals.extend(p.text for p in self.pieces(c, depth + 1, quoted))
            return [_Piece(" ".join(vals), split=not quoted)]
        text = self.text(node)
        if node.child_count and t not in ("word", "number"):
            self.substitutions_in(node, depth + 1)
        if quoted:
            return [_Piece(text)]
        return [_Piece(unescape_unquoted(text), brace="{" in text)]

    def expansion(self, node: Node, depth: int, quoted: bool) -> _Piece:
        name = ""
        op = ""
        subscript = ""
        arg_nodes: list[Node] = []
        length = False
        indirect = False
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
            elif ct == "!" and not name:
                indirect = True
            elif not name:
                continue
            elif not c.is_named and not op:
                op = self.text(c)
            else:
                arg_nodes.append(c)
        name = self.namerefs.get(name, name)
        if indirect:
            # ``${!ref}``: the variable named by $ref (``${!p*}`` / ``${!a[@]}`` list names or keys)
            if op or subscript:
                return _Piece(UNKNOWN, split=not quoted, kinds=OPAQUE)
            target = self.env.get(name)
            if target is None or not re.fullmatch(r"[A-Za-z_]\w*|[0-9]+|[@*#?$!-]", target):
                return _Piece(UNKNOWN, split=not quoted, kinds=OPAQUE)
            name = self.namerefs.get(target, target)
        value = self.env.get(name)
        kinds = self.env_kinds.get(name, NOKINDS)
        if name == UNKNOWN:
            return _Piece(UNKNOWN, split=not quoted, kinds=OPAQUE)
        if (subscript in ("@", "*") or name in ("@", "*") and not subscript) and op == ":" and not length:
            # ``"${a[@]:1}"``, ``"${@:2}"``: a slice of the elements (of the positional parameters, $0 first)
            return self.slice(name, subscript, arg_nodes, depth, quoted, kinds)
        if subscript in ("@", "*"):
            if name in self.arrays and all(UNKNOWN not in x for x in self.arrays[name]):
                # ``"${a[@]}"``: one word per element
                return _Piece(ARGSEP.join(self.arrays[name]), split=True, at=quoted and subscript == "@", kinds=kinds)
            return _Piece(value if value is not None else UNKNOWN, split=True, kinds=kinds)
        if name == "@" and not op and not length:
            return _Piece(value if value is not None else UNKNOWN, split=True, at=quoted, kinds=kinds)
        if subscript and name in self.keyed and subscript.strip("'\"") in self.keyed[name]:
            return _Piece(self.keyed[name][subscript.strip("'\"")], split=not quoted, kinds=kinds)
        if subscript and re.fullmatch(r"-?\d+", subscript) and name in self.arrays:
            items = self.arrays[name]
            i = int(subscript)  # ``${a[-1]}``: counted from the end
            return _Piece(items[i] if -len(items) <= i < len(items) else "", split=not quoted, kinds=kinds)
        if subscript:
            self.arith_code(subscript, depth)
        if length:
            return _Piece(str(len(value)) if value is not None and UNKNOWN not in value else UNKNOWN)
        if op in ("/", "//", "/#", "/%"):
            return self.replace(value, op, arg_nodes, depth, quoted, kinds)
        arg = "".join(p.text for n in arg_nodes for p in self.pieces(n, depth + 1, True)) if arg_nodes else ""
        if op in ("%", "%%", "#", "##") and arg_nodes and all(n.type == "regex" for n in arg_nodes):
            # tree-sitter's pattern node leaves out leading blanks (``${x%% *}``): the source after the operator
            close = node.children[-1].start_byte if node.children and self.text(node.children[-1]) == "}" else node.end_byte
            start = next(c.end_byte for c in node.children if not c.is_named and self.text(c) == op)
            arg = self.src[start:close].decode("utf-8", "replace")
        known = value is not None and UNKNOWN not in value
        if op in (":-", "-", ":=", "="):
            if value is None or (op.startswith(":") and value == ""):
                value = arg
                if op in (":=", "=") and name and not subscript:  # ``: ${Q:=rm}`` assigns Q
                    self.env[name] = arg
        elif op in (":+", "+"):
            value = arg if value else ("" if value is not None else UNKNOWN)
        elif op in ("%", "%%", "#", "##") and value is not None and UNKNOWN not in value and UNKNOWN not in arg:
            value = trim_pattern(value, arg, op)
        elif op == ":" and value is not None and UNKNOWN not in value:
            nums = [int(x) for x in re.findall(r"-?\d+", arg)][:2]
            if nums:
                s = nums[0]
                value = value[s : s + nums[1]] if len(nums) > 1 else value[s:]
            else:
                value = UNKNOWN
        elif op in (",,", "^^", ",", "^", "~~", "~") and known and value is not None:
            value = case_convert(value, op, arg)
        elif op == "@" and known and value is not None:
            flag = arg.strip()
            if flag == "P" and _CODE_IN_VALUE.search(value):  # prompt expansion runs $( ) and backticks
                self.nested(value, depth + 1)
                value = UNKNOWN
                kinds = kinds | OPAQUE
            elif flag in ("U", "u", "L"):
                value = case_convert(value, {"U": "^^", "u": "^", "L": ",,"}[flag], "")
            elif flag == "E":
                value = decode_escapes(value)
            elif flag in ("Q", "P", "A", "K", "k", "a"):
                value = UNKNOWN if flag != "P" else value
                kinds = kinds | (OPAQUE if flag != "P" else NOKINDS)
            else:
                value = UNKNOWN
                kinds = kinds | OPAQUE
        elif op in (":?", "?"):
            pass
        elif op:
            value = UNKNOWN
            kinds = kinds | OPAQUE
        return _Piece(UNKNOWN if value is None else value, split=not quoted, kinds=kinds)

    def slice(self, name: str, subscript: str, arg_nodes: list[Node], depth: int, quoted: bool, kinds: Kinds) -> _Piece:
        """``${a[@]:off:len}`` / ``${@:off:len}``: the elements from ``off`` (negative: from the end)."""
        opaque = _Piece(UNKNOWN, split=True, kinds=kinds | OPAQUE)
        if subscript:
            items = self.arrays.get(name)
            if items is None:
                items = [self.env[name]] if self.env.get(name) else []
        else:  # positional parameters: ${@:0} starts with $0
            at = self.env.get("@")
            if at is None:
                items = None
            else:
                items = [self.env.get("0", "bash")] + (at.split(ARGSEP) if at else [])
        arg = "".join(p.text for n in arg_nodes for p in self.pieces(n, depth + 1, True))
        nums = re.fullmatch(r"\s*(-?\d+)\s*(?::\s*(-?\d+)\s*)?", arg)
        if items is None or nums is None or any(UNKNOWN in x for x in items):
            return opaque
        off = int(nums.group(1))
        start = off if off >= 0 else max(len(items) + off, 0)
        part = items[start:]
        if nums.group(2) is not None:
            n = int(nums.group(2))
            part = part[:n] if n >= 0 else part[: max(len(part) + n, 0)]
        return _Piece(ARGSEP.join(part), split=True, at=quoted and (subscript == "@" or name == "@"), kinds=kinds)

    def replace(
        self, value: str | None, op: str, arg_nodes: list[Node], depth: int, quoted: bool, kinds: Kinds
    ) -> _Piece:
        """``${a/pat/rep}``, ``${a//pat/rep}``, ``${a/#pat/rep}``, ``${a/%pat/rep}``."""
        pat_nodes: list[Node] = []
        rep_nodes: list[Node] = []
        seen_sep = False
        for n in arg_nodes:
            if not n.is_named and self.text(n) == "/" and not seen_sep:
                seen_sep = True
            elif seen_sep:
                rep_nodes.append(n)
            else:
                pat_nodes.append(n)
        pattern = "".join(
            self.text(n) if n.type == "regex" else "".join(p.text for p in self.pieces(n, depth + 1, True))
            for n in pat_nodes
        )
        replacement = "".join(p.text for n in rep_nodes for p in self.pieces(n, depth + 1, True))
        opaque = _Piece(UNKNOWN, split=not quoted, kinds=kinds | OPAQUE)
        if value is None or UNKNOWN in value or UNKNOWN in pattern or UNKNOWN in replacement:
            return opaque
        if re.search(r"[$`]", pattern):
            return opaque
        rx = glob_regex(unescape_unquoted(pattern)) if pattern else None
        if pattern and rx is None:
            return opaque
        out = value
        if rx is not None:
            out = pattern_replace(value, rx, op, replacement)
        return _Piece(out, split=not quoted, kinds=kinds)


def _file_read(cmd: Cmd) -> str | None:
    """The file a ``$( )`` prints whole: ``cat f`` or ``< f``."""
    if len(cmd.argv) == 2 and cmd.argv[0] == "cat" and not cmd.argv[1].startswith("-"):
        return cmd.argv[1]
    if not cmd.argv and [op for op, _ in cmd.redirects] == ["<"]:
        return cmd.redirects[0][1]
    return None


def _drop_prefix(argv: list[str], kinds: list[Kinds]) -> None:
    """Drop what tree-sitter misread as the program: the ``{`` of ``f(){ rm …`` (a group) and
    ``coproc`` (``coproc cmd``, ``coproc NAME { …; }``, ``coproc { …; }``: bash runs what follows)."""
    while argv[:1] == ["{"] and len(argv) > 1:
        del argv[0]
        del kinds[0]
    if argv[:1] == ["coproc"]:
        drop = 1
        if len(argv) > 2 and argv[2] in ("{", "(", "((") and argv[1] not in ("{", "("):
            drop = 2
        if len(argv) > drop and argv[drop] in ("{", "("):
            drop += 1
        del argv[:drop]
        del kinds[:drop]


# -- entry point -----------------------------------------------------------------------------


def parse(
    text: str,
    *,
    env: dict[str, str] | None = None,
    classify: Classifier | None = None,
    cwd: str | None = None,
    read: Reader | None = None,
    arrays: dict[str, list[str]] | None = None,
) -> Script:
    """Parse normalised bash text into the simple commands that would run."""
    if not text.isascii():
        # see normalize.py: tree-sitter-bash may crash outside the BMP; payloads decoded from
        # $'\U...' escapes reach here without passing normalize()
        text = _ASTRAL.sub("\ufffd", text).encode("utf-8", "replace").decode("utf-8")
    if "coproc" in text:
        # ``coproc [NAME] { …; }`` / ``coproc [NAME] ( … )``: tree-sitter-bash does not know the keyword
        # and misreads the compound command; bash runs it (in the background), so read it without it
        text = _COPROC.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), text)
    if "time" in text or "!" in text:
        text = _TIMED_DEF.sub(lambda m: m.group(1) + " " * (len(m.group(0)) - len(m.group(1))), text)
    src = text.encode("utf-8")
    tree = _PARSER.parse(src)
    root = tree.root_node
    w = _Walker(src, env, classify, cwd, read)
    if arrays:  # arrays of the task's shell state (``"${A[@]}"`` one word per element)
        w.arrays.update({k: list(v) for k, v in arrays.items()})
    w.stmt(root, 0)
    cmds = w.cmds
    if root.has_error:
        cmds = cmds + fallback_commands(text, w.env)
    return Script(cmds, w.functions, root.has_error, w.bodies)

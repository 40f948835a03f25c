"""The error-tolerant lexer: simple commands from text tree-sitter could not parse.

Quotes are honoured and operators split; nothing nested is understood.  The tree walk also uses
it to re-read one shell word that tree-sitter split in two.
"""

from __future__ import annotations

import re

from .model import DEFAULT_ENV, NOKINDS, UNKNOWN, Cmd, Kinds
from .words import brace_expand, decode_escapes, unescape_dq

_OPAQUE: Kinds = frozenset({"opaque"})
_OPS = re.compile(r"(\|\||&&|;;|[;&|()\n`]|\$\(|<\(|>\()")
_REDIR = re.compile(r"\d*(<<<|<<-?|<>|>>|>\||&>>|&>|>&|<&|>|<)(?![(])")


def fallback_commands(text: str, env: dict[str, str] | None = None) -> list[Cmd]:
    """A crude lexer for input tree-sitter could not parse: quotes honoured, operators split."""
    cmds: list[Cmd] = []
    words: list[str] = []
    word_kinds: list[Kinds] = []
    opaque = False  # the word being read holds an expansion the lexer does not evaluate
    buf: list[str] = []
    in_word = False
    i, n = 0, len(text)
    variables = dict(DEFAULT_ENV)
    if env:
        variables.update(env)

    pending_redirect: list[str] = []
    redirects: list[tuple[str, str]] = []

    def flush_word() -> None:
        nonlocal in_word, opaque
        if in_word:
            w = "".join(buf)
            buf.clear()
            in_word = False
            k = _OPAQUE if opaque else NOKINDS
            opaque = False
            if pending_redirect:
                redirects.append((pending_redirect.pop(), w))
                return
            new = brace_expand(w) if "{" in w else [w]
            words.extend(new)
            word_kinds.extend([k] * len(new))

    def flush_cmd() -> None:
        flush_word()
        pending_redirect.clear()
        while words[:1] == ["{"] and len(words) > 1:  # a group's ``{`` is not a program
            del words[0]
            del word_kinds[0]
        if words or redirects:
            cmds.append(Cmd(list(words), list(word_kinds), " ".join(words), list(redirects), fallback=True))
            words.clear()
            word_kinds.clear()
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
            j = _closing(text, i + 1, '"')
            buf.append(unescape_dq(text[i + 1 : j]))
            in_word = True
            i = j + 1
        elif ch == "$" and text.startswith("$'", i):
            j = _closing(text, i + 2, "'")
            buf.append(decode_escapes(text[i + 2 : j]))
            in_word = True
            i = j + 1
        elif ch == "\\" and i + 1 < n:
            if text[i + 1] != "\n":  # a line continuation joins the word's halves
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
            if text.startswith("${", i) and not re.match(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", text[i:]):
                # ``${a~~}``, ``${!r}``, ``${a/X/r}``…: an operator the lexer does not evaluate
                depth, j = 0, i + 1
                while j < n:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    if depth == 0:
                        break
                    j += 1
                buf.append(UNKNOWN)
                in_word = opaque = True
                i = j + 1
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


def _closing(text: str, j: int, quote: str) -> int:
    """Where the string opened before ``j`` closes with ``quote`` (a backslash escapes the next
    character), or past the end when it does not."""
    n = len(text)
    while j < n and text[j] != quote:
        j += 2 if text[j] == "\\" else 1
    return j

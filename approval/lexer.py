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
    variables = dict(DEFAULT_ENV)
    if env:
        variables.update(env)
    lexer = _Lexer(text, variables)
    i, n = 0, len(text)
    while i < n:
        i = lexer.step(i)
    lexer.flush_cmd()
    return lexer.cmds


class _Lexer:
    """One fallback read: the commands found so far, the command and the word being read."""

    def __init__(self, text: str, variables: dict[str, str]) -> None:
        self.text = text
        self.variables = variables
        self.cmds: list[Cmd] = []
        self.words: list[str] = []
        self.word_kinds: list[Kinds] = []
        self.opaque = False  # the word being read holds an expansion the lexer does not evaluate
        self.buf: list[str] = []
        self.in_word = False
        self.pending_redirect: list[str] = []
        self.redirects: list[tuple[str, str]] = []

    def step(self, i: int) -> int:
        """Read what starts at ``i``: a quoted string or escape, a separator (blank, comment,
        redirect, operator), an expansion or one plain character; where the next read starts."""
        ch = self.text[i]
        j = self.quoted(i, ch)
        if j is None:
            j = self.separator(i, ch)
        if j is None:
            j = self.expansion(i)
        if j is None:
            self.add(ch)
            j = i + 1
        return j

    def add(self, part: str) -> None:
        """Text of the word being read."""
        self.buf.append(part)
        self.in_word = True

    def quoted(self, i: int, ch: str) -> int | None:
        """``'…'``, ``"…"``, ``$'…'`` or a backslash escape at ``i``: its text joins the word; where
        the next read starts, or None when ``i`` opens none of them."""
        text, n = self.text, len(self.text)
        if ch == "'":
            j = text.find("'", i + 1)
            j = n if j < 0 else j
            self.add(text[i + 1 : j])
        elif ch == '"':
            j = _closing(text, i + 1, '"')
            self.add(unescape_dq(text[i + 1 : j]))
        elif ch == "$" and text.startswith("$'", i):
            j = _closing(text, i + 2, "'")
            self.add(decode_escapes(text[i + 2 : j]))
        elif ch == "\\" and i + 1 < n:
            if text[i + 1] != "\n":  # a line continuation joins the word's halves
                self.add(text[i + 1])
            return i + 2
        else:
            return None
        return j + 1

    def separator(self, i: int, ch: str) -> int | None:
        """A blank, a comment, a redirect operator or a command separator at ``i`` ends the word
        (or the command); where the next read starts, or None when there is none."""
        text = self.text
        if ch in " \t":
            self.flush_word()
            return i + 1
        if ch == "#" and not self.in_word:
            j = text.find("\n", i)
            return len(text) if j < 0 else j
        m = _REDIR.match(text, i) if not self.in_word or ch in "<>" else None
        if m:
            self.flush_word()
            self.pending_redirect.append(m.group(1))
            return m.end()
        m = _OPS.match(text, i)
        if m:
            self.flush_cmd()
            return m.end()
        return None

    def expansion(self, i: int) -> int | None:
        """``$name``/``${name}`` (its value, split on blanks) or an operator expansion the lexer does
        not evaluate (UNKNOWN) at ``i``; where the next read starts, or None when there is none."""
        text, n = self.text, len(self.text)
        if text.startswith("${", i) and not re.match(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", text[i:]):
            # ``${a~~}``, ``${!r}``, ``${a/X/r}``…: an operator the lexer does not evaluate
            depth, j = 0, i + 1
            while j < n:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    break
                j += 1
            self.add(UNKNOWN)
            self.opaque = True
            return j + 1
        m = re.match(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text[i:])
        if m:
            value = self.variables.get(m.group(1), UNKNOWN)
            for k, part in enumerate(re.split(r"[ \t\n]", value)):
                if k:
                    self.flush_word()
                if part:
                    self.add(part)
            return i + m.end()
        return None

    def flush_word(self) -> None:
        """The word being read ends: it becomes a redirect's target or the command's next
        words (brace-expanded)."""
        if self.in_word:
            w = "".join(self.buf)
            self.buf.clear()
            self.in_word = False
            k = _OPAQUE if self.opaque else NOKINDS
            self.opaque = False
            if self.pending_redirect:
                self.redirects.append((self.pending_redirect.pop(), w))
                return
            new = brace_expand(w) if "{" in w else [w]
            self.words.extend(new)
            self.word_kinds.extend([k] * len(new))

    def flush_cmd(self) -> None:
        """The command being read ends: it joins the commands found unless it is empty."""
        self.flush_word()
        self.pending_redirect.clear()
        words, word_kinds, redirects = self.words, self.word_kinds, self.redirects
        while words[:1] == ["{"] and len(words) > 1:  # a group's ``{`` is not a program
            del words[0]
            del word_kinds[0]
        if words or redirects:
            self.cmds.append(Cmd(list(words), list(word_kinds), " ".join(words), list(redirects), fallback=True))
            words.clear()
            word_kinds.clear()
            redirects.clear()


def _closing(text: str, j: int, quote: str) -> int:
    """Where the string opened before ``j`` closes with ``quote`` (a backslash escapes the next
    character), or past the end when it does not."""
    n = len(text)
    while j < n and text[j] != quote:
        j += 2 if text[j] == "\\" else 1
    return j

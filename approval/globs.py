"""Bash globs as regular expressions: shared by the parser (``${v%pat}``) and the path rules."""

from __future__ import annotations

import re

_BRACKET = re.compile(r"\[(?:[!^])?\]?(?:\[:[a-z]+:\]|[^\]])*\]")
_CLASSES = {
    "alpha": "a-zA-Z",
    "alnum": "a-zA-Z0-9",
    "digit": "0-9",
    "lower": "a-z",
    "upper": "A-Z",
    "space": r"\s",
    "punct": r"!-/:-@\[-`{-~",
    "xdigit": "0-9a-fA-F",
    "word": r"\w",
    "print": r"\x20-\x7e",
    "graph": r"\x21-\x7e",
}


def glob_regex(pattern: str) -> re.Pattern[str] | None:
    """A bash glob (``*``, ``?``, ``[a-z]``, ``[!.]``, ``[[:alpha:]]``) as a regex, or None if malformed."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            out.append(".*")
        elif c == "?":
            out.append(".")
        elif c == "[":
            m = _BRACKET.match(pattern, i)
            if not m:
                out.append(re.escape(c))
            else:
                body = m.group(0)[1:-1]
                neg = body[:1] in ("!", "^")
                if neg:
                    body = body[1:]
                body = re.sub(r"\[:([a-z]+):\]", lambda k: _CLASSES.get(k.group(1), r"\s\S"), body)
                body = "".join("\\" + ch if ch in "\\^][" else ch for ch in body) if "[:" not in body else body
                out.append("[" + ("^" if neg else "") + body + "]")
                i = m.end()
                continue
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    try:
        return re.compile("".join(out), re.S)
    except re.error:
        return None


__all__ = ["glob_regex"]

"""sed, read once: the scripts a sed command line carries and the commands in them that run code.

GNU sed runs shell code two ways: the ``e`` command (``e CMD`` runs CMD, ``e`` alone runs the
pattern space) and the ``s///e`` flag (runs the pattern space after the substitution).  Two checks
need to know: the handoff rule (``tools/handoff.py``) judges the code they run, and the
interactive check (``interactive.py``) asks whether sed runs lines of its input at all.

:func:`sed_args` reads the command line (``-e``, ``--expression=`` and its prefixes such as
``--expr``, ``-f``/``--file``, clusters such as ``-ne SCRIPT``/``-es///``, ``-i[SUFFIX]``,
``--sandbox``, else the first operand is the script).  :func:`read_script` reads one script the way
sed does (addresses, ``!``, ``{}``/``;``/newline separators, ``a``/``i``/``c`` text and ``r``/``w``
file names to the end of the line, labels to ``;`` or the end of the line, ``s`` and ``y`` with any
delimiter) and returns its ``e`` and ``s`` commands; a script it cannot read to the end is marked
incomplete and callers fail closed.  :func:`commands_anywhere` finds, with the same command
readers, every ``e``/``s`` that starts where a command could start, even inside text sed takes as an
argument: a superset for the handoff judge, which must not hinge on where such text ends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SedArgs:
    """What a sed command line says about its scripts."""

    scripts: tuple[str, ...]  # the scripts given as text (``-e``, ``--expression``, first operand)
    from_file: bool  # a script comes from a file (``-f``, ``--file``): the gate cannot see it
    sandbox: bool  # ``--sandbox``: sed refuses ``e``, ``r`` and ``w``
    files: tuple[str, ...] = ()  # the script files named by ``-f``/``--file`` (read by the caller)


def _long(a: str, name: str, shortest: int) -> bool:
    """Whether ``a`` (before any ``=``) spells the long option ``name``: getopt takes any
    unambiguous prefix (``--expr`` is ``--expression``), here at least ``shortest`` characters."""
    given = a.split("=", 1)[0]
    return len(given) >= shortest and name.startswith(given)


def sed_args(args: list[str]) -> SedArgs:
    """Read sed's options (``args`` without the program name)."""
    scripts: list[str] = []
    from_file = False
    files: list[str] = []
    i = 0
    operands: list[str] = []
    while i < len(args):
        a = args[i]
        if a.startswith("--") and len(a) > 2:
            with_value = "=" in a
            if _long(a, "--expression", 3):  # --e is unambiguous
                value = a.split("=", 1)[1] if with_value else (args[i + 1] if i + 1 < len(args) else None)
                if value is not None:
                    scripts.append(value)
            elif _long(a, "--file", 4):  # --f could be --follow-symlinks
                from_file = True
                value = a.split("=", 1)[1] if with_value else (args[i + 1] if i + 1 < len(args) else None)
                if value is not None:
                    files.append(value)
            elif not _long(a, "--line-length", 3):
                i += 1  # an option without an argument
                continue
            i += 1 if with_value else 2
            continue
        if a.startswith("-") and len(a) > 1:
            letters = a[1:]
            for k, ch in enumerate(letters):
                if ch == "i":  # -i[SUFFIX]: the rest of the word is the suffix
                    break
                if ch in "efl":  # -e SCRIPT, -f FILE, -l N: the rest of the word or the next one
                    value = letters[k + 1 :]
                    if not value:
                        value = args[i + 1] if i + 1 < len(args) else ""
                        i += 1
                    if ch == "e":
                        scripts.append(value)
                    elif ch == "f":
                        from_file = True
                        files.append(value)
                    break
        else:
            operands.append(a)
        i += 1
    if not scripts and not from_file and operands:
        scripts.append(operands[0])
    return SedArgs(tuple(scripts), from_file, "--sandbox" in args, tuple(files))


@dataclass(frozen=True, slots=True)
class SedCommand:
    """An ``e`` or ``s`` command of a sed script."""

    letter: str  # "e" or "s"
    at: int  # where its letter stands in the script
    text: str = ""  # e: the rest of its line (the command it runs; blank: the pattern space)
    regex: str = ""  # s: the pattern, the replacement (the delimiter unescaped) and the flags
    replacement: str = ""
    flags: str = ""

    @property
    def runs_shell(self) -> bool:
        """``e``, or ``s`` with the ``e`` flag (a ``w`` flag's file name is no flag)."""
        return self.letter == "e" or "e" in self.flags.split("w", 1)[0]


@dataclass(frozen=True, slots=True)
class SedScript:
    commands: tuple[SedCommand, ...]  # the e and s commands, in order
    complete: bool  # False: the script could not be read to its end (fail closed)

    @property
    def executes(self) -> bool:
        """Whether the script may run shell code (an ``e`` command, an ``s///e``, or unreadable)."""
        return not self.complete or any(c.runs_shell for c in self.commands)


def read_script(script: str) -> SedScript:
    """The ``e`` and ``s`` commands of one sed script, and whether it could be read to its end.

    Separators (``;``, newlines, ``{``, ``}``, ``!``, blanks) and addresses are stepped over; each
    command letter is read with what it takes.
    """
    s = script
    n = len(s)
    i = 0
    found: list[SedCommand] = []
    while i < n:
        c = s[i]
        if c in " \t\n;{}!":
            i += 1
            continue
        if c.isdigit() or c in "$,~+":  # line addresses, ranges and steps
            i += 1
            continue
        if c == "/" or c == "\\":  # /regex/ or \cregexc addresses
            i = _regex_address_end(s, i)
            if i < 0:
                return SedScript(tuple(found), False)
            continue
        if c == "e":
            cmd, i = _read_e(s, i)
            found.append(cmd)
            continue
        if c in "sy":
            sub, i = _read_s_or_y(s, i)
            if i < 0:
                return SedScript(tuple(found), False)
            if sub is not None:
                found.append(sub)
            continue
        if c in "btT:":  # labels end at ``;`` or the end of the line
            semi = s.find(";", i)
            i = min(_line_end(s, i), n if semi < 0 else semi)
            continue
        if c in "aicrRwW#":  # text, file names and comments: the rest of the line
            i = _line_end(s, i)
            continue
        i += 1
    return SedScript(tuple(found), True)


# where a command may start: the script's start or after ``;``, a newline, ``{`` or ``}``; then an
# address (line, ``$``, ``/re/``, ``\cREc``, with an optional step and second address), ``!``
_ADDRESS = r"(?:\d+(?:~\d+)?|\$|/(?:[^/\\\n]|\\.)*/[IM]*|\\(.)(?:(?!\1).)*\1)?"
_COMMAND_START = re.compile(r"(?:^|[;\n{}])\s*" + _ADDRESS + r"(?:\s*,\s*" + _ADDRESS + r")?\s*!?\s*(?=[es])")


def commands_anywhere(script: str) -> tuple[SedCommand, ...]:
    """Every ``e`` and ``s`` command that starts where a command could start, even inside text sed
    takes as an argument (``a`` text, a file name, ``e``'s own command, a comment, another ``s``).

    For a judge that must not hinge on where such text ends: it gets a superset of
    :func:`read_script`'s commands.  ``e`` must be followed by a blank, ``;``, ``}`` or the end.
    """
    found: dict[int, SedCommand] = {}
    for m in _COMMAND_START.finditer(script):
        i = m.end()
        if i in found:
            continue
        if script[i] == "e":
            if i + 1 < len(script) and script[i + 1] not in " \t\n\r\f\v;}":
                continue
            found[i] = _read_e(script, i)[0]
        else:
            sub, _ = _read_s_or_y(script, i, newlines=True)
            if sub is not None:
                found[i] = sub
    return tuple(found[k] for k in sorted(found))


def _line_end(s: str, j: int) -> int:
    nl = s.find("\n", j)
    return len(s) if nl < 0 else nl


def _regex_end(s: str, j: int, delim: str, newlines: bool = False) -> int:
    """Where the regex starting at ``j`` ends (its closing ``delim``), or -1 (unterminated, or a
    raw newline in it unless ``newlines``)."""
    n = len(s)
    while j < n and s[j] != delim:
        if s[j] == "\\":
            j += 1
        elif s[j] == "\n" and not newlines:
            return -1
        j += 1
    return j if j < n else -1


def _regex_address_end(s: str, i: int) -> int:
    """After the ``/re/`` or ``\\cREc`` address at ``i`` (and its ``I``/``M`` flags), or -1."""
    c = s[i]
    delim = "/" if c == "/" else (s[i + 1] if i + 1 < len(s) else "")
    j = _regex_end(s, i + (1 if c == "/" else 2), delim)
    if j < 0:
        return -1
    j += 1
    while j < len(s) and s[j] in "IM":
        j += 1
    return j


def _read_e(s: str, i: int) -> tuple[SedCommand, int]:
    """``e [command]`` at ``i``: the command is the rest of the line (``;`` belongs to it)."""
    end = _line_end(s, i)
    return SedCommand("e", i, s[i + 1 : end]), end


_FLAGS = re.compile(r"[^;\n}]*")


def _read_s_or_y(s: str, i: int, newlines: bool = False) -> tuple[SedCommand | None, int]:
    """``s/re/replacement/flags`` (an :class:`SedCommand`) or ``y/abc/xyz/`` (None) at ``i``, with
    any delimiter, and where reading goes on; -1 when it is unterminated."""
    if i + 1 >= len(s):
        return None, -1
    delim = s[i + 1]
    mid = _regex_end(s, i + 2, delim, newlines)
    end = _regex_end(s, mid + 1, delim, newlines) if mid >= 0 else -1
    if end < 0:
        return None, -1
    if s[i] == "y":
        return None, end + 1
    flags = _FLAGS.match(s, end + 1)
    text = flags.group(0) if flags else ""
    sub = SedCommand("s", i, "", _unescape(s[i + 2 : mid], delim), _unescape(s[mid + 1 : end], delim), text)
    # ``w FILE`` takes the rest of the line as a file name
    return sub, _line_end(s, end + 1) if "w" in text else end + 1 + len(text)


def _unescape(part: str, delim: str) -> str:
    """A part of an ``s`` command with its escaped delimiters unescaped (other escapes kept)."""
    out: list[str] = []
    j = 0
    while j < len(part):
        ch = part[j]
        if ch == "\\" and j + 1 < len(part):
            nxt = part[j + 1]
            out.append(nxt if nxt == delim else ch + nxt)
            j += 2
            continue
        out.append(ch)
        j += 1
    return "".join(out)

"""Code handed to other programs: tools that run text they are given as shell commands.

sed's ``e`` command and ``s///e`` flag, tar's ``--checkpoint-action=exec=``/``--to-command``/
``--use-compress-program``, git's ``-c alias.x=!…``/``core.sshCommand``/``core.pager``/``core.editor``/
``core.fsmonitor`` (and ``git config`` arming them for later), editors, pagers and debuggers given
shell escapes on the command line (``vim -c '!…'``, ``less +'!…'``, ``gdb -ex 'shell …'``, ``emacs
--eval '(shell-command …)'``), ``make`` reading a makefile from stdin, ``at``/``batch`` scheduling
what they read, Tcl's ``exec``/``spawn`` (expect, tclsh), ssh's ``ProxyCommand``/``LocalCommand``,
``rsync -e``, ``zip -TT`` and a shell reading from ``>( )``.

Whenever the inner code can be extracted it is judged as a command (``d.payload``), so ``sed
's/.*/rm -rf \\/etc/e'`` is ``rm -rf /etc``.  When it cannot (the program runs text the command
line does not hold: an edited line, a hooks directory, a makefile from live input) the command
asks with ``code_handoff``.
"""

from __future__ import annotations

import re
import shlex
from typing import TYPE_CHECKING

from ..awk import awk_args, shell_code
from ..inline import sql_findings
from ..makefiles import makefile_recipes
from ..model import UNKNOWN, Cmd, Kinds
from ..sed import commands_anywhere, sed_args
from ..commands import opt_values
from .base import Ctx, Examples, _opt_value, also
from .git import git_subcommand
from .options import SPECS, parse
from .pipes import EXAMPLES as _PIPE_EXAMPLES
from .pipes import _procsub_text
from .remote import _h_interpreter, _stdin_texts, judge_script

if TYPE_CHECKING:
    from ..detect import Detector


def _read_files(d: Detector, cmd: Cmd, paths: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """The texts of program files a tool reads (``sed -f``, ``awk -f``, ``vim -S``, ``tclsh f``), as the
    core read them from the backend; a file not read yet is named for ``needed_files``."""
    out = []
    for p in paths:
        if p in ("-", "") or UNKNOWN in p:
            continue
        found = d.script_file(p, cmd)
        if found is not None and found.text is not None:
            out.append(found.text)
    return tuple(out)


def _hidden(d: Detector, ctx: Ctx, cmd: Cmd, why: str) -> None:
    d.add(ctx, "code_handoff", cmd.text, why)


def _run(d: Detector, ctx: Ctx, cmd: Cmd, code: str, why: str) -> None:
    """Judge ``code`` as shell code; if any of it is unknown text, ask."""
    if UNKNOWN in code:
        _hidden(d, ctx, cmd, why)
    d.payload(ctx, code, frozenset(), cmd.text)


# -- sed


@also("sed", "gsed")
def _h_sed_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """GNU sed's ``e command`` runs the command, ``e`` alone and the ``s///e`` flag run the pattern
    space: with ``s/.*/CMD/e`` (the whole line replaced) that is CMD, judged as a command; any other
    line run as a command is text the gate cannot see, so it asks.  ``--sandbox`` forbids both."""
    parsed = sed_args(args)
    if parsed.sandbox:
        return
    for script in parsed.scripts + _read_files(d, cmd, parsed.files):
        commands = commands_anywhere(script)
        for c in commands:
            if c.letter != "e":
                continue
            inner = c.text.strip()
            if inner and not inner.startswith("e"):
                _run(d, ctx, cmd, inner, "sed's e command runs shell code the gate cannot read.")
            else:
                _hidden(d, ctx, cmd, "sed's e command runs the edited line as a shell command.")
        for c in commands:
            if c.letter != "s" or "e" not in c.flags:  # (an e in a w flag's file name asks too)
                continue
            whole = c.regex in (".*", "^.*", "^.*$", ".*$", "^.\\+$", ".\\+", "^.*\\n*$")
            code = c.replacement.replace("\\n", "\n")
            if "&" in code.replace("\\&", "") or re.search(r"\\[1-9]", code):
                whole = False
            d.payload(ctx, code, frozenset(), cmd.text)
            if not whole:
                _hidden(d, ctx, cmd, "sed's s///e flag runs the edited line as a shell command.")


# -- tar


@also("tar", "gtar", "bsdtar")
def _h_tar_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """tar runs commands it is given: ``--checkpoint-action=exec=CMD``, ``--to-command=CMD``,
    ``--use-compress-program=CMD``/``-I CMD``, ``--rsh-command=CMD``, ``--info-script``/``-F``/
    ``--new-volume-script`` (a script file), ``--index-file`` aside.  Each is judged as a command.  GNU tar's
    options are read as its parser does (``--to-comm=CMD``, ``--use=CMD``, ``-cvI CMD``, ``cvIf CMD a.tar``)."""
    if name in SPECS:
        p = parse(name, args)
        for action in opt_values(p, "--checkpoint-action"):
            act = re.match(r"(?:exec|execute)=(.*)", action, re.S)
            if act:
                _run(d, ctx, cmd, act.group(1), "tar runs a checkpoint command the gate cannot read.")
        for code in opt_values(p, "--to-command", "-I", "--use-compress-program", "--rsh-command"):
            _run(d, ctx, cmd, code, "tar runs a program the gate cannot read.")
        for script in opt_values(p, "-F", "--info-script", "--new-volume-script"):
            judge_script(d, script, frozenset(), cmd, ctx)
        return
    for i, a in enumerate(args):
        value = None
        if a.startswith("--checkpoint-action="):
            value = a.split("=", 1)[1]
        elif a == "--checkpoint-action" and i + 1 < len(args):
            value = args[i + 1]
        if value is not None:
            m = re.match(r"(?:exec|execute)=(.*)", value, re.S)
            if m:
                _run(d, ctx, cmd, m.group(1), "tar runs a checkpoint command the gate cannot read.")
    for code in (
        _opt_value(args, "", "--to-command")
        + _opt_value(args, "-I", "--use-compress-program")
        + _opt_value(args, "", "--rsh-command")
    ):
        _run(d, ctx, cmd, code, "tar runs a program the gate cannot read.")
    for script in _opt_value(args, "-F", "--info-script") + _opt_value(args, "", "--new-volume-script"):
        judge_script(d, script, frozenset(), cmd, ctx)


# -- git


_GIT_CODE_KEYS = re.compile(
    r"(?i)^(?:core\.(?:sshcommand|pager|editor|askpass|fsmonitor|gitproxy)|sequence\.editor|diff\.external"
    r"|pager\.[\w.-]+|gpg(?:\.\w+)?\.program|credential(?:\..*)?\.helper|uploadpack\.packobjectshook"
    r"|filter\..+\.(?:clean|smudge|process)|diff\..+\.(?:textconv|command)|merge\..+\.driver"
    r"|mergetool\..+\.cmd|difftool\..+\.cmd|web\.browser|browser\..+\.cmd|man\..+\.cmd|sendemail\.\w*cmd)$"
)


def _git_value(d: Detector, ctx: Ctx, cmd: Cmd, key: str, value: str) -> bool:
    """Judge one git config value that is code; True if it arms something worth asking about when
    written to a config (a shell alias, a hooks directory, a command line with shell syntax or one the
    gate flags), False for a plain program (``core.editor vim``, ``core.pager 'less -FRX'``)."""
    low = key.lower()
    if low.startswith("alias."):
        if value.startswith("!"):
            _run(d, ctx, cmd, value[1:], "A git alias runs shell code the gate cannot read.")
            return True
        return False
    if low == "core.hookspath":
        _hidden(d, ctx, cmd, "git runs hooks from a directory the command names; the gate cannot read them.")
        return True
    if _GIT_CODE_KEYS.match(key):
        if low == "core.fsmonitor" and value.lower() in ("true", "false", "0", "1", "yes", "no", ""):
            return False
        if low.startswith("credential") and not value.startswith(("!", "/")):
            return False  # a helper name (store, cache, osxkeychain): git runs git-credential-<name>
        before = len(ctx.out)
        _run(d, ctx, cmd, value.lstrip("!"), f"git runs {key} as a shell command.")
        return len(ctx.out) > before or value.startswith("!") or bool(re.search(r"[;|&$`<>()]|\bsh\b|\bbash\b", value))
    return False


@also("git")
def _h_git_code(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """git settings that are shell code: ``git -c alias.x='!CMD'``, ``-c core.sshCommand=CMD``,
    ``core.pager``, ``core.editor``, ``core.fsmonitor``, ``diff.external``, filters… are judged as
    commands; ``-c core.hooksPath=DIR`` runs hooks the gate cannot read (asks).  ``git config`` of
    such a key arms it for every later git command: a persistence write, and its code is judged."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        a = args[i]
        if a == "-c" and i + 1 < len(args):
            key, _, value = args[i + 1].partition("=")
            _git_value(d, ctx, cmd, key, value)
        i += 2 if a in ("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--config-env") else 1
    sub = git_subcommand(args)
    if sub is None or sub[0] != "config":
        return
    rest = []
    skip = False
    for a in sub[1]:
        if skip:
            skip = False
        elif a in ("-f", "--file", "--blob", "--type", "--default", "--comment"):
            skip = True  # an option's value, not the key
        elif not a.startswith("-"):
            rest.append(a)
    if rest and rest[0] in ("set", "--add"):
        rest = rest[1:]
    if len(rest) >= 2 and _git_value(d, ctx, cmd, rest[0], rest[1]):
        d.add(ctx, "persistence_write", cmd.text, f"git config arms {rest[0]}: it runs on later git commands.")


# -- editors, pagers, debuggers


_VIM_SHELL = re.compile(
    r"^[\s:]*(?:silent!?\s*|exe(?:cute)?\s+['\"])?(?:\d*,?\d*\s*)?(?:r(?:ead)?\s*|w(?:rite)?\s*)?!(.*)$", re.S
)
_VIM_CALL = re.compile(r"\b(?:system|systemlist|jobstart|job_start|term_start|termopen)\s*\(\s*['\"]([^'\"]*)['\"]")


def _vim_command(d: Detector, ctx: Ctx, cmd: Cmd, text: str) -> None:
    for part in text.split("|") if not text.lstrip(" :").startswith(("!", "silent", "r", "w")) else [text]:
        m = _VIM_SHELL.match(part)
        if m:
            _run(d, ctx, cmd, m.group(1).rstrip("'\""), "The editor runs a shell command.")
    for m in _VIM_CALL.finditer(text):
        _run(d, ctx, cmd, m.group(1), "The editor runs a shell command.")
    if re.search(r"(?:^|[\s:|])(?:sh(?:ell)?|term(?:inal)?)\s*$", text):
        _hidden(d, ctx, cmd, "The editor starts a shell.")


@also("vim", "vi", "nvim", "ex", "view", "gvim", "vimdiff", "rvim", "gview", "evim")
def _h_vim_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Vim commands on the command line (``-c CMD``, ``+CMD``, ``--cmd CMD``) that escape to a shell:
    ``:!CMD``, ``:r !CMD``, ``:w !CMD``, ``system("CMD")``, ``:sh``; the shell command is judged."""
    for text in _read_files(d, cmd, [args[i + 1] for i, a in enumerate(args[:-1]) if a == "-S"]):
        for line in text.split("\n"):
            _vim_command(d, ctx, cmd, line)
    for i, a in enumerate(args):
        if a in ("-c", "--cmd") and i + 1 < len(args):
            _vim_command(d, ctx, cmd, args[i + 1])
        elif a.startswith("+") and len(a) > 1:
            _vim_command(d, ctx, cmd, a[1:])


@also("less", "more", "most")
def _h_pager_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``less +'!CMD'`` (a start-up command, also ``+'|…'`` pipes) runs CMD in a shell: judged."""
    for a in args:
        if a.startswith("+") and len(a) > 1:
            body = a[1:].lstrip("+")
            if body.startswith(("!", "|")):
                _run(d, ctx, cmd, body[1:].lstrip("!"), "The pager runs a shell command.")


@also("gdb", "cgdb", "gdb-multiarch", "lldb")
def _h_debugger_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Debugger commands on the command line (``gdb -ex CMD``, ``-iex``, ``--eval-command=``, ``lldb -o``)
    that run a shell (``shell CMD``, ``!CMD``, ``pipe … | CMD``, ``platform shell CMD``): judged."""
    values = (
        _opt_value(args, "-ex", "--eval-command")
        + _opt_value(args, "-iex", "--init-eval-command")
        + (
            _opt_value(args, "-o", "--one-line") + _opt_value(args, "-O", "--one-line-before-file")
            if name == "lldb"
            else []
        )
    )
    for v in values:
        m = re.match(r"\s*(?:shell\s+|!|platform\s+shell\s+)(.*)", v, re.S)
        if m:
            _run(d, ctx, cmd, m.group(1), "The debugger runs a shell command.")
        m = re.match(r"\s*(?:pipe|\|)\s.*?\|\s*(.*)", v, re.S)
        if m:
            _run(d, ctx, cmd, m.group(1), "The debugger pipes output into a shell command.")
        m = re.search(r"\bpython\b.*\bos\.system\(\s*['\"]([^'\"]*)", v)
        if m:
            _run(d, ctx, cmd, m.group(1), "The debugger runs a shell command.")
    for script in _opt_value(args, "-x", "--command") if name != "lldb" else _opt_value(args, "-s", "--source"):
        judge_script(d, script, frozenset(), cmd, ctx, "python" if script.endswith(".py") else "gdb")


@also("emacs", "emacsclient", "xemacs")
def _h_emacs_exec(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``emacs --eval '(shell-command "CMD")'`` (also ``call-process``, ``start-process``,
    ``async-shell-command``): the literal command is judged; one built at run time asks."""
    for i, a in enumerate(args):
        code = (
            a.split("=", 1)[1]
            if a.startswith("--eval=")
            else args[i + 1]
            if a in ("--eval", "-eval", "-e") and i + 1 < len(args)
            else None
        )
        if code is None:
            continue
        for m in re.finditer(r"\((?:async-)?shell-command(?:-to-string)?\s+\"((?:[^\"\\]|\\.)*)\"", code):
            _run(d, ctx, cmd, m.group(1).replace('\\"', '"'), "Emacs runs a shell command.")
        for m in re.finditer(
            r"\((?:call|start)-process(?:-shell-command)?\s+((?:\"(?:[^\"\\]|\\.)*\"\s*|nil\s*|t\s*)+)", code
        ):
            words = [w for w in re.findall(r"\"((?:[^\"\\]|\\.)*)\"", m.group(1))]
            if words:
                _run(d, ctx, cmd, " ".join(words), "Emacs starts a program.")
        if re.search(r"\((?:shell-command|call-process|start-process|make-process)\b(?![^)]*\")", code):
            _hidden(d, ctx, cmd, "Emacs runs a command built at run time.")


# -- make, at, Tcl


def _fed(cmd: Cmd) -> bool:
    """Whether stdin comes from a pipe or a file on the line (an Exec's own stdin is judged by
    ``approval.interactive`` when the caller keeps it open)."""
    return bool(cmd.upstream) or cmd.stdin_text is not None or any(op == "<" for op, _ in cmd.redirects)


@also("make", "gmake", "bmake", "pmake", "remake")
def _h_make_stdin(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """make runs the recipes of a makefile: the one on disk (``-f f``, or the directory's
    ``Makefile``) is read from the task's backend (``GateContext.files``) and its recipes judged as
    commands; ``make -f -`` (or ``-f /dev/stdin``) reads it from stdin: what it was fed (heredoc,
    here-string, ``echo … |``) is judged, input piped from elsewhere asks."""
    files = _opt_value(args, "-f", "--file") + _opt_value(args, "", "--makefile")
    if args[-1:] in (["-f"], ["--file"]) and cmd.stdin_text is not None:
        files.append("-")  # `make -f - <<EOF`: the parser folds the lone `-` into the heredoc
    stdin_files = ("-", "/dev/stdin", "/proc/self/fd/0", "/dev/fd/0")
    where = (_opt_value(args, "-C", "--directory") or [""])[-1]
    if where and UNKNOWN in where:
        return
    for f in files:
        if f not in stdin_files:
            judge_script(
                d, f if f.startswith("/") or not where else where.rstrip("/") + "/" + f, frozenset(), cmd, ctx, "make"
            )
    if not files:  # the makefile in the directory: GNUmakefile, makefile or Makefile, whichever exists
        for f in ("GNUmakefile", "makefile", "Makefile"):
            judge_script(d, where.rstrip("/") + "/" + f if where else f, frozenset(), cmd, ctx, "make", optional=True)
    if not any(f in stdin_files for f in files):
        return
    texts = _stdin_texts(cmd)
    if not texts and _fed(cmd):
        _hidden(d, ctx, cmd, "make reads a makefile from stdin the gate cannot see.")
    for text in texts:
        for recipe in makefile_recipes(text):
            _run(d, ctx, cmd, recipe, "make runs a recipe the gate cannot read.")


@also("at", "batch")
def _h_at(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``at``/``batch`` schedule the shell commands they read (stdin, or ``-f file``): what they were
    fed is judged as a command; input the gate cannot see asks.  Listing and removing jobs pass."""
    if any(a in ("-l", "-r", "-d", "-c", "-V", "--help") for a in args) or name == "at" and not args:
        return
    files = _opt_value(args, "-f", "")
    if files:
        for f in files:
            judge_script(d, f, frozenset(), cmd, ctx, "sh")
        return
    texts = _stdin_texts(cmd)
    if not texts and _fed(cmd):
        _hidden(d, ctx, cmd, f"{name} schedules commands read from stdin the gate cannot see.")
    for text in texts:
        _run(d, ctx, cmd, text, f"{name} schedules commands the gate cannot read.")


@also("expect", "tclsh", "wish", "jimsh")
def _h_tcl(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Tcl code (``expect -c``, a script fed on stdin): ``exec CMD``, ``spawn CMD`` and ``open "|CMD"``
    start programs; their literal commands are judged."""
    texts = _opt_value(args, "-c", "") if name == "expect" else []
    texts += _stdin_texts(cmd)
    ops = [a for a in args if not a.startswith("-")]
    if ops and not (name == "expect" and "-c" in args):
        texts += list(_read_files(d, cmd, ops[:1]))  # tclsh f.tcl, expect f.exp
    for text in texts:
        for m in _TCL_START.finditer(text):
            words = _tcl_words(text, m.end())
            if m.group(1).startswith("open") and words:
                words[0] = words[0].lstrip("|")
            while words and words[0].startswith("-") and words[0] != "--":
                words = words[1:]  # exec -ignorestderr, spawn -noecho
            if words and words[0] == "--":
                words = words[1:]
            if words:
                code = " ".join(w if w == UNKNOWN else shlex.quote(w) for w in words)
                _run(d, ctx, cmd, code, "Tcl code starts a program the gate cannot see.")


_TCL_START = re.compile(r"(?:^|[\n;\[{])\s*(exec|spawn|open)\b\s*")


def _tcl_words(text: str, i: int) -> list[str]:
    """The words of one Tcl command from ``i``: ``{…}`` literal (nested), ``"…"``, bare words;
    ``$var`` and ``[cmd]`` are unknown.  Ends at a newline, ``;`` or an unmatched ``]``."""
    words: list[str] = []
    n = len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n or text[i] in "\n;]":
            break
        if text[i] == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            words.append(text[i + 1 : j - 1])
            i = j
        elif text[i] == '"':
            j = text.find('"', i + 1)
            j = n if j < 0 else j
            word = text[i + 1 : j]
            words.append(UNKNOWN if ("$" in word or "[" in word) else word)
            i = j + 1
        else:
            j = i
            while j < n and text[j] not in " \t\n;]":
                j += 1
            word = text[i:j]
            words.append(UNKNOWN if ("$" in word or "[" in word) else word)
            i = j
    return words


# -- ssh, rsync, zip


def _ssh_options(args: list[str]) -> list[tuple[str, str]]:
    out = []
    for v in _opt_value(args, "-o", ""):
        m = re.match(r"\s*([A-Za-z]+)\s*(?:=|\s)\s*(.*)$", v, re.S)
        if m:
            out.append((m.group(1).lower(), m.group(2)))
    return out


def ssh_local_code(d: Detector, name: str, args: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """ssh/scp/sftp options that run a command on this machine: ``ProxyCommand``, ``LocalCommand``,
    ``KnownHostsCommand``, ``RemoteCommand`` aside (that one runs remotely).  Judged as commands."""
    for key, value in _ssh_options(args):
        if key in ("proxycommand", "localcommand", "knownhostscommand") and value.lower() != "none":
            _run(d, ctx, cmd, value, f"ssh runs its {key} on this machine.")


@also("scp", "sftp", "sshfs")
def _h_ssh_family(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """scp/sftp/sshfs with ``-o ProxyCommand=…`` (or ``-S program``): the command runs here."""
    ssh_local_code(d, name, args, cmd, ctx)
    for prog in _opt_value(args, "-S", ""):
        _run(d, ctx, cmd, prog, f"{name} runs {prog} instead of ssh.")


@also("rsync")
def _h_rsync_rsh(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``rsync -e CMD`` / ``--rsh=CMD`` / ``--rsync-path=CMD`` run CMD (the remote shell; the path on the
    far side): judged as commands."""
    for code in _opt_value(args, "-e", "--rsh"):
        _run(d, ctx, cmd, code, "rsync runs its remote shell command here.")


@also("zip")
def _h_zip(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``zip -T -TT CMD`` (``--unzip-command``) tests the archive by running CMD: judged."""
    for code in _opt_value(args, "-TT", "--unzip-command"):
        _run(d, ctx, cmd, code, "zip runs a test command.")


# -- environment variables whose value is code (assignment prefixes and ``env NAME=…``)

# variables a program runs as a shell command line
_ENV_COMMAND = frozenset(
    {
        "PROMPT_COMMAND",
        "GIT_SSH_COMMAND",
        "GIT_EXTERNAL_DIFF",
        "GIT_PAGER",
        "GIT_EDITOR",
        "GIT_SEQUENCE_EDITOR",
        "GIT_ASKPASS",
        "GIT_SSH",
        "GIT_PROXY_COMMAND",
        "PAGER",
        "MANPAGER",
        "EDITOR",
        "VISUAL",
        "SUDO_EDITOR",
        "SYSTEMD_PAGER",
        "SYSTEMD_EDITOR",
        "PSQL_PAGER",
        "PSQL_EDITOR",
        "LESSOPEN",
        "LESSCLOSE",
        "SSH_ASKPASS",
        "SUDO_ASKPASS",
        "BROWSER",
        "RSYNC_RSH",
        "CVS_RSH",
        "FCEDIT",
        "KUBE_EDITOR",
        "GH_EDITOR",
        "GH_PAGER",
        "DELTA_PAGER",
        "BAT_PAGER",
        "AWS_PAGER",
    }
)
# variables naming a file a shell runs at start
_ENV_SCRIPT = frozenset({"BASH_ENV", "ENV", "ZDOTDIR"})
_ENV_RX = re.compile(
    r"(?:^|[\s;&|('\"])(?:" + "|".join(sorted(_ENV_COMMAND | _ENV_SCRIPT)) + r"|GIT_CONFIG_\w+|BASH_FUNC_\S+|"
    r"NODE_OPTIONS|PERL5OPT|RUBYOPT|PYTHONSTARTUP|PYTHONPATH|PYTHONHOME|PERL5LIB|RUBYLIB|LD_PRELOAD|LD_AUDIT)="
)


def _prefix_assignments(cmd: Cmd) -> list[tuple[str, str]]:
    """``NAME=value`` words before the program (also after ``env``), values resolved where literal."""
    from ..lexer import fallback_commands

    out: list[tuple[str, str]] = []
    try:
        first = fallback_commands(cmd.text, {})
    except Exception:  # noqa: BLE001 - unreadable text: nothing is known
        first = []
    words = first[0].argv if first else []
    for w in words:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*(?:%%)?)=(.*)$", w, re.S)
        if not m:
            break
        out.append((m.group(1), m.group(2)))
    for w in cmd.argv:
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*(?:%%)?)=(.*)$", w, re.S)
        if m:
            out.append((m.group(1), m.group(2)))
    return out


def env_hooks(d: Detector, cmd: Cmd, ctx: Ctx) -> None:
    """A command started with a variable whose value is code (``BASH_ENV``, ``PROMPT_COMMAND``,
    ``GIT_SSH_COMMAND``, ``PAGER``/``EDITOR``, ``GIT_CONFIG_KEY_n``/``VALUE_n``,
    ``GIT_CONFIG_PARAMETERS``, ``BASH_FUNC_f%%``, ``NODE_OPTIONS=--require``, ``PERL5OPT``,
    ``LD_PRELOAD``…): the code is judged when the gate can read it, and asks when it cannot."""
    if any(
        op in (">", ">>", ">|") and re.search(r"(?:^|/)(?:\.git/config|\.?gitconfig|\.git/modules/.*/config)$", t)
        for op, t in cmd.redirects
    ):
        _git_config_text(d, cmd, ctx)
    if "=" not in cmd.text or not _ENV_RX.search(cmd.text):
        return
    _env_code(d, cmd, ctx, _prefix_assignments(cmd))


def _git_config_text(d: Detector, cmd: Cmd, ctx: Ctx) -> None:
    """``echo '[alias] x = !rm -rf /' >> .git/config``: the git settings written are judged as if given
    with ``git config``; text the gate cannot know asks."""
    from ..words import echo_output

    text = echo_output(cmd.argv) if cmd.argv else None
    if text is None and cmd.stdin_text is not None and cmd.argv[:1] == ["cat"]:
        text = cmd.stdin_text
    if text is None:
        _hidden(d, ctx, cmd, "Writes git configuration the gate cannot read; it may arm code for git commands.")
        return
    section = ""
    for raw in re.split(r"\n|(?=\[[A-Za-z])", text):
        line = raw.strip()
        m = re.match(r'^\[\s*([A-Za-z0-9.-]+)(?:\s+"([^"]*)")?\s*\]\s*(.*)$', line)
        if m:
            section = m.group(1) + ("." + m.group(2) if m.group(2) else "")
            line = m.group(3).strip()
        kv = re.match(r"^([A-Za-z0-9-]+)\s*=\s*(.*)$", line)
        if kv and section:
            value = kv.group(2).strip()
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            if _git_value(d, ctx, cmd, f"{section}.{kv.group(1)}", value):
                d.add(
                    ctx,
                    "persistence_write",
                    cmd.text,
                    f"Arms {section}.{kv.group(1)} in a git config: it runs on later git commands.",
                )


_DECLARE_RX = re.compile(r"\b(?:export|declare|typeset|readonly)\b")


def declared_env_hooks(d: Detector, text: str, ctx: Ctx) -> None:
    """``export GIT_SSH_COMMAND='…'``, ``declare -x BASH_ENV=f``: a code-carrying variable exported for
    every later program of the line and of the task's shell is judged where it is set (declarations
    are not commands the detector walks, so the script's text is read for them)."""
    if "=" not in text or not _ENV_RX.search(text) or not _DECLARE_RX.search(text):
        return
    from ..lexer import fallback_commands

    try:
        found = fallback_commands(text, {})
    except Exception:  # noqa: BLE001 - unreadable text: the parser's verdict stands
        return
    for c in found:
        argv = c.argv
        if not argv or argv[0] not in ("export", "declare", "typeset", "readonly"):
            continue
        if argv[0] != "export" and not any(re.fullmatch(r"-[a-zA-Z]*x[a-zA-Z]*", a) for a in argv[1:]):
            continue  # not exported: no program sees it
        pairs = [
            (m.group(1), m.group(2)) for a in argv[1:] if (m := re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", a, re.S))
        ]
        if pairs:
            seg = " ".join(argv)[:200]
            _env_code(d, Cmd(list(argv), [frozenset()] * len(argv), seg), ctx, pairs)


def _env_code(d: Detector, cmd: Cmd, ctx: Ctx, pairs: list[tuple[str, str]]) -> None:
    git_cfg: dict[str, dict[str, str]] = {}
    for key, value in pairs:
        if key in _ENV_COMMAND:
            if value.lstrip().startswith(("$", "`", UNKNOWN)):  # the program itself is computed
                _hidden(d, ctx, cmd, f"{key} is run as a command, and its value is not known.")
            elif value.strip():
                _run(d, ctx, cmd, value, f"{key} is run as a command, and its value is not known.")
            elif UNKNOWN in value:
                _hidden(d, ctx, cmd, f"{key} is run as a command, and its value is not known.")
        elif key in _ENV_SCRIPT:
            if not value and f"{key}=<(" in cmd.text:
                text = _procsub_text(cmd)
                if text is None or UNKNOWN in text:
                    _hidden(d, ctx, cmd, f"{key} runs code from a process substitution the gate cannot see.")
                if text:
                    d.payload(ctx, text, frozenset(), cmd.text)
            elif key == "ZDOTDIR" or not value or UNKNOWN in value:
                _hidden(
                    d, ctx, cmd, f"A shell started with {key}={value[:40]!r} runs startup code the gate cannot read."
                )
            elif value.startswith(("/dev/fd/", "/proc/")) or value == "":
                _hidden(d, ctx, cmd, f"{key} names code the gate cannot see.")
            else:
                judge_script(d, value, frozenset(), cmd, ctx, "sh")
        elif key.startswith("BASH_FUNC_"):
            body = value.strip()
            if body.startswith("()"):
                body = body[2:]
            _run(d, ctx, cmd, body, "An exported function's body is not known.")
        elif key == "GIT_CONFIG_PARAMETERS":
            try:
                import shlex

                items = shlex.split(value)
            except ValueError:
                items = []
            if UNKNOWN in value or (value.strip() and not items):
                _hidden(d, ctx, cmd, "GIT_CONFIG_PARAMETERS sets git configuration the gate cannot read.")
            for it in items:
                k, _, v = it.partition("=")
                _git_value(d, ctx, cmd, k, v)
        elif m := re.fullmatch(r"GIT_CONFIG_(KEY|VALUE)_(\d+)", key):
            git_cfg.setdefault(m.group(2), {})[m.group(1)] = value
        elif key in ("NODE_OPTIONS", "PERL5OPT", "RUBYOPT"):
            if re.search(r"(?:^|\s)(?:--require|-r|--import|--loader|--experimental-loader|-M|-m|-I)\S*", value) and (
                UNKNOWN in value
                or key != "NODE_OPTIONS"
                or not re.search(r"--require[= ]+(?:\./)?node_modules/", value)
            ):
                if key == "PERL5OPT" and re.fullmatch(r"\s*-M(?:strict|warnings|utf8|diagnostics)\S*\s*", value):
                    continue
                _hidden(
                    d,
                    ctx,
                    cmd,
                    f"{key}={value[:60]!r} loads code into every {key.split('_')[0][:4].lower()} program it starts.",
                )
        elif key in ("PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PERL5LIB", "RUBYLIB", "LD_PRELOAD", "LD_AUDIT"):
            base = value.split(":")
            if key in ("LD_PRELOAD", "LD_AUDIT", "PYTHONSTARTUP") and any(
                p and (UNKNOWN in p or not p.startswith(("/usr/", "/lib", "/opt/"))) for p in re.split(r"[:\s]", value)
            ):
                _hidden(
                    d, ctx, cmd, f"{key} makes the program load code from {value[:60]!r}, which the gate cannot read."
                )
            elif key not in ("LD_PRELOAD", "LD_AUDIT", "PYTHONSTARTUP") and any(
                p.startswith(("/tmp", "/dev/shm", "/var/tmp")) or UNKNOWN in p for p in base
            ):
                _hidden(d, ctx, cmd, f"{key} makes the program load modules from {value[:60]!r}.")
    for n in sorted(git_cfg):
        kv = git_cfg[n]
        if "KEY" in kv and "VALUE" in kv:
            if UNKNOWN in kv["KEY"]:
                _hidden(d, ctx, cmd, "GIT_CONFIG_KEY sets a git setting the gate cannot know.")
            else:
                _git_value(d, ctx, cmd, kv["KEY"], kv["VALUE"])


# -- JavaScript runtimes that are also package managers, Groovy


@also("bun")
def _h_bun_eval(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``bun -e/--eval/-p CODE``: JavaScript, read like ``node -e`` (bun's package-manager verbs own the name)."""
    if any(a in ("-e", "--eval", "-p", "--print") for a in args):
        _h_interpreter(d, "node", args, kinds, cmd, ctx)


_GROOVY_LIST = re.compile(r"\[([^\]]*)\]\s*\.execute\s*\(")
_GROOVY_STR = re.compile(r"(['\"])((?:(?!\1).)*)\1\s*\.execute\s*\(")


@also("groovy", "groovysh")
def _h_groovy(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Groovy ``-e`` code: ``['sh','-c',X].execute()`` and ``"cmd".execute()`` run programs; a list or
    string the gate can read is judged as that command, any other ``.execute()`` asks."""
    texts = _opt_value(args, "-e", "") + _stdin_texts(cmd)
    for text in texts:
        known = 0
        for m in _GROOVY_LIST.finditer(text):
            items = re.findall(r"'([^']*)'|\"([^\"]*)\"", m.group(1))
            _run(d, ctx, cmd, shlex.join([a or b for a, b in items]), "Groovy runs a program.")
            known += 1
        for m in _GROOVY_STR.finditer(text):
            _run(d, ctx, cmd, m.group(2), "Groovy runs a program.")
            known += 1
        if len(re.findall(r"\.execute\s*\(", text)) > known or re.search(r"\bRuntime\b.*\bexec\b|ProcessBuilder", text):
            _hidden(d, ctx, cmd, "Groovy code runs a program the gate cannot read.")


# -- SQL clients' shell escapes


_SQL_SHELL = re.compile(
    r"(?im)(?:^|;|\\\\)\s*(?:\\!|system\b|\.shell\b|\.system\b)[ \t]*([^\n]*)"  # psql/mysql \!, mysql system, sqlite .shell/.system
    r"|(?:^|;|\\\\)\s*(?:\\[og]|\.output|\.once|\.read)[ \t]+['\"]?\|[ \t]*([^\n'\"]*)"  # output or input through a command
    r"|\bPROGRAM\s+(?:E?'((?:[^']|'')*)'|\$\$(.*?)\$\$)"  # COPY … TO/FROM PROGRAM 'cmd' (runs on the server)
)
_SQL_INCLUDE = re.compile(
    r"(?im)(?:^|;)\s*(?:\\i[r]?|\\include(?:_relative)?|\.read|source|\\\.)[ \t]+['\"]?([^\s'\";|]+)"
)


def _sql_client_texts(name: str, args: list[str], cmd: Cmd) -> tuple[list[str], list[str]]:
    """(SQL/meta text the client runs, script files it reads) from its flags, operands and input."""
    texts: list[str] = []
    files: list[str] = []
    if name in ("psql",):
        texts += _opt_value(args, "-c", "--command")
        files += _opt_value(args, "-f", "--file")
    elif name in ("mysql", "mariadb"):
        texts += _opt_value(args, "-e", "--execute")
    else:  # sqlite3, duckdb: database then SQL operands; -cmd too
        texts += _opt_value(args, "-cmd", "")
        ops = [
            a
            for i, a in enumerate(args)
            if not a.startswith("-")
            and (i == 0 or args[i - 1] not in ("-cmd", "-init", "-separator", "-nullvalue", "-newline"))
        ]
        texts += ops[1:]
        files += _opt_value(args, "-init", "")
    texts += _stdin_texts(cmd)
    for op, t in cmd.redirects:
        if op == "<":
            files.append(t)
    return texts, [f for f in files if f != "-"]


def _sql_escapes(d: Detector, ctx: Ctx, cmd: Cmd, name: str, text: str, depth: int) -> None:
    for m in _SQL_SHELL.finditer(text):
        code = next((g for g in m.groups() if g is not None), "")
        code = code.replace("''", "'").strip()
        if m.group(1) is not None and code.endswith("\\\\"):
            code = code[:-2]
        if (
            code.split()[:1]
            and code.split()[0].rsplit("/", 1)[-1] in ("sh", "bash", "dash", "zsh")
            and len(code.split()) == 1
        ):
            _hidden(d, ctx, cmd, f"{name} sends its output into a shell: code the gate cannot see.")
            continue
        _run(d, ctx, cmd, code or UNKNOWN, f"{name} runs a shell command the gate cannot read.")
    if depth < 3:
        for m in _SQL_INCLUDE.finditer(text):
            _sql_file(d, ctx, cmd, name, m.group(1), depth + 1)


def _sql_file(d: Detector, ctx: Ctx, cmd: Cmd, name: str, path: str, depth: int) -> None:
    found = d.script_file(path, cmd)
    if found is not None and found.text is not None:
        _sql_escapes(d, ctx, cmd, name, found.text, depth)
        for f in sql_findings(found.text):  # the file's statements are SQL too
            d.add(ctx, f.rule, cmd.text, f"{path} holds destructive SQL: {f.detail[:80]}")


@also("psql", "mysql", "mariadb", "sqlite3", "sqlite", "duckdb")
def _h_sql_shell(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """SQL clients run shell commands: psql ``\\! cmd``, ``\\o |cmd``, mysql ``system cmd``/``\\! cmd``,
    sqlite3 ``.shell``/``.system``/``.output |cmd``, and ``COPY … TO/FROM PROGRAM 'cmd'``: the command
    is judged; files the client reads (``-f``, ``< f``, ``\\i``, ``.read``) are searched too."""
    texts, files = _sql_client_texts(name, args, cmd)
    for text in texts:
        _sql_escapes(d, ctx, cmd, name, text, 0)
    for f in files:
        _sql_file(d, ctx, cmd, name, f, 1)


# -- PowerShell runs native programs with shell-like command lines


@also("pwsh", "powershell", "pwsh-preview", "powershell.exe", "pwsh.exe")
def _h_pwsh_native(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``pwsh -c 'rm -rf /'``: a PowerShell command line that calls a native program is that program
    with its arguments; the code is also read as a command line so native calls are judged."""
    _h_interpreter(d, name, args, kinds, cmd, ctx)  # the name has no owner: PowerShell's own reading first
    for i, a in enumerate(args):
        if a.lower() in ("-c", "-command", "-com", "-comm", "--command") and i + 1 < len(args):
            code = " ".join(args[i + 1 :])
            if code.strip() and code.strip() != "-":
                d.payload(ctx, code, frozenset(), cmd.text)
            return


# -- source files written on the line and run by a compiler's run verb


@also("go", "rustc", "gcc", "cc", "clang", "javac", "java", "kotlinc", "dotnet", "swift", "tsc", "ts-node", "tsx")
def _h_compiled_written(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``echo '…' > x.go && go run x.go``: source written on this line in a language the gate does not
    read, then built and run, asks (the same source read from the backend is the documented limit)."""
    for a in args:
        base = a.rsplit("/", 1)[-1]
        if base in ctx.written and re.search(r"\.(?:go|rs|c|cc|cpp|java|kt|cs|swift|ts)$", base):
            _hidden(d, ctx, cmd, f"{name} builds {a}, written on this line in a language the gate does not read.")
            return


# -- awk


@also("awk", "gawk", "mawk", "nawk", "original-awk", "goawk", "onetrue-awk", "bwk-awk")
def _h_awk_shell(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """awk's ``system()``, ``cmd | getline``, ``print … | cmd`` (and what is printed into a shell):
    the command is judged as shell code with every value the gate can know (literals, ``-v``,
    variables set to literals); a part it cannot know (a field, ``ENVIRON``, input) asks."""
    programs, variables, files = awk_args(args)
    for program in programs + list(_read_files(d, cmd, files)):
        found = shell_code(program, variables)
        if found is None:
            if re.search(r"\bsystem\s*\(|\|&?\s*getline|\|&?\s*\"", program):
                _hidden(d, ctx, cmd, f"{name} runs shell commands from a program the gate cannot read.")
            continue
        for h in found:
            if h.code.strip("\x00 \t\n") == "" or h.code.lstrip(" \t\n").startswith(UNKNOWN):
                what = "prints into a shell" if h.how == "stdin" else "runs as a command"
                _hidden(d, ctx, cmd, f"{name} {what} text it computes when it runs; the gate cannot see it.")
                continue
            _run(d, ctx, cmd, h.code, f"{name} runs a command built from text the gate cannot see.")


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "code_handoff",
        match=(
            "echo x | sed 's/x/reboot/e'",
            "sed 'e' cmds.txt",
            "git -c core.hooksPath=/tmp/h commit -m x",
            "cat rules.mk | make -f - all",
            "cat jobs.txt | at now",
            "exec 3> >(sh)",
            'tar -xf a.tar --to-command="$CMD"',
            'tar -xf a.tar --to-comm="$CMD"',
            'tar cvIf "$CMD" a.tar src',
        ),
        no_match=(
            "sed 's/a/b/g' x.txt",
            "sed -n '/e/p' x",
            "sed -e 's/e/E/' x",
            "sed --sandbox 's/x/y/e' f",
            "tar -I zstd -cf x.tar.zst src",
            "tar --use=zstd -cf x.tar.zst src",
            "tar -xf a.tar --to-stdout",
            "git -c core.pager=less log",
            "git -c alias.co=checkout co main",
            "make -f build.mk",
            "vim -c 'set nu' x",
            "less +F log.txt",
            "atq",
            "at now + 5 minutes",
            "diff <(sort a) <(sort b)",
        ),
    ),
)

EXAMPLES += _PIPE_EXAMPLES

"""Live input: which commands run what is written to them later, out of the gate's sight.

The gate judges a command's text.  A process that keeps reading input after it starts (a
terminal, or a stdin pipe the client writes to later) can be handed *new* commands the gate
never sees: a shell, a REPL, an editor's ``:!sh``, a pager's ``!sh``, ``xargs sh -c``,
``awk '{system($0)}'``.  :func:`interactive_risk` says whether ``command`` is such a
program, and why.

Two questions, two defaults (see ``docs/gate.md``, "Interactive programs"):

* ``terminal=True`` (a Pty, a process started with a pty): **default deny**.  Every program
  that would run counts unless it is on :data:`TERMINAL_SAFE`, a short list of programs that
  treat what is typed as data or as display keys.  Wrappers are peeled and shell code handed to
  ``sh -c``, ``eval``, ``find -exec``, ``xargs``, ``awk system()`` is followed, so
  ``sh -c 'exec top'`` is judged as ``top`` and ``script -qc bash /dev/null`` as ``bash``.
* ``terminal=False`` (stdin is a pipe written later, or Exec/Run given stdin bytes): only
  programs that *run their input as commands* count: shells reading their program from stdin,
  REPLs and interpreters without a script, ``xargs``/``parallel`` running input-built commands,
  ``awk``/``sed``/``perl`` programs that hand input to ``system``/``e``/``eval``, ``at``,
  editors and debuggers (which read commands from a non-tty stdin), ``ssh`` without a command,
  ``nc -e``, ``socat exec:``, ``docker exec -i … sh``, ``tmux``.

Both modes fail closed: a command the parser cannot read, code or a program name the gate
cannot know (``eval "$x"``, ``$cmd``), or nesting past the bounds counts.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from collections.abc import Callable, Iterable
from typing import NamedTuple

from . import inline
from .commands import SHELLS, base_name, command_start, interpreter_lang, peel, split_options
from .model import UNKNOWN, Cmd, TooComplex
from .normalize import normalize
from .parser import parse
from .sed import read_script, sed_args
from .shells import shell_program
from .xargs import parse_xargs

_log = logging.getLogger("executor.approval")

MAX_INPUT = 128 * 1024
MAX_DEPTH = 8  # nested shell code (sh -c 'sh -c ...')
MAX_STEPS = 32  # wrapper layers on one command

# Stands for text the gate cannot know when code is parsed again (NUL cannot be parsed).
_MARK = "__executor_unknown__"

# ---------------------------------------------------------------------------------------------
# the allowlist (terminal=True): programs known not to run commands from what is typed

TERMINAL_SAFE: dict[str, str] = {}


def _safe(names: str, why: str) -> None:
    for n in names.split():
        TERMINAL_SAFE[n] = why


_safe(
    "echo printf true false : sleep date pwd ls tty stty test [ [[ basename dirname exit return cd "
    "export unset set shift wait local declare typeset readonly umask id whoami uname hostname uptime "
    "nproc df du free ps stat mkdir touch seq break continue",
    "does not read the terminal at all",
)
_safe(
    "cat tac head tail grep egrep fgrep rg wc sort uniq cut tr tee nl rev od hexdump xxd base64 "
    "md5sum sha1sum sha256sum sha512sum column fold paste jq read mapfile readarray",
    "reads what is typed as data (text to filter, count, copy or store in a variable) and has no "
    "command that runs a program",
)
_safe(
    "top htop btop vmstat iostat mpstat ping ping6 nvidia-smi",
    "reads keys only to steer its display (top and htop can also send a signal to a process id "
    "typed in, as `kill` would; no shell)",
)

# Options by which a program on the list would start another program (sort --compress-program,
# a --pager, an --editor...): with one of them, the program is judged off the list.
_PROGRAM_OPTION = re.compile(r"^--?[\w-]*(?:program|command|exec|pager|editor|shell)[\w-]*(?:=|$)", re.I)

# `read -e` edits the line with readline, whose bindings can start an editor.
_UNSAFE_OPTIONS = {"read": {"-e"}}

# Programs that never read their standard input: their output carries nothing typed.
_NO_STDIN = frozenset(
    "echo printf true false : sleep date pwd ls seq yes id whoami uname hostname nproc".split()
)

# Filters that read their file operands instead of stdin when given some (`cat f | sh`).
_FILE_FILTERS = frozenset("cat tac head tail nl rev wc sort uniq md5sum sha256sum base64 xxd od".split())


def _reads_stdin(argv: list[str]) -> bool:
    """Whether a pipeline member can pass its stdin on (False only when it surely does not read it)."""
    if not argv:
        return True
    name = base_name(argv[0])
    if name in _NO_STDIN:
        return False
    ops = [a for a in argv[1:] if not a.startswith("-")]
    if name in _FILE_FILTERS and ops and all(not _unknown(o) and o not in _STDIN_PATHS for o in ops):
        return False
    return True


_STDIN_PATHS = ("-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0", "/dev/tty")

# ---------------------------------------------------------------------------------------------
# families, for reasons (terminal=True) and for what runs input (terminal=False)

_EDITORS = frozenset(
    "vi vim nvim view vimdiff gvim ex ed emacs emacsclient nano pico micro joe jed mg kak hx helix "
    "ne mcedit vis".split()
)
_PAGERS = frozenset("less more most pg man info journalctl perldoc pydoc pydoc3 ri".split())
_DEBUGGERS = frozenset("gdb lldb pdb jdb dlv rr cgdb gdb-multiarch radare2 r2".split())
_SQL = {
    # program: (options that run given code instead of reading input, operands before code)
    "psql": ({"-c", "--command", "-f", "--file", "-l", "--list"}, None),
    "mysql": ({"-e", "--execute"}, None),
    "mariadb": ({"-e", "--execute"}, None),
    "sqlite3": ({"-version", "--version"}, 1),
    "duckdb": ({"-c", "-s", "-f"}, 1),
    "redis-cli": ({"--eval", "--scan", "--bigkeys", "--stat", "--latency"}, 0),
    "mongosh": ({"--eval", "-f", "--file"}, 0),
    "mongo": ({"--eval"}, 0),
    "cqlsh": ({"-e", "--execute", "-f", "--file"}, None),
    "clickhouse-client": ({"-q", "--query", "--queries-file"}, None),
    "sqlcmd": ({"-Q", "-q", "-i"}, None),
    "pgcli": (set(), None),
    "mycli": ({"-e", "--execute"}, None),
    "litecli": ({"-e", "--execute"}, None),
    "usql": ({"-c", "--command", "-f", "--file"}, None),
}
_FILE_CLIENTS = frozenset("ftp sftp lftp ncftp smbclient tftp dc".split())  # `!cmd`, or dc's `!`
_MULTIPLEXERS = frozenset("tmux screen byobu zellij dtach abduco tmate".split())
_REMOTE = frozenset("telnet rlogin rsh mosh-client".split())
# `X sub` that opens a shell
_SHELL_SUBCOMMANDS = {
    "poetry": {"shell"},
    "pipenv": {"shell"},
    "hatch": {"shell"},
    "vagrant": {"ssh"},
    "machinectl": {"shell", "login"},
    "toolbox": {"enter"},
    "distrobox": {"enter"},
    "lxc": {"shell", "console"},
    "multipass": {"shell"},
    "devbox": {"shell"},
    "nix": {"develop", "shell", "repl"},
    "flox": {"activate"},
}
# wrappers that start a login shell when given no command
_BARE_SHELL = frozenset(
    "script ssh autossh mosh gcloud-ssh nix-shell chroot nsenter unshare pkexec run0 firejail "
    "newgrp sg systemd-nspawn distrobox-enter xterm flatpak-spawn machinectl".split()
)
_PY_REPL_MODULES = frozenset("code pdb asyncio IPython ipython bpython ptpython idlelib sqlite3 _pyrepl".split())
_REPL_ONLY = frozenset("irb ipython ipython3 bpython ptpython ghci erl iex julia scala clojure sbcl racket guile "
                       "ocaml utop node-repl tclsh wish bb".split())

_READS_INPUT = re.compile(
    r"\bstdin\b|\binput\s*\(|raw_input|readline|<STDIN>|<>|\bSTDIN\b|\$stdin|\bgets\b|ARGF|\bARGV\b|"
    r"process\.stdin|readFileSync\s*\(\s*0|/dev/stdin|io\.read|io\.lines|readLines|fileinput|\$<"
)
_EXECUTES = re.compile(
    # names that are also common methods (json.load, re.compile) count only when not one
    r"(?<![\w.])(?:eval|exec|execfile|compile|load|require|Function|loadstring|dofile|dostring)\b|"
    r"\b(?:system|popen|spawn|execSync|spawnSync|execFile|instance_eval|import_module|__import__|runpy|"
    r"os\.execute|proc_open|passthru|shell_exec|IO\.popen|Open3|pty|subprocess|child_process|vm\.run\w*)\b|"
    r"`|%x|\bqx\b|open\s*\([^)]*\|"
)

# ---------------------------------------------------------------------------------------------
# entry points


def interactive_risk(command: str, *, terminal: bool) -> str | None:
    """Why live input to a process running ``command`` could run commands the gate never sees.

    ``terminal=True``: a Pty or a process started with a pty (default deny, see
    :data:`TERMINAL_SAFE`).  ``terminal=False``: a stdin pipe written later, or Exec/Run given
    stdin bytes (only programs that run their input as commands count).  Returns a short reason,
    or None when live input cannot run commands.
    """
    return _risk(command, bool(terminal))


def runs_input(command: str) -> bool:
    """Whether ``command`` runs what is written to its stdin as commands (``bash``, ``sh -s``,
    ``python3 -``, ``xargs sh -c``...).  Same as ``interactive_risk(command, terminal=False) is not None``."""
    return _risk(command, False) is not None


@functools.lru_cache(maxsize=2048)
def _risk(command: str, terminal: bool) -> str | None:
    try:
        text = normalize(command)
        if not text.strip():
            return "an empty command starts the task's interactive shell"
        if len(text) > MAX_INPUT:
            return f"the command is {len(text)} characters long; the gate analyses at most {MAX_INPUT}"
        return _Walk(terminal).script(text, 0, None, live=True)
    except (TooComplex, RecursionError):
        return "the command is too large or too deeply nested for the gate to analyse"
    except Exception:  # a bug here must never let a live shell through unasked
        _log.exception("approval gate: interactive analysis failed for %r", command[:200])
        return "the gate could not analyse the command"


# ---------------------------------------------------------------------------------------------
# the walk


def _q(words: list[str] | str, limit: int = 60) -> str:
    text = words if isinstance(words, str) else " ".join(words)
    text = " ".join(text.replace(UNKNOWN, "…").replace(_MARK, "…").split())
    return "`" + (text if len(text) <= limit else text[: limit - 1] + "…") + "`"


def _unknown(word: str) -> bool:
    return UNKNOWN in word or _MARK in word


class _Call(NamedTuple):
    """One program to judge, wrappers peeled: ``argv[0]`` as written, its base name and arguments."""

    cmd: Cmd
    argv: list[str]
    name: str
    args: list[str]
    depth: int
    live: bool


class _Pass:
    """A route's answer when the program is not its case (``ip addr``, plain ``nc``): try the next."""


_PASS = _Pass()


@dataclass
class _Run:
    """What an interpreter's options tell it to run (:func:`_interpreter_run`)."""

    codes: list[str] = field(default_factory=list)  # -c / -e / --eval code
    module: str | None = None  # python -m module
    file_op: str | None = None  # a script operand (``-`` is stdin)
    loop: bool = False  # perl/ruby -n/-p: the code runs once per input line
    repl: bool = False  # python -i, node -i, lua -i, php -a, perl -d: a prompt after the code


_CODE_FLAGS = frozenset({"-c", "-e", "-E", "-r", "--eval", "-p", "--print", "--command", "-Command", "-command"})
#: Flags of _CODE_FLAGS that mean something else in some languages (ruby/node ``-r lib`` requires a
#: library, ruby ``-E`` names an encoding, ``-p`` loops in perl/ruby).
_NOT_CODE = {"ruby": frozenset({"-r", "-E", "-p"}), "node": frozenset({"-r"}), "perl": frozenset({"-r", "-p"}),
             "python": frozenset({"-r", "-p", "-E"})}


def _repl_flag(lang: str, a: str) -> bool:
    """An option that opens a prompt after the code (python/lua -i, node -i, php -a, perl -d)."""
    return bool(
        (lang in ("python", "lua") and re.fullmatch(r"-[a-zA-Z]*i[a-zA-Z]*", a))
        or (lang == "node" and a in ("-i", "--interactive"))
        or (lang == "php" and a == "-a")
        or (lang == "perl" and re.fullmatch(r"-d(?::\w+)?", a))
    )


def _code_flag(lang: str, a: str) -> bool:
    """An option whose value is code to run (``-c``, ``-e``, perl's ``-ne``, python's ``-Ic``...)."""
    return bool(
        (a in _CODE_FLAGS and a not in _NOT_CODE.get(lang, ()))
        or (lang in ("perl", "ruby") and re.fullmatch(r"-[a-zA-Z]*[eE]", a))
        or (lang == "python" and re.fullmatch(r"-[a-zA-Z]*c", a))
    )


#: Options whose value is the next word (``python3 -X dev``, ``perl -I /tmp``): that word is not the
#: script operand. Read as each interpreter reads its own command line.
_OPTS_WITH_VALUE: dict[str, frozenset[str]] = {
    "python": frozenset({"-X", "-W", "-Q", "--check-hash-based-pycs"}),
    "perl": frozenset({"-I", "-x"}),
    "ruby": frozenset({"-I", "-r", "-C", "-E", "-F", "-x", "--encoding", "--external-encoding",
                       "--internal-encoding", "--enable", "--disable"}),
    "node": frozenset({"-r", "--require", "--import", "--loader", "--experimental-loader", "-C", "--conditions",
                       "--input-type", "--title", "--env-file", "--inspect-port", "--stack-size", "--max-old-space-size",
                       "--openssl-config", "--icu-data-dir", "--redirect-warnings", "--trace-event-categories",
                       "--cpu-prof-dir", "--heap-prof-dir", "--diagnostic-dir", "--report-dir", "--secure-heap"}),
    "php": frozenset({"-d", "-c", "-z", "--define", "--php-ini", "--zend-extension"}),
    "lua": frozenset({"-l"}),
    "tcl": frozenset({"-encoding"}),
}


def _interpreter_run(name: str, lang: str, args: list[str]) -> _Run:
    """Read an interpreter's options up to its code, module or script operand."""
    run = _Run()
    i = 0
    while i < len(args):
        a = args[i]
        if lang in ("perl", "ruby") and re.fullmatch(r"-[a-zA-Z]*[np][a-zA-Z]*", a):
            run.loop = True
        if _repl_flag(lang, a):
            run.repl = True
        if _code_flag(lang, a):
            if lang == "node" and a in ("-p", "--print") and i + 1 >= len(args):
                break
            if i + 1 < len(args):
                run.codes.append(args[i + 1])
            i += 2
            if lang == "python":
                break
            continue
        if lang == "python" and a in ("-m",) and i + 1 < len(args):
            run.module = args[i + 1]
            break
        if lang == "python" and a.startswith("-m") and len(a) > 2:
            run.module = a[2:]
            break
        if lang == "node" and name == "deno" and a in ("eval", "repl"):
            if a == "repl":
                break
            run.codes.append(args[i + 1] if i + 1 < len(args) else "")
            break
        if a.startswith("-") and a != "-":
            i += 2 if a in _OPTS_WITH_VALUE.get(lang, ()) else 1
            continue
        run.file_op = a
        break
    return run


_CONTAINER_GLOBAL_WITH_VALUE = frozenset(
    {"-H", "--host", "-c", "--context", "-n", "--namespace", "-f", "--file", "-p", "--project-name", "--kubeconfig",
     "--log-level", "--config", "--profile", "--env-file", "--project-directory", "--ansi", "--progress",
     "--parallel", "--tlscacert", "--tlscert", "--tlskey", "-l", "--url", "--connection", "--root", "--runroot",
     "--address", "-a", "--cgroup-manager", "--storage-driver"}
)
_COMPOSE_PROGRAMS = frozenset({"docker-compose", "podman-compose", "nerdctl-compose"})


def _past_globals(args: list[str], k: int) -> int:
    """The index of the first word at or after ``k`` that is not a global option (or its value)."""
    while k < len(args) and args[k].startswith("-") and args[k] != "-":
        k += 2 if args[k] in _CONTAINER_GLOBAL_WITH_VALUE else 1
    return k


def _container_verb(name: str, args: list[str]) -> tuple[bool, str, list[str]]:
    """A container tool's verb past the tool's global options, ``compose`` and compose's own:
    (whether it is compose, the verb, its arguments); ``docker container exec`` is ``exec``.
    Compose is told by the word, not by where the verb stands (``docker --context x compose -f
    y.yml exec`` is compose; ``docker -D exec`` is not)."""
    compose = name in _COMPOSE_PROGRAMS
    k = _past_globals(args, 0)
    if not compose and name in ("docker", "podman", "nerdctl") and k < len(args) and args[k] == "compose":
        compose = True
        k = _past_globals(args, k + 1)
    verb = args[k] if k < len(args) else ""
    rest = args[k + 1 :]
    if verb in ("container",) and rest[:1] and rest[0] in ("exec", "run", "attach", "start"):
        verb, rest = rest[0], rest[1:]
    return compose, verb, rest


_EXEC_BOOL_SHORT = frozenset("itdPqT")
_EXEC_BOOL_LONG = frozenset(
    {"--interactive", "--tty", "--detach", "--rm", "--privileged", "--init", "--read-only", "--stdin",
     "--publish-all", "--no-deps", "--service-ports", "--quiet", "--sig-proxy", "--no-TTY", "--build",
     "--remove-orphans", "--use-aliases", "--pull=always"}
)


def _exec_options(name: str, rest: list[str], *, interactive: bool) -> tuple[bool, int]:
    """The options of ``exec``/``run``: (whether stdin is attached, where the operands start)."""
    j = 0
    while j < len(rest):
        a = rest[j]
        if a == "--":
            j += 1
            break
        if a.startswith("--"):
            if a in ("--interactive", "--stdin", "--tty") or a.startswith(("--interactive=t", "--stdin=t")):
                interactive = True
            j += 1 if ("=" in a or a in _EXEC_BOOL_LONG) else 2
            continue
        if a.startswith("-") and len(a) > 1:
            letters = a[1:]
            if "i" in letters or (name not in ("kubectl", "oc") and "t" in letters):
                interactive = True
            j += 1 if all(ch in _EXEC_BOOL_SHORT for ch in letters) else (1 if len(letters) > 1 and "=" in a else 2)
            continue
        break
    return interactive, j


class _Walk:
    def __init__(self, terminal: bool) -> None:
        self.terminal = terminal
        self.budget = 200  # parses of nested code

    # ---- shell code

    def script(self, text: str, depth: int, env: dict[str, str] | None, *, live: bool) -> str | None:
        if depth > MAX_DEPTH:
            return "its shell code is nested too deeply for the gate to follow"
        self.budget -= 1
        if self.budget < 0:
            return "its shell code is too complex for the gate to follow"
        sc = parse(text.replace(UNKNOWN, _MARK), env=env)
        if sc.has_error:
            return f"the gate cannot parse {_q(text)}"
        for cmd in sc.cmds:
            r = self.command(cmd, cmd.argv, depth, self.live(cmd, live))
            if r:
                return r
        return None

    def code(self, code: str, depth: int, *, live: bool, env: dict[str, str] | None = None) -> str | None:
        """Shell code handed to a shell (``sh -c``, ``eval``, ``system()``)."""
        if _unknown(code) and not code.replace(UNKNOWN, "").replace(_MARK, "").strip():
            return "it runs shell code the gate cannot know (built from variables or input)"
        if not code.strip():
            return None
        return self.script(code, depth + 1, env, live=live)

    def live(self, cmd: Cmd, live_in: bool) -> bool:
        """Whether ``cmd``'s stdin carries the live input (terminal=False)."""
        if not live_in:
            return False
        if cmd.stdin_text is not None:
            return False
        if re.search(r"(?<![\w$])[1-9]\d*<", cmd.text):
            return True  # a redirect of another descriptor looks like a stdin one here: assume live
        for op, target in cmd.redirects:
            if op in ("<", "<>") and target not in _STDIN_PATHS:
                return False
        if cmd.upstream:
            return any(self.live(m, live_in) and _reads_stdin(m.argv) for m in cmd.upstream[-1])
        return True

    # ---- one command

    def command(self, cmd: Cmd, argv: list[str], depth: int, live: bool) -> str | None:
        for _ in range(MAX_STEPS):
            if not argv:
                return None
            if _unknown(argv[0]) or re.search(r"[*?\[]", argv[0]):
                return f"it runs a program whose name the gate cannot know ({_q(argv)})"
            name = base_name(argv[0])
            args = argv[1:]
            if name in ("ssh", "autossh", "mosh", "gcloud-ssh") and any(
                a == "-N" or (a.startswith("-") and not a.startswith("--") and "N" in a[1:] and len(a) <= 6)
                for a in args
            ):
                return None  # port forwarding only: no remote command, no shell
            new, final = peel(argv)
            if not new:
                if name in _BARE_SHELL or (name in _SHELL_SUBCOMMANDS and args[:1] and args[0] in _SHELL_SUBCOMMANDS[name]):
                    return f"{_q(argv)} starts an interactive shell" + (
                        " on another host" if name in ("ssh", "autossh", "mosh", "gcloud-ssh") else ""
                    )
                return None
            if final and new == argv:
                break
            argv = new
        else:
            return f"the gate cannot follow all the wrappers of {_q(argv)}"
        return self.program(cmd, argv, depth, live)

    def sub(self, cmd: Cmd, argv: list[str], depth: int, live: bool) -> str | None:
        """A command another program runs (find -exec, xargs, docker exec...)."""
        if depth + 1 > MAX_DEPTH:
            return "its commands are nested too deeply for the gate to follow"
        return self.command(cmd, argv, depth + 1, live)

    def program(self, cmd: Cmd, argv: list[str], depth: int, live: bool) -> str | None:
        """A program with its wrappers peeled: its routes (:func:`_routes`) in order, the first that
        answers decides; a program no route decides is left to :meth:`unlisted`."""
        c = _Call(cmd, argv, base_name(argv[0]), argv[1:], depth, live)
        for route in _routes(c.name):
            r = route(self, c)
            if not isinstance(r, _Pass):
                return r
        return self.unlisted(c)

    def unlisted(self, c: _Call) -> str | None:
        """A program no route decided: nothing with stdin only; with a terminal, default deny
        (only :data:`TERMINAL_SAFE` programs without an option that starts a program pass)."""
        name, args = c.name, c.args
        if not self.terminal:
            return None
        if name in TERMINAL_SAFE:
            bad = _UNSAFE_OPTIONS.get(name, set())
            hit = next((a for a in args if _PROGRAM_OPTION.match(a) or a in bad), None)
            if hit is None:
                return None
            return f"`{name} {hit}` can start another program from the terminal"
        if name in _PAGERS:
            return f"`{name}` shows text in a pager that runs shell commands typed into it (!sh)"
        if name == "git":
            return "`git` can open a pager or an editor that runs shell commands typed into it"
        return (
            f"`{name}` is not on the list of programs known not to run what is typed into a terminal"
        )

    # ---- routes of programs that run code or a shell (see _FIRST_ROUTES and _ROUTES)

    def eval_trap(self, c: _Call) -> str | None:
        """``eval words``: the words as shell code; ``trap code SIG``: the code (not ``trap -...``)."""
        args = c.args
        if c.name == "trap":
            if not args or args[0].startswith("-") or args[0] == "":
                return None
            return self.code(args[0], c.depth, live=c.live)
        return self.code(" ".join(args), c.depth, live=c.live)

    def netns(self, c: _Call) -> str | None | _Pass:
        """``ip netns exec NS cmd``: the command (a shell without one); other ``ip`` commands pass."""
        args = c.args
        if not ("exec" in args[:4] and "netns" in args[:3]):
            return _PASS
        k = args.index("exec")
        return self.sub(c.cmd, args[k + 2 :], c.depth, c.live) if args[k + 2 :] else f"{_q(c.argv)} starts a shell"

    def bare_shell(self, c: _Call) -> str | None | _Pass:
        """A wrapper not peeled as one (``newgrp g``, ``systemd-nspawn -D dir``): can start a shell."""
        if c.live or self.terminal:
            return f"{_q(c.argv)} can start an interactive shell"
        return _PASS

    def shell_subcommand(self, c: _Call) -> str | None | _Pass:
        """``poetry shell``, ``nix develop``...: a shell, or the ``-c``/``--command`` code given."""
        args = c.args
        if not (args[:1] and args[0] in _SHELL_SUBCOMMANDS[c.name]):
            return _PASS
        if "-c" in args or "--command" in args:
            i = args.index("-c") if "-c" in args else args.index("--command")
            return self.code(" ".join(args[i + 1 : i + 2]), c.depth, live=c.live) if i + 1 < len(args) else None
        return f"{_q(c.argv)} starts an interactive shell"

    def netcat(self, c: _Call) -> str | None | _Pass:
        """``nc -e prog``, ``ncat --sh-exec``: a program wired to a connection; plain ``nc`` passes."""
        if any(a in ("-e", "-c", "--exec", "--sh-exec", "--lua-exec") or re.fullmatch(r"-[a-zA-Z]*[ec]", a) for a in c.args):
            return f"{_q(c.argv)} runs a program wired to a network connection"
        return _PASS

    def socat(self, c: _Call) -> str | None | _Pass:
        """``socat ... exec:prog`` / ``system:``: a program wired to its input; other addresses pass."""
        if any(re.search(r"(?i)(?:^|[,!])(?:exec|system):", a) for a in c.args):
            return f"{_q(c.argv)} runs a program wired to its input"
        return _PASS

    # ---- routes of programs that read commands (or keys) from their input

    def remote(self, c: _Call) -> str | None:
        """``telnet``, ``rlogin``...: a session on another host."""
        return f"{_q(c.argv)} opens a session on another host"

    def at(self, c: _Call) -> str | None:
        """``at``/``batch`` without ``-f`` (or a listing option): schedules the commands it reads."""
        opts, _ = split_options(c.args, {"-f", "-q", "-t"})
        if any(o in ("-f", "-l", "-r", "-d", "-c") for o in opts) or "atq" == c.name:
            return None
        return f"`{c.name}` schedules the commands it reads from its input" if (c.live or self.terminal) else None

    def crontab(self, c: _Call) -> str | None:
        """``crontab`` / ``crontab -``: installs a crontab read from its input."""
        opts, ops = split_options(c.args, {"-u"})
        if any(o in ("-l", "-r", "-T") for o in opts) or (ops and ops[0] not in _STDIN_PATHS):
            return None
        return "`crontab` installs a crontab (commands run later) read from its input" if (c.live or self.terminal) else None

    def editor(self, c: _Call) -> str | None:
        """Editors run a shell from what is typed (``:!sh``); ``emacs --batch`` only with a terminal."""
        if c.name == "emacs" and any(a in ("--batch", "-batch", "--script", "-script") for a in c.args):
            return None if not self.terminal else f"{_q(c.argv)} runs code that can read the terminal"
        return f"`{c.name}` can run a shell from what is typed into it (:!sh, M-!)"

    def debugger(self, c: _Call) -> str | None:
        """Debuggers run shell commands typed at their prompt (not in batch mode without a terminal)."""
        if not self.terminal and any(a in ("-batch", "--batch", "-b", "--batch-silent") for a in c.args):
            return None
        return f"`{c.name}` runs shell commands typed at its prompt (shell, !)"

    def file_client(self, c: _Call) -> str | None:
        """``ftp``/``sftp``/``lftp``/``dc``: ``!cmd`` typed in; batch spellings pass without a terminal."""
        name, args, t = c.name, c.args, self.terminal
        if not t and name == "sftp" and "-b" in args and args[args.index("-b") + 1 :][:1] not in (["-"], []):
            return None
        if not t and name in ("lftp", "smbclient") and any(a in ("-c", "-e", "-f") for a in args):
            return None
        if not t and name == "dc" and [a for a in args if not a.startswith("-")]:
            return None
        return f"`{name}` runs shell commands typed into it (!cmd)" if (c.live or t) else None

    # ---- families

    def shell(self, cmd: Cmd, name: str, args: list[str], depth: int, live: bool) -> str | None:
        program = shell_program(name, args)
        operands = args[program.index :]
        if program.mode == "c":
            if not operands:
                return f"`{name} -c` without a script: the gate cannot tell what runs"
            env = {str(n): v for n, v in enumerate(operands[1:])}
            return self.code(operands[0], depth, live=live, env=env)
        if program.mode == "file":
            return self.script_file(name, operands[0], depth, live)
        # the shell reads its program from stdin
        if cmd.stdin_text is not None:
            return self.code(cmd.stdin_text, depth, live=False)
        if self.terminal:
            return f"`{name}` is an interactive shell: what is typed into it runs unjudged"
        if live:
            return f"`{name}` runs the commands written to its input"
        return None

    def script_file(self, name: str, path: str, depth: int, live: bool) -> str | None:
        if not path or _unknown(path):
            return f"`{name}` runs a script the gate cannot know"
        if path in _STDIN_PATHS:
            if self.terminal or live:
                return f"`{name} {path}` runs the commands written to its input"
            return None
        if path.startswith(("/dev/fd/", "/proc/self/fd/", "/proc/")):
            return f"`{name} {path}` runs code produced by another command (a process substitution)"
        if self.terminal:
            return f"`{name} {path}` runs a script the gate cannot see, with the terminal as its input"
        return None

    def find(self, cmd: Cmd, name: str, args: list[str], depth: int, live: bool) -> str | None:
        subs: list[list[str]] = []
        if name == "find":
            j = 0
            while j < len(args):
                if args[j] in ("-exec", "-execdir", "-ok", "-okdir"):
                    k = j + 1
                    sub: list[str] = []
                    while k < len(args) and args[k] not in (";", "+", "\\;"):
                        sub.append(args[k])
                        k += 1
                    subs.append(sub)
                    j = k
                j += 1
        else:
            for j, a in enumerate(args):
                if a in ("-x", "--exec", "-X", "--exec-batch"):
                    subs.append(args[j + 1 :])
                    break
        for sub in subs:
            argv = [s.replace("{}", "./" + UNKNOWN) if "{}" in s else s for s in sub]
            r = self.sub(cmd, argv, depth, live)
            if r:
                return f"{r} (run by `{name}`)"
        return None

    def xargs(self, cmd: Cmd, args: list[str], depth: int, live: bool) -> str | None:
        call = parse_xargs(args)
        sub = call.command or ["echo"]
        replace = call.replace
        argv = [s.replace(replace, UNKNOWN) for s in sub] if replace else [*sub, UNKNOWN]
        r = self.sub(cmd, argv, depth, live and call.open_tty)
        return f"{r} (with words from its input, run by `xargs`)" if r else None

    def parallel(self, cmd: Cmd, args: list[str], depth: int, live: bool) -> str | None:
        seps = [k for k, a in enumerate(args) if a in (":::", "::::", ":::+", "::::+")]
        head = args[: seps[0]] if seps else args
        i = command_start(
            head,
            {"-j", "-S", "-P", "-n", "-N", "-L", "-l", "-I", "-E", "-d", "-a", "-C", "--colsep"},
            {"--jobs", "--sshlogin", "--max-args", "--max-lines", "--delimiter", "--arg-file", "--colsep",
             "--joblog", "--results", "--tmpdir", "--workdir", "--timeout", "--env", "--tag-string", "--delay",
             "--retries", "--memfree", "--load", "--halt"},
        )
        template = head[i:]
        if not template:
            if seps:
                return self.code(" ".join(args[seps[0] + 1 : seps[0] + 2]) or UNKNOWN, depth, live=False)
            return "`parallel` runs each line of its input as a command" if (live or self.terminal) else None
        values = [args[k + 1] for k in seps if k + 1 < len(args) and args[k] in (":::", ":::+")]
        value = values[0] if values and all(args[k] in (":::", ":::+") for k in seps) else UNKNOWN
        argv = [t.replace("{}", value) for t in template] if any("{}" in t for t in template) else [*template, value]
        r = self.sub(cmd, argv, depth, False)
        return f"{r} (run by `parallel`)" if r else None

    def awk(self, cmd: Cmd, name: str, args: list[str], depth: int, live: bool) -> str | None:
        opts, ops = split_options(args, {"-F", "-v", "-f", "-E", "-i", "-l"}, {"--file", "--include", "--load",
                                                                              "--assign", "--field-separator"})
        if any(o in ("-f", "-E", "--file", "-i", "--include", "-l", "--load") or o.startswith(("--file=", "--load=")) for o in opts):
            if self.terminal or any(o in ("-l", "--load") or o.startswith("--load=") for o in opts):
                return f"`{name}` runs a program from a file the gate cannot see, with the terminal as its input"
            return None
        program = ops[0] if ops else ""
        if _unknown(program):
            return f"`{name}` runs a program the gate cannot know"
        if re.search(r"@load\b", program):
            return f"`{name}` loads an extension"
        # commands an awk program runs: system(x), print | x, x | getline, |& (coprocess)
        calls = [m.end() for m in re.finditer(r"\bsystem\s*\(\s*", program)]
        calls += [m.end() for m in re.finditer(r"(?<!\|)\|&?\s*(?!\s*getline\b)(?!\|)", program)]
        calls += [m.start() for m in re.finditer(r"\|&?\s*getline\b", program)]
        for pos in calls:
            literal = re.match(r'"((?:[^"\\]|\\.)*)"\s*\)?', program[pos:])
            if literal is None:
                before = re.search(r'"((?:[^"\\]|\\.)*)"\s*$', program[:pos])
                if before is not None and re.match(r"\|&?\s*getline", program[pos:]):
                    literal = before
            if literal is None:
                return f"`{name}` hands text built at run time (its input) to a shell"
            r = self.code(literal.group(1).encode().decode("unicode_escape"), depth, live=live or self.terminal)
            if r:
                return r
        return None

    def sed(self, name: str, args: list[str]) -> str | None:
        parsed = sed_args(args)
        if parsed.sandbox:
            return None
        if parsed.from_file:
            return (
                f"`{name}` runs a script from a file the gate cannot see, with the terminal as its input"
                if self.terminal
                else None
            )
        for s in parsed.scripts:
            if _unknown(s) or read_script(s).executes:
                return f"`{name}` runs lines of its input as shell commands (the `e` command)"
        return None

    def interpreter(self, cmd: Cmd, name: str, lang: str, args: list[str], depth: int, live: bool) -> str | None:
        """An interpreter or REPL: with a terminal it always counts; with stdin only, when it runs
        its input (no code, ``-i``, ``-m code``, a script on stdin) or its code reads input and runs it."""
        run = _interpreter_run(name, lang, args)
        codes = run.codes
        if self.terminal:
            if not codes and run.module is None and run.file_op is None:
                return f"`{name}` reads code typed into it and runs it"
            return f"`{name}` runs code that can read the terminal and run what is typed (input(), pty.spawn)"
        if run.repl:
            return f"`{name}` opens a prompt that runs the code written to its input" if live else None
        if name in _REPL_ONLY and not codes and run.file_op is None:
            return f"`{name}` runs the code written to its input" if live else None
        for code in codes:
            r = self.inline(name, lang, code, depth, live, run.loop)
            if r:
                return r
        if codes:
            return None
        if run.module is not None:
            if run.module.split(".")[0] in _PY_REPL_MODULES:
                return f"`{name} -m {run.module}` runs the code written to its input" if live else None
            return None
        if run.file_op is not None:
            return self.script_file(name, run.file_op, depth, live)
        if cmd.stdin_text is not None:
            return self.inline(name, lang, cmd.stdin_text, depth, False, False)
        return f"`{name}` runs the code written to its input" if live else None

    def inline(self, name: str, lang: str, code: str, depth: int, live: bool, loop: bool) -> str | None:
        if _unknown(code):
            return f"`{name}` runs code the gate cannot know"
        if (loop or _READS_INPUT.search(code)) and _EXECUTES.search(code) and live:
            return f"`{name}` code reads its input and runs it (eval, exec, system)"
        for f in inline.code_findings(lang, code):
            if f.rule != "inline_code_shell":
                continue
            if f.shell is None:
                if live:
                    return f"`{name}` code starts a program the gate cannot know ({f.detail})"
                continue
            r = self.code(f.shell, depth, live=live)
            if r:
                return r
        return None

    def container(self, cmd: Cmd, name: str, args: list[str], depth: int, live: bool) -> str | None:
        """docker/podman/kubectl exec, run, attach: '' when it is none of these."""
        compose, verb, rest = _container_verb(name, args)
        if verb in ("attach",) or (verb == "start" and any(a in ("-a", "-i", "--attach", "--interactive") for a in rest)):
            return f"`{name} {verb}` connects to a container's main process (often a shell)" if (live or self.terminal) else None
        if verb in ("debug", "shell", "console"):
            return f"`{name} {verb}` opens a shell" if (live or self.terminal) else None
        if verb not in ("exec", "run"):
            return ""
        # compose exec/run keep stdin attached unless told otherwise
        interactive, j = _exec_options(name, rest, interactive=compose)
        operands = rest[j:]
        if name in ("kubectl", "oc") and "--" in rest:
            inner = rest[rest.index("--") + 1 :]
        else:
            inner = operands[1:]  # container/service/image, then the command
        if not (interactive or self.terminal and verb == "run"):
            return None  # the client's input never reaches the container
        if not inner:
            return f"`{name} {verb}` starts the image's default command (often a shell) with input attached"
        r = self.sub(cmd, inner, depth, live or self.terminal)
        return f"{r} (in a container, through `{name} {verb}`)" if r else None

    def multiplexer(self, argv: list[str]) -> str | None:
        name = base_name(argv[0])
        args = argv[1:]
        if self.terminal:
            return f"`{name}` opens a shell in a terminal multiplexer"
        ops = [a for a in args if not a.startswith("-")]
        if name == "tmux":
            if not ops or ops[0] in ("new", "new-session", "attach", "attach-session", "a", "at"):
                if ops and ops[0] in ("new", "new-session") and any(a.startswith("-") and "d" in a[1:] for a in args):
                    return None
                return "`tmux` opens a shell session"
            return None
        if name == "screen" and any(a.startswith("-d") and "m" in a for a in args):
            return None
        if name in ("screen", "byobu", "zellij", "tmate", "dtach", "abduco"):
            return f"`{name}` opens a shell session"
        return None

    def expect(self, argv: list[str], live: bool) -> str | None:
        args = argv[1:]
        if self.terminal:
            return "`expect` can hand the terminal to the programs it spawns (interact)"
        opts, ops = split_options(args, {"-c", "-f"})
        codes = [opts[k + 1] for k, o in enumerate(opts[:-1]) if o == "-c"]
        if "-i" in opts or "-" in ops or ("-f" in opts and opts[opts.index("-f") + 1 :][:1] == ["-"]):
            return "`expect` runs the commands written to its input" if live else None
        for c in codes:
            if _unknown(c) or re.search(r"\b(?:interact|expect_user|gets\s+stdin|stdin)\b", c):
                return "`expect` hands its input to the program it spawned (interact)" if live else None
        if not codes and not ops and "-f" not in opts:
            return "`expect` runs the commands written to its input" if live else None
        return None

    def sql(self, name: str, args: list[str], live: bool) -> str | None:
        batch, code_after = _SQL[name]
        why = f"`{name}` runs the statements and shell escapes (\\!, .shell, system) typed into it"
        if self.terminal:
            return why
        if any(a in batch or any(a.startswith(b + "=") for b in batch if b.startswith("--")) for a in args):
            if name == "psql" and any(a in ("-f", "--file") for a in args) and any(a in _STDIN_PATHS for a in args):
                return why if live else None
            return None
        if code_after is not None:
            ops = [a for a in args if not a.startswith("-")]
            if len(ops) > code_after:
                return None
        return why if live else None

    def git(self, args: list[str], live: bool) -> str | None:
        """git subcommands that open an editor: with stdin not a tty, vi reads commands from it."""
        if not live:
            return None
        k = 0
        while k < len(args) and args[k].startswith("-"):
            k += 2 if args[k] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
        verb, rest = (args[k], args[k + 1 :]) if k < len(args) else ("", [])
        no_edit = {"-m", "--message", "-F", "--file", "-C", "--reuse-message", "--no-edit", "--fixup"}
        def has_message(a: str) -> bool:
            if a in no_edit or a.startswith(("--message=", "--file=", "--fixup=", "--squash=", "--reuse-message=")):
                return True
            return a.startswith("-") and not a.startswith("--") and any(ch in a[1:] for ch in "mFC")

        if verb == "commit" and not any(has_message(a) for a in rest):
            return "`git commit` opens an editor that reads commands from its input"
        if verb == "rebase" and any(a in ("-i", "--interactive", "--edit-todo") for a in rest):
            return "`git rebase -i` opens an editor that reads commands from its input"
        if verb == "add" and any(a in ("-p", "--patch", "-i", "--interactive", "-e", "--edit") for a in rest):
            return "`git add` reads choices from its input and can open an editor"
        return None


# ---------------------------------------------------------------------------------------------
# program routes: which method judges which program, in the order they are tried

_Route = Callable[[_Walk, _Call], "str | None | _Pass"]


def _container(w: _Walk, c: _Call) -> str | None | _Pass:
    """docker/podman/kubectl/lxc exec, run, attach...; any other verb passes (``lxc shell`` is next)."""
    r = w.container(c.cmd, c.name, c.args, c.depth, c.live)
    return _PASS if r == "" else r


# Programs that always decide, tried before the interpreters (an earlier entry wins a name).
_FIRST_ROUTES: tuple[tuple[Iterable[str], _Route], ...] = (
    (SHELLS, lambda w, c: w.shell(c.cmd, c.name, c.args, c.depth, c.live)),
    (("eval", "trap"), _Walk.eval_trap),
    (("source", "."), lambda w, c: w.script_file(c.name, c.args[0] if c.args else "", c.depth, c.live)),
    (("find", "fd", "fdfind"), lambda w, c: w.find(c.cmd, c.name, c.args, c.depth, c.live)),
    (("xargs",), lambda w, c: w.xargs(c.cmd, c.args, c.depth, c.live)),
    (("parallel", "sem"), lambda w, c: w.parallel(c.cmd, c.args, c.depth, c.live)),
    (("awk", "gawk", "mawk", "nawk", "busybox-awk"), lambda w, c: w.awk(c.cmd, c.name, c.args, c.depth, c.live)),
    (("sed", "gsed"), lambda w, c: w.sed(c.name, c.args)),
)
# After the interpreters: every route of a program is tried in this order until one does not pass
# (``lxc`` is a container tool, then a shell subcommand; ``machinectl`` a bare shell, then one).
_LATER_ROUTES: tuple[tuple[Iterable[str], _Route], ...] = (
    (("docker", "podman", "nerdctl", "kubectl", "oc", "lxc", "incus", *_COMPOSE_PROGRAMS), _container),
    (("ip",), _Walk.netns),
    (_BARE_SHELL, _Walk.bare_shell),
    (_SHELL_SUBCOMMANDS, _Walk.shell_subcommand),
    (("nc", "ncat", "netcat", "nc.traditional", "nc.openbsd", "pwncat", "cryptcat", "sbd"), _Walk.netcat),
    (("socat",), _Walk.socat),
    (_MULTIPLEXERS, lambda w, c: w.multiplexer(c.argv)),
    (_REMOTE, _Walk.remote),
    (("at", "batch"), _Walk.at),
    (("crontab",), _Walk.crontab),
    (("expect",), lambda w, c: w.expect(c.argv, c.live)),
    (_EDITORS, _Walk.editor),
    (_DEBUGGERS, _Walk.debugger),
    (_SQL, lambda w, c: w.sql(c.name, c.args, c.live)),
    (_FILE_CLIENTS, _Walk.file_client),
    (("git",), lambda w, c: _PASS if w.terminal else w.git(c.args, c.live)),
)



def _by_name(routes: tuple[tuple[Iterable[str], _Route], ...]) -> dict[str, tuple[_Route, ...]]:
    """program name -> its routes, in the order of ``routes``."""
    table: dict[str, tuple[_Route, ...]] = {}
    for names, route in routes:
        for n in names:
            table[n] = (*table.get(n, ()), route)
    return table


_FIRST = {n: routes[:1] for n, routes in _by_name(_FIRST_ROUTES).items()}  # the first always decides
_LATER = _by_name(_LATER_ROUTES)


def _interpreter(w: _Walk, c: _Call) -> str | None:
    """Interpreters and REPLs (python, perl, node, irb, ghci...)."""
    return w.interpreter(c.cmd, c.name, interpreter_lang(c.name) or "", c.args, c.depth, c.live)


def _routes(name: str) -> tuple[_Route, ...]:
    """The routes that judge program ``name``, in order: its first route (shells, eval, find,
    xargs, awk, sed...), else the interpreter and REPL route, else its later routes (none: the
    program is judged by :meth:`_Walk.unlisted`)."""
    if name in _FIRST:
        return _FIRST[name]
    if interpreter_lang(name) or name in _REPL_ONLY:
        return (_interpreter,)
    return _LATER.get(name, ())


__all__ = ["TERMINAL_SAFE", "interactive_risk", "runs_input"]

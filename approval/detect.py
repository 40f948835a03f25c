"""Detection: bash text in, findings out.

The text is normalised, parsed into the simple commands that would run (parser.py),
wrappers are peeled (commands.py), and each command is judged by what the tool does with
its arguments (tools.py): ``rm`` by its flags and targets, ``git`` by its subcommand,
shells and interpreters by the code they are handed (parsed again, recursively), SQL
clients by their statements.  Script-level patterns (fork bombs, reverse-shell pipelines,
download-then-run) are found here.  Every finding carries a stable rule id; the policy
layer (policy.py) turns findings into a verdict.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable

from . import inline
from .commands import NETWORK_TOOLS, SHELLS, base_name, classify, interpreter_lang, peel, unwrap
from .context import CURRENT, GateContext, ScriptFile
from .globs import glob_regex
from .interactive import interactive_risk
from .model import ARGSEP, UNKNOWN, Cmd, Kinds, TooComplex
from .normalize import normalize
from .parser import parse
from .paths import _GLOB_CHAR, write_class
from .rules import RULES, reason_for
from .state import ShellState, read_state, state_env
from .tools import (
    DRY_RUN,
    HANDLERS,
    NO_GENERIC,
    SQL_AT_PROMPT,
    Ctx,
    Found,
    carried_commands,
    generic_semantics,
    is_help,
    pattern_handler,
)
from .tools.handoff import declared_env_hooks, env_hooks, ssh_local_code
from .tools.remote import judge_script
from .tools.system import _h_nsenter
from .verdict import Decision, Verdict
from .words import echo_output

_log = logging.getLogger("executor.approval")

MAX_INPUT = 128 * 1024  # characters
MAX_NESTING = 8  # shell-in-shell payload depth
MAX_FINDINGS = 32
MAX_RECURSION = 2  # times one function of the task's shell is followed inside itself

# ---------------------------------------------------------------------------------------------
# the detector


class Detector:
    def __init__(self, context: GateContext | None = None) -> None:
        self.budget = 400  # payload analyses (each parses again)
        self.context = context
        self.cur_cwd: str | None = context.cwd if context and context.cwd else None
        self.state: ShellState | None = None
        self.state_env: dict[str, str] = {}
        self.expanding: list[tuple[str, ...]] = []  # aliases and function calls being followed
        self.wanted: list[str] = []  # scripts the command runs that the context does not hold yet
        self.line_functions: dict[str, str] = {}  # functions defined on the line: name -> body
        self.line_aliases: dict[str, str] = {}  # aliases and ``hash -p`` names defined on the line
        self.path_set = False  # the line assigns PATH: a file written on it may be what a name runs
        self.line_env: dict[str, str] = {}  # variables set on the line when the command being judged runs
        if context is not None and context.shell_state:
            self.state = read_state(context.shell_state)
            self.state_env = state_env(self.state, context.home)

    def add(self, ctx: Ctx, rule: str, segment: str, reason: str = "") -> None:
        if len(ctx.out) < MAX_FINDINGS:
            ctx.out.append(Found(rule, segment, reason))

    # ---- scripts

    def script(self, text: str, depth: int, env: dict[str, str] | None = None) -> list[Found]:
        ctx = Ctx(depth, dict(env or {}))
        if depth > MAX_NESTING:
            self.add(ctx, "too_complex", text[:200], "Shell code is nested too deeply for the gate to follow.")
            return ctx.out
        self.budget -= 1
        if self.budget < 0:
            self.add(ctx, "too_complex", text[:200])
            return ctx.out
        env = {**self.state_env, **env} if env else dict(self.state_env)
        cwd = self.cur_cwd
        if cwd is not None and "PWD" not in env:
            env["PWD"] = cwd
        sc = parse(
            text,
            env=env,
            classify=classify,
            cwd=cwd,
            read=self.read_data if self.context is not None else None,
            arrays=self.state.arrays if self.state is not None else None,
        )
        self.line_functions.update(sc.bodies)
        if "command_not_found_handle" in sc.bodies:
            self.add(
                ctx,
                "code_handoff",
                text[:200],
                "Defines command_not_found_handle: every command that is not found then runs its body with that"
                " command's words, which the gate cannot follow.",
            )
        if _TEST_BRACKET.search(text):  # ``[ -f x ]`` is read as a test, but a function or alias named [ runs instead
            if "[" in self.line_functions or "[" in self.line_aliases or (self.state is not None and self.state.defines("[")):
                self.command(Cmd(["["], [frozenset()], text[:200], cwd=cwd), ctx)
            elif _BRACKET_FUNCTION.search(text):
                self.add(
                    ctx,
                    "code_handoff",
                    text[:200],
                    "Defines a function named [, which then runs in place of every [ … ] test.",
                )
        if _SETS_PATH.search(text):
            self.path_set = True
        declared_env_hooks(self, text, ctx)  # export GIT_SSH_COMMAND=… (approval/tools/handoff.py)
        for cmd in sc.cmds:
            self.command(cmd, ctx)
        if self.path_set and _SETS_PATH.search(text):
            # ``printf '…' > /tmp/e/ls; chmod +x …; export PATH=/tmp/e:$PATH``: a program written on the
            # line into what PATH now searches runs for its name later: judge it now
            for wname, wtext in list(ctx.written.items()):
                if "." not in wname and ("written", wname) not in self.expanding:
                    self.expanding.append(("written", wname))
                    try:
                        self.payload(ctx, wtext, frozenset(), text[:200])
                    finally:
                        self.expanding.pop()
        self.fork_bombs(sc.cmds, sc.functions, ctx)
        self.pipelines(sc.cmds, ctx)
        if ctx.net_socket:
            for c in sc.cmds:
                argv = unwrap(c.argv)[0] if c.argv else []
                if (
                    argv
                    and (base_name(argv[0]) in SHELLS or argv[0].startswith(UNKNOWN))
                    and any(op in ("<&", ">&", "<", ">") and t.isdigit() for op, t in c.redirects)
                ):
                    self.add(ctx, "reverse_shell", c.segment)
        return ctx.out

    def payload(self, ctx: Ctx, code: str, kinds: Kinds, segment: str, env: dict[str, str] | None = None) -> None:
        """Shell code handed to a shell (``bash -c``, ``eval``, heredoc...): judge it too."""
        if "download" in kinds:
            self.add(ctx, "pipe_to_shell", segment)
        elif "decode" in kinds:
            self.add(ctx, "decode_to_shell", segment)
        if not code.strip() or code == UNKNOWN:
            return
        if env and "1" in env and "@" not in env:  # ``sh -c '"$@"' _ rm -rf /``: $@ is $1 $2 …
            rest = [env[str(i)] for i in range(1, 64) if str(i) in env]
            while rest and not rest[-1]:
                rest.pop()
            env = {**env, "@": ARGSEP.join(rest), "*": " ".join(rest), "#": str(len(rest))}
        if self.line_env:
            env = {**self.line_env, **(env or {})}
        # unknown text where a program name goes stays an unknown program (``eval $(…) -rf /``)
        code = _UNKNOWN_HEAD.sub(lambda m: m.group(1) + "$__gate_unknown__", code)
        for f in self.script(code.replace(UNKNOWN, " "), ctx.depth + 1, env):
            self.add(ctx, f.rule, f.segment, f.reason)

    def read_data(self, path: str, cwd: str | None) -> str | None:
        """A file of the task read as data where bash reads it into a command (``kubectl $(cat args)``,
        ``$(< f)``, ``xargs cmd < f``, ``eval "$(cat x.sh)"``): asked of the core like a script; one
        that is missing or unreadable stays unknown text (it does not ask)."""
        found = self.script_file(path, Cmd([], [], "", cwd=cwd))
        return found.text if found is not None else None

    def script_file(self, path: str, cmd: Cmd) -> ScriptFile | None:
        """What the core read of a file the command runs as code (``bash f``, ``. f``, ``./f``…), or
        None when there is no context, the path is not a file name the gate can know, or the core has
        not read it yet (then it is recorded in ``wanted`` for ``needed_files``)."""
        context = self.context
        if context is None or not path or UNKNOWN in path or path in ("-",) or path.startswith(("/dev/", "/proc/")):
            return None
        if path == "~" or path.startswith("~/"):
            if not context.home:
                return None
            path = context.home + path[1:]
        base = cmd.cwd or context.cwd
        if not path.startswith("/"):
            if not base:
                return None
            path = posixpath.join(base, path)
        path = posixpath.normpath(path)
        found = context.file(path)
        if found is None:
            self.wanted.append(path)
        return found

    # ---- per command

    def command(self, cmd: Cmd, ctx: Ctx) -> None:
        """Judge one simple command; code it hands on (``eval``, ``sh -c``, functions) sees the
        variables the line had set when it ran (``c=aws; eval '$c s3 rb …'``)."""
        saved = self.line_env
        if cmd.env is not None:
            self.line_env = cmd.env
        try:
            self._command(cmd, ctx)
        finally:
            self.line_env = saved

    def _command(self, cmd: Cmd, ctx: Ctx) -> None:
        if self.context is not None:
            self.cur_cwd = cmd.cwd
        self.redirects(cmd, ctx)
        if not cmd.argv:
            return
        if self.state is not None and self.state.defines(cmd.argv[0]):
            self.defined(cmd, ctx)
        if self.state_env.get("BASH_ENV") or self.state_env.get("ENV"):
            self.startup_file(cmd, ctx)
        self.line_defined(cmd, ctx)
        self.remember_written(cmd, ctx)
        env_hooks(self, cmd, ctx)  # NAME=code prefixes (approval/tools/handoff.py)
        if cmd.kinds and cmd.kinds[0] and UNKNOWN in cmd.argv[0]:
            k = cmd.kinds[0]
            if "download" in k:
                self.add(ctx, "pipe_to_shell", cmd.text)
            elif "decode" in k:
                self.add(ctx, "decode_to_shell", cmd.text)
        argv, wrappers = cmd.argv, []
        for _ in range(16):  # as unwrap() peels, keeping each wrapper as it was spelled at its step
            inner, final = peel(argv)
            if inner != argv:
                wrappers.append(argv)
            argv = inner
            if final:
                break
        offset = len(cmd.argv) - len(argv)
        for step in wrappers:  # wrappers that change where the command runs (or the shell they start)
            wrapper = base_name(step[0])
            if wrapper == "nsenter":  # also when another wrapper's string held it (``env -S 'nsenter …'``)
                _h_nsenter(self, "nsenter", step[1:], [], cmd, ctx)
            elif wrapper in ("ssh", "autossh"):  # -o ProxyCommand=… runs here, whatever runs remotely
                ssh_local_code(self, wrapper, step[1:], cmd, ctx)
        if not argv:
            return
        name = base_name(argv[0])
        args = argv[1:]
        if UNKNOWN in name:
            self.unknown_program(cmd, argv, cmd.kinds[offset] if 0 <= offset < len(cmd.kinds) else frozenset(), ctx)
        if _GLOB_CHAR.search(name) and UNKNOWN not in name:
            self.glob_name(cmd, argv, ctx)
        if "/" not in argv[0] and self.path_set and name in ctx.written:
            # ``printf '…' > /tmp/e/ls; PATH=/tmp/e:$PATH ls``: the name finds the file written on the line
            self.payload(ctx, ctx.written[name], frozenset(), cmd.text, _positional(args))
        if "/" in argv[0]:  # ./setup.sh after downloading or writing it on the same line
            if name in ctx.downloaded:
                self.add(ctx, "download_then_run", cmd.text)
            elif name in ctx.written:  # in its #! language, $1… bound; unknown written text asks
                judge_script(self, argv[0], frozenset(), cmd, ctx, "exec", args=args)
            elif not argv[0].startswith(_SYSTEM_PROGRAMS) and not (cmd.kinds and cmd.kinds[0]):
                judge_script(self, argv[0], frozenset(), cmd, ctx, "exec", args=args)  # a script run by path: read it
        if is_help(name, args) or any(a in DRY_RUN for a in args):
            return
        kinds = cmd.kinds[offset:] if offset >= 0 else cmd.kinds
        handler = HANDLERS.get(name)
        if handler is None:
            handler = pattern_handler(name)
        judged = False
        if handler is not None:
            before = len(ctx.out)
            handler(self, name, args, kinds[1:] if kinds else [], cmd, ctx)
            judged = len(ctx.out) > before
        if name not in NO_GENERIC:
            generic_semantics(self, name, args, cmd, ctx, handled=handler is not None, path=argv[0])
        if handler is not None and not judged:
            # what a handled tool carries (``heroku run CMD``, ``fly ssh console -C CMD``) is judged as for an
            # unknown program, unless its handler judged it (approval/tools/base.py: JUDGES_CARRIED)
            carried_commands(self, name, args, cmd, ctx, handled=True)
        lower = name.lower()
        if lower in ("drop", "truncate", "delete", "update", "alter", "flushall", "flushdb") and not cmd.fallback:
            text = " ".join(argv)
            if SQL_AT_PROMPT.match(text):
                for f in inline.sql_findings(text):
                    self.add(ctx, f.rule, cmd.text)

    def defined(self, cmd: Cmd, ctx: Ctx) -> None:
        """``ll`` where ``alias ll='rm -rf /'``, ``cleanup /etc`` where ``cleanup() { rm -rf "$1"; }``
        was defined by an earlier command of the task: judge what it stands for."""
        st = self.state
        assert st is not None
        name, args = cmd.argv[0], cmd.argv[1:]
        if name in st.unreadable:
            self.add(
                ctx,
                "too_complex",
                cmd.text,
                f"{name} is a function or alias defined earlier in this task that the gate cannot read.",
            )
        value = st.aliases.get(name)
        if value is not None and ("alias", name) not in self.expanding:
            rest = args
            if value[-1:].isspace() and rest and rest[0] in st.aliases:  # ``alias s='sudo '``: the next word too
                value, rest = value + st.aliases[rest[0]], rest[1:]
            text = value + " " + " ".join(_quote(a) for a in rest)
            self.expand(cmd, ctx, ("alias", name), text, None, f"{name} is an alias defined earlier in this task")
        body = st.functions.get(name)
        key = ("function", name, *args)
        # a recursive call is followed once more with its own arguments (``f /`` from inside f),
        # not further: the body was already judged, and a walker over a tree must not ask
        calls = sum(1 for k in self.expanding if k[:2] == ("function", name))
        if body is not None and key not in self.expanding and calls < MAX_RECURSION:
            self.expand(cmd, ctx, key, body, _call_env(args), f"{name} is a function defined earlier in this task")

    def startup_file(self, cmd: Cmd, ctx: Ctx) -> None:
        """``export BASH_ENV=f`` (or ``ENV``) by an earlier command: every shell started now sources f."""
        argv, _ = unwrap(cmd.argv)
        if not argv or ("startup",) in self.expanding:
            return
        if base_name(argv[0]) in SHELLS or ("/" in argv[0] and not argv[0].startswith(_SYSTEM_PROGRAMS)):
            self.expanding.append(("startup",))
            try:
                for var in ("BASH_ENV", "ENV"):
                    path = self.state_env.get(var, "")
                    if path and UNKNOWN not in path:
                        judge_script(self, path, frozenset(), cmd, ctx, "sh")
            finally:
                self.expanding.pop()

    def line_defined(self, cmd: Cmd, ctx: Ctx) -> None:
        """Definitions made earlier on the same line: ``f(){ rm "$@"; }; f -rf /`` is the body with
        ``$1…`` bound to the call's arguments; ``alias zz=rm`` / ``hash -p /bin/rm zz`` then ``zz -rf /``
        is rm (aliases are followed whether or not ``expand_aliases`` is on: fail closed);
        ``BASH_FUNC_x%%=() { …; }`` handed to a program's environment is a function body."""
        argv = cmd.argv
        name, args = argv[0], argv[1:]
        if name == "alias":
            for a in args:
                k, eq, v = a.partition("=")
                if eq and k and not k.startswith("-"):
                    self.line_aliases[k] = v
        elif name == "hash":
            for i, a in enumerate(args[:-2]):
                if a == "-p":
                    self.line_aliases[args[i + 2]] = _quote(args[i + 1])
        for a in argv:
            m = _BASH_FUNC.match(a)
            if m:
                self.payload(ctx, m.group(1), frozenset(), cmd.text)
        value = self.line_aliases.get(name)
        if value is not None and ("alias", name) not in self.expanding:
            text = value + " " + " ".join(_quote(a) for a in args)
            self.expand(cmd, ctx, ("alias", name), text, None, f"{name} is an alias defined on this line")
        body = self.line_functions.get(name)
        key = ("function", name, *args)
        calls = sum(1 for k in self.expanding if k[:2] == ("function", name))
        if body is not None and args and key not in self.expanding and calls < MAX_RECURSION:
            self.expand(cmd, ctx, key, body, _call_env(args), f"{name} is a function defined on this line")

    def unknown_program(self, cmd: Cmd, argv: list[str], kinds: Kinds, ctx: Ctx) -> None:
        """The program's name holds text the gate cannot know.  Computed on the line by an expansion
        or command the gate does not evaluate (``${a/X/r}`` of an unknown, ``$(… | awk …)``): ask.
        A variable that is simply not set on the line (``$EDITOR f``): judged as every known tool it
        could be, and asks when one of them would be dangerous with these arguments (``$X -rf /``)."""
        word = argv[0]
        if "=" in word.split(UNKNOWN, 1)[0]:
            return  # ``name-with-dash=$(…)``: not an assignment, and not a program anyone has
        if "opaque" in kinds:
            self.add(
                ctx,
                "unknown_program",
                cmd.text,
                "Runs a program whose name the gate cannot know: it is built by an expansion or command the"
                " gate does not evaluate.",
            )
            return
        if ("unknown", word) in self.expanding:
            return
        known = word.replace(UNKNOWN, "")
        if known and known != word and (
            base_name(known) in _KNOWN_NAMES or interpreter_lang(base_name(known)) or "/" not in known and re.search("[a-z]{3}", known)
        ):
            # ``kubectl$E delete ns prod``, ``$Xaws s3 rb …``: with the variables unset it is that tool
            found, _ = self._probe(cmd, argv, ctx, (known,),
                                   lambda f: f.rule not in ("script_unread", "unknown_program"))
            if found is not None:
                self._unknown_as(ctx, cmd, found, "Runs a program whose name holds variables the gate cannot know; if"
                                                  f" they are empty it is {known}")
                return
        if len(argv) < 2:
            return
        found, n = self._probe(cmd, argv, ctx, _PROBE_NAMES, lambda f: f.rule in RULES and RULES[f.rule].hardline)
        if found is not None:
            self._unknown_as(ctx, cmd, found, f"Runs a program whose name the gate cannot know; if it is {n}")

    def _unknown_as(self, ctx: Ctx, cmd: Cmd, found: Found, why: str) -> None:
        """``unknown_program``, saying which program the name could be and what that one would do."""
        self.add(ctx, "unknown_program", cmd.text, f"{why}: {(found.reason or reason_for(found.rule)).rstrip('.')}.")

    def _probe(self, cmd: Cmd, argv: list[str], ctx: Ctx, names: Iterable[str], keep: Callable[[Found], bool]
               ) -> tuple[Found | None, str]:
        """Judge ``argv`` with each of ``names`` as its program, on the side (nothing reaches ``ctx``):
        the first finding ``keep`` keeps, and the name that gave it."""
        probe = Ctx(ctx.depth, dict(ctx.env))
        self.expanding.append(("unknown", argv[0]))
        wanted = len(self.wanted)
        try:
            for n in names:
                self.command(Cmd([n, *argv[1:]], [frozenset()] * len(argv), cmd.text, cwd=cmd.cwd), probe)
                probe.out = [f for f in probe.out if keep(f)]
                if probe.out:
                    return probe.out[0], n
        finally:
            self.expanding.pop()
            del self.wanted[wanted:]
        return None, ""

    def expand(self, cmd: Cmd, ctx: Ctx, key: tuple[str, ...], text: str, env: dict[str, str] | None, why: str) -> None:
        self.expanding.append(key)
        saved = self.cur_cwd
        try:
            found = self.script(text, ctx.depth + 1, env)
        finally:
            self.expanding.pop()
            self.cur_cwd = saved
        for f in found:
            reason = (f.reason or reason_for(f.rule)).rstrip(". ")
            seg = f.segment if f.segment.startswith(cmd.text + " → ") else f"{cmd.text} → {f.segment}"
            self.add(ctx, f.rule, seg, f"{reason} ({why})")

    def glob_name(self, cmd: Cmd, argv: list[str], ctx: Ctx) -> None:
        """``/bin/r? -rf /``: a program name with glob characters runs whatever it matches first;
        judge the command as each known tool (and shell) the pattern could name."""
        pattern = base_name(argv[0])
        rx = glob_regex(pattern)
        # with no arguments only a path glob (``/sbin/[r]eboot``): a bare ``a*`` names files of the directory
        if rx is None or (len(argv) < 2 and "/" not in argv[0]) or pattern in ("[", "[[") or ("*" in pattern and not re.sub(r"\[[^\]]*\]|[*?]", "", pattern)):
            return
        names = sorted(n for n in _KNOWN_NAMES if rx.fullmatch(n))[:16]
        for n in names:
            self.command(Cmd([n, *argv[1:]], [frozenset()] * len(argv), cmd.text, cwd=cmd.cwd), ctx)

    def remember_written(self, cmd: Cmd, ctx: Ctx) -> None:
        """Scripts written from literal text earlier in the line (``echo 'x' > a.sh; sh a.sh``)."""
        targets = [(op, t) for op, t in cmd.redirects if op in (">", ">>", ">|", "&>")]
        if not targets:
            return
        text = echo_output(cmd.argv)
        if text is None and cmd.stdin_text is not None and cmd.argv[:1] == ["cat"]:
            text = cmd.stdin_text
        if text is None and cmd.argv and base_name(cmd.argv[0]) not in ("curl", "wget"):
            text = UNKNOWN  # written with output the gate cannot know: running it asks (gate-b)
        if text is not None:
            for op, t in targets:
                ctx.written[base_name(t)] = (ctx.written.get(base_name(t), "") + text) if op == ">>" else text

    def redirects(self, cmd: Cmd, ctx: Ctx) -> None:
        for op, target in cmd.redirects:
            if ">" not in op or op in (">&", "<&") and (target.isdigit() or target == "-"):
                if op == "<" and target.startswith(("/dev/tcp/", "/dev/udp/")):
                    self.dev_tcp(cmd, ctx)
                continue
            self.write_target(target, cmd, ctx)

    def write_target(self, target: str, cmd: Cmd, ctx: Ctx, seg: str | None = None) -> None:
        seg = seg or cmd.text
        wc = write_class(target, cmd.cwd)
        if wc == "blockdev":
            self.add(ctx, "disk_write", seg, f"Writes raw bytes onto the block device {target}.")
        elif wc == "sysrq":
            self.add(ctx, "power", seg, "Writes to /proc/sysrq-trigger, which can reboot or crash the machine at once.")
        elif wc == "persist":
            self.add(
                ctx,
                "persistence_write",
                seg,
                f"Writes {target}, a persistence point (startup file, keys, cron or sudoers).",
            )
        elif wc == "system":
            self.add(ctx, "system_write", seg, f"Writes into the system path {target}.")
        elif wc == "net":
            self.dev_tcp(cmd, ctx)

    def dev_tcp(self, cmd: Cmd, ctx: Ctx) -> None:
        """A network socket opened by redirection: a reverse shell if a shell is wired to it."""
        argv, _ = unwrap(cmd.argv)
        name = base_name(argv[0]) if argv else ""
        if name in SHELLS or interpreter_lang(name):
            self.add(ctx, "reverse_shell", cmd.text)
        else:
            ctx.net_socket = True

    # ---- script-level patterns

    def fork_bombs(self, cmds: list[Cmd], functions: set[str], ctx: Ctx) -> None:
        for f in functions:
            calls = [c for c in cmds if c.function == f and c.argv[:1] == [f]]
            if calls and (
                any(c.background for c in calls)
                and len(calls) >= 1
                and (len(calls) >= 2 or any(c.upstream for c in calls))
                or len(calls) >= 2
                and any(c.upstream for c in calls)
                or any(c.background for c in calls)
                and len(calls) >= 2
            ):
                self.add(ctx, "fork_bomb", calls[0].pipe_text or calls[0].text)
        for c in cmds:
            if c.loop_forever and c.background and c.argv:
                name = base_name(unwrap(c.argv)[0][0]) if unwrap(c.argv)[0] else ""
                if name in SHELLS or c.argv[0] in ("$0", UNKNOWN) or name in functions:
                    self.add(ctx, "fork_bomb", c.text)
        # any endless loop that starts background work and never waits: processes pile up without bound
        loops: dict[int, list[Cmd]] = {}
        for c in cmds:
            if c.loop:
                loops.setdefault(c.loop, []).append(c)
        for members in loops.values():
            started = [c for c in members if c.background and c.argv]
            if not started:
                continue
            throttled = False
            for c in members:
                if c.background or not c.argv:
                    continue
                inner = unwrap(c.argv)[0]
                if inner and base_name(inner[0]) in _THROTTLES:
                    throttled = True
                    break
            if not throttled:
                self.add(
                    ctx,
                    "fork_bomb",
                    started[0].text,
                    "An endless loop keeps starting processes in the background without waiting for them.",
                )

    def pipelines(self, cmds: list[Cmd], ctx: Ctx) -> None:
        """Reverse shells built from a pipeline: a shell and a network tool joined by pipes."""
        seen: set[str] = set()
        for c in cmds:
            if not c.upstream or c.pipe_text in seen:
                continue
            members = [m for group in c.upstream for m in group] + [c]
            names = {base_name(unwrap(m.argv)[0][0]) for m in members if unwrap(m.argv)[0]}
            if names & SHELLS and names & NETWORK_TOOLS:
                seen.add(c.pipe_text)
                self.add(ctx, "reverse_shell", c.pipe_text)


# ---------------------------------------------------------------------------------------------
# entry points


def _call_env(args: list[str]) -> dict[str, str]:
    """The positional parameters of a function or script called with ``args`` (``$1``…``$9`` empty
    past them, ``$@``, ``$*``, ``$#``)."""
    env = {str(i): "" for i in range(1, 10)}
    env.update({str(i): a for i, a in enumerate(args, 1)})
    env["@"] = ARGSEP.join(args)
    env["*"] = " ".join(args)
    env["#"] = str(len(args))
    return env


def _positional(args: list[str]) -> dict[str, str] | None:
    """``$1…`` of a script run with ``args`` (None without arguments: nothing to bind)."""
    return _call_env(args) if args else None


def _quote(word: str) -> str:
    """A resolved word as shell text again; unknown parts stay unknown (an unset variable)."""
    return '"$__gate_unknown__"'.join(shlex.quote(p) for p in word.split(UNKNOWN))


def _to_verdicts(found: list[Found]) -> list[Verdict]:
    out: list[Verdict] = []
    seen: set[tuple[str, str]] = set()
    for f in found:
        key = (f.rule, f.segment)
        if key in seen:
            continue
        seen.add(key)
        rule = RULES.get(f.rule)
        reason = " ".join((f.reason or (rule.reason if rule else "")).split())
        if reason and not reason.endswith("."):
            reason += "."
        out.append(Verdict(Decision.ASK, f.rule, reason, f.segment.strip()[:500], bool(rule and rule.hardline)))
    return out


# Programs installed with the system: run by path they are the program of that name, not a script
# of the task's (judged by name like any other).
_SYSTEM_PROGRAMS = ("/usr/", "/bin/", "/sbin/", "/lib", "/opt/", "/snap/", "/nix/", "/System/", "/Library/")

_THROTTLES = frozenset({"wait", "sleep", "break", "exit", "return", "read", "inotifywait", "usleep"})
_KNOWN_NAMES = frozenset(HANDLERS) | SHELLS
# what an unknown program name is tried as (the tools whose arguments alone make them dangerous)
_PROBE_NAMES = ("rm", "find", "rsync", "mv", "shred", "kill", "pkill", "dd", "chmod", "chown", "git")
_BRACKET_FUNCTION = re.compile(r"(?:^|[\s;&|])(?:function\s+)?\[\s*\(\s*\)")
_UNKNOWN_HEAD = re.compile(r"(^\s*|[;&|\n]\s*)\x00+(?=[ \t])")
_TEST_BRACKET = re.compile(r"(?:^|[\s;&|(!])\[\s")
_SETS_PATH = re.compile(r"(?:^|[\s;&|(])(?:export\s+|declare\s+-x\s+)?PATH\+?=")
_BASH_FUNC = re.compile(r"BASH_FUNC_[^=]*%%=\(\)\s*(.*)", re.S)


def _scan(command: str, context: GateContext | None = None) -> tuple[Verdict, ...]:
    return _scan_full(command, context)[0]


def needed_files(command: str, context: GateContext | None) -> tuple[str, ...]:
    """The scripts ``command`` runs, sources or hands to an interpreter or tool (absolute paths in
    the task's backend) that ``context.files`` does not hold yet: the core reads them and judges
    again with them (pure; the scan it runs is the one the verdict then reuses from the cache)."""
    if context is None:
        return ()
    return _scan_full(command, context)[1]


def _scan_full(command: str, context: GateContext | None) -> tuple[tuple[Verdict, ...], tuple[str, ...]]:
    if context is not None:
        context = context.normalized()
        if context.shell_state and not context.cwd:
            cwd = read_state(context.shell_state).cwd
            if cwd:
                context = dataclasses.replace(context, cwd=cwd).normalized()
    return _scan_cached(command, context)


@functools.lru_cache(maxsize=2048)
def _scan_cached(command: str, context: GateContext | None) -> tuple[tuple[Verdict, ...], tuple[str, ...]]:
    token = CURRENT.set(context)
    try:
        return _scan_uncached(command, context)
    finally:
        CURRENT.reset(token)


def clear_cache() -> None:
    """Forget the cached verdicts (for tests that change the rules under the detector)."""
    _scan_cached.cache_clear()


def _scan_uncached(command: str, context: GateContext | None) -> tuple[tuple[Verdict, ...], tuple[str, ...]]:
    text = normalize(command)
    if len(text) > MAX_INPUT:
        return (
            Verdict(
                Decision.ASK,
                "too_complex",
                f"The command is {len(text)} characters long; the gate analyses at most {MAX_INPUT}.",
                text[:200],
            ),
        ), ()
    if not text.strip():
        return (), ()
    d = Detector(context)
    try:
        found = d.script(text, 0)
    except (TooComplex, RecursionError) as e:
        return (
            Verdict(
                Decision.ASK,
                "too_complex",
                f"The command is too large or too deeply nested for the gate to analyse ({e.__class__.__name__}).",
                text[:200],
            ),
        ), ()
    except Exception:  # a bug in a rule must never let a command through or crash the daemon
        _log.exception("approval gate: analysis failed for %r", text[:200])
        return (Verdict(Decision.ASK, "analysis_error", reason_for("analysis_error"), text[:200]),), ()
    return tuple(_to_verdicts(found)), tuple(dict.fromkeys(d.wanted))


def findings(command: str, context: GateContext | None = None) -> list[Verdict]:
    """Every dangerous thing found in ``command`` (decision ASK; ``hardline`` per the default floor).

    ``context`` (the task's cwd, root, home and protected paths) resolves relative paths; without
    it relative paths are judged as before (against an unknown directory).
    """
    return list(_scan(command, context))


def split_segments(command: str) -> list[str]:
    """The texts of the simple commands and pipelines of ``command`` (for operator patterns)."""
    text = normalize(command)
    if len(text) > MAX_INPUT:
        return [text]
    try:
        sc = parse(text)
    except (TooComplex, RecursionError):
        return [text]
    segs: list[str] = []
    for c in sc.cmds:
        for s in (c.text, c.pipe_text):
            if s and s not in segs:
                segs.append(s)
    return segs


def opens_interactive_shell(command: str) -> bool:
    """Whether a terminal running ``command`` can run what is typed into it, unjudged.

    Same as ``interactive_risk(command, terminal=True) is not None`` (see ``interactive.py``):
    default deny, only programs on :data:`~.interactive.TERMINAL_SAFE` (after peeling
    wrappers and following ``sh -c`` code) are left out.  Kept for existing callers.
    """
    return interactive_risk(command, terminal=True) is not None

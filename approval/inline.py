"""Code that is not shell: SQL statements and inline interpreter snippets.

The gate cannot run this code, so it reads it for the few things that matter: SQL that
drops or wipes data, and interpreter code that deletes, kills, opens a network shell,
runs downloaded or decoded code, or hands a string to a shell (which is then analysed as
shell, recursively, by the caller).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

# -- SQL ---------------------------------------------------------------------------------

_SQL_NOISE = re.compile(
    r"--[^\n]*|/\*.*?\*/|'(?:[^']|'')*'|\$\$.*?\$\$|\$[A-Za-z_]\w*\$.*?\$[A-Za-z_]\w*\$|`[^`]*`",
    re.S,
)
_ALWAYS_TRUE = re.compile(
    r"\bWHERE\s+(?:\(?\s*(?:1\s*=\s*1|TRUE|1|NOT\s+FALSE|''\s*=\s*''|(\w+)\s*=\s*\1|\d+\s*(?:>|>=)\s*0)\s*\)?\s*(?:;|$|LIMIT|ORDER|RETURNING))"
    r"|\bOR\s+(?:1\s*=\s*1|TRUE|''\s*=\s*'')",
)
_DROP = re.compile(
    r"^(?:DROP|TRUNCATE)\b|^ALTER\s+TABLE\b.*\bDROP\b|^DELETE\b|^UPDATE\b.*\bSET\b|^(?:FLUSHALL|FLUSHDB)\b"
)


@dataclass(frozen=True)
class CodeFinding:
    rule: str
    detail: str = ""  # the statement or call that decided
    shell: str | None = None  # a shell string handed to a shell (to analyse recursively)


def sql_findings(text: str) -> list[CodeFinding]:
    """Destructive statements in SQL text (string literals and comments ignored)."""
    if not re.search(r"(?i)drop|truncate|delete|update|flush|alter", text):
        return []
    # a literal stays a value; a comment is blank space (``/* c */ DROP TABLE t`` is a DROP)
    stripped = _SQL_NOISE.sub(lambda m: " " if m.group(0).startswith(("--", "/*")) else "''", text)
    out: list[CodeFinding] = []
    for stmt in stripped.split(";"):
        s = " ".join(stmt.split()).upper()
        if not s:
            continue
        s = re.sub(r"^(?:EXPLAIN\s+ANALYZE\s+)?", "", s)
        if s.startswith("EXPLAIN"):
            continue
        m = _DROP.match(s)
        if not m:
            continue
        head = m.group(0)
        if head.startswith(("FLUSHALL", "FLUSHDB")):
            out.append(CodeFinding("redis_flush", stmt.strip()))
        elif head.startswith(("DELETE", "UPDATE")):
            if " WHERE " not in f" {s} " or _ALWAYS_TRUE.search(s):
                out.append(CodeFinding("sql_destructive", stmt.strip()))
        else:
            out.append(CodeFinding("sql_destructive", stmt.strip()))
    return out


_MONGO = re.compile(
    r"\.dropDatabase\s*\(|\.drop(?:Collection)?\s*\(\s*['\"]?\w*['\"]?\s*\)|\.(?:deleteMany|remove)\s*\(\s*\{\s*\}\s*\)"
    r"|\.dropAllUsers\s*\(|\bdb\.\w+\.drop\b"
)


def mongo_findings(code: str) -> list[CodeFinding]:
    m = _MONGO.search(code)
    return [CodeFinding("mongo_drop", m.group(0))] if m else []


# -- interpreter code ----------------------------------------------------------------------

_STR = re.compile(r"'((?:[^'\\\n]|\\.)*)'|\"((?:[^\"\\\n]|\\.)*)\"|`((?:[^`\\]|\\.)*)`")

_SHELL_CALL = {
    "python": re.compile(
        r"(?:\b|\))\.?(?:system|popen)\s*\((?=\s*['\"])|\b(?:os\.(?:system|popen[234]?|exec[lv]p?e?|spawn[lv]p?e?|posix_spawnp?)|subprocess\.(?:run|call|check_call|check_output|Popen|getoutput|getstatusoutput)|commands\.getoutput|pty\.spawn|asyncio\.create_subprocess_(?:shell|exec))\s*\("
    ),
    "perl": re.compile(r"\b(?:system|exec)\b\s*\(?|\bqx\s*[{(\[/|'\"]|`"),
    "ruby": re.compile(
        r"\b(?:system|exec|spawn|IO\.popen|Open3\.\w+|Kernel\.(?:system|exec|spawn))\b\s*\(?|%x[{(\[]|`"
    ),
    "node": re.compile(
        r"\b(?:exec|execSync|spawn|spawnSync|execFile|execFileSync)\s*\(|child_process"
        r"|\bDeno\.(?:Command|run)\s*\(|\bBun\.(?:spawn|spawnSync)\s*\("
    ),
    "php": re.compile(r"\b(?:system|exec|shell_exec|passthru|proc_open|popen|pcntl_exec)\s*\(|`"),
    "lua": re.compile(r"\b(?:os\.execute|io\.popen)\s*\("),
    "r": re.compile(r"\bsystem2?\s*\("),
    "applescript": re.compile(r"\bdo shell script\b"),
    "powershell": re.compile(r"(?i)\b(?:Start-Process|Invoke-Expression|iex|cmd(?:\.exe)?\s*/c)\b"),
}
_DELETE_CALL = {
    "python": re.compile(
        r"\b(?:os\.(?:remove|unlink|rmdir|removedirs)|shutil\.rmtree|rmtree|send2trash)\s*\(|\.(?:unlink|rmdir)\s*\("
    ),
    "perl": re.compile(r"\b(?:unlink|rmdir|rmtree|remove_tree)\b"),
    "ruby": re.compile(
        r"\b(?:File\.(?:delete|unlink)|FileUtils\.(?:rm\w*|remove\w*)|Dir\.(?:delete|rmdir|unlink)|rm_rf|rm_r)\b"
    ),
    "node": re.compile(
        r"\bfs(?:\.promises)?\.(?:rm|rmdir|unlink)\b"
        r"|require\s*\(\s*(?:\"\"|''|['\"](?:node:)?fs(?:/promises|-extra)?['\"])\s*\)\s*(?:\.promises)?\.(?:rm|rmdir|unlink|remove)\w*\b"
        r"|\b(?:fsp|fsPromises|promises)\.(?:rm|rmdir|unlink)\b"
        r"|\b(?:rmSync|rmdirSync|unlinkSync|rimraf|removeSync|emptyDirSync|emptyDir)\b"
    ),
    "php": re.compile(r"\b(?:unlink|rmdir)\s*\("),
    "lua": re.compile(r"\bos\.remove\s*\("),
    "r": re.compile(r"\b(?:unlink|file\.remove)\s*\("),
    "powershell": re.compile(r"(?i)\b(?:Remove-Item|rm|del|rmdir|rd)\b"),
    "applescript": re.compile(r"(?i)\bdelete\b"),
}
_KILL_CALL = {
    "python": re.compile(r"\bos\.(?:kill|killpg)\s*\(|\.kill\s*\(|psutil"),
    "perl": re.compile(r"\bkill\b\s*\(?\s*(?:['\"]{2}|['\"-]?\w)"),  # kill "", …: a literal signal name
    "ruby": re.compile(r"\bProcess\.kill\b"),
    "node": re.compile(r"\bprocess\.kill\s*\("),
    "php": re.compile(r"\bposix_kill\s*\("),
    "lua": re.compile(r"$^"),
    "r": re.compile(r"\btools::pskill\b|\bpskill\s*\("),
    "powershell": re.compile(r"(?i)\bStop-Process\b|\bkill\b"),
    "applescript": re.compile(r"$^"),
}
# Power through a language's own API rather than a shell string: AppleScript asking System Events,
# Finder or loginwindow to shut down or restart (also the raw Apple events), PowerShell's cmdlets.
_POWER_CALL = {
    "applescript": re.compile(
        r"(?i)\btell\s+(?:app(?:lication)?\s+)?(?:\"|\')?(?:System Events|Finder|loginwindow)(?:\"|\')?\s+to\s+"
        r"(?:shut\s*down|restart)\b|\baevt(?:rsdn|rrst)\b"
    ),
    "powershell": re.compile(r"(?i)\b(?:Stop|Restart)-Computer\b"),
}
_SOCKET = re.compile(
    r"(?i)\bsocket\b|fsockopen|TCPSocket|net\.(?:Socket|connect|createConnection)|IO::Socket|\bSocket\b|TCPClient"
)
_SHELLISH = re.compile(
    r"/bin/(?:ba|z|da|k)?sh\b|\b(?:sh|bash)\s+-i\b|pty\.spawn|dup2|\bexec\b|subprocess|spawn|popen|cmd\.exe|powershell"
    r"|passthru|shell_exec|proc_open|os\.execute|\bsystem\s*\(|\b(?:ba)?sh\s+<&"
)
_NET_READ = re.compile(
    r"(?i)['\"]https?://|urlopen|urllib|requests\.(?:get|post)|http\.client|https?\.get\s*\(|\bfetch\s*\(|Net::HTTP|open-uri|LWP::|HTTP::Tiny|file_get_contents\s*\(\s*['\"]https?:|DownloadString|Invoke-WebRequest|\biwr\b|Invoke-RestMethod|\birm\b|WebClient|curl|wget"
)
_DECODE = re.compile(
    r"(?i)b64decode|decode_base64|base64_decode|\batob\s*\(|Buffer\.from\([^)]*base64|unpack\s*\(?\s*['\"]m|unhexlify|bytes\.fromhex|codecs\.decode|FromBase64String|-EncodedCommand|\bzlib\.decompress|\bpack\s*\(?\s*['\"][Hh]\*|\.pack\s*\(\s*['\"][Hh]\*|\[[\"']?[Hh]\*"
)
_EVAL = re.compile(
    r"(?i)\b(?:exec|eval|Function|Invoke-Expression|iex|instance_eval|class_eval)\b\s*\(?|\|\s*(?:sh|bash)\b|\bsystem\s*\("
)
_FORK = re.compile(r"\bfork\b")
_LOOP = re.compile(r"\b(?:while|loop|until|for)\b|\bfork\s+while\b")
# an endless loop, and a call that starts a process without waiting for it
_ENDLESS = re.compile(
    r"\bwhile\s*\(?\s*(?:true|True|1)\s*\)?\s*[:{]|\bwhile\s+1\b|\bfor\s*\(\s*;\s*;\s*\)|\bloop\s*(?:do\b|\{)"
    r"|itertools\.count\(|\bwhile\s*\(\s*!?\s*0?\s*\)|\buntil\s+false\b|\bfor\s*\(\s*;;\s*\)"
)
_ASYNC_START = re.compile(
    r"\bfork\b|\bspawn\s*\(|\bexec\s*\(\s*['\"`]|\bPopen\b|Process\.spawn|multiprocessing\.Process|\bProcess\s*\(|os\.spawn\w*\(\s*os\.P_NOWAIT|\bexecFile\s*\("
)
_WRITE = re.compile(
    r"(?i)open\s*\([^)]*['\"][wa+]|write_text|write_bytes|writeFileSync|appendFileSync|writeFile|appendFile|File\.(?:write|open)|file_put_contents|Set-Content|Add-Content|Out-File|\bprint\s*\{|>>?\s*['\"]?/"
)


def strings_in(code: str) -> list[str]:
    return [a or b or c for a, b, c in _STR.findall(code)]


def _call_literals(code: str, start: int) -> str | None:
    """The string literal(s) of the call at ``start``: one string, or a list joined by spaces."""
    tail = code[start : start + 2000]
    m = re.match(r"\s*\(?\s*(\[)?", tail)
    pos = m.end() if m else 0
    if m and m.group(1):
        end = tail.find("]", pos)
        items = strings_in(tail[pos : end if end > 0 else len(tail)])
        return shlex.join(items) if items else None  # an argv: its words stay words
    m2 = _STR.match(tail, pos)
    if m2:
        first = m2.group(1) or m2.group(2) or m2.group(3) or ""
        # spawn('sh', ['-c', 'code']), execFile, Deno.Command('sh', {args: [...]}): program then its argv
        m3 = re.match(r"\s*,\s*(?:\{\s*args\s*:\s*)?\[", tail[m2.end() :])
        if m3:
            start = m2.end() + m3.end()
            end = tail.find("]", start)
            items = strings_in(tail[start : end if end > 0 else len(tail)])
            return shlex.join([first, *items])
        return first
    return None


_PY_IMPORT_AS = re.compile(r"\bimport\s+([\w.]+)\s+as\s+(\w+)")
_PY_FROM = re.compile(r"\bfrom\s+([\w.]+)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:;|\n|$)")
_PY_DYNAMIC = re.compile(
    r"\bgetattr\s*\(\s*(?:os|subprocess|pty|posix|commands|__import__\s*\([^)]*\))\s*,"
    r"|\b(?:importlib\.import_module|__import__)\s*\(\s*[^'\")\s]"
    r"|\bctypes\b|\bCDLL\s*\(|\blibc\.system\b"
)
_EXEC_CALL = {
    "python": re.compile(r"\b(?:exec|eval|compile)\s*\("),
    "perl": re.compile(r"\beval\s*[({]?"),
    "ruby": re.compile(r"\b(?:eval|instance_eval|class_eval)\s*\(?"),
    "node": re.compile(r"\b(?:eval|Function)\s*\("),
    "php": re.compile(r"\beval\s*\("),
}


def python_canonical(code: str) -> str:
    """Python code with import aliases put back (``import subprocess as s`` → ``subprocess.``,
    ``from os import system as s`` → ``os.system(``, ``__import__('os')`` → ``os``), so the shell
    and delete patterns see the real call whatever name it was given."""
    code = re.sub(r"__import__\s*\(\s*['\"]([\w.]+)['\"]\s*\)", r"\1", code)
    for mod, alias in _PY_IMPORT_AS.findall(code):
        if alias != mod:
            code = re.sub(rf"(?<![\w.]){re.escape(alias)}\.", mod + ".", code)
    for mod, names in _PY_FROM.findall(code):
        for part in names.split(","):
            words = part.split()
            if not words or words[0] == "*":
                continue
            real, alias = words[0], words[-1] if len(words) == 3 and words[1] == "as" else words[0]
            code = re.sub(rf"(?<![\w.]){re.escape(alias)}\s*\(", f"{mod}.{real}(", code)
    return code


def _pipe_opens(lang: str, code: str) -> list[CodeFinding]:
    """perl ``open(F, "|sh")`` / ``open(F, "|-", "cmd")`` / ``open(F, "cmd|")``, ruby ``open("|cmd")``:
    a command run through a pipe; into a shell, what is printed to it is the code."""
    if lang not in ("perl", "ruby"):
        return []
    out: list[CodeFinding] = []
    lit = r"(?:qq?\s*\{(?P<q>[^}]*)\}|qq?\s*\((?P<p>[^)]*)\)|'(?P<s>[^']*)'|\"(?P<d>[^\"]*)\")"
    for m in re.finditer(
        r"\bopen\s*\(?\s*(?:my\s+)?[$\w]*\s*,?\s*" + lit + r"(?:\s*,\s*" + lit.replace("?P<", "?P<b") + ")?", code
    ):
        first = m.group("q") or m.group("p") or m.group("s") or m.group("d") or ""
        second = next((m.group(g) for g in ("bq", "bp", "bs", "bd") if m.group(g) is not None), None)
        if first.strip() in ("|-", "-|") and second is not None:
            command = second
        elif first.strip().startswith("|") or first.strip().endswith("|"):
            command = first.strip().strip("|").strip()
        else:
            continue
        out.append(CodeFinding("inline_code_shell", "open a pipe", shell=command or None))
        name = command.split()[0].rsplit("/", 1)[-1] if command.split() else ""
        if name in ("sh", "bash", "dash", "zsh", "ksh") and len(command.split()) == 1:
            printed = [
                pm.group(1) or pm.group(2) or pm.group(3)
                for pm in re.finditer(r"\bprint\s+\{?\$?\w+\}?\s+(?:qq?\s*\{([^}]*)\}|'([^']*)'|\"([^\"]*)\")", code)
            ]
            text = "\n".join(p for p in printed if p is not None)
            out.append(CodeFinding("inline_code_shell", "printed into a shell", shell=text or None))
    return out


_SQL_CALL = re.compile(r"\.(?:execute|executescript|executemany|exec|query|raw|sql|run|all|prepare)\s*\(|\bsql\s*`")


def code_findings(lang: str, code: str, _depth: int = 0) -> list[CodeFinding]:
    """What inline code in ``lang`` does that the gate cares about."""
    out: list[CodeFinding] = []
    if lang == "python":
        code = python_canonical(code)
        if dm := _PY_DYNAMIC.search(code):
            out.append(CodeFinding("inline_code_shell", dm.group(0).strip(), shell=None))
    out.extend(_pipe_opens(lang, code))
    exec_call = _EXEC_CALL.get(lang)
    if exec_call is not None and _depth < 3:
        spans = [m.span() for m in _STR.finditer(code)]
        for em in exec_call.finditer(code):
            if any(a < em.start() < b - 1 for a, b in spans):
                continue
            inner = "".join(_unescape_str(x) for x in strings_in(code[em.end() : em.end() + 4000]))
            if inner.strip():
                out.extend(code_findings(lang, inner, _depth + 1))
    shell_call = _SHELL_CALL.get(lang)
    net = _NET_READ.search(code)
    decode = _DECODE.search(code)
    if net and _EVAL.search(code):
        out.append(CodeFinding("pipe_to_shell", net.group(0)))
    if decode and _EVAL.search(code):
        out.append(CodeFinding("decode_to_shell", decode.group(0)))
    if _SOCKET.search(code) and _SHELLISH.search(code):
        out.append(CodeFinding("reverse_shell", "socket + shell"))
    bare = _STR.sub('""', code)  # words inside string literals are text, not code
    if _FORK.search(bare) and _LOOP.search(bare) or _ENDLESS.search(bare) and _ASYNC_START.search(bare):
        out.append(CodeFinding("fork_bomb", "processes started in an endless loop"))
    if shell_call is not None:
        spans = [m.span() for m in _STR.finditer(code)]
        for m in shell_call.finditer(code):
            token = m.group(0)
            if token == "child_process" or any(a < m.start() < b - 1 for a, b in spans):
                continue  # words inside a string literal are text: print("os.system(x)")
            if token == "`" or token.startswith(("%x", "qx")):
                end = code.find("`" if token == "`" else _closer(token[-1]), m.end())
                literal = code[m.end() : end] if end > 0 else None
            elif lang == "applescript":
                lm = _STR.match(code, m.end() + 1)
                literal = (lm.group(2) or lm.group(1)) if lm else None
            else:
                literal = _call_literals(code, m.end() - 1 if token.endswith("(") else m.end())
            out.append(CodeFinding("inline_code_shell", token.strip(), shell=literal))
    delete = _DELETE_CALL.get(lang)
    if delete is not None and (dm := delete.search(bare)):
        out.append(CodeFinding("inline_code_delete", dm.group(0), shell=None))
    power = _POWER_CALL.get(lang)
    if power is not None and (pm := power.search(code)):
        out.append(CodeFinding("power", f"asks the system to {pm.group(0).split()[-1].lower()}"))
    kill = _KILL_CALL.get(lang)
    if kill is not None and (km := kill.search(bare)):
        out.append(CodeFinding("inline_code_kill", km.group(0)))
    if fm := re.search(r"\.(?:flushall|flushdb)\s*\(", code, re.I):  # redis clients
        out.append(CodeFinding("redis_flush", fm.group(0)))
    if _SQL_CALL.search(code):  # SQL through a client library: its statements are SQL
        for lit in strings_in(code):
            out.extend(sql_findings(lit))
    if _WRITE.search(code):
        for s in strings_in(code):
            if s.startswith(("/", "~")):
                out.append(CodeFinding("write_path", s))
    return out


_ARG_FILLER = re.compile(
    r"\b(?:os\.path\.join|path\.join|path\.resolve|pathlib\.Path|Path|File\.join|File\.expand_path|ignore_errors|missing_ok"
    r"|recursive|force|verbose|noop|secure|maxRetries|retryDelay|True|False|true|false|None|nil|undefined)\b|\d+|[\s,(){}\[\]=:>]"
)


def delete_targets(lang: str, code: str) -> list[str] | None:
    """The literal paths inline code deletes, or None when any target is computed (a variable,
    interpolation, a receiver the gate cannot read): then the deletion is judged unknown."""
    rx = _DELETE_CALL.get(lang)
    if rx is None:
        return None
    out: list[str] = []
    for m in rx.finditer(code):
        if m.group(0).startswith("."):
            return None  # Path(x).unlink(): the receiver is not read
        pos = m.end()
        if code[pos - 1 : pos] != "(":
            while pos < len(code) and code[pos] in " \t":
                pos += 1
        if pos < len(code) and code[pos - 1 : pos] != "(" and code[pos] == "(":
            pos += 1
        if code[pos - 1 : pos] == "(":
            depth, end = 1, pos
            while end < len(code) and depth:
                depth += {"(": 1, ")": -1}.get(code[end], 0)
                end += 1
            arg = code[pos : end - 1]
        else:
            end = len(code)
            for stop in (";", "\n", "}", " if ", " unless ", " or ", " and "):
                k = code.find(stop, pos)
                if 0 <= k < end:
                    end = k
            arg = code[pos:end]
        strings = strings_in(arg)
        rest = _ARG_FILLER.sub("", _STR.sub("", arg))
        if rest or not strings:
            return None
        for s_ in strings:
            if not s_ or any(x in s_ for x in ("$", "#{", "`", "%")) or s_.startswith(("/", "~", "..")):
                return None
        joined = "/".join(strings) if "join" in arg else None
        out.extend([joined] if joined else strings)
    return out or None


def _closer(ch: str) -> str:
    return {"{": "}", "(": ")", "[": "]"}.get(ch, ch)


def _unescape_str(s: str) -> str:
    return re.sub(r"\\([\\'\"nt])", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)

"""Killing a spawn's whole tree inside a sandbox, written once for every backend.

* The reaper (``REAPER_PY``, started by ``reaper_argv``): the anchor of a spawn's tree, a child
  subreaper, so ``setsid``, ``nohup`` and double forks stay its descendants.
* ``KILL_TREE_FUNCTION`` (``_extree PID SIG``): the walk that signals that tree, repeated until a pass
  finds nothing new (the strongest guarantee: a child forked during a walk is caught by the next).
  ``KILL_TREE_SCRIPT`` runs it once; a backend with a long-lived helper (docker's killer) loops it.
* ``CLEANUP_SCRIPT``: the same walk for every session a previous daemon recorded in a registry kept
  *inside* the sandbox (ssh, modal), each checked by its start time so a recycled pid is never hit.
* ``KILL_*``: what ``Backend.policy()["kill"]`` says about how far a kill reaches.

The host-side twin of the walk (``/proc`` read by the daemon itself) is ``_host.signal_tree``.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The name (``comm``, /proc/PID/stat field 2) the reaper gives itself, so a kill walk can tell it
#: from the command it anchors.
REAPER_NAME = "executor-reaper"

#: The reaper: ``python3 -I -S -c REAPER_PY MODE ARGV...`` (MODE: ``pipe`` or ``pty``).
#:
#: A ``setsid`` leaves a process group and a session, never its ancestry: the reaper marks itself
#: a child subreaper (PR_SET_CHILD_SUBREAPER), so every process the command starts stays its
#: descendant even when its parent dies (a double fork re-parents to the reaper, not to init).
#: It forks the command as the leader of a new session (``$$`` = session id, as the Sandbox
#: contract says; under ``pty`` with the terminal as controlling tty), hands its own stdio to
#: /dev/null (EOF on the command's pipes is unchanged), reaps orphans, and when the command ends,
#: TERMs whatever the command left behind, KILLs it after ``REAPER_GRACE`` seconds, and exits
#: as the command did (code, or the same signal). It keeps the command's zombie until then, so
#: a kill walk always finds the reaper from the command's pid and the pid cannot be reused.
#: It ignores HUP/INT/TERM/QUIT (it is the anchor of the tree; the command gets them at their
#: defaults); SIGKILL from the command's own user can still end it (see docs/security.md).
REAPER_GRACE = 3.0
#: The reaper's exit code when it could not fork the command, with ``REAPER_START_FAILED_LINE``
#: (then the strerror) as the first bytes on stderr: together they tell a start failure from a
#: command that exits 125.
REAPER_START_FAILED = 125
REAPER_START_FAILED_LINE = b"executor-reaper: cannot start the command: fork: "
REAPER_PY = r"""
import ctypes, fcntl, os, signal, sys, termios, time
mode, argv = sys.argv[1], sys.argv[2:]
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(36, 1, 0, 0, 0) != 0:
    os.write(2, b"executor: cannot become a child subreaper (prctl PR_SET_CHILD_SUBREAPER)\n")
    os._exit(126)
libc.prctl(15, b"%(name)s", 0, 0, 0)
HANDLED = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGQUIT)
for s in HANDLED:
    signal.signal(s, signal.SIG_IGN)
if mode == "pty":
    try:
        fcntl.ioctl(0, termios.TIOCNOTTY)  # a session leader holding the terminal lets it go
    except OSError:
        pass
try:
    pid = os.fork()
except OSError as exc:  # EAGAIN: the pids limit; the backend names it (REAPER_START_FAILED)
    os.write(2, ("%(name)s: cannot start the command: fork: %%s\n" %% exc.strerror).encode())
    os._exit(%(failed)s)
if pid == 0:
    try:
        os.setsid()
        if mode == "pty":
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        for s in HANDLED + (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(s, signal.SIG_DFL)
        with open("/proc/self/environ", "rb") as f:  # exactly as given: Python may add LC_CTYPE
            env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
        os.execvpe(argv[0], argv, env)
    except OSError as exc:
        os.write(2, ("executor: cannot run %%r: %%s\n" %% (argv[0], exc.strerror)).encode())
    os._exit(127)
null = os.open("/dev/null", os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
me = os.getpid()
while True:
    done = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOWAIT)
    if done is None or done.si_pid == pid:
        break
    os.waitpid(done.si_pid, 0)

def rest():
    kids, parent = set(), {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open("/proc/%%s/stat" %% e, "rb") as f:
                    raw = f.read()
                parent[int(e)] = int(raw[raw.rfind(b")") + 2:].split()[1])
            except (OSError, ValueError, IndexError):
                pass
    tree, grew = {me}, True
    while grew:
        grew = False
        for p, pp in parent.items():
            if pp in tree and p not in tree:
                tree.add(p)
                grew = True
    for p, pp in parent.items():
        if pp == me and p != pid:
            kids.add(p)
    return tree - {me, pid}, kids

def reap(kids):
    for k in kids:
        try:
            os.waitpid(k, os.WNOHANG)
        except ChildProcessError:
            pass

left, kids = rest()
deadline = time.monotonic() + %(grace)s
sig = signal.SIGTERM
while left:
    for p in left:
        try:
            os.kill(p, sig)
        except OSError:
            pass
    time.sleep(0.02)
    reap(kids)
    left, kids = rest()
    if time.monotonic() > deadline:
        sig = signal.SIGKILL
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.WTERMSIG(status) != signal.SIGKILL:
        signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [os.WTERMSIG(status)])
    os.kill(me, os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
""" % {"name": REAPER_NAME, "grace": REAPER_GRACE, "failed": REAPER_START_FAILED}

#: Runs the reaper with the sandbox's own python3 (``/bin/sh -c REAPER_SH executor-reaper
#: REAPER_PY MODE ARGV...``); where there is none, falls back to ``setsid`` (session only: a
#: ``setsid`` in the command escapes the kill; the backend's policy says so).
REAPER_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
REAPER_SH = r"""py=$1; mode=$2; shift 2
for p in PYTHONS; do
  [ -x "$p" ] && exec "$p" -I -S -c "$py" "$mode" "$@"
done
read -r s </proc/$$/stat; s=${s##*) }; sid=${s#* * * }; sid=${sid%% *}
[ "$sid" = $$ ] && exec "$@"  # already a session leader (a container engine's exec)
if [ "$mode" = pty ]; then exec setsid -c "$@"; fi
exec setsid "$@"
""".replace("PYTHONS", " ".join(REAPER_PYTHONS))


#: What ``Backend.policy()["kill"]`` says: how far a timeout, cancel or CloseTask reaches.
KILL_SUBREAPER = "subreaper tree (setsid, nohup and double forks die too)"
KILL_SUBREAPER_IF_PYTHON = ("subreaper tree where the sandbox has python3 (setsid, nohup and double forks die "
                            "too); else session only (setsid escapes)")
KILL_SESSION_ONLY = "session only (setsid escapes)"


def reaper_argv(argv: Sequence[str], *, pty: bool = False, python: str | None = None) -> list[str]:
    """``argv`` under the reaper: it runs as the leader of a new session, and every process it
    starts (even after ``setsid`` or a double fork) stays in the reaper's tree, which
    ``signal_session`` signals. ``python``: a known interpreter (the daemon's own, for host
    backends); else the sandbox's python3 is looked up, with ``setsid`` as the fallback."""
    mode = "pty" if pty else "pipe"
    if python is not None:
        return [python, "-I", "-S", "-c", REAPER_PY, mode, *argv]
    return ["/bin/sh", "-c", REAPER_SH, REAPER_NAME, REAPER_PY, mode, *argv]


#: POSIX sh functions (builtins only: no process per /proc entry; reads /proc, so Linux):
#: ``_extree PID SIG`` delivers SIG to the whole tree that the spawn of PID started, and
#: ``_extrees SIG PID...`` to the trees of many spawns in one walk (a shutdown ends hundreds of
#: commands at once: one read of /proc per pass for all of them, not one each):
#:
#: * the anchor: the reaper that started PID (its parent, or PID itself), whose descendants are
#:   everything the command started, ``setsid``, ``nohup`` and double forks included; without a
#:   reaper, PID itself;
#: * signalled: PID's process group first, in one kill(2) (a shell forking as the signal lands
#:   sees its child signalled too), then every descendant of the anchor and every member of
#:   PID's session, except the reaper itself and the shell running the walk;
#: * /proc is walked again until a pass finds nothing new (a child forked during a walk is caught
#:   by the next; it is a descendant of the reaper even if its parent already died), at most 20
#:   passes. Each process gets the signal once.
KILL_TREE_FUNCTION = r"""
_extrees() {
  _g=$1; shift; _me=$$; _roots=" "; _sess=" "; _seen=" $_me "
  for _p in "$@"; do
    _root=$_p; _c=
    if { read -r _s <"/proc/$_p/stat"; } 2>/dev/null; then
      _c=${_s#*(}; _c=${_c%)*}; _s=${_s##*) }; set -- $_s
      if [ "$_c" != executor-reaper ] && { read -r _s <"/proc/$2/stat"; } 2>/dev/null; then
        _c=${_s#*(}; _c=${_c%)*}; [ "$_c" = executor-reaper ] && _root=${_s%% *}
      fi
    fi
    [ "$_c" = executor-reaper ] && [ "$_root" = "$_p" ] || kill "-$_g" "-$_p" 2>/dev/null
    [ "$_c" = executor-reaper ] && _seen="$_seen$_root "  # never the reaper
    _roots="$_roots$_root "; _sess="$_sess$_p "
  done
  _pass=0
  while [ "$_pass" -lt 20 ]; do
    _pass=$((_pass + 1)); _all=""; _tree=$_roots
    for _d in /proc/[0-9]*; do
      _q=${_d#/proc/}
      { read -r _s <"$_d/stat"; } 2>/dev/null || continue
      _s=${_s##*) }; set -- $_s
      case $_sess in *" $4 "*) _tree="$_tree$_q " ;; *) _all="$_all $_q:$2" ;; esac
    done
    _grew=1
    while [ "$_grew" = 1 ]; do
      _grew=0; _left=""
      for _e in $_all; do
        case $_tree in
          *" ${_e#*:} "*) _tree="$_tree${_e%:*} "; _grew=1 ;;
          *) _left="$_left $_e" ;;
        esac
      done
      _all=$_left
    done
    _new=0
    for _q in $_tree; do
      case $_seen in *" $_q "*) continue ;; esac
      kill "-$_g" "$_q" 2>/dev/null
      _seen="$_seen$_q "; _new=1
    done
    [ "$_new" = 0 ] && break
  done
}
_extree() { _extrees "$2" "$1"; }
"""

#: ``sh -c KILL_TREE_SCRIPT executor-kill PID SIG``: the tree of PID's spawn gets SIG.
KILL_TREE_SCRIPT = KILL_TREE_FUNCTION + '_extree "$1" "$2"\nexit 0\n'

#: The former name (it signalled only the session); kept for callers outside the backends.
KILL_SESSION_SCRIPT = KILL_TREE_SCRIPT


#: ``_exclean MODE DIR...``: for each registry DIR, each file names one session a spawn recorded:
#: either the file is named by the leader's pid and holds its start time (ssh), or it holds
#: "PID STARTTIME [TTY]" (modal). A leader that still runs with that start time, as the leader of
#: its session, has its whole tree killed (``_extree PID 9``); every file is removed; with MODE
#: ``remove`` the emptied DIRs too. ``_excount`` is how many sessions were ended.
CLEANUP_FUNCTION = KILL_TREE_FUNCTION + r"""
_exclean() {
  _mode=$1; shift; _excount=0
  for _reg in "$@"; do
    for _f in "$_reg"/*; do
      [ -f "$_f" ] || continue
      _sid=; _want=; _x=
      read -r _sid _want _x <"$_f" 2>/dev/null
      if [ -z "$_want" ]; then _want=$_sid; _sid=${_f##*/}; fi
      rm -f -- "$_f"
      case $_sid in ''|*[!0-9]*) continue ;; esac
      { read -r _s <"/proc/$_sid/stat"; } 2>/dev/null || continue
      _s=${_s##*) }; set -- $_s
      if [ "${20}" = "$_want" ] && [ "$4" = "$_sid" ]; then
        _extree "$_sid" 9
        _excount=$((_excount + 1))
      fi
    done
    [ "$_mode" = remove ] && rmdir -- "$_reg" 2>/dev/null
  done
  return 0
}
"""

#: ``set -- DIR...`` then this: ends the sessions recorded in each DIR, removes the DIRs, prints how
#: many sessions it ended.
CLEANUP_SCRIPT = CLEANUP_FUNCTION + '_exclean remove "$@"\necho "$_excount"\n'

#: ``sh -c CLEANUP_KEEP_SCRIPT cleanup DIR...``: the same, keeping the (emptied) DIRs.
CLEANUP_KEEP_SCRIPT = CLEANUP_FUNCTION + '_exclean keep "$@"\nexit 0\n'


__all__ = ["REAPER_NAME", "REAPER_GRACE", "REAPER_START_FAILED", "REAPER_START_FAILED_LINE", "REAPER_PY",
           "REAPER_PYTHONS", "REAPER_SH", "reaper_argv", "KILL_SUBREAPER", "KILL_SUBREAPER_IF_PYTHON",
           "KILL_SESSION_ONLY", "KILL_TREE_FUNCTION", "KILL_TREE_SCRIPT", "KILL_SESSION_SCRIPT",
           "CLEANUP_FUNCTION", "CLEANUP_SCRIPT", "CLEANUP_KEEP_SCRIPT"]

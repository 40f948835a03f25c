"""Persistence: writes that arm code for later, and removing what was armed (``crontab -r``).
Redirects and copies onto rc files, authorized_keys, sudoers or units are judged by the
detector's write targets (``paths.write_class``); the handlers here cover tools that install
such code themselves.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    base_name,
    short_flags,
    split_options,
)
from ..model import Cmd, Kinds
from .base import Ctx, Examples, also, handles
from .remote import _stdin_texts, judge_script, judge_text

if TYPE_CHECKING:
    from ..detect import Detector


@handles("crontab", "scrontab", "fcrontab")
def _h_crontab(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``crontab -r`` deletes every scheduled job of the user (there is no undo, and no prompt by default);
    ``crontab FILE`` / ``crontab -`` install a table whose commands run later: each is judged."""
    opts, ops = split_options(args, {"-u"})
    if "r" in short_flags(opts) or "--remove" in opts:
        d.add(ctx, "crontab_remove", cmd.text)
        return
    if any(f in short_flags(opts) for f in "lei") or "--list" in opts:
        return
    # an empty table installed replaces every job, as ``-r`` does: ``crontab /dev/null``, ``crontab <
    # /dev/null``, ``echo '' | crontab -``, ``cat /dev/null | crontab -``
    fed = _stdin_texts(cmd) if not ops or ops[0] == "-" else []
    if (
        ops[:1] == ["/dev/null"]
        or (not ops or ops[0] == "-") and any(op == "<" and t == "/dev/null" for op, t in cmd.redirects)
        or fed and all(not ln.strip() or ln.lstrip().startswith("#") for t in fed for ln in t.splitlines())
        or (not ops or ops[0] == "-") and any(
            m.argv[1:] == ["/dev/null"] and base_name(m.argv[0]) == "cat" for g in cmd.upstream[-1:] for m in g
        )
    ):
        d.add(ctx, "crontab_remove", cmd.text, "Installs an empty crontab: every scheduled job of the user is deleted.")
        return
    # Installing a table (a file, or stdin with "-"): its commands run later, unattended; each is
    # judged as a command (the file is read from the task's backend).
    if ops and ops[0] != "-":
        judge_script(d, ops[0], kinds[len(args) - len(ops)] if len(kinds) == len(args) else frozenset(), cmd, ctx,
                     "crontab")
    elif ops[:1] == ["-"] or cmd.upstream or cmd.stdin_text is not None:
        for text in _stdin_texts(cmd):
            judge_text(d, "crontab", text, cmd, ctx)


_REGISTRY_KEY = re.compile(r"(?i)(?:^|[.:])(?:registry|index-url|extra-index-url|trusted-host|find-links|script-shell"
                           r"|node-options|shell|channel_alias|channels|default_channels|mirror\..*)$|^mirror\.")


@also("npm", "pnpm", "yarn", "bun", "pip", "pip3", "conda", "mamba", "micromamba", "gem", "bundle")
def _h_package_config(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Package-manager settings that decide where code comes from or what runs it: ``npm config set
    registry URL``, ``pip config set global.index-url URL``, ``conda config --add channels X``,
    ``gem sources --add URL``, ``npm config set script-shell …``: every later install obeys them."""
    words = [a for a in args if not a.startswith("-")]
    key = ""
    if name in ("npm", "pnpm", "yarn", "bun", "pip", "pip3", "bundle") and words[:2] in (["config", "set"],):
        key = words[2] if len(words) > 2 else ""
    elif name in ("npm", "pnpm") and words[:1] == ["set"]:
        key = words[1] if len(words) > 1 else ""
    elif name in ("conda", "mamba", "micromamba") and words[:1] == ["config"]:
        for i, a in enumerate(args):
            if a in ("--add", "--append", "--prepend", "--set") and i + 1 < len(args):
                key = args[i + 1]
    elif name == "gem" and words[:1] == ["sources"] and any(a in ("--add", "-a") for a in args):
        key = "registry"
    key = key.split("=", 1)[0]
    if key and _REGISTRY_KEY.search(key):
        d.add(ctx, "persistence_write", cmd.text, f"{name} is told to take code from, or run it with, {key}.")


@also("visudo")
def _h_visudo(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``visudo`` edits sudoers (who may run what as root), with whatever ``EDITOR``/``VISUAL`` says:
    ``EDITOR='tee -a' visudo`` appends a rule unseen.  Checking (``-c``) and ``-V`` pass."""
    if any(a in ("-c", "--check", "-V", "--version", "-h", "--help") for a in args):
        return
    d.add(ctx, "persistence_write", cmd.text, "visudo edits sudoers: who may run what as root.")


@also("npm", "pnpm", "yarn", "bun")
def _h_package_scripts(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``npm install``/``ci`` run the package's install hooks and ``npm run X``/``test``/``start`` its
    scripts: package.json is read from the task's backend and those scripts judged as commands (a
    ``postinstall`` written earlier, then installed, is judged when it would run)."""
    words = [a for a in args if not a.startswith("-")]
    names: tuple[str, ...]
    wanted: tuple[str, ...]
    if not words:
        verb, names = ("install", ())  # bare `npm`/`yarn`: yarn installs
        if name != "yarn":
            return
    else:
        verb, names = words[0], tuple(words[1:2])
    if verb in ("install", "i", "ci", "add", "rebuild") and (verb not in ("install", "i", "add") or len(words) == 1):
        wanted = ("preinstall", "install", "postinstall", "prepare", "preprepare", "postprepare")
    elif verb in ("run", "run-script", "rum", "urn") and names:
        wanted = ("pre" + names[0], names[0], "post" + names[0])
    elif verb in ("test", "t", "start", "stop", "restart"):
        script = {"t": "test"}.get(verb, verb)
        wanted = ("pre" + script, script, "post" + script)
    else:
        return
    prefix = next((a.split("=", 1)[1] for a in args if a.startswith(("--prefix=", "--cwd=", "--dir="))), "")
    path = (prefix.rstrip("/") + "/" if prefix else "") + "package.json"
    judge_script(d, path, frozenset(), cmd, ctx, "npm:" + ",".join(wanted), optional=True)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "persistence_write",
        match=("cat evil >> ~/.zshrc", "cp .bashrc ~/.bashrc", "mv evil /etc/cron.d/evil", "ln -sf /tmp/evil ~/.bashrc",
               "echo 'ssh-ed25519 AAAA x' >> ~/.ssh/authorized_keys", "tee -a /etc/sudoers < line",
               "npm config set registry http://npm.example", "pip config set global.index-url http://p.example/simple",
               "EDITOR='tee -a' visudo", "cp pre-commit .git/hooks/pre-commit", "echo 'Host *' >> ~/.ssh/config",
               "cp shim ~/bin/git", "cp x.service ~/.config/systemd/user/", "git config --global alias.x '!sh -c id'"),
        no_match=("cat ~/.bashrc", "cat ~/.ssh/authorized_keys", "cp .bashrc backup/bashrc", "echo x >> notes.txt",
                  "visudo -c", "npm config get registry", "pip config list", "pip config set command.option 42 --global",
                  "git config user.email a@b.c", "cat ~/.ssh/config", "npm install left-pad"),
    ),
    Examples(
        "crontab_remove",
        match=("crontab -r", "crontab -ri", "sudo crontab -r -u bob", "crontab /dev/null", "echo '' | crontab -"),
        no_match=("crontab -l", "crontab -e", "crontab jobs.txt", "echo '0 * * * * date' | crontab -"),
    ),
)

"""Persistence: writes that arm code for later, and removing what was armed (``crontab -r``).
Redirects and copies onto rc files, authorized_keys, sudoers or units are judged by the
detector's write targets (``paths.write_class``); the handlers here cover tools that install
such code themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..commands import (
    short_flags,
    split_options,
)
from ..parser import Cmd, Kinds
from .base import Ctx, Examples, handles
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
    # Installing a table (a file, or stdin with "-"): its commands run later, unattended; each is
    # judged as a command (the file is read from the task's backend).
    if ops and ops[0] != "-":
        judge_script(d, ops[0], kinds[len(args) - len(ops)] if len(kinds) == len(args) else frozenset(), cmd, ctx,
                     "crontab")
    elif ops[:1] == ["-"] or cmd.upstream or cmd.stdin_text is not None:
        for text in _stdin_texts(cmd):
            judge_text(d, "crontab", text, cmd, ctx)


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "persistence_write",
        match=("cat evil >> ~/.zshrc", "cp .bashrc ~/.bashrc", "mv evil /etc/cron.d/evil", "ln -sf /tmp/evil ~/.bashrc",
               "echo 'ssh-ed25519 AAAA x' >> ~/.ssh/authorized_keys", "tee -a /etc/sudoers < line"),
        no_match=("cat ~/.bashrc", "cat ~/.ssh/authorized_keys", "cp .bashrc backup/bashrc", "echo x >> notes.txt"),
    ),
    Examples(
        "crontab_remove",
        match=("crontab -r", "crontab -ri", "sudo crontab -r -u bob"),
        no_match=("crontab -l", "crontab -e"),
    ),
)

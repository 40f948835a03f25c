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
from .base import Ctx, handles

if TYPE_CHECKING:
    from ..detect import Detector


@handles("crontab", "scrontab", "fcrontab")
def _h_crontab(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``crontab -r`` deletes every scheduled job of the user (there is no undo, and no prompt by default)."""
    opts, _ = split_options(args, {"-u"})
    if "r" in short_flags(opts) or "--remove" in opts:
        d.add(ctx, "crontab_remove", cmd.text)

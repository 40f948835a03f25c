"""What each tool does with its arguments: one module per family of tools, plus generic semantics.

==================  ==========================================================================
module              family
==================  ==========================================================================
``base``            the registry (``handles``, ``also``, ``HANDLERS``), ``Ctx``, ``Examples``
``generic``         tools without a handler: help, dry runs, daemon ``stop`` verbs, devices
``deletes``         ``rm``, ``find -delete``, ``rsync --delete``, ``mv`` of system dirs, ``userdel -r``
``disks``           formatting, raw device writes, partitions, volumes, image writers
``system``          writes into system paths, boot, restores, firewall, security controls
``persistence``     code armed for later (crontabs, rc files, hooks, git config, shims)
``power``           shutdown/reboot/halt, also through D-Bus and ``loginctl``
``services``        stopping and disabling services
``processes``       ``kill`` pids, ``pkill``/``killall``, fork bombs
``git``             force pushes, remote deletes, resets, history rewrites, forges
``clusters``        containers, Kubernetes, Helm, IaC, clouds, VMs
``data``            SQL, database drops, Redis, Mongo, restores, HTTP DELETE
``remote``          shells, ``eval``, inline interpreter code, downloads and decoded code run
``handoff``         code handed to other programs (sed ``e``, tar actions, git ``-c``, editors…)
==================  ==========================================================================

Each module carries its rules' examples (``EXAMPLES``) next to its handlers; ``approval.examples``
checks them when the rules load.
"""

from __future__ import annotations

from ..commands import interpreter_lang
from . import (
    clusters,
    data,
    deletes,
    disks,
    generic,
    git,
    handoff,
    persistence,
    power,
    processes,
    remote,
    services,
    system,
)
from .base import HANDLERS, Ctx, Examples, Found, Handler, build, handles
from .disks import _h_mkfs
from .generic import DRY_RUN, NO_GENERIC, SQL_AT_PROMPT, carried_commands, generic_semantics, is_help
from .git import git_subcommand
from .remote import _h_interpreter

FAMILIES = (deletes, disks, system, persistence, power, services, processes, git, clusters, data, remote, handoff, generic)

build()


def pattern_handler(name: str) -> Handler | None:
    """The handler of a program known by the shape of its name (``mkfs.*``, ``python3.12``)."""
    if name.startswith(("mkfs", "mke2fs", "mkdosfs", "mkntfs", "mkexfatfs", "mkswap", "newfs")) or name in ("mkfs",):
        return _h_mkfs
    if interpreter_lang(name):
        return _h_interpreter
    return None


__all__ = [
    "DRY_RUN",
    "Examples",
    "FAMILIES",
    "HANDLERS",
    "NO_GENERIC",
    "SQL_AT_PROMPT",
    "Ctx",
    "Found",
    "Handler",
    "carried_commands",
    "generic_semantics",
    "git_subcommand",
    "handles",
    "is_help",
    "pattern_handler",
]

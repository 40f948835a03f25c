"""The handler registry shared by every family: what a handler receives, how it registers, and the
small helpers several families use.

A handler gets the unwrapped argv of one simple command (``name`` and ``args``), the quoting kinds
of each word, the command itself and the per-script context, and reports findings through the
detector (``d.add``) or hands code it carries back to it (``d.payload``, ``d.command``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..context import GateContext
from ..model import Cmd, Kinds

if TYPE_CHECKING:
    from ..detect import Detector


@dataclass
class Found:
    rule: str
    segment: str
    reason: str = ""


@dataclass
class Ctx:
    """State of one script being judged (payloads get their own)."""

    depth: int
    env: dict[str, str] = field(default_factory=dict)
    downloaded: set[str] = field(default_factory=set)
    written: dict[str, str] = field(default_factory=dict)
    out: list[Found] = field(default_factory=list)
    net_socket: bool = False


# ---------------------------------------------------------------------------------------------
# handlers: one per tool family


Handler = Callable[["Detector", str, list[str], list[Kinds], Cmd, "Ctx"], None]
HANDLERS: dict[str, Handler] = {}

# Registrations are collected while the family modules load and applied by ``build()`` once all
# of them have: first every ``handles`` (one owner per program name), then every ``also`` (extra
# handlers that run after the owner), so the result does not depend on the modules' order.
_OWNERS: list[tuple[tuple[str, ...], Handler]] = []
_EXTRAS: list[tuple[tuple[str, ...], Handler]] = []


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` as the handler of the programs ``names``."""

    def deco(fn: Handler) -> Handler:
        _OWNERS.append((names, fn))
        return fn

    return deco


def also(*names: str) -> Callable[[Handler], Handler]:
    """Register ``fn`` for ``names`` too, running after the handler that owns them (if any)."""

    def deco(fn: Handler) -> Handler:
        _EXTRAS.append((names, fn))
        return fn

    return deco


def _chain(first: Handler, then: Handler) -> Handler:
    def both(d, name, args, kinds, cmd, ctx):  # type: ignore[no-untyped-def]
        first(d, name, args, kinds, cmd, ctx)
        then(d, name, args, kinds, cmd, ctx)

    return both


# The carried-command fallback (``generic.carried_commands``): a program whose arguments hold a command
# that is dangerous on its own (``X run rm -rf /``, ``X ssh host -c 'reboot'``) may run it.  It judges
# unknown programs, and handled ones too, after their handler, unless the handler itself judged the
# command they carry: it reported something (the command asks already), or it is declared here,
# for every spelling (an empty set) or for the verbs listed (the first operand), because it decided
# by what the tool does that the carried command needs no judging.
JUDGES_CARRIED: dict[str, frozenset[str]] = {
    # ``docker run IMG CMD`` runs CMD in a fresh container of its own; the handler judges it only when
    # the container reaches the host (--privileged, host mounts: ``_h_container_inner``)
    "docker": frozenset({"run", "create"}),
    "podman": frozenset({"run", "create"}),
    "nerdctl": frozenset({"run", "create"}),
    "finch": frozenset({"run", "create"}),
    # shell builtins whose handler hands their words to the shell as code (judged there)
    "eval": frozenset(),
    "trap": frozenset(),
}
# Handled programs whose first operand starts the command they run (``parallel -j2 CMD ::: …``, as an
# unknown program's would): the fallback needs no verb such as ``run``/``exec``/``ssh`` before it.
COMMAND_OPERANDS: frozenset[str] = frozenset({"parallel"})


def build() -> dict[str, Handler]:
    """Fill ``HANDLERS`` from the registrations (idempotent: rebuilt from scratch each call)."""
    HANDLERS.clear()
    for names, fn in _OWNERS:
        for n in names:
            if n in HANDLERS:
                raise RuntimeError(f"two handlers own {n!r}: {HANDLERS[n].__name__} and {fn.__name__}")
            HANDLERS[n] = fn
    for names, fn in _EXTRAS:
        for n in names:
            prev = HANDLERS.get(n)
            HANDLERS[n] = fn if prev is None else _chain(prev, fn)
    stale = sorted(set(JUDGES_CARRIED) - set(HANDLERS))
    if stale:
        raise RuntimeError(f"JUDGES_CARRIED names programs no handler owns: {stale}")
    return HANDLERS


@dataclass(frozen=True)
class Examples:
    """A rule's own examples, checked when the rules load (``approval.examples``): every command
    in ``match`` must raise ``rule``, none in ``no_match`` may.  They document the rule by what it
    catches and what it deliberately lets through, and a change that breaks one fails at load."""

    rule: str
    match: tuple[str, ...] = ()
    no_match: tuple[str, ...] = ()
    context: GateContext | None = None  # where the examples run (a task's place, the scripts read there)


def _inner(d: Detector, argv: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """Judge a command that another program runs (container exec, mapped host paths)."""
    if argv:
        d.command(Cmd(argv, [frozenset()] * len(argv), cmd.text, cwd=None, upstream=cmd.upstream), ctx)


def _opt_value(args: list[str], short: str, long: str) -> list[str]:
    """Values of ``-X v``, ``-Xv``, ``--long v``, ``--long=v``."""
    out = []
    for i, a in enumerate(args):
        if a in (short, long) and i + 1 < len(args):
            out.append(args[i + 1])
        elif long and a.startswith(long + "="):
            out.append(a.split("=", 1)[1])
        elif short and a.startswith(short) and len(a) > len(short) and not a.startswith("--"):
            out.append(a[len(short) :])
    return out

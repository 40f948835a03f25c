"""Git and forges: force pushes in every spelling, remote branch and tag deletion, ``reset
--hard``, ``clean -f``, history rewrites, repository deletion through ``gh``/``hub``/``gh api``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import (
    short_flags,
    split_options,
)
from ..model import UNKNOWN, Cmd, Kinds
from .base import Ctx, Examples, _opt_value, also, handles

if TYPE_CHECKING:
    from ..detect import Detector


# -- git and forges


# git push options that take a value
_PUSH_WITH_ARG = frozenset({"-o", "--push-option", "--repo", "--receive-pack", "--exec"})

_GIT_GLOBAL_WITH_ARG = {
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--exec-path",
    "--super-prefix",
    "--config-env",
}


def git_subcommand(args: list[str]) -> tuple[str, list[str]] | None:
    """git's subcommand and its arguments, past the global options (``-C dir``, ``-c k=v`` ...)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in _GIT_GLOBAL_WITH_ARG else 1
    return (args[i], args[i + 1 :]) if i < len(args) else None


@handles("git")
def _h_git(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Git's destructive verbs, with options before the verb skipped (``git -C repo push -f``): force
    pushes in every spelling, ``reset --hard``, ``clean -f``, ``filter-branch``, ``reflog expire``."""
    found = git_subcommand(args)
    if found is None:
        return
    sub, rest = found
    if sub == "push":
        _judge_push(d, rest, cmd, ctx)
    elif sub == "reset":
        if "--hard" in rest:
            d.add(ctx, "git_reset_hard", cmd.text)
    elif sub == "clean":
        opts, _ = split_options(rest, {"-e", "--exclude"})
        flags = short_flags(opts)
        if ("f" in flags or "--force" in opts) and not ("n" in flags or "--dry-run" in opts):
            d.add(ctx, "git_clean_force", cmd.text)
    elif sub in ("sync", "clear", "clear-soft", "force-clone", "obliterate", "nuke", "reset-hard"):
        d.add(ctx, "git_history_destroy", cmd.text, f"git {sub} (git-extras) discards local work or history.")


def _judge_push(d: Detector, rest: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """``git push``: forced in every spelling (``-f``, ``--force-with-lease``, ``--mirror``, ``+ref``),
    and remote branch deletion (``push origin :main``, ``--delete``, ``-d``, ``--prune``).

    must match: ``git push -f``, ``git push origin :main``, ``git -C r push -d origin x``;
    must not: ``git push origin main``, ``git push origin HEAD:refs/heads/x``."""
    opts, ops = split_options(rest, _PUSH_WITH_ARG)
    force = any(
        o in ("-f", "--force", "--mirror", "--force-if-includes")
        or o.startswith("--force-with-lease")
        or (o.startswith("-") and not o.startswith("--") and "f" in o[1:])
        for o in opts
    )
    force = force or any(op.startswith("+") for op in ops[1:])
    if force:
        d.add(ctx, "git_force_push", cmd.text)
    short = short_flags([o for o in opts if not o.startswith("--")])
    if "--delete" in opts or "d" in short or "--prune" in opts or any(op.startswith(":") and len(op) > 1 for op in ops[1:]):
        d.add(ctx, "git_remote_delete", cmd.text)


@handles("gh", "hub", "glab", "tea", "bb")
def _h_forge(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Forge CLIs deleting a whole hosted repository (``gh repo delete``, ``hub delete``, ``glab repo delete``)."""
    ops = [a for a in args if not a.startswith("-")]
    if (
        name == "hub"
        and ops[:1] == ["delete"]
        or ops[:2] in (["repo", "delete"], ["repos", "delete"], ["project", "delete"])
    ):
        d.add(ctx, "repo_delete", cmd.text)


# -- git: history rewrites


@also("git")
def _h_git_more(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """History rewrites (``filter-branch``, ``filter-repo``, ``reflog expire --expire=now``, ``gc
    --prune=now`` after it, ``update-ref -d``); pushes are judged by :func:`_judge_push`.

    must match: ``git filter-branch ...``; must not: ``git gc``, ``git reflog``."""
    found = git_subcommand(args)
    if found is None:
        return
    sub, rest = found
    if sub in ("filter-branch", "filter-repo"):
        d.add(ctx, "git_history_destroy", cmd.text, f"git {sub} rewrites every commit of the history.")
    elif sub == "reflog" and rest[:1] == ["expire"]:
        if any(re.fullmatch(r"--expire(-unreachable)?=(now|all|0|never)?", a) for a in rest) or "--expire=now" in rest:
            d.add(ctx, "git_history_destroy", cmd.text, "Expires the reflog: commits only it remembers can be pruned.")
    elif sub == "gc" and any(a in ("--prune=now", "--prune=all") for a in rest):
        d.add(ctx, "git_history_destroy", cmd.text, "Prunes unreachable commits at once; they cannot be recovered.")
    elif sub == "update-ref" and ("-d" in rest or "--delete" in rest) and any("refs/remotes" not in a for a in rest if not a.startswith("-")):
        d.add(ctx, "git_history_destroy", cmd.text, "Deletes a ref directly.")


@also("gh")
def _h_gh_api(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """``gh api -X DELETE repos/...`` deletes a repository or its refs through the REST API.

    must match: ``gh api --method DELETE repos/o/r``, ``gh api -XDELETE /repos/o/r/git/refs/heads/main``;
    must not: ``gh api repos/o/r``, ``gh api -X DELETE /notifications/threads/1/subscription``."""
    if not args or args[0] != "api":
        return
    methods = _opt_value(args, "-X", "--method")
    if any(m.upper() == "DELETE" for m in methods):
        ep = [a for a in args[1:] if not a.startswith("-") and a.upper() != "DELETE"]
        if any(re.match(r"^/?(repos|orgs|projects|gists)/", e) or UNKNOWN in e for e in ep):
            d.add(ctx, "repo_delete", cmd.text, "gh api DELETE removes a repository, a ref or other hosted data.")


# The rules of this family, by what they must and must not catch (checked at load: approval.examples).
EXAMPLES: tuple[Examples, ...] = (
    Examples(
        "git_force_push",
        match=("git push -f", "git push --force origin main", "git push --mirror", "git push origin +main",
               "git push --force-with-lease", "git -C repo push -f", "git push -uf origin x"),
        no_match=("git push", "git push -u origin feature", "git status", "git push --dry-run -f"),
    ),
    Examples(
        "git_remote_delete",
        match=("git push origin :old-branch", "git push origin --delete old", "git push -d origin v1.0"),
        no_match=("git push origin new-branch", "git branch -d merged", "git tag -d v0"),
    ),
    Examples(
        "git_reset_hard",
        match=("git reset --hard", "git reset --hard HEAD~3", "git reset --hard origin/main"),
        no_match=("git reset", "git reset --soft HEAD~1", "git reset HEAD file.txt"),
    ),
    Examples(
        "git_clean_force",
        match=("git clean -f", "git clean -fdx", "git clean -xdf"),
        no_match=("git clean -n", "git clean -i", "git clean -nd"),
    ),
    Examples(
        "git_history_destroy",
        match=("git filter-branch --tree-filter 'rm -f x' HEAD", "git reflog expire --expire=now --all", "git gc --prune=now"),
        no_match=("git gc", "git reflog", "git log --oneline"),
    ),
    Examples(
        "repo_delete",
        match=("gh repo delete owner/repo --yes", "gh api -X DELETE repos/owner/repo"),
        no_match=("gh repo view owner/repo", "gh api repos/owner/repo", "gh pr list"),
    ),
)

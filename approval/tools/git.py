"""Git and forges: force pushes in every spelling, remote branch and tag deletion, ``reset
--hard``, ``clean -f``, history rewrites, repository deletion through ``gh``/``hub``/``gh api``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ..commands import getopt, has_opt, opt_values
from ..model import UNKNOWN, Cmd, Kinds
from .base import Ctx, Examples, _inner, _opt_value, also, handles

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


# Long options of the subcommands judged here: git takes any unique prefix (``reset --ha``).
_LONGS = {
    "reset": ("--hard", "--soft", "--mixed", "--merge", "--keep", "--quiet", "--patch", "--intent-to-add",
              "--pathspec-from-file", "--pathspec-file-nul", "--recurse-submodules", "--no-recurse-submodules",
              "--refresh", "--no-refresh"),
    "clean": ("--force", "--dry-run", "--quiet", "--interactive", "--exclude"),
    "push": ("--all", "--branches", "--mirror", "--tags", "--follow-tags", "--delete", "--dry-run", "--porcelain",
             "--force", "--force-with-lease", "--force-if-includes", "--atomic", "--signed", "--push-option",
             "--receive-pack", "--exec", "--repo", "--set-upstream", "--thin", "--no-thin", "--quiet", "--verbose",
             "--progress", "--no-progress", "--recurse-submodules", "--verify", "--no-verify", "--ipv4", "--ipv6",
             "--prune", "--no-force-with-lease", "--no-force-if-includes", "--no-signed", "--no-atomic"),
    "send-pack": ("--all", "--mirror", "--dry-run", "--force", "--force-with-lease", "--atomic", "--stateless-rpc",
                  "--receive-pack", "--exec", "--verbose", "--thin", "--signed"),
    "gc": ("--aggressive", "--auto", "--prune", "--no-prune", "--quiet", "--force", "--keep-largest-pack", "--cruft",
           "--no-cruft", "--max-cruft-size", "--detach", "--no-detach"),
    "prune": ("--dry-run", "--verbose", "--progress", "--expire"),
    "checkout": ("--force", "--quiet", "--progress", "--no-progress", "--track", "--no-track", "--detach", "--orphan",
                 "--merge", "--conflict", "--patch", "--ours", "--theirs", "--ignore-skip-worktree-bits",
                 "--overwrite-ignore", "--no-overwrite-ignore", "--recurse-submodules", "--pathspec-from-file",
                 "--guess", "--no-guess", "--overlay", "--no-overlay", "--ignore-other-worktrees"),
    "switch": ("--create", "--force-create", "--detach", "--guess", "--no-guess", "--force", "--discard-changes",
               "--merge", "--conflict", "--quiet", "--progress", "--track", "--no-track", "--orphan",
               "--ignore-other-worktrees", "--recurse-submodules"),
    "restore": ("--source", "--staged", "--worktree", "--patch", "--quiet", "--progress", "--ours", "--theirs",
                "--merge", "--conflict", "--ignore-unmerged", "--ignore-skip-worktree-bits", "--overlay",
                "--no-overlay", "--recurse-submodules", "--pathspec-from-file", "--pathspec-file-nul"),
    "read-tree": ("--reset", "--prefix", "--index-output", "--trivial", "--aggressive", "--dry-run", "--empty"),
}
_SHORT_WITH_ARG = {"push": "o", "clean": "e", "checkout": "bB", "switch": "cC", "restore": "s", "reset": ""}
_LONG_WITH_ARG = {"push": ("--push-option", "--receive-pack", "--exec", "--repo"), "clean": ("--exclude",),
                  "restore": ("--source",), "checkout": ("--conflict",), "switch": ("--create", "--force-create",
                                                                                   "--conflict")}
_WHOLE_TREE = re.compile(r"^(?:\.|\./|:/|:\(top\)|\*|\.\*|:/\*)$")


def _git_opts(sub: str, rest: list[str]) -> tuple[list[tuple[str, str | None]], list[str]]:
    return getopt(rest, _SHORT_WITH_ARG.get(sub, ""), _LONGS.get(sub, ()), _LONG_WITH_ARG.get(sub, ()))


def _git_configs(args: list[str]) -> list[tuple[str, str]]:
    """``-c key=value`` given to git before its subcommand (key lower-cased)."""
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] == "-c" and i + 1 < len(args):
            k, _, v = args[i + 1].partition("=")
            out.append((k.lower(), v))
        i += 2 if args[i] in _GIT_GLOBAL_WITH_ARG else 1
    return out


@handles("git")
def _h_git(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """Git's destructive verbs, with options before the verb skipped (``git -C repo push -f``) and
    options parsed as git does (unique prefixes ``--ha``, clusters ``-fdx``, after operands): force
    pushes in every spelling, ``reset --hard``, ``clean -f`` (or without it once
    ``clean.requireForce`` is off), discarding the work tree (``checkout -- .``, ``restore .``,
    ``checkout -f``, ``switch -f``, ``read-tree -u --reset``), ``stash clear``."""
    found = git_subcommand(args)
    if found is None:
        return
    sub, rest = found
    configs = _git_configs(args)
    for k, v in configs:
        _judge_config(d, k, v, cmd, ctx)
    p = _git_opts(sub, rest)
    if sub in ("push", "send-pack"):
        _judge_push(d, sub, rest, configs, cmd, ctx)
    elif sub == "reset":
        if has_opt(p, "--hard"):
            d.add(ctx, "git_reset_hard", cmd.text)
    elif sub == "clean":
        no_force = any(k == "clean.requireforce" and v.lower() in ("false", "0", "no", "off") for k, v in configs)
        if (has_opt(p, "-f", "--force") or no_force) and not has_opt(p, "-n", "--dry-run", "-i", "--interactive"):
            d.add(ctx, "git_clean_force", cmd.text)
    elif sub == "config":
        ops = [a for a in rest if not a.startswith("-")]
        if len(ops) >= 2:
            _judge_config(d, ops[0].lower(), ops[1], cmd, ctx)
    elif sub in ("checkout", "switch", "restore", "read-tree"):
        _judge_discard(d, sub, p, cmd, ctx)
    elif sub == "stash" and rest[:1] == ["clear"]:
        d.add(ctx, "git_reset_hard", cmd.text, "git stash clear deletes every stash: the work saved in them is lost.")
    elif sub in ("sync", "clear", "clear-soft", "force-clone", "obliterate", "nuke", "reset-hard"):
        d.add(ctx, "git_history_destroy", cmd.text, f"git {sub} (git-extras) discards local work or history.")
    elif sub in ("magic", "undo", "delete-branch", "delete-tag"):
        _git_extras(d, sub, rest, cmd, ctx)


@handles("etckeeper")
def _h_etckeeper(d: Detector, name: str, args: list[str], kinds: list[Kinds], cmd: Cmd, ctx: Ctx) -> None:
    """etckeeper keeps /etc under version control: ``etckeeper uninit`` deletes that history (the
    repository in /etc), and ``etckeeper vcs ARGS`` runs its VCS (git) in /etc: judged as ``git ARGS``
    there (``etckeeper vcs reset --hard`` throws away /etc's uncommitted changes)."""
    p = getopt(args, "d", (), ())
    ops = p[1]
    if ops[:1] == ["uninit"]:
        d.add(ctx, "git_history_destroy", cmd.text, "etckeeper uninit deletes the version history of /etc.")
    elif ops[:1] == ["vcs"] and len(ops) > 1:
        _inner(d, ["git", *args[args.index("vcs") + 1 :]], cmd, ctx)


def _git_extras(d: Detector, sub: str, rest: list[str], cmd: Cmd, ctx: Ctx) -> None:
    """git-extras commands that push or reset, read as their scripts parse their options: ``git magic
    [-a] [-m msg] [-e] [-p] [-f]`` force-pushes with ``-f`` (``-fp``, ``-pf``), ``git undo --hard``/``-h`` is
    ``reset --hard HEAD~n``, ``git delete-branch``/``delete-tag NAME`` delete it on the remote too."""
    if sub == "magic":
        p = getopt(rest, "m", ("--all", "--edit", "--push", "--force"), ())
        if has_opt(p, "-f", "--force"):
            d.add(ctx, "git_force_push", cmd.text, "git magic -f (git-extras) commits and force-pushes.")
    elif sub == "undo":
        p = getopt(rest, "", ("--soft", "--hard"), ())
        if has_opt(p, "-h", "--hard"):
            d.add(ctx, "git_reset_hard", cmd.text, "git undo --hard (git-extras) resets hard, discarding the work.")
    elif [a for a in rest if not a.startswith("-")]:
        d.add(ctx, "git_remote_delete", cmd.text, f"git {sub} (git-extras) deletes it locally and on the remote.")


def _judge_discard(d: Detector, sub: str, p: tuple[list[tuple[str, str | None]], list[str]], cmd: Cmd, ctx: Ctx) -> None:
    """``checkout -- .``/``checkout .``/``restore .`` (the whole tree; ``restore --staged`` alone only
    unstages), ``checkout -f``/``switch -f``/``--discard-changes``, ``read-tree -u --reset``."""
    ops = p[1]
    whole = any(_WHOLE_TREE.match(o) for o in ops)
    if sub == "restore":
        worktree = has_opt(p, "-W", "--worktree") or not has_opt(p, "-S", "--staged")
        hit = whole and worktree
    elif sub == "read-tree":
        hit = has_opt(p, "--reset") and has_opt(p, "-u")
    else:
        hit = has_opt(p, "-f", "--force", "--discard-changes") or (sub == "checkout" and whole)
    if hit:
        d.add(ctx, "git_reset_hard", cmd.text, f"git {sub} here throws away uncommitted changes in the work tree.")


def _judge_config(d: Detector, key: str, value: str, cmd: Cmd, ctx: Ctx) -> None:
    """git configuration that turns later commands destructive: ``clean.requireForce false``, a
    mirror or forced push refspec, an alias for a dangerous command (judged as what it runs)."""
    low = value.lower()
    if key == "init.templatedir" and value:
        d.add(ctx, "persistence_write", cmd.text, "init.templateDir seeds every new or cloned repository's hooks from it.")
    elif key == "clean.requireforce" and low in ("false", "0", "no", "off"):
        d.add(ctx, "git_clean_force", cmd.text, "Turns off clean.requireForce: git clean then deletes without -f.")
    elif re.fullmatch(r"remote\..+\.mirror", key) and low in ("true", "1", "yes", "on") or (
        re.fullmatch(r"remote\..+\.push|push\.default", key) and value.startswith("+")
    ):
        d.add(ctx, "git_force_push", cmd.text, f"git config {key} {value} makes every push forced.")
    elif key.startswith("alias.") and value.strip():
        text = value.strip()[1:] if value.strip().startswith("!") else "git " + value
        for f in d.script(text, ctx.depth + 1):
            d.add(ctx, f.rule, cmd.text, f"The git alias {key[6:]} runs `{text[:80]}`: {f.reason or f.rule}")
            break


def _judge_push(d: Detector, sub: str, rest: list[str], configs: list[tuple[str, str]], cmd: Cmd, ctx: Ctx) -> None:
    """``git push``: forced in every spelling (``-f``, ``--force-with-lease``, ``--mirror``, ``+ref``,
    ``-c remote.x.mirror=true``), and remote branch deletion (``push origin :main``, ``--delete``,
    ``-d``, ``--prune``).

    must match: ``git push -f``, ``git push origin :main``, ``git -C r push -d origin x``;
    must not: ``git push origin main``, ``git push origin HEAD:refs/heads/x``."""
    p = _git_opts(sub, rest)
    ops = p[1]
    force = has_opt(p, "-f", "--force", "--mirror", "--force-if-includes", "--force-with-lease")
    force = force or any(op.startswith("+") for op in ops[1:])
    force = force or any(
        re.fullmatch(r"remote\..+\.mirror", k) and v.lower() in ("true", "1", "yes", "on", "")
        or re.fullmatch(r"remote\..+\.push", k) and v.startswith("+")
        for k, v in configs
    )
    if force:
        d.add(ctx, "git_force_push", cmd.text)
    if has_opt(p, "--delete", "-d", "--prune") or any(op.startswith(":") and len(op) > 1 for op in ops[1:]):
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
    elif sub in ("gc", "prune") and any(
        v in ("now", "all") for v in opt_values(_git_opts(sub, rest), "--prune", "--expire")
    ):
        d.add(ctx, "git_history_destroy", cmd.text, "Prunes unreachable commits at once; they cannot be recovered.")
    elif sub == "reflog" and rest[:1] == ["delete"]:
        d.add(ctx, "git_history_destroy", cmd.text, "Deletes reflog entries: commits only they remember can be pruned.")
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
               "git push --force-with-lease", "git -C repo push -f", "git push -uf origin x", "git magic -pf -m wip"),
        no_match=("git push", "git push -u origin feature", "git status", "git push --dry-run -f", "git magic -p -m wip"),
    ),
    Examples(
        "git_remote_delete",
        match=("git push origin :old-branch", "git push origin --delete old", "git push -d origin v1.0",
               "git delete-tag v0.9"),
        no_match=("git push origin new-branch", "git branch -d merged", "git tag -d v0", "git delete-merged-branches"),
    ),
    Examples(
        "git_reset_hard",
        match=("git reset --hard", "git reset --hard HEAD~3", "git reset --hard origin/main", "git undo --hard 2"),
        no_match=("git reset", "git reset --soft HEAD~1", "git reset HEAD file.txt", "git undo --soft"),
    ),
    Examples(
        "git_clean_force",
        match=("git clean -f", "git clean -fdx", "git clean -xdf"),
        no_match=("git clean -n", "git clean -i", "git clean -nd"),
    ),
    Examples(
        "git_history_destroy",
        match=("git filter-branch --tree-filter 'rm -f x' HEAD", "git reflog expire --expire=now --all", "git gc --prune=now",
               "etckeeper uninit -f"),
        no_match=("git gc", "git reflog", "git log --oneline", "etckeeper commit 'nightly'", "etckeeper vcs log"),
    ),
    Examples(
        "repo_delete",
        match=("gh repo delete owner/repo --yes", "gh api -X DELETE repos/owner/repo"),
        no_match=("gh repo view owner/repo", "gh api repos/owner/repo", "gh pr list"),
    ),
)

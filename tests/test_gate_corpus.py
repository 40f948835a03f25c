"""The gate measured on labelled corpora: the shared everyday corpus and the gate's own."""

from __future__ import annotations

import csv
import pathlib

import pytest
from executor.approval import Decision, analyze

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "corpus" / "everyday-commands.tsv"
OWN = REPO / "tests" / "data" / "gate_corpus.tsv"

_MARKERS = {"\u23ce": "\n", "\u21e5": "\t", "\u2400": "\x00", "\u241b": "\x1b"}


def _decode(cmd: str) -> str:
    for marker, raw in _MARKERS.items():
        cmd = cmd.replace(marker, raw)
    return cmd


def load_own() -> list[tuple[str, str, str, str]]:
    rows = []
    with OWN.open(encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or line.startswith("expect\t") or not line.strip():
                continue
            expect, category, technique, command = line.rstrip("\n").split("\t", 3)
            rows.append((expect, category, technique, _decode(command)))
    return rows


def _flagged(command: str) -> bool:
    return analyze(command).decision is not Decision.ALLOW


def test_shared_corpus_false_positives_and_recall() -> None:
    if not SHARED.exists():
        pytest.skip(f"shared corpus not found at {SHARED} (CI places it beside the repository)")
    with SHARED.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    allow = [r["command"] for r in rows if r["expect"] == "allow"]
    block = [r["command"] for r in rows if r["expect"] == "block"]
    assert len(allow) > 20_000 and len(block) > 400, "the shared corpus looks truncated"
    false_positives = [c for c in allow if _flagged(c)]
    caught = sum(1 for c in block if _flagged(c))
    assert len(false_positives) <= 0.001 * len(allow), false_positives[:20]
    assert caught >= 0.90 * len(block), f"recall {caught / len(block):.3f}"


def test_own_corpus_is_big_and_covers_every_family_and_disguise() -> None:
    rows = load_own()
    assert len(rows) >= 300
    block = [r for r in rows if r[0] == "block"]
    allow = [r for r in rows if r[0] == "allow"]
    assert len(block) >= 150 and len(allow) >= 150
    categories = {r[1] for r in block}
    for family in (
        "delete",
        "disk",
        "sql",
        "system_write",
        "service",
        "power",
        "remote_code",
        "reverse_shell",
        "fork_bomb",
        "kill",
        "git",
        "crontab",
        "firewall",
        "container",
        "cluster",
        "cloud",
        "disguise",
    ):
        assert family in categories, family
    techniques = {r[2] for r in block}
    for disguise in (
        "sudo",
        "doas",
        "env",
        "command",
        "builtin_exec",
        "nohup",
        "nice",
        "ionice",
        "timeout",
        "time",
        "stdbuf",
        "setsid",
        "xargs",
        "watch",
        "abspath",
        "backslash",
        "empty_quotes",
        "double_quotes",
        "ansi_c",
        "brace",
        "ifs",
        "variable",
        "chain",
        "pipe",
        "newline",
        "subshell",
        "cmdsubst",
        "backticks",
        "procsubst",
        "heredoc_shell",
        "herestring",
        "bash_c",
        "sh_c",
        "eval",
        "nested",
        "python_c",
        "perl_e",
        "ruby_e",
        "node_e",
        "decode",
        "download",
        "nfkc",
        "ansi_escape",
        "nul",
        "tabs",
    ):
        assert disguise in techniques, disguise


def test_own_corpus_recall_and_false_positives() -> None:
    rows = load_own()
    block = [r for r in rows if r[0] == "block"]
    allow = [r for r in rows if r[0] == "allow"]
    missed = [r for r in block if not _flagged(r[3])]
    false_positives = [r for r in allow if _flagged(r[3])]
    assert len(block) - len(missed) >= 0.97 * len(block), missed
    assert len(false_positives) <= 0.03 * len(allow), false_positives


def _heldout(name: str) -> list[tuple[str, str, str]]:

    rows = []
    for line in (REPO / "tests" / "data" / name).read_text(encoding="utf-8").splitlines():
        if line.startswith(("#", "expect\t")) or not line.strip():
            continue
        expect, _cat, _tech, ctx, cmd = line.split("\t", 4)
        rows.append((expect, ctx, _decode(cmd)))
    return rows


@pytest.mark.parametrize(("name", "recall", "false_positives"),
                         [("gate_heldout.tsv", 0.97, 0.03), ("gate_heldout2.tsv", 0.90, 0.05),
                          ("gate_heldout3.tsv", 0.95, 0.05)])
def test_held_out_sets_keep_their_scores(name: str, recall: float, false_positives: float) -> None:
    """Rows written apart from the rules (see each file's header for when); kept at the issue's targets."""
    from executor.approval import GateContext

    def ctx(s: str) -> GateContext | None:
        if not s:
            return None
        d = dict(kv.split("=", 1) for kv in s.split(";"))
        return GateContext(cwd=d.get("cwd", ""), root=d.get("root", ""), home=d.get("home", ""),
                           protected=tuple(p for p in d.get("protected", "").split(":") if p))

    rows = _heldout(name)
    block = [analyze(c, context=ctx(x)).decision is not Decision.ALLOW for e, x, c in rows if e == "block"]
    allow = [analyze(c, context=ctx(x)).decision is not Decision.ALLOW for e, x, c in rows if e == "allow"]
    assert sum(block) >= recall * len(block), f"{name}: recall {sum(block)}/{len(block)}"
    assert sum(allow) <= false_positives * len(allow), f"{name}: {sum(allow)}/{len(allow)} allow rows flagged"

"""Benchmark the approval gate: latency per check, and recall / false positives on the corpora.

Usage: python bench/gate.py [--repeat N]

Every check runs uncached (the detector's small LRU cache is cleared before each call), over
the gate's own labelled corpus (tests/data/gate_corpus.tsv) and, when present, the shared
everyday corpus (../shared/corpus/everyday-commands.tsv).  Prints a table and writes JSON rows
to bench/results/gate.json.  Targets: p50 <= 0.5 ms; shared corpus false positives <= 0.1%.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import pathlib
import platform
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from executor.approval import Decision, analyze  # noqa: E402
from executor.approval.detect import clear_cache  # noqa: E402

OWN = ROOT / "tests" / "data" / "gate_corpus.tsv"
SHARED = ROOT.parent / "shared" / "corpus" / "everyday-commands.tsv"
RESULTS = ROOT / "bench" / "results" / "gate.json"
_MARKERS = {"\u23ce": "\n", "\u21e5": "\t", "\u2400": "\x00", "\u241b": "\x1b"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def load_own() -> list[tuple[str, str]]:
    rows = []
    for line in OWN.read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or line.startswith("expect\t") or not line.strip():
            continue
        expect, _category, _technique, command = line.split("\t", 3)
        for marker, raw in _MARKERS.items():
            command = command.replace(marker, raw)
        rows.append((expect, command))
    return rows


def load_shared() -> list[tuple[str, str]]:
    with SHARED.open(encoding="utf-8") as f:
        return [(r["expect"], r["command"]) for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]


def measure(name: str, rows: list[tuple[str, str]], repeat: int) -> list[dict]:
    times: list[float] = []
    flagged = {"allow": 0, "block": 0}
    total = {"allow": 0, "block": 0}
    for i in range(repeat):
        for expect, command in rows:
            clear_cache()
            start = time.perf_counter()
            verdict = analyze(command)
            times.append((time.perf_counter() - start) * 1000)
            if i == 0 and expect in total:
                total[expect] += 1
                flagged[expect] += verdict.decision is not Decision.ALLOW
    latency = {
        "metric": "gate_check_ms",
        "corpus": name,
        "samples": len(times),
        "p50": round(percentile(times, 0.5), 4),
        "p99": round(percentile(times, 0.99), 4),
        "mean": round(statistics.fmean(times), 4),
        "max": round(max(times), 3),
    }
    quality = {
        "metric": "gate_quality",
        "corpus": name,
        "recall": round(flagged["block"] / total["block"], 4) if total["block"] else None,
        "false_positive_rate": round(flagged["allow"] / total["allow"], 5) if total["allow"] else None,
        "block_rows": total["block"],
        "allow_rows": total["allow"],
        "flagged_block": flagged["block"],
        "flagged_allow": flagged["allow"],
    }
    return [latency, quality]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="passes over the own corpus (the shared one runs once)")
    ap.add_argument("--out", type=pathlib.Path, default=RESULTS, help="where the JSON rows go")
    args = ap.parse_args()
    rows = measure("own", load_own(), args.repeat)
    if SHARED.exists():
        rows += measure("shared-everyday", load_shared(), 1)
    else:
        print(f"(shared corpus not found at {SHARED}; skipped)")
    meta = {
        "host": platform.node() or "unknown",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    for r in rows:
        if r["metric"] == "gate_check_ms":
            print(
                f"{r['corpus']:16} latency  p50 {r['p50']:.3f} ms  p99 {r['p99']:.3f} ms  mean {r['mean']:.3f} ms  "
                f"max {r['max']:.1f} ms  (n={r['samples']})"
            )
        else:
            print(
                f"{r['corpus']:16} quality  recall {r['recall']}  false positives {r['false_positive_rate']}  "
                f"({r['flagged_block']}/{r['block_rows']} block, {r['flagged_allow']}/{r['allow_rows']} allow flagged)"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps([{**r, **meta} for r in rows], indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()

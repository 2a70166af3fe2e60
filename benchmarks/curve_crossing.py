"""Benchmark: do a table's learning curves cross? (issue 36, "longer schedules so curves cross")

For each learning-curve table of ``benchmarks/curves/`` (its seed-0 curves that trained every
epoch): the epoch of each curve's best validation score, and, a quarter and half of the way
through the schedule, how well the best score so far ranks the configurations as their best
over the whole schedule does:

- Spearman's ρ between the two scores over the curves;
- the share of the final top 10% (by the best over the whole schedule) already in the top 10%
  by the best so far.

Curves that cross late give a low ρ and a low share: a scheduler stopping early would stop the
wrong ones. Reads the tables only (no training, no surrogate); seconds on one core.

    python benchmarks/curve_crossing.py [--tables glyphs-wide glyphs ...] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import TABLES  # noqa: E402

FRACTIONS = (0.25, 0.5)  # of the schedule
TOP = 0.10  # the share of curves that counts as the top


def full_curves(path: Path) -> list[list[float]]:
    """The validation MAP@R per epoch of each seed-0 curve of the table file at ``path`` that
    trained as many epochs as the longest one (those stopped early or failed are left out)."""
    curves = []
    with open(path) as handle:
        for line in handle:
            row = json.loads(line)
            if row.get("kind") == "run" and row.get("seed") == 0 and row.get("status") == "ok":
                curves.append([float(e["val"]["map@r"]) for e in row["epochs"]])
    longest = max((len(c) for c in curves), default=0)
    return [c for c in curves if len(c) == longest]


def top_kept(early: Sequence[float], final: Sequence[float], share: float = TOP) -> float:
    """The share of the top ``share`` of ``final`` that is also in the top ``share`` of
    ``early`` (ties broken by position, as a stable sort leaves them)."""
    count = max(1, int(len(final) * share))
    top = set(sorted(range(len(final)), key=lambda i: -final[i])[:count])
    top_early = set(sorted(range(len(early)), key=lambda i: -early[i])[:count])
    return len(top & top_early) / count


def crossing(curves: list[list[float]]) -> dict[str, Any]:
    """The measures (module docstring) of ``curves`` (validation scores per epoch)."""
    from scipy.stats import spearmanr

    epochs = len(curves[0])
    final = [max(c) for c in curves]
    best_epochs = sorted(c.index(max(c)) + 1 for c in curves)
    quartiles = statistics.quantiles(best_epochs, n=4, method="inclusive")
    out: dict[str, Any] = {"epochs": epochs, "curves": len(curves),
                           "best_epoch": {"median": statistics.median(best_epochs),
                                          "q1": quartiles[0], "q3": quartiles[2]}}
    for fraction in FRACTIONS:
        at = max(1, round(epochs * fraction))
        early = [max(c[:at]) for c in curves]
        out[str(fraction)] = {"epoch": at, "spearman": float(spearmanr(early, final)[0]),
                              "top_kept": top_kept(early, final)}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    recorded = [name for name, spec in TABLES.items() if spec.mirror_of is None]
    parser.add_argument("--tables", nargs="+", choices=recorded, default=recorded)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = {name: crossing(full_curves(TABLES[name].table)) for name in args.tables}
    for name, r in results.items():
        q, h = r["0.25"], r["0.5"]
        print(f"{name:20} {r['epochs']:3} epochs {r['curves']:4} curves; best epoch "
              f"{r['best_epoch']['median']:g} ({r['best_epoch']['q1']:g}-"
              f"{r['best_epoch']['q3']:g}); at epoch {q['epoch']}: rho {q['spearman']:.2f}, "
              f"top 10% kept {q['top_kept']:.2f}; at epoch {h['epoch']}: rho "
              f"{h['spearman']:.2f}, kept {h['top_kept']:.2f}")
    if args.out:
        args.out.write_text(json.dumps({"tables": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

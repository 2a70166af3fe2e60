"""Benchmark: one training's seed-to-seed spread on each table, from pairs and from more seeds
(issue 36: "more seeds of the same points in the tables").

For each learning-curve table of ``benchmarks/curves/`` that holds configurations trained with
two or more seeds:

- the replay's noise fit (``search/replay/noise.py``, :func:`fit_noise`: within each
  configuration's seeds of one recording session) on seeds 0 and 1 only (the pairs the tables
  held before ``record-curves --repeat-seeds``) and on every recorded seed, each with a
  bootstrap 95% interval over configurations (resampled with replacement, all their seeds);
- whether the seeds added later are the same kind of training as the first two: per
  configuration, the mean best validation score (and test score of the model it selects) of its
  seeds 2 and above minus that of its seeds 0 and 1, paired over configurations, with a
  bootstrap 95% interval. The later seeds may have run on another device (the row's
  ``recorded_on``) or another revision of the code; seed noise alone gives a difference whose
  interval holds zero.

``--against TABLE AGAIN``: the same configurations and seeds of ``TABLE`` trained again in
``AGAIN`` (on this machine, say), AGAIN minus TABLE, paired; whether a machine alone shifts the
scores.

Reads the tables only (no training, no surrogate); about a minute on one core.

    python benchmarks/seed_noise.py [--tables glyphs ...] [--files T.jsonl ...] [--resamples 1000]
        [--out FILE.json]
    python benchmarks/seed_noise.py --against TABLE.jsonl AGAIN.jsonl [--out FILE.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import TABLES  # noqa: E402

FIELDS = ("sigma_val", "sigma_test", "sigma_offset", "sigma_epoch", "rho")
RESAMPLES = 1000


def repeated(table: Any) -> dict[str, list[Any]]:
    """The curves of each configuration of ``table`` with two or more seeds, by key, in seed
    order (every recorded curve: :func:`fit_noise` itself leaves out those cut short)."""
    groups: dict[str, list[Any]] = {}
    for (key, _), curve in sorted(table.curves.items()):
        groups.setdefault(key, []).append(curve)
    return {key: curves for key, curves in groups.items() if len(curves) >= 2}


def with_seeds_below(table: Any, seeds: int) -> Any:
    """``table`` as it was with seeds 0 to ``seeds`` - 1 only."""
    return dataclasses.replace(table, curves={k: c for k, c in table.curves.items()
                                              if k[1] < seeds})


def resampled(table: Any, groups: dict[str, list[Any]], picks: Sequence[int]) -> Any:
    """A table of the configurations ``groups`` lists at positions ``picks`` (a bootstrap
    sample: one may come twice, under another key)."""
    keys = list(groups)
    curves = {(f"{keys[i]}#{n}", c.seed): c
              for n, i in enumerate(picks) for c in groups[keys[i]]}
    return dataclasses.replace(table, curves=curves)


def interval(values: Sequence[float]) -> dict[str, float]:
    """The 2.5th and 97.5th percentiles of ``values`` (NaN left out)."""
    import numpy as np

    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return {"low": math.nan, "high": math.nan}
    low, high = np.percentile(finite, [2.5, 97.5])
    return {"low": float(low), "high": float(high)}


def fit_with_interval(table: Any, resamples: int, seed: int = 0) -> dict[str, Any]:
    """:func:`fit_noise` of ``table``, and each field's bootstrap interval over its
    configurations with two or more seeds."""
    import numpy as np

    from dmlsearch.search.replay import fit_noise

    groups = repeated(table)
    fit = fit_noise(table)
    rng = np.random.default_rng(seed)
    draws = [fit_noise(resampled(table, groups, rng.integers(len(groups), size=len(groups))))
             for _ in range(resamples)]
    return {"configurations": len(groups), "session_groups": fit.groups,
            "seeds_per_configuration": dict(sorted(Counter(map(len, groups.values())).items())),
            **{f: {"value": getattr(fit, f), **interval([getattr(d, f) for d in draws])}
               for f in FIELDS}}


def best_scores(curve: Any, metric: str) -> tuple[float, float]:
    """A curve's best validation score and the test score of the model selected there."""
    best = max(float(r["val"][metric]) for r in curve.epochs)
    test = (curve.test_at(len(curve.epochs), metric, "max") or {}).get(metric)
    return best, float(test) if test is not None else math.nan


def later_seeds(table: Any, resamples: int, seed: int = 0) -> dict[str, Any] | None:
    """Seeds 2 and above against seeds 0 and 1 of the same configurations (module docstring);
    None when no configuration has both."""
    import numpy as np

    metric = table.metric
    diffs, each = [], []
    for key, curves in repeated(table).items():
        first = [best_scores(c, metric) for c in curves if c.seed < 2 and c.status == "ok"]
        later = [best_scores(c, metric) for c in curves if c.seed >= 2 and c.status == "ok"]
        if first and later:
            diffs.append([float(np.mean([s[i] for s in later]) - np.mean([s[i] for s in first]))
                          for i in (0, 1)])
            each.append({"config": json.loads(key), "first_val": [s[0] for s in first],
                         "later_val": [s[0] for s in later]})
    if not diffs:
        return None
    return {**paired(diffs, resamples, seed), "each": each}


def paired(diffs: Sequence[Sequence[float]], resamples: int, seed: int) -> dict[str, Any]:
    """Per configuration, (validation, test) differences: each column's mean and its bootstrap
    95% interval over configurations (one draw of configurations for both columns)."""
    from benchmarks.hpo_measures import bootstrap_mean

    return {"configurations": len(diffs), **{
        name: bootstrap_mean([d[i] for d in diffs], resamples=resamples, seed=seed)
        for i, name in enumerate(("val", "test"))}}


def same_seeds(table: Any, other: Any, resamples: int, seed: int = 0) -> dict[str, Any] | None:
    """The same configurations and seeds trained again elsewhere (in another recording
    session: lines copied from ``table`` are left out): ``other``'s best validation (and
    selected test) score minus ``table``'s, paired by configuration and seed, with a bootstrap
    95% interval over configurations; None when they share none."""
    import numpy as np

    metric = table.metric
    by_config: dict[str, list[list[float]]] = {}
    for (key, s), curve in table.curves.items():
        again = other.curves.get((key, s))
        if (again is not None and again.session != curve.session  # trained again, not copied
                and curve.status == again.status == "ok"):
            ours, theirs = best_scores(curve, metric), best_scores(again, metric)
            by_config.setdefault(key, []).append([theirs[i] - ours[i] for i in (0, 1)])
    if not by_config:
        return None
    diffs = [np.mean(v, axis=0).tolist() for v in by_config.values()]
    return {**paired(diffs, resamples, seed),
            "trainings": sum(map(len, by_config.values()))}


def devices(path: Path) -> dict[str, int]:
    """How many trainings of the table file ran on each device, by seed group ("0-1", "2+"): a
    line's ``recorded_on`` device, else the header's."""
    from dmlsearch.search.replay.table import read_lines

    header, runs = read_lines(path)
    where = str((header or {}).get("base", {}).get("device"))
    counts: Counter[str] = Counter()
    for run in runs:
        device = str((run.get("recorded_on") or {}).get("device", where)).split(":")[0]
        counts[f"seeds {'0-1' if run['seed'] < 2 else '2+'} on {device}"] += 1
    return dict(sorted(counts.items()))


def table_noise(path: Path, resamples: int) -> dict[str, Any] | None:
    from dmlsearch.search.replay import load_table

    table = load_table(path)
    if not repeated(table):
        return None
    return {"file": path.name, "pairs": fit_with_interval(with_seeds_below(table, 2), resamples),
            "all_seeds": fit_with_interval(table, resamples),
            "later_seeds": later_seeds(table, resamples), "trainings": devices(path)}


def _line(name: str, label: str, fit: dict[str, Any]) -> str:
    parts = [f"{f.replace('sigma_', 'σ_')} {fit[f]['value']:.4f} [{fit[f]['low']:.4f}, "
             f"{fit[f]['high']:.4f}]" for f in ("sigma_val", "sigma_test")]
    return (f"{name:20} {label:9} {fit['configurations']:3} configurations "
            f"{fit['seeds_per_configuration']}, {fit['session_groups']} groups of one session: "
            + "; ".join(parts) +
            f"; ρ {fit['rho']['value']:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    recorded = [name for name, spec in TABLES.items() if spec.mirror_of is None]
    parser.add_argument("--tables", nargs="+", choices=recorded, default=None)
    parser.add_argument("--files", nargs="+", type=Path, default=[],
                        help="table files besides (or instead of) the named tables")
    parser.add_argument("--against", nargs=2, type=Path, metavar=("TABLE", "AGAIN"),
                        help="instead: the trainings of AGAIN minus the same configurations "
                        "and seeds of TABLE (the same seeds on another machine)")
    parser.add_argument("--resamples", type=int, default=RESAMPLES)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.against:
        from dmlsearch.search.replay import load_table

        result = same_seeds(*(load_table(p) for p in args.against), args.resamples)
        if result is None:
            parser.error(f"{args.against[1]} trains no configuration and seed of "
                         f"{args.against[0]}")
        print(f"{args.against[1]} − {args.against[0]}, {result['trainings']} trainings of "
              f"{result['configurations']} configurations: val {result['val']['mean']:+.4f} "
              f"[{result['val']['low']:+.4f}, {result['val']['high']:+.4f}], test "
              f"{result['test']['mean']:+.4f} [{result['test']['low']:+.4f}, "
              f"{result['test']['high']:+.4f}]")
        if args.out:
            args.out.write_text(json.dumps({"against": [str(p) for p in args.against],
                                            **result}, indent=1) + "\n")
        return 0
    paths = {name: TABLES[name].table
             for name in (args.tables or ([] if args.files else recorded))}
    paths.update({str(path): path for path in args.files})
    results = {}
    for name, path in paths.items():
        result = table_noise(path, args.resamples)
        if result is None:
            print(f"{name:20} no configuration with two seeds")
            continue
        results[name] = result
        print(_line(name, "pairs", result["pairs"]))
        print(_line(name, "all seeds", result["all_seeds"]))
        later = result["later_seeds"]
        if later is not None:
            print(f"{name:20} seeds 2+ − seeds 0-1 over {later['configurations']} "
                  f"configurations: val {later['val']['mean']:+.4f} [{later['val']['low']:+.4f}"
                  f", {later['val']['high']:+.4f}], test {later['test']['mean']:+.4f} "
                  f"[{later['test']['low']:+.4f}, {later['test']['high']:+.4f}]; "
                  f"{result['trainings']}")
    if args.out:
        from dmlsearch.search.replay.table import machine

        body = {"resamples": args.resamples, "machine": machine(), "tables": results}
        args.out.write_text(json.dumps(body, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

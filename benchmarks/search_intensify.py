"""Does ``--intensify K`` pick better at the same budget? (issue 36, "a pick users can trust")

For each table (``DEFAULT_TABLES``) and seed, on the virtual clock with training noise
(``search_efficiency.run_method``, the default method):

- **plain**: a search of ``--budget`` trainings' worth; its pick is the trial that scored best
  among those trained to their end (the noisy score the search saw);
- **intensified**: a search of ``budget - K`` trainings' worth; its K best completed trials
  train again with a second seed (the replay's own noise draw for another trial id: one of the
  point's recorded seeds, or the surrogate's mean with noise fitted to the seed-to-seed spread:
  search/replay/noise.py), and the pick is the best mean of the two, as ``--intensify``
  (search/intensify.py) picks.

Both picks are judged by what a user retraining them gets: the configuration's seed-mean
validation score (normalised regret against the table's best and worst) and seed-mean test
score (``Reference(seed_mean=True)``). Reported per table: the mean of each, the paired
difference (intensified - plain) with a bootstrap 95% interval, wins and losses, and the share
of seeds whose pick tests within one σ (one retraining's test σ, fitted from the table's pairs)
of the best configuration's test score.

    python benchmarks/search_intensify.py --seeds 30 --budget 20 --concurrency 4 --intensify 2 \\
        --out benchmarks/results/search_intensify_virtual_cpu_<date>.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import DEFAULT_TABLES  # noqa: E402
from benchmarks.efficiency_tables import TABLES  # noqa: E402
from benchmarks.hpo_measures import bootstrap_mean  # noqa: E402
from benchmarks.hpo_measures import regret  # noqa: E402
from benchmarks.search_efficiency import DEFAULT_METHOD  # noqa: E402
from benchmarks.search_efficiency import logged_lines  # noqa: E402
from benchmarks.search_efficiency import reference  # noqa: E402
from benchmarks.search_efficiency import run_method  # noqa: E402

SECOND = "/second-seed"  # the second fit's trial id: the first's + this (its own noise draw)


def _completed(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's trials that trained to their end, best (as the search saw them) first."""
    done = [t for t in run["trial_records"] if t["state"] == "completed" and t["score"] is not None]
    return sorted(done, key=lambda t: -float(t["score"]))


def second_fit(table: str, trial: dict[str, Any], seed: int) -> float:
    """The best validation score of the trial's configuration trained again (its draw of the
    table's training noise under another trial id)."""
    from dmlsearch.search.replay import load_table
    from dmlsearch.search.replay.noise import replay_curve

    curves = load_table(TABLES[table].table)
    curve = replay_curve(curves, trial["config"], (seed, f"{trial['trial_id']}{SECOND}"))
    return max(float(row["val"][curves.metric]) for row in curve.epochs)


def picks(table: str, seed: int, *, budget: int, concurrency: int, intensify: int
          ) -> dict[str, Any]:
    """One seed's plain and intensified picks and how a user retraining them would score."""
    ref = reference(table, noise=True)
    plain = run_method(table, DEFAULT_METHOD, seed, budget, concurrency, 1.0, clock="virtual",
                       noise=True, trials=True)
    short = run_method(table, DEFAULT_METHOD, seed, budget - intensify, concurrency, 1.0,
                       clock="virtual", noise=True, trials=True)
    out: dict[str, Any] = {"table": table, "seed": seed}
    ranked = _completed(plain)
    top = _completed(short)[:intensify]
    if not ranked or not top:
        return {**out, "plain": None, "intensified": None}
    means = []
    for trial in top:
        second = second_fit(table, trial, seed)
        means.append(((float(trial["score"]) + second) / 2, trial, second))
    means.sort(key=lambda m: -m[0])
    for name, config in (("plain", ranked[0]["config"]), ("intensified", means[0][1]["config"])):
        val, test = ref.final(config)
        out[name] = {"val": val, "test": test,
                     "regret": regret(val, ref.best, ref.worst, "max")}
    out["intensified"]["fits"] = [{"first": float(t["score"]), "second": s, "mean": m}
                                  for m, t, s in means]
    out["intensified"]["changed"] = means[0][1]["trial_id"] != top[0]["trial_id"]
    return out


def summarise(rows: list[dict[str, Any]], table: str) -> dict[str, Any]:
    ref = reference(table, noise=True)
    both = [r for r in rows if r["plain"] is not None and r["intensified"] is not None]
    sigma_test = ref.noise.sigma_test
    body: dict[str, Any] = {"seeds": len(both), "best_val": ref.best, "best_test": ref.best_test,
                            "sigma_val": ref.noise.sigma_val, "sigma_test": sigma_test}
    for name in ("plain", "intensified"):
        tests = [r[name]["test"] for r in both]
        body[name] = {
            "test": {"mean": statistics.fmean(tests), "median": statistics.median(tests)},
            "regret": {"mean": statistics.fmean(r[name]["regret"] for r in both)},
            "within_sigma_test": sum(t >= ref.best_test - sigma_test for t in tests) / len(both)}
    diffs = [r["intensified"]["test"] - r["plain"]["test"] for r in both]
    body["test_difference"] = {**bootstrap_mean(diffs, seed=0),
                               "wins": sum(d > 1e-12 for d in diffs),
                               "losses": sum(d < -1e-12 for d in diffs)}
    rdiffs = [r["intensified"]["regret"] - r["plain"]["regret"] for r in both]
    body["regret_difference"] = bootstrap_mean(rdiffs, seed=0)
    body["changed_pick"] = sum(r["intensified"]["changed"] for r in both) / len(both)
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--budget", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--intensify", type=int, default=2)
    parser.add_argument("--tables", nargs="+", default=list(DEFAULT_TABLES), choices=list(TABLES))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    started = time.time()
    log = args.out.with_suffix(".runs.jsonl")
    done = {(row["table"], row["seed"]): row for row in logged_lines(log)}
    tables = {}
    for table in args.tables:
        rows = []
        for seed in range(args.seeds):
            row = done.get((table, seed))
            if row is None:
                row = picks(table, seed, budget=args.budget, concurrency=args.concurrency,
                            intensify=args.intensify)
                with log.open("a") as handle:
                    handle.write(json.dumps(row) + "\n")
            rows.append(row)
        tables[table] = summarise(rows, table)
        t = tables[table]
        print(f"{table}: {t['seeds']} seeds; pick test plain {t['plain']['test']['mean']:.4f} "
              f"intensified {t['intensified']['test']['mean']:.4f} (difference "
              f"{t['test_difference']['mean']:+.4f} [{t['test_difference']['low']:+.4f}, "
              f"{t['test_difference']['high']:+.4f}], {t['test_difference']['wins']} wins "
              f"{t['test_difference']['losses']} losses); within 1σ of the best: "
              f"{t['plain']['within_sigma_test']:.2f} vs {t['intensified']['within_sigma_test']:.2f}"
              f"; pick changed on {t['changed_pick']:.0%}", flush=True)
    body = {"benchmark": "search_intensify", "clock": "virtual", "noise": True,
            "method": DEFAULT_METHOD, "budget": args.budget, "intensify": args.intensify,
            "concurrency": args.concurrency, "seeds": args.seeds, "tables": tables,
            "seconds": time.time() - started}
    args.out.write_text(json.dumps(body, indent=2) + "\n")
    return 0 if all(not math.isnan(t["test_difference"]["mean"]) for t in tables.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

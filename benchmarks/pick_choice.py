"""Where the pick's test shortfall comes from (issue 36, "the pick's seed-mean test score within
one σ of the best configuration's"): the choice among the trials a search completed, or the
trials it completed?

Reads the runs log a noisy virtual-clock run of ``search_efficiency.py`` writes (its
``<out>.runs.jsonl``). For each table and method, each seed's search is judged three ways
within the full budget, each by the chosen configuration's seed-mean test score
(``Reference(seed_mean=True).final``, what a user retraining it gets):

- **pick**: the trial that scored best as the search saw it (one noisy training), what the
  product picks (``search_efficiency.pick_within``);
- **perfect choice**: among the same completed trials, the one with the best seed-mean
  validation score, which no search can know: the most any rule choosing among them can give;
- **smoothed** (bandwidth ``h``): the completed trial with the best kernel-weighted mean of the
  completed trials' observed scores (a Gaussian kernel on the searched values scaled to [0, 1],
  log-scaled where the space is, a categorical one-hot), which spends no training: a
  neighbour's score tempers one lucky draw.

Reported: the median (and mean) over seeds of each, the best-validation configuration's test
score, and the issue's bar, that score minus one retraining's test σ.

    python benchmarks/search_efficiency.py --clock virtual --noise --seeds 30 --budget 20 \\
        --concurrency 4 --methods tpe+asha random+asha --out F.json
    python benchmarks/pick_choice.py F.runs.jsonl [--methods tpe+asha random+asha] \\
        --out benchmarks/results/pick_choice_<date>.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.hpo_measures import bootstrap_mean  # noqa: E402
from benchmarks.search_efficiency import completed_within  # noqa: E402
from benchmarks.search_efficiency import logged_lines  # noqa: E402
from benchmarks.search_efficiency import pick_within  # noqa: E402
from benchmarks.search_efficiency import reference  # noqa: E402

BANDWIDTHS = (0.1, 0.2, 0.3)

Choice = Callable[[list[tuple[float, dict[str, Any]]]], int]


def unit_vector(params: Sequence[Any], config: dict[str, Any]) -> np.ndarray:
    """A configuration's searched values in [0, 1] (log-scaled for a log range), a categorical
    one one-hot; a parameter of another branch (``when`` does not hold) sits mid-range."""
    values: list[float] = []
    for p in params:
        x = config.get(p.key) if p.is_active(config) else None
        if p.kind == "categorical":  # another branch's: no choice of this one
            values += [1.0 if x == choice else 0.0 for choice in p.choices]
            continue
        low, high = float(p.low), float(p.high)
        if x is None or high <= low:
            values.append(0.5)
            continue
        value = float(x)
        if p.log:
            low, high, value = math.log(low), math.log(high), math.log(value)
        values.append(min(1.0, max(0.0, (value - low) / (high - low))))
    return np.asarray(values)


def smoothed(params: Sequence[Any], bandwidth: float) -> Choice:
    """The index of the trial with the best kernel-weighted mean of the observed scores."""
    def choose(trials: list[tuple[float, dict[str, Any]]]) -> int:
        points = np.stack([unit_vector(params, c) for _, c in trials])
        scores = np.asarray([s for s, _ in trials])
        squared = ((points[:, None, :] - points[None, :, :]) ** 2).sum(-1)
        weights = np.exp(-squared / (2.0 * bandwidth ** 2))
        return int(np.argmax(weights @ scores / weights.sum(1)))
    return choose


def judge_table(table: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The three ways of choosing, over one table's runs of one method (maximised metrics)."""
    ref = reference(table, noise=True)
    sigma_test = float(ref.noise.sigma_test)
    rules = {f"smoothed h={h:g}": smoothed(ref.space.params, h) for h in BANDWIDTHS}
    scores: dict[str, list[float]] = {"pick": [], "perfect choice": [], **{k: [] for k in rules}}
    for run in runs:
        budget = run["budget"] * ref.epochs
        trials = completed_within(run, budget)
        if not trials:
            continue
        scores["pick"].append(pick_within(run, budget, ref)[0])
        scores["perfect choice"].append(max((ref.final(c) for _, c in trials))[1])
        for name, rule in rules.items():
            scores[name].append(ref.final(trials[rule(trials)][1])[1])
    pick = scores["pick"]
    return {
        "seeds": len(pick), "best_test": ref.best_test, "sigma_test": sigma_test,
        "bar": ref.best_test - sigma_test,
        "choices": {name: {"median": statistics.median(v), "mean": statistics.fmean(v),
                           # paired by seed: this choice's test score − the pick's
                           "gain": bootstrap_mean([a - b for a, b in zip(v, pick, strict=True)])}
                    for name, v in scores.items() if v},
    }


def judge(runs: list[dict[str, Any]], methods: Sequence[str] | None = None
          ) -> dict[str, dict[str, Any]]:
    """``{table: {"method cN": judge_table(...)}}`` for the noisy runs in ``runs`` (of
    ``methods`` only, if given)."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:  # one group per concurrency too: a run of several is several runs
        if methods is not None and run["method"] not in methods:
            continue
        if run.get("noise") and run.get("configs") is not None:
            method = f"{run['method']} c{run.get('concurrency', '?')}"
            grouped.setdefault((run["table"], method), []).append(run)
    out: dict[str, dict[str, Any]] = {}
    for (table, method), mine in sorted(grouped.items()):
        out.setdefault(table, {})[method] = judge_table(table, mine)
    return out


def _cell(choice: dict[str, Any], bar: float, paired: bool) -> str:
    text = f"{choice['median']:.4f}" + (" ✓" if choice["median"] >= bar else "")
    if paired:
        gain = choice["gain"]
        text += f" ({gain['mean']:+.4f} [{gain['low']:+.4f}, {gain['high']:+.4f}])"
    return text


def markdown(body: dict[str, dict[str, Any]]) -> str:
    names = ["pick", "perfect choice", *(f"smoothed h={h:g}" for h in BANDWIDTHS)]
    lines = ["| table | method | best's test − σ (bar) | " + " | ".join(names) + " |",
             "|---|---|---|" + "---|" * len(names)]
    for table, methods in body.items():
        for method, m in methods.items():
            cells = [_cell(m["choices"][n], m["bar"], n != "pick")
                     for n in names if n in m["choices"]]
            lines.append(f"| {table} | {method} | {m['best_test']:.4f} − {m['sigma_test']:.4f} "
                         f"= {m['bar']:.4f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a search_efficiency.py runs log (.runs.jsonl)")
    parser.add_argument("--methods", nargs="+", default=None, help="only these (all: none)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.runs.is_file():
        parser.error(f"no runs log at {args.runs}; give the .runs.jsonl a search_efficiency.py "
                     "--out run wrote")
    body = judge(logged_lines(args.runs), args.methods)
    print(markdown(body))
    print("(medians over seeds of the chosen configuration's seed-mean test score; ✓: at or "
          "above the bar; in brackets, paired by seed, the mean gain over the pick with its "
          "bootstrap 95% interval)")
    if args.out is not None:
        args.out.write_text(json.dumps({"runs": str(args.runs), "methods": args.methods,
                                        "bandwidths": BANDWIDTHS, "tables": body},
                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

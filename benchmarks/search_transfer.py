"""Benchmark: searches that start from what an earlier search learnt (``dmlsearch run
--prior-from DIR``, issue 36, "Transfer between searches"), on the search benchmark's
learning-curve tables, replayed on the virtual clock with training noise.

For each **pair** (a source table → a target table) and each seed s:

1. the default search (:data:`~benchmarks.search_efficiency.DEFAULT_METHOD`, TPE + ASHA)
   runs on the source table (seed s, the same budget and concurrency, noise on); its trials
   become a :class:`~dmlsearch.search.transfer.Source` (what ``--prior-from`` reads from a
   finished search: each trial's configuration, how it ended and the noisy score it saw);
2. ``plan_transfer(target space, [source], count=transfer_count(budget))`` plans the points the
   target's search tries first, as the product does (``search/prepare.py``'s ``_planned``), the
   first of them not stopped early (``TuneSettings.keep_to_end``, as with ASHA in the product);
3. on the target table, seed s: ``random+asha``, the default, and the default with transfer
   (:data:`TRANSFER_METHOD`: what ``dmlsearch run --prior-from`` runs with no ``--sampler``,
   :data:`~benchmarks.search_efficiency.TRANSFER_BASE`, prior-TPE + ASHA, whose warm starts,
   the points tried first and the sampler's prior, are the transferred points instead of the
   space's published defaults).

A source's default run is the same search as the default's run on that table as a target (same
table, method, seed, budget, concurrency): it runs once (and once for every pair it serves).

**Measures** per pair and method (seeds as blocks; incumbents judged by their configuration's
noiseless value, picks by their noiseless test score, as ``search_efficiency`` does): mean
normalised regret at 25% and 100% of the budget with bootstrap 95% intervals; average ranks at
25% and 100% with Friedman's test and the Nemenyi critical difference
(:func:`~benchmarks.hpo_measures.nemenyi_cd`); the share of seeds whose incumbent is within one
σ (the target's ``sigma_val``: one retraining's spread) of the target's best after at most
:data:`EARLY_TRAININGS` full trainings' worth of epochs, and (``points_within_sigma``) the share
on which one of the transferred points itself lies there, noiseless: what trying them first can
give; the pick's (noiseless, seed-mean) test score.

**Misleading pairs**, by measurement: the source table's own top configurations (its reference
points by their noiseless validation score, as ``efficiency_tables.Reference`` scores them),
mapped into the target by ``plan_transfer(..., count=5)``, are scored on the target; their
percentiles among the target's reference scores are recorded, and a pair whose mean percentile
is below 50 (the target's median) is misleading.

**What the pair allows** (``reach``): the same top configurations' normalised regret on the
target, and the best of them against the 0.5× of the goal at 25% (against the lower of the
default's and random + ASHA's regret there). They are the source table's best, by noiseless
scores: better than the points a source search of one seed transfers. When even the best of
them is above the goal, the points tried first cannot meet it; only the target's own trials
(the defaults, the sampler's draws) could.

    python benchmarks/search_transfer.py [--seeds 30] [--budget 20] [--concurrency 4]
        [--processes 2] [--pairs glyphs->omniglot-ms ...] [--out FILE.json] [--markdown FILE]
        [--plots DIR]
    python benchmarks/search_transfer.py --report FILE.json [--markdown FILE] [--plots DIR]

Every finished search is appended to ``<out>.runs.jsonl``; the same command run again resumes
from it (only the searches not in it run). Default pairs: :data:`PAIRS`, and
:data:`NEW_PAIRS` and :data:`HELD_OUT_PAIRS` whose tables hold at least :data:`MIN_CURVES`
recorded curves.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import math
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.efficiency_tables import REFERENCE_POINTS  # noqa: E402
from benchmarks.efficiency_tables import TABLES  # noqa: E402
from benchmarks.efficiency_tables import replay_machine  # noqa: E402
from benchmarks.hpo_measures import best_at  # noqa: E402
from benchmarks.hpo_measures import nemenyi_cd  # noqa: E402
from benchmarks.hpo_measures import trajectory  # noqa: E402
from benchmarks.search_efficiency import DEFAULT_METHOD  # noqa: E402
from benchmarks.search_efficiency import TRANSFER_BASE  # noqa: E402
from benchmarks.search_efficiency import _worker_init  # noqa: E402
from benchmarks.search_efficiency import judged_scores  # noqa: E402
from benchmarks.search_efficiency import logged_lines  # noqa: E402
from benchmarks.search_efficiency import plot_table  # noqa: E402
from benchmarks.search_efficiency import reference  # noqa: E402
from benchmarks.search_efficiency import run_method  # noqa: E402
from benchmarks.search_efficiency import summarise_table  # noqa: E402

TRANSFER_METHOD = f"{DEFAULT_METHOD}+transfer"
BASELINE = "random+asha"
TARGET_METHODS = (BASELINE, DEFAULT_METHOD, TRANSFER_METHOD)
# glyphs' MultiSimilarity branch and omniglot-ms share lr, margin, α, β, ε; the grid and
# omniglot-ms are the same data with different spaces
# omniglot-ms-mirrored -> omniglot-ms: the deliberately misleading pair (the source is the target's
# own recorded curves at mirrored configurations: its good region is the target's poor one;
# benchmarks/mirrored_table.py)
PAIRS = (("glyphs", "omniglot-ms"), ("omniglot-ms", "glyphs"), ("omniglot-grid", "omniglot-ms"),
         ("omniglot-ms-mirrored", "omniglot-ms"))
# the quickstart space on Omniglot and on glyphs, both ways (a matched pair: the same space on
# two datasets; Omniglot's best region, MultiSimilarity at a large margin, scored low on glyphs
# in the partial recording: the candidate misleading direction); glyphs trained with SGD; and
# glyphs-wide as a target (a user who tuned the 8-epoch quickstart on glyphs, or MultiSimilarity
# on Omniglot, now trains 16 epochs and searches ten settings; shared: lr, embedding size and
# MultiSimilarity's four); and the quickstart space on glyphs and on glyphs_b, both ways (the
# second matched pair: two datasets of one kind, other characters drawn the same way, recorded
# by the same code at the same configurations), and the first matched pair again with glyphs-a
# (recorded by the code omniglot-quickstart was, unlike glyphs). Run by default once their
# tables hold MIN_CURVES curves.
NEW_PAIRS = (("glyphs", "omniglot-quickstart"), ("omniglot-quickstart", "glyphs"),
             ("glyphs", "glyphs-sgd"), ("glyphs", "glyphs-wide"), ("omniglot-ms", "glyphs-wide"),
             ("glyphs-a", "glyphs-b"), ("glyphs-b", "glyphs-a"),
             ("glyphs-a", "omniglot-quickstart"), ("omniglot-quickstart", "glyphs-a"))
# glyphs-sgd's space on glyphs and on glyphs_b, both ways: the third matched pair, recorded after
# the rule (TO_END included) and the default were fixed, so neither was chosen on it
HELD_OUT_PAIRS = (("glyphs-a-sgd", "glyphs-b-sgd"), ("glyphs-b-sgd", "glyphs-a-sgd"))
MIN_CURVES = 120
FRACTIONS = ("0.25", "1.0")  # the shares of the budget reported (search_efficiency's keys)
EARLY_TRAININGS = 5  # within one σ of the best after at most this many trainings' worth
MISLEADING_PICKS = 5  # the source's top configurations mapped into the target
MISLEADING_BELOW = 50.0  # percentile: a pair whose picks land below the target's median
BUDGET, SEEDS, CONCURRENCY = 20, 30, 4
SPEEDUP = 200.0  # unused on the virtual clock (run_method's signature)


# ---- pairs and jobs -----------------------------------------------------------------------------
def pair_name(source: str, target: str) -> str:
    return f"{source}->{target}"


def parse_pair(text: str) -> tuple[str, str]:
    source, sep, target = text.partition("->")
    if not sep or source not in TABLES or target not in TABLES or source == target:
        raise argparse.ArgumentTypeError(
            f"a pair is SOURCE->TARGET of two tables of {', '.join(TABLES)}; got {text!r}")
    return source, target


def recorded_curves(table: str) -> int:
    """The curves a table's file holds (its non-empty lines)."""
    path = TABLES[table].table
    if not path.is_file():
        return 0
    with open(path) as handle:
        return sum(1 for line in handle if line.strip())


def default_pairs() -> list[tuple[str, str]]:
    """:data:`PAIRS`, then :data:`NEW_PAIRS` and :data:`HELD_OUT_PAIRS` whose tables both hold
    :data:`MIN_CURVES` curves."""
    return [*PAIRS, *(p for p in (*NEW_PAIRS, *HELD_OUT_PAIRS)
                      if all(t in TABLES and recorded_curves(t) >= MIN_CURVES for t in p))]


Job = tuple[str, str, int, str]  # table, method, seed, source table ("" without transfer)


def jobs_of(pairs: list[tuple[str, str]], seeds: int) -> list[Job]:
    """Every search the pairs need, once each, pair by pair (so that an interrupted run has
    whole pairs first), seed by seed."""
    out: dict[Job, None] = {}
    for source, target in pairs:
        for s in range(seeds):
            out[(source, DEFAULT_METHOD, s, "")] = None
            out[(target, BASELINE, s, "")] = None
            out[(target, DEFAULT_METHOD, s, "")] = None
            out[(target, TRANSFER_METHOD, s, source)] = None
    return list(out)


def job_of(run: dict[str, Any]) -> Job:
    return (run["table"], run["method"], int(run["seed"]), run.get("source") or "")


# ---- one search ---------------------------------------------------------------------------------
def source_of(run: dict[str, Any]) -> Any:
    """A finished default search's trials as transfer's evidence (what ``--prior-from`` reads
    from its folder): each trial's configuration, how it ended, the score it saw."""
    from dmlsearch.search.results import TrialRecord
    from dmlsearch.search.results import TrialState
    from dmlsearch.search.transfer import Source

    ref = reference(run["table"])
    records = [TrialRecord(trial_id=r["trial_id"], config=dict(r["config"]),
                           state=TrialState(r["state"]), score=r["score"],
                           iterations=int(r["epochs"]), number=i)
               for i, r in enumerate(run["trial_records"])]
    return Source.of_records(f"{run['table']}/seed{run['seed']}", records,
                             searched=sorted(ref.searched), metric=ref.metric, mode="max",
                             dataset=str(ref.space.base.get("dataset", "-")),
                             space=str(ref.spec.space))


def search(job: Job, budget: int, concurrency: int,
           source_run: dict[str, Any] | None = None) -> dict[str, Any]:
    """One search of ``job`` (noisy, virtual clock); with transfer, from ``source_run``'s
    trials: the transferred points replace the target space's warm starts."""
    from dmlsearch.search.transfer import plan_transfer
    from dmlsearch.search.transfer import transfer_count

    table, method, seed, source = job
    if method != TRANSFER_METHOD:
        run = run_method(table, method, seed, budget, concurrency, SPEEDUP, "virtual", True,
                         trials=method == DEFAULT_METHOD)
        return {**run, "source": ""}
    assert source_run is not None and source_run["table"] == source
    ref = reference(table)
    plan = plan_transfer(ref.space, [source_of(source_run)], count=transfer_count(budget))
    run = run_method(table, TRANSFER_BASE, seed, budget, concurrency, SPEEDUP, "virtual", True,
                     warm_starts=[dict(p) for p in plan.named], keep_to_end=plan.to_end(),
                     trials=True)
    records = run.pop("trial_records")
    return {**run, "method": TRANSFER_METHOD, "source": source,
            "transfer": plan.to_json(),
            "transferred": [dict(p.point) for p in plan.picks],
            # the first trials the search proposed, in the target's setting keys
            "first_configs": [{k: v for k, v in r["config"].items() if k in ref.searched}
                              for r in records[:len(plan.picks)]]}


def judging(table: str) -> Any:
    """The table's noiseless reference (``reference(table, True)``), its ``final`` remembered
    per configuration: the same trials are judged for the table's summary, each pair and the
    early share, and a sampled table's surrogate answers one configuration at a time."""
    ref = reference(table, True)
    if not hasattr(ref, "_remembered"):
        remembered: dict[str, tuple[float, float]] = {}
        final = ref.final

        def remembering(config: dict[str, Any]) -> tuple[float, float]:
            key = json.dumps(config, sort_keys=True, default=str)
            if key not in remembered:
                remembered[key] = final(config)
            return remembered[key]

        ref.final, ref._remembered = remembering, remembered
    return ref


# ---- misleading pairs ---------------------------------------------------------------------------
def reference_points(table: str) -> tuple[list[dict[str, Any]], list[float]]:
    """The configurations a table's :class:`Reference` scores and their noiseless validation
    scores (a sampled table: its warm starts and Sobol sample through the surrogate; the grid:
    its points, by their seed means)."""
    from dmlsearch.spaces import config_from_sample

    ref = reference(table, True)
    base = ref.space.base
    if ref.table.sampled:
        from dmlsearch.search.replay.surrogate import surrogate_for

        named = ref.space.sample_points(REFERENCE_POINTS, seed=12345)
        configs = ref.warm_starts + [{**base, **config_from_sample(p)} for p in named]
        curves = surrogate_for(ref.table).curves(configs)
        scores = [ref._final(c)[0] for c in curves]
    else:
        curves = [c for c in ref.table.curves.values() if c.seed == 0 and c.status == "ok"]
        configs = [c.config for c in curves]
        scores = [ref._mean(ref._seeds(c))[0] for c in configs]
    return configs, scores


def percentile(value: float, scores: list[float]) -> float:
    """``value``'s percentile among ``scores``: the share below it, ties counting half."""
    below = sum(s < value for s in scores)
    ties = sum(s == value for s in scores)
    return 100.0 * (below + 0.5 * ties) / len(scores)


def misleading(source: str, target: str) -> dict[str, Any]:
    """Where the source's top configurations land on the target (module docstring)."""
    from dmlsearch.search.results import TrialRecord
    from dmlsearch.search.results import TrialState
    from dmlsearch.search.transfer import Source
    from dmlsearch.search.transfer import plan_transfer

    sref, tref = reference(source, True), judging(target)
    configs, scores = reference_points(source)
    records = [TrialRecord(trial_id=f"r{i}", config=c, state=TrialState.COMPLETED, score=s,
                           iterations=sref.epochs, number=i)
               for i, (c, s) in enumerate(zip(configs, scores))]
    plan = plan_transfer(tref.space, [Source.of_records(
        f"{source} (reference)", records, searched=sorted(sref.searched), metric=sref.metric,
        mode="max")], count=MISLEADING_PICKS)
    picks = [p for p in plan.picks if p.source != "space"]  # the source's, not the target's own
    values = [tref.final(p.point)[0] for p in picks]
    percentiles = [percentile(v, tref.scores) for v in values]
    mean = statistics.fmean(percentiles)
    return {"misleading": mean < MISLEADING_BELOW, "mean_percentile": mean,
            "percentiles": percentiles, "target_values": values,
            "source_values": [p.score for p in picks],
            "points": [p.point for p in picks], "taken": [list(p.taken) for p in picks]}


def reach(pair: dict[str, Any]) -> dict[str, Any]:
    """What the pair allows at 25% (module docstring): the normalised regret on the target of
    each of the source table's top configurations (``misleading``'s), the best of them, and that
    best against the goal, half the lower of the default's and random + ASHA's regret at 25%."""
    from benchmarks.hpo_measures import regret

    ref, m = pair["reference"], pair["methods"]
    regrets = [regret(v, ref["best"], ref["worst"]) for v in pair["misleading_check"]
               ["target_values"]]
    best = min(regrets)
    baseline = min(m[DEFAULT_METHOD]["regret_at"]["0.25"]["mean"],
                   m[BASELINE]["regret_at"]["0.25"]["mean"])
    return {"regrets": regrets, "best": best, "goal": 0.5 * baseline,
            "best_over_baseline": best / baseline if baseline > 0 else None,
            "within_goal": best <= 0.5 * baseline}


# ---- measures -----------------------------------------------------------------------------------
def within_sigma(run: dict[str, Any], ref: Any, trainings: float) -> bool:
    """Whether the run's incumbent (judged by its noiseless value) is within one σ of the
    table's best after at most ``trainings`` full trainings' worth of epochs."""
    points = trajectory(run["events"], "max", judged_scores(run, ref))
    value = best_at(points, trainings * ref.epochs)
    return value is not None and value >= ref.best - ref.noise.sigma_val


def points_within_sigma(run: dict[str, Any], ref: Any) -> bool:
    """Whether one of the points a transfer run took from its source (noiseless, on the target)
    lies within one σ of the target's best: no search can have its incumbent there after the
    first trials on a seed where none does, unless its own draws get there."""
    bar = ref.best - ref.noise.sigma_val
    return any(ref.final({**ref.space.base, **p["point"]})[0] >= bar
               for p in run["transfer"]["points"] if p["taken"])


def summarise_pair(source: str, target: str, runs: list[dict[str, Any]], *, budget: int,
                   seeds: int) -> dict[str, Any]:
    """The pair's measures (module docstring) from the target's runs of the three methods."""
    tref = judging(target)
    mine = [r for r in runs if r["table"] == target and r["seed"] < seeds and (
        r["method"] in (BASELINE, DEFAULT_METHOD)
        or (r["method"] == TRANSFER_METHOD and r["source"] == source))]
    body = summarise_table(mine, tref, budget=budget)
    complete = sorted(set.intersection(*(
        {r["seed"] for r in mine if r["method"] == m} for m in TARGET_METHODS)))
    cd = nemenyi_cd(len(TARGET_METHODS), len(complete)) if complete else None
    methods = {}
    for method in TARGET_METHODS:
        m = body["methods"][method]
        runs_m = sorted((r for r in mine if r["method"] == method), key=lambda r: r["seed"])
        early = [within_sigma(r, tref, EARLY_TRAININGS) for r in runs_m]
        tests = [t for t in m["test_of_pick"] if t is not None and math.isfinite(t)]
        methods[method] = {
            "seeds": m["seeds"],
            "regret_at": {f: m["regret_at"][f] for f in FRACTIONS},
            "regret_in_sigma_at": {f: m["regret_in_sigma_at"][f] for f in FRACTIONS}
            if "regret_in_sigma_at" in m else None,
            "rank_at": {f: body["average_rank"][f][method] for f in FRACTIONS},
            "within_sigma_5": sum(early) / len(early) if early else None,
            # the share of seeds on which a transferred point lies within σ (transfer only)
            "points_within_sigma": (statistics.fmean(points_within_sigma(r, tref)
                                                     for r in runs_m)
                                    if method == TRANSFER_METHOD and runs_m else None),
            "pick_test": m["median_test_of_pick"],
            "pick_test_mean": statistics.fmean(tests) if tests else None,
            "median_epochs_to_top5": m["median_epochs_to_top5"],
            "reached_top5": m["reached_top5"],
            "regret_curve": m["regret_curve"],  # for --plots
        }
    transfer = methods[TRANSFER_METHOD]
    rank_gaps = {f: {other: methods[other]["rank_at"][f] - transfer["rank_at"][f]
                     for other in (BASELINE, DEFAULT_METHOD)} for f in FRACTIONS}
    blocks = body["blocks"]
    paired = {f: {other: _paired_gap(blocks, other, i) for other in (BASELINE, DEFAULT_METHOD)}
              for f, i in (("0.25", 1), ("1.0", 3))}
    return {
        "source": source, "target": target,
        "seeds_complete": len(complete),
        "methods": methods,
        "friedman": {f: body["friedman"][f] for f in FRACTIONS},
        "nemenyi_cd": cd,
        # how far each method's average rank lies behind transfer's (positive: transfer ranks
        # better), and whether beyond the critical difference
        "rank_gap_to_transfer": rank_gaps,
        "beyond_cd": {f: {o: cd is not None and g > cd for o, g in gaps.items()}
                      for f, gaps in rank_gaps.items()},
        # other method's regret − transfer's, per seed: mean and bootstrap interval
        "paired_regret_gain": paired,
        "reference": {k: body["reference"][k] for k in ("best", "worst", "top_target",
                                                        "best_test", "sigma_val")},
    }


def _paired_gap(blocks: dict[str, dict[str, list[float]]], other: str, index: int
                ) -> dict[str, float]:
    from benchmarks.hpo_measures import bootstrap_mean

    mine, theirs = blocks[TRANSFER_METHOD], blocks[other]
    seeds = sorted(set(mine) & set(theirs), key=int)
    return bootstrap_mean([theirs[s][index] - mine[s][index] for s in seeds], seed=index)


def goals(pair: dict[str, Any]) -> dict[str, Any]:
    """Issue 36's transfer goals, checked on one pair."""
    m = pair["methods"]
    t25 = m[TRANSFER_METHOD]["regret_at"]["0.25"]["mean"]
    out = {
        "regret_25_half_of_random": t25 <= 0.5 * m[BASELINE]["regret_at"]["0.25"]["mean"],
        "regret_25_half_of_default": t25 <= 0.5 * m[DEFAULT_METHOD]["regret_at"]["0.25"]["mean"],
        "rank_25_beyond_cd": all(pair["beyond_cd"]["0.25"].values()),
        "within_sigma_5_on_60pct": (m[TRANSFER_METHOD]["within_sigma_5"] or 0) >= 0.6,
    }
    if pair["misleading"]:
        out["misleading_at_most_0.02_worse_at_100"] = (
            m[TRANSFER_METHOD]["regret_at"]["1.0"]["mean"]
            - m[DEFAULT_METHOD]["regret_at"]["1.0"]["mean"] <= 0.02)
    return out


# ---- the report ---------------------------------------------------------------------------------
def _interval(r: dict[str, float]) -> str:
    return f"{r['mean']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"


def _friedman(test: dict[str, Any]) -> str:
    if test.get("statistic") is None:
        return "not computed (all tied)"
    return f"χ² {test['statistic']:.1f}, p = {test['p_value']:.2g}"


def markdown(body: dict[str, Any]) -> str:
    """Per pair: each method's regret, ranks, share within σ early and pick; Friedman, the
    critical difference, the misleading check and the issue's goals."""
    out = [(f"Transfer between searches (issue 36): clock {body['clock']}, training noise on, "
            f"budget {body['budget_trials']} full trainings' worth, concurrency "
            f"{body['concurrency']}, {body['seeds']} seeds; default {body['default_method']}; "
            f"{body['transfer_count']} transferred points tried first."), ""]
    for name, pair in body["transfer"].items():
        ref = pair["reference"]
        mis = pair["misleading_check"]
        out += [(f"**{name}** — target best validation {ref['best']:.4f}, worst "
                 f"{ref['worst']:.4f}, one retraining's σ {ref['sigma_val']:.4f}; "
                 f"{'**misleading**' if pair['misleading'] else 'not misleading'}: the "
                 f"source's top {len(mis['percentiles'])} land at percentiles "
                 f"{', '.join(f'{p:.0f}' for p in mis['percentiles'])} of the target (mean "
                 f"{mis['mean_percentile']:.0f}); {pair['seeds_complete']} seeds"), "",
                ("| method | regret at 25% | regret at 100% | avg rank 25% | avg rank 100% | "
                 f"within σ of best in {EARLY_TRAININGS} trainings | pick's test: median "
                 "(mean) |"), "|" + "---|" * 7]
        for method, m in pair["methods"].items():
            label = f"**{method}**" if "transfer" in method else method
            test = ("-" if m["pick_test"] is None
                    else f"{m['pick_test']:.4f} ({m['pick_test_mean']:.4f})")
            out.append("| " + " | ".join([
                label, _interval(m["regret_at"]["0.25"]), _interval(m["regret_at"]["1.0"]),
                f"{m['rank_at']['0.25']:.2f}", f"{m['rank_at']['1.0']:.2f}",
                f"{m['within_sigma_5']:.0%}" if m["within_sigma_5"] is not None else "-",
                test]) + " |")
        gains = pair["paired_regret_gain"]
        out += ["", f"Friedman at 25%: {_friedman(pair['friedman']['0.25'])}; at 100%: "
                f"{_friedman(pair['friedman']['1.0'])}; Nemenyi CD (k=3, n="
                f"{pair['seeds_complete']}): "
                + ("-" if pair["nemenyi_cd"] is None else f"{pair['nemenyi_cd']:.3f}")
                + " ranks; transfer's rank lead at 25%: "
                + ", ".join(f"{o} {g:+.2f}{' (> CD)' if pair['beyond_cd']['0.25'][o] else ''}"
                            for o, g in pair["rank_gap_to_transfer"]["0.25"].items())
                + "; at 100%: "
                + ", ".join(f"{o} {g:+.2f}{' (> CD)' if pair['beyond_cd']['1.0'][o] else ''}"
                            for o, g in pair["rank_gap_to_transfer"]["1.0"].items()),
                "Paired regret gain of transfer (other − transfer, mean [95% interval]): "
                + "; ".join(f"at {float(f):.0%} vs {o} {_interval(g)}"
                            for f, per in gains.items() for o, g in per.items()),
                "Goals: " + ", ".join(f"{k} {'yes' if v else 'no'}"
                                      for k, v in pair["goals"].items()),
                _reach_line(pair), *_points_line(pair), ""]
    return "\n".join(out) + "\n"


def _points_line(pair: dict[str, Any]) -> list[str]:
    share = pair["methods"][TRANSFER_METHOD].get("points_within_sigma")
    if share is None:  # a results file from before it was recorded
        return []
    return [f"Within σ in {EARLY_TRAININGS} trainings: a transferred point lies within σ of the "
            f"target's best on {share:.0%} of seeds (noiseless); beyond that share, only the "
            "search's own draws can get there"]


def _reach_line(pair: dict[str, Any]) -> str:
    r = pair.get("reach") or reach(pair)  # a results file from before reach was recorded
    ratio = "-" if r["best_over_baseline"] is None else f"{r['best_over_baseline']:.2f}×"
    verdict = ("within the goal" if r["within_goal"]
               else "above the goal: the points tried first cannot meet it")
    return (f"What the pair allows: the source table's top {len(r['regrets'])} on the target, "
            f"regret {min(r['regrets']):.3f}-{max(r['regrets']):.3f}; the best is {ratio} the "
            f"lower baseline at 25% (goal 0.5×, regret {r['goal']:.3f}), {verdict}")


def report(body: dict[str, Any], markdown_file: Path | None, plots: Path | None = None) -> None:
    text = markdown(body)
    print(text)
    if markdown_file:
        markdown_file.write_text(text)
    if plots:
        plot_pairs(body, plots)


def plot_pairs(body: dict[str, Any], folder: Path) -> None:
    """One regret plot per pair (``search_transfer_<source>_to_<target>.png``): the target's
    searches without transfer and the default with it, drawn as the search benchmark draws a
    table (two panels; the transfer's interval shaded)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, pair in body["transfer"].items():
        if any("regret_curve" not in m for m in pair["methods"].values()):
            continue  # a results file from before the curves were kept
        ref = body["tables"][pair["target"]]["reference"]
        kind = "misleading" if pair.get("misleading") else "not misleading"
        about = (f"transfer {kind}, concurrency {body['concurrency']}, "
                 f"{pair['seeds_complete']} seeds; the target: {ref['about']}")
        plot_table(name, {"reference": {"epochs": ref["epochs"], "about": about},
                          "methods": pair["methods"]},
                   folder / f"search_transfer_{pair['source']}_to_{pair['target']}.png",
                   body["budget_trials"], highlight=TRANSFER_METHOD)


# ---- main ---------------------------------------------------------------------------------------
def _logged(log: Path | None, budget: int, concurrency: int) -> list[dict[str, Any]]:
    """The searches an earlier run of the same budget and concurrency logged (a line cut by a
    crash is skipped)."""
    runs = []
    for run in logged_lines(log):
        if run.get("budget") == budget and run.get("concurrency") == concurrency:
            run["events"] = [tuple(e) for e in run["events"]]
            runs.append(run)
    return runs


def execute(jobs: list[Job], *, budget: int, concurrency: int, processes: int,
            runs: list[dict[str, Any]], log: Path | None) -> list[dict[str, Any]]:
    """Runs the jobs not in ``runs`` (a transfer job once its source's default run is there),
    ``processes`` at a time (1: in this process), appending each to ``log``."""
    done = {job_of(r): r for r in runs}
    todo = [j for j in jobs if j not in done]
    if len(todo) < len(jobs):
        print(f"{len(jobs) - len(todo)} searches already in {log}", flush=True)
    total, count = len(todo), 0

    def source_run(job: Job) -> dict[str, Any] | None:
        return done.get((job[3], DEFAULT_METHOD, job[2], "")) if job[3] else None

    def finish(job: Job, run: dict[str, Any]) -> None:
        nonlocal count
        run = {**run, "budget": budget, "concurrency": concurrency, "clock": "virtual",
               "noise": True}
        done[job] = run
        runs.append(run)
        if log is not None:
            with open(log, "a") as handle:
                handle.write(json.dumps(run, default=str) + "\n")
        count += 1
        print(f"[{count}/{total}] {run['table']:14s} {run['method']:24s} seed {run['seed']:2d}"
              f"{' from ' + run['source'] if run['source'] else ''}: {run['trials']} trials "
              f"({run['completed']} to the end), {run['seconds']:.1f} s", flush=True)

    if processes <= 1:
        for job in sorted(todo, key=lambda j: bool(j[3])):  # sources first
            finish(job, search(job, budget, concurrency, source_run(job)))
        return runs
    context = mp.get_context("spawn")
    pending = list(todo)
    with concurrent.futures.ProcessPoolExecutor(processes, mp_context=context,
                                                initializer=_worker_init) as pool:
        running: dict[concurrent.futures.Future[dict[str, Any]], Job] = {}
        while pending or running:
            for job in list(pending):
                if len(running) >= 2 * processes:
                    break
                if job[3] and source_run(job) is None:
                    continue
                running[pool.submit(search, job, budget, concurrency, source_run(job))] = job
                pending.remove(job)
            if not running:
                raise RuntimeError(f"searches waiting on a source that never ran: {pending}")
            finished, _ = concurrent.futures.wait(
                running, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                finish(running.pop(future), future.result())
    return runs


def build(pairs: list[tuple[str, str]], runs: list[dict[str, Any]], *, seeds: int, budget: int,
          concurrency: int) -> dict[str, Any]:
    """The results file's body (module docstring) from the runs."""
    from dmlsearch.search.transfer import transfer_count

    body: dict[str, Any] = {
        "default_method": DEFAULT_METHOD, "transfer_method": TRANSFER_METHOD,
        "transfer_base": TRANSFER_BASE, "methods": list(TARGET_METHODS), "budget_trials": budget,
        "transfer_count": transfer_count(budget), "concurrency": concurrency,
        "clock": "virtual", "noise": True, "seeds": seeds, "held_out_table": None,
        "early_trainings": EARLY_TRAININGS, "pairs": [pair_name(*p) for p in pairs],
        "tables": {}, "transfer": {}}
    for target in dict.fromkeys(t for _, t in pairs):
        body["tables"][target] = summarise_table(
            [r for r in runs if r["table"] == target and r["seed"] < seeds
             and r["method"] in (BASELINE, DEFAULT_METHOD)], judging(target),
            budget=budget)
    for source, target in pairs:
        pair = summarise_pair(source, target, runs, budget=budget, seeds=seeds)
        check = misleading(source, target)
        pair["misleading"] = check["misleading"]
        pair["percentiles"] = check["percentiles"]
        pair["misleading_check"] = check
        pair["transferred"] = {
            str(r["seed"]): r["transferred"] for r in sorted(runs, key=lambda r: r["seed"])
            if r["method"] == TRANSFER_METHOD and r["source"] == source
            and r["table"] == target and r["seed"] < seeds}
        pair["goals"] = goals(pair)
        pair["reach"] = reach(pair)
        body["transfer"][pair_name(source, target)] = pair
    return body


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--budget", type=int, default=BUDGET,
                        help="full trainings' worth of epochs per search")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY)
    parser.add_argument("--processes", type=int, default=2, help="searches at once")
    parser.add_argument("--pairs", nargs="+", type=parse_pair, default=None,
                        help="SOURCE->TARGET table pairs (default: "
                        + ", ".join(pair_name(*p) for p in PAIRS) + ", and "
                        + ", ".join(pair_name(*p) for p in (*NEW_PAIRS, *HELD_OUT_PAIRS))
                        + f" once their tables hold {MIN_CURVES} curves)")
    parser.add_argument("--out", type=Path, default=None,
                        help="results JSON (default: benchmarks/results/"
                        "search_transfer_virtual_cpu_<date>.json)")
    parser.add_argument("--markdown", type=Path, default=None)
    parser.add_argument("--plots", type=Path, default=None,
                        help="a folder for one regret plot per pair")
    parser.add_argument("--report", type=Path, default=None,
                        help="the tables again from a results file (no search runs)")
    args = parser.parse_args(argv)
    if args.report:
        report(json.loads(args.report.read_text()), args.markdown, args.plots)
        return 0
    if args.out is None:
        args.out = (REPO / "benchmarks" / "results"
                    / f"search_transfer_virtual_cpu_{datetime.date.today():%Y-%m-%d}.json")
    pairs = args.pairs or default_pairs()
    jobs = jobs_of(pairs, args.seeds)
    print(f"search_transfer: {len(pairs)} pairs ({', '.join(pair_name(*p) for p in pairs)}) x "
          f"{args.seeds} seeds: {len(jobs)} searches, budget {args.budget} full trainings, "
          f"concurrency {args.concurrency}, virtual clock, noise on", flush=True)
    log = args.out.with_suffix(".runs.jsonl")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    runs = execute(jobs, budget=args.budget, concurrency=args.concurrency,
                   processes=args.processes, runs=_logged(log, args.budget, args.concurrency),
                   log=log)
    wanted = set(jobs)
    runs = [r for r in runs if job_of(r) in wanted]
    body = build(pairs, runs, seeds=args.seeds, budget=args.budget,
                 concurrency=args.concurrency)
    body["seconds"] = time.time() - started
    body["machine"] = replay_machine()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(body, default=str, separators=(",", ":")))
    report(body, args.markdown, args.plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())

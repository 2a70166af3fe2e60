"""``comparison.md``, the report a person reads: what was compared, the budgets, the ranking,
the pairwise table of the main metric, the thesis's metrics, the searches' progress; and the
thesis's tournament over several comparisons (``dmlsearch tournament``, which reads their
``comparison.json`` back)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dmlsearch.search.compare.analysis import Analysis
from dmlsearch.search.compare.analysis import metric_label
from dmlsearch.search.compare.analysis import mode_of
from dmlsearch.search.compare.comparison_json import read_comparison
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.stats import ALPHA
from dmlsearch.search.compare.stats import EXACT_MAX_SEEDS
from dmlsearch.search.compare.stats import MeanCI
from dmlsearch.search.compare.stats import MethodRank
from dmlsearch.search.compare.stats import PairTest
from dmlsearch.search.compare.stats import method_values
from dmlsearch.search.compare.stats import named_verdict
from dmlsearch.search.compare.stats import verdict
from dmlsearch.search.reporting import Table
from dmlsearch.search.reporting import counted
from dmlsearch.search.reporting import fmt
from dmlsearch.search.reporting import kv
from dmlsearch.search.reporting import tournament
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.trainables.errors import UserError

__all__ = ["MISSING", "comparison_tournament", "render_markdown", "tournament_command",
           "tournament_markdown"]

MISSING = "–"
"""A metric a method does not have (its retrain failed, or its evaluation did not compute it)."""


def render_markdown(analysis: Analysis, *, comparisons: Sequence[Comparison] | None = None,
                    metric_png: str | None = None, budget_png: str | None = None) -> str:
    """``comparison.md``: what was compared, the budgets, the ranking, the pairwise table of the
    main metric, the thesis's metrics, and with ``comparisons`` (several experiments) the
    tournament; ``metric_png`` and ``budget_png`` are the pictures' paths relative to the
    report."""
    c = analysis.comparison
    main = c.metric
    direction = "higher is better" if c.mode == "max" else "lower is better"
    n = len(analysis.seeds)
    out = [f"# dmlsearch compare: {c.name}", "",
           f"{len(c.methods)} methods ({', '.join(m.name for m in c.methods)}) searched on "
           f"{c.dataset} with the same budget and settings, each search's best configuration "
           "retrained on all training classes with the same seeds and tested once on the test "
           "classes.", "",
           f"- dataset: {c.dataset}",
           f"- searches optimised: validation {main} ({direction}); methods are ranked by their "
           f"mean test {main}",
           f"- shared settings: {kv(c.shared) or '-'}",
           f"- seeds: {', '.join(str(s) for s in analysis.seeds) or '-'} ({n} per method; "
           "differences are paired by seed)",
           f"- statistics: mean ± half-width of the 95% Student-t interval over seeds; "
           f"{_test_text(analysis.test, n)}; Holm's correction over all pairs of methods, per "
           "metric"]
    if n < 2:
        out += ["", f"**{n} seed(s)**: no interval and no test (a paired test needs at least 2 "
                "seeds; retrain with --seeds 2 or more). The ranking is by the single values."]
    floor = _permutation_floor(analysis)
    if floor is not None:
        out += ["", f"**The permutation test cannot separate any pair here**: with {n} seeds its "
                f"smallest two-sided p-value is 2/2^{n} = {2 / 2**n:.3g}, and Holm's correction "
                f"over the {floor} pairs of a metric multiplies the smallest by {floor}: "
                f"{floor * 2 / 2**n:.3g} >= {ALPHA:g}. Use the paired t-test or more seeds."]
    out += ["", "## Budget", "", _budget_table(c.methods).markdown()]
    short = [m for m in c.methods if m.fell_short]
    out += [""] + [f"- **{m.name} used less than planned**: {m.fell_short}" for m in short]
    if not short:
        out.append("- Every method used its planned budget.")
    out += ["", f"## Ranking (test {main}, {direction})", "", _ranking_table(analysis).markdown(),
            "", f"Group: the methods of a group cannot be separated at {ALPHA:.0%} from the "
            "group's best (its first): Holm-corrected paired p >= 0.05 against it (each row "
            "of the pairwise table below). Groups are consecutive in rank; a method outside a "
            "group differs significantly from that group's best only."]
    if metric_png:
        out += ["", f"![test {main} per method]({metric_png})"]
    out += ["", f"## Pairwise differences (test {main})", "",
            _pairs_table(analysis, main).markdown() if _pairs_of(analysis, main)
            else "Fewer than two methods have test results: nothing to compare."]
    others = _other_separable(analysis)
    if others:
        out += ["", "Separable pairs on the other metrics (Holm p < 0.05 over the pairs of each "
                "metric; all pairs are in comparison.json):", "", *others]
    out += ["", f"## Test metrics ({c.dataset})", "",
            "Mean ± half-width of the 95% Student-t interval over seeds; "
            f"{MISSING} where a method has no value.", "", _metrics_table(analysis).markdown()]
    out += ["", "## Search progress", "",
            "Best-so-far validation score of each method's search against the epochs it "
            "trained (all trials together); the dotted line marks the planned epoch budget."]
    if budget_png:
        out += ["", f"![best-so-far validation {main}]({budget_png})"]
    out += ["", "## Where each search lives", "",
            *(f"- {m.name}: {m.study_dir} (space {m.space}; {m.source or 'no citation'}; best "
              f"trial {m.best_trial or '-'}, validation {fmt(m.best_val)})" for m in c.methods)]
    if comparisons and len(comparisons) > 1:
        out += ["", *tournament_markdown(comparisons)]
    return "\n".join(out) + "\n"


def _test_text(test: str, n: int) -> str:
    if test == "t":
        return "two-sided paired t-test of the differences"
    if n <= EXACT_MAX_SEEDS:
        return f"two-sided sign-flip permutation test (exact: all {2**n} sign flips)"
    return "two-sided sign-flip permutation test (Monte-Carlo sample of sign flips)"


def _permutation_floor(analysis: Analysis) -> int | None:
    """The number of pairs of the main metric when the exact sign-flip test cannot reach Holm
    p < alpha with these seeds (its smallest p is 2 / 2^n, Holm's smallest m 2 / 2^n)."""
    n = len(analysis.seeds)
    m = sum(1 for p in analysis.pairs if p.metric == analysis.comparison.metric)
    if analysis.test != "permutation" or n < 2 or n > EXACT_MAX_SEEDS or m == 0:
        return None
    return m if m * 2 / 2**n >= ALPHA else None


def _budget_table(methods: Sequence[MethodOutcome]) -> Table:
    rows = []
    for m in methods:
        planned = ", ".join(_amount(k, v) for k, v in m.budget_planned.items())
        rows.append([m.name, planned or "-", _used_text(m), m.fell_short or "no"])
    return Table(["Method", "Planned", "Used", "Fell short"], rows)


def _used_text(m: MethodOutcome) -> str:
    parts = []
    for key, used in m.budget_used.items():
        planned = m.budget_planned.get(key)
        share = (f" ({used / planned:.0%})" if isinstance(planned, (int, float)) and planned > 0
                 and isinstance(used, (int, float)) else "")
        parts.append(f"{_amount(key, used)}{share}")
    return ", ".join(parts) or "-"


_COUNTED = {"epochs": "epoch", "trials": "trial"}
_HOURS = {"device_hours": "device-hours", "gpu_hours": "GPU-hours", "cpu_hours": "CPU-hours",
          "trial_hours": "trial-hours"}


def _amount(key: str, value: Any) -> str:
    """A budget's amount as a reader says it: ``400 epochs``, ``20 trials``, ``0.0039
    device-hours``; another key as ``key=value``."""
    if not isinstance(value, (int, float)):
        return f"{key}={fmt(value)}"
    if key in _COUNTED and float(value).is_integer():
        return counted(int(value), _COUNTED[key])
    if key in _HOURS:
        digits = ".0f" if value >= 100 else ".3g" if value >= 1 else ".2g"
        return f"{value:{digits}} {_HOURS[key]}"
    return f"{key}={fmt(value)}"


def _ranking_table(analysis: Analysis) -> Table:
    main = analysis.comparison.metric
    rows = []
    for r in analysis.ranking:
        mark = f"{r.group}" + (f" (tied with {_others(analysis, r)})" if r.tied else "")
        method = next(m for m in analysis.comparison.methods if m.name == r.method)
        rows.append([r.rank, r.method, _pm(analysis.stats[r.method][main]), mark,
                     _used_text(method)])
    for m in analysis.comparison.methods:
        if analysis.rank_of(m.name) is None:
            rows.append([MISSING, m.name, MISSING, "not ranked (no test value)",
                         _used_text(m)])
    return Table(["Rank", "Method", f"test {main} (mean ± 95% CI)", "Group", "Budget used"],
                 rows)


def _others(analysis: Analysis, rank: MethodRank) -> str:
    return ", ".join(r.method for r in analysis.ranking
                     if r.group == rank.group and r.method != rank.method)


def _pairs_of(analysis: Analysis, metric: str) -> list[PairTest]:
    """The pairs of ``metric`` with the better-ranked method as ``a`` (so diffs read as gains)."""
    order = {r.method: r.rank for r in analysis.ranking}
    pairs = []
    for p in analysis.pairs:
        if p.metric != metric:
            continue
        if order.get(p.b, math.inf) < order.get(p.a, math.inf):
            p = dataclasses.replace(p, a=p.b, b=p.a, diff=-p.diff,
                                    ci95=None if p.ci95 is None else (-p.ci95[1], -p.ci95[0]))
        pairs.append(p)
    return sorted(pairs, key=lambda p: (order.get(p.a, math.inf), order.get(p.b, math.inf)))


def _pairs_table(analysis: Analysis, metric: str) -> Table:
    mode = analysis.mode_of(metric)
    rows = []
    for p in _pairs_of(analysis, metric):
        ci = "" if p.ci95 is None else f" [{p.ci95[0]:+.4f}, {p.ci95[1]:+.4f}]"
        rows.append([f"{p.a} vs {p.b}", f"{p.diff:+.4f}{ci}", _p(p.p), _p(p.p_holm),
                     named_verdict(p, mode)])
    return Table(["a vs b", "diff a - b [95% CI]", "p", "p Holm", "Verdict"], rows)


def _other_separable(analysis: Analysis) -> list[str]:
    lines = []
    for metric in analysis.metrics:
        if metric == analysis.comparison.metric:
            continue
        mode = analysis.mode_of(metric)
        found = []
        for p in _pairs_of(analysis, metric):
            v = verdict(p, mode)
            if v in ("a better", "b better"):
                win, lose = (p.a, p.b) if v == "a better" else (p.b, p.a)
                found.append(f"{win} > {lose}")
        if _pairs_of(analysis, metric):
            lines.append(f"- {metric_label(metric)}: {', '.join(found) or 'none'}")
    return lines


def _metrics_table(analysis: Analysis) -> Table:
    order = [r.method for r in analysis.ranking]
    order += [m.name for m in analysis.comparison.methods if m.name not in order]
    rows = [[name, *(_pm(analysis.stats[name].get(k)) for k in analysis.metrics)]
            for name in order]
    return Table(["Method", *(metric_label(k) for k in analysis.metrics)], rows)


def tournament_markdown(comparisons: Sequence[Comparison]) -> list[str]:
    """The tournament's section (its lines): the thesis's average-rank tournament over
    ``comparisons`` (Table 11), or why there is none."""
    title = f"## Tournament ({len(comparisons)} experiments)"
    try:
        table = comparison_tournament(comparisons)
    except ValueError as e:  # the experiments rank different metrics, or in other directions
        return [title, "", f"No tournament: {e}."]
    metric = comparisons[0].metric
    lines = [title, "",
             f"The thesis's tournament (Psomas 2020, Table 11): methods ranked within each "
             f"experiment by mean test {metric} (ties share the average rank), then by their "
             "average rank over the experiments.", ""]
    lines += [f"{i}. {c.name}: {c.dataset}" + (f", {kv(c.shared)}" if c.shared else "")
              for i, c in enumerate(comparisons, 1)]
    rows = [[place, r["item"], f"{r['mean']:.2f}", f"{r['std']:.2f}", r["experiments"],
             " ".join(MISSING if x is None else f"{x:g}" for x in r["by_experiment"])]
            for place, r in enumerate(table, 1)]
    lines += ["", Table(["Place", "Method", "Mean rank", "Std", "Experiments",
                         f"Rank in 1..{len(comparisons)}"], rows).markdown()
              if rows else "No experiment has two methods with test results."]
    return lines


def _pm(stat: MeanCI | None) -> str:
    if stat is None:
        return MISSING
    if stat.half_width is None:
        return f"{stat.mean:.4f} (1 seed)"
    return f"{stat.mean:.4f} ± {stat.half_width:.4f}"


def _p(p: float | None) -> str:
    if p is None:
        return MISSING
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def comparison_tournament(comparisons: Sequence[Comparison], *,
                          metric: str | None = None) -> list[dict[str, Any]]:
    """The thesis's tournament over several experiments (e.g. datasets x backbones x embedding
    sizes), one :class:`Comparison` each: methods ranked within each experiment by their mean
    test ``metric`` over seeds (ties share the average of the ranks they span), then by their
    average rank (:func:`dmlsearch.search.reporting.tournament.tournament`; a method without the
    metric is left out of that experiment, an experiment with fewer than 2 ranked methods is
    skipped).

    ``metric`` defaults to the comparisons' main metric, which must then be the same for all
    (ValueError if not), as must the direction (``mode``). Returns the tournament's rows:
    ``item`` (the method), ``experiments``, ``ranks``, ``sum``, ``mean``, ``std``, plus
    ``by_experiment``: its rank in each comparison, by index (None where it was not ranked).
    """
    if not comparisons:
        return []
    metrics = {metric or c.metric for c in comparisons}
    if len(metrics) > 1:
        raise ValueError("the comparisons optimise different metrics "
                         f"({', '.join(sorted(metrics))}): name the one to rank by")
    (chosen,) = metrics
    modes = {mode_of(c, chosen) for c in comparisons}
    if len(modes) > 1:
        raise ValueError(f"the comparisons rank {chosen} in different directions")
    (mode,) = modes
    rows = []
    for i, c in enumerate(comparisons):
        for m in c.methods:
            values = method_values(m, chosen)
            if values is not None:
                rows.append({"experiment": i, "method": m.name, "score": float(np.mean(values))})
    table = tournament(rows, group_keys=["experiment"], item_key="method", score_key="score",
                       mode=mode)
    per_experiment: dict[Any, dict[int, float]] = {}
    for i in range(len(comparisons)):
        for row in tournament([r for r in rows if r["experiment"] == i],
                              group_keys=["experiment"], item_key="method", score_key="score",
                              mode=mode):
            per_experiment.setdefault(row["item"], {})[i] = row["ranks"][0]
    for row in table:
        ranks = per_experiment.get(row["item"], {})
        row["by_experiment"] = [ranks.get(i) for i in range(len(comparisons))]
    return table


def tournament_command(folders: Sequence[Path], *, out: Path) -> str:
    """``dmlsearch tournament``: the thesis's tournament (Table 11) over finished comparisons
    (e.g. one per dataset x backbone x embedding size), written to ``out`` as Markdown and
    returned."""
    if len(folders) < 2:
        raise UserError(f"a tournament needs at least two comparisons, got {len(folders)}; "
                        "give the folders of finished `dmlsearch compare` runs")
    comparisons = [read_comparison(folder) for folder in folders]
    text = "\n".join(["# dmlsearch tournament", "", *tournament_markdown(comparisons)]) + "\n"
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise UserError(f"cannot write {out} ({exc.strerror or exc}); choose a writable "
                        "--out") from None
    return text

"""The report of ``dmlsearch compare``: a :class:`~dmlsearch.search.compare.outcome.Comparison`
turned into numbers (``comparison.json``), a Markdown report a person reads (``comparison.md``)
and two pictures (the main test metric per method; the searches' best-so-far validation score
against epochs trained).

The statistics are :mod:`dmlsearch.search.compare.stats` (95% Student-t intervals over seeds,
differences paired by seed, the paired t-test or the sign-flip permutation test, Holm's
correction per metric, rank groups, the thesis's tournament). The reported test metrics are the
thesis's (Psomas 2020, ch. 4; SPEC §5/§6): Recall@1/2/4/8 (CUB200, CARS196 and every other
dataset) or Recall@1/10/100/1000 (SOP), with the MLRC metrics P@1, R-Precision and MAP@R
(Musgrave et al. 2020), and the comparison's own metric when it is none of these.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.stats import ALPHA
from dmlsearch.search.compare.stats import EXACT_MAX_SEEDS
from dmlsearch.search.compare.stats import TESTS
from dmlsearch.search.compare.stats import MeanCI
from dmlsearch.search.compare.stats import MethodRank
from dmlsearch.search.compare.stats import PairTest
from dmlsearch.search.compare.stats import all_pairs
from dmlsearch.search.compare.stats import comparison_tournament
from dmlsearch.search.compare.stats import mean_ci
from dmlsearch.search.compare.stats import method_values
from dmlsearch.search.compare.stats import named_verdict
from dmlsearch.search.compare.stats import rank_methods
from dmlsearch.search.compare.stats import verdict
from dmlsearch.search.reporting.plots import save_png
from dmlsearch.search.reporting.tables import Table
from dmlsearch.search.reporting.tables import fmt
from dmlsearch.search.reporting.tables import kv
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.trainables.errors import UserError

__all__ = ["Analysis", "ReportFiles", "analyse", "budget_figure", "comparison_dict",
           "metric_figure", "metric_label", "render_markdown", "reported_metrics",
           "write_report"]

MISSING = "–"
"""A metric a method does not have (its retrain failed, or its evaluation did not compute it)."""
SOP_KS: tuple[int, ...] = (1, 10, 100, 1000)
THESIS_KS: tuple[int, ...] = (1, 2, 4, 8)
MLRC_METRICS: tuple[str, ...] = ("precision@1", "r_precision", "map@r")
_LABELS = {"precision@1": "P@1", "r_precision": "R-Precision", "map@r": "MAP@R"}


@dataclasses.dataclass(frozen=True)
class Analysis:
    """Everything the report shows, computed once from a comparison."""

    comparison: Comparison
    seeds: list[int]  # the seeds every method was retrained with (differences pair by them)
    metrics: list[str]  # the reported metrics (see reported_metrics)
    values: dict[str, dict[str, list[float]]]  # method -> metric -> value per seed
    stats: dict[str, dict[str, MeanCI]]  # method -> metric -> mean and 95% interval
    ranking: list[MethodRank]  # by the main metric; methods without it are not ranked
    pairs: list[PairTest]  # every pair on every reported metric both have; Holm per metric
    test: str  # "t" or "permutation"

    def rank_of(self, method: str) -> MethodRank | None:
        return next((r for r in self.ranking if r.method == method), None)

    def mode_of(self, metric: str) -> str:
        return _mode(self.comparison, metric)


@dataclasses.dataclass(frozen=True)
class ReportFiles:
    """Where :func:`write_report` writes each part."""

    json: Path
    markdown: Path
    metric_png: Path
    budget_png: Path

    @classmethod
    def in_folder(cls, folder: Path) -> ReportFiles:
        """The default names, in ``folder``."""
        folder = Path(folder)
        return cls(json=folder / "comparison.json", markdown=folder / "comparison.md",
                   metric_png=folder / "comparison_metric.png",
                   budget_png=folder / "comparison_budget.png")


def reported_metrics(dataset: str, metric: str) -> list[str]:
    """The thesis's test metrics for ``dataset``: Recall@1/10/100/1000 for SOP (``sop``),
    Recall@1/2/4/8 for the others, then P@1, R-Precision and MAP@R; ``metric`` (the
    comparison's own) first when it is none of these."""
    ks = SOP_KS if dataset.lower() == "sop" else THESIS_KS
    out = [f"recall@{k}" for k in ks] + list(MLRC_METRICS)
    return out if metric in out else [metric, *out]


def metric_label(metric: str) -> str:
    """``R@1``, ``P@1``, ``R-Precision``, ``MAP@R``; other names as they are."""
    if metric.startswith("recall@"):
        return "R@" + metric.split("@", 1)[1]
    return _LABELS.get(metric, metric)


def analyse(comparison: Comparison, *, test: str = "t", resamples: int = 100_000,
            seed: int = 0) -> Analysis:
    """The comparison's statistics: per method and metric the mean and 95% interval over seeds,
    the ranking by the main metric (``comparison.metric``, in ``comparison.mode``) with its rank
    groups, and every pair of methods for every reported metric (``test``: ``"t"``, the paired
    t-test, or ``"permutation"``; Holm over the pairs of each metric). Methods with test metrics
    must share their seeds, in the same order (ValueError if not)."""
    if test not in TESTS:
        raise ValueError(f"test must be one of {', '.join(TESTS)}; got {test!r}")
    names = [m.name for m in comparison.methods]
    if len(set(names)) != len(names):
        raise ValueError(f"method names must differ: {names}")
    tested = [m for m in comparison.methods if m.test_metrics]
    seeds = list(tested[0].seeds) if tested else []
    for m in tested:
        if list(m.seeds) != seeds:
            raise ValueError(f"the methods were retrained with different seeds: "
                             f"{tested[0].name} {seeds}, {m.name} {list(m.seeds)} (differences "
                             "pair by seed: every method needs the same seeds, in the same order)")
    metrics = reported_metrics(comparison.dataset, comparison.metric)
    values: dict[str, dict[str, list[float]]] = {}
    for m in comparison.methods:
        keys = dict.fromkeys(k for t in m.test_metrics for k in t)
        found = {k: method_values(m, k) for k in keys}
        values[m.name] = {k: v for k, v in found.items() if v is not None}
    stats = {name: {k: mean_ci(v) for k, v in per.items()} for name, per in values.items()}
    pairs: list[PairTest] = []
    for metric in metrics:
        have = {name: per[metric] for name, per in values.items() if metric in per}
        pairs += all_pairs(have, {name: seeds for name in have}, metric=metric, test=test,
                           resamples=resamples, seed=seed)
    main = comparison.metric
    ranking = rank_methods({name: s[main] for name, s in stats.items() if main in s},
                           [p for p in pairs if p.metric == main], mode=comparison.mode)
    return Analysis(comparison=comparison, seeds=seeds, metrics=metrics, values=values,
                    stats=stats, ranking=ranking, pairs=pairs, test=test)


# ---- comparison.json ----------------------------------------------------------------------------
def comparison_dict(analysis: Analysis) -> dict[str, Any]:
    """The content of ``comparison.json``: the comparison, per method its test means and 95%
    half-widths (every test metric all its seeds have), its rank, group and tie by the main
    metric (None when it has no value of it), budget, best validation score and configuration;
    and every pair of methods on every reported metric (``diff`` = mean of a - b over seeds,
    its 95% interval, ``p``, ``p_holm`` over the pairs of that metric, the test and verdict).
    Non-finite numbers are None (JSON has no NaN)."""
    c = analysis.comparison
    methods = {}
    for m in c.methods:
        s = analysis.stats[m.name]
        r = analysis.rank_of(m.name)
        methods[m.name] = {
            "space": m.space,
            "source": m.source,
            "test_mean": {k: v.mean for k, v in s.items()},
            "test_ci95": {k: v.half_width for k, v in s.items()},
            "test_per_seed": [dict(t) for t in m.test_metrics],
            "rank": None if r is None else r.rank,
            "group": None if r is None else r.group,
            "tied": False if r is None else r.tied,
            "budget": {"planned": dict(m.budget_planned), "used": dict(m.budget_used),
                       "fell_short": m.fell_short},
            "best_trial": m.best_trial,
            "best_val": m.best_val,
            "best_config": dict(m.best_config),
            "study_dir": m.study_dir,
        }
    pairs = [{"a": p.a, "b": p.b, "metric": p.metric, "n": p.n, "diff": p.diff,
              "ci95": None if p.ci95 is None else [p.ci95[0], p.ci95[1]], "p": p.p,
              "p_holm": p.p_holm, "test": p.test,
              "verdict": verdict(p, analysis.mode_of(p.metric)), "note": p.note}
             for p in analysis.pairs]
    return _jsonable({"name": c.name, "dataset": c.dataset, "metric": c.metric, "mode": c.mode,
                      "shared": dict(c.shared), "seeds": list(analysis.seeds),
                      "methods": methods, "pairs": pairs})


def _jsonable(value: Any) -> Any:
    """``value`` with non-finite floats as None (JSON has no NaN or infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


# ---- comparison.md ------------------------------------------------------------------------------
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
        out += ["", *_tournament_section(comparisons)]
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
        rows.append([m.name, kv(m.budget_planned) or "-", _used_text(m),
                     m.fell_short or "no"])
    return Table(["Method", "Planned", "Used", "Fell short"], rows)


def _used_text(m: MethodOutcome) -> str:
    parts = []
    for key, used in m.budget_used.items():
        planned = m.budget_planned.get(key)
        share = (f" ({used / planned:.0%})" if isinstance(planned, (int, float)) and planned > 0
                 and isinstance(used, (int, float)) else "")
        parts.append(f"{key}={fmt(used)}{share}")
    return ", ".join(parts) or "-"


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


def _tournament_section(comparisons: Sequence[Comparison]) -> list[str]:
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


def _mode(comparison: Comparison, metric: str) -> str:
    if metric == comparison.metric:
        return comparison.mode
    from dmlsearch.trainables.metrics.names import metric_mode

    try:
        return metric_mode(metric)
    except ValueError:  # not a metric dmlsearch computes: higher is better, as retrieval's
        return "max"


# ---- figures ------------------------------------------------------------------------------------
def metric_figure(analysis: Analysis, path: Path) -> Path:
    """The main test metric per method, best at the top: the mean with its 95% interval (a
    point and an error bar, its value written under it), each seed's value as a small dot above
    it, and on the right a bracket joining the methods of each rank group (not separable from
    the group's best). Each method has the colour it has in :func:`budget_figure`."""
    c = analysis.comparison
    ranking = analysis.ranking
    fig = Figure(figsize=(8, 1.7 + 0.7 * max(len(ranking), 1)))
    ax = fig.add_subplot()
    if not ranking:
        ax.text(0.5, 0.5, "no method has test results", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_axis_off()
        fig.tight_layout()
        save_png(fig, path)
        return path
    colours = _method_colours(c)
    rng = np.random.default_rng(0)
    for y, r in enumerate(ranking):
        colour = colours[r.method]
        seeds = analysis.values[r.method][c.metric]
        ax.scatter(seeds, y - 0.24 + rng.uniform(-0.05, 0.05, size=len(seeds)), s=16,
                   color=colour, alpha=0.6, lw=0, zorder=2)
        err = 0.0 if r.half_width is None else r.half_width
        ax.errorbar(r.mean, y, xerr=err, fmt="o", color=colour, ms=7, capsize=4, lw=1.8,
                    zorder=3)
        ax.annotate(f"{r.mean:.4f}" + ("" if r.half_width is None else f" ± {r.half_width:.4f}"),
                    (r.mean, y), xytext=(0, -9), textcoords="offset points", ha="center",
                    va="top", fontsize=7.5, color="0.2")
    ax.set_yticks(range(len(ranking)), [f"{r.rank}. {r.method}" for r in ranking])
    ax.set_ylim(len(ranking) - 0.45, -0.6)
    values = [v for r in ranking for v in analysis.values[r.method][c.metric]]
    values += [r.mean + s * (r.half_width or 0.0) for r in ranking for s in (-1, 1)]
    lo, hi = min(values), max(values)
    span = (hi - lo) or max(abs(hi), 1e-3) * 0.1
    ax.set_xlim(lo - 0.06 * span, hi + 0.3 * span)
    x = hi + 0.08 * span
    tick = 0.02 * span
    for g in sorted({r.group for r in ranking}):
        ys = [y for y, r in enumerate(ranking) if r.group == g]
        top, bottom = min(ys) - 0.25, max(ys) + 0.2
        ax.plot([x - tick, x, x, x - tick], [top, top, bottom, bottom], color="0.3", lw=1.3)
        label = f"group {g}" + ("\nnot separable" if len(ys) > 1 else "")
        ax.text(x + tick, (top + bottom) / 2, label, va="center", ha="left", fontsize=8,
                color="0.2")
    ax.grid(axis="x", alpha=0.3)
    direction = "higher is better" if c.mode == "max" else "lower is better"
    ax.set_xlabel(f"test {c.metric} ({direction})")
    ax.set_title(f"{c.name}: test {c.metric} on {c.dataset}, mean and 95% CI over "
                 f"{len(analysis.seeds)} seed(s); dots: the seeds\ngroup: Holm-corrected "
                 f"{TESTS[analysis.test]} p ≥ {ALPHA:g} against the group's best", fontsize=9)
    fig.tight_layout()
    save_png(fig, path)
    return path


def _method_colours(comparison: Comparison) -> dict[str, Any]:
    cmap = colormaps["tab10"]
    return {m.name: cmap(i % 10) for i, m in enumerate(comparison.methods)}


def budget_figure(analysis: Analysis, path: Path) -> Path:
    """Each method's search: its best-so-far validation score against the epochs it trained
    (``MethodOutcome.trajectory``, a step line), its end marked with a dot, and its planned
    epoch budget as a dotted vertical line (one grey line when every method had the same)."""
    c = analysis.comparison
    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    colours = _method_colours(c)
    drawn = 0
    planned = {m.name: m.budget_planned.get("epochs") for m in c.methods}
    same = len({p for p in planned.values()}) == 1
    for m in c.methods:
        colour = colours[m.name]
        if m.trajectory:
            xs = [float(e) for e, _ in m.trajectory]
            ys = [float(v) for _, v in m.trajectory]
            ax.step(xs, ys, where="post", color=colour, lw=1.8, label=m.name)
            ax.plot(xs[-1], ys[-1], "o", color=colour, ms=5)
            if m.fell_short:
                ax.annotate(f"fell short ({fmt(xs[-1])} epochs)", (xs[-1], ys[-1]),
                            xytext=(0, -8), textcoords="offset points", fontsize=7.5,
                            ha="center", va="top", color=colour, zorder=4,
                            bbox={"boxstyle": "round,pad=0.2", "fc": "white", "ec": colour,
                                  "lw": 0.6, "alpha": 0.9})
            drawn += 1
        p = planned[m.name]
        if p is not None and not same:
            ax.axvline(float(p), color=colour, ls=":", lw=1.3)
    handles, labels = ax.get_legend_handles_labels()
    common = next(iter(planned.values()), None)
    if same and common is not None:
        ax.axvline(float(common), color="0.4", ls=":", lw=1.3)
        handles.append(Line2D([], [], color="0.4", ls=":"))
        labels.append(f"planned budget ({fmt(float(common))} epochs)")
    elif not same and any(p is not None for p in planned.values()):
        handles.append(Line2D([], [], color="0.4", ls=":"))
        labels.append("planned budget (method's colour)")
    if not drawn:
        ax.text(0.5, 0.5, "no search recorded a best-so-far curve", ha="center", va="center",
                transform=ax.transAxes)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.set_xlabel("epochs trained by the search (all trials)")
    ax.set_ylabel(f"best validation {c.metric} so far")
    ax.set_title(f"{c.name}: search progress per method on {c.dataset}", fontsize=10)
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="lower right" if c.mode == "max"
                  else "upper right")
    fig.tight_layout()
    save_png(fig, path)
    return path


# ---- all of it ----------------------------------------------------------------------------------
def write_report(comparison: Comparison, files: ReportFiles, *,
                 comparisons: Sequence[Comparison] | None = None, test: str = "t",
                 resamples: int = 100_000, seed: int = 0) -> ReportFiles:
    """Write ``comparison.json``, ``comparison.md`` and the two pictures where ``files`` says
    (text atomically, pictures with ``save_png``); ``comparisons`` (several experiments, this
    one usually among them) adds the tournament to the Markdown. Returns ``files``."""
    analysis = analyse(comparison, test=test, resamples=resamples, seed=seed)
    metric_figure(analysis, files.metric_png)
    budget_figure(analysis, files.budget_png)
    base = Path(files.markdown).parent
    text = render_markdown(
        analysis, comparisons=comparisons,
        metric_png=Path(os.path.relpath(files.metric_png, base)).as_posix(),
        budget_png=Path(os.path.relpath(files.budget_png, base)).as_posix())
    write_atomic(files.json, json.dumps(comparison_dict(analysis), indent=2, allow_nan=False,
                                        default=str) + "\n")
    write_atomic(files.markdown, text)
    return files


# ---- several experiments: the tournament -----------------------------------------------------
def comparison_from_json(body: dict[str, Any]) -> Comparison:
    """A :class:`Comparison` read back from its ``comparison.json`` (:func:`comparison_dict`):
    every method's per-seed test metrics, budget, best configuration; no search trajectory."""
    seeds = [int(s) for s in body.get("seeds") or []]
    methods = []
    for name, m in (body.get("methods") or {}).items():
        budget = m.get("budget") or {}
        tests = [{k: float(v) for k, v in t.items() if v is not None}
                 for t in m.get("test_per_seed") or []]
        methods.append(MethodOutcome(
            name=name, space=str(m.get("space") or ""), source=str(m.get("source") or ""),
            budget_planned=dict(budget.get("planned") or {}),
            budget_used=dict(budget.get("used") or {}), fell_short=budget.get("fell_short"),
            best_trial=m.get("best_trial"), best_val=m.get("best_val"),
            best_config=dict(m.get("best_config") or {}), trajectory=[],
            seeds=seeds if tests else [], test_metrics=tests,
            study_dir=str(m.get("study_dir") or "")))
    return Comparison(name=str(body["name"]), dataset=str(body["dataset"]),
                      metric=str(body["metric"]), mode=str(body["mode"]),
                      shared=dict(body.get("shared") or {}), methods=methods)


def tournament_command(folders: Sequence[Path], *, out: Path) -> str:
    """``dmlsearch tournament``: the thesis's tournament (Table 11) over finished comparisons
    (e.g. one per dataset x backbone x embedding size), written to ``out`` as Markdown and
    returned."""
    if len(folders) < 2:
        raise UserError(f"a tournament needs at least two comparisons, got {len(folders)}; "
                        "give the folders of finished `dmlsearch compare` runs")
    comparisons = []
    for folder in folders:
        path = ComparisonDir(Path(folder).expanduser().resolve()).comparison_json
        if not path.is_file():
            raise UserError(f"no comparison.json in {folder}: expected the folder of a "
                            "finished `dmlsearch compare`; finish it with `dmlsearch resume "
                            f"{folder}` or leave it out")
        try:
            comparisons.append(comparison_from_json(json.loads(path.read_text())))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"{path} is not a comparison.json dmlsearch wrote ({exc}); "
                            "run the comparison again") from None
    text = "\n".join(["# dmlsearch tournament", "", *_tournament_section(comparisons)]) + "\n"
    try:
        write_atomic(out, text)
    except OSError as exc:
        raise UserError(f"cannot write {out} ({exc.strerror or exc}); choose a writable "
                        "--out") from None
    return text

"""A comparison's two pictures: the main test metric per method (means, intervals, seeds, rank
groups) and the searches' best-so-far validation score against the epochs they trained. Figures
use matplotlib's object API and :func:`dmlsearch.search.reporting.plots.save_png`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import MaxNLocator

from dmlsearch.search.compare.analysis import Analysis
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.stats import ALPHA
from dmlsearch.search.compare.stats import TESTS
from dmlsearch.search.reporting import fmt
from dmlsearch.search.reporting.plots import save_png

__all__ = ["budget_figure", "metric_figure"]


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
        ends = [float(p) for p in planned.values() if p is not None]
        ax.set_xlim(0, max([*ends, 1.0]) * 1.05)  # not a fraction of an epoch either side
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.set_xlabel("epochs trained by the search (all trials)")
    ax.set_ylabel(f"best validation {c.metric} so far")
    ax.set_title(f"{c.name}: search progress per method on {c.dataset}", fontsize=10)
    if handles:
        # beside the plot: a method whose curve stays low (or high) to its end would run
        # under a legend in the corner the curves usually leave free
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    save_png(fig, path)
    return path



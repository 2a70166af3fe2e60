"""The importance analysis as pictures: per analysis, importance bars, an interaction heat map
and the marginal curves of the top parameters (:mod:`.importance` computes them,
:mod:`.importance_report` holds them).

Every picture says what it explains, over how many trials and at which budget (``full budget``
or ``epoch E``), and carries the analysis's caveats; a log parameter's marginal is drawn on a
log axis, as it is searched. Titles are wrapped to the figure's width: nothing is cut.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from dmlsearch.search.reporting.importance_report import Analysis
from dmlsearch.search.reporting.importance_report import ImportanceReport
from dmlsearch.search.reporting.plots import save_png

__all__ = ["share", "write_plots"]

_CHARS_PER_INCH = 11  # of a 10-point title: where to wrap it


def share(value: float) -> str:
    """A fraction as a percentage a person reads (``<1%`` rather than a misleading ``0%``)."""
    return "0%" if value <= 0 else "<1%" if value < 0.005 else f"{min(value, 1.0):.0%}"


def write_plots(report: ImportanceReport, folder: Path, *, top: int = 3) -> list[Path]:
    """Per analysis: importance bars, an interaction heat map (two parameters or more),
    marginal curves of the top parameters. PNGs in ``folder`` (created); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, a in enumerate(report.analyses):
        if not a.params:
            continue
        stem = folder / (f"{k:02d}_" + "".join(c if c.isalnum() else "_" for c in a.name)[:60])
        paths.append(_bars(report, a, Path(f"{stem}_importance.png")))
        if len(a.params) >= 2:
            paths.append(_heat_map(report, a, Path(f"{stem}_interactions.png")))
        paths.append(_marginals(report, a, Path(f"{stem}_marginals.png"), top=top))
    return paths


def _heading(report: ImportanceReport, a: Analysis, what: str, width: float) -> str:
    """``what`` of the analysis, its trials and budget, and its caveats, wrapped to ``width``
    inches."""
    sample = f" (a random {a.trials} of {a.sampled_from})" if a.sampled_from else ""
    lines = [f"{what}, {a.name}: {a.trials} trials{sample} at {report.budget}"]
    if a.caveats:
        lines.append("caveat: " + "; ".join(a.caveats))
    chars = max(20, int(width * _CHARS_PER_INCH))
    return "\n".join(textwrap.fill(line, chars) for line in lines)


def _bars(report: ImportanceReport, a: Analysis, path: Path) -> Path:
    names = sorted(a.params, key=lambda n: a.importance.get(n, 0.0))
    values = [a.importance.get(n, 0.0) for n in names]
    width = 7.0
    fig = Figure(figsize=(width, 0.4 * len(names) + 2.2), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(names, values, color="tab:blue")
    for y, v in enumerate(values):
        ax.text(v, y, f" {share(v)}", va="center", fontsize=8)
    ax.set_xlim(0, max(1e-9, max(values)) * 1.2)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_xlabel(f"share of the variance of {report.objective} explained alone (fANOVA)")
    fig.suptitle(_heading(report, a, "Importance", width), fontsize=10)
    save_png(fig, path)
    return path


def _heat_map(report: ImportanceReport, a: Analysis, path: Path) -> Path:
    names = list(a.params)
    matrix = np.zeros((len(names), len(names)))
    for (p, q), v in a.interactions.items():
        i, j = names.index(p), names.index(q)
        matrix[i, j] = matrix[j, i] = v
    for i, n in enumerate(names):
        matrix[i, i] = a.importance.get(n, 0.0)
    width = max(6.0, 3.5 + 0.7 * len(names))
    fig = Figure(figsize=(width, 2.8 + 0.6 * len(names)), layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(matrix, cmap="viridis", vmin=0)
    if len(names) <= 10:
        high = matrix.max() / 2
        for (i, j), v in np.ndenumerate(matrix):
            ax.text(j, i, share(v), ha="center", va="center", fontsize=7,
                    color="black" if v > high else "white")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    bar = fig.colorbar(image, ax=ax, format=lambda v, _: f"{v:.0%}")
    bar.set_label("share of the variance", fontsize=8)
    fig.suptitle(_heading(report, a, "Importance alone (diagonal) and in pairs", width),
                 fontsize=10)
    save_png(fig, path)
    return path


def _marginals(report: ImportanceReport, a: Analysis, path: Path, *, top: int) -> Path:
    ranked = sorted(a.params, key=lambda n: -a.importance.get(n, 0.0))[:top]
    width = max(6.0, 3.6 * len(ranked))
    fig = Figure(figsize=(width, 3.9), layout="constrained")
    axes = fig.subplots(1, len(ranked), sharey=True, squeeze=False)[0]
    for ax, n in zip(axes, ranked, strict=True):
        xs, ys = a.marginals[n]
        scale = a.scales.get(n, "categorical")
        if scale == "categorical":
            ax.plot(range(len(xs)), ys, "o", color="tab:blue")
            ax.set_xticks(range(len(xs)), [str(v) for v in xs], rotation=30, ha="right",
                          fontsize=7)
            ax.set_xlim(-0.5, len(xs) - 0.5)
        else:
            ax.plot(xs, ys, marker="o", color="tab:blue")
            if scale == "log":
                ax.set_xscale("log")
            seen = a.observed.get(n, [])
            if seen:  # where the trials are: the curve is the forest's guess between them
                ax.plot(seen, [0.0] * len(seen), "|", color="tab:red", markersize=10,
                        transform=ax.get_xaxis_transform(), label="trials analysed")
                ax.legend(fontsize=7, loc="best")
        ax.set_xlabel(f"{n} ({scale}; importance {share(a.importance.get(n, 0.0))})",
                      fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"predicted {report.objective}\n(mean over the other parameters)",
                       fontsize=8)
    fig.suptitle(_heading(report, a, f"Marginal effect of the top {len(ranked)}", width),
                 fontsize=10)
    save_png(fig, path)
    return path

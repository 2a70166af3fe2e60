"""The importance analysis as pictures: per analysis, importance bars, an interaction heat map
and the marginal curves of the top parameters (:mod:`.importance` computes them)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from matplotlib.figure import Figure

from dmlsearch.search.reporting.plots import save_png

if TYPE_CHECKING:  # the analysis imports this module to draw its report
    from dmlsearch.search.reporting.importance import ImportanceReport

__all__ = ["write_plots"]


def write_plots(report: ImportanceReport, folder: Path, *, top: int = 3) -> list[Path]:
    """Per analysis: importance bars, an interaction heat map, marginal curves of the top
    parameters. PNGs in ``folder`` (created); their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, a in enumerate(report.analyses):
        stem = f"{k:02d}_" + "".join(c if c.isalnum() else "_" for c in a.name)[:60]
        if a.importance:
            names = sorted(a.importance, key=a.importance.get)
            fig = Figure(figsize=(6, 0.4 * len(names) + 1.5))
            ax = fig.add_subplot()
            ax.barh(names, [a.importance[n] for n in names])
            ax.set_xlabel("fANOVA importance (fraction of variance)")
            ax.set_title(f"{a.name} ({a.trials} trials"
                         + (f" of {a.sampled_from}" if a.sampled_from else "") + ")")
            fig.tight_layout()
            paths.append(folder / f"{stem}_importance.png")
            save_png(fig, paths[-1])
        names = list(a.main_effects)
        if len(names) >= 2:
            matrix = np.zeros((len(names), len(names)))
            for (p, q), v in a.interactions.items():
                i, j = names.index(p), names.index(q)
                matrix[i, j] = matrix[j, i] = v
            for i, n in enumerate(names):
                matrix[i, i] = a.main_effects[n]
            fig = Figure(figsize=(1 + 0.6 * len(names) + 2, 1 + 0.6 * len(names)))
            ax = fig.add_subplot()
            image = ax.imshow(matrix, cmap="viridis")
            ax.set_xticks(range(len(names)), names, rotation=60, ha="right", fontsize=7)
            ax.set_yticks(range(len(names)), names, fontsize=7)
            fig.colorbar(image, ax=ax, label="fraction of variance")
            ax.set_title(f"{a.name}: main effects (diagonal), pairs")
            fig.tight_layout()
            paths.append(folder / f"{stem}_interactions.png")
            save_png(fig, paths[-1])
        ranked = sorted(a.main_effects, key=lambda n: -a.main_effects[n])[:top]
        if ranked:
            fig = Figure(figsize=(4 * len(ranked), 3.2))
            for i, n in enumerate(ranked):
                ax = fig.add_subplot(1, len(ranked), i + 1)
                xs, ys = a.marginals[n]
                if all(isinstance(v, (int, float)) for v in xs):
                    ax.plot(xs, ys, marker="o")
                    if isinstance(a.marginals[n][0][0], float) and min(xs) > 0 and \
                            max(xs) / min(xs) > 50:
                        ax.set_xscale("log")
                else:
                    ax.bar([str(v) for v in xs], ys)
                    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
                ax.set_xlabel(n)
                ax.set_ylabel(f"mean predicted {report.objective}")
            fig.suptitle(f"{a.name}: marginal effect of the top parameters")
            fig.tight_layout()
            paths.append(folder / f"{stem}_marginals.png")
            save_png(fig, paths[-1])
    return paths

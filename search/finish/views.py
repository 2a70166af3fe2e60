"""What the retrained model looks like: a 2-D view of its test embeddings.

Drawn with matplotlib's object API and saved with
:func:`dmlsearch.search.reporting.plots.save_laid_out`;
the retrain logs it to its MLflow run (``embeddings/``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps

from dmlsearch.search.reporting.plots import figure
from dmlsearch.search.reporting.plots import save_laid_out

__all__ = ["embedding_view", "project_2d"]


def project_2d(embeddings: np.ndarray, *, seed: int = 0) -> tuple[np.ndarray, str]:
    """A 2-D map of ``embeddings``: t-SNE (scikit-learn, PCA-initialised, cosine) when there are
    enough points for it, else the two principal components. Returns (points, method)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if len(x) >= 30 and x.shape[1] > 2:
        from sklearn.manifold import TSNE  # seconds to import: only where a map is drawn

        perplexity = float(min(30, (len(x) - 1) / 3))
        points = TSNE(n_components=2, perplexity=perplexity, init="pca", metric="cosine",
                      random_state=seed).fit_transform(x)
        return points, "t-SNE"
    centred = x - x.mean(axis=0)
    if x.shape[1] < 2:
        return np.column_stack([centred[:, 0], np.zeros(len(x))]), "PCA"
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred @ vt[:2].T, "PCA"


def embedding_view(embeddings: np.ndarray, labels: np.ndarray, path: Path, *,
                   max_classes: int = 20, seed: int = 0, title: str = "") -> Path:
    """The test embeddings of up to ``max_classes`` classes (chosen at random with ``seed``),
    mapped to 2-D and coloured by class."""
    labels = np.asarray(labels)
    classes = np.unique(labels)
    rng = np.random.default_rng(seed)
    shown = np.sort(rng.choice(classes, size=min(max_classes, len(classes)), replace=False))
    mask = np.isin(labels, shown)
    points, method = project_2d(embeddings[mask], seed=seed)
    fig = figure(6.5, 6)
    ax = fig.add_subplot()
    cmap = colormaps["tab20"]
    markers = "os^Dv<>p*h"
    for i, c in enumerate(shown):
        sel = labels[mask] == c
        ax.scatter(points[sel, 0], points[sel, 1], s=14, color=cmap(i % 20),
                   marker=markers[(i // 20) % len(markers)], alpha=0.85)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(f"{title + ': ' if title else ''}test embeddings, {method} "
                 f"({len(shown)} of {len(classes)} classes, {int(mask.sum())} images)",
                 fontsize=9)
    return save_laid_out(fig, path)



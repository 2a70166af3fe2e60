"""The study's pictures, for the MLflow UI: optimisation history, parallel coordinates, learning
curves, and a 2-D view of the retrained model's test embeddings.

Everything is drawn with matplotlib's object API (``Figure``, no ``pyplot``: no global backend
state, safe in the driver's threads). Each function writes one PNG and returns its path; the
driver logs them to the study's run (``plots/``) and the retrain's run (``embeddings/``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["embedding_view", "learning_curves", "optimisation_history", "parallel_coordinates",
           "project_2d", "save_png", "study_plots", "trial_curve"]

_STATE_MARKERS = {"completed": "o", "stopped": "v", "failed": "x"}


def _figure(width: float, height: float):  # type: ignore[no-untyped-def]
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def save_png(fig: Any, path: Path) -> None:
    """Write a figure as PNG, atomically (shared by every picture dmlsearch draws)."""
    from dmlsearch.search.export import atomic_path  # written then renamed: never a half-written PNG

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)


def optimisation_history(records: Sequence[Any], metric: str, mode: str, path: Path) -> Path:
    """Each trial's best validation score in start order, and the best so far as a step line."""
    fig = _figure(7, 4)
    ax = fig.add_subplot()
    ordered = _start_order(records)
    best: float | None = None
    best_line: list[float] = []
    for i, r in enumerate(ordered):
        if r.score is not None and math.isfinite(r.score) and r.state != "failed":
            ax.scatter(i, r.score, marker=_STATE_MARKERS.get(r.state, "o"), color="tab:blue",
                       label=r.state if r.state not in ax.get_legend_handles_labels()[1] else None)
            if best is None or (r.score < best if mode == "min" else r.score > best):
                best = r.score
        elif r.state == "failed":
            ax.axvline(i, color="tab:red", alpha=0.25, lw=3,
                       label="failed" if "failed" not in ax.get_legend_handles_labels()[1]
                       else None)
        best_line.append(math.nan if best is None else best)
    ax.step(range(len(ordered)), best_line, where="post", color="tab:orange", label="best so far")
    if len(ordered) <= 24:
        ax.set_xticks(range(len(ordered)), [r.trial_id for r in ordered], rotation=60,
                      ha="right", fontsize=7)
    ax.set_xlabel("trial (in start order)")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(f"Optimisation history ({len(ordered)} trials, {mode}imise)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_png(fig, path)
    return path


def parallel_coordinates(records: Sequence[Any], params: Sequence[Any], metric: str, mode: str,
                         path: Path) -> Path:
    """One axis per searched parameter (log axes for log parameters, categories spread evenly)
    and one for the score; one line per scored trial, coloured by its score."""
    from matplotlib import colormaps
    from dmlsearch.spaces import config_from_sample

    scored = [r for r in records if r.score is not None and math.isfinite(r.score)
              and r.state != "failed"]
    keys = list(dict.fromkeys(p.key for p in params))
    by_key = {p.key: p for p in params}
    configs = [config_from_sample(r.config) for r in scored]
    columns, ticks = [], []
    for key in keys:
        values = [c.get(key) for c in configs]
        column, tick = _axis(values, by_key[key])
        columns.append(column)
        ticks.append(tick)
    scores = np.array([r.score for r in scored], dtype=float)
    column, tick = _axis(list(scores), None)
    columns.append(column)
    ticks.append(tick)
    names = keys + [f"val {metric}"]
    fig = _figure(max(6.0, 1.6 * len(names)), 4.5)
    ax = fig.add_subplot()
    if len(scored):
        lo, hi = float(scores.min()), float(scores.max())
        shade = (scores - lo) / (hi - lo) if hi > lo else np.full_like(scores, 0.5)
        if mode == "min":
            shade = 1 - shade
        cmap = colormaps["viridis"]
        matrix = np.array(columns).T  # trials × axes, each in [0, 1] (NaN: not in this branch)
        for row, s in sorted(zip(matrix, shade), key=lambda t: t[1]):  # best drawn last
            ax.plot(range(len(names)), row, color=cmap(s), alpha=0.8, lw=1.5)
    for x, tick in enumerate(ticks):
        ax.axvline(x, color="black", lw=0.8)
        for y, text in tick:
            ax.text(x + 0.03, y, text, fontsize=7, va="center")
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"Parallel coordinates ({len(scored)} scored trials; yellow = best)")
    fig.tight_layout()
    save_png(fig, path)
    return path


def _axis(values: list[Any], param: Any | None) -> tuple[list[float], list[tuple[float, str]]]:
    """Positions in [0, 1] for ``values`` and a few labelled ticks for the axis."""
    present = [v for v in values if v is not None]
    numeric = present and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                              for v in present)
    if not numeric:
        cats = list(dict.fromkeys(str(v) for v in present))
        if param is not None and getattr(param, "choices", ()):
            cats = [str(c) for c in param.choices if str(c) in cats] or cats
        pos = {c: (i / (len(cats) - 1) if len(cats) > 1 else 0.5) for i, c in enumerate(cats)}
        return ([pos[str(v)] if v is not None else math.nan for v in values],
                [(p, c) for c, p in pos.items()])
    log = bool(getattr(param, "log", False)) and min(present) > 0
    lo = float(param.low) if param is not None and param.low is not None else min(present)
    hi = float(param.high) if param is not None and param.high is not None else max(present)
    lo, hi = min(lo, min(present)), max(hi, max(present))
    f = math.log10 if log else float
    span = f(hi) - f(lo)

    def at(v: float) -> float:
        return (f(v) - f(lo)) / span if span > 0 else 0.5

    return ([at(v) if v is not None else math.nan for v in values],
            [(at(v), f"{v:.3g}") for v in (lo, hi)])


def trial_curve(trial_folder: Path, key: str) -> list[tuple[int, float]]:
    """(iteration, value) of ``key`` from Ray Tune's ``result.json`` in a trial's folder."""
    path = Path(trial_folder) / "result.json"
    if not path.is_file():
        return []
    curve = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a crash
            continue
        value = row.get(key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            curve.append((int(row.get("training_iteration", len(curve) + 1)), float(value)))
    return curve


def learning_curves(records: Sequence[Any], metric: str, path: Path) -> Path:
    """Validation metric per epoch of every trial (from the trials' result files)."""
    key = f"val_{metric}"
    fig = _figure(7, 4)
    ax = fig.add_subplot()
    drawn = 0
    for r in _start_order(records):
        curve = trial_curve(Path(r.path), key) if r.path else []
        if curve:
            xs, ys = zip(*curve)
            style = "-" if r.state == "completed" else ":"
            ax.plot(xs, ys, style, marker=".", lw=1, label=r.trial_id if len(records) <= 12
                    else None)
            drawn += 1
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (× fold × repeat for k-fold and repeats)")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(f"Learning curves ({drawn} trials; dotted: stopped early or failed)")
    if drawn and len(records) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
    return path


def study_plots(records: Sequence[Any], params: Sequence[Any], metric: str, mode: str,
                folder: Path) -> list[Path]:
    """The study's three plots in ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        optimisation_history(records, metric, mode, folder / "optimisation_history.png"),
        parallel_coordinates(records, params, metric, mode, folder / "parallel_coordinates.png"),
        learning_curves(records, metric, folder / "learning_curves.png"),
    ]


def project_2d(embeddings: np.ndarray, *, seed: int = 0) -> tuple[np.ndarray, str]:
    """A 2-D map of ``embeddings``: t-SNE (scikit-learn, PCA-initialised, cosine) when there are
    enough points for it, else the two principal components. Returns (points, method)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if len(x) >= 30 and x.shape[1] > 2:
        from sklearn.manifold import TSNE

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
    fig = _figure(6.5, 6)
    ax = fig.add_subplot()
    from matplotlib import colormaps

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
    fig.tight_layout()
    save_png(fig, path)
    return path


def _start_order(records: Sequence[Any]) -> list[Any]:
    """Records in the order their trials started (Ray's last result: timestamp − time_total_s);
    trials that never reported come last, in their given order."""
    def started(r: Any) -> float:
        last = r.last_result or {}
        stamp, total = last.get("timestamp"), last.get("time_total_s")
        if isinstance(stamp, (int, float)) and isinstance(total, (int, float)):
            return float(stamp) - float(total)
        return math.inf

    return sorted(records, key=started)

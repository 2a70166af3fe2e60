"""The study's pictures, for the MLflow UI: optimisation history, parallel coordinates and
learning curves of the trials (the retrained model's views are :mod:`dmlsearch.search.finish.views`).

Everything is drawn with matplotlib's object API (``Figure``, no ``pyplot``: no global backend
state, safe in the driver's threads). Each function writes one PNG and returns its path; the
driver logs them to the study's run (``plots/``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.study_dir import atomic_path
from dmlsearch.spaces import Param

__all__ = ["figure", "learning_curves", "optimisation_history", "parallel_coordinates",
           "save_png", "study_plots", "trial_curve"]

_STATE_MARKERS = {TrialState.COMPLETED: "o", TrialState.PRUNED: "v", TrialState.FAILED: "x"}


def figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height))


def save_png(fig: Figure, path: Path) -> None:
    """Write a figure as PNG, atomically (written then renamed: never a half-written PNG);
    shared by every picture dmlsearch draws."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)


def optimisation_history(records: Sequence[TrialRecord], metric: str, mode: str,
                         path: Path) -> Path:
    """Each trial's best validation score in start order, and the best so far as a step line."""
    fig = figure(7, 4)
    ax = fig.add_subplot()
    ordered = _start_order(records)
    best: float | None = None
    best_line: list[float] = []
    for i, r in enumerate(ordered):
        if r.scored and r.score is not None:
            ax.scatter(i, r.score, marker=_STATE_MARKERS.get(r.state, "o"), color="tab:blue",
                       label=r.state.value if r.state.value not in ax.get_legend_handles_labels()[1]
                       else None)
            if best is None or (r.score < best if mode == "min" else r.score > best):
                best = r.score
        elif r.state is TrialState.FAILED:
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


def parallel_coordinates(records: Sequence[TrialRecord], params: Sequence[Param], metric: str,
                         mode: str, path: Path) -> Path:
    """One axis per searched parameter (log axes for log parameters, categories spread evenly)
    and one for the score; one line per scored trial, coloured by its score."""
    scored = [r for r in records if r.scored]
    keys = list(dict.fromkeys(p.key for p in params))
    by_key = {p.key: p for p in params}
    configs = [r.config for r in scored]
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
    fig = figure(max(6.0, 1.6 * len(names)), 4.5)
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


def _axis(values: list[Any], param: Param | None) -> tuple[list[float], list[tuple[float, str]]]:
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


def learning_curves(records: Sequence[TrialRecord], metric: str, path: Path) -> Path:
    """Validation metric per epoch of every trial (from the trials' result files)."""
    key = f"val_{metric}"
    fig = figure(7, 4)
    ax = fig.add_subplot()
    drawn = 0
    for r in _start_order(records):
        curve = trial_curve(Path(r.path), key) if r.path else []
        if curve:
            xs, ys = zip(*curve)
            style = "-" if r.state is TrialState.COMPLETED else ":"
            ax.plot(xs, ys, style, marker=".", lw=1, label=r.trial_id if len(records) <= 12
                    else None)
            drawn += 1
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch (× fold × repeat for k-fold and repeats)")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(f"Learning curves ({drawn} trials; dotted: stopped early or failed)")
    if drawn and len(records) <= 12:
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_png(fig, path)
    return path


def study_plots(records: Sequence[TrialRecord], params: Sequence[Param], metric: str, mode: str,
                folder: Path) -> list[Path]:
    """The study's three plots in ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    return [
        optimisation_history(records, metric, mode, folder / "optimisation_history.png"),
        parallel_coordinates(records, params, metric, mode, folder / "parallel_coordinates.png"),
        learning_curves(records, metric, folder / "learning_curves.png"),
    ]


def _start_order(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Records in the order their trials started; trials that never reported come last."""
    return sorted(records, key=lambda r: math.inf if r.started is None else r.started)

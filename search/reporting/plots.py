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
from matplotlib.cm import ScalarMappable
from matplotlib.collections import LineCollection
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.results import over_fits
from dmlsearch.search.study_dir import atomic_path
from dmlsearch.spaces import Param

__all__ = ["figure", "learning_curves", "learning_curves_figure", "optimisation_history",
           "parallel_coordinates", "save_laid_out", "save_png", "study_plots", "trial_curve",
           "trial_fit_curves"]

_STATE_MARKERS = {TrialState.COMPLETED: "o", TrialState.PRUNED: "v", TrialState.FAILED: "x"}


def figure(width: float, height: float) -> Figure:
    return Figure(figsize=(width, height))


def save_png(fig: Figure, path: Path) -> None:
    """Write a figure as PNG, atomically (written then renamed: never a half-written PNG);
    shared by every picture dmlsearch draws."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100)


def save_laid_out(fig: Figure, path: Path) -> Path:
    """Lay ``fig`` out tight, write it (:func:`save_png`) and return ``path``."""
    fig.tight_layout()
    save_png(fig, path)
    return path


def optimisation_history(records: Sequence[TrialRecord], metric: str, mode: str,
                         path: Path) -> Path:
    """Each trial's best validation score in start order, and the best so far as a step line."""
    fig = figure(9, 4)
    ax = fig.add_subplot()
    ordered = _start_order(records)
    best: float | None = None
    best_line: list[float] = []
    points: dict[TrialState, tuple[list[int], list[float]]] = {}
    failed: list[int] = []
    for i, r in enumerate(ordered):
        if r.scored and r.score is not None:
            xs, ys = points.setdefault(r.state, ([], []))
            xs.append(i)
            ys.append(r.score)
            if best is None or (r.score < best if mode == "min" else r.score > best):
                best = r.score
        elif r.state is TrialState.FAILED:
            failed.append(i)
        best_line.append(math.nan if best is None else best)
    # one artist per state (not one per trial): a search of thousands of trials draws in time
    for state, (xs, ys) in points.items():
        pruned = state is TrialState.PRUNED
        ax.scatter(xs, ys, marker=_STATE_MARKERS.get(state, "o"),
                   color="0.5" if pruned else "tab:blue",
                   label="pruned: its best score\nbefore it stopped\n(a smaller budget)"
                   if pruned else state.value)
    if failed:
        ax.vlines(failed, 0, 1, transform=ax.get_xaxis_transform(), color="tab:red",
                  alpha=0.25, lw=3, label="failed")
    ax.step(range(len(ordered)), best_line, where="post", color="tab:orange", label="best so far")
    if len(ordered) <= 24:
        ax.set_xticks(range(len(ordered)), [r.name for r in ordered], rotation=60,
                      ha="right", fontsize=7)
    ax.set_xlabel("trial (in start order)")
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(f"Optimisation history ({len(ordered)} trials, {mode}imise)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))  # off the points
    return save_laid_out(fig, path)


def parallel_coordinates(records: Sequence[TrialRecord], params: Sequence[Param], metric: str,
                         mode: str, path: Path) -> Path:
    """One axis per searched parameter (log axes for log parameters, categories spread evenly,
    each labelled) and one for the score; one line per scored trial. The trials that trained to
    their end are coloured by their score, on their own scale, with a colour bar; a trial
    stopped early is a grey dashed line whose score, from a smaller budget, is marked apart."""
    scored = [r for r in records if r.scored]
    full = [r.full_budget for r in scored]
    by_key: dict[str, list[Param]] = {}  # a key's branches (`when:`) are one axis
    for p in params:
        by_key.setdefault(p.key, []).append(p)
    keys = list(by_key)
    configs = [r.config for r in scored]
    columns, ticks = [], []
    for key in keys:
        column, tick = _axis([c.get(key) for c in configs], *by_key[key])
        columns.append(column)
        ticks.append(tick)
    scores = np.array([r.score for r in scored], dtype=float)
    column, tick = _axis(list(scores))
    columns.append(column)
    ticks.append(tick)
    names = keys + [f"val {metric}"]
    fig = figure(max(7.0, 1.6 * len(names) + 1.5), 4.8)
    ax = fig.add_subplot()
    xs = np.arange(len(names), dtype=float)
    cmap = colormaps["viridis"]
    done = np.array(full, dtype=bool)
    if len(scored):
        matrix = np.array(columns).T  # trials × axes, each in [0, 1] (NaN: not in this branch)
        early = np.flatnonzero(~done)
        if len(early):  # below the completed ones, in grey: their scores are of another budget
            ax.add_collection(LineCollection(
                [np.column_stack([xs, matrix[i]]) for i in early], colors="0.6", alpha=0.7,
                lw=1.0, linestyles="--"))
            ax.scatter(np.full(len(early), xs[-1]), matrix[early, -1], marker="v", color="0.45",
                       zorder=3, label=f"stopped early ({len(early)}): its best score before it "
                       "stopped (a smaller budget)")
        completed = np.flatnonzero(done)
        if len(completed):
            lo, hi = float(scores[done].min()), float(scores[done].max())
            norm = Normalize(lo, hi) if hi > lo else Normalize(lo - 0.5, lo + 0.5)
            shade = norm(scores) if mode == "max" else 1 - norm(scores)  # yellow = best
            order = completed[np.argsort(shade[completed], kind="stable")]  # best drawn last
            ax.add_collection(LineCollection(
                [np.column_stack([xs, matrix[i]]) for i in order],
                colors=cmap(shade[order]), alpha=0.9, lw=1.8))
            ax.scatter(np.full(len(completed), xs[-1]), matrix[completed, -1], marker="o",
                       color=cmap(shade[completed]), zorder=3,
                       label=f"trained to the end ({len(completed)})")
            bar = fig.colorbar(ScalarMappable(norm, cmap if mode == "max" else cmap.reversed()),
                               ax=ax, pad=0.02)
            bar.set_label(f"val {metric} of the trials trained to the end"
                          + ("" if mode == "max" else " (lower is better)"), fontsize=8)
            if mode != "max":  # yellow stays best: the bar reads downwards
                bar.ax.invert_yaxis()
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.16), ncol=2,
                  frameon=False)
    ax.set_xlim(-0.2, len(names) - 0.5)
    for x, tick in enumerate(ticks):
        ax.axvline(x, color="black", lw=0.8)
        for y, text in tick:
            ax.text(x + 0.03, y, text, fontsize=7, va="center")
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_yticks([])
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"Parallel coordinates: {int(done.sum())} trials trained to the end (colour: "
                 f"val {metric}, yellow = best), {int((~done).sum())} stopped early (grey)",
                 fontsize=9)
    return save_laid_out(fig, path)


def _axis(values: list[Any], *params: Param) -> tuple[list[float], list[tuple[float, str]]]:
    """Positions in [0, 1] for ``values`` and labelled ticks for the axis: every category, or
    the range's ends and middle (the geometric middle on a log axis). ``params`` are the
    declarations of the axis's key (several when branches of the space declare it, each with its
    own choices or range; none for the score): the axis spans them all."""
    present = [v for v in values if v is not None]
    numeric = present and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                              for v in present)
    if not numeric or any(p.kind == "categorical" for p in params):
        seen = list(dict.fromkeys(str(v) for v in present))
        declared = dict.fromkeys(str(c) for p in params for c in p.choices)
        cats = [c for c in declared if c in seen] + [c for c in seen if c not in declared]
        pos = {c: (i / (len(cats) - 1) if len(cats) > 1 else 0.5) for i, c in enumerate(cats)}
        return ([pos[str(v)] if v is not None else math.nan for v in values],
                [(p, c) for c, p in pos.items()])
    log = bool(params) and all(p.log for p in params) and min(present) > 0
    lows = [float(p.low) for p in params if p.low is not None]
    highs = [float(p.high) for p in params if p.high is not None]
    lo, hi = min(lows + [min(present)]), max(highs + [max(present)])
    f = math.log10 if log else float
    span = f(hi) - f(lo)

    def at(v: float) -> float:
        return (f(v) - f(lo)) / span if span > 0 else 0.5

    middle = math.sqrt(lo * hi) if log else (lo + hi) / 2
    return ([at(v) if v is not None else math.nan for v in values],
            [(at(v), f"{v:.3g}") for v in ((lo, middle, hi) if span > 0 else (lo,))])


def trial_curve(trial_folder: Path, key: str) -> list[tuple[int, float]]:
    """(iteration, value) of ``key`` from Ray Tune's ``result.json`` in a trial's folder."""
    return [point for fit in trial_fit_curves(trial_folder, key) for point in fit]


def trial_fit_curves(trial_folder: Path, key: str) -> list[list[tuple[int, float]]]:
    """:func:`trial_curve` fit by fit: a new fit (fold or repeat) where a row's ``epoch`` (the
    epoch within its fit) is not past the one before; rows without it are one fit."""
    path = Path(trial_folder) / "result.json"
    if not path.is_file():
        return []
    fits: list[list[tuple[int, float]]] = []
    last_epoch = math.inf
    count = 0
    for line in path.read_text(errors="replace").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a crash
            continue
        value = row.get(key)
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            continue
        epoch = row.get("epoch")
        if not fits or (isinstance(epoch, int) and epoch <= last_epoch):
            fits.append([])
        last_epoch = epoch if isinstance(epoch, int) else -math.inf
        count += 1
        fits[-1].append((int(row.get("training_iteration", count)), float(value)))
    return fits


def learning_curves(records: Sequence[TrialRecord], metric: str, path: Path) -> Path:
    """Validation metric per epoch of every trial (from the trials' result files)."""
    return save_laid_out(learning_curves_figure(records, metric), path)


def learning_curves_figure(records: Sequence[TrialRecord], metric: str) -> Figure:
    """The figure :func:`learning_curves` saves. A trial of several fits (k-fold, repeats) is
    drawn fit by fit on the scheduler's one time axis, its line broken where a fit starts again
    from epoch 1; grey lines mark those starts when every trial starts its fits at the same
    epochs."""
    key = f"val_{metric}"
    fig = figure(7, 4)
    ax = fig.add_subplot()
    drawn = 0
    few = len(records) <= 12  # each trial its own line and legend entry
    # completed: solid, else dotted; each a list of (trial's colour index, one fit's points)
    lines: dict[bool, list[tuple[int, np.ndarray]]] = {True: [], False: []}
    starts: list[list[float]] = []  # each trial's iterations where a later fit starts
    for r in _start_order(records):
        pieces = [np.asarray(fit, dtype=float)
                  for fit in (trial_fit_curves(Path(r.path), key) if r.path else [])]
        if pieces:
            starts.append([float(p[0, 0]) for p in pieces[1:]])
            style = "-" if r.state is TrialState.COMPLETED else ":"
            if few:
                gaps = [np.full((1, 2), np.nan)] * len(pieces)  # a NaN breaks the line
                joined = np.concatenate([x for pair in zip(pieces, gaps) for x in pair])
                ax.plot(joined[:, 0], joined[:, 1], style, marker=".", lw=1, label=r.name)
            else:
                lines[r.state is TrialState.COMPLETED] += [(drawn, p) for p in pieces]
            drawn += 1
    for completed, pieces in lines.items():  # one collection each: thousands draw in time
        if pieces:
            ax.add_collection(LineCollection(
                [p for _, p in pieces], colors=colormaps["tab10"](
                    np.array([n for n, _ in pieces]) % 10), lw=1,
                linestyles="-" if completed else ":"))
    if not few and drawn:
        ax.autoscale_view()
    marked = _mark_fit_starts(ax, starts)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch" + over_fits(records)
                  + ("; grey: a fit starts again from epoch 1" if marked else ""))
    ax.set_ylabel(f"validation {metric}")
    ax.set_title(f"Learning curves ({drawn} trials; dotted: stopped early or failed)")
    if drawn and few:
        ax.legend(fontsize=7)
    return fig


def _mark_fit_starts(ax: Any, starts: Sequence[Sequence[float]]) -> bool:
    """Grey lines before the iterations where later fits start, when the trials agree on them
    (a trial that ended sooner starts a prefix of them); whether any was drawn."""
    longest = max(starts, key=len, default=[])
    if not longest or any(list(s) != list(longest[:len(s)]) for s in starts):
        return False
    for x in longest:
        ax.axvline(x - 0.5, color="0.8", lw=0.8, zorder=0)
    return True


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

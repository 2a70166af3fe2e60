"""The study's pictures: their axes against plain references, and that each is a real PNG for
inputs a search produces (failed trials, conditional parameters, few points)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from matplotlib import colormaps

from dmlsearch.search.reporting import plots
from dmlsearch.search.results import TrialRecord
from dmlsearch.spaces import load_space
from tests.helpers import read_png
from tests.helpers import trial_record


def _records(tmp_path: Path) -> list[TrialRecord]:
    recs = []
    for i, (state, score, loss) in enumerate([("completed", 0.5, "multi_similarity"),
                                               ("pruned", 0.2, "proxy_anchor"),
                                               ("failed", None, "proxy_anchor"),
                                               ("completed", 0.7, "proxy_anchor")]):
        folder = tmp_path / f"trial_{i}"
        folder.mkdir()
        rows = [{"training_iteration": e, "val_map@r": 0.1 * e * (i + 1), "score": 0.0}
                for e in range(1, 4)]
        text = "\n".join(json.dumps(r) for r in rows) + "\n{\"training_iter"  # a cut line
        (folder / "result.json").write_text(text)
        config = {"loss": loss, "lr": 10 ** -(i + 2)}
        if loss == "multi_similarity":
            config["loss.beta"] = 50.0
        recs.append(trial_record(f"t{i}", score, state=state, config=config, path=str(folder),
                                 started=95.0 + 10 * i if score else None))
    return recs


def test_axis_positions_against_a_hand_computed_reference() -> None:
    space = load_space("quickstart")
    lr = next(p for p in space.params if p.key == "lr")
    values = [lr.low, lr.high, math.sqrt(lr.low * lr.high), None]
    pos, ticks = plots._axis(values, lr)
    assert pos[:3] == pytest.approx([0.0, 1.0, 0.5])  # log axis: the geometric mean is halfway
    assert math.isnan(pos[3]) and len(ticks) == 3  # the ends and the middle
    pos, ticks = plots._axis(["b", "a", "b"])
    assert pos == [0.0, 1.0, 0.0] and {t: p for p, t in ticks} == {"b": 0.0, "a": 1.0}
    pos, _ = plots._axis([2.0, 4.0, 3.0])
    assert pos == pytest.approx([0.0, 1.0, 0.5])


def test_trial_curve_reads_ray_results_and_skips_a_cut_line(tmp_path: Path) -> None:
    rec = _records(tmp_path)[1]
    curve = plots.trial_curve(Path(rec.path), "val_map@r")
    assert [e for e, _ in curve] == [1, 2, 3]
    assert [v for _, v in curve] == pytest.approx([0.2, 0.4, 0.6])
    assert plots.trial_curve(tmp_path / "missing", "val_map@r") == []


def test_start_order_uses_start_times_and_puts_silent_trials_last(tmp_path: Path) -> None:
    recs = _records(tmp_path)
    shuffled = [recs[3], recs[2], recs[0], recs[1]]
    assert [r.trial_id for r in plots._start_order(shuffled)] == ["t0", "t1", "t3", "t2"]


def test_study_plots_are_pngs(tmp_path: Path) -> None:
    space = load_space("quickstart")
    paths = plots.study_plots(_records(tmp_path), space.params, "map@r", "max", tmp_path / "p")
    assert [p.name for p in paths] == ["optimisation_history.png", "parallel_coordinates.png",
                                       "learning_curves.png"]
    for p in paths:
        read_png(p)
    # No scored trial at all (every one failed) still draws, empty.
    failed = [trial_record("t0", None, state="failed", config={"loss": "proxy_anchor"})]
    for p in plots.study_plots(failed, space.params, "eer", "min", tmp_path / "q"):
        read_png(p)


def test_a_categorical_axis_of_numbers_spreads_and_labels_every_choice() -> None:
    """embedding_size [32, 64, 128] is chosen, not ranged: evenly spaced, each labelled."""
    space = load_space("quickstart")
    size = next(p for p in space.params if p.key == "embedding_size")
    pos, ticks = plots._axis([32, 64, 128, 64, None], size)
    assert pos[:4] == [0.0, 0.5, 1.0, 0.5] and math.isnan(pos[4])
    assert [t for _, t in ticks] == ["32", "64", "128"]
    lr = next(p for p in space.params if p.key == "lr")
    _, ticks = plots._axis([lr.low, lr.high], lr)
    assert [t for _, t in ticks] == ["0.0003", "0.00173", "0.01"]  # the log axis's middle


def test_a_key_declared_by_two_branches_is_one_axis_over_both(tmp_path: Path) -> None:
    """memvir_search declares ``loss.scale`` once per loss (choices [23] and [12], ``when:``):
    the axis holds both branches' values (drawing it failed with KeyError '23' when it knew one
    declaration only), and a numeric key's axis spans every branch's range."""
    space = load_space("memvir_search")
    scales = [p for p in space.params if p.key == "loss.scale"]
    assert [p.choices for p in scales] == [(23,), (12,)]
    pos, ticks = plots._axis([12, 23, None, 12], *scales)
    assert pos[:2] == [1.0, 0.0] and math.isnan(pos[2]) and pos[3] == 1.0
    assert [t for _, t in ticks] == ["23", "12"]  # in the order the space declares them
    lr = next(p for p in load_space("quickstart").params if p.key == "lr")
    wide = dataclasses.replace(lr, low=lr.low / 10)
    pos, ticks = plots._axis([lr.low], lr, wide)
    span = math.log10(lr.high / (lr.low / 10))  # a decade below lr.low: the wider branch's
    assert pos == pytest.approx([1 / span]) and ticks[0][1] == f"{lr.low / 10:.3g}"
    records = [trial_record(f"t{i}", 0.1 + i / 10, config={"loss": loss, "loss.scale": scale})
               for i, (loss, scale) in enumerate([("norm_softmax", 23), ("proxy_nca", 12)])]
    read_png(plots.parallel_coordinates(records, space.params, "map@r", "max",
                                        tmp_path / "pc.png"))


def test_parallel_coordinates_colour_only_full_budget_scores_and_mark_the_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: epoch-2 scores of pruned trials coloured on the completed trials' scale, with
    no colour bar and no marking of which trials were pruned."""
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    save = plots.save_png
    monkeypatch.setattr(plots, "save_png", lambda fig, path: (figures.append(fig),
                                                              save(fig, path)))
    space = load_space("quickstart")
    recs = _records(tmp_path)  # completed 0.5 and 0.7, pruned 0.2, one failed
    read_png(plots.parallel_coordinates(recs, space.params, "map@r", "max",
                                        tmp_path / "pc.png"))
    (fig,) = figures
    main, bar = fig.axes
    assert "val map@r of the trials trained to the end" in bar.get_ylabel()
    assert bar.get_ylim() == pytest.approx((0.5, 0.7))  # the completed trials' scale alone
    grey, coloured = main.collections[0], next(
        c for c in main.collections[1:] if isinstance(c, LineCollection))
    assert len(grey.get_segments()) == 1 and grey.get_linestyle()[0][1] is not None  # dashed
    assert np.allclose(grey.get_colors()[0][:3], 0.6)
    assert len(coloured.get_segments()) == 2
    assert np.allclose(coloured.get_colors()[-1][:3], colormaps["viridis"](1.0)[:3])  # best
    labels = [t.get_text() for t in main.get_legend().get_texts()]
    assert labels == ["stopped early (1): its best score before it stopped (a smaller budget)",
                      "trained to the end (2)"]
    assert "2 trials trained to the end" in main.get_title()
    assert "1 stopped early (grey)" in main.get_title()


def test_the_learning_curves_axis_says_epochs_or_epochs_over_fits(tmp_path: Path) -> None:
    """Epochs on a fixed split; epochs counted over folds and repeats once a trial has several
    (k-fold fits one after another on the scheduler's one time axis)."""
    recs = _records(tmp_path)
    kfold = dataclasses.replace(recs[0], config={**recs[0].config, "protocol": "kfold",
                                                 "folds": 3})
    labels = [plots.learning_curves_figure(records, "map@r").axes[0].get_xlabel()
              for records in (recs, [kfold, *recs[1:]])]
    assert labels == ["epoch", "epoch (counted over folds and repeats)"]


def test_a_kfold_trials_curve_is_broken_where_each_fit_starts_again(tmp_path: Path) -> None:
    """Two folds on one time axis, the first stopped early by its patience after 2 of 3 epochs
    (iterations 1-2, then 3-5): two pieces, not a line from fold 1's last epoch down to fold
    2's first, and a grey mark between them; trials that disagree on where fits start get
    their breaks but no marks."""
    def trial(name: str, epochs: list[int], values: list[float]) -> TrialRecord:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "result.json").write_text("".join(
            json.dumps({"training_iteration": i + 1, "epoch": e, "val_map@r": v}) + "\n"
            for i, (e, v) in enumerate(zip(epochs, values, strict=True))))
        config = {"protocol": "kfold", "folds": 2, "epochs": 3, "loss": "proxy_anchor"}
        return trial_record(name, 0.5, config=config, path=str(folder), started=1.0)

    values = [0.3, 0.5, 0.2, 0.4, 0.5]
    early = trial("t0", [1, 2, 1, 2, 3], values)
    fits = plots.trial_fit_curves(Path(early.path), "val_map@r")
    assert [[i for i, _ in fit] for fit in fits] == [[1, 2], [3, 4, 5]]
    assert plots.trial_curve(Path(early.path), "val_map@r") == [p for fit in fits for p in fit]
    ax = plots.learning_curves_figure([early], "map@r").axes[0]
    curve = next(line for line in ax.lines if line.get_label() == "t0")
    ys = np.asarray(curve.get_ydata(), dtype=float)
    assert np.isnan(ys[2]) and ys[~np.isnan(ys)].tolist() == pytest.approx(values)
    marks = [line.get_xdata()[0] for line in ax.lines if line.get_label() != "t0"]
    assert marks == [2.5]
    assert ax.get_xlabel().endswith("grey: a fit starts again from epoch 1")
    # many trials: one segment per fit in the collection, none across the fold's start
    many = [dataclasses.replace(early, trial_id=f"t{i}") for i in range(13)]
    ax = plots.learning_curves_figure(many, "map@r").axes[0]
    (collection,) = ax.collections
    assert len(collection.get_segments()) == 26
    # a trial whose first fold ran all 3 epochs starts its second at 4: no common marks
    full = trial("t1", [1, 2, 3, 1, 2], values)
    ax = plots.learning_curves_figure([early, full], "map@r").axes[0]
    assert [line.get_label() for line in ax.lines] == ["t0", "t1"]
    assert "grey" not in ax.get_xlabel()

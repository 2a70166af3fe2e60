"""The importance analysis drawn: one bar chart, one interaction map and the marginal curves
per analysis, as real PNGs that say what they explain, at which budget, and cut no text."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import optuna
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from dmlsearch.search.reporting import importance_plots
from dmlsearch.search.reporting.importance import analyse_study
from dmlsearch.search.reporting.importance_plots import write_plots
from tests.helpers import known_study
from tests.helpers import read_png

optuna.logging.set_verbosity(optuna.logging.WARNING)

LOSS = optuna.distributions.CategoricalDistribution(["multi_similarity", "proxy_anchor"])
LR = optuna.distributions.FloatDistribution(3e-4, 1e-2, log=True)  # the quick start's range
EMBEDDING = optuna.distributions.CategoricalDistribution([32, 64, 128])
MARGIN = optuna.distributions.FloatDistribution(0.0, 1.0, step=0.1)
ALPHA = optuna.distributions.FloatDistribution(2.0, 100.0, step=2.0)


def _quickstart_like(trials: int = 60) -> optuna.Study:
    """The quick start's space (a branch per loss), every trial scored at epochs 1 and 2, half
    of them pruned there: the score peaks at lr = 2e-3 on its log scale."""
    rng = np.random.default_rng(3)
    study = optuna.create_study(direction="maximize", study_name="quickstart-like")
    for i in range(trials):
        loss = str(rng.choice(LOSS.choices))
        lr = float(np.exp(rng.uniform(np.log(LR.low), np.log(LR.high))))
        params = {"loss": loss, "lr": lr, "embedding_size": int(rng.choice(EMBEDDING.choices))}
        dists = {"loss": LOSS, "lr": LR, "embedding_size": EMBEDDING}
        if loss == "multi_similarity":
            params["loss.margin[multi_similarity]"] = float(rng.integers(0, 11)) / 10
            dists["loss.margin[multi_similarity]"] = MARGIN
        else:
            params["loss.alpha[proxy_anchor]"] = 2.0 * int(rng.integers(1, 51))
            dists["loss.alpha[proxy_anchor]"] = ALPHA
        score = 0.8 - 0.1 * (math.log10(lr) - math.log10(2e-3)) ** 2 + rng.normal(0, 0.005)
        pruned = i % 2 == 1
        study.add_trial(optuna.trial.create_trial(
            params=params, distributions=dists, value=None if pruned else score,
            intermediate_values={1: score - 0.2, 2: score - 0.1},
            state=optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE))
    return study


def _keep_figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """The figures the module saves (each still saved as its PNG)."""
    figures: list[Figure] = []
    save = importance_plots.save_png

    def keep(fig: Figure, path: Path) -> None:
        figures.append(fig)
        save(fig, path)

    monkeypatch.setattr(importance_plots, "save_png", keep)
    return figures


def _texts_cut(fig: Figure) -> list[str]:
    """The texts of ``fig`` that reach past its edges (cut in its PNG)."""
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    box = fig.bbox
    undrawn = set()  # the labels of ticks outside an axis's view: matplotlib skips them
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            for tick, loc in zip(axis.get_major_ticks(), axis.get_majorticklocs(), strict=False):
                if not lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo):
                    undrawn |= {id(tick.label1), id(tick.label2)}
    cut = []
    for text in fig.findobj(Text):
        if not text.get_visible() or not text.get_text().strip() or id(text) in undrawn:
            continue
        extent = text.get_window_extent(renderer)
        if (extent.x0 < box.x0 - 1 or extent.x1 > box.x1 + 1 or extent.y0 < box.y0 - 1
                or extent.y1 > box.y1 + 1):
            cut.append(text.get_text())
    return cut


def _titles(fig: Figure) -> str:
    parts = [fig.get_suptitle()] + [ax.get_title() for ax in fig.axes]
    return " ".join(" ".join(parts).split())  # wrapped lines read as one


def test_every_analysis_draws_its_three_pictures(tmp_path: Path) -> None:
    report = analyse_study(known_study(), min_trials=8)
    paths = write_plots(report, tmp_path / "importance")
    assert [p.name for p in paths] == ["00_common_parameters_importance.png",
                                       "00_common_parameters_interactions.png",
                                       "00_common_parameters_marginals.png"]
    for path in paths:
        read_png(path)


def test_the_pictures_say_their_budget_and_metric_and_cut_no_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: PNGs that never said 'at epoch 2', a heat-map title cut ('main effects
    (diagonal), p'), y-axes that said 'mean predicted objective'."""
    figures = _keep_figures(monkeypatch)
    report = analyse_study(_quickstart_like(), min_trials=8, at_step=2, metric="map@r")
    assert [a.name for a in report.analyses] == [
        "common parameters", "branch loss=multi_similarity", "branch loss=proxy_anchor"]
    paths = write_plots(report, tmp_path / "importance")
    assert len(paths) == len(figures) == 9
    for path, fig in zip(paths, figures, strict=True):
        read_png(path)
        assert _texts_cut(fig) == [], path.name
        assert re.search(r": \d+ trials at epoch 2", _titles(fig)), path.name
    marginals = [f for p, f in zip(paths, figures, strict=True) if "marginals" in p.name]
    for fig in marginals:
        assert "predicted validation map@r" in fig.axes[0].get_ylabel()


def test_a_log_parameter_has_its_marginal_on_a_log_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 35: the lr marginal was on a linear axis though lr is searched on a log scale (the
    quick start's 3e-4 to 1e-2 spans less than the old heuristic's 50x)."""
    figures = _keep_figures(monkeypatch)
    report = analyse_study(_quickstart_like(), min_trials=8, metric="map@r")
    common = report.analyses[0]
    assert common.scales == {"embedding_size": "categorical", "loss": "categorical",
                             "lr": "log"}
    xs, ys = common.marginals["lr"]
    assert np.allclose(np.diff(np.log(xs)), np.log(xs[1] / xs[0]))  # even steps in log(lr)
    assert abs(xs[int(np.argmax(ys))] / 2e-3 - 1) < 0.5  # the peak where it is
    paths = write_plots(report, tmp_path / "importance")
    fig = figures[[p.name for p in paths].index("00_common_parameters_marginals.png")]
    lr_axes = [ax for ax in fig.axes if ax.get_xlabel().startswith("lr ")]
    assert len(lr_axes) == 1 and lr_axes[0].get_xscale() == "log"
    categorical = [ax for ax in fig.axes if ax.get_xlabel().startswith("embedding_size ")]
    assert [t.get_text() for t in categorical[0].get_xticklabels()] == ["32", "64", "128"]

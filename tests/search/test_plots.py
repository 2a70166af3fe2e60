"""The study's pictures: their axes and projections against plain references, and that each is a
real PNG for inputs a search produces (failed trials, conditional parameters, few points)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.image import imread

from dmlsearch.search import plots
from dmlsearch.search.retrain import mean_ci95
from dmlsearch.spaces import load_space


@dataclasses.dataclass
class Rec:
    trial_id: str
    config: dict[str, Any]
    state: str
    score: float | None
    last_result: dict[str, Any]
    path: str | None = None


def _png(path: Path) -> np.ndarray:
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100
    return image


def _records(tmp_path: Path) -> list[Rec]:
    recs = []
    for i, (state, score, loss) in enumerate([("completed", 0.5, "multi_similarity"),
                                               ("stopped", 0.2, "proxy_anchor"),
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
        recs.append(Rec(f"t{i}", config, state, score,
                        {"timestamp": 100 + 10 * i, "time_total_s": 5.0} if score else {},
                        str(folder)))
    return recs


def test_axis_positions_against_a_hand_computed_reference() -> None:
    space = load_space("quickstart")
    lr = next(p for p in space.params if p.key == "lr")
    values = [lr.low, lr.high, math.sqrt(lr.low * lr.high), None]
    pos, ticks = plots._axis(values, lr)
    assert pos[:3] == pytest.approx([0.0, 1.0, 0.5])  # log axis: the geometric mean is halfway
    assert math.isnan(pos[3]) and len(ticks) == 2
    pos, ticks = plots._axis(["b", "a", "b"], None)
    assert pos == [0.0, 1.0, 0.0] and dict((t, p) for p, t in ticks) == {"b": 0.0, "a": 1.0}
    pos, _ = plots._axis([2.0, 4.0, 3.0], None)
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
        _png(p)
    # No scored trial at all (every one failed) still draws, empty.
    failed = [Rec("t0", {"loss": "proxy_anchor"}, "failed", None, {})]
    for p in plots.study_plots(failed, space.params, "eer", "min", tmp_path / "q"):
        _png(p)


def test_pca_projection_against_numpy_reference() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, 5)) * np.array([5.0, 3.0, 1.0, 0.5, 0.1])
    points, method = plots.project_2d(x)
    assert method == "PCA"
    centred = x - x.mean(axis=0)
    eigvals, eigvecs = np.linalg.eigh(np.cov(centred.T))
    top = eigvecs[:, np.argsort(eigvals)[::-1][:2]]
    reference = centred @ top
    for k in range(2):  # the sign of a principal axis is arbitrary
        assert np.allclose(np.abs(points[:, k]), np.abs(reference[:, k]), atol=1e-8)


def test_embedding_view_separates_clusters_and_writes_a_png(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(30, 16)) * 4
    labels = np.repeat(np.arange(30), 10)
    emb = centres[labels] + rng.normal(size=(300, 16)) * 0.1
    points, method = plots.project_2d(emb[labels < 5])
    assert method == "t-SNE" and points.shape == (50, 2)
    # Points of a class sit closer to each other than to other classes in the map.
    lab = labels[labels < 5]
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    same = d[lab[:, None] == lab[None]].mean()
    other = d[lab[:, None] != lab[None]].mean()
    assert same < 0.3 * other
    path = plots.embedding_view(emb, labels, tmp_path / "e.png", max_classes=20)
    _png(path)


def test_mean_ci95_against_the_t_table() -> None:
    # Two-sided 95% Student-t quantiles (any statistics table): df 1 → 12.706, df 4 → 2.776.
    values = [0.70, 0.74]
    mean, half = mean_ci95(values)
    sd = math.sqrt(sum((v - 0.72) ** 2 for v in values) / 1)
    assert mean == pytest.approx(0.72) and half == pytest.approx(12.706 * sd / math.sqrt(2),
                                                                  rel=1e-4)
    values = [0.61, 0.64, 0.60, 0.66, 0.63]
    m = sum(values) / 5
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / 4)
    assert mean_ci95(values) == pytest.approx((m, 2.776 * sd / math.sqrt(5)), rel=1e-3)
    assert mean_ci95([0.5]) == (0.5, 0.0)

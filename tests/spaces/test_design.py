"""A spread sample of a space (what a table over a continuous space records): every value in
its domain and on its step, each branch's params only in that branch, seeded, uniform in each
param's own scale, and a prefix of a larger sample the same points."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from dmlsearch.spaces import load_space
from dmlsearch.spaces._design import from_unit

SPACE = """\
name: demo
source: test
base: {dataset: glyphs}
params:
  - loss: {type: categorical, choices: [multi_similarity, proxy_anchor]}
  - lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
  - loss.margin: {type: float, low: 0.0, high: 1.0, step: 0.1, when: {loss: multi_similarity}}
  - loss.alpha: {type: float, low: 2.0, high: 100.0, when: {loss: proxy_anchor}}
  - batch_size: {type: int, low: 32, high: 64, step: 16}
"""


def _space(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "demo.yaml"
    path.write_text(textwrap.dedent(SPACE))
    return load_space(path)


def test_every_sampled_value_is_in_its_domain_and_branch(tmp_path: Path) -> None:
    space = _space(tmp_path)
    points = space.sample_points(256, seed=3)
    assert len(points) == 256
    params = {p.optuna_name: p for p in space.params}
    for point in points:
        for name, value in point.items():
            assert params[name].contains(value), (name, value)
        if point["loss"] == "multi_similarity":
            assert "loss.margin" in point and "loss.alpha" not in point
        else:
            assert "loss.alpha" in point and "loss.margin" not in point
    losses = [p["loss"] for p in points]
    assert losses.count("multi_similarity") == 128  # equal shares of [0, 1) for two choices
    assert {p["batch_size"] for p in points} == {32, 48, 64}
    assert {p["loss.margin"] for p in points if "loss.margin" in p} == {
        round(0.1 * k, 1) for k in range(11)}


def test_the_sample_is_seeded_and_a_prefix_is_a_smaller_sample(tmp_path: Path) -> None:
    space = _space(tmp_path)
    assert space.sample_points(64, seed=0) == space.sample_points(64, seed=0)
    assert space.sample_points(64, seed=0) != space.sample_points(64, seed=1)
    assert space.sample_points(40, seed=0) == space.sample_points(64, seed=0)[:40]


def test_each_range_is_uniform_in_its_own_scale(tmp_path: Path) -> None:
    points = _space(tmp_path).sample_points(1024, seed=0)
    logs = np.log10([p["lr"] for p in points])
    assert stats.kstest((logs + 4) / 2, "uniform").pvalue > 0.5  # log-uniform over 1e-4..1e-2
    alphas = [p["loss.alpha"] for p in points if "loss.alpha" in p]
    assert stats.kstest((np.array(alphas) - 2) / 98, "uniform").pvalue > 0.5


def test_from_unit_maps_the_ends_and_the_middle(tmp_path: Path) -> None:
    params = {p.optuna_name: p for p in _space(tmp_path).params}
    lr, margin = params["lr"], params["loss.margin"]
    assert from_unit(lr, 0.0) == pytest.approx(1e-4)
    assert from_unit(lr, 0.5) == pytest.approx(1e-3)
    assert from_unit(lr, 1.0) == pytest.approx(1e-2)
    assert from_unit(margin, 0.0) == 0.0 and from_unit(margin, 0.999) == 1.0
    assert from_unit(params["loss"], 0.49) == "multi_similarity"
    assert from_unit(params["loss"], 0.51) == "proxy_anchor"
    assert math.isclose(from_unit(margin, 0.5), 0.5)

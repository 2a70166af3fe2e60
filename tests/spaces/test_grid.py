"""Grid studies: a space enumerates exactly the product of its active params' values, each
conditional param only within its branch, and a continuous range is refused with a fix."""

from __future__ import annotations

import itertools
import textwrap
from pathlib import Path

import pytest

from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError

SPACE = """\
name: demo
source: test
base: {dataset: glyphs}
params:
  - loss: {type: categorical, choices: [multi_similarity, proxy_anchor]}
  - embedding_size: {type: categorical, choices: [16, 32, 64]}
  - loss.margin: {type: float, low: 0.0, high: 0.3, step: 0.1, when: {loss: multi_similarity}}
  - batch_size: {type: int, low: 32, high: 64, step: 16, when: {loss: proxy_anchor}}
"""


def _space(tmp_path: Path, text: str = SPACE):  # type: ignore[no-untyped-def]
    path = tmp_path / "demo.yaml"
    path.write_text(textwrap.dedent(text))
    return load_space(path)


def test_grid_is_the_product_within_each_branch(tmp_path: Path) -> None:
    points = _space(tmp_path).grid_points()
    ms = [p for p in points if p["loss"] == "multi_similarity"]
    pa = [p for p in points if p["loss"] == "proxy_anchor"]
    assert len(ms) == 3 * 4 and len(pa) == 3 * 3 and len(points) == 21
    assert {(p["embedding_size"], p["loss.margin"]) for p in ms} == set(
        itertools.product([16, 32, 64], [0.0, 0.1, 0.2, 0.3]))
    assert {(p["embedding_size"], p["batch_size"]) for p in pa} == set(
        itertools.product([16, 32, 64], [32, 48, 64]))
    assert all("batch_size" not in p for p in ms) and all("loss.margin" not in p for p in pa)
    # exactly on the decimal grid, no 0.30000000000000004
    assert sorted({p["loss.margin"] for p in ms}) == [0.0, 0.1, 0.2, 0.3]
    assert len({tuple(sorted(p.items())) for p in points}) == len(points)  # no duplicates


def test_fixing_a_param_shrinks_the_grid(tmp_path: Path) -> None:
    space = _space(tmp_path).with_overrides({"loss": "proxy_anchor", "embedding_size": 32})
    assert space.grid_points() == [{"batch_size": 32}, {"batch_size": 48}, {"batch_size": 64}]


def test_a_continuous_param_has_no_grid(tmp_path: Path) -> None:
    space = _space(tmp_path, SPACE + "  - lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    with pytest.raises(UserError, match="lr is a continuous range .* give it a step or choices"):
        space.grid_points()


def test_an_oversized_grid_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="more than 10 grid points"):
        _space(tmp_path).grid_points(limit=10)

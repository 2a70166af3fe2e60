"""The search benchmark's regret plot: where its right panel starts (every search has a
completed trial to pick: its mean regret below 1) and the range it spans (the searches', not a
sweep's early steps), and a plot drawn from a hand-made table body, read back as a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.search_efficiency import DEFAULT_METHOD
from benchmarks.search_efficiency import _every_search_picked
from benchmarks.search_efficiency import _range_from
from benchmarks.search_efficiency import plot_table
from tests.helpers import read_png


def _curve(means: list[float]) -> dict:
    return {"mean": means, "interval": [[m * 0.9, min(1.0, m * 1.1)] for m in means]}


XS = [0.5, 1.0, 2.0, 4.0, 8.0]
CURVES = {
    DEFAULT_METHOD: (XS, _curve([1.0, 0.4, 0.2, 0.1, 0.05])),
    "random": (XS, _curve([1.0, 1.0, 0.3, 0.2, 0.1])),  # its first pick at 2 trainings
    "sweep": (XS, _curve([1.0, 1.0, 1.0, 0.9, 0.02])),  # a sweep: far above, then below
}


def test_the_zoom_starts_when_every_search_has_a_pick_and_spans_the_searches() -> None:
    assert _every_search_picked(CURVES) == 2.0  # the sweep's late first pick is not waited for
    low, high = _range_from(CURVES, 2.0)
    # from 2 trainings on: the searches' means and intervals, 0.045 .. 0.33, with a margin
    assert low == pytest.approx(0.045 / 1.15) and high == pytest.approx(0.33 * 1.15)
    # a step counts until the next point: the one from 2 to 4 still at 3, no longer at 4
    assert _range_from(CURVES, 3.0) == _range_from(CURVES, 2.0)
    assert _range_from(CURVES, 4.0)[1] == pytest.approx(0.22 * 1.15)
    never = {**CURVES, "random": (XS, _curve([1.0] * 5))}
    assert _every_search_picked(never) is None


def test_the_plot_is_drawn_from_a_table_body(tmp_path: Path) -> None:
    body = {"reference": {"epochs": 10, "about": "a hand-made table"},
            "methods": {m: {"regret_curve": {"epochs": [x * 10 for x in xs], **c}}
                        for m, (xs, c) in CURVES.items()}}
    path = tmp_path / "regret.png"
    plot_table("hand-made", body, path, budget=8)
    image = read_png(path)
    assert image.shape[1] > image.shape[0] > 300  # two panels side by side

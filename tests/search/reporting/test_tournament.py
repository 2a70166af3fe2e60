"""The thesis's tournament ranking (Table 11), against hand-computed ranks."""

from __future__ import annotations

import math

import pytest

from dmlsearch.search.reporting.tournament import experiment_keys
from dmlsearch.search.reporting.tournament import tournament

ROWS = [
    # experiment A: x 0.9 > y 0.8 > z 0.7 -> x 1, y 2, z 3 (x's second, worse row is ignored)
    {"bb": "A", "loss": "x", "s": 0.9}, {"bb": "A", "loss": "y", "s": 0.8},
    {"bb": "A", "loss": "z", "s": 0.7}, {"bb": "A", "loss": "x", "s": 0.1},
    # experiment B: z 0.6 > x 0.5 = y 0.5 -> z 1, x and y share ranks 2 and 3: 2.5 each
    {"bb": "B", "loss": "x", "s": 0.5}, {"bb": "B", "loss": "y", "s": 0.5},
    {"bb": "B", "loss": "z", "s": 0.6},
    # experiment C: y 0.4 > x 0.3, z failed (no score) -> y 1, x 2
    {"bb": "C", "loss": "x", "s": 0.3}, {"bb": "C", "loss": "y", "s": 0.4},
    {"bb": "C", "loss": "z", "s": None},
    # experiment D: one loss only, nothing to rank
    {"bb": "D", "loss": "x", "s": 0.99},
]


def test_tournament_max_hand_computed() -> None:
    table = tournament(ROWS, group_keys=["bb"], item_key="loss", score_key="s", mode="max")
    by = {r["item"]: r for r in table}
    # x: ranks 1, 2.5, 2 -> sum 5.5, mean 11/6, std sqrt(((5/6)^2 + (4/6)^2 + (1/6)^2) / 3)
    assert by["x"]["ranks"] == [1.0, 2.5, 2.0]
    assert by["x"]["sum"] == pytest.approx(5.5)
    assert by["x"]["mean"] == pytest.approx(11 / 6)
    assert by["x"]["std"] == pytest.approx(math.sqrt(14) / 6)
    # y: ranks 2, 2.5, 1 -> same sum, mean and std as x
    assert by["y"]["ranks"] == [2.0, 2.5, 1.0]
    assert by["y"]["mean"] == pytest.approx(11 / 6)
    assert by["y"]["std"] == pytest.approx(math.sqrt(14) / 6)
    # z: ranks 3, 1 (C failed, D absent) -> sum 4, mean 2, std 1
    assert by["z"]["ranks"] == [3.0, 1.0] and by["z"]["experiments"] == 2
    assert (by["z"]["sum"], by["z"]["mean"], by["z"]["std"]) == pytest.approx((4, 2, 1))
    assert by["x"]["experiments"] == 3  # D (one loss) is skipped
    # sorted by mean rank; x and y tie on mean and experiments: by name
    assert [r["item"] for r in table] == ["x", "y", "z"]


def test_tournament_min_mode_and_ties() -> None:
    rows = [
        {"e": 1, "loss": "a", "eer": 0.10}, {"e": 1, "loss": "b", "eer": 0.20},
        {"e": 1, "loss": "c", "eer": 0.20},
        {"e": 2, "loss": "a", "eer": 0.30}, {"e": 2, "loss": "b", "eer": 0.05},
        {"e": 2, "loss": "c", "eer": 0.30},
    ]
    table = tournament(rows, group_keys=["e"], item_key="loss", score_key="eer", mode="min")
    by = {r["item"]: r for r in table}
    # e1: a 1, b and c tie on 2-3 -> 2.5; e2: b 1, a and c tie on 2-3 -> 2.5
    assert by["a"]["ranks"] == [1.0, 2.5] and by["b"]["ranks"] == [2.5, 1.0]
    assert by["c"]["ranks"] == [2.5, 2.5]
    assert by["a"]["mean"] == pytest.approx(1.75) and by["a"]["std"] == pytest.approx(0.75)
    assert by["c"]["sum"] == pytest.approx(5.0) and by["c"]["std"] == pytest.approx(0.0)
    assert [r["item"] for r in table] == ["a", "b", "c"]
    # ranks within a group always sum to n(n+1)/2
    assert sum(r["ranks"][0] for r in table) == pytest.approx(6.0)
    with pytest.raises(ValueError):
        tournament(rows, group_keys=["e"], item_key="loss", score_key="eer", mode="up")


def test_experiment_keys_drop_loss_dependent_keys() -> None:
    configs = [{"loss": loss, "batch_sampler": "m" if loss == "ms" else "r", "backbone": bb,
                "loss.margin": 0.1}
               for loss in ("ms", "pa", "st") for bb in ("resnet50", "bninception")]
    keys = experiment_keys(configs, ["loss", "batch_sampler", "batch_sampler", "backbone",
                                     "loss.margin"])
    assert keys == ["backbone"]

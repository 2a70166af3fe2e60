"""The curve a configuration replays (its grid point, snapped within its branch; its seed), and
which spaces a table answers."""

from __future__ import annotations

import pytest

from dmlsearch.search.replay import check_space
from dmlsearch.search.replay import lookup
from dmlsearch.search.replay import snap
from dmlsearch.spaces import Param
from dmlsearch.spaces import Space
from dmlsearch.trainables.errors import UserError
from tests.helpers import memory_table

GRID = [{"loss": "ms", "lr": lr, "alpha": a} for lr in (1e-4, 1e-3, 1e-2) for a in (2.0, 18.0)]
GRID += [{"loss": "pa", "lr": lr, "alpha": a} for lr in (1e-4, 1e-3, 1e-2) for a in (8.0, 32.0)]


def test_a_configuration_snaps_to_its_grid_point_within_its_branch() -> None:
    table = memory_table(GRID)
    # lr in log scale (a factor of 100 across the grid): 4e-4 is nearer 1e-3 than 1e-4
    assert snap(table, {"loss": "ms", "lr": 4e-4, "alpha": 5.0}) == {"loss": "ms", "lr": 1e-3,
                                                                    "alpha": 2.0}
    # alpha within the loss's own values: 25 is pa's 32, not ms's 18
    assert snap(table, {"loss": "pa", "lr": 1e-2, "alpha": 25.0})["alpha"] == 32.0
    assert snap(table, {"loss": "pa", "lr": 1e-2, "alpha": 25.0, "epochs": 3}) == {
        "loss": "pa", "lr": 1e-2, "alpha": 32.0}  # settings the grid does not vary: ignored
    with pytest.raises(UserError, match="has no loss='triplet'"):
        snap(table, {"loss": "triplet", "lr": 1e-3})
    with pytest.raises(UserError, match="missing settings"):
        snap(table, {"loss": "ms", "lr": 1e-3})  # the grid varies alpha


def test_the_curve_of_the_trials_seed_when_recorded_else_the_first() -> None:
    table = memory_table(GRID[:2], seeds=(0, 1))
    assert lookup(table, {**GRID[0], "seed": 1}).seed == 1
    assert lookup(table, {**GRID[0], "seed": 7}).seed == 0
    curve = lookup(table, GRID[0])
    assert curve.test_at(1, "map@r", "max") == {"map@r": 0.05}
    assert curve.test_at(3, "map@r", "max") == {"map@r": 0.2}  # the best epoch up to there


def _space(base: dict, *params: Param) -> Space:
    return Space(name="s", description="", source="a test", path=None, base=base,
                 params=params)


def test_a_space_replays_a_table_whose_settings_it_shares() -> None:
    table = memory_table(GRID)
    loss = Param(key="loss", kind="categorical", choices=("ms", "pa"))
    lr = Param(key="lr", kind="float", low=1e-4, high=1e-2, log=True)
    alpha = Param(key="alpha", kind="float", low=2.0, high=32.0)
    check_space(table, _space({"epochs": 3, "dataset": "glyphs", "seed": 4}, loss, lr, alpha))
    with pytest.raises(UserError, match="recorded with epochs=3, but the space sets epochs=5"):
        check_space(table, _space({"epochs": 5}, lr))
    with pytest.raises(UserError, match=r"searches \['margin'\], which the replay table"):
        check_space(table, _space({}, lr, Param(key="margin", kind="float", low=0.1, high=1.0)))
    with pytest.raises(UserError, match="has no loss='triplet'"):  # every categorical choice
        check_space(table, _space({"alpha": 2.0}, lr, Param(key="loss", kind="categorical",
                                                            choices=("ms", "triplet"))))

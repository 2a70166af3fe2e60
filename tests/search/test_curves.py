"""Learning-curve tables: recorded by the real command (a session fixture), read back, resumed,
and the curve a configuration replays (its grid point, snapped; its seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmlsearch.search.curves import Curve
from dmlsearch.search.curves import CurveTable
from dmlsearch.search.curves import check_replayable
from dmlsearch.search.curves import config_key
from dmlsearch.search.curves import load_table
from dmlsearch.search.curves import record_table
from dmlsearch.spaces import load_space
from dmlsearch.trainables.errors import UserError
from tests.conftest import CURVE_GRID


def _table(points: list[dict], seeds: tuple[int, ...] = (0,)) -> CurveTable:
    curves = {}
    for point in points:
        for seed in seeds:
            rows = [{"epoch": 1, "val": {"map@r": 0.1 + seed}, "test": {"map@r": 0.05}},
                    {"epoch": 2, "val": {"map@r": 0.3 + seed}, "test": {"map@r": 0.2}},
                    {"epoch": 3, "val": {"map@r": 0.2 + seed}}]
            curves[(config_key(point), seed)] = Curve(
                config=point, seed=seed, status="ok", reason=None, epochs=rows, best_epoch=2,
                test_at_best={"map@r": 0.2})
    return CurveTable(path=Path("t.jsonl"), header={"metric": "map@r",
                                                    "base": {"epochs": 3, "dataset": "glyphs"}},
                      curves=curves)


GRID = [{"loss": "ms", "lr": lr, "alpha": a} for lr in (1e-4, 1e-3, 1e-2) for a in (2.0, 18.0)]
GRID += [{"loss": "pa", "lr": lr, "alpha": a} for lr in (1e-4, 1e-3, 1e-2) for a in (8.0, 32.0)]


def test_a_configuration_snaps_to_its_grid_point_within_its_branch() -> None:
    table = _table(GRID)
    # lr in log scale (a factor of 100 across the grid): 4e-4 is nearer 1e-3 than 1e-4
    assert table.snap({"loss": "ms", "lr": 4e-4, "alpha": 5.0}) == {"loss": "ms", "lr": 1e-3,
                                                                   "alpha": 2.0}
    # alpha within the loss's own values: 25 is pa's 32, not ms's 18
    assert table.snap({"loss": "pa", "lr": 1e-2, "alpha": 25.0})["alpha"] == 32.0
    assert table.snap({"loss": "pa", "lr": 1e-2, "alpha": 25.0, "epochs": 3}) == {
        "loss": "pa", "lr": 1e-2, "alpha": 32.0}  # settings the grid does not vary: ignored
    with pytest.raises(UserError, match="has no loss='triplet'"):
        table.snap({"loss": "triplet", "lr": 1e-3})
    with pytest.raises(UserError, match="missing settings"):
        table.snap({"loss": "ms", "lr": 1e-3})  # the grid varies alpha


def test_the_curve_of_the_trials_seed_when_recorded_else_the_first() -> None:
    table = _table(GRID[:2], seeds=(0, 1))
    assert table.lookup({**GRID[0], "seed": 1}).seed == 1
    assert table.lookup({**GRID[0], "seed": 7}).seed == 0
    curve = table.lookup(GRID[0])
    assert curve.test_at(1, "map@r", "max") == {"map@r": 0.05}
    assert curve.test_at(3, "map@r", "max") == {"map@r": 0.2}  # the best epoch up to there


def test_a_space_replays_a_table_whose_settings_it_shares() -> None:
    table = _table(GRID)
    check_replayable(table, {"epochs": 3, "dataset": "glyphs", "seed": 4}, ["loss", "lr"])
    with pytest.raises(UserError, match="recorded with epochs=3, but the space sets epochs=5"):
        check_replayable(table, {"epochs": 5}, ["lr"])
    with pytest.raises(UserError, match=r"searches \['margin'\], which the replay table"):
        check_replayable(table, {}, ["lr", "margin"])


@pytest.mark.slow
def test_the_recorded_table_holds_every_point_and_resumes(curve_table: Path,
                                                          tmp_path: Path) -> None:
    table = load_table(curve_table)
    assert table.metric == "map@r" and table.epochs == 3
    assert len(table.configs()) == 6 and len(table.curves) == 8  # 6 points + 2 with seed 1
    for curve in table.curves.values():
        assert curve.status == "ok" and [r["epoch"] for r in curve.epochs] == [1, 2, 3]
        best = max(curve.epochs, key=lambda r: r["val"]["map@r"])
        assert curve.best_epoch == best["epoch"] and curve.test_at_best == best["test"]
        best_so_far = -1.0
        for row in curve.epochs:  # tested exactly where validation improved
            improved = row["val"]["map@r"] > best_so_far
            assert ("test" in row) == improved
            best_so_far = max(best_so_far, row["val"]["map@r"])
    header = json.loads(curve_table.read_text().splitlines()[0])
    assert header["space_name"] == "curves_grid" and header["base"]["epochs"] == 3
    # Recording again trains nothing: the table is complete.
    copy = tmp_path / "copy.jsonl"
    copy.write_text(curve_table.read_text())
    assert record_table(load_space(CURVE_GRID), copy, overrides={}, workers=1, second_seed=2,
                        command="test", echo=lambda _: None) == 0


def test_a_foreign_or_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist; record one"):
        load_table(tmp_path / "nope.jsonl")
    (tmp_path / "x.jsonl").write_text('{"kind": "run"}\n')
    with pytest.raises(UserError, match="is not a learning-curve table"):
        load_table(tmp_path / "x.jsonl")

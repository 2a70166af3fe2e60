"""The thesis's one-parameter-at-a-time sweep as a proposer on the simulated clock
(``search/replay/sweep.py``): the points it trains and the best it keeps at each stage are those
of a plain loop over the table (a slow, obvious reference), whatever the concurrency; a stage
waits for the last of the previous one; its schedule is the clock's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.replay.simulate import simulate
from dmlsearch.search.replay.sweep import OneAtATimeSweep
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.schedulers import SCHEDULERS
from tests.search.replay._sim_helpers import LOSSES
from tests.search.replay._sim_helpers import LRS
from tests.search.replay._sim_helpers import settings
from tests.search.replay._sim_helpers import shaped_curves
from tests.search.replay._sim_helpers import write_table

BASE = {"dataset": "glyphs", "epochs": 6}


def _fifo(table: Path, folder: Path) -> Any:
    return SCHEDULERS.get("none").make(settings(table, folder, epochs=6, concurrency=1))


def _reference(plan: list, best: dict) -> tuple[list[tuple], list[dict]]:
    """The sweep by hand: every point trained (in order, none twice) and each stage's best."""
    trained: list[tuple] = []
    chosen = []
    for start, stages in plan:
        current = dict(start)
        for key, values in stages:
            stage = [{**current, key: v} for v in values]
            for point in stage:
                if (point["loss"], point["lr"]) not in trained:
                    trained.append((point["loss"], point["lr"]))
            current = max(stage, key=lambda p: best[(p["loss"], p["lr"])])
            chosen.append(current)
    return trained, chosen


@pytest.mark.parametrize("concurrency", [1, 2, 3])
def test_the_sweep_trains_and_keeps_what_a_plain_loop_does(tmp_path: Path,
                                                           concurrency: int) -> None:
    curves = shaped_curves(6)
    table = write_table(tmp_path / "t.jsonl", curves)
    best = {k: max(score for score, _ in rows) for k, rows in curves.items()}
    plan = [({"loss": "multi_similarity", "lr": LRS[0]}, [("lr", list(LRS)), ("loss", LOSSES)]),
            ({"loss": "contrastive", "lr": LRS[1]}, [("lr", list(LRS))])]
    sweep = OneAtATimeSweep(plan, base=BASE)
    sim = simulate(sweep, _fifo(table, tmp_path), table=table, concurrency=concurrency)
    trained, chosen = _reference(plan, best)
    assert sorted((t.config["loss"], t.config["lr"]) for t in sim.trials) == sorted(trained)
    assert sweep.chosen == chosen
    assert all(t.state is TrialState.COMPLETED and t.epochs == 6 for t in sim.trials)
    assert all(t.config["dataset"] == "glyphs" for t in sim.trials)
    # a stage starts when the last point of the one before has ended: the lr stage's two
    # points, then the losses' (multi_similarity at the best lr was trained already)
    first_stage = [t for t in sim.trials if t.config["loss"] == "multi_similarity"]
    later = [t for t in sim.trials if t.config["loss"] != "multi_similarity"
             and t.config["lr"] == chosen[0]["lr"]]
    assert min(t.proposed for t in later) == max(t.ended for t in first_stage)
    assert [r.time for r in sim.results] == sorted(r.time for r in sim.results)


def test_a_sweeps_stage_runs_on_the_clock(tmp_path: Path) -> None:
    """One stage of three points of known times, two at a time: A (3 x 1 s) and B (3 x 1.25 s)
    from 0, C (3 x 0.5 s) when A ends at 3; the sweep is done when C ends at 4.5."""
    table = write_table(tmp_path / "t.jsonl", {
        ("multi_similarity", 1e-3): [(0.1, 1.0)] * 3, ("proxy_anchor", 1e-3): [(0.4, 1.25)] * 3,
        ("contrastive", 1e-3): [(0.2, 0.5)] * 3})
    sweep = OneAtATimeSweep([({"loss": "multi_similarity", "lr": 1e-3}, [("loss", LOSSES)])])
    sim = simulate(sweep, _fifo(table, tmp_path), table=table, concurrency=2)
    assert [(t.config["loss"], t.runs) for t in sim.trials] == [
        ("multi_similarity", ((0.0, 3.0),)), ("proxy_anchor", ((0.0, 3.75),)),
        ("contrastive", ((3.0, 4.5),))]
    assert sweep.chosen == [{"loss": "proxy_anchor", "lr": 1e-3}]
    assert sim.proposals_ended == 4.5  # it knew it was done when its last point ended


def test_a_minimised_score_keeps_the_lowest() -> None:
    sweep = OneAtATimeSweep([({"loss": "multi_similarity", "lr": 1e-3},
                              [("loss", ["multi_similarity", "proxy_anchor"])])], mode="min")
    for trial_id, score in (("a", 0.3), ("b", 0.1)):
        assert isinstance(sweep.suggest(trial_id), dict)
        sweep.on_trial_complete(trial_id, {"score": score})
    assert sweep.suggest("c") == "FINISHED"
    assert sweep.chosen == [{"loss": "proxy_anchor", "lr": 1e-3}]

"""A replayed search on the simulated clock (``search/replay/simulate.py``): trials start and end
when their recorded epoch times say (a small case computed by hand), exactly N train at every
instant until the budget is spent (checked from the simulated start and end times, for every
scheduler; HyperBand's paused trials keep their places), results are heard in simulated-time
order, the budget is spent as a real search spends it, a failed curve fails its trial alone, and
the same seed gives the same search."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from dmlsearch.search.replay import simulate as sim_module
from dmlsearch.search.replay.simulate import Simulation
from dmlsearch.search.replay.simulate import simulate_search
from dmlsearch.search.results import TrialState
from dmlsearch.spaces import load_space
from tests.search.replay._sim_helpers import LOSSES
from tests.search.replay._sim_helpers import settings
from tests.search.replay._sim_helpers import shaped_curves
from tests.search.replay._sim_helpers import space_file
from tests.search.replay._sim_helpers import write_table

EPOCHS = 8


def _search(tmp_path: Path, **options: object) -> Simulation:
    """A simulated search of the shaped curves (:func:`shaped_curves`), EPOCHS epochs each."""
    table = tmp_path / "t.jsonl"
    if not table.exists():
        write_table(table, shaped_curves(EPOCHS))
    space = load_space(str(space_file(tmp_path, EPOCHS, warm_starts=[
        {"loss": "multi_similarity", "lr": 1e-3}])))
    opts = {"epochs": EPOCHS, "concurrency": 2, "budget_epochs": 6 * EPOCHS, **options}
    return simulate_search(settings(table, tmp_path, **opts),  # type: ignore[arg-type]
                           define_by_run=space.define_by_run, warm_starts=space.warm_starts())


def _probes(sim: Simulation, until: float) -> list[float]:
    """Every instant where a trial starts, pauses or ends before ``until``, and the middle of
    every stretch between two of them."""
    marks = sorted({x for t in sim.trials for run in t.runs for x in run}
                   | {x for t in sim.trials for x in (t.proposed, t.ended)})
    return ([x for x in marks if x < until]
            + [(a + b) / 2 for a, b in itertools.pairwise(marks) if b <= until])


def test_the_clock_speaks_ray_tunes_words() -> None:
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import TrialScheduler
    from ray.tune.search import Searcher

    assert (sim_module.PENDING, sim_module.RUNNING, sim_module.PAUSED, sim_module.TERMINATED,
            sim_module.ERROR) == (Trial.PENDING, Trial.RUNNING, Trial.PAUSED, Trial.TERMINATED,
                                  Trial.ERROR)
    assert (sim_module.CONTINUE, sim_module.PAUSE, sim_module.STOP, sim_module.NOOP) == (
        TrialScheduler.CONTINUE, TrialScheduler.PAUSE, TrialScheduler.STOP, TrialScheduler.NOOP)
    assert sim_module.FINISHED == Searcher.FINISHED


def test_three_trials_two_at_a_time_end_when_the_hand_computed_schedule_says(
        tmp_path: Path) -> None:
    # A: 3 epochs of 1 s; B: 3 of 1.25 s; C: 3 of 0.5 s. Two at a time, in that order (the
    # space's warm starts): A and B start at 0; A ends at 3 and C starts then; B ends at 3.75,
    # C at 4.5.
    a, b, c = (("multi_similarity", 1e-3), ("proxy_anchor", 1e-3), ("contrastive", 1e-3))
    table = write_table(tmp_path / "t.jsonl", {
        a: [(0.1, 1.0), (0.2, 1.0), (0.3, 1.0)], b: [(0.2, 1.25), (0.3, 1.25), (0.4, 1.25)],
        c: [(0.1, 0.5), (0.1, 0.5), (0.2, 0.5)]})
    space = load_space(str(space_file(tmp_path, 3, warm_starts=[
        {"loss": loss, "lr": lr} for loss, lr in (a, b, c)])))
    sim = simulate_search(settings(table, tmp_path, epochs=3, concurrency=2, scheduler="none",
                                   num_samples=3),
                          define_by_run=space.define_by_run, warm_starts=space.warm_starts())
    assert [t.config["loss"] for t in sim.trials] == [a[0], b[0], c[0]]
    assert [(t.trial_id, t.proposed, t.runs, t.ended, t.epochs, t.state) for t in sim.trials] == [
        ("00000", 0.0, ((0.0, 3.0),), 3.0, 3, TrialState.COMPLETED),
        ("00001", 0.0, ((0.0, 3.75),), 3.75, 3, TrialState.COMPLETED),
        ("00002", 3.0, ((3.0, 4.5),), 4.5, 3, TrialState.COMPLETED)]
    assert [(r.time, r.trial_id, r.epoch) for r in sim.results] == [
        (1.0, "00000", 1), (1.25, "00001", 1), (2.0, "00000", 2), (2.5, "00001", 2),
        (3.0, "00000", 3), (3.5, "00002", 1), (3.75, "00001", 3), (4.0, "00002", 2),
        (4.5, "00002", 3)]
    assert [t.score for t in sim.trials] == [0.3, 0.4, 0.2]  # each one's best
    assert sim.proposals_ended == 3.0 and sim.end == 4.5  # the third trial was the last


@pytest.mark.parametrize("concurrency", [2, 4])
@pytest.mark.parametrize("scheduler", ["asha", "soft-asha", "median", "none"])
def test_exactly_n_trials_train_at_every_instant_until_the_budget_is_spent(
        tmp_path: Path, scheduler: str, concurrency: int) -> None:
    budget = 6 * EPOCHS
    sim = _search(tmp_path, scheduler=scheduler, concurrency=concurrency, budget_epochs=budget)
    end = sim.proposals_ended
    assert end is not None and 0 < end < sim.end
    assert all(sim.running_at(x) == concurrency for x in _probes(sim, end))
    assert all(sim.running_at(x) <= concurrency for x in _probes(sim, sim.end))
    assert all(t.runs[0][0] == t.proposed and len(t.runs) == 1 for t in sim.trials)
    # the budget is spent as a real search spends it: a trial starts only while fewer epochs
    # than the budget were heard, none after it was reached, and the running ones finish
    heard_by = [sum(r.time <= x for r in sim.results) for x in (t.proposed for t in sim.trials)]
    assert all(n < budget for n in heard_by)
    assert sum(r.time <= end for r in sim.results) >= budget
    assert all(t.proposed <= end for t in sim.trials)
    assert sim.epochs == sum(t.epochs for t in sim.trials) >= budget
    # heard in simulated-time order, each trial's epochs one after another
    assert [r.time for r in sim.results] == sorted(r.time for r in sim.results)
    for trial in sim.trials:
        mine = [r.epoch for r in sim.results if r.trial_id == trial.trial_id]
        assert mine == list(range(1, trial.epochs + 1))
        assert (trial.state is TrialState.COMPLETED) == (trial.epochs == EPOCHS)
    if scheduler == "asha":
        assert any(t.state is TrialState.PRUNED for t in sim.trials)


def test_hyperbands_paused_trials_keep_their_places(tmp_path: Path) -> None:
    """Synchronous HyperBand pauses a trial at its bracket's milestone until its bracket-mates
    get there: it keeps its place of the concurrency (as under the product's
    ConcurrencyLimiter), so fewer than N train meanwhile, and no trial is left paused."""
    sim = _search(tmp_path, scheduler="hyperband", concurrency=4)
    end = sim.proposals_ended
    assert end is not None
    assert all(sim.live_at(x) == 4 for x in _probes(sim, end))
    assert any(sim.running_at(x) < 4 for x in _probes(sim, end))
    assert any(t.runs[-1][1] < t.ended for t in sim.trials)  # waited paused, then ended
    assert {t.state for t in sim.trials} <= {TrialState.COMPLETED, TrialState.PRUNED}
    for trial in sim.trials:
        mine = [r.epoch for r in sim.results if r.trial_id == trial.trial_id]
        assert mine == list(range(1, trial.epochs + 1))  # a resumed trial goes on


def test_the_same_seed_gives_the_same_search_and_another_seed_another(tmp_path: Path) -> None:
    options = {"sampler": "prior-tpe", "scheduler": "asha", "concurrency": 3}
    first = _search(tmp_path, seed=3, **options)
    again = _search(tmp_path, seed=3, **options)
    assert first == again
    other = _search(tmp_path, seed=4, **options)
    assert [t.config for t in other.trials] != [t.config for t in first.trials]


def test_a_failed_training_fails_its_trial_alone(tmp_path: Path) -> None:
    curves = shaped_curves(4)
    table = write_table(tmp_path / "t.jsonl", curves, failed=[("proxy_anchor", 1e-3)])
    space = load_space(str(space_file(tmp_path, 4, warm_starts=[
        {"loss": loss, "lr": 1e-3} for loss in LOSSES])))
    sim = simulate_search(settings(table, tmp_path, epochs=4, concurrency=2, scheduler="none",
                                   num_samples=3),
                          define_by_run=space.define_by_run, warm_starts=space.warm_starts())
    assert [(t.config["loss"], t.state, t.epochs) for t in sim.trials] == [
        ("multi_similarity", TrialState.COMPLETED, 4), ("proxy_anchor", TrialState.FAILED, 4),
        ("contrastive", TrialState.COMPLETED, 4)]
    assert "loss became nan" in (sim.trials[1].reason or "")
    # its place went to the next trial the moment it failed
    assert sim.trials[2].proposed == min(sim.trials[0].ended, sim.trials[1].ended)


def test_a_wall_clock_budget_is_refused(tmp_path: Path) -> None:
    table = write_table(tmp_path / "t.jsonl", shaped_curves(2))
    space = load_space(str(space_file(tmp_path, 2)))
    timed = dataclasses.replace(settings(table, tmp_path, epochs=2, concurrency=2),
                                time_budget_s=60.0)
    with pytest.raises(ValueError, match="budget is in epochs"):
        simulate_search(timed, define_by_run=space.define_by_run, warm_starts=[])

"""Configurations trained to their end whatever the scheduler says (``search/tune/keep.py``,
``TuneSettings.keep_to_end``: with ``--prior-from``, the source's best): Ray's own ASHA and
soft-ASHA, wrapped, on the simulated clock; which schedulers are wrapped (not the median rule,
which refuses a stopped trial's later results, nor HyperBand); and how a trial's configuration
is matched."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from dmlsearch.search.replay.simulate import Simulation
from dmlsearch.search.replay.simulate import simulate_search
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.keep import KeepToEnd
from dmlsearch.search.tune.keep import matches
from dmlsearch.search.tune.schedulers import make_scheduler
from dmlsearch.spaces import load_space
from tests.search.replay._sim_helpers import LOSSES
from tests.search.replay._sim_helpers import LRS
from tests.search.replay._sim_helpers import settings
from tests.search.replay._sim_helpers import shaped_curves
from tests.search.replay._sim_helpers import space_file
from tests.search.replay._sim_helpers import write_table

EPOCHS = 8
# the six shaped curves' configurations, tried first in this order, four at a time
STARTS = [{"loss": loss, "lr": lr} for loss in LOSSES for lr in LRS]


def _search(tmp_path: Path, scheduler: str, keep: tuple[dict, ...] = ()) -> Simulation:
    table = tmp_path / "t.jsonl"
    if not table.exists():
        write_table(table, shaped_curves(EPOCHS))
    space = load_space(str(space_file(tmp_path, EPOCHS, warm_starts=STARTS)))
    tune = dataclasses.replace(
        settings(table, tmp_path, epochs=EPOCHS, concurrency=4, scheduler=scheduler,
                 budget_epochs=6 * EPOCHS),
        keep_to_end=tuple(tuple(point.items()) for point in keep))
    return simulate_search(tune, define_by_run=space.define_by_run,
                           warm_starts=space.warm_starts())


def _ended(sim: Simulation) -> dict[tuple[str, float], tuple[TrialState, int]]:
    return {(t.config["loss"], t.config["lr"]): (t.state, t.epochs) for t in sim.trials}


@pytest.mark.parametrize("scheduler", ["asha", "soft-asha"])
def test_a_configuration_the_scheduler_stops_early_trains_to_its_end_when_kept(
        tmp_path: Path, scheduler: str) -> None:
    without = _ended(_search(tmp_path, scheduler))
    stopped = [c for c in map(tuple, (s.values() for s in STARTS))
               if without.get(c, (None,))[0] is TrialState.PRUNED]
    assert stopped, f"{scheduler} stopped none of the configurations tried first"
    chosen = stopped[0]
    kept = _ended(_search(tmp_path, scheduler, keep=(dict(zip(("loss", "lr"), chosen)),)))
    assert kept[chosen] == (TrialState.COMPLETED, EPOCHS)
    # the scheduler still stops the others: only the kept configuration is exempt
    assert any(state is TrialState.PRUNED for c, (state, _) in kept.items() if c != chosen)


def test_kept_trials_end_at_their_last_epoch_as_every_trial_does(tmp_path: Path) -> None:
    chosen = {"loss": "multi_similarity", "lr": 1e-3}
    sim = _search(tmp_path, "asha", keep=(chosen,))
    (trial,) = [t for t in sim.trials if matches(chosen, t.config)]
    mine = [r.epoch for r in sim.results if r.trial_id == trial.trial_id]
    assert mine == list(range(1, EPOCHS + 1))


@pytest.mark.parametrize(("scheduler", "wrapped"), [
    ("asha", True), ("soft-asha", True), ("median", False), ("hyperband", False),
    ("none", False)])
def test_only_schedulers_that_can_keep_a_trial_are_wrapped(
        tmp_path: Path, scheduler: str, wrapped: bool) -> None:
    base = settings(tmp_path / "t.jsonl", tmp_path, epochs=EPOCHS, concurrency=2,
                    scheduler=scheduler)
    keep = dataclasses.replace(base, keep_to_end=((("loss", "contrastive"),),))
    assert isinstance(make_scheduler(keep), KeepToEnd) is wrapped
    assert not isinstance(make_scheduler(base), KeepToEnd)  # nothing to keep: as it was


def test_the_wrapper_survives_pickling_as_ray_saves_a_tuner(tmp_path: Path) -> None:
    tune = dataclasses.replace(
        settings(tmp_path / "t.jsonl", tmp_path, epochs=EPOCHS, concurrency=2),
        keep_to_end=((("loss", "contrastive"), ("lr", 1e-3)),))
    again = pickle.loads(pickle.dumps(make_scheduler(tune)))
    assert isinstance(again, KeepToEnd)
    assert again.keep == [{"loss": "contrastive", "lr": 1e-3}] and again.max_t == EPOCHS


def test_a_trial_matches_a_point_when_every_setting_of_the_point_has_its_value() -> None:
    point = {"loss": "proxy_anchor", "lr": 0.0014, "embedding_size": 64}
    assert matches(point, {**point, "epochs": 8})  # other settings do not matter
    assert matches(point, {**point, "lr": 0.0014 * (1 + 1e-12)})  # through Optuna and back
    assert not matches(point, {**point, "lr": 0.0015})
    assert not matches(point, {"loss": "proxy_anchor", "lr": 0.0014})  # a setting missing
    assert not matches(point, {**point, "loss": "multi_similarity"})
    assert not matches({"flag": True}, {"flag": 1})  # a choice is not a number


def test_rays_own_trials_and_asha_a_kept_trial_below_the_cut_off_goes_on() -> None:
    """Ray's ``Trial`` objects (their ``config`` as the searcher proposed it: flat settings) and
    Ray's ASHA: at the first rung, a kept trial below the cut-off continues where another one
    is stopped; at its last epoch it ends as every trial does."""
    from ray.tune.experiment import Trial
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.schedulers import TrialScheduler

    asha = ASHAScheduler(time_attr="training_iteration", max_t=EPOCHS, grace_period=2,
                         reduction_factor=3)
    chosen = {"loss": "proxy_anchor", "lr": 1e-3}
    keep = KeepToEnd(asha, [chosen], EPOCHS)
    keep.set_search_properties("score", "max")
    first, kept, other = (Trial("dmltrial", config={**config, "epochs": EPOCHS}, stub=True)
                          for config in ({"loss": "contrastive", "lr": 3e-3}, chosen,
                                         {"loss": "multi_similarity", "lr": 1e-3}))
    for trial in (first, kept, other):
        keep.on_trial_add(None, trial)

    def result(trial: Trial, epoch: int, score: float) -> str:
        return keep.on_trial_result(None, trial, {"training_iteration": epoch, "score": score})

    assert result(first, 2, 0.9) == TrialScheduler.CONTINUE  # the first at the rung sets it
    assert result(other, 2, 0.1) == TrialScheduler.STOP
    assert result(kept, 2, 0.1) == TrialScheduler.CONTINUE
    assert keep.kept == {kept.trial_id}
    assert result(kept, EPOCHS, 0.5) == TrialScheduler.STOP  # its last epoch: it ends

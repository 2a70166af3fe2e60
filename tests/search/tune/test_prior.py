"""The samplers that use the warm starts as a prior: the prior's draws and densities against
scipy, PriorBand's rungs and its prior/incumbent split on hand-made studies, and both samplers
in real Optuna studies (the proposal study the searcher keeps): warm starts first, every value
in its domain, each trial's source recorded, the prior's weight decaying with evidence."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution
from optuna.distributions import FloatDistribution
from optuna.distributions import IntDistribution
from optuna.trial import TrialState
from scipy import stats

from dmlsearch.search.tune.prior import Prior
from dmlsearch.search.tune.prior import PriorBandSampler
from dmlsearch.search.tune.prior import PriorTPESampler
from dmlsearch.search.tune.prior import Rungs
from dmlsearch.search.tune.prior import density_around
from dmlsearch.search.tune.prior import draw_around
from dmlsearch.search.tune.prior import from_unit
from dmlsearch.search.tune.prior import prior_share
from dmlsearch.search.tune.prior import sources
from dmlsearch.search.tune.prior import to_unit

optuna.logging.set_verbosity(optuna.logging.WARNING)
LR = FloatDistribution(1e-4, 1e-2, log=True)
MARGIN = FloatDistribution(0.0, 1.0, step=0.1)
EMB = CategoricalDistribution([32, 64, 128])


def test_unit_scale_round_trips_on_log_step_and_int_ranges() -> None:
    assert to_unit(LR, 1e-3) == pytest.approx(0.5)
    assert from_unit(LR, 0.5) == pytest.approx(1e-3)
    assert from_unit(MARGIN, 0.34) == pytest.approx(0.3)  # on the step
    assert from_unit(IntDistribution(1, 9), 0.5) == 5
    assert from_unit(MARGIN, 1.7) == 1.0 and from_unit(MARGIN, -1) == 0.0


def test_draws_around_a_value_follow_the_truncated_normal() -> None:
    rng = np.random.RandomState(0)
    draws = np.array([to_unit(LR, draw_around(rng, LR, 2e-4)) for _ in range(4000)])
    centre = to_unit(LR, 2e-4)
    a, b = (0 - centre) / 0.25, (1 - centre) / 0.25
    assert stats.kstest(draws, stats.truncnorm(a, b, loc=centre, scale=0.25).cdf).pvalue > 0.01
    assert density_around(LR, 2e-4, 2e-4) == pytest.approx(
        stats.truncnorm.pdf(centre, a, b, loc=centre, scale=0.25))


def test_a_categorical_keeps_the_centres_choice_four_times_as_often() -> None:
    rng = np.random.RandomState(1)
    picks = [draw_around(rng, EMB, 64) for _ in range(6000)]
    assert picks.count(64) / len(picks) == pytest.approx(4 / 6, abs=0.02)
    assert density_around(EMB, 64, 64) == pytest.approx(4 / 6)
    assert density_around(EMB, 32, 64) == pytest.approx(1 / 6)
    mutated = [draw_around(rng, EMB, 64, choice_weight=0.0) for _ in range(200)]
    assert 64 not in mutated and set(mutated) == {32, 128}  # a mutation changes the choice


def test_the_mixtures_density_is_the_mean_of_its_components() -> None:
    dists = {"lr": LR, "emb": EMB}
    prior = Prior([{"lr": 1e-3, "emb": 64}, {"lr": 1e-4}])
    point = {"lr": 5e-4, "emb": 128}
    first = density_around(LR, 5e-4, 1e-3) * density_around(EMB, 128, 64)
    second = density_around(LR, 5e-4, 1e-4) * (1 / 3)  # emb: uniform where a point is silent
    assert math.exp(prior.log_density(point, dists)) == pytest.approx((first + second) / 2)


def test_rungs_and_one_brackets_epochs() -> None:
    rungs = Rungs(12, 3, 3)
    assert rungs.milestones == [3, 9, 12]
    assert rungs.bracket_cost() == 9 * 3 + 3 * 6 + 1 * 3
    assert Rungs(8, 2, 3).milestones == [2, 6, 8]


def _study(points: list[dict]) -> optuna.Study:
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(0))
    for point in points:
        study.enqueue_trial(point)
    return study


def _finished(study: optuna.Study, params: dict, curve: list[float], complete: bool) -> None:
    trial = optuna.trial.create_trial(
        params=params, distributions={"lr": LR, "emb": EMB},
        intermediate_values=dict(enumerate(curve, 1)),
        state=TrialState.COMPLETE if complete else TrialState.PRUNED,
        value=curve[-1])
    study.add_trial(trial)


def test_priorbands_split_favours_the_distribution_the_best_trials_resemble() -> None:
    rungs = Rungs(4, 1, 2)  # milestones 1, 2, 4; one bracket: 4x1 + 2x1 + 1x2 = 8 epochs
    warm = {"lr": 1e-3, "emb": 64}
    prior = Prior([warm])
    near_prior = _study([])
    _finished(near_prior, {"lr": 1e-2, "emb": 128}, [0.9, 0.95, 0.96, 0.97], True)  # incumbent
    for lr in (1e-3, 1.1e-3, 0.9e-3):
        _finished(near_prior, {"lr": lr, "emb": 64}, [0.8, 0.85], False)
    trials = near_prior.get_trials(deepcopy=False)
    incumbent = trials[0]
    share = prior_share(near_prior, trials, rungs, prior, incumbent, True)
    assert share is not None and share < 0.5  # the incumbent leads the highest full rung
    for lr in (1e-3, 1.1e-3, 0.9e-3):
        _finished(near_prior, {"lr": lr, "emb": 64}, [0.91, 0.99], False)
    trials = near_prior.get_trials(deepcopy=False)
    assert prior_share(near_prior, trials, rungs, prior, incumbent, True) > 0.5
    # before one bracket's worth of epochs was spent, PriorBand does not split
    early = _study([])
    _finished(early, {"lr": 1e-2, "emb": 128}, [0.9, 0.95, 0.96, 0.97], True)
    assert prior_share(early, early.get_trials(deepcopy=False), rungs, prior,
                       early.get_trials(deepcopy=False)[0], True) is None


def _objective(trial: optuna.Trial) -> float:
    lr = trial.suggest_float("lr", 1e-4, 1e-2, log=True)
    emb = trial.suggest_categorical("emb", [32, 64, 128])
    if emb == 128:
        trial.suggest_float("margin", 0.0, 1.0, step=0.1)  # a conditional parameter
    score = 1.0 - abs(math.log10(lr) + 3) / 2
    for step in range(1, 5):
        trial.report(score * step / 4, step)
    return score


@pytest.mark.parametrize(("make", "later", "after"), [
    # the incumbent once a bracket's epochs (16 here: 4 trials) were spent
    (lambda: PriorBandSampler(rungs=Rungs(4, 1, 3), seed=0), "incumbent", 4),
    # PriorBand+BO's variant: its uniform half by TPE once TPE has its start-up trials
    (lambda: PriorBandSampler(rungs=Rungs(4, 1, 3), seed=0, model=optuna.samplers.TPESampler(
        seed=0, n_startup_trials=5)), "model", 5),
    # TPE's model once its start-up count of trials finished
    (lambda: PriorTPESampler(tpe=optuna.samplers.TPESampler(seed=0, n_startup_trials=5),
                             rungs=Rungs(4, 1, 3), seed=0), "model", 5),
])
def test_both_samplers_run_a_study_from_its_warm_starts(make, later: str,  # type: ignore[no-untyped-def]
                                                        after: int) -> None:
    warm = [{"lr": 1e-3, "emb": 64}, {"lr": 3e-3, "emb": 128, "margin": 0.5}]
    study = optuna.create_study(direction="maximize", sampler=make())
    for point in warm:
        study.enqueue_trial(point)
    study.optimize(_objective, n_trials=40)
    assert [t.params for t in study.trials[:2]] == warm
    drawn = sources(study)
    assert drawn[0] == drawn[1] == "warm start"
    assert set(drawn.values()) >= {"warm start", "prior", "uniform", later}
    first_later = min(n for n, source in drawn.items() if source == later)
    assert first_later >= after  # only once there is that evidence
    for t in study.trials:
        assert 1e-4 <= t.params["lr"] <= 1e-2 and t.params["emb"] in (32, 64, 128)
        assert ("margin" in t.params) == (t.params["emb"] == 128)
    # (how the prior draws around a point: test_draws_around_a_value_follow_the_truncated_normal)


def test_the_priors_weight_decays_as_evidence_comes_in() -> None:
    sampler = PriorTPESampler(tpe=optuna.samplers.TPESampler(seed=0, n_startup_trials=2),
                              rungs=Rungs(4, 1, 3), seed=0)
    study = _study([{"lr": 1e-3, "emb": 64}])
    prior = Prior([{"lr": 1e-3, "emb": 64}])
    assert sampler.weights(study, [], prior) == {"uniform": 0.5, "prior": 0.5}  # start-up
    _finished(study, {"lr": 1e-3, "emb": 64}, [0.1, 0.2], False)
    _finished(study, {"lr": 5e-3, "emb": 32}, [0.1, 0.2], False)
    few = sampler.weights(study, study.get_trials(deepcopy=False), prior)
    for _ in range(20):
        _finished(study, {"lr": 5e-3, "emb": 32}, [0.1, 0.2, 0.3, 0.4], True)
    many = sampler.weights(study, study.get_trials(deepcopy=False), prior)
    assert few["prior"] > many["prior"] and few["model"] < many["model"]
    assert sum(many.values()) == pytest.approx(1.0)
    # no warm starts: TPE alone
    assert sampler.weights(study, [], Prior([])) == {"model": 1.0}


def test_without_warm_starts_prior_tpe_draws_uniformly_then_by_tpe() -> None:
    """A space with no published values (no warm starts) under the default sampler: nothing to
    draw around, so its start-up is uniform over the whole range and TPE takes over after."""
    study = optuna.create_study(direction="maximize", sampler=PriorTPESampler(
        tpe=optuna.samplers.TPESampler(seed=0, n_startup_trials=5), rungs=Rungs(4, 1, 3),
        seed=0))
    study.optimize(_objective, n_trials=30)
    lrs = [t.params["lr"] for t in study.trials]
    assert all(1e-4 <= lr <= 1e-2 for lr in lrs)
    assert min(lrs) < 3e-4 and max(lrs) > 3e-3  # spread over the range, not stuck on a point
    assert "model" in set(sources(study).values())

"""The pick-choice analysis (``benchmarks/pick_choice.py``): the completed trials read as the
search benchmark reads them, the searched values scaled as the space says, and each way of
choosing judged by the chosen configuration's seed-mean test score."""

from __future__ import annotations

import math

import pytest

from benchmarks.pick_choice import judge
from benchmarks.pick_choice import smoothed
from benchmarks.pick_choice import unit_vector
from benchmarks.search_efficiency import completed_within
from benchmarks.search_efficiency import reference

SEARCHED = ("loss", "lr", "embedding_size", "m_per_class", "weight_decay", "loss.alpha",
            "loss.margin")


def _run(trials: list[tuple[float, dict]], *, budget: int, seed: int) -> dict:
    """A noisy run whose trials each report one epoch and end: (score it saw, config)."""
    return {"table": "omniglot-grid", "method": "m", "concurrency": 4, "seed": seed,
            "noise": True, "budget": budget, "events": [[s, 1] for s, _ in trials],
            "configs": [c for _, c in trials]}


def test_the_completed_trials_are_those_ended_within_the_budget() -> None:
    run = {"events": [[0.2, 0], [0.3, 1], [None, 1], [0.5, 0], [0.6, 1]],
           "configs": [{"a": 1}, {"a": 2}, {"a": 3}]}
    assert completed_within(run, 5) == [(0.3, {"a": 1}), (0.6, {"a": 3})]  # no score: not a pick
    assert completed_within(run, 4) == [(0.3, {"a": 1})]


def test_values_are_scaled_as_the_space_says_and_other_branches_sit_mid_range() -> None:
    params = reference("omniglot-grid", noise=True).space.params
    config = {"loss": "proxy_anchor", "lr": 1e-3, "embedding_size": 32, "m_per_class": 8,
              "weight_decay": 1e-2, "loss.alpha": 32.0}
    got = list(unit_vector(params, config))
    half = (math.log(32) - math.log(8)) / (math.log(128) - math.log(8))
    # loss one-hot, lr log (1e-3 halfway in 1e-4..1e-2), embedding and m one-hot, weight decay
    # at its top; MultiSimilarity's alpha and margin (another branch) mid-range; PA's alpha
    assert got == pytest.approx([0, 1, 0.5, 1, 0, 0, 0, 1, 1.0, 0.5, 0.5, half])


def test_each_choice_is_judged_by_its_seed_mean_test_score() -> None:
    ref = reference("omniglot-grid", noise=True)
    best = {k: ref.best_config[k] for k in ref.best_config if k in SEARCHED}
    poor = {k: ref.warm_starts[0][k] for k in SEARCHED if k in ref.warm_starts[0]}
    assert ref.final(poor)[0] < ref.final(best)[0]
    # the search saw the poor configuration score higher (one lucky training)
    # one training's worth is 12 epochs: both trials (an epoch each) ended within it
    runs = [_run([(0.1, best), (0.9, poor)], budget=1, seed=s) for s in range(3)]
    body = judge(runs)["omniglot-grid"]["m c4"]
    choices = body["choices"]
    assert body["seeds"] == 3 and body["best_test"] == pytest.approx(ref.best_test)
    assert body["bar"] == pytest.approx(ref.best_test - ref.noise.sigma_test)
    assert choices["pick"]["median"] == pytest.approx(ref.final(poor)[1])
    assert choices["perfect choice"]["median"] == pytest.approx(ref.final(best)[1])
    gain = ref.final(best)[1] - ref.final(poor)[1]
    assert choices["perfect choice"]["gain"]["mean"] == pytest.approx(gain)
    # the two are far apart (other loss): a narrow kernel leaves each its own score
    assert choices["smoothed h=0.1"]["median"] == pytest.approx(ref.final(poor)[1])


def test_a_wide_kernel_tempers_a_lucky_trial_whose_neighbour_scored_poorly() -> None:
    params = reference("omniglot-grid", noise=True).space.params
    base = {"loss": "multi_similarity", "lr": 1e-3, "embedding_size": 128, "m_per_class": 4,
            "weight_decay": 1e-4, "loss.alpha": 2.0, "loss.margin": 0.5}
    lucky = {**base, "lr": 1e-2, "weight_decay": 1e-2, "loss.margin": 0.8}
    trials = [(0.80, lucky), (0.50, {**lucky, "lr": 9e-3}),
              (0.78, base), (0.77, {**base, "lr": 1.2e-3})]
    assert smoothed(params, 1e-3)(trials) == 0  # no smoothing: the best observed
    assert smoothed(params, 0.3)(trials) == 2  # (0.80 + 0.50) / 2 against (0.78 + 0.77) / 2

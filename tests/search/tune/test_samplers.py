"""``--sampler``: every name builds the seeded Optuna sampler it promises; unknown names list
the valid ones."""

from __future__ import annotations

import optuna
import pytest

from dmlsearch.search.tune import SAMPLERS
from dmlsearch.trainables.errors import UserError
from tests.helpers import tune_settings


@pytest.mark.parametrize(("name", "kind"), [
    ("tpe", optuna.samplers.TPESampler), ("random", optuna.samplers.RandomSampler),
    ("grid", optuna.samplers.RandomSampler), ("cmaes", optuna.samplers.CmaEsSampler),
    ("gp", optuna.samplers.GPSampler), ("nsga2", optuna.samplers.NSGAIISampler),
])
def test_every_sampler_name_builds_its_optuna_sampler(name: str, kind: type) -> None:
    assert isinstance(SAMPLERS.get(name).make(tune_settings(sampler=name)), kind)


def test_the_registry_lists_every_sampler_and_says_which_take_two_objectives() -> None:
    assert SAMPLERS.names() == ["cmaes", "gp", "grid", "nsga2", "random", "tpe"]
    assert [n for n in SAMPLERS if SAMPLERS.get(n).single_objective] == ["cmaes", "gp"]
    assert [n for n in SAMPLERS if SAMPLERS.get(n).multi_objective_only] == ["nsga2"]
    with pytest.raises(UserError, match="unknown sampler 'hyperopt' for --sampler"):
        SAMPLERS.get("hyperopt")


def test_a_seed_makes_the_same_proposals() -> None:
    def proposals(seed: int) -> list[float]:
        study = optuna.create_study(sampler=SAMPLERS.get("tpe").make(tune_settings(seed=seed)))
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=12)
        return [t.params["x"] for t in study.trials]

    assert proposals(3) == proposals(3) != proposals(4)

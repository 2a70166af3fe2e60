"""The fANOVA numerics against references: the Monte Carlo decomposition against a function's
analytic decomposition, and the forest's estimate against Optuna's own fANOVA evaluator (an
independent implementation: exact on its trees) where both compute the same quantity."""

from __future__ import annotations

import math

import numpy as np
import optuna
import pytest

from dmlsearch.search.reporting.fanova import decompose
from dmlsearch.search.reporting.importance import analyse

optuna.logging.set_verbosity(optuna.logging.WARNING)

X = optuna.distributions.FloatDistribution(0.0, 1.0)
Z = optuna.distributions.FloatDistribution(1e-3, 1.0, log=True)
C = optuna.distributions.CategoricalDistribution(["a", "b", "c"])


def test_the_decomposition_of_a_known_function_is_its_analytic_one() -> None:
    """f = 10x + 24(x − ½)(y − ½) + 3·[c = b] + 2·log10 z, over x, y uniform, z log-uniform on
    [1e-3, 1] (its searched scale) and c uniform over three choices: Var 100/12 from x, 4 from
    the pair (x, y), 2 from c, 3 from z (2·log10 z uniform on [−6, 0]) and nothing from y
    alone; 17.33 in all. (A grid that holds its range's ends, as before issue 35, put x at
    0.57.)"""
    def f(rows: np.ndarray) -> np.ndarray:  # columns encoded: x, y, ln z, c's index
        x, y, ln_z, c = rows.T
        return 10 * x + 24 * (x - 0.5) * (y - 0.5) + 3 * (c == 1) + 2 * ln_z / math.log(10)

    main, pairs, marginals = decompose(f, [X, X, Z, C], ["x", "y", "z", "c"])
    total = 100 / 12 + 4 + 2 + 3
    assert main == pytest.approx({"x": 100 / 12 / total, "y": 0.0, "z": 3 / total,
                                  "c": 2 / total}, abs=0.01)
    assert pairs.pop(("x", "y")) == pytest.approx(4 / total, abs=0.01)
    assert max(pairs.values()) < 0.005  # no other pair interacts
    zs, fz = marginals["z"]
    assert np.allclose(np.diff(np.log(zs)), math.log(1000) / 12)  # the log scale, evenly
    assert np.allclose(np.diff(fz), 2 * math.log10(1000) / 12, atol=0.05)
    assert marginals["c"][0] == ["a", "b", "c"]
    assert marginals["c"][1][1] - marginals["c"][1][0] == pytest.approx(3, abs=0.05)


def _linear_study(trials: int) -> optuna.Study:
    """No log parameter: Optuna's evaluator and ours then analyse the same space."""
    rng = np.random.default_rng(0)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(t: optuna.Trial) -> float:
        x, y = t.suggest_float("x", 0.0, 1.0), t.suggest_float("y", 0.0, 1.0)
        z, c = t.suggest_float("z", 0.0, 1.0), t.suggest_categorical("c", ["a", "b", "c"])
        return 10 * x + 24 * (x - 0.5) * (y - 0.5) + 3 * (c == "b") + 6 * z \
            + rng.normal(0, 0.05)

    study.optimize(objective, n_trials=trials)
    return study


def test_on_a_linear_space_it_ranks_and_shares_as_optunas_fanova_does() -> None:
    """Optuna's FanovaImportanceEvaluator walks each tree exactly and rescales its numbers to
    sum to 1: ours, rescaled the same way, gives the same shares within Monte Carlo and forest
    noise."""
    study = _linear_study(200)
    ours = analyse(study.trials, ["x", "y", "z", "c"], name="all").importance
    theirs = optuna.importance.get_param_importances(
        study, evaluator=optuna.importance.FanovaImportanceEvaluator(seed=0))
    rescaled = {p: v / sum(ours.values()) for p, v in ours.items()}
    assert sorted(rescaled, key=rescaled.get) == sorted(theirs, key=theirs.get)
    assert rescaled == pytest.approx({p: float(v) for p, v in theirs.items()}, abs=0.05)

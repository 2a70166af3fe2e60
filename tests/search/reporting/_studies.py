"""Optuna studies made by hand for the reporting tests."""

from __future__ import annotations

import numpy as np
import optuna


def mixed_budgets(complete: int, pruned: int) -> optuna.Study:
    """x decides the final score; a pruned trial's early score says nothing about x."""
    study = optuna.create_study(direction="maximize")
    rng = np.random.default_rng(1)
    dist = {"x": optuna.distributions.FloatDistribution(0, 1),
            "y": optuna.distributions.FloatDistribution(0, 1)}
    for i in range(complete + pruned):
        x, y = float(rng.uniform()), float(rng.uniform())
        early = {1: y}  # epoch 1: y alone
        if i < complete:
            study.add_trial(optuna.trial.create_trial(
                params={"x": x, "y": y}, distributions=dist, value=x,
                intermediate_values={**early, 2: x}))
        else:
            study.add_trial(optuna.trial.create_trial(
                params={"x": x, "y": y}, distributions=dist, value=y,
                intermediate_values=early, state=optuna.trial.TrialState.PRUNED))
    return study

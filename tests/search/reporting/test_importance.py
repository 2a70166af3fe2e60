"""fANOVA importance on synthetic objectives whose important parameters and interactions are
known, branch by branch for conditional spaces, and the ``importance`` command's outputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from dmlsearch.search.reporting.importance import analyse_study
from dmlsearch.search.reporting.importance import importance_command
from dmlsearch.trainables.errors import UserError
from tests.helpers import known_study

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_known_important_parameters_and_pair_come_first() -> None:
    report = analyse_study(known_study())
    (common,) = report.analyses
    ranked = sorted(common.importance, key=lambda p: -common.importance[p])
    assert ranked[:2] == ["x", "c"]
    assert common.importance["z"] < 0.05
    assert sum(common.importance.values()) == pytest.approx(1.0)
    top_pair = max(common.interactions, key=common.interactions.get)
    assert set(top_pair) == {"x", "y"}
    assert common.interactions[top_pair] > 5 * max(
        v for k, v in common.interactions.items() if k != top_pair)
    assert common.main_effects["x"] > common.main_effects["c"] > common.main_effects["z"]
    xs, ys = common.marginals["x"]
    assert ys[-1] - ys[0] > 5  # the marginal curve of x rises by about 10
    assert np.all(np.diff(xs) > 0)


def test_conditional_parameters_are_analysed_within_their_branch() -> None:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))

    def objective(t: optuna.Trial) -> float:
        loss = t.suggest_categorical("loss", ["ms", "pa"])
        lr = t.suggest_float("lr", 1e-4, 1e-2, log=True)
        if loss == "ms":  # the margin matters in this branch only
            return 5 * t.suggest_float("margin[ms]", 0.0, 1.0) + 0.01 * np.log(lr)
        return 0.5 * t.suggest_float("alpha[pa]", 2.0, 100.0) / 100 + 3 * np.log10(lr)

    study.optimize(objective, n_trials=80)
    report = analyse_study(study, min_trials=8)
    names = [a.name for a in report.analyses]
    assert names[0] == "common parameters" and set(names[1:]) == {"branch loss=ms",
                                                                    "branch loss=pa"}
    assert set(report.analyses[0].params) == {"loss", "lr"}
    ms = next(a for a in report.analyses if a.name == "branch loss=ms")
    pa = next(a for a in report.analyses if a.name == "branch loss=pa")
    assert max(ms.importance, key=ms.importance.get) == "margin[ms]"
    assert max(pa.importance, key=pa.importance.get) == "lr"
    assert "loss" not in ms.importance  # constant within the branch


def test_the_command_prints_saves_and_refuses_a_folder_without_a_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "dmlsearch-demo"
    results.mkdir()
    study = known_study(f"sqlite:///{results / 'optuna.db'}", results.name)
    study.ask()  # an interrupted study: a trial left RUNNING, with no value, is left out
    assert importance_command(results) == 0
    out = capsys.readouterr().out
    assert "common parameters (150 trials)" in out and "x x y" in out
    body = json.loads((results / "importance" / "importance.json").read_text())
    assert body["analyses"][0]["interactions"][0]["params"] == ["x", "y"]
    pngs = sorted(p.name for p in (results / "importance").glob("*.png"))
    assert pngs == ["00_common_parameters_importance.png",
                    "00_common_parameters_interactions.png",
                    "00_common_parameters_marginals.png"]
    with pytest.raises(UserError, match="no Optuna study in .*expected optuna.db"):
        importance_command(tmp_path / "elsewhere")


def _mixed_budgets(complete: int, pruned: int) -> optuna.Study:
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


def test_importance_analyses_one_budget_and_says_which() -> None:
    study = _mixed_budgets(complete=30, pruned=60)
    full = analyse_study(study, min_trials=8)
    assert full.budget == "full budget" and full.trials == 30
    assert full.left_out == {"pruned": 60}
    assert max(full.analyses[0].importance, key=full.analyses[0].importance.get) == "x"
    early = analyse_study(study, min_trials=8, at_step=1)
    assert early.budget == "epoch 1" and early.trials == 90 and early.left_out == {}
    assert max(early.analyses[0].importance, key=early.analyses[0].importance.get) == "y"


def test_too_few_full_budget_trials_is_said_not_explained() -> None:
    report = analyse_study(_mixed_budgets(complete=3, pruned=60), min_trials=8)
    assert report.analyses == []
    assert report.skipped == ["all trials: 3 at full budget (needs 8); 60 trials were pruned: "
                              "`dmlsearch importance --at-epoch E` analyses every trial at "
                              "epoch E"]

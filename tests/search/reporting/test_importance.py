"""fANOVA importance on synthetic objectives whose important parameters and interactions are
known, branch by branch for conditional spaces, and the ``importance`` command's outputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest

from dmlsearch.search.reporting import report_command
from dmlsearch.search.reporting.importance import OPTUNA_NOTE
from dmlsearch.search.reporting.importance import analyse_study
from dmlsearch.search.reporting.importance import importance_command
from dmlsearch.search.reporting.importance import render_importance
from dmlsearch.search.reporting.importance import skipped_line
from dmlsearch.trainables.errors import UserError
from tests.helpers import known_study
from tests.search.reporting._studies import mixed_budgets

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_the_known_important_parameters_and_pair_come_first() -> None:
    report = analyse_study(known_study())
    (common,) = report.analyses
    ranked = sorted(common.importance, key=lambda p: -common.importance[p])
    assert ranked[:2] == ["x", "c"]
    assert common.importance["z"] < 0.05
    # one scale: the parameters alone and the pairs share the variance, never more than all of it
    assert sum(common.importance.values()) + sum(common.interactions.values()) < 1.05
    top_pair = max(common.interactions, key=common.interactions.get)
    assert set(top_pair) == {"x", "y"}
    assert common.interactions[top_pair] > 5 * max(
        v for k, v in common.interactions.items() if k != top_pair)
    xs, ys = common.marginals["x"]
    assert ys[-1] - ys[0] > 5  # the marginal curve of x rises by about 10
    assert np.all(np.diff(xs) > 0)
    assert common.fit_r2 is not None and common.fit_r2 > 0.8 and common.caveats == []


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
    assert "loss" not in ms.params and ms.fixed == {"loss": "ms"}


def test_the_command_prints_saves_and_refuses_a_folder_without_a_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "dmlsearch-demo"
    results.mkdir()
    study = known_study(f"sqlite:///{results / 'optuna.db'}", results.name)
    study.ask()  # an interrupted study: a trial left RUNNING, with no value, is left out
    assert importance_command(results) == 0
    out = capsys.readouterr().out
    assert "common parameters: 150 trials at full budget" in out and "x x y" in out
    body = json.loads((results / "importance" / "importance.json").read_text())
    assert body["analyses"][0]["interactions"][0]["params"] == ["x", "y"]
    pngs = sorted(p.name for p in (results / "importance").glob("*.png"))
    assert pngs == ["00_common_parameters_importance.png",
                    "00_common_parameters_interactions.png",
                    "00_common_parameters_marginals.png"]
    with pytest.raises(UserError, match="no Optuna study in .*expected optuna.db"):
        importance_command(tmp_path / "elsewhere")


def test_importance_analyses_one_budget_and_says_which() -> None:
    study = mixed_budgets(complete=30, pruned=60)
    full = analyse_study(study, min_trials=8)
    assert full.budget == "full budget" and full.trials == 30
    assert full.left_out == {"pruned": 60}
    assert max(full.analyses[0].importance, key=full.analyses[0].importance.get) == "x"
    early = analyse_study(study, min_trials=8, at_step=1)
    assert early.budget == "epoch 1" and early.trials == 90 and early.left_out == {}
    assert max(early.analyses[0].importance, key=early.analyses[0].importance.get) == "y"


def test_too_few_full_budget_trials_is_said_with_the_epoch_that_has_enough() -> None:
    report = analyse_study(mixed_budgets(complete=3, pruned=60), min_trials=8)
    assert report.analyses == []
    assert skipped_line(report, "DIR") == (
        "3 trials at full budget, needs 8; `dmlsearch importance DIR --at-epoch 1` analyses "
        "the 63 trials that reached epoch 1")
    assert analyse_study(mixed_budgets(complete=3, pruned=0), min_trials=8).advice("D") == ""


def test_a_large_group_is_analysed_on_a_seeded_sample_that_finds_the_same_order() -> None:
    """fANOVA's cost grows faster than the trials: above ``max_trials`` a seeded random sample
    of that many is analysed, which the report says, and it ranks the parameters as all 150
    do."""
    from dmlsearch.search.reporting.importance import analyse

    trials = list(known_study().trials)
    full = analyse(trials, ["x", "y", "z", "c"], name="all", seed=0)
    sampled = analyse(trials, ["x", "y", "z", "c"], name="all", seed=0, max_trials=100)
    again = analyse(trials, ["x", "y", "z", "c"], name="all", seed=0, max_trials=100)
    assert full.sampled_from is None and full.trials == 150
    assert sampled.sampled_from == 150 and sampled.trials == 100
    assert sampled.importance == again.importance  # seeded
    order = sorted(full.importance, key=lambda p: -full.importance[p])[:2]
    assert sorted(sampled.importance, key=lambda p: -sampled.importance[p])[:2] == order
    assert abs(sampled.importance["x"] - full.importance["x"]) < 0.1


def _branches(ms: int, pa: int) -> optuna.Study:
    """A loss per branch: MultiSimilarity's margin and ProxyAnchor's alpha exist only there."""
    study = optuna.create_study(direction="maximize")
    rng = np.random.default_rng(2)
    loss = optuna.distributions.CategoricalDistribution(["ms", "pa"])
    lr = optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    extra = {"ms": ("margin[ms]", optuna.distributions.FloatDistribution(0.0, 1.0)),
             "pa": ("alpha[pa]", optuna.distributions.FloatDistribution(2.0, 100.0))}
    for name, count in (("ms", ms), ("pa", pa)):
        key, dist = extra[name]
        for _ in range(count):
            params = {"loss": name, "lr": float(np.exp(rng.uniform(np.log(1e-4), np.log(1e-2)))),
                      key: float(rng.uniform(dist.low, dist.high))}
            study.add_trial(optuna.trial.create_trial(
                params=params, distributions={"loss": loss, "lr": lr, key: dist},
                value=float(np.log10(params["lr"]) + rng.normal(0, 0.1))))
    return study


def test_branch_tables_name_what_is_fixed_and_carry_their_trials_and_caveat() -> None:
    """Issue 35: branch tables from 9 trials with no caveat, and a meaningless 'loss 0.000' row
    per branch."""
    report = analyse_study(_branches(ms=40, pa=9), min_trials=8, metric="map@r")
    pa = next(a for a in report.analyses if a.name == "branch loss=pa")
    assert pa.params == ["alpha[pa]", "lr"] and pa.fixed == {"loss": "pa"}
    assert pa.caveats[0] == "9 trials for 2 parameters, fewer than 10 per parameter"
    text = render_importance(report)
    block = text.split("branch loss=pa: ")[1].split("\n\n")[0]
    assert block.startswith("9 trials at full budget; fixed here: loss=pa\ncaveat: 9 trials for "
                            "2 parameters, fewer than 10 per parameter")
    rows = [line.split()[0] for line in block.splitlines() if line.split()
            and line.split()[0] in ("loss", "lr", "alpha[pa]")]
    assert sorted(rows) == ["alpha[pa]", "lr"]  # no row for the loss the branch fixes
    ms = next(a for a in report.analyses if a.name == "branch loss=ms")
    assert "branch loss=ms: 40 trials at full budget; fixed here: loss=ms\nparameter" in text
    assert ms.caveats == []
    body = report.to_json()["analyses"]
    assert [a["caveats"] != [] for a in body] == [False, False, True]


def test_the_output_explains_its_one_measure_and_how_optunas_differs() -> None:
    """Issue 35: 'importance' and 'main effect' columns that disagreed, explained by a pointer
    to a source file; Optuna's dashboard ranking another answer, with no reason given."""
    report = analyse_study(_branches(ms=40, pa=40), min_trials=8, metric="map@r")
    text = render_importance(report)
    assert text.startswith("Importance of validation map@r (fANOVA) in study ")
    assert "main effect" not in text and ".py" not in text
    headers = [line.split() for line in text.splitlines() if line.startswith("parameter ")]
    assert headers == [["parameter", "importance", "scale"]] * 3
    flat = " ".join(text.split())
    assert ("importance: the share of the variance of validation map@r that a parameter "
            "explains alone") in flat
    assert " ".join(OPTUNA_NOTE.split()) in flat and "PED-ANOVA" in OPTUNA_NOTE
    for a in report.analyses:  # one scale: what the parameters and pairs explain is at most all
        assert sum(a.importance.values()) + sum(a.interactions.values()) < 1.05


@pytest.mark.parametrize(("call", "message"), [
    (lambda d: importance_command(d, min_trials=1), "--min-trials must be an integer >= 2, got 1"),
    (lambda d: importance_command(d, at_epoch=0),
     "--at-epoch must be an integer >= 1 (epochs over all folds), got 0"),
    (lambda d: report_command(d, top=0), "--top must be an integer >= 1, got 0"),
])
def test_the_commands_take_the_options_table_s_ranges(tmp_path: Path, call: Any,
                                                      message: str) -> None:
    """Called directly (the Python API) as from the command line: one checker, one message."""
    with pytest.raises(UserError) as refused:
        call(tmp_path)
    assert str(refused.value) == message


def test_the_command_explains_the_searchs_metric_at_the_epoch_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    results = tmp_path / "res"
    results.mkdir()
    (results / "search.yaml").write_text("base:\n  metric: map@r\n")
    stored = optuna.create_study(storage=f"sqlite:///{results / 'optuna.db'}",
                                 study_name="res", direction="maximize")
    stored.add_trials(mixed_budgets(complete=3, pruned=6).trials)
    with pytest.raises(UserError) as refused:
        importance_command(results)
    assert str(refused.value) == (
        f"nothing to analyse in {results}: 3 trials at full budget, needs 8; `dmlsearch "
        f"importance {results} --at-epoch 1` analyses the 9 trials that reached epoch 1")
    assert importance_command(results, at_epoch=1) == 0
    out = capsys.readouterr().out
    assert out.startswith("Importance of validation map@r (fANOVA) in study res: 9 trials at "
                          "epoch 1\n")
    body = json.loads((results / "importance" / "importance.json").read_text())
    assert body["objective"] == "validation map@r" and body["budget"] == "epoch 1"


def test_the_search_says_what_became_of_its_importance(tmp_path: Path) -> None:
    """Issue 35: the quick start printed 'Drawing the study's plots and importance: done in 0:00'
    and wrote no importance/, with no word why."""
    from dmlsearch.search.lifecycle import study_pictures
    from dmlsearch.search.prepare import Prepared
    from dmlsearch.search.study_dir import StudyDir
    from dmlsearch.search.tracking import Tracker
    from dmlsearch.spaces import load_space
    from tests.helpers import small_config

    said = []
    for complete in (3, 8):
        study_dir = StudyDir(tmp_path / f"res{complete}")
        study_dir.path.mkdir()
        stored = optuna.create_study(storage=study_dir.optuna_url, study_name=study_dir.name,
                                     direction="maximize")
        stored.add_trials(mixed_budgets(complete=complete, pruned=6).trials)
        tracker = Tracker(study_dir.default_tracking_uri, study_dir.name,
                          artifact_location=study_dir.artifacts)
        tracker.start_study(name=study_dir.name, params={}, tags={})
        prepared = Prepared(space=load_space("quickstart"), base=small_config(metric="map@r"),
                            max_iterations=2, trials=10, points=[])
        said.append(study_pictures([], prepared, study_dir, tracker))
    assert said[0] == (f"importance skipped: 3 trials at full budget, needs 8; `dmlsearch "
                       f"importance {tmp_path / 'res3'} --at-epoch 1` analyses the 9 trials "
                       "that reached epoch 1")
    assert said[1] == (f"importance of 8 trials at full budget in "
                       f"{tmp_path / 'res8' / 'importance'}")
    assert not (tmp_path / "res3" / "importance").exists()
    assert (tmp_path / "res8" / "importance" / "importance.json").is_file()

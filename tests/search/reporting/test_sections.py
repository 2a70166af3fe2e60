"""The parts of a report, built once from a summary for the terminal and for report.md."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from dmlsearch.search.reporting import sections
from dmlsearch.search.results import EnsembleSummary
from dmlsearch.search.results import ParetoSummary
from dmlsearch.search.results import RetrainSummary
from dmlsearch.search.results import read_summary
from tests.helpers import make_study
from tests.helpers import trial_record


def _summary(tmp_path: Path, **fields: object):  # type: ignore[no-untyped-def]
    trials = [trial_record("a", 0.5, config={"lr": 1e-3, "loss": "ms"}),
              trial_record("b", 0.7, fits=4, score_std=0.02, config={"lr": 3e-3, "loss": "pa"},
                           cost=64.0),
              trial_record("c", 0.3, state="pruned", stopped_by="asha", cost=32.0),
              trial_record("d", None, state="failed")]
    return read_summary(make_study(tmp_path, metric="map@r", trials=trials,
                                   searched=["loss", "lr"], best="b", **fields))


def test_scores_states_and_the_best_line(tmp_path: Path) -> None:
    summary = _summary(tmp_path)
    assert sections.score_text(summary.trial("b")) == "0.7000 ± 0.0200"  # 4 fits
    assert sections.score_text(summary.trial("a")) == "0.5000"
    assert sections.score_text(summary.trial("d")) == "-"
    assert sections.states_text(summary) == "4 trials (2 completed, 1 pruned by asha, 1 failed)"
    assert sections.best_line(summary) == "Best trial b: val map@r 0.7000 with loss=pa, lr=0.003"


def test_the_leaderboard_ranks_scored_trials_and_lists_failures_last(tmp_path: Path) -> None:
    summary = _summary(tmp_path)
    board = sections.leaderboard(summary, params=False, unscored=True)
    assert [row[1] for row in board.rows] == ["b", "a", "c", "d"]
    assert board.rows[-1][0] == "-" and board.rows[-1][-1] == "TrialFailed: loss became nan"
    top = sections.leaderboard(summary, top=1)
    assert top.header[-2:] == ["loss", "lr"] and [r[1] for r in top.rows] == ["b"]


def test_retrains_ensemble_and_pareto(tmp_path: Path) -> None:
    one = RetrainSummary(trial_id="b", rank=1, seeds=[0], test_metrics=[{"map@r": 0.3}],
                         mean={"map@r": 0.3}, ci95={"map@r": 0.0})
    assert sections.retrain_table(_summary(tmp_path / "1", retrains=[one])) is None
    # The top 2 with one seed each: scores without an interval, and the heading says why.
    other = dataclasses.replace(one, trial_id="a", rank=2, mean={"map@r": 0.25})
    top = _summary(tmp_path / "1b", retrains=[one, other])
    assert sections.retrain_table(top).rows == [["1", "b", "1", "0.3000"],
                                                ["2", "a", "1", "0.2500"]]
    assert sections.seeds_text(top) == "with one seed each; test score (one seed: no interval)"
    two = RetrainSummary(trial_id="b", rank=1, seeds=[0, 1], test_metrics=[{}, {}],
                         mean={"recall@1": 0.6, "map@r": 0.3}, ci95={"recall@1": 0.1,
                                                                     "map@r": 0.05})
    table = sections.retrain_table(_summary(tmp_path / "2", retrains=[two]))
    assert table.header == ["rank", "trial", "seeds", "map@r", "recall@1"]
    assert table.rows == [["1", "b", "2", "0.3000 ± 0.0500", "0.6000 ± 0.1000"]]
    ensemble = EnsembleSummary(metrics={"ensemble_map@r": 0.4, "folds_mean_map@r": 0.35,
                                        "folds_std_map@r": 0.01},
                               fold_test_metrics=[{}, {}], fold_best_epochs=[2, 3])
    lines = sections.ensemble_lines(_summary(tmp_path / "3", fold_ensemble=ensemble))
    assert lines == ["Fold models on the test classes (2 folds), mean ± std: map@r 0.3500 ± "
                     "0.0100", "Their ensemble (L2-normalised embeddings concatenated): "
                     "map@r 0.4000"]
    pareto = _summary(tmp_path / "4", pareto=ParetoSummary(cost="embedding_size",
                                                           trial_ids=["b", "c"]))
    assert sections.pareto_line(pareto).startswith(
        "Pareto front (val map@r against embedding_size): b (0.7000, 64), c (0.3000, 32)")


def _rung_study(tmp_path: Path, early: list[float], final: list[float], name: str):
    trials = [trial_record(f"t{i}", f, curve=[e, (e + f) / 2, f])
              for i, (e, f) in enumerate(zip(early, final))]
    trials.append(trial_record("p", 0.9, state="pruned", curve=[0.9], iterations=1))
    folder = make_study(tmp_path, metric="map@r", trials=trials, searched=["lr"], name=name)
    summary = read_summary(folder)
    return dataclasses.replace(summary, study=dataclasses.replace(summary.study, first_rung=1))


FINAL = [0.50, 0.55, 0.60, 0.62, 0.64, 0.70, 0.71, 0.75, 0.78, 0.80]
AGREE = [0.20, 0.22, 0.30, 0.28, 0.35, 0.40, 0.41, 0.45, 0.44, 0.50]


def test_early_stopping_evidence_is_spearman_over_the_trials_that_finished(
        tmp_path: Path) -> None:
    from scipy.stats import spearmanr

    (line,) = sections.early_stopping_lines(_rung_study(tmp_path, AGREE, FINAL, "a"))
    rho = spearmanr(AGREE, FINAL)[0]  # the pruned trial is left out
    assert f"Spearman ρ = {rho:.2f}" in line and "over 10 trials" in line
    assert "stopping early is safe" in line and "WARNING" not in line
    disagree = list(reversed(AGREE))
    (line,) = sections.early_stopping_lines(_rung_study(tmp_path, disagree, FINAL, "b"))
    assert "WARNING" in line and "--grace-period" in line


def test_a_correlation_of_too_few_trials_is_not_reported(tmp_path: Path) -> None:
    """Issue 35: 'Spearman ρ = 0.10 (p = 0.87)' over 5 trials read as if it meant something.
    Below sections.MIN_RANK_PAIRS trials no ρ is printed, only that there are too few."""
    early, final = [0.30, 0.20, 0.50, 0.40, 0.10], [0.60, 0.70, 0.50, 0.80, 0.65]
    (line,) = sections.early_stopping_lines(_rung_study(tmp_path, early, final, "c"))
    assert "Spearman" not in line and "p =" not in line and "WARNING" not in line
    assert line == ("Early stopping (asha, first decision at epoch 1): only 5 trials trained "
                    "to the end; at least 10 are needed to judge whether the scores at epoch 1 "
                    "predict the final ones, so this search cannot tell whether stopping "
                    "trials early was safe.")
    nine = sections.early_stopping_lines(_rung_study(tmp_path, AGREE[:9], FINAL[:9], "d"))
    assert "at least 10 are needed" in nine[0] and "Spearman" not in nine[0]


def test_a_correlation_that_chance_could_give_is_not_called_safe(tmp_path: Path) -> None:
    from scipy.stats import spearmanr

    early = [0.30, 0.20, 0.25, 0.45, 0.35, 0.32, 0.28, 0.50, 0.31, 0.48]
    rho, p = spearmanr(early, FINAL)
    assert 0.5 <= rho and p >= 0.05  # agrees somewhat, as chance could over 10 trials
    (line,) = sections.early_stopping_lines(_rung_study(tmp_path, early, FINAL, "e"))
    assert f"Spearman ρ = {rho:.2f}" in line and "too few to be sure" in line
    assert "is safe" not in line and "WARNING" not in line


def test_early_scores_all_alike_say_so_and_warn_nothing(tmp_path: Path) -> None:
    """Scores all equal at the first decision (or at the end), as a replay of a coarse table
    gives: no ρ to report (scipy would give NaN with a ConstantInputWarning)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (line,) = sections.early_stopping_lines(_rung_study(tmp_path, [0.3] * 10, FINAL, "f"))
        assert "all scored 0.3000 at epoch 1" in line and "cannot be compared" in line
        (line,) = sections.early_stopping_lines(_rung_study(tmp_path, FINAL, [0.6] * 10, "g"))
        assert "all scored 0.6000 at their end" in line
    assert "Spearman" not in line and "WARNING" not in line


def test_a_search_too_small_to_trust_its_pick_says_so_and_how_to_fix_it(tmp_path: Path) -> None:
    from dmlsearch.search.results import Budget
    from dmlsearch.search.results import StudyInfo

    summary = _summary(tmp_path)  # 2 trials trained to their end, 40 epochs, 2 settings
    study = dataclasses.replace(summary.study, max_iterations=8)
    small = dataclasses.replace(summary, study=study)
    (line,) = sections.trust_lines(small)
    assert line.startswith("WARNING: this search may be too small to trust its pick")
    assert "only 2 trials trained to the end, so the pick is the best of 2" in line
    assert "complete trainings" not in line  # 5.0 of them for 2 settings: enough
    big = dataclasses.replace(
        small, budget=Budget(trials=4, epochs=400),
        trials=[*small.trials, trial_record("e", 0.6), trial_record("f", 0.65)])
    assert sections.trust_lines(big) == []
    wide = dataclasses.replace(big, study=dataclasses.replace(
        study, searched=tuple(f"s{i}" for i in range(30))))  # 50 trials' worth for 30 settings
    (line,) = sections.trust_lines(wide)
    assert ("its trials trained 400 epochs in all, the work of 50.0 complete trainings (8 "
            "epochs each), for 30 searched settings") in line
    assert "fewer than 2 complete trainings per searched setting (60 here)" in line
    assert "--trials 60 or more" in line
    grid = dataclasses.replace(small, study=dataclasses.replace(study, grid_size=4))
    assert sections.trust_lines(grid) == []  # a grid's pick is the best of its points
    assert isinstance(study, StudyInfo)
    # one of each reads as one: not "1 trials", "1 epochs"
    one = dataclasses.replace(small, trials=small.trials[:1], budget=Budget(trials=1, epochs=1),
                              study=dataclasses.replace(study, max_iterations=1))
    assert sections.states_text(one) == "1 trial (1 completed, 0 pruned, 0 failed)"
    (line,) = sections.trust_lines(one)
    assert "only 1 trial trained to the end, so the pick is the best of 1" in line
    assert "its trials trained 1 epoch in all, the work of 1.0 complete trainings (1 epoch each)" \
        in line


def test_the_mlflow_description_gives_the_sets_and_no_interval_for_one_seed(
        tmp_path: Path) -> None:
    from dmlsearch.search.results import EvalSet

    one = RetrainSummary(trial_id="b", rank=1, seeds=[0], test_metrics=[{}],
                         mean={"map@r": 0.25}, ci95={"map@r": 0.0})
    summary = _summary(tmp_path, retrains=[one], test_set=EvalSet(60, 1200, 1200),
                       validation_set=EvalSet(30, 600, 600, folds=4))
    note = sections.note_markdown(summary)
    assert ("- Best trial b: val map@r 0.7000 (validation set: 30 classes in 4 folds, 600 "
            "queries in all) with loss=pa, lr=0.003") in note
    assert ("- Test set (60 classes, 1,200 queries), tested once: recall@1 0.6100, map@r "
            "0.2500") in note
    assert "±" not in note and "- Validation and test scores are not comparable" in note
    two = dataclasses.replace(one, seeds=[0, 1], ci95={"map@r": 0.02})
    note = sections.note_markdown(dataclasses.replace(summary, retrains=[two]))
    assert "- Test set (60 classes, 1,200 queries), map@r over 2 seeds: 0.2500 ± 0.0200" in note


def test_the_budget_given_is_said_beside_the_trials_run(tmp_path: Path) -> None:
    """Issue 33: ``--trials 10`` is a budget of 10 full trainings' worth of epochs that early
    stopping spreads over more trials: the summary says both what ran and what was given."""
    summary = _summary(tmp_path)
    assert sections.budget_given(summary) == ""  # no budget recorded (an older summary)
    study = dataclasses.replace(summary.study, budget_trials=10, budget_epochs=80,
                                max_iterations=8)
    given = sections.budget_given(dataclasses.replace(summary, study=study))
    assert given == (" of a budget of 80 (--trials 10: 10 full trainings' worth of 8 epochs, "
                     "spread by early stopping over more trials; running trials finish)")
    plain = dataclasses.replace(summary.study, budget_trials=10, budget_epochs=None)
    assert sections.budget_given(dataclasses.replace(summary, study=plain)) == ""
    one = dataclasses.replace(study, budget_trials=1, budget_epochs=8)
    assert sections.budget_given(dataclasses.replace(summary, study=one)).startswith(
        " of a budget of 8 (--trials 1: 1 full training's worth of 8 epochs, ")


def test_epochs_are_said_to_count_folds_and_repeats_only_when_a_trial_has_several(
        tmp_path: Path) -> None:
    """A fixed-split search's report counts plain epochs; a k-fold (or repeated) one says its
    epochs are counted over the fits, as the scheduler counts them."""
    fixed = _summary(tmp_path / "fixed")
    assert [t.fits_planned for t in fixed.trials] == [1, 1, 1, 1]
    assert "epochs trained: " in "\n".join(sections.budget_lines(fixed))
    kfold = [trial_record("a", 0.5, config={"protocol": "kfold", "folds": 4}),
             trial_record("b", 0.4, config={"protocol": "fixed", "folds": 4, "repeats": 3}),
             trial_record("c", 0.3, config={"protocol": "fixed", "folds": 4})]
    assert [t.fits_planned for t in kfold] == [4, 3, 1]
    summary = read_summary(make_study(tmp_path / "kfold", metric="map@r", trials=kfold,
                                      searched=["lr"], best="a"))
    assert "epochs trained (counted over folds and repeats): " in "\n".join(
        sections.budget_lines(summary))

"""The terminal's closing summary of a search."""

from __future__ import annotations

from pathlib import Path

from dmlsearch.search.reporting.console import render_summary
from dmlsearch.search.results import EvalSet
from dmlsearch.search.results import RetrainSummary
from dmlsearch.search.results import read_summary
from tests.helpers import make_study
from tests.helpers import trial_record


def test_the_summary_says_what_ran_what_won_and_where_it_is(tmp_path: Path) -> None:
    retrain = RetrainSummary(trial_id="a", rank=1, seeds=[0], test_metrics=[{}],
                             mean={"map@r": 0.25}, ci95={"map@r": 0.0}, epochs=3, seconds=12.0)
    study_dir = make_study(tmp_path, metric="map@r", searched=["lr"], best="a",
                           trials=[trial_record("a", 0.5, config={"lr": 1e-3}),
                                   trial_record("b", 0.2, state="pruned", stopped_by="asha"),
                                   trial_record("c", None, state="failed")],
                           retrains=[retrain], registered_model="dmlsearch-res/1",
                           repeats_answered=3)
    text = render_summary(read_summary(study_dir), results=str(study_dir.path),
                          browse="mlflow ui --backend-store-uri X")
    assert ("Search finished in 161 s: 3 trials (1 completed, 1 pruned by asha, 1 failed), "
            "40 epochs trained; 3 proposal(s) repeated a trained configuration") in text
    assert "Best trial a: val map@r 0.5000 with lr=0.001" in text
    assert "Retrained on all training classes for 3 epochs (12 s)" in text
    assert "recall@1 0.6100  map@r 0.2500" in text
    assert "dmlsearch-res/1" in text and f"dmlsearch train {study_dir.best_config}" in text
    assert text.rstrip().endswith("then open http://127.0.0.1:5000")
    assert "TrialFailed: loss became nan" in text  # the failure, with its reason


def test_a_search_without_a_score_says_so(tmp_path: Path) -> None:
    study_dir = make_study(tmp_path, metric="eer", searched=["lr"],
                           trials=[trial_record("c", None, state="failed")])
    text = render_summary(read_summary(study_dir), results="r", browse="b")
    assert "No trial produced a validation score: nothing to retrain or export." in text
    assert "Exported configuration" not in text


def test_the_scores_come_with_the_size_of_their_sets(tmp_path: Path) -> None:
    """Issue 35: validation and test scores printed together with no word of how many classes
    and queries each was measured on, and num_queries printed as if it were a metric."""
    retrain = RetrainSummary(trial_id="a", rank=1, seeds=[0], test_metrics=[{}],
                             mean={"map@r": 0.6059}, ci95={"map@r": 0.0}, epochs=8)
    study_dir = make_study(tmp_path, metric="map@r", searched=["lr"], best="a",
                           trials=[trial_record("a", 0.8259, config={"lr": 1e-3})],
                           retrains=[retrain],
                           test_metrics={"recall@1": 0.7, "map@r": 0.6059, "num_queries": 1200},
                           validation_set=EvalSet(classes=12, images=240, queries=240),
                           test_set=EvalSet(classes=60, images=1200, queries=1200))
    text = render_summary(read_summary(study_dir), results="r", browse="b")
    lines = text.splitlines()
    assert ("Best trial a: val map@r 0.8259 (validation set: 12 classes, 240 queries) with "
            "lr=0.001") in lines
    heading = next(i for i, line in enumerate(lines) if line.startswith("Retrained"))
    assert lines[heading].endswith("; test set (60 classes, 1,200 queries), evaluated once:")
    assert lines[heading + 1] == "  recall@1 0.7000  map@r 0.6059"
    assert lines[heading + 2].startswith("Validation and test scores are not comparable")
    assert "num_queries" not in text


def test_k_fold_validation_and_verification_pairs_are_said_as_sizes() -> None:
    from dmlsearch.search.reporting.sections import set_text

    folds = EvalSet(classes=120, images=2400, queries=2400, folds=4)
    assert set_text(folds) == "120 classes in 4 folds, 2,400 queries in all"
    test = EvalSet(classes=40, images=800, queries=800)
    assert set_text(test, {"eer": 0.1, "verify_trials": 37720}) == (
        "40 classes, 800 queries, 37,720 verification pairs")


def test_a_summary_written_before_the_sets_still_says_what_its_metrics_counted(
        tmp_path: Path) -> None:
    study_dir = make_study(tmp_path, metric="map@r", searched=["lr"], best="a",
                           trials=[trial_record("a", 0.5, config={"lr": 1e-3})],
                           test_metrics={"map@r": 0.6, "num_queries": 1200})
    text = render_summary(read_summary(study_dir), results="r", browse="b")
    assert "; test classes (1,200 queries), evaluated once:\n  map@r 0.6000\n" in text
    assert "Best trial a: val map@r 0.5000 with lr=0.001" in text  # its size unknown: not said
    assert "not comparable" not in text

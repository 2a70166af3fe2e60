"""The terminal's closing summary of a search."""

from __future__ import annotations

from pathlib import Path

from dmlsearch.search.reporting.console import render_summary
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

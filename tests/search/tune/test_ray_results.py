"""Ray Tune's results as trial records: one mapping for a finished search's result grid and an
interrupted search's trial folders."""

from __future__ import annotations

import math

from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.ray_results import record_from_result
from dmlsearch.search.tune.ray_results import short_reason


def test_a_k_fold_trials_last_result_becomes_its_record() -> None:
    last = {"score": 0.42, "score_std": 0.03, "fold0_best": 0.4, "fold1_best": 0.44,
            "best_epoch": 3, "training_iteration": 8, "time_total_s": 20.0,
            "timestamp": 1000.0, "cost": 64}
    record = record_from_result(last, config={"lr": 1e-3}, trial_id="a",
                                state=TrialState.PRUNED, stopped_by="asha", path="/r/t")
    assert (record.score, record.score_std, record.fits, record.best_epoch) == (0.42, 0.03, 2, 3)
    assert (record.iterations, record.seconds, record.started) == (8, 20.0, 980.0)
    assert record.cost == 64.0 and record.stopped_by == "asha" and record.path == "/r/t"


def test_a_trial_never_evaluated_has_no_score_and_only_pruned_trials_name_who_stopped() -> None:
    record = record_from_result({"score": -math.inf, "best_epoch": 0}, config={},
                                trial_id="b", state=TrialState.COMPLETED, stopped_by="asha")
    assert record.score is None and record.best_epoch is None and not record.scored
    assert record.stopped_by is None and record.fits == 1 and record.started is None


def test_the_reason_is_the_line_that_says_what_went_wrong() -> None:
    text = ("Traceback (most recent call last):\n  File \"x.py\", line 3\n"
            "dmlsearch.trainables.errors.TrialFailed: loss became nan at epoch 2\n\n")
    assert short_reason(text) == ("dmlsearch.trainables.errors.TrialFailed: loss became nan at "
                                  "epoch 2")
    assert short_reason("") == "unknown error"
    assert len(short_reason("RuntimeError: " + "x" * 2000)) == 500

"""A results folder read back: a finished search's summary.json, or what an interrupted search's
Ray trial folders hold (completed, unfinished, failed), described by its search.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmlsearch.search.readback import load_summary
from dmlsearch.search.results import TrialState
from dmlsearch.trainables.errors import UserError
from tests.helpers import add_ray_trial
from tests.helpers import make_study
from tests.helpers import trial_record


def test_a_finished_search_is_its_summary(tmp_path: Path) -> None:
    made = make_study(tmp_path, metric="eer", trials=[trial_record("a", 0.1)], searched=["lr"],
                      best="a")
    study_dir, summary = load_summary(made.path)
    assert study_dir.path == made.path and summary.finished
    assert summary.study.mode == "min" and summary.best_trial == "a"


def test_an_interrupted_search_is_read_from_its_trial_folders(tmp_path: Path) -> None:
    made = make_study(tmp_path, metric="map@r", trials=[], searched=["loss", "lr"],
                      finished=False)
    add_ray_trial(made, "t0", {"loss": "ms", "lr": 1e-3},
                  [{"score": 0.2, "training_iteration": 1},
                   {"score": 0.3, "best_epoch": 2, "trial_finished": 1,
                    "training_iteration": 2, "time_total_s": 5.0, "timestamp": 100.0}])
    add_ray_trial(made, "t1", {"loss": "pa", "lr": 1e-4},
                  [{"score": 0.6, "best_epoch": 1, "training_iteration": 1}])
    add_ray_trial(made, "t2", {"loss": "pa", "lr": 1e-2}, [{"score": float("-inf")}],
                  error="Traceback ...\ndmlsearch.trainables.errors.TrialFailed: loss became nan")
    _, summary = load_summary(made.path)
    assert not summary.finished
    states = {t.trial_id: t.state for t in summary.trials}
    assert states == {"t0": TrialState.COMPLETED, "t1": TrialState.UNFINISHED,
                      "t2": TrialState.FAILED}
    t0 = summary.trial("t0")
    assert (t0.score, t0.best_epoch, t0.iterations, t0.started) == (0.3, 2, 2, 95.0)
    assert summary.trial("t2").reason.endswith("TrialFailed: loss became nan")
    assert summary.study.searched == ("loss", "lr") and summary.study.metric == "map@r"


def test_a_folder_with_no_search_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nope \(no such folder\): expected summary.json"):
        load_summary(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no search results in .*empty"):
        load_summary(tmp_path / "empty")

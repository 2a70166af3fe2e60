"""The Optuna study in its storage (real SQLite): created before the searcher needs it, closed
after a stopped driver (nothing left RUNNING), loaded for analysis."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tune.study import REASON
from dmlsearch.search.tune.study import REPEATS_ANSWERED
from dmlsearch.search.tune.study import create_storage
from dmlsearch.search.tune.study import load_study
from dmlsearch.search.tune.study import settle_study
from dmlsearch.trainables.errors import UserError


def test_a_stopped_drivers_open_trials_end_as_failures(tmp_path: Path) -> None:
    study_dir = StudyDir(tmp_path / "s")
    study_dir.path.mkdir()
    create_storage(study_dir.optuna_url)
    assert study_dir.optuna_db.is_file()
    assert settle_study(study_dir.optuna_url, study_dir.name) == 0  # no study yet
    study = optuna.create_study(study_name=study_dir.name, storage=study_dir.optuna_url)
    done = study.ask()
    study.tell(done, 0.5)
    study.ask()  # asked just before the driver stopped: it never ran
    study.set_user_attr(REPEATS_ANSWERED, 3)
    assert settle_study(study_dir.optuna_url, study_dir.name) == 3
    states = [t.state for t in load_study(study_dir).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert "interrupted" in load_study(study_dir).trials[1].user_attrs[REASON]


def test_loading_a_folder_without_a_study_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no Optuna study in .*expected optuna.db"):
        load_study(StudyDir(tmp_path))
    url = StudyDir(tmp_path).optuna_url
    for name in ("a", "b"):
        optuna.create_study(study_name=name, storage=url)
    with pytest.raises(UserError, match=r"holds studies \['a', 'b'\], none named"):
        load_study(StudyDir(tmp_path))

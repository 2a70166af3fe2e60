"""``run`` and ``resume`` as a user meets them before any trial: a store that cannot be set up
leaves nothing behind (and no Ray running), a results folder that is a file is refused, and
resume refuses what it cannot continue. (Whole searches: tests/e2e.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dmlsearch.search.options import SearchOptions
from dmlsearch.search.run import resume_search
from dmlsearch.search.run import run_search
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.trainables.errors import UserError
from tests.helpers import free_port


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DMLSEARCH_CACHE", str(tmp_path / "cache"))


def test_a_store_that_does_not_answer_leaves_no_folder_and_no_ray(tmp_path: Path) -> None:
    out = tmp_path / "results"
    opts = SearchOptions(out=out, mlflow_uri=f"http://127.0.0.1:{free_port()}",
                         sets=(("epochs", 1),))
    with pytest.raises(UserError, match="did not answer"):
        run_search(opts, echo=lambda _: None)
    assert not out.exists()
    ray = sys.modules.get("ray")
    assert ray is None or not ray.is_initialized()


def test_out_that_is_a_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    (tmp_path / "results").write_text("mine")
    with pytest.raises(UserError, match="is a file; give a new or empty folder"):
        run_search(SearchOptions(out=tmp_path / "results"), echo=lambda _: None)
    assert (tmp_path / "results").read_text() == "mine"


def test_resume_refuses_what_it_cannot_continue(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no search to resume .* expected the search.yaml"):
        resume_search(tmp_path / "nope", echo=lambda _: None)
    finished = StudyDir(tmp_path / "finished")
    finished.path.mkdir()
    finished.write_resolved({"options": {}})
    finished.summary_json.write_text("{}")
    with pytest.raises(UserError, match="finished already"):
        resume_search(finished.path, echo=lambda _: None)
    started = StudyDir(tmp_path / "started")
    started.path.mkdir()
    started.write_resolved({"options": SearchOptions(sets=(("epochs", 1),)).to_json()})
    with pytest.raises(UserError, match="stopped before Ray Tune saved any state"):
        resume_search(started.path, echo=lambda _: None)


def test_trials_are_a_budget_that_early_stopping_spreads_over_more_trials() -> None:
    """``--trials N``: N trials' worth of epochs; with a scheduler that stops trials after the
    first rung, room for as many trials as that budget funds; without one, N trials; a grid
    study, its points."""
    from dmlsearch.search.lifecycle import trial_budget
    from dmlsearch.search.tune import max_trials
    from tests.helpers import tune_settings

    asha = trial_budget(tune_settings(max_iterations=8, grace_period=2), 15, grid=False)
    assert asha.max_epochs == 15 * 8 and asha.num_samples == 15 * 8 // 2
    assert max_trials(15, tune_settings(max_iterations=8, grace_period=3)) == 40  # ceil
    none = trial_budget(tune_settings(max_iterations=8, scheduler="none"), 15, grid=False)
    assert none.max_epochs == 15 * 8 and none.num_samples == 15
    capped = trial_budget(tune_settings(max_iterations=8, max_epochs=50), 15, grid=False)
    assert capped.max_epochs == 50  # --epoch-budget below the trials' worth wins
    grid = trial_budget(tune_settings(num_samples=7, max_iterations=8), 15, grid=True)
    assert grid.num_samples == 7 and grid.max_epochs is None
    kept = trial_budget(tune_settings(max_iterations=8, scheduler="none"), 15, grid=False,
                        kept=2)  # --intensify 2: two trainings' worth kept for second seeds
    assert kept.max_epochs == 13 * 8 and kept.num_samples == 13

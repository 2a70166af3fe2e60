"""A search or comparison stopped by Ctrl-C or an error (``lifecycle``): every MLflow study run
left open ends (KILLED or FAILED) and one that finished keeps its end; a second Ctrl-C while it
closes up still leaves the command saying how to continue. Ray itself is left out here (its
start and stop stood in for by functions that record the call; a real Ctrl-C on a real search:
tests/e2e/test_interrupt.py); the MLflow store is a real SQLite file."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from dmlsearch.search import lifecycle
from dmlsearch.search.lifecycle import QUIET
from dmlsearch.search.lifecycle import ended_on_failure
from dmlsearch.search.lifecycle import run_experiment
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tune import SearchInterrupted


def _ctrl_c_while_ray_stops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []

    def stop() -> None:
        calls.append("shutdown")
        raise KeyboardInterrupt

    monkeypatch.setattr(lifecycle, "init_ray", lambda: calls.append("init"))
    monkeypatch.setattr(lifecycle, "shutdown_ray", stop)
    return calls


def _raise(exc: BaseException) -> Callable[[], None]:
    def run() -> None:
        raise exc
    return run


def test_ctrl_c_while_ray_stops_after_the_trials_says_how_to_continue(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _ctrl_c_while_ray_stops(monkeypatch)
    with pytest.raises(SearchInterrupted) as stopped:
        run_experiment(StudyDir(tmp_path), lambda: [], screen=QUIET, progress=None,
                       keep_ray=False)
    assert calls == ["init", "shutdown"]
    assert str(stopped.value) == ("stopped after the trials, while Ray shut down; continue it "
                                  f"with `dmlsearch resume {tmp_path}`")


def test_a_second_ctrl_c_while_ray_stops_keeps_the_first_ones_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ctrl_c_while_ray_stops(monkeypatch)
    with pytest.raises(SearchInterrupted) as stopped:
        run_experiment(StudyDir(tmp_path), _raise(SearchInterrupted()), screen=QUIET,
                       progress=None, keep_ray=False)
    assert str(stopped.value) == ("Ray Tune saved the experiment; continue it with "
                                  f"`dmlsearch resume {tmp_path}`")
    assert stopped.value.saved


def test_an_error_is_not_hidden_by_a_ctrl_c_while_ray_stops(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _ctrl_c_while_ray_stops(monkeypatch)
    with pytest.raises(RuntimeError, match="the trials broke"):
        run_experiment(StudyDir(tmp_path), _raise(RuntimeError("the trials broke")),
                       screen=QUIET, progress=None, keep_ray=False)


def test_a_second_ctrl_c_while_the_runs_close_stops_the_closing_not_the_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first, second = Tracker(uri, "compare", method="tpe"), Tracker(uri, "compare", method="rs")
    for tracker in (first, second):
        tracker.start_study(name="study", params={}, tags={})

    def ctrl_c() -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(first, "close_dangling", ctrl_c)
    with pytest.raises(SearchInterrupted, match="continue it with"), \
            ended_on_failure(first, second):
        raise SearchInterrupted("Ray Tune saved the experiment; continue it with ...")
    assert second.study_open  # not closed: the resume takes it up (attach_study)


def _study_status(tracker: Tracker) -> str:
    assert tracker.parent_id is not None
    return tracker.client.get_run(tracker.parent_id).info.status


@pytest.mark.parametrize(("stop", "open_ends"), [(KeyboardInterrupt, "KILLED"),
                                                 (RuntimeError, "FAILED")])
def test_a_stopped_comparison_ends_every_study_run_left_open(
        tmp_path: Path, stop: type[BaseException], open_ends: str) -> None:
    """Ctrl-C (or an error) in a comparison ends every method's study run still open, and the
    comparison's, but not one that finished before; a resume reopens only the unfinished."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    waiting, done = Tracker(uri, "compare", method="tpe"), Tracker(uri, "compare", method="rs")
    parent = Tracker(uri, "compare")
    for tracker in (waiting, done, parent):
        tracker.start_study(name="study", params={}, tags={})
    waiting.trial_started("t0", {"lr": 0.1})
    with pytest.raises(stop), ended_on_failure(waiting, done, parent):
        done.end_study(metrics={"best": 0.5})
        raise stop()
    assert [_study_status(t) for t in (waiting, done, parent)] == [open_ends, "FINISHED",
                                                                   open_ends]
    trial = waiting.client.search_runs([waiting.experiment_id], "tags.`dmlsearch.kind` = 'trial'")
    assert [r.info.status for r in trial] == ["KILLED"]  # its trial never came back
    resumed = {m: Tracker(uri, "compare", method=m) for m in ("tpe", "rs")}
    resumed["tpe"].attach_study()
    resumed["rs"].attach_study(reopen=False)  # it finished: its run keeps its end
    assert _study_status(resumed["tpe"]) == "RUNNING" and resumed["tpe"].study_open
    assert _study_status(resumed["rs"]) == "FINISHED" and not resumed["rs"].study_open

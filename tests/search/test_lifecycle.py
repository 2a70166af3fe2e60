"""A second Ctrl-C while a stopped search closes up (``lifecycle``): whatever it cuts short, the
command still says how to continue the search. Ray itself is left out here (its start and
stop stood in for by functions that record the call; a real Ctrl-C on a real search:
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

"""The progress of a search on screen: one line per finished trial without a terminal, a live
status line on one, steps that say how long they took."""

from __future__ import annotations

import io
import re

from rich.console import Console

from dmlsearch.search.reporting.progress import SearchProgress
from dmlsearch.search.reporting.progress import elapsed
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.study import record_number


def _progress(stream: io.StringIO, live: bool = False) -> SearchProgress:
    return SearchProgress(stream, trials=3, metric="map@r", mode="max",
                          searched=["loss", "lr"], concurrency=2, max_iterations=4, live=live)


def _feed(progress: SearchProgress) -> None:
    progress.trial_started("a", {"loss": "ms", "lr": 0.001, "epochs": 4})
    progress.trial_started("b", {"loss": "pa", "lr": 0.01, "epochs": 4})
    progress.trial_result("b", {"training_iteration": 1, "score": 0.2})
    progress.trial_finished("b", "pruned", None)
    for epoch in (1, 2, 3, 4):
        progress.trial_result("a", {"training_iteration": epoch, "score": 0.1 * epoch})
    progress.trial_finished("a", "completed", None)
    progress.trial_started("c", {"loss": "pa", "lr": 1.0})
    progress.trial_finished("c", "failed", "TrialFailed: loss became nan")


def test_without_a_terminal_one_line_per_finished_trial() -> None:
    stream = io.StringIO()
    with _progress(stream) as progress:
        _feed(progress)
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3
    assert re.fullmatch(r"\[1/3\] trial b pruned at epoch 1 of 4: val map@r 0\.2000 "
                        r"\(loss=pa, lr=0\.01\); no trial completed yet; 0:0\d", lines[0])
    assert lines[1].startswith("[2/3] trial a completed: val map@r 0.4000 (loss=ms, lr=0.001); "
                               "best 0.4000 (a)")
    assert lines[2].startswith("[3/3] trial c failed: TrialFailed: loss became nan (loss=pa, "
                               "lr=1); best 0.4000 (a)")


def test_a_trial_has_one_name_and_its_line_every_value_of_its_branch() -> None:
    """Issue 33: the terminal calls a trial what MLflow's run name, Optuna (its trial number)
    and the report call it (``t07``), and shows every searched value of its branch, not the
    first four searched keys of the whole space."""
    stream = io.StringIO()
    searched = ["loss", "lr", "embedding_size", "loss.margin", "loss.alpha", "loss.beta"]
    record_number("9f3e21aa", 7)
    with SearchProgress(stream, trials=2, metric="map@r", mode="max", searched=searched,
                        concurrency=1, max_iterations=2) as progress:
        progress.trial_started("9f3e21aa", {"loss": "proxy_anchor", "lr": 0.001, "epochs": 2,
                                            "embedding_size": 64, "loss.margin": 0.1,
                                            "loss.alpha": 32.0})
        progress.trial_result("9f3e21aa", {"training_iteration": 2, "score": 0.5})
        progress.trial_finished("9f3e21aa", "completed", None)
    line = stream.getvalue().splitlines()[0]
    assert line.startswith("[1/2] trial t07 completed: val map@r 0.5000 (loss=proxy_anchor, "
                           "lr=0.001, embedding_size=64, loss.margin=0.1, loss.alpha=32); "
                           "best 0.5000 (t07)"), line
    record = TrialRecord(trial_id="9f3e21aa", config={}, state=TrialState.COMPLETED, number=7)
    assert record.name == "t07" and TrialRecord.from_json(record.to_json()) == record
    assert TrialRecord(trial_id="9f3e21aa", config={}, state=TrialState.PRUNED).name == \
        "9f3e21aa"


def test_the_live_status_counts_what_ended_and_what_runs() -> None:
    stream = io.StringIO()
    with _progress(stream, live=True) as progress:
        _feed(progress)
        progress.trial_started("d", {"loss": "ms"})
        screen = Console(file=io.StringIO(), width=300)
        screen.print(progress._status())
    status = screen.file.getvalue()
    assert ("3/3 trials done: 1 completed, 1 pruned, 1 failed; 1 running | best val map@r "
            "0.4000 (trial a) | 0:0") in status
    assert "trial b pruned at epoch 1 of 4" in stream.getvalue()  # the lines above it


def test_steps_say_how_long_they_took() -> None:
    stream = io.StringIO()
    progress = _progress(stream)
    with progress.step("Retraining the best configuration"):
        pass
    assert stream.getvalue().splitlines() == [
        "Retraining the best configuration ...",
        "Retraining the best configuration: done in 0:00"]
    with progress.step("Drawing the study's plots and importance") as outcome:
        outcome.append("importance skipped: 5 trials at full budget, needs 8")
    assert stream.getvalue().splitlines()[-1] == (  # issue 35: what happened, not just "done"
        "Drawing the study's plots and importance: done in 0:00; importance skipped: 5 trials "
        "at full budget, needs 8")
    assert elapsed(65) == "1:05" and elapsed(3723) == "1:02:03"

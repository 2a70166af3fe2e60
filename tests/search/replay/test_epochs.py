"""A replayed trial's epochs: the curve's validation metrics in order, the best so far in the
metric's direction, resumed after a checkpoint, and a failed training failing again."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dmlsearch.search.replay import replay_epochs
from dmlsearch.search.replay import replayed_test_metrics
from dmlsearch.search.replay.table import TABLE_FORMAT
from dmlsearch.search.replay.table import run_line
from dmlsearch.trainables.errors import TrialFailed

ROWS = [{"epoch": 1, "train_loss": 3.0, "val": {"map@r": 0.1, "eer": 0.4}, "seconds": 2.0,
         "cpu_seconds": 1.5, "test": {"map@r": 0.05}},
        {"epoch": 2, "train_loss": 2.0, "val": {"map@r": 0.3, "eer": 0.3}, "seconds": 2.0,
         "cpu_seconds": 1.0, "test": {"map@r": 0.2}},
        {"epoch": 3, "train_loss": 1.0, "val": {"map@r": 0.2, "eer": 0.35}, "seconds": 2.0}]


def _write(path: Path, status: str = "ok") -> Path:
    curve = {"status": status, "reason": "TrialFailed: loss became nan" if status != "ok"
             else None, "epochs": ROWS, "best_epoch": 2, "test_at_best": {"map@r": 0.2}}
    lines = [{"kind": "header", "format": TABLE_FORMAT, "metric": "map@r",
              "base": {"epochs": 3}}, run_line({"loss": "ms"}, 0, curve)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_epochs_report_the_best_so_far_as_a_trained_trial_would(tmp_path: Path) -> None:
    table = _write(tmp_path / "t.jsonl")
    epochs = list(replay_epochs(table, {"loss": "ms"}))
    assert [e.epoch for e in epochs] == [1, 2, 3] and [e.last for e in epochs] == [0, 0, 1]
    assert [e.score for e in epochs] == [0.1, 0.3, 0.3] and epochs[-1].best_epoch == 2
    assert [e.fold_values for e in epochs] == [[0.1], [0.3], [0.3]]
    assert [e.seconds for e in epochs] == [1.5, 1.0, 2.0]  # CPU time, else wall time
    # A minimised metric: lower is better, and the worst score is +inf.
    eer = list(replay_epochs(table, {"loss": "ms", "metric": "eer"}))
    assert [e.score for e in eer] == [0.4, 0.3, 0.3] and eer[0].worst == math.inf
    # Resumed after epoch 2: the best so far is remembered.
    resumed = list(replay_epochs(table, {"loss": "ms"}, start=2))
    assert [(e.epoch, e.score, e.best_epoch) for e in resumed] == [(3, 0.3, 2)]
    assert replayed_test_metrics(table, {"loss": "ms"}, epochs=3, metric="map@r",
                                 mode="max") == {"map@r": 0.2}


def test_a_failed_training_fails_again_after_its_last_epoch(tmp_path: Path) -> None:
    table = _write(tmp_path / "t.jsonl", status="failed")
    seen = []
    with pytest.raises(TrialFailed, match="loss became nan \\(replayed\\)"):
        for epoch in replay_epochs(table, {"loss": "ms"}):
            seen.append(epoch)
    assert len(seen) == 3 and not any(e.last for e in seen)

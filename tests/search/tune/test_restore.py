"""A saved experiment that names a checkpoint Ray has since deleted (a kill between Ray
registering a trial's newer checkpoint, which deletes the older, and its next save of the
experiment): ``dmlsearch resume`` points the trial at its newest reported checkpoint that still
exists, with Ray's own checkpoint bookkeeping (``_CheckpointManager``) and its encoding of it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmlsearch.search.tune.restore import _decode
from dmlsearch.search.tune.restore import _encode
from dmlsearch.search.tune.restore import _repair_checkpoints


def _saved(experiment: Path, trial_id: str, checkpoint: str | None, *,
           status: str = "RUNNING") -> dict[str, tuple[list[str], dict[str, Any]]]:
    """Ray's saved entry of one trial whose latest registered checkpoint is ``checkpoint``."""
    from ray.train import Checkpoint
    from ray.train import CheckpointConfig
    from ray.train._internal.checkpoint_manager import _CheckpointManager
    from ray.train._internal.session import _TrainingResult

    manager = _CheckpointManager(CheckpointConfig(num_to_keep=1))
    if checkpoint is not None:
        path = experiment / f"trial_{trial_id}" / checkpoint
        manager.register_checkpoint(_TrainingResult(checkpoint=Checkpoint(str(path)),
                                                    metrics={"training_iteration": 2}))
    state = {"trial_id": trial_id, "status": status}
    entry = [json.dumps(state), json.dumps({"checkpoint_manager": _encode(manager)})]
    return {trial_id: (entry, state)}


def _trial(experiment: Path, trial_id: str, *, reported: list[str | None],
           present: list[str]) -> None:
    """A trial folder: one result row per epoch naming the checkpoint handed with it, and the
    checkpoint folders still there."""
    folder = experiment / f"trial_{trial_id}"
    folder.mkdir(parents=True)
    rows = [{"training_iteration": i + 1, "checkpoint_dir_name": name}
            for i, name in enumerate(reported)]
    (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in present:
        (folder / name).mkdir()


def _latest(saved: dict[str, tuple[list[str], dict[str, Any]]], trial_id: str) -> Any:
    return _decode(json.loads(saved[trial_id][0][1])["checkpoint_manager"])


def test_a_deleted_checkpoint_gives_way_to_the_newest_reported_one_still_there(
        tmp_path: Path) -> None:
    # epoch 2 handed checkpoint_000000, epoch 3 checkpoint_000001 (Ray then deleted 000000);
    # checkpoint_000002 was written but never reported: the epoch it holds is not known
    _trial(tmp_path, "t1", reported=[None, "checkpoint_000000", "checkpoint_000001"],
           present=["checkpoint_000001", "checkpoint_000002"])
    saved = _saved(tmp_path, "t1", "checkpoint_000000")
    assert _repair_checkpoints(tmp_path, saved, {})
    manager = _latest(saved, "t1")
    latest = manager.latest_checkpoint_result
    assert Path(latest.checkpoint.path) == tmp_path / "trial_t1" / "checkpoint_000001"
    assert latest.metrics["training_iteration"] == 3
    assert [r.checkpoint.path for r in manager.best_checkpoint_results] == [
        latest.checkpoint.path]


def test_with_no_reported_checkpoint_left_the_trial_starts_again(tmp_path: Path) -> None:
    _trial(tmp_path, "t1", reported=[None, "checkpoint_000000"], present=[])
    saved = _saved(tmp_path, "t1", "checkpoint_000000")
    assert _repair_checkpoints(tmp_path, saved, {})
    manager = _latest(saved, "t1")
    assert manager.latest_checkpoint_result is None and manager.best_checkpoint_results == []


def test_a_checkpoint_still_there_and_an_ended_trial_are_left_as_saved(tmp_path: Path) -> None:
    _trial(tmp_path, "t1", reported=[None, "checkpoint_000000"], present=["checkpoint_000000"])
    _trial(tmp_path, "t2", reported=[None, "checkpoint_000000"], present=[])
    saved = {**_saved(tmp_path, "t1", "checkpoint_000000"),
             **_saved(tmp_path, "t2", "checkpoint_000000", status="TERMINATED")}
    before = {tid: list(entry) for tid, (entry, _) in saved.items()}
    assert not _repair_checkpoints(tmp_path, saved, {})
    assert {tid: list(entry) for tid, (entry, _) in saved.items()} == before

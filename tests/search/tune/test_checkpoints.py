"""Checkpoint cadence (:mod:`dmlsearch.search.tune.checkpoints`): every N epochs in the
background, synchronously where a scheduler pauses and at the end; a lost trial, restored by a
real Ray Tune run, retrains at most N (+1) epochs and reports the right iterations; the folder
of a killed trial's process is removed by the next trial on the node."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from dmlsearch.search.tune.checkpoints import ORPHAN_AGE_S
from dmlsearch.search.tune.checkpoints import Checkpointer
from dmlsearch.search.tune.checkpoints import _owner_prefix


def _state(epoch: int) -> dict[str, Any]:
    return {"epoch": epoch, "weights": torch.full((4,), float(epoch))}


def test_saves_every_n_epochs_in_the_background_and_hands_it_over_later() -> None:
    saver = Checkpointer(every=3)
    handed: dict[int, Path] = {}
    contents: dict[int, int] = {}  # report -> the epoch of the state handed with it
    for epoch in range(1, 11):
        folder = saver.folder_for(epoch, last=epoch == 10, state=lambda e=epoch: _state(e))
        if folder is not None:
            handed[epoch] = folder
            saved = torch.load(folder / "trial_state.pt")
            contents[epoch] = saved["epoch"]
            assert saved["epoch"] < epoch or epoch == 10  # an earlier state, or the last one
            assert torch.equal(saved["weights"], torch.full((4,), float(saved["epoch"])))
        if saver._pending is not None:  # each write ends within the next epoch (the test's
            saver._pending.wait()           # timeline; a slower disk is the test below)
    assert saver.saved_at == [3, 6, 9, 10]
    assert contents[4] == 3 and contents[10] == 10  # the end: in its own report
    assert not handed[4].exists()  # Ray copied it during report 4; ours went at report 5
    saver.close()
    assert not any(folder.exists() for folder in handed.values())  # Ray keeps its copies


def test_a_state_is_asked_for_only_at_the_epochs_that_save() -> None:
    asked: list[int] = []

    def state(epoch: int) -> dict[str, Any]:
        asked.append(epoch)
        return _state(epoch)

    saver = Checkpointer(every=5, pauses_at=(2, 7))
    for epoch in range(1, 9):
        folder = saver.folder_for(epoch, last=False, state=lambda e=epoch: state(e))
        if epoch in (2, 7):  # where the scheduler may pause: saved in that very report
            assert folder is not None
            assert torch.load(folder / "trial_state.pt")["epoch"] == epoch
    saver.close()
    assert asked == [2, 5, 7]


def test_the_write_does_not_hold_up_the_training_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()
    real_save = torch.save

    def slow_save(*args: Any, **kwargs: Any) -> None:
        release.wait(timeout=30)  # the disk is slow: the write waits until the test says so
        real_save(*args, **kwargs)

    monkeypatch.setattr(torch, "save", slow_save)
    saver = Checkpointer(every=1)
    asked: list[int] = []

    def state(epoch: int) -> dict[str, Any]:
        asked.append(epoch)
        return _state(epoch)

    assert saver.folder_for(1, last=False, state=lambda: state(1)) is None  # returned at once
    # epoch 2 is due while epoch 1 is still being written: skipped, not waited for
    assert saver.folder_for(2, last=False, state=lambda: state(2)) is None
    assert asked == [1] and not release.is_set()
    release.set()
    saver._pending.wait()
    release.clear()  # the disk is slow again for the write of epoch 3
    folder = saver.folder_for(3, last=False, state=lambda: state(3))
    assert folder is not None and torch.load(folder / "trial_state.pt")["epoch"] == 1
    assert saver.saved_at == [1, 3]
    # the end supersedes a write still going, without waiting for it either
    superseded = saver._pending
    assert superseded is not None and not superseded.done()
    threading.Timer(0.5, release.set).start()  # the disk comes back while the last one waits
    last = saver.folder_for(4, last=True, state=lambda: state(4))
    assert last is not None and torch.load(last / "trial_state.pt")["epoch"] == 4
    superseded._thread.join()
    assert not superseded.folder.exists()  # the superseded write removed its own folder
    saver.close()


KILLED_TRIAL = """
import sys, time
from pathlib import Path
import torch
from dmlsearch.search.tune.checkpoints import Checkpointer
saver = Checkpointer(every=1, root=Path(sys.argv[1]))
saver.folder_for(1, last=False, state=lambda: {"weights": torch.zeros(4)})
print(saver._pending.wait(), flush=True)  # written, not yet handed to Ray: then killed
time.sleep(600)
"""


def _age(folder: Path, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(folder, (then, then))


def test_a_killed_trials_folder_is_removed_by_the_next_trial_on_the_node(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    trial = subprocess.Popen([sys.executable, "-c", KILLED_TRIAL, str(root)],
                             stdout=subprocess.PIPE, text=True)
    try:
        left = Path(trial.stdout.readline().strip())  # type: ignore[union-attr]
    finally:
        trial.send_signal(signal.SIGKILL)  # a lost worker: no `finally`, no close()
        trial.wait(timeout=30)
    assert left.parent == root and (left / "trial_state.pt").is_file()
    ours = Checkpointer(every=1, root=root)  # this process's own write: it runs
    ours.folder_for(1, last=False, state=lambda: _state(1))
    mine = ours._pending.wait()  # type: ignore[union-attr]
    elsewhere = root / f"{_owner_prefix(host='another-node', pid=trial.pid)}x1"
    elsewhere.mkdir()  # another host's (a shared /tmp): its processes are not ours to judge
    Checkpointer(every=1, root=root)
    assert left.exists()  # a dead process's folder, but just written: kept for now
    for folder in (left, mine, elsewhere):
        _age(folder, ORPHAN_AGE_S + 60)
    Checkpointer(every=1, root=root)  # the next trial on this node
    assert not left.exists() and mine.exists() and elsewhere.exists()
    ours.close()
    assert not mine.exists()


EVERY, LOST_AT, EPOCHS = 3, 8, 10


def _lost_once(config: dict[str, Any]) -> None:
    """A trial that saves as dmltrial does and whose worker is lost once, at epoch LOST_AT."""
    from ray import tune

    log = Path(config["log"])
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved:
            start = int(torch.load(Path(saved) / "trial_state.pt")["epoch"])
    with log.open("a") as handle:
        handle.write(json.dumps({"start": start}) + "\n")
    saver = Checkpointer(every=EVERY)
    try:
        for epoch in range(start + 1, EPOCHS + 1):
            if epoch == LOST_AT and start == 0:
                raise RuntimeError("the worker's node was lost")  # Ray retries the trial
            folder = saver.folder_for(epoch, last=epoch == EPOCHS,
                                      state=lambda e=epoch: _state(e))
            if saver._pending is not None:
                saver._pending.wait()  # keep the test's timeline exact
            tune.report({"training_iteration": epoch, "score": float(epoch)},
                        checkpoint=None if folder is None
                        else tune.Checkpoint.from_directory(str(folder)))
            with log.open("a") as handle:
                handle.write(json.dumps({"reported": epoch}) + "\n")
    finally:
        saver.close()


def test_a_lost_trial_resumes_at_most_n_epochs_back(tmp_path: Path, local_ray: Path) -> None:
    from ray import tune

    log = tmp_path / "starts.jsonl"
    grid = tune.Tuner(
        tune.with_resources(_lost_once, {"cpu": 1}),
        param_space={"log": str(log)},
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), name="lost",
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                                  verbose=0),
    ).fit()
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    starts = [line["start"] for line in lines if "start" in line]
    assert starts[0] == 0 and len(starts) == 2
    assert LOST_AT - 1 - starts[1] <= EVERY + 1  # epochs trained twice
    assert grid[0].error is None and grid[0].metrics["training_iteration"] == EPOCHS
    # the iterations after the restore are the epochs they are about (some reported twice);
    # read from the trial's own log: Ray's progress.csv may not be flushed when fit() returns
    reported = [line["reported"] for line in lines if "reported" in line]
    assert reported == list(range(1, LOST_AT)) + list(range(starts[1] + 1, EPOCHS + 1))

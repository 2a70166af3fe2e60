"""The worker side of a trial: its own failures are noted, so Ray's retries (meant for lost
processes and nodes) end at once; the multi-objective cost of a configuration; a trial restored
after its last epoch says how it ended, at that epoch. The trainable itself runs in every real
search (tests/e2e)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dmlsearch.search.tune.trainable import failing_alone
from dmlsearch.search.tune.trainable import raise_noted_failure
from dmlsearch.search.tune.trainable import trial_cost
from dmlsearch.trainables.errors import TrialFailed
from tests.helpers import SMALL
from tests.helpers import small_config


def test_a_failure_is_noted_so_that_retries_end_at_once(tmp_path: Path) -> None:
    """Ray retries every error (``--max-failures``, meant for lost nodes); the trial's own
    failure is noted in its folder, and a retry raises it again without training."""
    note = tmp_path / "trial" / "trial_failed.txt"
    with pytest.raises(TrialFailed, match="^out of memory: .*can't allocate memory") as caught:
        with failing_alone(note):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to "
                               "allocate 281474976710656 bytes")
    assert note.read_text() == str(caught.value)
    with pytest.raises(TrialFailed) as retried:  # the retry's first step, before any training
        raise_noted_failure(note)
    assert str(retried.value) == str(caught.value)
    raise_noted_failure(tmp_path / "never-failed.txt")  # no note: the trial runs
    with pytest.raises(ValueError):  # a bug is not the trial's failure: nothing noted
        with failing_alone(tmp_path / "other.txt"):
            raise ValueError("a bug")
    assert not (tmp_path / "other.txt").exists()


def test_the_costs_of_a_configuration() -> None:
    from dmlsearch.trainables.models import build_model

    cfg = small_config(embedding_size=24)
    assert trial_cost("embedding_size", cfg, channels=1) == 24.0
    model = build_model(backbone="smallcnn", in_channels=1, embedding_size=24, pooling="gap",
                        pretrained="none")
    assert trial_cost("parameters", cfg, channels=1) == sum(p.numel() for p in model.parameters())


EPOCHS = 2


def _lost_after_its_end(config: dict[str, Any], marker: str) -> None:
    """The real trial, whose worker is lost once after the trial's last report (its
    checkpoint in hand): Ray restores it from that checkpoint, with nothing left to train."""
    from dmlsearch.search.tune.trainable import dmltrial

    dmltrial(config)
    if not Path(marker).exists():
        Path(marker).write_text("lost")
        raise RuntimeError("the worker's node was lost after the trial's last report")


@pytest.mark.slow
def test_a_trial_restored_after_its_end_reports_the_epoch_it_ended_at(
        tmp_path: Path, local_ray: Path) -> None:
    """Restored from the checkpoint of its last epoch, a trial says once more how it ended,
    at that epoch: a record of ``EPOCHS`` epochs, not of Ray's count of reports."""
    from ray import tune

    config = {**SMALL, "epochs": EPOCHS, "checkpoint_every": 1, "threads": 1}
    grid = tune.Tuner(
        tune.with_resources(tune.with_parameters(
            _lost_after_its_end, marker=str(tmp_path / "lost")), {"cpu": 1}),
        param_space=config,
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), name="lost",
                                  failure_config=tune.FailureConfig(max_failures=1),
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                                  verbose=0),
    ).fit()
    assert (tmp_path / "lost").exists()  # the worker was lost, and the trial restored
    assert grid[0].error is None
    last = grid[0].metrics
    assert last["trial_finished"] == 1 and last["training_iteration"] == EPOCHS, last
    assert last["iterations_since_restore"] == 1  # one report after the restore, no training

"""The worker side: a trial as a Ray Tune function trainable. It reports after every epoch, saves
a checkpoint every ``checkpoint_every`` epochs (in the background), where its scheduler may pause
it and at its end (:mod:`dmlsearch.search.tune.checkpoints`), resumes from the last checkpoint,
and fails alone (with its reason) when its own training fails. The configuration it gets is
already flat (setting keys)."""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Protocol

from dmlsearch.search.process_end import freeze_at_exit
from dmlsearch.search.replay import replay_epochs
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.checkpoints import Checkpointer
from dmlsearch.search.tune.ray_results import COST
from dmlsearch.search.tune.ray_results import METHOD_KEY
from dmlsearch.search.tune.ray_results import SCORE
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import TrialFailed
from dmlsearch.trainables.failures import trial_failure
from dmlsearch.trainables.metrics import metric_mode

__all__ = ["FAILED_FILE", "STATE_FILE", "Progress", "dmltrial", "failing_alone",
           "raise_noted_failure", "replaytrial", "report_row", "trial_cost"]

STATE_FILE = "trial_state.pt"
FAILED_FILE = "trial_failed.txt"  # why the trial failed alone (NaN loss, out of memory, data)


def dmltrial(config: dict[str, Any], cost: str | None = None,
             pauses_at: tuple[int, ...] = (), plugins: tuple[tuple[str, str], ...] = ()) -> None:
    """One trial, resumable from its last checkpoint. ``cost`` (multi-objective searches) names
    a cost reported beside the score as ``COST``; ``pauses_at``: the epochs at which the
    scheduler may pause the trial (a checkpoint in those reports); ``plugins``: the user's
    plug-in files as (path, text), loaded here from the text the search carried."""
    freeze_at_exit()  # a worker Ray ends after the search: seconds of a core saved
    for name in ("ray.tune", "ray.train"):  # one "checkpoint created" line per epoch is noise
        logging.getLogger(name).setLevel(logging.WARNING)
    import torch  # the worker side: the driver imports this module, not torch or Ray
    from ray import tune

    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import run_trial

    from dmlsearch.trainables.plugins import provide

    provide(dict(plugins))  # before the configuration loads them
    cfg = TrialConfig.from_flat({k: v for k, v in config.items() if k != METHOD_KEY})
    folder = Path(tune.get_context().get_trial_dir())
    failed = folder / FAILED_FILE
    raise_noted_failure(failed)
    with failing_alone(failed, loading=True):  # e.g. an image unreadable since the preflight
        dataset = load_for(cfg)
    extra = {} if cost is None else {COST: trial_cost(cost, cfg, dataset.images.channels)}
    worst = math.inf if metric_mode(cfg.metric) == "min" else -math.inf  # score before any eval
    state = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved:
            state = torch.load(Path(saved) / STATE_FILE, weights_only=False)

    reported: list[bool] = []
    checkpoints = Checkpointer(every=cfg.checkpoint_every, pauses_at=tuple(pauses_at),
                               file_name=STATE_FILE)

    def report(progress: Any, state_fn: Callable[[], dict[str, Any]]) -> None:
        reported.append(True)
        saved = checkpoints.folder_for(progress.iteration, progress.last, state_fn)
        tune.report(report_row(progress, worst=worst, extra=extra),
                    checkpoint=None if saved is None
                    else tune.Checkpoint.from_directory(str(saved)))

    # Files written to the trial's folder (distance diagnostics) are synced to the results.
    try:
        with failing_alone(failed):  # NaN/inf loss, out of memory: the trial fails, with why
            result = run_trial(cfg, dataset=dataset, on_progress=report, state=state,
                               artifacts=folder)
    finally:
        checkpoints.close()
    if not reported:
        # Restored from the checkpoint of its last epoch (the driver stopped before Ray saved
        # the trial as finished): nothing was left to train, so say how it ended once more,
        # at the epoch it ended (Ray's own count would be one past the checkpoint's).
        tune.report({
            "training_iteration": result.epochs_run,
            SCORE: result.score, "trial_finished": 1, "score_std": result.score_std,
            "best_epoch": int(round(sum(result.fold_best_epochs) / len(result.fold_best_epochs))),
            "folds_done": len(result.fold_values),
            **{f"fold{i}_best": v for i, v in enumerate(result.fold_values)}, **extra,
        })


class Progress(Protocol):
    """What a trial's report says after an epoch: a training trial's
    :class:`~dmlsearch.trainables.trial.TrialProgress`, or a replayed one's
    :class:`~dmlsearch.search.replay.ReplayedEpoch`."""

    iteration: int
    score: float | None
    fold: int
    epoch: int
    train_loss: float
    last: bool
    best_epoch: int | None
    score_std: float | None
    folds_done: int
    fold_values: list[float]
    metrics: dict[str, float]


def report_row(progress: Progress, *, worst: float,
               extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The result a trial reports after an epoch (every trainable's one row builder): the epoch
    it is about (``training_iteration``: epochs over all folds, also after a restore from an
    older checkpoint), ``score`` (``worst`` before any validation), the epoch's
    ``val_<metric>``, ``trial_finished`` on the last; k-fold: the spread of the folds' bests and
    each fold's best, as they complete."""
    return {
        "training_iteration": progress.iteration,
        SCORE: progress.score if progress.score is not None else worst,
        "fold": progress.fold,
        "epoch": progress.epoch,
        "train_loss": progress.train_loss,
        "trial_finished": int(progress.last),
        "best_epoch": progress.best_epoch or 0,
        "score_std": progress.score_std if progress.score_std is not None else 0.0,
        "folds_done": progress.folds_done,
        **{f"fold{i}_best": v for i, v in enumerate(progress.fold_values)},
        **{f"val_{k}": v for k, v in progress.metrics.items()},
        **(extra or {}),
    }


def raise_noted_failure(failed: Path) -> None:
    """A retry of a trial whose own failure was noted (:func:`failing_alone`) fails at once with
    that reason: Ray retries every error, and this one would only recur after training again."""
    if failed.is_file():
        raise TrialFailed(failed.read_text())


@contextlib.contextmanager
def failing_alone(failed: Path, *, loading: bool = False) -> Iterator[None]:
    """Re-raise a failure of this trial alone as a ``TrialFailed`` that says why ("out of
    memory: ...", "data loading failed: ..."), noted in ``failed`` so that a retry (meant for
    lost nodes and processes, ``--max-failures``) fails at once; anything else propagates."""
    try:
        yield
    except Exception as exc:
        failure = trial_failure(exc, loading=loading)
        if failure is None:
            raise
        try:
            write_atomic(failed, str(failure))
        except OSError:  # the note only saves the retries' time
            pass
        if failure is exc:
            raise
        raise failure from exc


def trial_cost(name: str, cfg: Any, channels: int) -> float:
    """The multi-objective cost of a configuration (see ``dmlsearch.search.options.COSTS``)."""
    if name == "embedding_size":
        return float(cfg.embedding_size)
    if name == "parameters":
        from dmlsearch.trainables.models import build_model

        model = build_model(backbone=cfg.backbone, in_channels=channels,
                            embedding_size=cfg.embedding_size, pooling=cfg.pooling,
                            pretrained="none")
        return float(sum(p.numel() for p in model.parameters()))
    raise AssertionError(f"unknown cost {name!r}")


def replaytrial(config: dict[str, Any], table: str, speedup: float, checkpoints: bool) -> None:
    """A trial replayed from a learning-curve table instead of trained
    (:func:`dmlsearch.search.replay.replay_epochs`), reported epoch by epoch as :func:`dmltrial`
    reports, each epoch taking its recorded CPU time divided by ``speedup``. ``checkpoints`` (a
    scheduler that pauses trials): a checkpoint after each epoch, so a paused trial resumes
    where it was."""
    from ray import tune

    freeze_at_exit()
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved:
            start = int((Path(saved) / STATE_FILE).read_text())
    for epoch in replay_epochs(table, config, start=start):
        time.sleep(epoch.seconds / speedup)
        row = report_row(epoch, worst=epoch.worst)
        if checkpoints:
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / STATE_FILE).write_text(str(epoch.epoch))
                tune.report(row, checkpoint=tune.Checkpoint.from_directory(tmp))
        else:
            tune.report(row)

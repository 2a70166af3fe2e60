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
from pathlib import Path
from typing import Any

from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tune.checkpoints import Checkpointer
from dmlsearch.search.tune.records import COST
from dmlsearch.search.tune.records import METHOD_KEY
from dmlsearch.search.tune.records import SCORE

__all__ = ["FAILED_FILE", "STATE_FILE", "dmltrial", "failing_alone", "raise_noted_failure",
           "replaytrial", "trial_cost"]

STATE_FILE = "trial_state.pt"
FAILED_FILE = "trial_failed.txt"  # why the trial failed alone (NaN loss, out of memory, data)


def dmltrial(config: dict[str, Any], cost: str | None = None,
             pauses_at: tuple[int, ...] = ()) -> None:
    """One trial, resumable from its last checkpoint. ``cost`` (multi-objective searches) names
    a cost reported beside the score as ``COST``; ``pauses_at``: the epochs at which the
    scheduler may pause the trial (a checkpoint in those reports)."""
    for name in ("ray.tune", "ray.train"):  # one "checkpoint created" line per epoch is noise
        logging.getLogger(name).setLevel(logging.WARNING)
    import torch
    from ray import tune

    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.metrics import metric_mode
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import run_trial

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
        metrics = {
            # the epoch this report is about, also after a restore from an older checkpoint
            "training_iteration": progress.iteration,
            SCORE: progress.score if progress.score is not None else worst,
            "fold": progress.fold,
            "epoch": progress.epoch,
            "train_loss": progress.train_loss,
            "trial_finished": int(progress.last),
            "best_epoch": progress.best_epoch or 0,
            # k-fold: the spread of the folds' bests and each fold's best, as they complete
            "score_std": progress.score_std if progress.score_std is not None else 0.0,
            "folds_done": progress.folds_done,
            **{f"fold{i}_best": v for i, v in enumerate(progress.fold_values)},
            **{f"val_{k}": v for k, v in progress.metrics.items()},
            **extra,
        }
        saved = checkpoints.folder_for(progress.iteration, progress.last, state_fn)
        tune.report(metrics, checkpoint=None if saved is None
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
        # the trial as finished): nothing was left to train, so say how it ended once more.
        tune.report({
            SCORE: result.score, "trial_finished": 1, "score_std": result.score_std,
            "best_epoch": int(round(sum(result.fold_best_epochs) / len(result.fold_best_epochs))),
            "folds_done": len(result.fold_values),
            **{f"fold{i}_best": v for i, v in enumerate(result.fold_values)}, **extra,
        })


def raise_noted_failure(failed: Path) -> None:
    """A retry of a trial whose own failure was noted (:func:`failing_alone`) fails at once with
    that reason: Ray retries every error, and this one would only recur after training again."""
    if failed.is_file():
        from dmlsearch.trainables.errors import TrialFailed

        raise TrialFailed(failed.read_text())


@contextlib.contextmanager
def failing_alone(failed: Path, *, loading: bool = False) -> Iterator[None]:
    """Re-raise a failure of this trial alone as a ``TrialFailed`` that says why ("out of
    memory: ...", "data loading failed: ..."), noted in ``failed`` so that a retry (meant for
    lost nodes and processes, ``--max-failures``) fails at once; anything else propagates."""
    from dmlsearch.trainables.failures import trial_failure

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
    """A trial replayed from a learning-curve table instead of trained: the curve of the
    configuration's grid point (:mod:`dmlsearch.search.curves`), reported epoch by epoch as
    :func:`dmltrial` reports, each epoch taking its recorded CPU time divided by ``speedup``.
    ``checkpoints`` (a scheduler that pauses trials): a checkpoint after each epoch, so a paused
    trial resumes where it was."""
    from ray import tune

    from dmlsearch.search.curves import load_table
    from dmlsearch.trainables.errors import TrialFailed
    from dmlsearch.trainables.metrics import metric_mode

    curves = load_table(table)
    curve = curves.lookup(config)
    metric = str(config.get("metric", curves.metric))
    sign = -1.0 if metric_mode(metric) == "min" else 1.0
    start = 0
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as saved:
            start = int((Path(saved) / STATE_FILE).read_text())
    best = best_epoch = None
    for row in curve.epochs[:start]:
        value = row["val"].get(metric)
        if value is not None and (best is None or sign * value > sign * best):
            best, best_epoch = value, row["epoch"]
    last = len(curve.epochs)
    for row in curve.epochs[start:]:
        time.sleep(max(0.0, float(row.get("cpu_seconds") or row["seconds"])) / speedup)
        value = row["val"].get(metric)
        if value is not None and (best is None or sign * value > sign * best):
            best, best_epoch = value, row["epoch"]
        metrics = {
            SCORE: best if best is not None else -sign * math.inf, "fold": 0,
            "epoch": row["epoch"], "train_loss": row["train_loss"],
            "trial_finished": int(row["epoch"] == last and curve.status == "ok"),
            "best_epoch": best_epoch or 0, "score_std": 0.0, "folds_done": 0,
            "fold0_best": best if best is not None else -sign * math.inf,
            **{f"val_{k}": v for k, v in row["val"].items()},
        }
        if checkpoints:
            with tempfile.TemporaryDirectory() as tmp:
                (Path(tmp) / STATE_FILE).write_text(str(row["epoch"]))
                tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(tmp))
        else:
            tune.report(metrics)
    if curve.status != "ok":
        raise TrialFailed(f"{curve.reason} (replayed)")

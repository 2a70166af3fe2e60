"""Every Ray call of the project lives here (Ray's APIs move; one file changes when they do).

It adapts a :func:`trainables.trial.run_trial` to a Ray Tune function trainable (report after
each epoch with a checkpoint, resume from the last checkpoint), and assembles the search:
``OptunaSearch`` (study in SQLite beside the results) → ``ConcurrencyLimiter`` → ASHA →
``Tuner``. Driver-side trial events are forwarded to a plain :class:`TrialEvents` object, so the
MLflow module needs no Ray.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import Protocol

import optuna

__all__ = ["TrialEvents", "TrialRecord", "TuneSettings", "dmltrial", "run_tune"]

log = logging.getLogger(__name__)

# Set before Ray is imported anywhere: no usage reports over the network, quieter logs.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

STATE_FILE = "trial_state.pt"
SCORE = "score"


class TrialEvents(Protocol):
    """What the driver wants to hear about trials (implemented by the MLflow tracker)."""

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None: ...
    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None: ...
    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None: ...


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    name: str
    storage_path: Path
    num_samples: int
    concurrency: int
    max_iterations: int  # ASHA's max_t: epochs × folds
    grace_period: int
    reduction_factor: int
    cpus_per_trial: float
    gpus_per_trial: float
    seed: int
    optuna_storage: str  # sqlite URL of the Optuna study
    study_name: str
    mode: str = "max"
    max_failures: int = 0


@dataclasses.dataclass(frozen=True)
class TrialRecord:
    trial_id: str
    config: dict[str, Any]
    state: str  # completed | stopped | failed
    reason: str | None
    iterations: int
    score: float | None
    last_result: dict[str, Any]
    seconds: float


# ---- worker side --------------------------------------------------------------------------
def dmltrial(config: dict[str, Any]) -> None:
    """The Ray Tune function trainable: one trial, resumable from its last checkpoint."""
    for name in ("ray.tune", "ray.train"):  # one "checkpoint created" line per epoch is noise
        logging.getLogger(name).setLevel(logging.WARNING)
    import torch
    from ray import tune

    from spaces import config_from_sample
    from trainables.config import TrialConfig
    from trainables.trial import run_trial

    cfg = TrialConfig.from_flat(config_from_sample(config))
    state = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / STATE_FILE, weights_only=False)

    def report(progress: Any, state_fn: Callable[[], dict[str, Any]]) -> None:
        metrics = {
            SCORE: progress.score if progress.score is not None else -math.inf,
            "fold": progress.fold,
            "epoch": progress.epoch,
            "train_loss": progress.train_loss,
            "trial_finished": int(progress.last),
            "best_epoch": progress.best_epoch or 0,
            **{f"val_{k}": v for k, v in progress.metrics.items()},
        }
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state_fn(), Path(folder) / STATE_FILE)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))

    run_trial(cfg, on_progress=report, state=state)


# ---- driver side --------------------------------------------------------------------------
def _events_callback(events: TrialEvents) -> Any:
    from ray import tune

    class _Forward(tune.Callback):
        def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            events.trial_started(trial.trial_id, dict(trial.config))

        def on_trial_result(
            self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
        ) -> None:
            events.trial_result(trial.trial_id, result)

        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            state = "completed" if trial.last_result.get("trial_finished") else "stopped"
            events.trial_finished(trial.trial_id, state, None)

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            events.trial_finished(trial.trial_id, "failed", _error_reason(trial))

    return _Forward()


def _error_reason(trial: Any) -> str:
    """The last line of the trial's exception (e.g. 'TrialFailed: loss became nan ...')."""
    text = ""
    try:
        error = trial.get_error()
        text = str(error) if error is not None else ""
    except Exception:  # noqa: BLE001 - the reason is best effort; the state is what matters
        pass
    if not text and trial.error_file and os.path.exists(trial.error_file):
        text = Path(trial.error_file).read_text(errors="replace")
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Failed" in line or "Exception" in line:
            return line[:500]
    return (lines[-1] if lines else "unknown error")[:500]


def init_ray(*, num_cpus: int | None, num_gpus: int | None) -> None:
    import ray

    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):  # inside `ray submit` / `ray job submit`: join the cluster
        ray.init(logging_level=logging.WARNING)
    else:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 logging_level=logging.WARNING)


def shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def run_tune(
    settings: TuneSettings,
    *,
    define_by_run: Callable[[optuna.Trial], dict[str, Any]],
    warm_starts: list[dict[str, Any]],
    events: TrialEvents,
) -> list[TrialRecord]:
    """Run the search; return one record per trial (completed, stopped early, or failed)."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search import ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    sampler = optuna.samplers.TPESampler(seed=settings.seed)
    storage = optuna.storages.RDBStorage(settings.optuna_storage)
    searcher = OptunaSearch(
        space=define_by_run, metric=SCORE, mode=settings.mode, sampler=sampler,
        study_name=settings.study_name, storage=storage,
        points_to_evaluate=warm_starts or None,
    )
    scheduler = ASHAScheduler(
        time_attr="training_iteration", max_t=settings.max_iterations,
        grace_period=settings.grace_period, reduction_factor=settings.reduction_factor,
    )
    resources = {"cpu": settings.cpus_per_trial, "gpu": settings.gpus_per_trial}
    tuner = tune.Tuner(
        tune.with_resources(dmltrial, resources),
        tune_config=tune.TuneConfig(
            metric=SCORE, mode=settings.mode, num_samples=settings.num_samples,
            search_alg=ConcurrencyLimiter(searcher, max_concurrent=settings.concurrency),
            scheduler=scheduler, trial_dirname_creator=lambda trial: f"trial_{trial.trial_id}",
        ),
        run_config=tune.RunConfig(
            name=settings.name, storage_path=str(settings.storage_path),
            callbacks=[_events_callback(events)],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            failure_config=tune.FailureConfig(max_failures=settings.max_failures),
            verbose=1,
        ),
    )
    grid = tuner.fit()
    records = []
    for result in grid:
        last = result.metrics or {}
        trial_id = last.get("trial_id") or Path(result.path).name
        if result.error is not None:
            state, reason = "failed", _short(result.error)
        else:
            state, reason = ("completed" if last.get("trial_finished") else "stopped"), None
        score = last.get(SCORE)
        records.append(TrialRecord(
            trial_id=str(trial_id), config=dict(result.config or {}), state=state, reason=reason,
            iterations=int(last.get("training_iteration", 0)),
            score=None if score is None or not math.isfinite(score) else float(score),
            last_result=dict(last), seconds=float(last.get("time_total_s", 0.0)),
        ))
    return records


def _short(error: BaseException) -> str:
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Failed" in line:
            return line[:500]
    return (lines[-1] if lines else type(error).__name__)[:500]

"""Every Ray call of the project lives here (Ray's APIs move; one file changes when they do).

It adapts a :func:`trainables.trial.run_trial` to a Ray Tune function trainable (report after
each epoch with a checkpoint, resume from the last checkpoint), and assembles the search:
``OptunaSearch`` (study in SQLite beside the results) → ``ConcurrencyLimiter`` → ASHA →
``Tuner``. Driver-side trial events are forwarded to a plain :class:`TrialEvents` object, so the
MLflow module needs no Ray.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import Protocol

import optuna

from dmlsearch.search.study_attrs import REASON
from dmlsearch.search.study_attrs import REPEAT_OF

__all__ = ["TrialEvents", "TrialRecord", "TuneSettings", "dmltrial", "run_tune", "storage_for"]

log = logging.getLogger(__name__)

# Set before Ray is imported anywhere: no usage reports over the network, quieter logs.
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_DEDUP_LOGS", "1")

STATE_FILE = "trial_state.pt"
FAILED_FILE = "trial_failed.txt"  # why the trial failed alone (NaN loss, out of memory, data)
DIAGNOSTICS_DIR = "distance_diagnostics"  # = trainables.trial.DIAGNOSTICS_DIR (no torch here)
SCORE = "score"
COST = "cost"


class TrialEvents(Protocol):
    """What the driver wants to hear about trials (implemented by the MLflow tracker)."""

    def trial_started(self, trial_id: str, config: dict[str, Any]) -> None: ...
    def trial_result(self, trial_id: str, result: dict[str, Any]) -> None: ...
    def trial_finished(self, trial_id: str, state: str, reason: str | None) -> None: ...


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    name: str
    storage_path: Path | str  # a local folder, or a URI (s3://, gs://) all nodes write to
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
    sampler: str = "tpe"
    scheduler: str = "asha"
    time_budget_s: float | None = None
    pareto: str | None = None  # a cost minimised beside the score (multi-objective)


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
    cost: float | None = None  # the --pareto cost, when one was asked for
    path: str | None = None  # the trial's folder in the results (Ray Tune's storage)

    def artifact_folders(self) -> list[Path]:
        """Folders of files the trial left beside it (the learned distance's diagnostics)."""
        if self.path is None:
            return []
        folder = Path(self.path) / DIAGNOSTICS_DIR
        return [folder] if folder.is_dir() else []


# ---- worker side --------------------------------------------------------------------------
def dmltrial(config: dict[str, Any], cost: str | None = None) -> None:
    """The Ray Tune function trainable: one trial, resumable from its last checkpoint.

    ``cost`` (multi-objective searches) names a cost reported beside the score as ``COST``.
    """
    for name in ("ray.tune", "ray.train"):  # one "checkpoint created" line per epoch is noise
        logging.getLogger(name).setLevel(logging.WARNING)
    import torch
    from ray import tune

    from dmlsearch.spaces import config_from_sample
    from dmlsearch.trainables.config import TrialConfig
    from dmlsearch.trainables.metrics.names import metric_mode
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import run_trial

    cfg = TrialConfig.from_flat(config_from_sample(config))
    failed = Path(tune.get_context().get_trial_dir()) / FAILED_FILE
    raise_noted_failure(failed)
    with _failing_alone(failed, loading=True):  # e.g. an image unreadable since the preflight
        dataset = load_for(cfg)
    extra = {} if cost is None else {COST: trial_cost(cost, cfg, dataset.images.channels)}
    worst = math.inf if metric_mode(cfg.metric) == "min" else -math.inf  # score before any eval
    state = None
    checkpoint = tune.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            state = torch.load(Path(folder) / STATE_FILE, weights_only=False)

    reported: list[bool] = []

    def report(progress: Any, state_fn: Callable[[], dict[str, Any]]) -> None:
        reported.append(True)
        metrics = {
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
        with tempfile.TemporaryDirectory() as folder:
            torch.save(state_fn(), Path(folder) / STATE_FILE)
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))

    # Files written to the trial's folder (distance diagnostics) are synced to the results.
    with _failing_alone(failed):  # NaN/inf loss, out of memory: the trial fails, with its reason
        result = run_trial(cfg, dataset=dataset, on_progress=report, state=state,
                           artifacts=Path(tune.get_context().get_trial_dir()))
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
    """A retry of a trial whose own failure was noted (``_failing_alone``) fails at once with
    that reason: Ray retries every error, and this one would only recur after training again."""
    if failed.is_file():
        from dmlsearch.trainables.errors import TrialFailed

        raise TrialFailed(failed.read_text())


@contextlib.contextmanager
def _failing_alone(failed: Path, *, loading: bool = False) -> Iterator[None]:
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
        from dmlsearch.search.export import write_atomic

        try:
            write_atomic(failed, str(failure))
        except OSError:  # the note only saves the retries' time
            pass
        if failure is exc:
            raise
        raise failure from exc


def trial_cost(name: str, cfg: Any, channels: int) -> float:
    """The multi-objective cost of a configuration (see ``search.options.COSTS``)."""
    if name == "embedding_size":
        return float(cfg.embedding_size)
    if name == "parameters":
        from dmlsearch.trainables.models import build_model

        model = build_model(backbone=cfg.backbone, in_channels=channels,
                            embedding_size=cfg.embedding_size, pooling=cfg.pooling,
                            pretrained="none")
        return float(sum(p.numel() for p in model.parameters()))
    raise AssertionError(f"unknown cost {name!r}")


# ---- driver side --------------------------------------------------------------------------
def error_reason(trial: Any) -> str:
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


_CREDENTIAL = re.compile(r"KEY|SECRET|TOKEN|PASSWORD|CREDENTIAL", re.IGNORECASE)


def keep_credentials_home() -> None:
    """Ray Tune hands the driver's cloud credentials (``AWS_SECRET_ACCESS_KEY``...) to every
    trial as runtime-environment variables, and Ray's runtime-env agent writes them into its
    session logs. Stop that: local trials inherit the environment anyway, and the nodes of a
    cluster use their own credentials (instance role, service account), never the driver's."""
    try:
        from ray.tune.execution import class_cache
    except ImportError:  # a Ray without the hand-over
        return
    names = getattr(class_cache, "ENV_VARS_TO_PROPAGATE", None)
    if isinstance(names, (set, frozenset)):
        class_cache.ENV_VARS_TO_PROPAGATE = {n for n in names if not _CREDENTIAL.search(n)}


def init_ray(*, num_cpus: int | None, num_gpus: int | None) -> None:
    import ray

    keep_credentials_home()
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):  # inside `ray submit` / `ray job submit`: join the cluster
        ray.init(logging_level=logging.WARNING)
    else:
        # No dashboard; what Ray still serves over HTTP listens on this machine only.
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, include_dashboard=False,
                 dashboard_host="127.0.0.1", logging_level=logging.WARNING)


def shutdown_ray() -> None:
    ray = sys.modules.get("ray")  # never imported: never started (and no second spent importing)
    if ray is not None and ray.is_initialized():
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
    from ray.tune.search import ConcurrencyLimiter

    from dmlsearch.search._ray_parts import ForwardEvents
    from dmlsearch.search._ray_parts import SafeOptunaSearch
    from dmlsearch.search._ray_parts import set_events
    from dmlsearch.search._ray_parts import trial_dirname

    set_events(events)
    storage = optuna.storages.RDBStorage(settings.optuna_storage)
    metric: str | list[str] = SCORE
    mode: str | list[str] = settings.mode
    if settings.pareto is not None:  # Optuna gets both objectives; the scheduler the score
        metric, mode = [SCORE, COST], [settings.mode, "min"]
    searcher = SafeOptunaSearch(
        space=define_by_run, metric=metric, mode=mode, sampler=make_sampler(settings),
        study_name=settings.study_name, storage=storage,
        points_to_evaluate=warm_starts or None,
    )
    scheduler = make_scheduler(settings)
    tuner = tune.Tuner(
        _trainable(settings),
        tune_config=tune.TuneConfig(
            metric=SCORE, mode=settings.mode, num_samples=settings.num_samples,
            search_alg=ConcurrencyLimiter(searcher, max_concurrent=settings.concurrency),
            scheduler=scheduler, trial_dirname_creator=trial_dirname,
            time_budget_s=settings.time_budget_s, reuse_actors=reuse_workers(settings),
        ),
        run_config=tune.RunConfig(
            name=settings.name, storage_path=str(settings.storage_path),
            callbacks=[ForwardEvents()],
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            sync_config=tune.SyncConfig(sync_artifacts=True),
            failure_config=tune.FailureConfig(max_failures=settings.max_failures),
            verbose=1,
        ),
    )
    return _fit(tuner)


def _fit(tuner: Any) -> list[TrialRecord]:
    from dmlsearch.search._ray_parts import flush_failures

    try:
        return _records(tuner.fit())
    finally:
        flush_failures()  # no Optuna trial of a failed Ray trial is left open


def reuse_workers(settings: TuneSettings) -> bool:
    """Whether a finished trial's worker process runs the next trial (Ray's ``reuse_actors``).

    Yes, for every scheduler. A fresh worker imports Ray, torch and the trainables again: about
    6 CPU-seconds a trial on the 2-core machine of docs/benchmarks.md (orchestration), more
    than the whole training of a short ASHA trial. Reuse is safe when a scheduler stops a trial
    mid-way: Ray runs a function trainable with synchronous reporting, so a stopped trial's
    thread is parked in ``tune.report`` and exits at once, and the reset that hands the worker
    to the next trial finds it finished (measured with ASHA, HyperBand's pauses and median
    stopping: no failed trial). Each fit seeds its own RNGs, so a trial's numbers do not depend
    on the worker it ran in (benchmarks/orchestration.py checks the scores are identical).
    """
    del settings  # one decision for every search; kept as the one place that makes it
    return True


def experiment_path(settings: TuneSettings) -> Path | str:
    """Where Ray Tune keeps the search's experiment state (``<storage_path>/<name>``)."""
    if "://" in str(settings.storage_path):
        return f"{str(settings.storage_path).rstrip('/')}/{settings.name}"
    return Path(settings.storage_path) / settings.name


def storage_for(storage: str | None, out: Path) -> Path | str:
    """Ray Tune's ``storage_path`` for the search whose results are in ``out``: ``out/ray``,
    or the search's own folder in the storage every node shares (``--storage``), a URI as is
    and a local path made absolute (trials on other nodes resolve it the same way)."""
    if storage is None:
        return out / "ray"
    if "://" in storage:
        return f"{storage.rstrip('/')}/{out.name}"
    return Path(storage).expanduser().resolve() / out.name


def can_resume(settings: TuneSettings) -> bool:
    from ray import tune

    return tune.Tuner.can_restore(str(experiment_path(settings)))


def resume_tune(settings: TuneSettings, *, events: TrialEvents) -> list[TrialRecord]:
    """Continue a search whose driver stopped: finished trials are kept as they are (never
    re-run), interrupted ones continue from their last checkpoint, and the searcher goes on
    proposing until ``num_samples`` trials exist. Failed trials stay failed."""
    from ray import tune

    from dmlsearch.search._ray_parts import set_events

    set_events(events)
    tuner = tune.Tuner.restore(str(experiment_path(settings)), trainable=_trainable(settings),
                               resume_unfinished=True, resume_errored=False,
                               restart_errored=False)
    return _fit(tuner)


def create_study_storage(url: str) -> None:
    """Create the Optuna storage's tables now (about a second for a new SQLite file), so the
    driver can do it while Ray starts; the searcher then finds them."""
    optuna.storages.RDBStorage(url)


def settle_study(settings: TuneSettings) -> int:
    """After the search: mark the study's Optuna trials still RUNNING as FAIL (asked for by the
    searcher just before the driver stopped, they never reached Ray, so no result will ever
    come); return how many proposals repeated an already trained configuration and were
    answered from its result instead of training (:class:`search._ray_parts.SafeOptunaSearch`).
    """
    storage = optuna.storages.RDBStorage(settings.optuna_storage)
    try:
        study = optuna.load_study(study_name=settings.study_name, storage=storage)
    except KeyError:  # no study yet: nothing was asked
        return 0
    repeats = 0
    for trial in study.get_trials(deepcopy=False):
        repeats += REPEAT_OF in trial.user_attrs
        if trial.state == optuna.trial.TrialState.RUNNING:
            storage.set_trial_user_attr(trial._trial_id, REASON,
                                        "interrupted: the driver stopped before Ray ran it")
            storage.set_trial_state_values(trial._trial_id, optuna.trial.TrialState.FAIL)
    storage.engine.dispose()
    return repeats


def _trainable(settings: TuneSettings) -> Any:
    from ray import tune

    resources = {"cpu": settings.cpus_per_trial, "gpu": settings.gpus_per_trial}
    return tune.with_resources(tune.with_parameters(dmltrial, cost=settings.pareto), resources)


def _records(grid: Any) -> list[TrialRecord]:
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
            cost=None if last.get(COST) is None else float(last[COST]),
            path=str(result.path) if result.path else None,
        ))
    return records


def make_sampler(settings: TuneSettings) -> optuna.samplers.BaseSampler:
    """The Optuna sampler named by ``settings.sampler`` (a grid study's points are enqueued as
    ``points_to_evaluate``, so its sampler only breaks ties: random)."""
    seed = settings.seed
    if settings.sampler == "tpe":
        return optuna.samplers.TPESampler(seed=seed)
    if settings.sampler in ("random", "grid"):
        return optuna.samplers.RandomSampler(seed=seed)
    if settings.sampler == "cmaes":
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    if settings.sampler == "gp":
        return optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    if settings.sampler == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    raise AssertionError(f"unknown sampler {settings.sampler!r}")


def make_scheduler(settings: TuneSettings) -> Any:
    """The Ray Tune trial scheduler named by ``settings.scheduler``; time is epochs × folds."""
    from ray.tune import schedulers

    if settings.scheduler == "asha":
        return schedulers.ASHAScheduler(
            time_attr="training_iteration", max_t=settings.max_iterations,
            grace_period=settings.grace_period, reduction_factor=settings.reduction_factor)
    if settings.scheduler == "hyperband":
        return schedulers.HyperBandScheduler(
            time_attr="training_iteration", max_t=settings.max_iterations,
            reduction_factor=settings.reduction_factor)
    if settings.scheduler == "median":
        return schedulers.MedianStoppingRule(
            time_attr="training_iteration", grace_period=settings.grace_period,
            min_samples_required=3)
    if settings.scheduler == "none":
        return schedulers.FIFOScheduler()
    raise AssertionError(f"unknown scheduler {settings.scheduler!r}")


def _short(error: BaseException) -> str:
    lines = [ln.strip() for ln in str(error).strip().splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Failed" in line:
            return line[:500]
    return (lines[-1] if lines else type(error).__name__)[:500]

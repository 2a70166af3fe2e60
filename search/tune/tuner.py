"""A search as a Ray Tune experiment, read top to bottom like Ray's own examples:

    searcher (Optuna, study in optuna.db) → ConcurrencyLimiter → scheduler → Tuner → fit()

and the restore of a search whose driver stopped. Returns one
:class:`~dmlsearch.search.results.TrialRecord` per Ray trial. The one place where a searcher
(:func:`make_searcher`) and a ``Tuner`` (:func:`make_tuner`, :func:`restore_tuner`) are made;
a comparison's methods (:mod:`.multi_search`) are assembled here too.

Ray is imported inside the functions: ``dmlsearch.search.tune`` (which exports these) imports
no Ray, so ``dmlsearch --help`` and a bad option answer at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import TrialState
from dmlsearch.search.tune.budget import Limit
from dmlsearch.search.tune.ray_results import COST
from dmlsearch.search.tune.ray_results import SCORE
from dmlsearch.search.tune.ray_results import record_from_result
from dmlsearch.search.tune.ray_results import short_reason
from dmlsearch.search.tune.samplers import SAMPLERS
from dmlsearch.search.tune.schedulers import SCHEDULERS
from dmlsearch.search.tune.schedulers import make_scheduler
from dmlsearch.search.tune.settings import TrialEvents
from dmlsearch.search.tune.settings import TuneSettings
from dmlsearch.search.tune.study import RAY_TRIAL_ID
from dmlsearch.search.tune.study import REASON
from dmlsearch.search.tune.study import STOPPED_BY
from dmlsearch.search.tune.trainable import dmltrial
from dmlsearch.search.tune.trainable import replaytrial

__all__ = ["REUSE_WORKERS", "SearchInterrupted", "attribute_stops", "begin", "can_resume", "fit",
           "make_searcher", "make_tuner", "restore_experiment", "restore_tuner", "resume_tune",
           "run_config", "run_tune", "trainable", "trial_dirname"]


def run_tune(settings: TuneSettings, *, define_by_run: Callable[[Any], dict[str, Any]],
             warm_starts: list[dict[str, Any]], events: TrialEvents) -> list[TrialRecord]:
    """Run the search; one record per trial (completed, pruned, or failed)."""
    begin(events)
    searcher = make_searcher(settings, define_by_run=define_by_run, warm_starts=warm_starts)
    tuner = make_tuner(settings, searcher=searcher,
                       scheduler=make_scheduler(settings),
                       num_samples=settings.num_samples)
    return attribute_stops(fit(tuner), settings)


def make_searcher(settings: TuneSettings, *, define_by_run: Callable[[Any], dict[str, Any]],
                  warm_starts: list[dict[str, Any]], limit: Limit | None = None) -> Any:
    """A search's :class:`~.searcher.StudySearcher`: its sampler, its study, its warm starts,
    its soft budgets (``--time-budget``, ``--epoch-budget``), or ``limit``: a comparison's
    method's hard budget (its running trials are stopped when it is spent)."""
    from dmlsearch.search.tune.searcher import StudySearcher  # Ray and Optuna

    objectives, directions = [SCORE], [settings.mode]
    if settings.pareto is not None:  # Optuna gets both objectives; the scheduler the score
        objectives, directions = [SCORE, COST], [settings.mode, "min"]
    now = time.time()
    return StudySearcher(
        space=define_by_run, objectives=objectives, directions=directions,
        sampler=SAMPLERS.get(settings.sampler).make(settings),
        storage=settings.optuna_storage, study_name=settings.study_name, points=warm_starts,
        stopped_by=settings.scheduler,
        deadline=None if settings.time_budget_s is None else now + settings.time_budget_s,
        hard_deadline=None if settings.time_limit_s is None else now + settings.time_limit_s,
        max_epochs=settings.max_epochs if limit is None else limit.epochs,
        max_device_seconds=None if limit is None else limit.device_seconds,
        devices_per_trial=settings.gpus_per_trial, hard_budget=limit is not None,
        experiment=settings.experiment, study_attrs=dict(settings.study_attrs),
        objective_names=settings.objective_names or None,
    )


REUSE_WORKERS = True
"""A finished trial's worker process runs the next trial (Ray's ``reuse_actors``), for every
scheduler: a fresh worker imports Ray, torch and the trainables again, about 6 CPU-seconds a
trial on the 2-core machine of docs/benchmarks.md (orchestration), more than the whole training
of a short ASHA trial. Reuse is safe when a scheduler stops a trial mid-way: Ray runs a function
trainable with synchronous reporting, so a stopped trial's thread is parked in ``tune.report``
and exits at once, and the reset that hands the worker to the next trial finds it finished
(measured with ASHA, HyperBand's pauses and median stopping: no failed trial). Each fit seeds
its own RNGs, so a trial's numbers do not depend on the worker it ran in
(benchmarks/orchestration.py checks the scores are identical; its ``--ablation`` sets this to
False)."""


def make_tuner(settings: TuneSettings, *, searcher: Any, scheduler: Any, num_samples: int,
               pauses_at: tuple[int, ...] | None = None) -> Any:
    """The one place a Ray Tune ``Tuner`` is assembled: the trainable, ``searcher`` behind a
    ``ConcurrencyLimiter``, ``scheduler``, the hard time limit, worker reuse
    (:data:`REUSE_WORKERS`), where the experiment lives. ``pauses_at``: see :func:`trainable`."""
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter

    return tune.Tuner(
        trainable(settings, pauses_at=pauses_at),
        tune_config=tune.TuneConfig(
            metric=SCORE, mode=settings.mode, num_samples=num_samples,
            search_alg=ConcurrencyLimiter(searcher, max_concurrent=settings.concurrency),
            scheduler=scheduler, trial_dirname_creator=trial_dirname,
            time_budget_s=settings.time_limit_s, reuse_actors=REUSE_WORKERS,
        ),
        run_config=run_config(settings),
    )


def restore_tuner(settings: TuneSettings, pauses_at: tuple[int, ...] | None = None) -> Any:
    """The ``Tuner`` of an experiment whose driver stopped: finished trials are kept as they
    are (never re-run), interrupted ones continue from their last checkpoint, and the searcher
    goes on proposing. Failed trials stay failed."""
    from ray import tune

    return tune.Tuner.restore(str(settings.experiment),
                              trainable=trainable(settings, pauses_at=pauses_at),
                              resume_unfinished=True, resume_errored=False,
                              restart_errored=False)


def run_config(settings: TuneSettings) -> Any:
    """Where and how Ray Tune keeps the experiment: results (in a local storage folder written
    as they come, :class:`~.callbacks.TrialFiles`), one checkpoint per trial, the trial events
    forwarded to the driver's listeners, retries of lost trials."""
    from ray import tune
    from ray.tune.logger import JsonLoggerCallback

    from dmlsearch.search.tune.callbacks import ForwardEvents
    from dmlsearch.search.tune.callbacks import TrialFiles

    local = "://" not in str(settings.storage_path)
    return tune.RunConfig(
        name=settings.name, storage_path=str(settings.storage_path),
        # the files first: a trial with an MLflow run has its params.json
        callbacks=[TrialFiles() if local else JsonLoggerCallback(), ForwardEvents()],
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        sync_config=tune.SyncConfig(sync_artifacts=True),
        failure_config=tune.FailureConfig(max_failures=settings.max_failures),
        verbose=settings.verbose,
    )


def begin(events: TrialEvents) -> None:
    """Before a Tuner is made: the driver's listeners, and Ray's result loggers cut to one."""
    from dmlsearch.search.tune.callbacks import set_events

    set_events(events)
    _only_json_results()


def can_resume(settings: TuneSettings) -> bool:
    from ray import tune

    return tune.Tuner.can_restore(str(settings.experiment))


def resume_tune(settings: TuneSettings, *, events: TrialEvents) -> list[TrialRecord]:
    """Continue a search whose driver stopped (:func:`restore_tuner`) until ``num_samples``
    trials exist, its saved experiment first brought up to date with its study
    (:func:`restore_experiment`)."""
    begin(events)
    restore_experiment(settings, [settings], events)
    return attribute_stops(fit(restore_tuner(settings)), settings)


def restore_experiment(settings: TuneSettings, searches: list[TuneSettings],
                       events: TrialEvents) -> None:
    """Before a restore: the experiment Ray saved says what the studies of ``searches`` say
    (:func:`~.restore.align_experiment`), and the driver's listeners hear the ends that only
    the studies held (an MLflow run the kill left open ends as its trial did)."""
    from dmlsearch.search.tune.restore import align_experiment

    ended = align_experiment(
        settings.experiment, [(s.optuna_storage, s.study_name) for s in searches],
        resources={"cpu": settings.cpus_per_trial, "gpu": settings.gpus_per_trial})
    for trial in ended:
        events.trial_started(trial.trial_id, trial.config)
        if trial.result.get("training_iteration") is not None:
            events.trial_result(trial.trial_id, trial.result)
        events.trial_finished(trial.trial_id, trial.state.value, trial.reason)


def _only_json_results() -> None:
    """Ray Tune writes every result three times by default: result.json, progress.csv and a
    TensorBoard event file (with a hint on the console pointing into Ray's temporary folder).
    The search reads result.json (learning curves, an interrupted search's trials); the other
    two cost time per result (docs/benchmarks.md, search efficiency) and are left out."""
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"


def trial_dirname(trial: Any) -> str:
    return f"trial_{trial.trial_id}"


def trainable(settings: TuneSettings, pauses_at: tuple[int, ...] | None = None) -> Any:
    """The trial function with its resources. ``pauses_at``: the epochs where a trial may be
    paused (where it saves a checkpoint); default: where ``settings.scheduler`` pauses."""
    from ray import tune

    resources = {"cpu": settings.cpus_per_trial, "gpu": settings.gpus_per_trial}
    if settings.replay is not None:  # the same search; trials read their curves from a table
        trainable = tune.with_parameters(
            replaytrial, table=settings.replay, speedup=settings.replay_speedup,
            checkpoints=settings.scheduler == "hyperband")  # HyperBand pauses trials
    else:
        if pauses_at is None:
            pauses_at = SCHEDULERS.get(settings.scheduler).pauses_at(settings)
        trainable = tune.with_parameters(dmltrial, cost=settings.pareto,
                                         pauses_at=tuple(pauses_at), plugins=settings.plugins)
    return tune.with_resources(trainable, resources)


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped the experiment: the search is not over (``dmlsearch resume`` continues
    it), and its running trials were not stopped by the scheduler. ``saved``: Ray Tune saved the
    experiment one last time (a second Ctrl-C, or Ray's own processes' end, cut that short: the
    resume then starts from its last regular save)."""

    def __init__(self, message: str = "", *, saved: bool = True) -> None:
        super().__init__(*((message,) if message else ()))
        self.saved = saved


@contextlib.contextmanager
def _interrupt_gracefully() -> Iterator[threading.Event]:
    """While the Tuner runs: the first Ctrl-C asks Ray Tune to stop as it does on its own
    (save the experiment's state one last time, then return) and is remembered, so that
    :func:`fit` raises :class:`SearchInterrupted` instead of handing back the running trials
    as if the scheduler had stopped them; a second Ctrl-C stops at once (the same
    exception, unsaved).

    Ray Tune catches SIGINT itself and returns from ``fit`` as if the experiment had ended,
    with nothing said to the caller. Its handler is turned off here
    (``TUNE_DISABLE_SIGINT_HANDLER``) and its other stop signal, SIGUSR1, which it registers
    for the same graceful stop, is sent instead. Outside the main thread (signals cannot be
    caught there) Ray Tune's own handling stays."""
    event = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield event
        return

    def on_interrupt(signum: int, frame: Any) -> None:
        del signum, frame
        if event.is_set():
            raise SearchInterrupted(saved=False)  # again: stop now
        if signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, signal.SIG_IGN, None):
            raise KeyboardInterrupt  # before Ray Tune listens: nothing of it to save
        event.set()
        os.kill(os.getpid(), signal.SIGUSR1)

    before_int, before_usr1 = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    before_env = os.environ.get(_NO_SIGINT)
    os.environ[_NO_SIGINT] = "1"
    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield event
    finally:
        for signum, before in ((signal.SIGINT, before_int), (signal.SIGUSR1, before_usr1)):
            if before is not None:  # None: set outside Python, not ours to put back
                signal.signal(signum, before)
        if before_env is None:
            os.environ.pop(_NO_SIGINT, None)
        else:
            os.environ[_NO_SIGINT] = before_env


_NO_SIGINT = "TUNE_DISABLE_SIGINT_HANDLER"  # read by Ray Tune when each fit starts


def fit(tuner: Any) -> list[TrialRecord]:
    """Run the Tuner to its end; one record per trial. A pruned trial's ``stopped_by`` is left
    empty here: :func:`attribute_stops` reads who stopped it from its study. Ctrl-C:
    :class:`SearchInterrupted`, after Ray Tune saved the experiment
    (:func:`_interrupt_gracefully`)."""
    from dmlsearch.search.tune.searcher import flush_failures

    with _interrupt_gracefully() as interrupted:
        try:
            grid = tuner.fit()
        except KeyboardInterrupt as exc:
            # a second Ctrl-C inside Ray's own wait comes out as Ray's plain KeyboardInterrupt
            if interrupted.is_set() and not isinstance(exc, SearchInterrupted):
                raise SearchInterrupted(saved=False) from None
            raise
        finally:
            flush_failures()  # no Optuna trial of a failed Ray trial is left open
    if interrupted.is_set():
        raise SearchInterrupted()
    records = []
    for result in grid:
        last = result.metrics or {}
        if result.error is not None:
            state, reason = TrialState.FAILED, short_reason(str(result.error))
        else:
            finished = last.get("trial_finished")
            state, reason = (TrialState.COMPLETED if finished else TrialState.PRUNED), None
        history = result.metrics_dataframe
        scores = [] if history is None or SCORE not in history else list(history[SCORE])
        records.append(record_from_result(
            last, config=result.config or {},
            trial_id=str(last.get("trial_id") or Path(result.path).name),
            state=state, reason=reason, path=str(result.path) if result.path else None,
            stopped_by="", scores=scores))
    return records


def attribute_stops(records: list[TrialRecord], settings: TuneSettings) -> list[TrialRecord]:
    """Each pruned trial's ``stopped_by``, as the searcher recorded it in the study (the
    scheduler, the time limit, a comparison's budget); the scheduler when none was recorded.
    A trial its study failed is failed here too, with the study's reason (Ray can hold it as
    ended: one that trained to its end without a score, or one whose end only the study held
    when a stopped search was restored)."""
    import optuna

    study = optuna.load_study(study_name=settings.study_name, storage=settings.optuna_storage)
    states = (optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL)
    ended = {t.user_attrs[RAY_TRIAL_ID]: t for t in study.get_trials(deepcopy=False, states=states)
             if RAY_TRIAL_ID in t.user_attrs}
    numbers = {t.user_attrs[RAY_TRIAL_ID]: t.number for t in study.get_trials(deepcopy=False)
               if RAY_TRIAL_ID in t.user_attrs}
    settled = []
    for record in records:
        record = dataclasses.replace(record, number=numbers.get(record.trial_id))
        stored = ended.get(record.trial_id)
        if stored is not None and stored.state == optuna.trial.TrialState.FAIL:
            if record.state is not TrialState.FAILED:
                record = dataclasses.replace(record, state=TrialState.FAILED, stopped_by=None,
                                             reason=stored.user_attrs.get(REASON, "failed"))
        elif record.state is TrialState.PRUNED:
            who = None if stored is None else stored.user_attrs.get(STOPPED_BY)
            record = dataclasses.replace(record, stopped_by=who or settings.scheduler)
        settled.append(record)
    return settled

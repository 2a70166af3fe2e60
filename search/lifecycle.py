"""A search's life on the driver, the one both ``run`` and ``compare`` live (a comparison is
several searches in one Ray Tune experiment):

    the results folder → the stores, made while Ray starts (:func:`open_stores`)
    → each search's ``search.yaml`` and MLflow study run (:func:`start_search`)
    → the Ray Tune experiment, Ray's output in ``ray.log`` (:func:`run_experiment`)
    → what it left open closed, its Optuna study settled (:func:`close_search`)
    → its pictures and importance, its best configuration retrained and tested once (or, in a
      replay, looked up), exported, ``summary.json``, its study run ended (:func:`finish_search`)

Every check of the user's input runs before (``prepare``); a failure while the stores are set
up leaves nothing behind, and a failure later ends the MLflow runs as FAILED (KILLED on
Ctrl-C, :func:`ended_on_failure`), never RUNNING.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from typing import TypeVar

from dmlsearch.search.finish import EnsembleOutcome
from dmlsearch.search.finish import SeedsOutcome
from dmlsearch.search.finish import ensemble_and_log
from dmlsearch.search.finish import export_best
from dmlsearch.search.finish import retrain_top
from dmlsearch.search.intensify import Intensified
from dmlsearch.search.intensify import intensify
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import Prepared
from dmlsearch.search.prepare import gpus_per_trial
from dmlsearch.search.provenance import package_version
from dmlsearch.search.replay import replayed_test_metrics
from dmlsearch.search.reporting import SearchProgress
from dmlsearch.search.reporting import counted
from dmlsearch.search.reporting import counted_of
from dmlsearch.search.reporting import note_markdown
from dmlsearch.search.reporting.importance import MIN_TRIALS
from dmlsearch.search.reporting.importance import skipped_line
from dmlsearch.search.reporting.importance import study_importance
from dmlsearch.search.reporting.importance import write_importance
from dmlsearch.search.reporting.plots import study_plots
from dmlsearch.search.results import ParetoSummary
from dmlsearch.search.results import StudyInfo
from dmlsearch.search.results import Summary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import budget_used
from dmlsearch.search.results import pareto_records
from dmlsearch.search.results import rank
from dmlsearch.search.results import rank_partial
from dmlsearch.search.results import write_summary
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import model_name
from dmlsearch.search.tracking import study_metrics
from dmlsearch.search.tune import SCHEDULERS
from dmlsearch.search.tune import SearchInterrupted
from dmlsearch.search.tune import TuneSettings
from dmlsearch.search.tune import create_storage
from dmlsearch.search.tune import init_ray
from dmlsearch.search.tune import max_trials
from dmlsearch.search.tune import ray_output_to
from dmlsearch.search.tune import settle_study
from dmlsearch.search.tune import shutdown_ray
from dmlsearch.search.tune.study import DATASET
from dmlsearch.search.tune.study import METRIC
from dmlsearch.search.tune.study import SPACE
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.plugins import carried
from dmlsearch.trainables.trial import DIAGNOSTICS_DIR
from dmlsearch.trainables.trial import run_trial

__all__ = ["QUIET", "Screen", "Search", "budget_text", "close_search", "ended_on_failure",
           "finish_search", "finish_study", "no_step", "open_search_stores", "open_stores",
           "run_experiment", "spreads", "start_search", "study_pictures", "trial_budget",
           "tune_settings"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Screen:
    """How a search shows itself: ``echo`` for its lines (start, summary), ``progress`` for the
    live trial progress on ``stream``, ``verbose`` to leave Ray's own output on the terminal
    instead of ``<out>/ray.log``."""

    echo: Callable[[str], None] = print
    progress: bool = False
    verbose: bool = False
    stream: Any = None  # where the progress goes (default: sys.stdout when the search starts)

    def ray_log(self, folder: StudyDir) -> Path | None:
        """Where Ray's own output goes: the folder's ``ray.log``, or the terminal (None)."""
        return None if self.verbose else folder.ray_log


QUIET = Screen(echo=lambda _line: None)


@contextlib.contextmanager
def no_step(what: str) -> Iterator[list[str]]:
    """A step of the finish, unannounced (no live progress on screen); what the block says
    about its outcome is dropped."""
    del what
    yield []


@dataclasses.dataclass
class Search:
    """One search as the driver holds it: its options, its checked space and base settings, its
    results folder and its MLflow tracker (a comparison's method also has its ``method`` name)."""

    opts: SearchOptions
    prepared: Prepared
    folder: StudyDir
    tracker: Tracker | None = None
    method: str | None = None

    @property
    def run(self) -> Tracker:
        """The tracker of its MLflow study run (opened by :func:`open_stores`' ``make``)."""
        if self.tracker is None:
            raise RuntimeError(f"the stores of {self.folder.path} are not open")
        return self.tracker

    def settings(self) -> TuneSettings:
        return tune_settings(self.opts, self.prepared, self.folder)


def tune_settings(opts: SearchOptions, prepared: Prepared, folder: StudyDir) -> TuneSettings:
    """What the Ray Tune layer runs: the options, the prepared space's epochs, the folder's
    stores (``--grace-period``: a quarter of the epochs unless given), and its budget
    (:func:`trial_budget`: ``--trials N`` is N trials' worth of epochs, which early stopping
    spreads over more, shorter trials)."""
    max_t = prepared.max_iterations
    settings = TuneSettings(
        storage_path=folder.ray_storage, experiment=folder.tune_experiment,
        num_samples=prepared.trials, max_failures=opts.max_failures,
        concurrency=opts.concurrency, max_iterations=max_t,
        grace_period=max(1, max_t // 4) if opts.grace_period is None else opts.grace_period,
        reduction_factor=opts.reduction_factor, cpus_per_trial=opts.cpus_per_trial,
        gpus_per_trial=gpus_per_trial(opts), seed=opts.seed,
        optuna_storage=folder.optuna_url, study_name=folder.name,
        mode=prepared.mode, sampler=opts.sampler, scheduler=opts.scheduler,
        time_budget_s=opts.time_budget_s, time_limit_s=opts.time_limit_s,
        max_epochs=opts.epoch_budget, pareto=opts.pareto, replay=opts.replay,
        replay_speedup=opts.replay_speedup,
        study_attrs=((SPACE, prepared.space.name), (DATASET, prepared.base.dataset),
                     (METRIC, prepared.base.metric)),
        objective_names=(f"val {prepared.base.metric}",
                         *(() if opts.pareto is None else (opts.pareto,))),
        plugins=tuple(carried(prepared.base.plugins).items()),
        keep_to_end=() if prepared.transfer is None else prepared.transfer.to_end(),
    )
    return trial_budget(settings, prepared.trials, grid=opts.sampler == "grid",
                        kept=opts.intensify)


def trial_budget(settings: TuneSettings, trials: int, *, grid: bool, kept: int = 0
                 ) -> TuneSettings:
    """``trials`` trials' worth of epochs (``trials`` × max_t; also below ``--epoch-budget``),
    and room for as many trials as early stopping lets them fund (:func:`max_trials`): a
    scheduler that stops most trials early leaves the budget to more of them instead of
    leaving it unspent (a 15-trial search that stopped 13 trials after 2 of 8 epochs trained 5
    trials' worth). A grid study trains its points: ``trials`` of them. ``kept`` trainings'
    worth are kept for after the search (``--intensify``'s second seeds)."""
    if grid:
        return settings
    epochs = (trials - kept) * settings.max_iterations
    if settings.max_epochs is not None:
        epochs = min(epochs, settings.max_epochs)
    return dataclasses.replace(settings, num_samples=max_trials(trials - kept, settings),
                               max_epochs=epochs)


def spreads(opts: SearchOptions, settings: TuneSettings) -> bool:
    """Whether early stopping spreads the budget over more trials than ``--trials``."""
    return opts.sampler != "grid" and SCHEDULERS.get(settings.scheduler).first_rung(
        settings) is not None


def budget_text(search: Search) -> str:
    """What the search may train, as the screen says it."""
    kept = search.opts.intensify
    trials, max_t = search.prepared.trials - kept, search.prepared.max_iterations
    then = (f", then second seeds of the best {kept} (--intensify {kept}: {kept} of --trials "
            f"{search.prepared.trials})") if kept else ""
    if not spreads(search.opts, search.settings()):
        return f"{counted(trials, 'trial')}{then}"
    return (f"{counted_of(trials, 'trial')} worth of training ({trials} x "
            f"{counted(max_t, 'epoch')}, spread by early stopping over more trials){then}")


# ---- before the experiment ----------------------------------------------------------------------
def open_stores(folder: StudyDir, make: Callable[[], T], *, created: bool,
                mlflow_uri: str | None, screen: Screen, keep_ray: bool) -> T:
    """The stores (``make``: the MLflow trackers, the Optuna tables), made in a thread while Ray
    starts on this one (each takes seconds and they do not depend on each other; ``ray.init``
    installs its SIGTERM handler only from the main thread; docs/benchmarks.md,
    orchestration). A user's ``--mlflow-uri`` is made first, before Ray starts, so a server
    that does not answer fails at once. If anything fails, Ray is stopped (unless ``keep_ray``:
    it ran before the search) and ``folder`` is removed (or emptied, if it was the user's)."""
    try:
        with ray_output_to(screen.ray_log(folder)):
            if mlflow_uri is not None:
                return make()
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                made = pool.submit(make)
                init_ray()
                return made.result()
    except BaseException:
        if not keep_ray:
            shutdown_ray()
        folder.discard(created=created)
        raise


def open_search_stores(search: Search, uri: str, *, experiment: str,
                       artifacts: Path | None, method: str | None = None) -> Tracker:
    """A search's stores in its folder: its Optuna tables, and its MLflow tracker in the
    experiment ``experiment`` (a comparison's methods share the comparison's)."""
    search.folder.path.mkdir(parents=True, exist_ok=True)
    tracker = Tracker(uri, experiment, artifact_location=artifacts, method=method)
    create_storage(search.folder.optuna_url)
    search.tracker = tracker
    return tracker


def start_search(search: Search, *, revision: str, name: str, params: dict[str, Any],
                 tags: dict[str, str], resolved: dict[str, Any] | None = None) -> None:
    """A search's ``search.yaml`` (so ``report``, ``export`` and ``importance`` read its folder,
    and ``resume`` continues it) and its MLflow study run, with its inputs."""
    space, base = search.prepared.space, search.prepared.base
    transfer = search.prepared.transfer
    search.folder.write_resolved({
        "space": space.name, "space_source": space.source, "options": search.opts.to_json(),
        "base": base.to_flat(), "searched": list(search.prepared.searched),
        "code_revision": revision, "dmlsearch": package_version(),
        **({} if transfer is None else {"transfer": transfer.to_json()}), **(resolved or {})})
    tracker = search.run
    tracker.describe(searched=search.prepared.searched, data=search.prepared.data)
    if transfer is not None:
        tags = {**tags, "dmlsearch.prior_from": " ".join(s.name for s in transfer.sources)[:5000]}
    tracker.start_study(name=name, params=params, tags={
        "dmlsearch.code_revision": revision, "dmlsearch.results": str(search.folder.path),
        "dmlsearch.space_source": space.source[:5000], **tags})
    tracker.log_artifact(search.folder.search_yaml)
    if transfer is not None:
        write_atomic(search.folder.transfer_json, json.dumps(transfer.to_json(), indent=2))
        tracker.log_artifact(search.folder.transfer_json)
    tracker.log_study_inputs()


# ---- the experiment -----------------------------------------------------------------------------
def run_experiment(folder: StudyDir, run: Callable[[], T], *, screen: Screen,
                   progress: SearchProgress | None, keep_ray: bool) -> T:
    """``run`` (a Ray Tune experiment) with Ray started, its output in ``folder``'s
    ``ray.log`` and the live ``progress`` on screen; Ray stopped after, whatever happened,
    unless ``keep_ray`` (Ray ran before the search: a program's own Ray is left as it was)."""
    hint = f"continue it with `dmlsearch resume {folder.path}`"
    with ray_output_to(screen.ray_log(folder)), progress or contextlib.nullcontext():
        init_ray()
        failed = False
        try:
            return run()
        except SearchInterrupted as exc:
            failed = True
            what = ("Ray Tune saved the experiment" if exc.saved else "stopped before Ray Tune "
                    "saved the experiment again, so it goes on from its last save")
            raise SearchInterrupted(f"{what}; {hint}", saved=exc.saved) from None
        except BaseException:
            failed = True
            raise
        finally:
            if not keep_ray:
                try:
                    shutdown_ray()
                except KeyboardInterrupt:  # (again) while Ray stops
                    if not failed:  # the trials had ended
                        raise SearchInterrupted(f"stopped after the trials, while Ray shut "
                                                f"down; {hint}") from None
                    # else the exception on its way (a first Ctrl-C's says how to go on) goes on


def close_search(search: Search, records: list[TrialRecord], settings: TuneSettings) -> int:
    """After the experiment: the files the trials left beside them (synced when they ended) on
    their MLflow runs; nothing left half-open (runs of trials that never came back end as
    KILLED, Optuna trials Ray never reported, asked for just before a crash, end as FAIL).
    Returns how many proposals repeated a trained configuration and were answered untrained."""
    tracker = search.run
    for record in records:
        folder = Path(record.path or "") / DIAGNOSTICS_DIR
        if record.path and folder.is_dir():
            tracker.trial_artifacts(record.trial_id, folder)
    tracker.close_dangling()
    return settle_study(settings.optuna_storage, settings.study_name)


@contextlib.contextmanager
def ended_on_failure(*trackers: Tracker) -> Iterator[None]:
    """Each study run that the block leaves open ends KILLED (Ctrl-C) or FAILED (an error),
    its trials' open runs KILLED (a resume takes them up again); one the block ended keeps its
    end (a comparison's method that finished before another failed). A Ctrl-C while they are
    closed stops the closing, and the block's exception goes on (its message says how to
    continue)."""
    try:
        yield
    except BaseException as exc:
        status = "KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED"
        for tracker in trackers:
            if tracker.study_open:
                try:
                    tracker.close_dangling()
                    tracker.end_study(metrics={}, status=status)
                except KeyboardInterrupt:  # Ctrl-C again: stop closing; a resume takes them up
                    break
                except Exception as store_error:  # noqa: BLE001 - the block's error comes first
                    log.warning("could not end the MLflow run %s as %s: %s",
                                tracker.parent_id, status, store_error)
        raise


# ---- after the experiment -----------------------------------------------------------------------
def finish_search(search: Search, records: list[TrialRecord], repeats: int, *, revision: str,
                  started: float, step: Callable[[str], Any] = no_step) -> Summary:
    """A search finished: its pictures and importance, its best configuration(s) retrained and
    tested once (:func:`finish_study`), ``summary.json``, and its study run ended with the
    study's metrics and note (FAILED when no trial has a score)."""
    tracker = search.run
    with step("Drawing the study's plots and importance") as outcome:
        outcome.append(study_pictures(records, search.prepared, search.folder, tracker))
    summary = finish_study(search.opts, search.prepared, search.folder, tracker, records,
                           revision=revision, repeats=repeats, started=started, step=step)
    write_summary(search.folder, summary)
    tracker.log_artifact(search.folder.summary_json)
    tracker.set_note(note_markdown(summary))
    tracker.end_study(metrics=study_metrics(summary),
                      status="FINISHED" if summary.best_trial is not None else "FAILED")
    return summary


def study_pictures(records: list[TrialRecord], prepared: Prepared, study_dir: StudyDir,
                   tracker: Tracker) -> str:
    """Plots and importance of the finished search, saved and logged to the study run; what
    became of the importance, in a few words. A picture that cannot be drawn is a warning: the
    trials' results are what matter."""
    metric = prepared.base.metric
    try:
        for path in study_plots(records, prepared.space.params, metric, prepared.mode,
                                study_dir.plots):
            tracker.log_artifact(path, artifact_path=study_dir.plots.name)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the study's plots could not be drawn: %s: %s", type(exc).__name__, exc)
    try:
        report = study_importance(study_dir, min_trials=MIN_TRIALS, metric=metric)
        if not report.analyses:  # too few trials at full budget: `dmlsearch importance` says
            return "importance skipped: " + skipped_line(report, study_dir.path)
        write_importance(report, study_dir)
        tracker.log_artifacts(study_dir.importance)
        return (f"importance of {report.trials} trials at {report.budget} in "
                f"{study_dir.importance}")
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the importance analysis failed: %s: %s", type(exc).__name__, exc)
        return f"importance failed ({type(exc).__name__}; see the warning above)"


def _driver_threads() -> int:
    """The CPUs this driver may use: a CPU search's retrain runs alone here after the trials,
    so it computes with all of them (a trial's count, 1 by default, made the quick start's
    retrain three times slower)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def finish_study(opts: SearchOptions, prepared: Prepared, study_dir: StudyDir, tracker: Tracker,
                 records: list[TrialRecord], *, revision: str, repeats: int, started: float,
                 step: Callable[[str], Any] = no_step) -> Summary:
    """Retrain the best configuration(s), test once, export; the search's summary."""
    settings = tune_settings(opts, prepared, study_dir)
    base = prepared.base
    ranked = rank(records, prepared.mode)  # the trials that trained to their end
    if not ranked:  # none did (a time limit, a small budget): the deepest ones, compared there
        partial = rank_partial(records, prepared.mode)
        ranked = [r for r in partial if r.iterations == partial[0].iterations]
    threads = _driver_threads() if prepared.auto_threads and opts.replay is None else None
    fits: list[Intensified] = []
    if opts.intensify and len(rank(records, prepared.mode)) >= 2:
        ranked, fits = _intensified(ranked, opts.intensify, prepared.mode, threads, step)
    best = ranked[0] if ranked else None
    retrains: list[SeedsOutcome] = []
    ensemble: EnsembleOutcome | None = None
    export = None
    replayed = None
    if best is not None and opts.replay is not None:  # nothing to retrain: the table answers
        replayed = replayed_test_metrics(opts.replay, best.config, epochs=best.iterations,
                                         metric=base.metric, mode=prepared.mode)
    elif best is not None and opts.retrain:
        if best.config.get("protocol", base.protocol) == "kfold":
            with step(f"Training the fold models of trial {best.trial_id} for the ensemble"):
                ensemble = ensemble_and_log(best.config, tracker=tracker,
                                            run_name=f"fold ensemble {best.trial_id}",
                                            tags={"dmlsearch.trial_id": best.trial_id})
        top = min(opts.retrain_top, len(ranked))
        with step(f"Retraining the best {'configuration' if top == 1 else f'{top} configurations'}"
                  f" on all training classes ({opts.seeds} seed{'s' if opts.seeds > 1 else ''}"
                  f"{' each' if top > 1 else ''}) and testing once"):
            retrains = retrain_top(
                ranked, top=opts.retrain_top, seeds=opts.seeds, tracker=tracker,
                register_as=model_name(study_dir.name) if opts.register else None,
                views=study_dir.plots, threads=threads)
        export = export_best(study_dir.best_config, best=best, retrain=retrains[0].runs[0],
                             study=study_dir.name, space=prepared.space, metric=base.metric,
                             revision=revision, ensemble=ensemble)
        tracker.log_artifact(export)
    first = retrains[0].runs[0] if retrains else None
    sets = (None, None) if prepared.data is None else prepared.data.eval_sets(
        {**base.to_flat(), **(best.config if best is not None else {})})
    return Summary(
        study=StudyInfo(name=study_dir.name, space=prepared.space.name, dataset=base.dataset,
                        protocol=base.protocol, metric=base.metric, mode=prepared.mode,
                        sampler=opts.sampler, scheduler=opts.scheduler,
                        searched=prepared.searched,
                        first_rung=SCHEDULERS.get(opts.scheduler).first_rung(settings),
                        max_iterations=prepared.max_iterations, grid_size=prepared.grid_size,
                        replay=opts.replay, budget_trials=prepared.trials,
                        budget_epochs=settings.max_epochs if spreads(opts, settings) else None,
                        retrain_threads=threads,
                        transfer=None if prepared.transfer is None
                        else prepared.transfer.to_json()),
        trials=records, seconds=time.time() - started, tracking_uri=tracker.uri,
        repeats_answered=repeats, best_trial=None if best is None else best.trial_id,
        budget=budget_used(records, cpus_per_trial=opts.cpus_per_trial,
                           gpus_per_trial=gpus_per_trial(opts)),
        pareto=None if opts.pareto is None else ParetoSummary(
            cost=opts.pareto,
            trial_ids=[r.trial_id for r in pareto_records(records, prepared.mode)]),
        test_metrics=replayed if first is None else first.test_metrics,
        registered_model=None if first is None else first.registered,
        retrains=[r.to_summary() for r in retrains],
        fold_ensemble=None if ensemble is None else ensemble.to_summary(),
        export=None if export is None else str(export),
        validation_set=sets[0], test_set=sets[1] if first or ensemble else None,
        intensified=[f.to_json() for f in fits],
    )


def _intensified(ranked: list[TrialRecord], top: int, mode: str, threads: int | None,
                 step: Callable[[str], Any]) -> tuple[list[TrialRecord], list[Intensified]]:
    """``--intensify``: the ``top`` best trained again with a second seed in this process
    (search/intensify.py); ``ranked`` with them in the order of their means."""
    def fit(config: dict[str, Any]) -> float:
        return run_trial(TrialConfig.from_flat(
            {**config, **({} if threads is None else {"threads": threads})})).score

    count = min(top, len(ranked))
    with step(f"Training the best {count} configurations again with a second seed (--intensify)"):
        fits = intensify(ranked, top=count, mode=mode, fit=fit)
    order = {f.trial_id: i for i, f in enumerate(fits)}
    head = sorted(ranked[:count], key=lambda r: order[r.trial_id])
    return [*head, *ranked[count:]], fits

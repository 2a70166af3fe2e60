"""``dmlsearch run`` and ``dmlsearch resume``, top to bottom:

    prepare (every check of the user's input)
    → the results folder → the stores (MLflow, Optuna) while Ray starts → search.yaml
    → the search (Ray Tune: searcher → limiter → scheduler → trials)
    → pictures and importance → retrain the best, test once → export
    → summary.json → the closing summary on the terminal

Order matters for the user: every check that can fail on their input runs before any folder is
written or any trial starts, and a failure while the stores are set up leaves nothing behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dmlsearch.search import tune
from dmlsearch.search.curves import load_table
from dmlsearch.search.finish.export import export_best
from dmlsearch.search.finish.retrain import EnsembleOutcome
from dmlsearch.search.finish.retrain import SeedsOutcome
from dmlsearch.search.finish.retrain import ensemble_and_log
from dmlsearch.search.finish.retrain import retrain_top
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import Prepared
from dmlsearch.search.prepare import gpus_per_trial
from dmlsearch.search.prepare import prepare
from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import package_version
from dmlsearch.search.record import ParetoSummary
from dmlsearch.search.record import StudyInfo
from dmlsearch.search.record import Summary
from dmlsearch.search.record import TrialRecord
from dmlsearch.search.record import budget_used
from dmlsearch.search.record import pareto_records
from dmlsearch.search.record import rank
from dmlsearch.search.record import rank_partial
from dmlsearch.search.record import write_summary
from dmlsearch.search.reporting.console import render_summary
from dmlsearch.search.reporting.importance import MIN_TRIALS
from dmlsearch.search.reporting.importance import analyse_study
from dmlsearch.search.reporting.importance import write_importance
from dmlsearch.search.reporting.plots import study_plots
from dmlsearch.search.reporting.progress import SearchProgress
from dmlsearch.search.reporting.sections import note_markdown
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import browse_urls
from dmlsearch.search.tracking import model_name
from dmlsearch.search.tracking import study_metrics
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.trial import DIAGNOSTICS_DIR

__all__ = ["QUIET", "Screen", "finish_study", "resume_search", "run_search", "study_pictures",
           "tune_settings"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Screen:
    """How a search shows itself: ``echo`` for its lines (start, summary), ``progress`` for the
    live trial progress on ``stream``, ``verbose`` to leave Ray's own output on the terminal
    instead of ``<out>/ray.log``."""

    echo: Callable[[str], None] = print
    progress: bool = False
    verbose: bool = False
    stream: Any = None  # where the progress goes (default: sys.stdout when the search starts)


QUIET = Screen(echo=lambda _line: None)


def run_search(opts: SearchOptions, *, echo: Callable[[str], None] = print,
               screen: Screen | None = None) -> Summary:
    started = time.time()
    screen = screen or Screen(echo=echo)
    prepared = prepare(opts)  # every check of the user's input, before anything starts
    for note in prepared.notes:
        echo(note)
    study_dir, created = StudyDir.create(opts.out, prefix=opts.space, storage=opts.storage)
    try:
        with tune.ray_output_to(None if screen.verbose else study_dir.ray_log):
            tracker = _open_stores(study_dir, opts)
    except BaseException:
        tune.shutdown_ray()
        study_dir.discard(created=created)
        raise
    tracker.describe(searched=prepared.searched, data=prepared.data)
    revision = code_revision()
    space, base = prepared.space, prepared.base
    study_dir.write_resolved({
        "space": space.name, "space_source": space.source, "options": opts.to_json(),
        "base": base.to_flat(), "searched": list(prepared.searched),
        "code_revision": revision, "dmlsearch": package_version(),
    })
    tracker.start_study(
        name=f"search {study_dir.name}",
        params={"space": space.name, "dataset": base.dataset, "protocol": base.protocol,
                "metric": base.metric, "trials": prepared.trials,
                "concurrency": opts.concurrency, "sampler": opts.sampler,
                "scheduler": opts.scheduler, "seed": opts.seed,
                "pareto": opts.pareto or "none", "time_budget_s": opts.time_budget_s or "none",
                "time_limit_s": opts.time_limit_s or "none",
                "epoch_budget": opts.epoch_budget or "none",
                "cpus_per_trial": opts.cpus_per_trial, "gpus_per_trial": opts.gpus_per_trial,
                "searched": ",".join(prepared.searched)},
        tags={"dmlsearch.code_revision": revision, "dmlsearch.results": str(study_dir.path),
              "dmlsearch.space_source": space.source[:5000]},
    )
    tracker.log_artifact(study_dir.search_yaml)
    tracker.log_study_inputs()
    if prepared.preview:
        screen.echo(prepared.preview)
    screen.echo(f"dmlsearch: {prepared.trials} trials of space {space.name!r} on "
                f"{base.dataset} ({base.protocol} protocol, metric {base.metric}, sampler "
                f"{opts.sampler}, scheduler {opts.scheduler}, {opts.concurrency} at a time); "
                f"results in {study_dir.path}")
    return _search_and_finish(opts, prepared, study_dir, tracker, revision=revision,
                              started=started, screen=screen, resume=False)


def resume_search(out: Path, *, echo: Callable[[str], None] = print,
                  screen: Screen | None = None) -> Summary:
    """``dmlsearch resume OUT``: continue the search whose driver stopped, then finish it as
    ``run`` would (retrain, export, summary). Completed trials are kept, never re-run;
    interrupted ones continue from their last checkpoint (Ray Tune's experiment state)."""
    started = time.time()
    screen = screen or Screen(echo=echo)
    study_dir = StudyDir.of_search(out)
    if not study_dir.search_yaml.is_file():
        raise UserError(
            f"no search to resume in {study_dir.path}: expected the search.yaml that "
            "`dmlsearch run` writes first; give the --out folder of a search that was started"
        )
    if study_dir.summary_json.is_file():
        raise UserError(f"the search in {study_dir.path} finished already (summary.json is "
                        "there); start a new one with `dmlsearch run`")
    opts = SearchOptions.from_json(study_dir.read_resolved().get("options") or {},
                                   out=study_dir.path)
    prepared = prepare(opts)
    settings = tune_settings(opts, prepared, study_dir)
    if not tune.can_resume(settings):
        raise UserError(
            f"the search in {study_dir.path} stopped before Ray Tune saved any state "
            f"({settings.experiment} has none); start it again with `dmlsearch run` and a "
            "new --out"
        )
    tracker = Tracker(opts.mlflow_uri or study_dir.default_tracking_uri, study_dir.name,
                      artifact_location=study_dir.artifacts)
    tracker.attach_study()
    tracker.describe(searched=prepared.searched, data=prepared.data)
    screen.echo(f"dmlsearch: resuming the search in {study_dir.path} ({prepared.trials} trials "
                f"of space {prepared.space.name!r})")
    return _search_and_finish(opts, prepared, study_dir, tracker, revision=code_revision(),
                              started=started, screen=screen, resume=True)


def _open_stores(study_dir: StudyDir, opts: SearchOptions) -> Tracker:
    """The MLflow experiment and the Optuna tables. A user's ``--mlflow-uri`` is checked before
    anything starts. The default stores are SQLite files in the results folder: their set-up
    (MLflow's migrations, the Optuna tables) and Ray's start take seconds each and do not depend
    on each other, so the stores are made in a thread while Ray starts on this one (``ray.init``
    installs its SIGTERM handler only from the main thread); docs/benchmarks.md, orchestration."""
    if opts.mlflow_uri is not None:
        return _stores(study_dir, opts.mlflow_uri)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        stores = pool.submit(_stores, study_dir, study_dir.default_tracking_uri)
        tune.init_ray()
        return stores.result()


def _stores(study_dir: StudyDir, uri: str) -> Tracker:
    tracker = Tracker(uri, study_dir.name, artifact_location=study_dir.artifacts)
    tune.create_storage(study_dir.optuna_url)
    return tracker


def _search_and_finish(
    opts: SearchOptions, prepared: Prepared, study_dir: StudyDir, tracker: Tracker, *,
    revision: str, started: float, screen: Screen, resume: bool,
) -> Summary:
    status = "FAILED"
    progress = SearchProgress(
        screen.stream or sys.stdout, trials=prepared.trials, metric=prepared.base.metric,
        mode=prepared.mode, searched=prepared.searched, concurrency=opts.concurrency,
        max_iterations=prepared.max_iterations) if screen.progress else None
    step = progress.step if progress is not None else no_step
    try:
        records, repeats = _search(opts, prepared, study_dir, tracker, resume=resume,
                                   screen=screen, progress=progress)
        with step("Drawing the study's plots and importance"):
            study_pictures(records, prepared, study_dir, tracker)
        summary = finish_study(opts, prepared, study_dir, tracker, records, revision=revision,
                          repeats=repeats, started=started, step=step)
        write_summary(study_dir, summary)
        tracker.log_artifact(study_dir.summary_json)
        tracker.set_note(note_markdown(summary))
        status = "FINISHED" if summary.best_trial is not None else "FAILED"
        tracker.end_study(metrics=study_metrics(summary), status=status)
    except KeyboardInterrupt:
        tracker.end_study(metrics={}, status="KILLED")
        raise
    except BaseException:
        if status != "FINISHED":
            tracker.end_study(metrics={}, status="FAILED")
        raise
    screen.echo(render_summary(
        summary, results=str(study_dir.path), browse=browse_command(tracker.uri),
        ray_log=None if screen.verbose else str(study_dir.ray_log),
        urls=browse_urls(tracker.uri, tracker.experiment_id, prepared.mode)))
    return summary


@contextlib.contextmanager
def no_step(what: str) -> Iterator[None]:
    del what
    yield


def _search(opts: SearchOptions, prepared: Prepared, study_dir: StudyDir, tracker: Tracker, *,
            resume: bool, screen: Screen, progress: SearchProgress | None,
            ) -> tuple[list[TrialRecord], int]:
    """The search's trial records, and how many repeated proposals were answered untrained."""
    settings = dataclasses.replace(tune_settings(opts, prepared, study_dir),
                                   verbose=1 if screen.verbose else 0)
    events = tracker if progress is None else tune.EveryListener(tracker, progress)
    with tune.ray_output_to(None if screen.verbose else study_dir.ray_log), \
            progress or contextlib.nullcontext():
        tune.init_ray()
        try:
            if resume:
                records = tune.resume_tune(settings, events=events)
            else:
                records = tune.run_tune(settings, define_by_run=prepared.space.define_by_run,
                                        warm_starts=prepared.points, events=events)
        finally:
            tune.shutdown_ray()
    for record in records:  # files the trials left beside them (synced when they ended)
        folder = Path(record.path or "") / DIAGNOSTICS_DIR
        if record.path and folder.is_dir():
            tracker.trial_artifacts(record.trial_id, folder)
    # Nothing left half-open: runs of trials that never came back end as KILLED in MLflow,
    # and Optuna trials Ray never reported (asked for just before a crash) end as FAIL.
    tracker.close_dangling()
    return records, tune.settle_study(settings.optuna_storage, settings.study_name)


def tune_settings(opts: SearchOptions, prepared: Prepared,
                   study_dir: StudyDir) -> tune.TuneSettings:
    max_t = prepared.max_iterations
    return tune.TuneSettings(
        storage_path=study_dir.ray_storage, experiment=study_dir.tune_experiment,
        num_samples=prepared.trials, max_failures=opts.max_failures,
        concurrency=opts.concurrency, max_iterations=max_t,
        grace_period=opts.grace_period or max(1, max_t // 4),
        reduction_factor=opts.reduction_factor, cpus_per_trial=opts.cpus_per_trial,
        gpus_per_trial=gpus_per_trial(opts), seed=opts.seed,
        optuna_storage=study_dir.optuna_url, study_name=study_dir.name,
        mode=prepared.mode, sampler=opts.sampler, scheduler=opts.scheduler,
        time_budget_s=opts.time_budget_s, time_limit_s=opts.time_limit_s,
        max_epochs=opts.epoch_budget, pareto=opts.pareto, replay=opts.replay,
        replay_speedup=opts.replay_speedup,
    )


def study_pictures(records: list[TrialRecord], prepared: Prepared, study_dir: StudyDir,
                    tracker: Tracker) -> None:
    """Plots and importance of the finished search, saved and logged to the study run. A
    picture that cannot be drawn is a warning: the trials' results are what matter."""
    metric = prepared.base.metric
    try:
        for path in study_plots(records, prepared.space.params, metric, prepared.mode,
                                study_dir.plots):
            tracker.log_artifact(path, artifact_path=study_dir.plots.name)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the study's plots could not be drawn: %s: %s", type(exc).__name__, exc)
    try:
        report = analyse_study(tune.load_study(study_dir), min_trials=MIN_TRIALS)
        if report.analyses and report.trials >= MIN_TRIALS:  # else `dmlsearch importance`
            write_importance(report, study_dir)
            tracker.log_artifacts(study_dir.importance)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the importance analysis failed: %s: %s", type(exc).__name__, exc)


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
    best = ranked[0] if ranked else None
    retrains: list[SeedsOutcome] = []
    ensemble: EnsembleOutcome | None = None
    export = None
    replayed = None
    if best is not None and opts.replay is not None:  # nothing to retrain: the table answers
        replayed = load_table(opts.replay).lookup(best.config).test_at(
            best.iterations, base.metric, prepared.mode)
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
                views=study_dir.plots)
        export = export_best(study_dir.best_config, best=best, retrain=retrains[0].runs[0],
                             study=study_dir.name, space=prepared.space, metric=base.metric,
                             revision=revision, ensemble=ensemble)
        tracker.log_artifact(export)
    first = retrains[0].runs[0] if retrains else None
    return Summary(
        study=StudyInfo(name=study_dir.name, space=prepared.space.name, dataset=base.dataset,
                        protocol=base.protocol, metric=base.metric, mode=prepared.mode,
                        sampler=opts.sampler, scheduler=opts.scheduler,
                        searched=prepared.searched,
                        first_rung=tune.SCHEDULERS.get(opts.scheduler).first_rung(settings),
                        max_iterations=prepared.max_iterations, grid_size=prepared.grid_size,
                        replay=opts.replay),
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
    )

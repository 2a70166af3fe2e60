"""``dmlsearch run`` and ``dmlsearch resume``, top to bottom, on the search's life
(:mod:`dmlsearch.search.lifecycle`):

    prepare (every check of the user's input)
    → the results folder → the stores (MLflow, Optuna) while Ray starts → search.yaml
    → the search (Ray Tune: searcher → limiter → scheduler → trials)
    → pictures and importance → retrain the best, test once → export
    → summary.json → the closing summary on the terminal

Order matters for the user: every check that can fail on their input runs before any folder is
written or any trial starts, and a failure while the stores are set up leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dmlsearch.search.lifecycle import Screen
from dmlsearch.search.lifecycle import Search
from dmlsearch.search.lifecycle import budget_text
from dmlsearch.search.lifecycle import close_search
from dmlsearch.search.lifecycle import ended_on_failure
from dmlsearch.search.lifecycle import finish_search
from dmlsearch.search.lifecycle import no_step
from dmlsearch.search.lifecycle import open_search_stores
from dmlsearch.search.lifecycle import open_stores
from dmlsearch.search.lifecycle import run_experiment
from dmlsearch.search.lifecycle import spreads
from dmlsearch.search.lifecycle import start_search
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import prepare
from dmlsearch.search.provenance import code_revision
from dmlsearch.search.reporting import SearchProgress
from dmlsearch.search.reporting import render_summary
from dmlsearch.search.results import Summary
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import EXPERIMENT_KEY
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import browse_urls
from dmlsearch.search.tracking import experiment_for
from dmlsearch.search.tune import EveryListener
from dmlsearch.search.tune import can_resume
from dmlsearch.search.tune import ray_running
from dmlsearch.search.tune import resume_tune
from dmlsearch.search.tune import run_tune
from dmlsearch.trainables.errors import UserError

__all__ = ["resume_search", "run_search"]


def run_search(opts: SearchOptions, *, echo: Callable[[str], None] = print,
               screen: Screen | None = None) -> Summary:
    started = time.time()
    screen = screen or Screen(echo=echo)
    keep_ray = ray_running()  # a program's own Ray is left running after the search
    prepared = prepare(opts)  # every check of the user's input, before anything starts
    study_dir, created = StudyDir.create(opts.out, prefix=opts.space, storage=opts.storage)
    for note in prepared.notes:  # after the last check: an error is the only line
        screen.echo(note)
    search = Search(opts, prepared, study_dir)
    uri = opts.mlflow_uri or study_dir.default_tracking_uri
    # MLFLOW_EXPERIMENT_NAME: the user's experiment, whose artifacts go where MLflow puts an
    # experiment's (not into this folder, which other searches' runs would then point into)
    experiment, named = experiment_for(study_dir.name)
    artifacts = None if named else study_dir.artifacts
    open_stores(study_dir, lambda: open_search_stores(search, uri, experiment=experiment,
                                                      artifacts=artifacts),
                created=created, mlflow_uri=opts.mlflow_uri, screen=screen, keep_ray=keep_ray)
    revision = code_revision()
    space, base = prepared.space, prepared.base
    start_search(
        search, revision=revision, name=f"search {study_dir.name}",
        params={"space": space.name, "dataset": base.dataset, "protocol": base.protocol,
                "metric": base.metric, "trials": prepared.trials,
                "concurrency": opts.concurrency, "sampler": opts.sampler,
                "scheduler": opts.scheduler, "seed": opts.seed,
                "pareto": opts.pareto or "none", "time_budget_s": opts.time_budget_s or "none",
                "time_limit_s": opts.time_limit_s or "none",
                "epoch_budget": opts.epoch_budget or "none",
                "cpus_per_trial": opts.cpus_per_trial, "gpus_per_trial": opts.gpus_per_trial,
                "searched": ",".join(prepared.searched)},
        tags={}, resolved={EXPERIMENT_KEY: experiment})
    if prepared.preview:
        screen.echo(prepared.preview)
    screen.echo(f"dmlsearch: {budget_text(search)} of space {space.name!r} on "
                f"{base.dataset} ({base.protocol} protocol, metric {base.metric}, sampler "
                f"{opts.sampler}, scheduler {opts.scheduler}, {opts.concurrency} at a time); "
                f"results in {study_dir.path}")
    return _search_and_finish(search, revision=revision, started=started, screen=screen,
                              resume=False, keep_ray=keep_ray)


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
    try:
        opts.check()
    except UserError as exc:
        raise UserError(f"{study_dir.search_yaml}: options: {exc}") from None
    search = Search(opts, prepare(opts), study_dir)
    settings = search.settings()
    if not can_resume(settings):
        raise UserError(
            f"the search in {study_dir.path} stopped before Ray Tune saved any state "
            f"({settings.experiment} has none); start it again with `dmlsearch run` and a "
            "new --out"
        )
    experiment = study_dir.read_resolved().get(EXPERIMENT_KEY) or study_dir.name
    search.tracker = Tracker(opts.mlflow_uri or study_dir.default_tracking_uri, experiment,
                             artifact_location=study_dir.artifacts)
    search.tracker.attach_study(results=study_dir.path)
    search.tracker.describe(searched=search.prepared.searched, data=search.prepared.data)
    screen.echo(f"dmlsearch: resuming the search in {study_dir.path} ({budget_text(search)} "
                f"of space {search.prepared.space.name!r})")
    return _search_and_finish(search, revision=code_revision(), started=started, screen=screen,
                              resume=True, keep_ray=ray_running())


def _search_and_finish(search: Search, *, revision: str, started: float, screen: Screen,
                       resume: bool, keep_ray: bool) -> Summary:
    prepared, tracker = search.prepared, search.run
    settings = dataclasses.replace(search.settings(), verbose=1 if screen.verbose else 0)
    spread = spreads(search.opts, settings)  # a budget of trials' worth: shown in epochs
    progress = SearchProgress(
        screen.stream or sys.stdout,
        trials=None if spread else prepared.trials - search.opts.intensify,
        metric=prepared.base.metric, mode=prepared.mode, searched=prepared.searched,
        concurrency=search.opts.concurrency, max_iterations=prepared.max_iterations,
        epoch_budget=settings.max_epochs if spread else None) if screen.progress else None
    events = tracker if progress is None else EveryListener(tracker, progress)
    with ended_on_failure(tracker):
        records = run_experiment(
            search.folder, screen=screen, progress=progress, keep_ray=keep_ray,
            run=(lambda: resume_tune(settings, events=events)) if resume else (
                lambda: run_tune(settings, define_by_run=prepared.space.define_by_run,
                                 warm_starts=prepared.points, events=events)))
        repeats = close_search(search, records, settings)
        summary = finish_search(search, records, repeats, revision=revision, started=started,
                                step=progress.step if progress is not None else no_step)
    screen.echo(render_summary(
        summary, results=str(search.folder.path), browse=browse_command(tracker.uri),
        ray_log=None if screen.verbose else str(search.folder.ray_log),
        urls=browse_urls(tracker.uri, tracker.experiment_id, prepared.mode)))
    return summary

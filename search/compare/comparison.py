"""``dmlsearch compare`` and the resume of a comparison, top to bottom:

    every method's space and checks (as ``run`` checks one search), the shared settings
    → the results folder → the stores (one MLflow store, an Optuna study per method) while Ray
      starts → compare.yaml and each method's search.yaml
    → one Ray Tune experiment: every method's search at once, each with its own sampler,
      scheduler and equal budget (:mod:`dmlsearch.search.tune.multi_search`)
    → per method: pictures, importance, its best configuration retrained with the comparison's
      seeds and tested once, its summary.json (a search's results folder of its own)
    → the statistics and the report (comparison.json, comparison.md, two pictures)
    → the closing summary on the terminal

MLflow: one parent run for the comparison (its options, report and pictures), each method's
study nested under it with its trials and retrains.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from pathlib import Path
from typing import Any

from dmlsearch.search.compare.methods import Method
from dmlsearch.search.compare.methods import resolve_methods
from dmlsearch.search.compare.methods import shared_settings
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.compare.report import ReportFiles
from dmlsearch.search.compare.report import closing_text
from dmlsearch.search.compare.report import comparison_metrics
from dmlsearch.search.compare.report import write_report
from dmlsearch.search.lifecycle import Screen
from dmlsearch.search.lifecycle import Search
from dmlsearch.search.lifecycle import close_search
from dmlsearch.search.lifecycle import ended_on_failure
from dmlsearch.search.lifecycle import finish_search
from dmlsearch.search.lifecycle import no_step
from dmlsearch.search.lifecycle import open_search_stores
from dmlsearch.search.lifecycle import open_stores
from dmlsearch.search.lifecycle import run_experiment
from dmlsearch.search.lifecycle import start_search
from dmlsearch.search.options import CompareOptions
from dmlsearch.search.prepare import Prepared
from dmlsearch.search.prepare import prepare
from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import package_version
from dmlsearch.search.reporting import SearchProgress
from dmlsearch.search.results import Summary
from dmlsearch.search.results import TrialRecord
from dmlsearch.search.results import read_summary
from dmlsearch.search.results import trajectory
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import EXPERIMENT_KEY
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import experiment_for
from dmlsearch.search.tune import Limit
from dmlsearch.search.tune import TuneSettings
from dmlsearch.search.tune import can_resume
from dmlsearch.search.tune import max_trials
from dmlsearch.search.tune import ray_running
from dmlsearch.search.tune.multi_search import MethodPlan
from dmlsearch.search.tune.multi_search import MethodRouter
from dmlsearch.search.tune.multi_search import resume_methods
from dmlsearch.search.tune.multi_search import run_methods
from dmlsearch.trainables.errors import UserError

__all__ = ["ComparisonOutcome", "resume_comparison", "run_comparison"]

log = logging.getLogger(__name__)

_NOT_METRICS = {"num_queries"}  # counts the evaluation reports beside its metrics


@dataclasses.dataclass
class _Arm:
    """One method as the driver holds it: the method (its space and where it comes from) and
    its search (options, checks, results folder, MLflow tracker)."""

    method: Method
    search: Search

    @property
    def name(self) -> str:
        return self.method.name


@dataclasses.dataclass(frozen=True)
class ComparisonOutcome:
    """What ``dmlsearch compare`` produced: the comparison, and where its files are."""

    comparison: Comparison
    folder: Path
    report: Path  # comparison.md
    ranked: bool  # at least two methods have test metrics

    @property
    def ok(self) -> bool:
        return self.ranked


def run_comparison(opts: CompareOptions, *, screen: Screen | None = None) -> ComparisonOutcome:
    started = time.time()
    screen = screen or Screen()
    keep_ray = ray_running()  # a program's own Ray is left running after the comparison
    shared, arms = _plan(opts, folder=None)  # every check of the user's input, first
    cdir, created = ComparisonDir.create(opts.out, prefix="compare", storage=opts.storage)
    for arm in arms:
        arm.search.folder = cdir.method(arm.name)
    parent = open_stores(cdir, lambda: _stores(cdir, opts, arms), created=created,
                         mlflow_uri=opts.mlflow_uri, screen=screen, keep_ray=keep_ray)
    revision = code_revision()
    first = arms[0].search.prepared
    cdir.write_resolved({
        "options": opts.to_json(), "shared": shared,
        "methods": {a.name: {"origin": a.method.origin, "source": a.method.source,
                             "searched": list(a.search.prepared.searched),
                             "folder": a.search.folder.path.name} for a in arms},
        "budget": _planned(opts, first), "code_revision": revision,
        "dmlsearch": package_version(), EXPERIMENT_KEY: experiment_for(cdir.name)[0]})
    parent.start_study(
        name=f"comparison {cdir.name}",
        params={"methods": ",".join(a.name for a in arms), "dataset": first.base.dataset,
                "protocol": first.base.protocol, "metric": first.base.metric,
                "trials_per_method": opts.trials, "budget": _budget_text(opts, first),
                "seeds": opts.seeds, "sampler": opts.sampler, "scheduler": opts.scheduler,
                "seed": opts.seed, "concurrency": opts.concurrency,
                **{f"shared.{k}": v for k, v in shared.items()}},
        tags={"dmlsearch.kind": "comparison", "dmlsearch.code_revision": revision,
              "dmlsearch.results": str(cdir.path)})
    parent.log_artifact(cdir.compare_yaml)
    for arm in arms:
        space, base = arm.search.prepared.space, arm.search.prepared.base
        start_search(
            arm.search, revision=revision, name=f"{arm.name} search",
            params={"method": arm.name, "origin": arm.method.origin, "space": space.name,
                    "dataset": base.dataset, "metric": base.metric,
                    "searched": ",".join(arm.search.prepared.searched)},
            tags={"mlflow.parentRunId": parent.parent_id or ""},
            resolved={"comparison": {"method": arm.name, "origin": arm.method.origin}})
    names = ", ".join(a.name for a in arms)
    screen.echo(f"dmlsearch: comparing {len(arms)} methods ({names})"
                f" on {first.base.dataset}: {_budget_text(opts, first)} "
                f"each, the best retrained with {opts.seeds} seeds; sampler {opts.sampler}, "
                f"scheduler {opts.scheduler}, {opts.concurrency} trials at a time; results in "
                f"{cdir.path}")
    return _compare_and_finish(opts, cdir, parent, arms, revision=revision, started=started,
                               screen=screen, resume=False, keep_ray=keep_ray)


def resume_comparison(out: Path, *, screen: Screen | None = None) -> ComparisonOutcome:
    """Continue a comparison whose driver stopped: the search goes on where Ray Tune saved it
    (finished trials kept), methods whose retrain finished (their summary.json) are not
    retrained, the rest are; then the report."""
    started = time.time()
    screen = screen or Screen()
    cdir = ComparisonDir.of_comparison(out)
    if not cdir.compare_yaml.is_file():
        raise UserError(f"no comparison to resume in {cdir.path}: expected the compare.yaml "
                        "that `dmlsearch compare` writes first; give the --out folder of a "
                        "comparison that was started")
    if cdir.comparison_json.is_file():
        raise UserError(f"the comparison in {cdir.path} finished already (comparison.json is "
                        "there); start a new one with `dmlsearch compare`")
    resolved = cdir.read_resolved()
    opts = CompareOptions.from_json(resolved.get("options") or {}, out=cdir.path)
    try:
        opts.check()
    except UserError as exc:
        raise UserError(f"{cdir.compare_yaml}: options: {exc}") from None
    _, arms = _plan(opts, folder=cdir)
    settings = _experiment_settings(opts, arms, cdir)
    finished = all(a.search.folder.summary_json.is_file() for a in arms)
    if not finished and not can_resume(settings):
        raise UserError(f"the comparison in {cdir.path} stopped before Ray Tune saved any "
                        f"state ({settings.experiment} has none); start it again with "
                        "`dmlsearch compare` and a new --out")
    uri = opts.mlflow_uri or cdir.default_tracking_uri
    experiment = cdir.read_resolved().get(EXPERIMENT_KEY) or cdir.name
    parent = Tracker(uri, experiment, artifact_location=cdir.artifacts)
    parent.attach_study(kind="comparison", results=cdir.path)
    for arm in arms:
        arm.search.tracker = Tracker(uri, experiment, artifact_location=cdir.artifacts,
                                     method=arm.name)
        # a method that finished (its summary.json) keeps its study run's end
        arm.search.tracker.attach_study(results=arm.search.folder.path,
                                        reopen=not arm.search.folder.summary_json.is_file())
        arm.search.tracker.describe(searched=arm.search.prepared.searched,
                                    data=arm.search.prepared.data)
    screen.echo(f"dmlsearch: resuming the comparison in {cdir.path} ("
                f"{', '.join(a.name for a in arms)})")
    return _compare_and_finish(opts, cdir, parent, arms, revision=code_revision(),
                               started=started, screen=screen, resume=True,
                               keep_ray=ray_running())


# ---- planning -----------------------------------------------------------------------------------
def _plan(opts: CompareOptions, *, folder: ComparisonDir | None
          ) -> tuple[dict[str, Any], list[_Arm]]:
    """The shared settings and every method checked as a search (its space, its data, its
    parts), before anything is written."""
    opts.check()
    given = opts.overrides()
    shared = shared_settings(opts.dataset, given)
    methods = resolve_methods(opts.methods, opts.spaces, shared=shared, given=given)
    arms = []
    for method in methods:
        search = opts.search_options(method.name)
        try:
            prepared = prepare(search, space=method.space)
        except UserError as exc:
            raise UserError(f"method {method.name}: {exc}") from None
        place = folder.method(method.name) if folder is not None else StudyDir(Path("."))
        arms.append(_Arm(method, Search(search, prepared, place, method=method.name)))
    first = arms[0].search.prepared
    for arm in arms[1:]:  # the shared settings make these equal; a space file could not
        p = arm.search.prepared
        if (p.base.metric, p.max_iterations) != (first.base.metric, first.max_iterations):
            raise UserError(
                f"method {arm.name} validates on {p.base.metric} for {p.max_iterations} "
                f"epochs, {arms[0].name} on {first.base.metric} for "
                f"{first.max_iterations}; expected the same metric and epochs for every method: "
                "pass --set metric=... and --set epochs=... for all of them")
    return shared, arms


def _planned(opts: CompareOptions, prepared: Prepared) -> dict[str, float]:
    """Every method's budget: ``trials`` trials' worth of epochs, or ``--budget``
    device-hours."""
    if opts.budget_s is not None:
        return {"device_hours": opts.budget_s / 3600}
    return {"epochs": float(opts.trials * prepared.max_iterations)}


def _budget_text(opts: CompareOptions, prepared: Prepared) -> str:
    if opts.budget_s is not None:
        return f"{opts.budget_s / 3600:g} device-hours"
    return (f"{opts.trials * prepared.max_iterations} epochs ({opts.trials} trials x "
            f"{prepared.max_iterations} epochs)")


def _limit(opts: CompareOptions, prepared: Prepared) -> Limit:
    if opts.budget_s is not None:
        return Limit(device_seconds=opts.budget_s)
    return Limit(epochs=opts.trials * prepared.max_iterations)


def _max_trials(opts: CompareOptions, settings: TuneSettings) -> int:
    """The most trials a method can start: its budget over the shortest a trial can train (the
    scheduler's first rung), or with ``--budget`` a trial per epoch the --trials would train."""
    return max_trials(opts.trials, settings)


def _experiment_settings(opts: CompareOptions, arms: list[_Arm],
                         cdir: ComparisonDir) -> TuneSettings:
    """The experiment's own settings: its storage, the concurrency and resources of every
    trial; each method's settings (study, sampler, scheduler) are its own."""
    return dataclasses.replace(
        arms[0].search.settings(), storage_path=cdir.ray_storage,
        experiment=cdir.tune_experiment, study_name=cdir.name,
        num_samples=sum(_max_trials(opts, a.search.settings()) for a in arms))


def _stores(cdir: ComparisonDir, opts: CompareOptions, arms: list[_Arm]) -> Tracker:
    """The comparison's MLflow tracker, and each method's stores (its Optuna study, its
    tracker in the comparison's experiment)."""
    uri = opts.mlflow_uri or cdir.default_tracking_uri
    experiment, named = experiment_for(cdir.name)  # MLFLOW_EXPERIMENT_NAME: the user's
    artifacts = None if named else cdir.artifacts
    parent = Tracker(uri, experiment, artifact_location=artifacts)
    for arm in arms:
        open_search_stores(arm.search, uri, experiment=experiment, artifacts=artifacts,
                           method=arm.name)
    return parent


# ---- the comparison -----------------------------------------------------------------------------
def _compare_and_finish(opts: CompareOptions, cdir: ComparisonDir, parent: Tracker,
                        arms: list[_Arm], *, revision: str, started: float, screen: Screen,
                        resume: bool, keep_ray: bool) -> ComparisonOutcome:
    prepared = arms[0].search.prepared
    progress = SearchProgress(
        screen.stream or sys.stdout, trials=None, metric=prepared.base.metric,
        mode=prepared.mode, concurrency=opts.concurrency,
        # each trial's method and what its method's space searched (a key shown where set)
        searched=["method", *dict.fromkeys(k for a in arms for k in a.search.prepared.searched)],
        max_iterations=prepared.max_iterations,
        epoch_budget=None if opts.budget_s is not None
        else len(arms) * opts.trials * prepared.max_iterations,
        group="method") if screen.progress else None
    step = progress.step if progress is not None else no_step
    # the methods' study runs first: a Ctrl-C or an error ends every one still open
    with ended_on_failure(*(a.search.run for a in arms), parent):
        records, repeats = _search(opts, cdir, arms, resume=resume, screen=screen,
                                   progress=progress, keep_ray=keep_ray)
        outcomes = []
        for arm in arms:
            folder = arm.search.folder
            summary = read_summary(folder) if folder.summary_json.is_file() else None
            if summary is None:  # a resumed comparison keeps the methods that finished
                summary = finish_search(
                    arm.search, records[arm.name], repeats[arm.name], revision=revision,
                    started=started, step=lambda what, name=arm.name: step(f"{name}: {what}"))
            outcomes.append(_outcome(arm, summary, opts))
        comparison = Comparison(
            name=cdir.name, dataset=prepared.base.dataset, metric=prepared.base.metric,
            mode=prepared.mode, shared=dict(cdir.read_resolved().get("shared") or {}),
            methods=outcomes)
        with step("Writing the comparison's statistics and report"):
            files = write_report(comparison, ReportFiles.of(cdir), test=opts.test,
                                 seed=opts.seed)
        for path in (files.json, files.markdown):
            parent.log_artifact(path)
        for path in (files.metric_png, files.budget_png):
            parent.log_artifact(path, artifact_path=cdir.plots.name)
        ranked = sum(1 for m in outcomes if m.test_metrics) >= 2
        parent.set_note(files.markdown.read_text()[:5000])
        parent.end_study(metrics=comparison_metrics(comparison),
                         status="FINISHED" if ranked else "FAILED")
    screen.echo(closing_text(comparison, files, folder=cdir.path, uri=parent.uri,
                             experiment_id=parent.experiment_id,
                             ray_log=None if screen.verbose else cdir.ray_log,
                             seconds=time.time() - started))
    return ComparisonOutcome(comparison, cdir.path, files.markdown, ranked)


def _search(opts: CompareOptions, cdir: ComparisonDir, arms: list[_Arm], *, resume: bool,
            screen: Screen, progress: SearchProgress | None, keep_ray: bool
            ) -> tuple[dict[str, list[TrialRecord]], dict[str, int]]:
    """Every method's search in one Ray Tune experiment; each method's trial records, and how
    many of its proposals repeated a trained configuration."""
    shared = dataclasses.replace(_experiment_settings(opts, arms, cdir),
                                 verbose=1 if screen.verbose else 0)
    plans = {}
    for arm in arms:
        settings = arm.search.settings()
        plans[arm.name] = MethodPlan(
            settings=settings, define_by_run=arm.search.prepared.space.define_by_run,
            warm_starts=arm.search.prepared.points, limit=_limit(opts, arm.search.prepared),
            max_trials=_max_trials(opts, settings))
    events = MethodRouter({a.name: a.search.run for a in arms},
                          [progress] if progress is not None else [])
    records = run_experiment(
        cdir, screen=screen, progress=progress, keep_ray=keep_ray,
        run=(lambda: resume_methods(shared, plans, events=events)) if resume else (
            lambda: run_methods(shared, plans, events=events)))
    repeats = {a.name: close_search(a.search, records[a.name], plans[a.name].settings)
               for a in arms}
    return records, repeats


def _outcome(arm: _Arm, summary: Summary, opts: CompareOptions) -> MethodOutcome:
    """A method's part of the comparison, from its summary."""
    prepared = arm.search.prepared
    planned = _planned(opts, prepared)
    budget = summary.budget
    hours = 0.0 if budget is None else (budget.gpu_hours or budget.trial_hours)
    used = {"epochs": float(budget.epochs if budget else 0),
            "trials": float(budget.trials if budget else 0), "device_hours": hours}
    best = summary.trial(summary.best_trial)
    retrain = summary.retrains[0] if summary.retrains else None
    curve = trajectory(summary.trials, prepared.mode)
    if curve and used["epochs"] > curve[-1][0]:  # the best so far holds to the budget's end
        curve.append((int(used["epochs"]), curve[-1][1]))
    return MethodOutcome(
        name=arm.name, space=str(arm.method.space.path or arm.method.space.name),
        source=arm.method.source, budget_planned=planned, budget_used=used,
        fell_short=_fell_short(planned, used, summary),
        best_trial=summary.best_trial, best_val=None if best is None else best.score,
        best_config={} if best is None else dict(best.config),
        trajectory=curve,
        seeds=[] if retrain is None else list(retrain.seeds),
        test_metrics=[] if retrain is None else [
            {k: v for k, v in m.items() if k not in _NOT_METRICS} for m in retrain.test_metrics],
        study_dir=str(arm.search.folder.path))


def _fell_short(planned: dict[str, float], used: dict[str, float],
                summary: Summary) -> str | None:
    """Why a method used less than its budget (the scheduler stops the rest at the budget, so
    it is never more): the sampler ran out of new configurations, or trials failed."""
    key = "epochs" if "epochs" in planned else "device_hours"
    if used[key] >= planned[key] * 0.999:
        return None
    failed = sum(1 for t in summary.trials if t.state.value == "failed")
    why = []
    if summary.repeats_answered:
        why.append(f"the space was trained out ({summary.repeats_answered} proposals repeated "
                   "a trained configuration)")
    if failed:
        why.append(f"{failed} trial(s) failed")
    share = used[key] / planned[key] if planned[key] else 0.0
    return (f"used {share:.0%} of its {key.replace('_', '-')}: "
            + ("; ".join(why) if why else "no more trials were proposed"))

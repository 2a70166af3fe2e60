"""``dmlsearch compare`` and the resume of a comparison, top to bottom:

    every method's space and checks (as ``run`` checks one search), the shared settings
    → the results folder → the stores (one MLflow store, an Optuna study per method) while Ray
      starts → compare.yaml and each method's search.yaml
    → one Ray Tune experiment: every method's search at once, each with its own sampler,
      scheduler and equal budget (:mod:`dmlsearch.search.tune.methods`)
    → per method: pictures, importance, its best configuration retrained with the comparison's
      seeds and tested once, its summary.json (a search's results folder of its own)
    → the statistics and the report (comparison.json, comparison.md, two pictures)
    → the closing summary on the terminal

MLflow: one parent run for the comparison (its options, report and pictures), each method's
study nested under it with its trials and retrains.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmlsearch.search import tune
from dmlsearch.search.compare.methods import Method
from dmlsearch.search.compare.methods import resolve_methods
from dmlsearch.search.compare.methods import shared_settings
from dmlsearch.search.compare.outcome import Comparison
from dmlsearch.search.compare.outcome import MethodOutcome
from dmlsearch.search.options import CompareOptions
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.prepare import Prepared
from dmlsearch.search.prepare import prepare
from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import package_version
from dmlsearch.search.record import Summary
from dmlsearch.search.record import TrialRecord
from dmlsearch.search.record import read_summary
from dmlsearch.search.record import trajectory
from dmlsearch.search.record import write_summary
from dmlsearch.search.reporting.progress import SearchProgress
from dmlsearch.search.reporting.sections import note_markdown
from dmlsearch.search.run import Screen
from dmlsearch.search.run import finish_study
from dmlsearch.search.run import no_step
from dmlsearch.search.run import study_pictures
from dmlsearch.search.run import tune_settings
from dmlsearch.search.study_dir import ComparisonDir
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import browse_urls
from dmlsearch.search.tracking import study_metrics
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.trial import DIAGNOSTICS_DIR

__all__ = ["ComparisonOutcome", "resume_comparison", "run_comparison"]

log = logging.getLogger(__name__)

_NOT_METRICS = {"num_queries"}  # counts the evaluation reports beside its metrics


@dataclasses.dataclass
class _Arm:
    """One method as the driver holds it: its space, its search's options and checks, its
    results folder, its MLflow tracker."""

    method: Method
    opts: SearchOptions
    prepared: Prepared
    folder: StudyDir
    tracker: Tracker | None = None


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
    shared, arms = _plan(opts, folder=None)  # every check of the user's input, first
    cdir, created = ComparisonDir.create(opts.out, prefix="compare", storage=opts.storage)
    arms = [dataclasses.replace(a, folder=cdir.method(a.method.name)) for a in arms]
    try:
        with tune.ray_output_to(None if screen.verbose else cdir.ray_log):
            parent = _open_stores(cdir, opts, arms)
    except BaseException:
        tune.shutdown_ray()
        cdir.discard(created=created)
        raise
    revision = code_revision()
    cdir.write_resolved({
        "options": opts.to_json(), "shared": shared,
        "methods": {a.method.name: {"origin": a.method.origin, "source": a.method.source,
                                    "searched": list(a.prepared.searched),
                                    "folder": a.folder.path.name} for a in arms},
        "budget": _planned(opts, arms[0].prepared), "code_revision": revision,
        "dmlsearch": package_version()})
    parent.start_study(
        name=f"comparison {cdir.name}",
        params={"methods": ",".join(a.method.name for a in arms),
                "dataset": arms[0].prepared.base.dataset,
                "protocol": arms[0].prepared.base.protocol,
                "metric": arms[0].prepared.base.metric, "trials_per_method": opts.trials,
                "budget": _budget_text(opts, arms[0].prepared), "seeds": opts.seeds,
                "sampler": opts.sampler, "scheduler": opts.scheduler, "seed": opts.seed,
                "concurrency": opts.concurrency,
                **{f"shared.{k}": v for k, v in shared.items()}},
        tags={"dmlsearch.kind": "comparison", "dmlsearch.code_revision": revision,
              "dmlsearch.results": str(cdir.path)})
    parent.log_artifact(cdir.compare_yaml)
    for arm in arms:
        _start_method(arm, parent_run=parent.parent_id or "", revision=revision)
    names = ", ".join(a.method.name for a in arms)
    screen.echo(f"dmlsearch: comparing {len(arms)} methods ({names})"
                f" on {arms[0].prepared.base.dataset}: {_budget_text(opts, arms[0].prepared)} "
                f"each, the best retrained with {opts.seeds} seeds; sampler {opts.sampler}, "
                f"scheduler {opts.scheduler}, {opts.concurrency} trials at a time; results in "
                f"{cdir.path}")
    return _compare_and_finish(opts, cdir, parent, arms, revision=revision, started=started,
                               screen=screen, resume=False)


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
    settings = _shared_settings(opts, arms, cdir)
    finished = all(a.folder.summary_json.is_file() for a in arms)
    if not finished and not tune.can_resume(settings):
        raise UserError(f"the comparison in {cdir.path} stopped before Ray Tune saved any "
                        f"state ({settings.experiment} has none); start it again with "
                        "`dmlsearch compare` and a new --out")
    uri = opts.mlflow_uri or cdir.default_tracking_uri
    parent = Tracker(uri, cdir.name, artifact_location=cdir.artifacts)
    parent.attach_study(kind="comparison")
    for arm in arms:
        arm.tracker = Tracker(uri, cdir.name, artifact_location=cdir.artifacts,
                              method=arm.method.name)
        arm.tracker.attach_study()
        arm.tracker.describe(searched=arm.prepared.searched, data=arm.prepared.data)
    screen.echo(f"dmlsearch: resuming the comparison in {cdir.path} ("
                f"{', '.join(a.method.name for a in arms)})")
    return _compare_and_finish(opts, cdir, parent, arms, revision=code_revision(),
                               started=started, screen=screen, resume=True)


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
        arms.append(_Arm(method, search, prepared, place))
    first = arms[0].prepared
    for arm in arms[1:]:  # the shared settings make these equal; a space file could not
        p = arm.prepared
        if (p.base.metric, p.max_iterations) != (first.base.metric, first.max_iterations):
            raise UserError(
                f"method {arm.method.name} validates on {p.base.metric} for {p.max_iterations} "
                f"epochs, {arms[0].method.name} on {first.base.metric} for "
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


def _limit(opts: CompareOptions, prepared: Prepared) -> Any:
    from dmlsearch.search.tune.budget import Limit

    if opts.budget_s is not None:
        return Limit(device_seconds=opts.budget_s)
    return Limit(epochs=opts.trials * prepared.max_iterations)


def _max_trials(opts: CompareOptions, settings: tune.TuneSettings) -> int:
    """The most trials a method can start: its budget over the shortest a trial can train (the
    scheduler's first rung), or with ``--budget`` a trial per epoch the --trials would train."""
    return tune.max_trials(opts.trials, settings)


def _method_settings(arm: _Arm) -> tune.TuneSettings:
    return tune_settings(arm.opts, arm.prepared, arm.folder)


def _shared_settings(opts: CompareOptions, arms: list[_Arm],
                     cdir: ComparisonDir) -> tune.TuneSettings:
    """The experiment's own settings: its storage, the concurrency and resources of every
    trial; each method's settings (study, sampler, scheduler) are its own."""
    first = _method_settings(arms[0])
    return dataclasses.replace(
        first, storage_path=cdir.ray_storage, experiment=cdir.tune_experiment,
        num_samples=sum(_max_trials(opts, _method_settings(a)) for a in arms),
        study_name=cdir.name)


# ---- stores -------------------------------------------------------------------------------------
def _open_stores(cdir: ComparisonDir, opts: CompareOptions, arms: list[_Arm]) -> Tracker:
    """The MLflow experiment (the comparison's tracker, and one per method) and each method's
    Optuna study, made while Ray starts (see ``run._open_stores``)."""
    def stores() -> Tracker:
        uri = opts.mlflow_uri or cdir.default_tracking_uri
        parent = Tracker(uri, cdir.name, artifact_location=cdir.artifacts)
        for arm in arms:
            arm.folder.path.mkdir(parents=True, exist_ok=True)
            tune.create_storage(arm.folder.optuna_url)
            arm.tracker = Tracker(uri, cdir.name, artifact_location=cdir.artifacts,
                                  method=arm.method.name)
        return parent

    if opts.mlflow_uri is not None:
        return stores()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        made = pool.submit(stores)
        tune.init_ray()
        return made.result()


def _start_method(arm: _Arm, *, parent_run: str, revision: str) -> None:
    """A method's search.yaml (so `dmlsearch report/export/importance <out>/<method>` read it
    as any search's folder) and its study run, nested under the comparison's."""
    space, base = arm.prepared.space, arm.prepared.base
    arm.folder.write_resolved({
        "space": space.name, "space_source": space.source, "options": arm.opts.to_json(),
        "base": base.to_flat(), "searched": list(arm.prepared.searched),
        "code_revision": revision, "dmlsearch": package_version(),
        "comparison": {"method": arm.method.name, "origin": arm.method.origin}})
    tracker = arm.tracker
    assert tracker is not None
    tracker.describe(searched=arm.prepared.searched, data=arm.prepared.data)
    tracker.start_study(
        name=f"{arm.method.name} search",
        params={"method": arm.method.name, "origin": arm.method.origin, "space": space.name,
                "dataset": base.dataset, "metric": base.metric,
                "searched": ",".join(arm.prepared.searched)},
        tags={"mlflow.parentRunId": parent_run, "dmlsearch.code_revision": revision,
              "dmlsearch.results": str(arm.folder.path),
              "dmlsearch.space_source": space.source[:5000]})
    tracker.log_artifact(arm.folder.search_yaml)
    tracker.log_study_inputs()


# ---- the comparison -----------------------------------------------------------------------------
def _compare_and_finish(opts: CompareOptions, cdir: ComparisonDir, parent: Tracker,
                        arms: list[_Arm], *, revision: str, started: float, screen: Screen,
                        resume: bool) -> ComparisonOutcome:
    prepared = arms[0].prepared
    progress = SearchProgress(
        screen.stream or sys.stdout, trials=None, metric=prepared.base.metric,
        mode=prepared.mode, searched=["method"], concurrency=opts.concurrency,
        max_iterations=prepared.max_iterations,
        epoch_budget=None if opts.budget_s is not None
        else len(arms) * opts.trials * prepared.max_iterations,
        group="method") if screen.progress else None
    step = progress.step if progress is not None else no_step
    status = "FAILED"
    try:
        records, repeats = _search(opts, cdir, arms, resume=resume, screen=screen,
                                   progress=progress)
        outcomes = []
        for arm in arms:
            summary = read_summary(arm.folder) if arm.folder.summary_json.is_file() else None
            if summary is None:  # a resumed comparison keeps the methods that finished
                summary = _finish_method(arm, records[arm.method.name], repeats[arm.method.name],
                                         revision=revision, started=started, step=step)
            outcomes.append(_outcome(arm, summary, opts))
        comparison = Comparison(
            name=cdir.name, dataset=prepared.base.dataset, metric=prepared.base.metric,
            mode=prepared.mode, shared=dict(cdir.read_resolved().get("shared") or {}),
            methods=outcomes)
        with step("Writing the comparison's statistics and report"):
            files = _report(comparison, cdir, opts)
        for path in (files.json, files.markdown):
            parent.log_artifact(path)
        for path in (files.metric_png, files.budget_png):
            parent.log_artifact(path, artifact_path=cdir.plots.name)
        ranked = sum(1 for m in outcomes if m.test_metrics) >= 2
        parent.set_note(files.markdown.read_text()[:5000])
        status = "FINISHED" if ranked else "FAILED"
        parent.end_study(metrics=_comparison_metrics(comparison), status=status)
    except KeyboardInterrupt:
        parent.end_study(metrics={}, status="KILLED")
        raise
    except BaseException:
        if status != "FINISHED":
            parent.end_study(metrics={}, status="FAILED")
        raise
    screen.echo(_closing(comparison, cdir, files, parent, screen=screen,
                         seconds=time.time() - started))
    return ComparisonOutcome(comparison, cdir.path, files.markdown, ranked)


def _search(opts: CompareOptions, cdir: ComparisonDir, arms: list[_Arm], *, resume: bool,
            screen: Screen, progress: SearchProgress | None
            ) -> tuple[dict[str, list[TrialRecord]], dict[str, int]]:
    from dmlsearch.search.tune.methods import MethodPlan
    from dmlsearch.search.tune.methods import MethodRouter
    from dmlsearch.search.tune.methods import resume_methods
    from dmlsearch.search.tune.methods import run_methods

    shared = dataclasses.replace(_shared_settings(opts, arms, cdir),
                                 verbose=1 if screen.verbose else 0)
    plans = {}
    for arm in arms:
        settings = _method_settings(arm)
        plans[arm.method.name] = MethodPlan(
            settings=settings, define_by_run=arm.prepared.space.define_by_run,
            warm_starts=arm.prepared.points, limit=_limit(opts, arm.prepared),
            max_trials=_max_trials(opts, settings))
    events = MethodRouter({a.method.name: a.tracker for a in arms},
                          [progress] if progress is not None else [])
    with tune.ray_output_to(None if screen.verbose else cdir.ray_log), \
            progress or contextlib.nullcontext():
        tune.init_ray()
        try:
            if resume:
                records = resume_methods(shared, plans, events=events)
            else:
                records = run_methods(shared, plans, events=events)
        finally:
            tune.shutdown_ray()
    repeats = {}
    for arm in arms:
        tracker = arm.tracker
        assert tracker is not None
        for record in records[arm.method.name]:
            folder = Path(record.path or "") / DIAGNOSTICS_DIR
            if record.path and folder.is_dir():
                tracker.trial_artifacts(record.trial_id, folder)
        tracker.close_dangling()
        settings = plans[arm.method.name].settings
        repeats[arm.method.name] = tune.settle_study(settings.optuna_storage,
                                                     settings.study_name)
    return records, repeats


def _finish_method(arm: _Arm, records: list[TrialRecord], repeats: int, *, revision: str,
                   started: float, step: Callable[[str], Any]) -> Summary:
    """A method's search finished as ``run`` finishes one: pictures, importance, its best
    configuration retrained with the comparison's seeds and tested once, summary.json."""
    tracker = arm.tracker
    assert tracker is not None
    try:
        with step(f"{arm.method.name}: the study's plots and importance"):
            study_pictures(records, arm.prepared, arm.folder, tracker)
        summary = finish_study(arm.opts, arm.prepared, arm.folder, tracker, records,
                               revision=revision, repeats=repeats, started=started,
                               step=lambda what: step(f"{arm.method.name}: {what}"))
        write_summary(arm.folder, summary)
        tracker.log_artifact(arm.folder.summary_json)
        tracker.set_note(note_markdown(summary))
        tracker.end_study(metrics=study_metrics(summary),
                          status="FINISHED" if summary.best_trial is not None else "FAILED")
    except BaseException:
        tracker.end_study(metrics={}, status="FAILED")
        raise
    return summary


def _outcome(arm: _Arm, summary: Summary, opts: CompareOptions) -> MethodOutcome:
    """A method's part of the comparison, from its summary."""
    prepared = arm.prepared
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
        name=arm.method.name, space=str(arm.method.space.path or arm.method.space.name),
        source=arm.method.source, budget_planned=planned, budget_used=used,
        fell_short=_fell_short(planned, used, summary),
        best_trial=summary.best_trial, best_val=None if best is None else best.score,
        best_config={} if best is None else dict(best.config),
        trajectory=curve,
        seeds=[] if retrain is None else list(retrain.seeds),
        test_metrics=[] if retrain is None else [
            {k: v for k, v in m.items() if k not in _NOT_METRICS} for m in retrain.test_metrics],
        study_dir=str(arm.folder.path))


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


def _report(comparison: Comparison, cdir: ComparisonDir, opts: CompareOptions) -> Any:
    from dmlsearch.search.compare.report import ReportFiles
    from dmlsearch.search.compare.report import write_report

    files = ReportFiles(json=cdir.comparison_json, markdown=cdir.comparison_md,
                        metric_png=cdir.metric_png, budget_png=cdir.budget_png)
    return write_report(comparison, files, test=opts.test, seed=opts.seed)


def _comparison_metrics(comparison: Comparison) -> dict[str, float]:
    """The comparison run's metrics: each method's mean test metric and best validation
    score (``<method>.test_mean_<metric>``), columns of the MLflow runs table."""
    from dmlsearch.search.compare.stats import method_values
    from dmlsearch.search.tracking import metric_name

    out: dict[str, float] = {}
    for m in comparison.methods:
        if m.best_val is not None:
            out[f"{m.name}.best_val_{metric_name(comparison.metric)}"] = m.best_val
        keys = dict.fromkeys(k for t in m.test_metrics for k in t)
        for key in keys:
            values = method_values(m, key)
            if values:
                out[f"{m.name}.test_mean_{metric_name(key)}"] = sum(values) / len(values)
    return out


def _closing(comparison: Comparison, cdir: ComparisonDir, files: Any, parent: Tracker, *,
             screen: Screen, seconds: float) -> str:
    """The terminal's closing summary: the ranking with intervals, the budget each method used,
    which differences are real, and where everything is."""
    from dmlsearch.search.compare.report import analyse
    from dmlsearch.search.compare.report import metric_label
    from dmlsearch.search.compare.stats import named_verdict

    analysis = analyse(comparison, seed=0)
    metric = comparison.metric
    lines = ["", f"Comparison finished in {seconds:.0f} s. Test {metric_label(metric)} of each "
             f"method's best configuration, retrained with seeds {analysis.seeds} "
             "(mean ± 95% interval):"]
    for r in analysis.ranking:
        stat = analysis.stats[r.method][metric]
        interval = "" if stat.half_width is None else f" ± {stat.half_width:.4f}"
        tie = "" if not r.tied else f"  (group {r.group}: cannot be told apart from " \
            + ", ".join(o.method for o in analysis.ranking
                        if o.group == r.group and o.method != r.method) + ")"
        method = next(m for m in comparison.methods if m.name == r.method)
        used = method.budget_used
        lines.append(f"  {r.rank}. {r.method:20s} {stat.mean:.4f}{interval}   "
                     f"{used['epochs']:.0f} epochs in {used['trials']:.0f} trials{tie}")
    for m in comparison.methods:
        if analysis.rank_of(m.name) is None:
            lines.append(f"  -  {m.name:20s} no test result (no trial trained to its end, or "
                         "its retrain failed)")
        if m.fell_short:
            lines.append(f"     {m.name} fell short of its budget: {m.fell_short}")
    pairs = [p for p in analysis.pairs if p.metric == metric]
    if pairs:
        lines.append(f"Paired by seed ({analysis.test} test, Holm-corrected):")
        for p in pairs:
            lines.append(f"  {p.a} - {p.b}: {p.diff:+.4f}, p_holm "
                         f"{'-' if p.p_holm is None else f'{p.p_holm:.3g}'}: "
                         f"{named_verdict(p, comparison.mode)}")
    urls = browse_urls(parent.uri, parent.experiment_id, comparison.mode)
    lines += [f"Report: {files.markdown}", f"Results: {cdir.path} (one folder per method)"]
    if not screen.verbose:
        lines.append(f"Ray Tune's own output and warnings: {cdir.ray_log}")
    lines += [f"Browse in MLflow:  {browse_command(parent.uri)}",
              f"  then open the comparison: {urls[0]}"]
    return "\n".join(lines)

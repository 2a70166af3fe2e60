"""``dmlsearch run``: validate everything, search, retrain the best, export, summarise.

Order matters for the user: every check that can fail on their input (space, settings, data,
tracking store) runs before any folder is written or any trial starts.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dmlsearch.search import ray_backend
from dmlsearch.search.export import write_atomic
from dmlsearch.search.export import validation_epochs
from dmlsearch.search.export import write_export
from dmlsearch.search.options import DEFAULT_TRIALS
from dmlsearch.search.options import SearchOptions
from dmlsearch.search.options import data_workers
from dmlsearch.search.options import default_out
from dmlsearch.search.pareto import pareto_front
from dmlsearch.search.provenance import code_revision
from dmlsearch.search.provenance import package_version
from dmlsearch.search.retrain import EnsembleOutcome
from dmlsearch.search.retrain import FinalOutcome
from dmlsearch.search.retrain import SeedsOutcome
from dmlsearch.search.retrain import ensemble_and_log
from dmlsearch.search.retrain import retrain_seeds
from dmlsearch.search.summary import format_metrics
from dmlsearch.search.summary import format_table
from dmlsearch.search.summary import trial_rows
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import default_tracking_uri
from dmlsearch.search.tracking import model_name
from dmlsearch.spaces import Space
from dmlsearch.spaces import config_from_sample
from dmlsearch.spaces import load_space
from dmlsearch.trainables.config import LOSS_PREFIX
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.config import setting_names
from dmlsearch.trainables.errors import UserError

__all__ = ["SearchOutcome", "prepare", "resume_search", "run_search"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SearchOutcome:
    out: Path
    records: list[ray_backend.TrialRecord]
    best: ray_backend.TrialRecord | None
    final: FinalOutcome | None
    export_path: Path | None
    tracking_uri: str
    seconds: float
    searched: tuple[str, ...]  # the config keys the space searched
    ensemble: EnsembleOutcome | None = None  # k-fold studies: the fold models on test
    budget: dict[str, float] = dataclasses.field(default_factory=dict)
    pareto: list[ray_backend.TrialRecord] | None = None  # --pareto: the non-dominated trials
    pareto_cost: str | None = None
    scheduler: str = "asha"
    retrains: list[SeedsOutcome] = dataclasses.field(default_factory=list)  # --retrain-top/--seeds
    repeats: int = 0  # proposals of already trained configurations, answered, not trained


@dataclasses.dataclass(frozen=True)
class Prepared:
    space: Space
    base: TrialConfig
    max_iterations: int
    trials: int  # how many trials to run (--trials, or the grid's size)
    points: list[dict[str, Any]]  # evaluated first: the warm starts, or every grid point


def prepare(opts: SearchOptions) -> Prepared:
    """Every user-input check, with no side effect but the built-in dataset's cache."""
    from dmlsearch.trainables.trial import check_parts
    from dmlsearch.trainables.trial import load_for
    from dmlsearch.trainables.trial import preflight

    opts.check()
    space = load_space(opts.space).with_overrides(opts.overrides())
    space = space.with_overrides(_absolute_paths(space.default_config()))
    if "workers" not in space.default_config() and data_workers(opts.cpus_per_trial):
        # data loading sized from the trial's CPUs, unless the space or --set says otherwise
        space = space.with_overrides({"workers": data_workers(opts.cpus_per_trial)})
    for param in space.params:  # a searched key must be a setting: say where it is declared
        if param.key not in setting_names() and not param.key.startswith(LOSS_PREFIX):
            with _declared_at(space, param):
                TrialConfig.from_flat({param.key: None})
    base = TrialConfig.from_flat(space.default_config())
    _check_gpus(opts)
    dataset = load_for(base)
    preflight(base, dataset)
    datasets = {(base.dataset, base.data_root, base.image_size): dataset}
    for param in space.params:  # every categorical choice must work: names, data, batches
        branch = {key: allowed[0] for key, allowed in param.when}  # within its own branch
        for choice in param.choices or ():
            with _declared_at(space, param):
                cfg = TrialConfig.from_flat(
                    space.with_overrides({**branch, param.key: choice}).default_config())
                check_parts(cfg)
                data_key = (cfg.dataset, cfg.data_root, cfg.image_size)
                if data_key not in datasets:
                    datasets[data_key] = load_for(cfg)
                preflight(cfg, datasets[data_key])
    epochs = max([base.epochs]
                 + [int(p.high) for p in space.params if p.key == "epochs" and p.high is not None]
                 + [int(c) for p in space.params if p.key == "epochs" for c in p.choices])
    folds = base.folds if base.protocol == "kfold" else 1
    if opts.sampler == "grid":
        points = space.grid_points()
        trials = len(points) if opts.trials is None else min(opts.trials, len(points))
    else:
        points, trials = space.warm_starts(), opts.trials or DEFAULT_TRIALS
    return Prepared(space=space, base=base, max_iterations=epochs * folds * base.repeats,
                    trials=trials, points=points)


@contextlib.contextmanager
def _declared_at(space: Space, param: Any) -> Iterator[None]:
    """A user error about ``param`` names the space file and line that declare it."""
    try:
        yield
    except UserError as exc:
        if space.path is None or not param.line:
            raise
        raise UserError(f"{space.path}:{param.line}: {exc}") from None


def _check_gpus(opts: SearchOptions) -> None:
    """A trial asking for GPUs this machine does not have would wait for them forever."""
    if not opts.gpus_per_trial or os.environ.get("RAY_ADDRESS"):  # a cluster: Ray knows
        return
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if opts.gpus_per_trial > visible:
        raise UserError(
            f"--gpus-per-trial {opts.gpus_per_trial:g} asks for GPUs, but this machine has "
            f"{visible} that torch can see; leave --gpus-per-trial out (trials use a GPU when "
            "there is one) or run on a machine or Ray cluster with GPUs"
        )


_PATH_SETTINGS = ("data_root", "pretrained")
_NOT_PATHS = {"none", "imagenet"}


def _absolute_paths(flat: dict[str, Any]) -> dict[str, Any]:
    """Relative paths are meant from here; trials run in other folders (and on other nodes)."""
    return {key: str(Path(flat[key]).expanduser().resolve()) for key in _PATH_SETTINGS
            if isinstance(flat.get(key), str) and flat[key] not in _NOT_PATHS}


def _make_out(opts: SearchOptions) -> tuple[Path, bool]:
    """The results folder, made writable and empty; and whether this search created it."""
    out = Path(opts.out or default_out(opts.space)).expanduser().resolve()  # '~/x' too
    created = not out.exists()
    if out.exists() and any(out.iterdir()):
        raise UserError(f"--out {out} already holds files; give a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"cannot write the results folder {out} ({exc.strerror}); "
                        "choose a writable --out") from None
    return out, created


def run_search(opts: SearchOptions, *, echo: Callable[[str], None] = print) -> SearchOutcome:
    started = time.time()
    prepared = prepare(opts)  # every check of the user's input, before anything starts
    space, base = prepared.space, prepared.base
    out, created = _make_out(opts)
    uri = opts.mlflow_uri or default_tracking_uri(out)
    try:
        if opts.mlflow_uri is not None:  # the user's store: checked before anything starts
            tracker = _open_stores(out, uri)
        else:
            # The default stores are SQLite files in `out` (checked writable above). Their
            # set-up (MLflow's schema migrations, the Optuna tables) and Ray's start take
            # seconds each and do not depend on each other: the stores in a thread, Ray on
            # this one (ray.init installs its SIGTERM handler only from the main thread).
            # Overlapped, ~3 s less a search (docs/benchmarks.md, orchestration).
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                stores = pool.submit(_open_stores, out, uri)
                ray_backend.init_ray(num_cpus=None, num_gpus=None)
                tracker = stores.result()
    except BaseException:
        ray_backend.shutdown_ray()
        if created:
            shutil.rmtree(out, ignore_errors=True)
        else:  # the user's empty folder: empty again
            for item in out.iterdir():
                if item.is_dir():
                    shutil.rmtree(item, ignore_errors=True)
                else:
                    item.unlink(missing_ok=True)
        raise
    revision = code_revision()
    resolved = {
        "space": space.name, "space_source": space.source, "options": _jsonable(opts),
        "base": base.to_flat(), "searched": [p.key for p in space.params],
        "code_revision": revision, "dmlsearch": package_version(),
    }
    write_atomic(out / "search.yaml", yaml.safe_dump(resolved, sort_keys=False))
    tracker.start_study(
        name=f"search {out.name}",
        params={"space": space.name, "dataset": base.dataset, "protocol": base.protocol,
                "metric": base.metric, "trials": prepared.trials,
                "concurrency": opts.concurrency, "sampler": opts.sampler,
                "scheduler": opts.scheduler, "seed": opts.seed,
                "pareto": opts.pareto or "none", "time_budget_s": opts.time_budget_s or "none",
                "cpus_per_trial": opts.cpus_per_trial, "gpus_per_trial": opts.gpus_per_trial,
                "searched": ",".join(p.key for p in space.params)},
        tags={"dmlsearch.code_revision": revision, "dmlsearch.results": str(out),
              "dmlsearch.space_source": space.source[:5000]},
    )
    tracker.log_artifact(out / "search.yaml")
    echo(f"dmlsearch: {prepared.trials} trials of space {space.name!r} on {base.dataset} "
         f"({base.protocol} protocol, metric {base.metric}, sampler {opts.sampler}, "
         f"scheduler {opts.scheduler}); results in {out}")
    return _search_and_finish(opts, prepared, out, tracker, uri=uri, revision=revision,
                              started=started, echo=echo, resume=False)


def _open_stores(out: Path, uri: str) -> Tracker:
    """The MLflow experiment (a user error if the tracking store does not answer) and the
    Optuna study's storage tables."""
    tracker = Tracker(uri, out.name, artifact_location=out / "mlartifacts")
    ray_backend.create_study_storage(_optuna_url(out))
    return tracker


def resume_search(out: Path, *, echo: Callable[[str], None] = print) -> SearchOutcome:
    """``dmlsearch resume OUT``: continue the search whose driver stopped, then finish it as
    ``run`` would (retrain, export, summary). Completed trials are kept, never re-run;
    interrupted ones continue from their last checkpoint (Ray Tune's experiment state)."""
    started = time.time()
    out = Path(out).expanduser().resolve()
    resolved_file = out / "search.yaml"
    if not resolved_file.is_file():
        raise UserError(
            f"no search to resume in {out}: expected the search.yaml that `dmlsearch run` "
            "writes first; give the --out folder of a search that was started"
        )
    if (out / "summary.json").is_file():
        raise UserError(f"the search in {out} finished already (summary.json is there); "
                        "start a new one with `dmlsearch run`")
    resolved = yaml.safe_load(resolved_file.read_text())
    opts = _options_from(resolved.get("options") or {}, out)
    prepared = prepare(opts)
    settings = _tune_settings(opts, prepared, out)
    if not ray_backend.can_resume(settings):
        raise UserError(
            f"the search in {out} stopped before Ray Tune saved any state "
            f"({ray_backend.experiment_path(settings)} has none); start it again with "
            "`dmlsearch run` and a new --out"
        )
    uri = opts.mlflow_uri or default_tracking_uri(out)
    tracker = Tracker(uri, out.name, artifact_location=out / "mlartifacts")
    tracker.attach_study()
    echo(f"dmlsearch: resuming the search in {out} ({prepared.trials} trials of space "
         f"{prepared.space.name!r})")
    return _search_and_finish(opts, prepared, out, tracker, uri=uri, revision=code_revision(),
                              started=started, echo=echo, resume=True)


def _options_from(body: dict[str, Any], out: Path) -> SearchOptions:
    fields = {f.name for f in dataclasses.fields(SearchOptions)}
    known = {k: v for k, v in body.items() if k in fields}
    known["out"] = out
    known["sets"] = tuple((k, v) for k, v in (body.get("sets") or {}).items())
    return SearchOptions(**known)


def _search_and_finish(
    opts: SearchOptions, prepared: Prepared, out: Path, tracker: Tracker, *, uri: str,
    revision: str, started: float, echo: Callable[[str], None], resume: bool,
) -> SearchOutcome:
    space, base = prepared.space, prepared.base
    status = "FAILED"
    try:
        records, repeats = _search(opts, prepared, out, tracker, resume=resume)
        _study_pictures(records, prepared, out, tracker)
        best = _best(records, base.metric)
        final = export_path = ensemble = None
        retrains: list[SeedsOutcome] = []
        if best is not None and opts.retrain:
            if config_from_sample(best.config).get("protocol", base.protocol) == "kfold":
                ensemble = ensemble_and_log(
                    config_from_sample(best.config), tracker=tracker,
                    run_name=f"fold ensemble {best.trial_id}",
                    tags={"dmlsearch.trial_id": best.trial_id})
            retrains = _retrain_top(records, opts, out, tracker, base.metric)
            final = retrains[0].runs[0]
            export_path = _export_best(best, final, out, tracker, space, revision, base,
                                       ensemble)
        outcome = SearchOutcome(out=out, records=records, best=best, final=final,
                                export_path=export_path, tracking_uri=uri,
                                seconds=time.time() - started,
                                searched=tuple(dict.fromkeys(p.key for p in space.params)),
                                ensemble=ensemble,
                                budget=budget_used(records, cpus_per_trial=opts.cpus_per_trial,
                                                   gpus_per_trial=_gpus_per_trial(opts)),
                                pareto=None if opts.pareto is None
                                else pareto_records(records, base.metric),
                                pareto_cost=opts.pareto, scheduler=opts.scheduler,
                                retrains=retrains, repeats=repeats)
        _write_summary(outcome, base.metric)
        tracker.log_artifact(out / "summary.json")
        status = "FINISHED" if best is not None else "FAILED"
        tracker.end_study(metrics=_study_metrics(outcome), status=status)
    except KeyboardInterrupt:
        tracker.end_study(metrics={}, status="KILLED")
        raise
    except BaseException:
        if status != "FINISHED":
            tracker.end_study(metrics={}, status="FAILED")
        raise
    echo(render_summary(outcome, base.metric))
    return outcome


def _search(opts: SearchOptions, prepared: Prepared, out: Path, tracker: Tracker, *,
            resume: bool = False) -> tuple[list[ray_backend.TrialRecord], int]:
    """The search's trial records, and how many repeated proposals were answered untrained."""
    settings = _tune_settings(opts, prepared, out)
    ray_backend.init_ray(num_cpus=None, num_gpus=None)
    try:
        if resume:
            records = ray_backend.resume_tune(settings, events=tracker)
        else:
            records = ray_backend.run_tune(settings, define_by_run=prepared.space.define_by_run,
                                           warm_starts=prepared.points, events=tracker)
    finally:
        ray_backend.shutdown_ray()
    for record in records:  # synced from the workers when their trials ended
        for folder in record.artifact_folders():
            tracker.trial_artifacts(record.trial_id, folder)
    # Nothing left half-open: runs of trials that never came back end as KILLED in MLflow,
    # and Optuna trials Ray never reported (asked for just before a crash) end as FAIL.
    tracker.close_dangling()
    return records, ray_backend.settle_study(settings)


def _tune_settings(opts: SearchOptions, prepared: Prepared, out: Path) -> ray_backend.TuneSettings:
    from dmlsearch.trainables.metrics.names import metric_mode

    gpus = _gpus_per_trial(opts)
    max_t = prepared.max_iterations
    return ray_backend.TuneSettings(
        name="tune", storage_path=ray_backend.storage_for(opts.storage, out),
        num_samples=prepared.trials, max_failures=opts.max_failures,
        concurrency=opts.concurrency, max_iterations=max_t,
        grace_period=opts.grace_period or max(1, max_t // 4),
        reduction_factor=opts.reduction_factor, cpus_per_trial=opts.cpus_per_trial,
        gpus_per_trial=gpus, seed=opts.seed,
        optuna_storage=_optuna_url(out), study_name=out.name,
        mode=metric_mode(prepared.base.metric), sampler=opts.sampler,
        scheduler=opts.scheduler, time_budget_s=opts.time_budget_s, pareto=opts.pareto,
    )


def _optuna_url(out: Path) -> str:
    """The search's Optuna study: a SQLite file in the results folder."""
    return f"sqlite:///{out / 'optuna.db'}"


def _gpus_per_trial(opts: SearchOptions) -> float:
    if opts.gpus_per_trial is not None:
        return opts.gpus_per_trial
    import torch

    return 1.0 if torch.cuda.is_available() else 0.0


def budget_used(records: list[ray_backend.TrialRecord], *, cpus_per_trial: float,
                gpus_per_trial: float) -> dict[str, float]:
    """What the search cost: trials, epochs (× folds) trained, and reserved CPU/GPU-hours."""
    seconds = sum(r.seconds for r in records)
    return {
        "trials": float(len(records)),
        "epochs": float(sum(r.iterations for r in records)),
        "trial_hours": seconds / 3600,
        "cpu_hours": seconds * cpus_per_trial / 3600,
        "gpu_hours": seconds * gpus_per_trial / 3600,
    }


def pareto_records(records: list[ray_backend.TrialRecord],
                   metric: str) -> list[ray_backend.TrialRecord]:
    """The non-dominated trials of a ``--pareto`` search: best metric against lowest cost."""
    from dmlsearch.trainables.metrics.names import metric_mode

    scored = [r for r in records if r.state != "failed" and r.score is not None
              and r.cost is not None]
    front = pareto_front([(r.score, r.cost) for r in scored], (metric_mode(metric), "min"))
    return [scored[i] for i in front]


def _best(records: list[ray_backend.TrialRecord], metric: str) -> ray_backend.TrialRecord | None:
    from dmlsearch.trainables.metrics.names import metric_mode

    scored = [r for r in records if r.state != "failed" and r.score is not None]
    if not scored:
        return None
    pick = min if metric_mode(metric) == "min" else max
    return pick(scored, key=lambda r: r.score)


def _ranked(records: list[ray_backend.TrialRecord], metric: str) -> list[ray_backend.TrialRecord]:
    """Scored trials, best first."""
    from dmlsearch.trainables.metrics.names import metric_mode

    scored = [r for r in records if r.state != "failed" and r.score is not None]
    return sorted(scored, key=lambda r: r.score, reverse=metric_mode(metric) == "max")


def _retrain_top(records: list[ray_backend.TrialRecord], opts: SearchOptions, out: Path,
                 tracker: Tracker, metric: str) -> list[SeedsOutcome]:
    """The ``--retrain-top`` best configurations, each with ``--seeds`` seeds; the best one's
    first run has its test embeddings drawn and its model registered."""
    outcomes = []
    for rank, record in enumerate(_ranked(records, metric)[:opts.retrain_top], start=1):
        outcomes.append(retrain_seeds(
            validation_epochs(config_from_sample(record.config),
                              record.last_result.get("best_epoch")), seeds=opts.seeds, trial_id=record.trial_id, rank=rank,
            tracker=tracker, register_as=model_name(out.name) if rank == 1 and opts.register
            else None, artifacts=out / "plots" if rank == 1 else None))
    return outcomes


def _study_pictures(records: list[ray_backend.TrialRecord], prepared: Prepared, out: Path,
                    tracker: Tracker) -> None:
    """Plots and importance of the finished search, saved and logged to the study run. A
    picture that cannot be drawn is a warning: the trials' results are what matter."""
    from dmlsearch.search.analysis import OUT_DIR
    from dmlsearch.search.analysis import load_study
    from dmlsearch.search.importance import MIN_TRIALS
    from dmlsearch.search.importance import analyse_study
    from dmlsearch.search.importance import write_plots
    from dmlsearch.search.plots import study_plots
    from dmlsearch.trainables.metrics.names import metric_mode

    metric = prepared.base.metric
    try:
        for path in study_plots(records, prepared.space.params, metric, metric_mode(metric),
                                out / "plots"):
            tracker.log_artifact(path, artifact_path="plots")
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the study's plots could not be drawn: %s: %s", type(exc).__name__, exc)
    try:
        report = analyse_study(load_study(out), min_trials=MIN_TRIALS)
        if report.analyses and report.trials >= MIN_TRIALS:  # else `dmlsearch importance`
            folder = out / OUT_DIR
            write_plots(report, folder)
            write_atomic(folder / "importance.json", json.dumps(report.to_json(), indent=2))
            tracker.log_artifacts(folder)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        log.warning("the importance analysis failed: %s: %s", type(exc).__name__, exc)


def _export_best(
    best: ray_backend.TrialRecord, final: FinalOutcome, out: Path, tracker: Tracker,
    space: Space, revision: str, base: TrialConfig, ensemble: EnsembleOutcome | None = None,
) -> Path:
    export_path = out / "best_config.yaml"
    write_export(export_path, config=final.config, provenance={
        "study": out.name, "space": space.name, "space_source": space.source,
        "trial_id": best.trial_id,
        "validation": {"metric": base.metric, "value": best.score,
                       "best_epoch": best.last_result.get("best_epoch")},
        "epochs_note": "epochs = the best trial's best validation epoch",
        "test_metrics": final.test_metrics, "code_revision": revision,
        "dmlsearch": package_version(),
        **({"registered_model": final.registered} if final.registered else {}),
        **({"fold_ensemble_test_metrics": ensemble.metrics} if ensemble else {}),
    })
    tracker.log_artifact(export_path)
    return export_path


def _study_metrics(outcome: SearchOutcome) -> dict[str, float]:
    states = [r.state for r in outcome.records]
    metrics: dict[str, float] = {f"trials_{s}": float(states.count(s))
                                 for s in ("completed", "stopped", "failed")}
    metrics["epochs_trained"] = float(sum(r.iterations for r in outcome.records))
    metrics["repeats_answered"] = float(outcome.repeats)
    metrics.update({f"budget_{k}": v for k, v in outcome.budget.items()})
    metrics["seconds"] = outcome.seconds
    if outcome.best is not None and outcome.best.score is not None:
        metrics["best_val_score"] = outcome.best.score
    if outcome.final is not None:
        metrics.update({f"test_{k}": v for k, v in outcome.final.test_metrics.items()})
    if outcome.retrains and len(outcome.retrains[0].seeds) > 1:
        metrics.update({f"test_mean_{k}": v for k, v in outcome.retrains[0].mean.items()})
        metrics.update({f"test_ci95_{k}": v for k, v in outcome.retrains[0].ci95.items()})
    if outcome.ensemble is not None:
        metrics.update({f"test_{k}": v for k, v in outcome.ensemble.metrics.items()})
    return metrics


def _write_summary(outcome: SearchOutcome, metric: str) -> None:
    body = {
        "metric": metric, "seconds": outcome.seconds, "tracking_uri": outcome.tracking_uri,
        "trials": [{"trial_id": r.trial_id, "state": r.state, "score": r.score,
                    "score_std": r.last_result.get("score_std"),
                    "iterations": r.iterations, "seconds": r.seconds, "reason": r.reason,
                    "best_epoch": r.last_result.get("best_epoch"),
                    "config": config_from_sample(r.config)} for r in outcome.records],
        "trial_counts": {state: sum(r.state == state for r in outcome.records)
                         for state in ("completed", "stopped", "failed")},
        "repeats_answered": outcome.repeats,
        "best_trial": outcome.best.trial_id if outcome.best else None,
        "budget": outcome.budget,
        "pareto_front": None if outcome.pareto is None else {
            "cost": outcome.pareto_cost,
            "trials": [{"trial_id": r.trial_id, "score": r.score, "cost": r.cost}
                       for r in outcome.pareto],
        },
        "test_metrics": outcome.final.test_metrics if outcome.final else None,
        "registered_model": outcome.final.registered if outcome.final else None,
        "retrains": [r.to_json() for r in outcome.retrains],
        "fold_ensemble": None if outcome.ensemble is None else {
            "metrics": outcome.ensemble.metrics,
            "fold_test_metrics": outcome.ensemble.fold_test_metrics,
            "fold_best_epochs": outcome.ensemble.fold_best_epochs,
        },
        "export": str(outcome.export_path) if outcome.export_path else None,
    }
    write_atomic(outcome.out / "summary.json", json.dumps(body, indent=2, default=str))


def render_summary(outcome: SearchOutcome, metric: str) -> str:
    header, rows = trial_rows(outcome.records, metric)
    states = [r.state for r in outcome.records]
    parts = [
        "",
        f"Search finished in {outcome.seconds:.0f} s: {len(states)} trials "
        f"({states.count('completed')} completed, {states.count('stopped')} stopped early by "
        f"{outcome.scheduler}, {states.count('failed')} failed), "
        f"{sum(r.iterations for r in outcome.records)} epochs trained"
        + (f"; {outcome.repeats} proposal(s) repeated a trained configuration and were answered "
           "from its result" if outcome.repeats else "")
        + (f"; budget used {outcome.budget['cpu_hours']:.2f} CPU-hours, "
           f"{outcome.budget['gpu_hours']:.2f} GPU-hours." if outcome.budget else "."),
        "",
        format_table(header, rows),
    ]
    if outcome.pareto is not None:
        parts += ["", f"Pareto front (val {metric} against {outcome.pareto_cost}): "
                  + ", ".join(f"{r.trial_id} ({r.score:.4f}, {r.cost:g})" for r in outcome.pareto)
                  + "; the retrain takes the best by the metric."]
    if outcome.best is None:
        parts += ["", "No trial produced a validation score: nothing to retrain or export."]
    else:
        searched = {k: v for k, v in config_from_sample(outcome.best.config).items()
                    if k in outcome.searched}
        parts += ["", f"Best trial {outcome.best.trial_id}: val {metric} "
                      f"{outcome.best.score:.4f} with " + _kv(searched)]
    if outcome.final is not None:
        parts += [
            f"Retrained on all training classes for {outcome.final.config['epochs']} epochs "
            f"({outcome.final.seconds:.0f} s); test classes, evaluated once:",
            "  " + format_metrics(outcome.final.test_metrics),
            *_seeds_lines(outcome.retrains, metric),
            *_ensemble_lines(outcome.ensemble),
            *([f"Registered in the MLflow Model Registry as {outcome.final.registered} "
               "(input: uint8 images [N, C, H, W])"] if outcome.final.registered else []),
            f"Exported configuration: {outcome.export_path}",
            f"  train it again with:  dmlsearch train {outcome.export_path}",
        ]
    parts += [
        f"Results: {outcome.out}",
        f"Browse in MLflow:  {browse_command(outcome.tracking_uri)}",
        "  then open http://127.0.0.1:5000",
    ]
    return "\n".join(parts)


def _kv(values: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                     for k, v in values.items())


def _jsonable(opts: SearchOptions) -> dict[str, Any]:
    body = dataclasses.asdict(opts)
    body["out"] = str(opts.out) if opts.out else None
    if Path(opts.space).is_file():  # a space file: found again from anywhere by resume
        body["space"] = str(Path(opts.space).resolve())
    body["sets"] = {k: v for k, v in opts.sets}
    return body


def _seeds_lines(retrains: list[SeedsOutcome], metric: str) -> list[str]:
    """The --seeds / --retrain-top table: test mean ± 95% interval per retrained trial."""
    if not retrains or (len(retrains) == 1 and len(retrains[0].seeds) == 1):
        return []
    keys = sorted((k for k in retrains[0].mean if k not in ("num_queries", "precision@1")),
                  key=lambda k: k != metric)[:6]  # the search's metric first
    rows = [[str(r.rank), r.trial_id, str(len(r.seeds)),
             *("–" if k not in r.mean  # e.g. a loss whose metrics the first one lacks
               else f"{r.mean[k]:.4f} ± {r.ci95[k]:.4f}" if len(r.seeds) > 1
               else f"{r.mean[k]:.4f}" for k in keys)] for r in retrains]
    return [f"Top {len(retrains)} by val {metric}, retrained with {len(retrains[0].seeds)} "
            "seed(s) each; test mean ± 95% confidence interval (Student t):",
            format_table(["rank", "trial", "seeds", *keys], rows)]


def _ensemble_lines(ensemble: EnsembleOutcome | None) -> list[str]:
    if ensemble is None:
        return []
    m = ensemble.metrics
    keys = [k[len("ensemble_"):] for k in m if k.startswith("ensemble_")]
    spread = ", ".join(f"{k} {m['folds_mean_' + k]:.4f} ± {m['folds_std_' + k]:.4f}"
                       for k in keys if "folds_mean_" + k in m)
    return [
        f"Fold models on the test classes ({len(ensemble.fold_test_metrics)} folds, "
        f"{ensemble.seconds:.0f} s), mean ± std: {spread}",
        "  their ensemble (L2-normalised embeddings concatenated): "
        + format_metrics({k: m["ensemble_" + k] for k in keys}),
    ]

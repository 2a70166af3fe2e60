"""``dmlsearch run``: validate everything, search, retrain the best, export, summarise.

Order matters for the user: every check that can fail on their input (space, settings, data,
tracking store) runs before any folder is written or any trial starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from search import ray_backend
from search.export import write_atomic
from search.export import write_export
from search.options import SearchOptions
from search.options import default_out
from search.provenance import code_revision
from search.provenance import package_version
from search.retrain import FinalOutcome
from search.retrain import train_and_log
from search.summary import format_metrics
from search.summary import format_table
from search.summary import trial_rows
from search.tracking import Tracker
from search.tracking import browse_command
from search.tracking import default_tracking_uri
from spaces import Space
from spaces import config_from_sample
from spaces import load_space
from trainables.config import TrialConfig
from trainables.errors import UserError

__all__ = ["SearchOutcome", "run_search", "prepare"]

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


@dataclasses.dataclass(frozen=True)
class Prepared:
    space: Space
    base: TrialConfig
    max_iterations: int


def prepare(opts: SearchOptions) -> Prepared:
    """Every user-input check, with no side effect but the built-in dataset's cache."""
    from trainables.trial import load_for
    from trainables.trial import preflight

    opts.check()
    space = load_space(opts.space).with_overrides(opts.overrides())
    space = space.with_overrides(_absolute_paths(space.default_config()))
    base = TrialConfig.from_flat(space.default_config())
    for param in space.params:  # every categorical choice must name something that exists
        for choice in param.choices or ():
            TrialConfig.from_flat(space.with_overrides({param.key: choice}).default_config())
    dataset = load_for(base)
    preflight(base, dataset)
    epochs = max([base.epochs] + [int(p.high) for p in space.params
                                  if p.key == "epochs" and p.high is not None])
    return Prepared(space=space, base=base,
                    max_iterations=epochs * (base.folds if base.protocol == "kfold" else 1))


_PATH_SETTINGS = ("data_root", "pretrained")
_NOT_PATHS = {"none", "imagenet"}


def _absolute_paths(flat: dict[str, Any]) -> dict[str, Any]:
    """Relative paths are meant from here; trials run in other folders (and on other nodes)."""
    return {key: str(Path(flat[key]).expanduser().resolve()) for key in _PATH_SETTINGS
            if isinstance(flat.get(key), str) and flat[key] not in _NOT_PATHS}


def _make_out(opts: SearchOptions) -> Path:
    out = (opts.out or default_out(opts.space)).resolve()
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
    return out


def run_search(opts: SearchOptions, *, echo: Callable[[str], None] = print) -> SearchOutcome:
    started = time.time()
    prepared = prepare(opts)
    space, base = prepared.space, prepared.base
    out = _make_out(opts)
    created_here = True
    try:
        uri = opts.mlflow_uri or default_tracking_uri(out)
        tracker = Tracker(uri, out.name, artifact_location=out / "mlartifacts")
    except BaseException:
        if created_here:
            shutil.rmtree(out, ignore_errors=True)
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
                "metric": base.metric, "trials": opts.trials, "concurrency": opts.concurrency,
                "sampler": "tpe", "scheduler": "asha", "seed": opts.seed,
                "searched": ",".join(p.key for p in space.params)},
        tags={"dmlsearch.code_revision": revision, "dmlsearch.results": str(out),
              "dmlsearch.space_source": space.source[:5000]},
    )
    tracker.log_artifact(out / "search.yaml")
    echo(f"dmlsearch: {opts.trials} trials of space {space.name!r} on {base.dataset} "
         f"({base.protocol} protocol, metric {base.metric}); results in {out}")
    status = "FAILED"
    try:
        records = _search(opts, prepared, out, tracker)
        best = _best(records)
        final = export_path = None
        if best is not None and opts.retrain:
            final, export_path = _retrain_and_export(best, out, tracker, space, revision, base)
        outcome = SearchOutcome(out=out, records=records, best=best, final=final,
                                export_path=export_path, tracking_uri=uri,
                                seconds=time.time() - started,
                                searched=tuple(dict.fromkeys(p.key for p in space.params)))
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


def _search(opts: SearchOptions, prepared: Prepared, out: Path,
            tracker: Tracker) -> list[ray_backend.TrialRecord]:
    import torch

    gpus = opts.gpus_per_trial
    if gpus is None:
        gpus = 1.0 if torch.cuda.is_available() else 0.0
    max_t = prepared.max_iterations
    settings = ray_backend.TuneSettings(
        name="tune", storage_path=out / "ray", num_samples=opts.trials,
        concurrency=opts.concurrency, max_iterations=max_t,
        grace_period=opts.grace_period or max(1, max_t // 4),
        reduction_factor=opts.reduction_factor, cpus_per_trial=opts.cpus_per_trial,
        gpus_per_trial=gpus, seed=opts.seed,
        optuna_storage=f"sqlite:///{out / 'optuna.db'}", study_name=out.name,
    )
    ray_backend.init_ray(num_cpus=None, num_gpus=None)
    try:
        return ray_backend.run_tune(settings, define_by_run=prepared.space.define_by_run,
                                    warm_starts=prepared.space.warm_starts(), events=tracker)
    finally:
        ray_backend.shutdown_ray()


def _best(records: list[ray_backend.TrialRecord]) -> ray_backend.TrialRecord | None:
    scored = [r for r in records if r.state != "failed" and r.score is not None]
    return max(scored, key=lambda r: r.score or -math.inf) if scored else None


def _retrain_and_export(
    best: ray_backend.TrialRecord, out: Path, tracker: Tracker, space: Space, revision: str,
    base: TrialConfig,
) -> tuple[FinalOutcome, Path]:
    flat = config_from_sample(best.config)
    # No validation classes remain, so the training length is the one validation chose.
    epochs = int(best.last_result.get("best_epoch") or flat.get("epochs", base.epochs))
    flat["epochs"] = max(1, epochs)
    final = train_and_log(flat, tracker=tracker, run_name=f"retrain {best.trial_id}",
                          tags={"dmlsearch.trial_id": best.trial_id})
    export_path = out / "best_config.yaml"
    write_export(export_path, config=final.config, provenance={
        "study": out.name, "space": space.name, "space_source": space.source,
        "trial_id": best.trial_id,
        "validation": {"metric": base.metric, "value": best.score,
                       "best_epoch": best.last_result.get("best_epoch")},
        "epochs_note": "epochs = the best trial's best validation epoch",
        "test_metrics": final.test_metrics, "code_revision": revision,
        "dmlsearch": package_version(),
    })
    tracker.log_artifact(export_path)
    return final, export_path


def _study_metrics(outcome: SearchOutcome) -> dict[str, float]:
    states = [r.state for r in outcome.records]
    metrics: dict[str, float] = {f"trials_{s}": float(states.count(s))
                                 for s in ("completed", "stopped", "failed")}
    metrics["epochs_trained"] = float(sum(r.iterations for r in outcome.records))
    metrics["seconds"] = outcome.seconds
    if outcome.best is not None and outcome.best.score is not None:
        metrics["best_val_score"] = outcome.best.score
    if outcome.final is not None:
        metrics.update({f"test_{k}": v for k, v in outcome.final.test_metrics.items()})
    return metrics


def _write_summary(outcome: SearchOutcome, metric: str) -> None:
    body = {
        "metric": metric, "seconds": outcome.seconds, "tracking_uri": outcome.tracking_uri,
        "trials": [{"trial_id": r.trial_id, "state": r.state, "score": r.score,
                    "iterations": r.iterations, "seconds": r.seconds, "reason": r.reason,
                    "best_epoch": r.last_result.get("best_epoch"),
                    "config": config_from_sample(r.config)} for r in outcome.records],
        "best_trial": outcome.best.trial_id if outcome.best else None,
        "test_metrics": outcome.final.test_metrics if outcome.final else None,
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
        f"ASHA, {states.count('failed')} failed), "
        f"{sum(r.iterations for r in outcome.records)} epochs trained.",
        "",
        format_table(header, rows),
    ]
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
    body["sets"] = {k: v for k, v in opts.sets}
    return body

"""``dmlsearch train FILE``: train an exported configuration on all training classes in this
process (no Ray), test it once, log it to MLflow; with ``--seeds S``, S seeds and the test
metrics' mean ± 95% interval. The same retrain as the search's, so the numbers reproduce. The
first seed's views (the 2-D embedding map and the retrieval gallery) go to ``plots/`` of the
results folder and to its MLflow run."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmlsearch.search.finish.export import read_export
from dmlsearch.search.finish.retrain_runs import SeedsOutcome
from dmlsearch.search.finish.retrain_runs import retrain_seeds
from dmlsearch.search.options import TrainOptions
from dmlsearch.search.options import tracking_uri_from_environment
from dmlsearch.search.reporting import counted
from dmlsearch.search.reporting import format_metrics
from dmlsearch.search.reporting.sections import set_text
from dmlsearch.search.results import EvalSet
from dmlsearch.search.results import scores_only
from dmlsearch.search.study_dir import StudyDir
from dmlsearch.search.study_dir import write_atomic
from dmlsearch.search.tracking import Tracker
from dmlsearch.search.tracking import browse_command
from dmlsearch.search.tracking import experiment_for
from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.errors import UserError
from dmlsearch.trainables.setting_kinds import of_kind
from dmlsearch.trainables.setting_kinds import refuse_other_kind
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import preflight

__all__ = ["train_command"]


def train_command(config_file: Path, *, out: Path | None, mlflow_uri: str | None,
                  sets: Sequence[tuple[str, Any]], seeds: int,
                  plugins: Sequence[str] = (),
                  echo: Callable[[str], None] = print) -> SeedsOutcome:
    opts = TrainOptions(config=config_file, out=out, mlflow_uri=mlflow_uri, sets=tuple(sets),
                        seeds=seeds, plugins=tuple(plugins))
    opts.check()  # the command line's checks, for a Python caller too
    config, provenance = read_export(config_file)
    if opts.plugins:  # where the export's plug-ins are on this machine
        config["plugins"] = list(opts.plugins)
    try:  # a hand-edited export: name the file (an error from --set is reported below)
        TrialConfig.from_flat(config)
        # exports once held every setting: another input kind's at its default is left out
        refuse_other_kind(config, config, where=config_file.name, defaults_pass=True)
    except UserError as exc:
        fix = str(exc)
        for where in ("in the space file, config or --set", "in the space file or --set"):
            fix = fix.replace(where, f"in {config_file.name}")
        raise UserError(f"{config_file}: config: {fix}") from None
    config = of_kind(config)
    config.update(dict(opts.sets))
    refuse_other_kind(dict(opts.sets), config, where="--set")
    cfg = TrialConfig.from_flat(config)
    dataset = load_for(cfg)
    preflight(cfg, dataset)
    test_set = EvalSet.of_labels(dataset.images.labels, dataset.test_classes)
    study_dir, created = StudyDir.create(out, prefix="train")
    try:
        uri = mlflow_uri or tracking_uri_from_environment() or study_dir.default_tracking_uri
        experiment, named = experiment_for("dmlsearch-train")  # MLFLOW_EXPERIMENT_NAME first
        tracker = Tracker(uri, experiment,
                          artifact_location=None if named else study_dir.artifacts)
    except BaseException:
        study_dir.discard(created=created)  # nothing half-written is left behind
        raise
    outcome = retrain_seeds(cfg.to_flat(), seeds=seeds, trial_id=config_file.name, rank=1,
                            tracker=tracker, run_name="train", views=study_dir.plots,
                            tags={"dmlsearch.exported_from": str(provenance.get("study", ""))})
    first = outcome.runs[0]
    write_atomic(study_dir.test_metrics_json, json.dumps(first.test_metrics, indent=2))
    if seeds > 1:
        write_atomic(study_dir.seeds_json,
                     json.dumps(dataclasses.asdict(outcome.to_summary()), indent=2))
    echo(f"Trained {cfg.loss} on {cfg.dataset} for {counted(cfg.epochs, 'epoch')} "
         f"({first.seconds:.0f} s);"
         f" test set ({set_text(test_set, first.test_metrics)}), evaluated once:")
    echo("  " + format_metrics(first.test_metrics))
    if seeds > 1:
        echo(f"Over seeds {outcome.seeds}, test mean ± 95% confidence interval (Student t):")
        echo("  " + "  ".join(f"{k} {outcome.mean[k]:.4f} ± {outcome.ci95[k]:.4f}"
                              for k in scores_only(outcome.mean)))
    else:
        echo("  (one seed: no confidence interval; --seeds 5 gives the mean ± a 95% interval)")
    if study_dir.retrievals_png.is_file():
        echo(f"What it retrieves (test queries and their nearest neighbours): "
             f"{study_dir.retrievals_png}")
    if study_dir.trials_png.is_file():
        echo(f"How it scores the test trials (score distributions, DET curves): "
             f"{study_dir.trials_png}")
    echo(f"Results: {study_dir.path}\nBrowse in MLflow:  {browse_command(uri)}")
    return outcome

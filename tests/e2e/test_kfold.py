"""A real k-fold search end to end: folds as ASHA's fidelity, per-fold bests and their spread
reported to MLflow, and the MLRC-protocol test evaluation of the best configuration's fold
models (each alone, mean ± std, and their ensemble) next to the usual retrain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from dmlsearch.search.finish.export import read_export
from tests.helpers import run_cli

TRIALS = 2
FOLDS = 2


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("e2e-kfold")
    out = root / "results"
    proc = run_cli("run", "--trials", str(TRIALS), "--concurrency", "2", "--out", str(out),
                   "--protocol", "kfold", "--set", f"folds={FOLDS}", "--set", "epochs=2",
                   "--set", "embedding_size=16", "--grace-period", "4", "--seed", "1",
                   cache=shared_cache, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


@pytest.mark.slow
def test_kfold_trials_report_each_fold_and_the_ensemble_is_tested(
    search: tuple[Path, str],
) -> None:
    out, stdout = search
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["trials"]) == TRIALS
    for trial in summary["trials"]:
        assert trial["state"] == "completed" and trial["iterations"] == 2 * FOLDS
    ensemble = summary["fold_ensemble"]
    assert len(ensemble["fold_test_metrics"]) == FOLDS
    metrics = ensemble["metrics"]
    for key in ("recall@1", "map@r"):
        assert 0.0 < metrics[f"ensemble_{key}"] <= 1.0
        folds = [m[key] for m in ensemble["fold_test_metrics"]]
        assert metrics[f"folds_mean_{key}"] == pytest.approx(sum(folds) / FOLDS)
    assert "Fold models on the test classes" in stdout and "ensemble" in stdout
    assert " ± " in stdout  # the trial table shows each score ± the folds' std
    _, provenance = read_export(out / "best_config.yaml")
    assert provenance["fold_ensemble_test_metrics"] == metrics

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    exp = client.get_experiment_by_name(out.name)
    runs = client.search_runs([exp.experiment_id], max_results=100)
    kinds: dict[str, list] = {}
    for run in runs:
        kinds.setdefault(run.data.tags["dmlsearch.kind"], []).append(run)
    (ens,) = kinds["fold-ensemble"]
    (parent,) = kinds["study"]
    assert ens.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert ens.data.metrics["test_ensemble_recall_at_1"] == pytest.approx(
        metrics["ensemble_recall@1"])
    assert "test_fold1_map_at_r" in ens.data.metrics
    assert parent.data.metrics["test_ensemble_map_at_r"] == pytest.approx(
        metrics["ensemble_map@r"])
    for run in kinds["trial"]:
        assert {"fold0_best", "fold1_best", "score_std"} <= set(run.data.metrics)


@pytest.mark.slow
def test_report_of_the_kfold_study(search: tuple[Path, str]) -> None:
    out, _ = search
    proc = run_cli("report", str(out), cache=out.parent / "report-cache", cwd=out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert " ± " in report  # each trial's score with the spread of its folds
    assert "ensemble" in report.lower() and "budget" in report.lower()

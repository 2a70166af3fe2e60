"""A real k-fold search end to end, as a preview: ``dmlsearch run --space memvir_search
--preview`` (CARS196, BN-Inception, 2,000 epochs, 4-fold, on the command line) searched on the
built-in glyphs data for 2 trials through Ray Tune (ASHA over folds x epochs as its fidelity, its
grace period the whole trial), Optuna and MLflow: the published recipes run first, at the
preview's size, as k-fold; per-fold bests and their spread reported to MLflow; and the
MLRC-protocol test evaluation of the best configuration's fold models (each alone, mean ± std,
and their ensemble) next to the usual retrain. One search serves every test here."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest

from dmlsearch.search.finish.export import read_export
from tests.helpers import run_cli
from tests.helpers import runs_by_kind

pytestmark = pytest.mark.slow

TRIALS, FOLDS, EPOCHS = 2, 2, 3  # the preview's k-fold size (spaces/_preview.py)


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("e2e-kfold-preview")
    out = root / "results"
    proc = run_cli("run", "--space", "memvir_search", "--preview", "--trials", str(TRIALS),
                   "--grace-period", str(FOLDS * EPOCHS), "--concurrency", "2",
                   "--out", str(out), cache=shared_cache, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout


def test_the_memvir_search_previews_in_a_real_search(search: tuple[Path, str]) -> None:
    out, stdout = search
    # What the preview changed is printed before the search starts.
    head = stdout[:stdout.index(f"dmlsearch: {TRIALS} trials")]
    assert "preview: memvir_search on the built-in glyphs data" in head
    for setting in ("dataset", "backbone", "epochs", "folds"):
        assert f"\n  {setting} " in head, head
    body = json.loads((out / "summary.json").read_text())
    assert len(body["trials"]) == TRIALS
    # The published CARS196 recipes (Norm-softmax, Proxy-NCA) ran first, their warm-up scaled.
    configs = sorted((t["config"] for t in body["trials"]), key=lambda c: c["loss"])
    assert [c["loss"] for c in configs] == ["norm_softmax", "proxy_nca"]
    assert [(c["memvir_n"], c["memvir_warmup_epochs"]) for c in configs] == [(45, 1), (20, 1)]
    for config in configs:
        assert (config["dataset"], config["backbone"], config["device"]) == (
            "glyphs", "smallcnn", "cpu")
        assert (config["protocol"], config["folds"], config["epochs"]) == (
            "kfold", FOLDS, EPOCHS)
    assert "Search finished" in stdout
    # The study's plots are drawn: ``loss.scale`` is declared once per loss (two branches).
    assert {"learning_curves.png", "optimisation_history.png", "parallel_coordinates.png"} <= {
        p.name for p in (out / "plots").glob("*.png")}
    # --preview is an option of the search: resume finds it again in search.yaml.
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == TRIALS
    assert "preview: true" in (out / "search.yaml").read_text()


def test_kfold_trials_report_each_fold_and_the_ensemble_is_tested(
        search: tuple[Path, str]) -> None:
    out, stdout = search
    summary = json.loads((out / "summary.json").read_text())
    # ASHA's grace period is the whole trial: both trained every fold for every epoch
    for trial in summary["trials"]:
        assert trial["state"] == "completed" and trial["iterations"] == FOLDS * EPOCHS
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

    _, kinds = runs_by_kind(out)
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


def test_report_of_the_kfold_study(search: tuple[Path, str]) -> None:
    out, _ = search
    proc = run_cli("report", str(out), cache=out.parent / "report-cache", cwd=out.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (out / "report.md").read_text()
    assert " ± " in report  # each trial's score with the spread of its folds
    assert "ensemble" in report.lower() and "budget" in report.lower()

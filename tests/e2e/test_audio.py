"""Speaker verification end to end on the built-in ``speakers`` corpus (espeak-ng voices), tiny
(2 trials of 1 epoch): a real search of the ``e2e_voxceleb`` space (its preview) through Ray
Tune, Optuna and MLflow, tested on the corpus's trial list (EER, minDCF, AUC by cosine, D and
fusion), its pictures, its registered model taking features of any length, its export trained
again by ``dmlsearch train``; and ``dmlsearch compare`` of e2e against AM-softmax + cosine."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest
import torch

from tests.helpers import read_png
from tests.helpers import run_cli
from tests.helpers import runs_by_kind

pytestmark = pytest.mark.slow

TRIALS, EPOCHS = 2, 1
TEST_TRIALS = 80 * 9 * 16  # 80 test speakers x 9 utterances x (8 target + 8 non-target)
SCORED = ("eer", "auc", "mindcf01", "mindcf05")


@pytest.fixture(scope="module")
def search(speakers_cache: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> tuple[Path, str, Path]:
    root = tmp_path_factory.mktemp("audio-search")
    out = root / "results"
    proc = run_cli("run", "--space", "e2e_voxceleb", "--preview", "--trials", str(TRIALS),
                   "--sampler", "random", "--scheduler", "none", "--concurrency", "2",
                   "--set", f"epochs={EPOCHS}", "--out", str(out), cache=speakers_cache, cwd=root)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out, proc.stdout, root


def test_a_speaker_verification_search_scores_the_trial_list(
        search: tuple[Path, str, Path]) -> None:
    out, stdout, _ = search
    assert "preview: e2e_voxceleb on the built-in speakers data" in stdout
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["trials"]) == TRIALS and summary["study"]["metric"] == "eer_e2e"
    for trial in summary["trials"]:
        assert trial["state"] in {"completed", "pruned"}
        config = trial["config"]
        assert (config["dataset"], config["backbone"], config["loss"]) == (
            "speakers", "tdnn_small", "e2e")
        assert config["max_frames"] in (150, 250, 400) and config["batch_size"] == 60
        assert 0.0 <= trial["score"] <= 1.0
    test = summary["test_metrics"]
    assert test["verify_trials"] == TEST_TRIALS  # the corpus's trials.txt, not all pairs
    for kind in SCORED:
        for scoring in ("cosine", "e2e", "fusion"):
            assert 0.0 <= test[f"{kind}_{scoring}"] <= (1.0 if kind in ("eer", "auc") else 10)
        assert test[kind] == test[f"{kind}_e2e"]  # the default scoring of a learned distance
    assert test["eer_cosine"] < 0.5  # the encoder learned something in 1 epoch
    study = optuna.load_study(study_name=out.name, storage=f"sqlite:///{out / 'optuna.db'}")
    assert len(study.trials) == TRIALS
    assert "(input: float32 audio features [N, n_features, frames])" in stdout


def test_mlflow_holds_the_audio_study_its_pictures_and_a_model_for_features(
        search: tuple[Path, str, Path]) -> None:
    import mlflow.pytorch

    out, _, _ = search
    client, kinds = runs_by_kind(out)
    assert len(kinds["trial"]) == TRIALS
    for run in kinds["trial"]:
        assert len(client.get_metric_history(run.info.run_id, "val_eer_e2e")) >= 1
    (retrain,) = kinds["retrain"]
    assert 0.0 <= retrain.data.metrics["test_eer_cosine"] <= 1.0
    assert "test_mindcf01_fusion" in retrain.data.metrics
    pictures = {a.path for a in client.list_artifacts(retrain.info.run_id, "retrievals")}
    assert pictures == {"retrievals/trials.png", "retrievals/hard_trials.png"}
    for name in ("trials.png", "hard_trials.png"):
        read_png(out / "plots" / name)
    mlflow.set_tracking_uri(f"sqlite:///{out / 'mlflow.db'}")
    model = mlflow.pytorch.load_model(f"models:/dmlsearch-{out.name}/1")
    for frames in (123, 401):  # features of any length
        emb = model(torch.randn(3, 30, frames))
        assert emb.shape[0] == 3
        np.testing.assert_allclose(emb.norm(dim=1).detach().numpy(), 1.0, rtol=1e-4)


def test_the_exported_audio_configuration_trains_again_to_the_same_numbers(
        search: tuple[Path, str, Path], speakers_cache: Path) -> None:
    out, _, root = search
    summary = json.loads((out / "summary.json").read_text())
    proc = run_cli("train", str(out / "best_config.yaml"), "--out", str(root / "train"),
                   cache=speakers_cache, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "How it scores the test trials" in proc.stdout
    again = json.loads((root / "train" / "test_metrics.json").read_text())
    for key in ("eer_cosine", "eer_e2e", "eer_fusion", "mindcf01_cosine", "verify_trials"):
        assert again[key] == pytest.approx(summary["test_metrics"][key], abs=1e-4), key
    read_png(root / "train" / "plots" / "trials.png")


def test_compare_e2e_with_am_softmax_and_cosine_on_speakers(speakers_cache: Path,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "compare"
    proc = run_cli("compare", "--dataset", "speakers", "--methods", "e2e", "cosface",
                   "--trials", "1", "--seeds", "2", "--set", "epochs=1", "--set", "max_frames=150",
                   "--concurrency", "2",
                   "--out", str(out), cache=speakers_cache, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    assert set(comparison["methods"]) == {"e2e", "cosface"}
    configs = {}
    for method in ("e2e", "cosface"):
        summary = json.loads((out / method / "summary.json").read_text())
        configs[method] = summary["trials"][0]["config"]
        retrain = summary["retrains"][0]
        assert len(retrain["test_metrics"]) == 2  # two seeds
        for metrics in retrain["test_metrics"]:
            assert metrics["verify_trials"] == TEST_TRIALS and 0.0 <= metrics["eer"] <= 1.0
    for key in ("dataset", "backbone", "embedding_size", "batch_size", "max_frames",
                "metric", "epochs"):
        assert configs["e2e"][key] == configs["cosface"][key], key
    assert configs["e2e"]["metric"] == "eer"  # each method's own scoring: D, and cosine
    assert "eer" in (out / "comparison.md").read_text()

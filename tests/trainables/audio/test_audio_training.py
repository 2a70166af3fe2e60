"""The fit loop, k-fold, the retrain and the fold ensemble on audio (a tiny speaker tree with a
trial list, ``tdnn_small``): validation on pairs of the validation speakers, the test on the
trial list; the source's schedule steps per optimisation step; gradient-norm clipping."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from dmlsearch.trainables.config import TrialConfig
from dmlsearch.trainables.fit import Fitter
from dmlsearch.trainables.optim import build_optimizer
from dmlsearch.trainables.optim import build_scheduler
from dmlsearch.trainables.optim import step_scheduler
from dmlsearch.trainables.retrain import retrain
from dmlsearch.trainables.retrain import train_fold_ensemble
from dmlsearch.trainables.trial import load_for
from dmlsearch.trainables.trial import preflight
from dmlsearch.trainables.trial import run_trial
from tests.trainables.audio import _trees


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    files = _trees.speaker_tree(root, speakers=12, per_speaker=4)
    (root / "trials.txt").write_text(
        "\n".join(_trees.trial_lines(files, [f"spk{s:02d}" for s in range(8, 12)])) + "\n")
    return root


def _config(tree: Path, **settings: object) -> TrialConfig:
    return TrialConfig.from_flat({
        "dataset": "speaker_folder", "data_root": str(tree), "backbone": "tdnn_small",
        "embedding_size": 16, "loss": "e2e", "loss.d_input_norm": 4.0, "metric": "eer_e2e",
        "loss.d_layers": 1, "loss.d_size": 16,  # D's diagnostics score 200,000 pairs: keep D small
        "batch_sampler": "m_per_class", "m_per_class": 2, "batch_size": 8, "epochs": 2,
        "val_ratio": 0.25, "optimizer": "sgd", "lr": 0.01, "momentum": 0.9,
        "lr_schedule": "warmup_invsqrt_steps", "warmup_steps": 3, "max_frames": 40,
        "grad_clip_norm": 5.0, "device": "cpu", "threads": 1, **settings})


def test_a_trial_validates_on_pairs_of_its_validation_speakers(tree: Path) -> None:
    cfg = _config(tree)
    data = load_for(cfg)
    preflight(cfg, data)
    assert len(data.train_classes) == 8 and len(data.test_classes) == 4
    seen = []
    result = run_trial(cfg, dataset=data, on_progress=lambda p, _state: seen.append(p))
    assert [p.epoch for p in seen] == [1, 2]
    metrics = seen[-1].metrics
    assert metrics["verify_trials"] == 8 * 7 // 2  # all pairs of 2 speakers x 4 utterances
    for key in ("eer_cosine", "eer_e2e", "eer_fusion", "mindcf01_e2e", "auc_cosine"):
        assert 0.0 <= metrics[key] <= (1.0 if not key.startswith("mindcf") else 10.0)
    assert 0.0 <= result.score <= 1.0 and math.isfinite(seen[-1].train_loss)


def test_the_retrain_and_the_fold_ensemble_are_tested_on_the_trial_list(tree: Path) -> None:
    cfg = _config(tree, epochs=1)
    data = load_for(cfg)
    result = retrain(cfg, dataset=data)
    assert result.test_metrics["verify_trials"] == len(data.images.trials) == 32
    assert result.input_channels == 30 and result.input_size is None
    assert result.test_embeddings.shape == (16, 16)
    ensemble = train_fold_ensemble(cfg.replace(protocol="kfold", folds=2), dataset=data)
    assert ensemble.ensemble_metrics["verify_trials"] == 32
    assert {"eer_cosine", "mindcf05_cosine", "map@r"} <= set(ensemble.ensemble_metrics)
    assert len(ensemble.fold_test_metrics) == 2


def test_the_source_s_schedule_steps_after_every_optimisation_step(tree: Path) -> None:
    cfg = _config(tree, lr=0.02, warmup_steps=4)
    params = [torch.nn.Parameter(torch.zeros(1))]
    opt = build_optimizer([{"params": params, "lr": cfg.lr}], cfg)
    schedule = build_scheduler(opt, cfg)
    lrs = []
    for _ in range(9):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        schedule.step()
    want = [0.02 * min(t / 4, math.sqrt(4 / t)) for t in range(1, 10)]
    np.testing.assert_allclose(lrs, want, rtol=1e-9)
    step_scheduler(schedule, cfg, {"eer_e2e": 0.3})  # an epoch's end: no step
    assert opt.param_groups[0]["lr"] == pytest.approx(0.02 * math.sqrt(4 / 10))
    # In the fit loop: after 2 epochs of 2 steps the schedule has stepped 4 times.
    fitter = Fitter(cfg.replace(epochs=2), load_for(cfg).train(), None)
    fitter.run()
    assert fitter.scheduler.last_epoch == 2 * (len(fitter.train) // cfg.batch_size)


def test_gradients_are_clipped_to_their_norm(tree: Path) -> None:
    cfg = _config(tree, grad_clip_norm=1e-3, lr=1.0, momentum=0.0, weight_decay=0.0,
                  lr_schedule="none")
    fitter = Fitter(cfg, load_for(cfg).train(), None)
    before = [p.detach().clone() for g in fitter.optimizer.param_groups for p in g["params"]]
    x = torch.randn(8, 30, 40)
    fitter.train_step(x, torch.from_numpy(np.repeat(fitter.train.classes()[:4], 2)))
    after = [p.detach() for g in fitter.optimizer.param_groups for p in g["params"]]
    moved = torch.cat([(a - b).flatten() for a, b in zip(after, before)]).norm()
    assert 0 < float(moved) <= 1e-3 * 1.0001  # lr 1: the step is the clipped gradient
